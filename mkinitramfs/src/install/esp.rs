//! The ESP of a GRUB node: its files, written into a FAT32 image of its own by Debian's
//! `mkfs.vfat` and mtools, and read back.
//!
//! Contract: [`EspFiles`] lists the directories and files in the order they are written;
//! the grubenv ([`GRUBENV_PATH`], made by [`grubenv_bytes`]: the 1024-byte block
//! `grub-editenv create` and `set` write) comes first after formatting, so its clusters
//! are contiguous and GRUB's `save_env` and the gate can rewrite it in place. Then the
//! boot loader, `/EFI/BOOT/grub.cfg` (the shipped `examples/grub/grub.cfg` unless another
//! is given), `/EFI/BOOT/node.cfg` when a command line is given ([`node_cfg`]:
//! `set CMDLINE="..."`, quoted by [`grub_quote`]), and `/<slot>/vmlinuz`,
//! `/<slot>/initrd.img`, then `/<slot>/linux.efi` for each slot built as a Unified
//! Kernel Image. [`build`] formats, fills and reads every file back through
//! mtools; the install copies the image onto the disk. The test bed's GRUB ESPs take
//! their `node.cfg` from [`node_cfg`].
//!
//! Limits: GRUB layouts only; ESP paths must be absolute ASCII without mtools wildcards.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{input, InstallError, InstallSpec, Loader, SlotDir, MIB};

/// Where the shipped `grub.cfg` reads the A/B state.
pub const GRUBENV_PATH: &str = "/EFI/BOOT/grubenv";
/// Where the firmware's default boot path and GRUB's early configuration find GRUB's.
pub const GRUB_CFG_PATH: &str = "/EFI/BOOT/grub.cfg";
/// The command line of both slots, sourced by the shipped `grub.cfg`.
pub const NODE_CFG_PATH: &str = "/EFI/BOOT/node.cfg";
/// The shipped `grub.cfg`.
pub const SHIPPED_GRUB_CFG: &str = include_str!("../../../examples/grub/grub.cfg");

/// A file's bytes: from a file on the host, or made by the install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}

/// What goes on the ESP, in order.
#[derive(Debug, Clone, Default)]
pub struct EspFiles {
    pub dirs: Vec<String>,
    pub files: Vec<(Source, String)>,
}

/// The 1024-byte GRUB environment block holding `vars`, as `grub-editenv` writes it.
pub fn grubenv_bytes(vars: &[(String, String)]) -> Result<Vec<u8>, InstallError> {
    let bad = |e: validator::formats::grubenv::GrubEnvError| {
        input(Path::new(GRUBENV_PATH), e.to_string())
    };
    let mut env = validator::formats::grubenv::GrubEnv::new(1024).map_err(bad)?;
    for (k, v) in vars {
        env.set(k, v).map_err(bad)?;
    }
    Ok(env.as_bytes().to_vec())
}

/// Quotes `s` for a GRUB script double-quoted string (`"`, `\` and `$` escaped); a line
/// break cannot be quoted.
pub fn grub_quote(s: &str) -> Option<String> {
    if s.contains(['\n', '\r']) {
        return None;
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Some(out)
}

/// `node.cfg`: the command line of both slots.
pub fn node_cfg(cmdline: &str) -> Result<Vec<u8>, InstallError> {
    let q = grub_quote(cmdline.trim()).ok_or_else(|| {
        input(
            Path::new(NODE_CFG_PATH),
            format!("command line {cmdline:?}: a line break cannot go into node.cfg"),
        )
    })?;
    Ok(
        format!(
            "# The kernel command line of both slots (sourced by grub.cfg).\nset CMDLINE={q}\n"
        )
        .into_bytes(),
    )
}

impl EspFiles {
    /// The GRUB layout: grubenv, boot loader, `grub.cfg`, `node.cfg`, then each slot's
    /// kernel and initramfs (`slots`: its name and the two files).
    pub fn grub(
        loader: &Loader,
        grubenv: &[(String, String)],
        grub_cfg: Source,
        cmdline: Option<&str>,
        slots: &[(char, PathBuf, PathBuf)],
    ) -> Result<EspFiles, InstallError> {
        let mut e = EspFiles {
            dirs: vec!["/EFI".into(), "/EFI/BOOT".into()],
            files: vec![(Source::Bytes(grubenv_bytes(grubenv)?), GRUBENV_PATH.into())],
        };
        match loader {
            Loader::ShimGrub { shim, grub } => {
                e.add_file(shim, "/EFI/BOOT/BOOTX64.EFI")?;
                e.add_file(grub, "/EFI/BOOT/grubx64.efi")?;
            }
            Loader::Grub { efi } => e.add_file(efi, "/EFI/BOOT/BOOTX64.EFI")?,
        }
        e.files.push((grub_cfg, GRUB_CFG_PATH.into()));
        if let Some(c) = cmdline {
            e.files
                .push((Source::Bytes(node_cfg(c)?), NODE_CFG_PATH.into()));
        }
        for (slot, vmlinuz, initrd) in slots {
            e.dirs.push(format!("/{slot}"));
            e.add_file(vmlinuz, &format!("/{slot}/vmlinuz"))?;
            e.add_file(initrd, &format!("/{slot}/initrd.img"))?;
        }
        Ok(e)
    }

    /// The ESP of an install.
    pub fn for_install(spec: &InstallSpec, slots: &[SlotDir]) -> Result<EspFiles, InstallError> {
        let grubenv = match &spec.grubenv {
            Some(v) => v.clone(),
            None => super::initial_grubenv(slots),
        };
        let cfg = match &spec.grub_cfg {
            Some(p) => Source::File(p.clone()),
            None => Source::Bytes(SHIPPED_GRUB_CFG.as_bytes().to_vec()),
        };
        let kernels: Vec<_> = slots
            .iter()
            .map(|s| {
                (
                    s.slot,
                    s.path(&format!("esp/{}/vmlinuz", s.slot)),
                    s.path(&format!("esp/{}/initrd.img", s.slot)),
                )
            })
            .collect();
        let mut e = EspFiles::grub(
            &spec.loader,
            &grubenv,
            cfg,
            spec.cmdline.as_deref(),
            &kernels,
        )?;
        // A slot's Unified Kernel Image beside its kernel: the shipped grub.cfg
        // chainloads it when it is there.
        for s in slots.iter().filter(|s| s.has_uki()) {
            e.add_file(
                &s.path(&SlotDir::uki_file(s.slot)),
                &format!("/{}/{}", s.slot, crate::slot::UKI_NAME),
            )?;
        }
        Ok(e)
    }

    fn add_file(&mut self, src: &Path, dst: &str) -> Result<(), InstallError> {
        let m = std::fs::metadata(src).map_err(super::io(src))?;
        if !m.is_file() {
            return Err(input(src, "not a regular file"));
        }
        self.files
            .push((Source::File(src.to_path_buf()), dst.into()));
        Ok(())
    }

    /// The bytes all files take.
    pub fn bytes(&self) -> Result<u64, InstallError> {
        let mut n = 0;
        for (s, _) in &self.files {
            n += match s {
                Source::Bytes(b) => b.len() as u64,
                Source::File(p) => std::fs::metadata(p).map_err(super::io(p))?.len(),
            };
        }
        Ok(n)
    }
}

/// The time every ESP file and the file system itself are stamped with:
/// `SOURCE_DATE_EPOCH`, no earlier than FAT's epoch (1980; 0 gives 1980-01-02), so the
/// same inputs give the same bytes.
fn fat_epoch() -> String {
    crate::source_date_epoch().max(315_619_200).to_string()
}

fn mtools(tool: &str) -> Command {
    let mut c = Command::new(tool);
    c.env("MTOOLS_SKIP_CHECK", "1")
        .env("SOURCE_DATE_EPOCH", fat_epoch());
    c
}

fn run(c: &mut Command) -> Result<Vec<u8>, InstallError> {
    crate::run_tool(c, " (install dosfstools and mtools)")
        .map_err(|(tool, why)| InstallError::Tool { tool, why })
}

fn mpath(path: &str) -> Result<String, InstallError> {
    let ok = path.starts_with('/')
        && path
            .chars()
            .all(|c| c.is_ascii() && !c.is_control() && !matches!(c, '*' | '?' | '['));
    if !ok {
        return Err(input(
            Path::new(path),
            "not an absolute ESP path mtools can name",
        ));
    }
    Ok(format!("::{path}"))
}

/// The fewest clusters of a FAT32 file system (fewer is FAT16 to every reader).
pub const FAT32_CLUSTERS_MIN: u64 = 65525;

/// The cluster size of an ESP of `size` bytes: the largest up to 4 KiB that leaves FAT32
/// its clusters (with 5% for the FATs and reserved sectors). `mkfs.vfat` chooses one from
/// the size of the whole disk or image instead, which on a large disk leaves a small ESP
/// too few clusters to be FAT32.
pub fn cluster_size(size: u64, sector: u64) -> Option<u64> {
    let enough = |c: u64| {
        size.checked_div(c)
            .is_some_and(|n| n >= FAT32_CLUSTERS_MIN + FAT32_CLUSTERS_MIN / 20)
    };
    let mut c = sector;
    while c * 2 <= 4096 && enough(c * 2) {
        c *= 2;
    }
    enough(c).then_some(c)
}

/// A scratch file in the temporary directory, removed when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Result<Scratch, InstallError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mkinitramfs-install-{}-{n}.{tag}", std::process::id());
        let p = std::env::temp_dir().join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .map_err(super::io(&p))?;
        Ok(Scratch(p))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Makes the ESP as an image of its own (in the temporary directory, sparse): FAT32
/// (label `ESP`, volume id `volume_id`, 8 hex digits) of `size` bytes in `sector`-byte
/// sectors, `files` written into it and read back. The caller copies it to the disk, so
/// no tool but `sfdisk` opens the disk, and `mkfs.vfat` sizes its clusters by the ESP.
pub fn build(
    files: &EspFiles,
    size: u64,
    sector: u64,
    volume_id: &str,
) -> Result<Scratch, InstallError> {
    let image = Scratch::new("esp")?;
    let what = Path::new("the ESP");
    if files.bytes()? + 8 * MIB > size {
        return Err(input(
            what,
            format!("an ESP of {} MiB cannot hold its files", size / MIB),
        ));
    }
    let cluster = cluster_size(size, sector).ok_or_else(|| {
        input(
            what,
            format!(
                "an ESP of {} MiB on {sector}-byte sectors is too small for FAT32 ({FAT32_CLUSTERS_MIN} clusters)",
                size / MIB
            ),
        )
    })?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(image.path())
        .map_err(super::io(image.path()))?;
    f.set_len(size).map_err(super::io(image.path()))?;
    drop(f);
    let mut c = Command::new("mkfs.vfat");
    c.env("SOURCE_DATE_EPOCH", fat_epoch())
        .args([
            "--invariant",
            "-F",
            "32",
            "-n",
            "ESP",
            "-i",
            volume_id,
            "-S",
        ])
        .arg(sector.to_string())
        .arg("-s")
        .arg((cluster / sector).to_string())
        .arg(image.path());
    run(&mut c)?;
    let img = image.path();
    for d in &files.dirs {
        run(mtools("mmd").arg("-i").arg(img).arg(mpath(d)?))?;
    }
    let scratch = Scratch::new("bytes")?;
    for (src, dst) in &files.files {
        let from = match src {
            Source::File(p) => p.as_path(),
            Source::Bytes(b) => {
                std::fs::write(scratch.path(), b).map_err(super::io(scratch.path()))?;
                scratch.path()
            }
        };
        run(mtools("mcopy")
            .arg("-i")
            .arg(img)
            .arg(from)
            .arg(mpath(dst)?))?;
    }
    read_back(files, image.path())?;
    Ok(image)
}

/// Reads every file back from the ESP image `img` and compares it.
pub fn read_back(files: &EspFiles, img: &Path) -> Result<(), InstallError> {
    for (src, dst) in &files.files {
        let got = run(mtools("mcopy").arg("-i").arg(img).arg(mpath(dst)?).arg("-"))?;
        let want = match src {
            Source::Bytes(b) => b.clone(),
            Source::File(p) => std::fs::read(p).map_err(super::io(p))?,
        };
        if got != want {
            return Err(InstallError::ReadBack {
                path: img.to_path_buf(),
                why: format!("the ESP's {dst} is not what was written"),
            });
        }
    }
    Ok(())
}

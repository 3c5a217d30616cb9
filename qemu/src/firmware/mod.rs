//! UEFI boots of the test node: OVMF with a writable copy of its variable store, and the
//! EFI System Partition (ESP) that the boot loader reads and writes.
//!
//! Contract: [`build_esp`] makes a FAT32 image in a plain file with `mkfs.vfat` and mtools
//! (`mmd`, `mcopy`; no loop devices, no mounts, no root) holding one of
//! - GRUB ([`Loader::Grub`]): `/EFI/BOOT/BOOTX64.EFI` made by `grub-mkstandalone -O
//!   x86_64-efi` around an early config that finds the ESP by its `/EFI/BOOT/grub.cfg` and
//!   hands over to it; that `grub.cfg` is the shipped `examples/grub/grub.cfg`, unmodified,
//!   with the layout its header defines: `/EFI/BOOT/grubenv` (made by `grub-editenv`
//!   first thing after formatting, so its clusters are contiguous and GRUB's `save_env`
//!   can rewrite them in place), `/EFI/BOOT/node.cfg` (`set CMDLINE="..."`), and
//!   `/<slot>/vmlinuz`, `/<slot>/initrd.img`;
//! - Debian's signed chain ([`Loader::ShimGrub`]): shim as `/EFI/BOOT/BOOTX64.EFI`, the
//!   signed GRUB as `/EFI/BOOT/grubx64.efi` (or the changed copies [`EspSpec::shim`] and
//!   [`EspSpec::grub`] name), the same `grub.cfg` and layout as above; booted through
//!   [`Ovmf::secure_boot`] (Secure Boot on, Microsoft's keys);
//! - systemd-boot ([`Loader::SystemdBoot`]): `/EFI/BOOT/BOOTX64.EFI` is Debian's
//!   `systemd-bootx64.efi`, `/loader/loader.conf` (`timeout 0`), and one Boot Loader
//!   Specification type #1 entry per slot, `/loader/entries/slot-<a|b>+<tries>.conf`
//!   (boot counting: systemd-boot renames `+LEFT[-DONE]` to `+(LEFT-1)-(DONE+1)` before it
//!   boots the entry and sets the `LoaderBootCountPath` EFI variable).
//!
//! [`Esp`] reads and writes files of an ESP inside a disk image on the host (mtools with
//! `-i image@@offset`, the offset from the GPT), lists `grubenv` with `grub-editenv FILE
//! list`, and rewrites a file's own clusters in place as GRUB's `save_env` does.
//!
//! Limits: GRUB's and systemd-boot's output reach the serial console through the
//! firmware's console (OVMF sends it to the serial port when there is no display); the
//! GRUB image carries only [`GRUB_MODULES`] (the commands the shipped `grub.cfg` uses);
//! the ESP holds x86-64 loaders only.
//!
//! Slot order under systemd-boot: the entries carry `sort-key` values that put slot A
//! first, and `loader.conf` has no `default` line. systemd-boot (252, Debian 12) sorts
//! entries with no tries left after all others, but its `default` pattern matches an entry
//! whatever its tries left, so a `default slot-a*` would keep booting a slot A demoted to
//! `+0`; the sort order is what lets a demoted slot fall back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::disk;
use crate::HarnessError;

/// An A/B slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];

    /// `A` or `B`, as in grubenv's variable names and the ESP's directories.
    pub fn as_str(self) -> &'static str {
        match self {
            Slot::A => "A",
            Slot::B => "B",
        }
    }

    /// `a` or `b`, as in the systemd-boot entry names.
    pub fn lower(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    pub fn parse(s: &str) -> Option<Slot> {
        match s {
            "A" | "a" => Some(Slot::A),
            "B" | "b" => Some(Slot::B),
            _ => None,
        }
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// GPT type of an EFI System Partition.
pub const ESP_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
/// The PARTLABEL of the ESP on the test bed's disks.
pub const ESP_LABEL: &str = "esp";
/// OVMF's store with the snakeoil keys enrolled (PK, KEK, db), from Debian's `ovmf`.
pub const SNAKEOIL_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd";

/// OVMF's snakeoil store ([`SNAKEOIL_VARS`]) in memory, with Secure Boot off
/// (`SecureBootEnable` 0), for a caller to change further.
pub fn snakeoil_store() -> Result<crate::efivars::VarStore, HarnessError> {
    let mut s = crate::efivars::VarStore::open(Path::new(SNAKEOIL_VARS))?;
    s.set_byte(
        "SecureBootEnable",
        crate::efivars::SECURE_BOOT_ENABLE_GUID,
        0,
    )?;
    Ok(s)
}

/// OVMF's code (read-only pflash) and the variable store template, from Debian's `ovmf`.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// OVMF built for Secure Boot with its variables guarded by SMM (QEMU needs `smm=on` and
/// a secure pflash), and the store with Microsoft's keys enrolled and Secure Boot on: what
/// a production x86 server ships with.
pub const OVMF_CODE_SECBOOT: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub const OVMF_VARS_MS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";
/// Debian's signed boot chain, unpacked by `scripts/provision` under `target/secureboot/`
/// (relative to the workspace): shim signed by Microsoft's third-party UEFI CA, GRUB
/// signed by Debian's Secure Boot CA (whose certificate shim carries).
pub const SHIM_SIGNED: &str = "target/secureboot/usr/lib/shim/shimx64.efi.signed";
pub const GRUB_SIGNED: &str = "target/secureboot/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed";
/// Debian's systemd-boot (package `systemd-boot-efi`).
pub const SYSTEMD_BOOT_EFI: &str = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi";
/// The GRUB modules built into BOOTX64.EFI (and installed in its memdisk).
pub const GRUB_MODULES: &[&str] = &[
    "part_gpt",
    "fat",
    "search",
    "search_fs_file",
    "configfile",
    "normal",
    "linux",
    "loadenv",
    "test",
    "echo",
    "halt",
    "reboot",
    "sleep",
];
/// The ESP paths the shipped `grub.cfg` uses.
pub const GRUBENV_PATH: &str = "/EFI/BOOT/grubenv";
pub const GRUB_CFG_PATH: &str = "/EFI/BOOT/grub.cfg";
pub const NODE_CFG_PATH: &str = "/EFI/BOOT/node.cfg";
/// Where systemd-boot reads its entries.
pub const ENTRIES_DIR: &str = "/loader/entries";
/// The command line both loaders start with (the serial console, and a panic ends the
/// VM); the shipped `grub.cfg` has the same default.
pub const BASE_CMDLINE: &str = "console=ttyS0,115200 panic=-1";

/// OVMF for one VM: its code and a writable variable store of the VM's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ovmf {
    pub code: PathBuf,
    pub vars: PathBuf,
    /// The code requires SMM ([`OVMF_CODE_SECBOOT`]): the machine gets `smm=on` and the
    /// variable flash is secure.
    pub smm: bool,
}

impl Ovmf {
    /// A fresh variable store (a copy of [`OVMF_VARS`]) at `<dir>/ovmf-vars.fd`, replacing
    /// any there.
    pub fn fresh(dir: &Path) -> Result<Ovmf, HarnessError> {
        let vars = dir.join("ovmf-vars.fd");
        std::fs::copy(OVMF_VARS, &vars).map_err(|e| {
            HarnessError::Setup(format!(
                "{OVMF_VARS}: {e} (install ovmf: scripts/provision)"
            ))
        })?;
        if !Path::new(OVMF_CODE).is_file() {
            return Err(HarnessError::Setup(format!(
                "{OVMF_CODE} not found (install ovmf: scripts/provision)"
            )));
        }
        Ok(Ovmf {
            code: OVMF_CODE.into(),
            vars,
            smm: false,
        })
    }

    /// The production firmware: [`OVMF_CODE_SECBOOT`] with a fresh copy of
    /// [`OVMF_VARS_MS`] (Microsoft's KEK and db, Secure Boot on) at `<dir>/ovmf-vars.fd`.
    pub fn secure_boot(dir: &Path) -> Result<Ovmf, HarnessError> {
        for f in [OVMF_CODE_SECBOOT, OVMF_VARS_MS] {
            if !Path::new(f).is_file() {
                return Err(HarnessError::Setup(format!(
                    "{f} not found (install ovmf: scripts/provision)"
                )));
            }
        }
        let vars = dir.join("ovmf-vars.fd");
        std::fs::copy(OVMF_VARS_MS, &vars).map_err(|e| HarnessError::io(&vars, e))?;
        Ok(Ovmf {
            code: OVMF_CODE_SECBOOT.into(),
            vars,
            smm: true,
        })
    }

    /// [`Ovmf::secure_boot`] with `extra` certificates (DER) added to `db`, each as one
    /// more X.509 signature list after Microsoft's.
    pub fn secure_boot_with_db(dir: &Path, extra: &[Vec<u8>]) -> Result<Ovmf, HarnessError> {
        let ovmf = Ovmf::secure_boot(dir)?;
        if extra.is_empty() {
            return Ok(ovmf);
        }
        let mut store = crate::efivars::VarStore::open(&ovmf.vars)?;
        let db = store
            .get("db", crate::efivars::IMAGE_SECURITY_DATABASE)
            .ok_or_else(|| HarnessError::Setup(format!("{OVMF_VARS_MS}: no db")))?;
        let mut value = store.bytes.get(db.data).unwrap_or_default().to_vec();
        value.extend(crate::efivars::db(extra));
        store.replace("db", crate::efivars::IMAGE_SECURITY_DATABASE, &value)?;
        store.write(&ovmf.vars)?;
        Ok(ovmf)
    }

    /// OVMF's snakeoil store ([`SNAKEOIL_VARS`]: PK, KEK and db hold the snakeoil
    /// certificate) with Secure Boot off (`SecureBootEnable` 0), at `<dir>/ovmf-vars.fd`:
    /// a kernel started through it loads db into its `.platform` keyring and so trusts
    /// modules signed with the snakeoil key, while `-kernel` still boots an image db does
    /// not sign.
    pub fn snakeoil(dir: &Path) -> Result<Ovmf, HarnessError> {
        Ovmf::with_store(dir, &snakeoil_store()?)
    }

    /// OVMF's code with `store` written to `<dir>/ovmf-vars.fd` as its variable store.
    pub fn with_store(dir: &Path, store: &crate::efivars::VarStore) -> Result<Ovmf, HarnessError> {
        let vars = dir.join("ovmf-vars.fd");
        store.write(&vars)?;
        Ok(Ovmf {
            code: OVMF_CODE.into(),
            vars,
            smm: false,
        })
    }

    /// QEMU's arguments: the code read-only, the variable store writable (and, for SMM
    /// firmware, the flash writable only from SMM; the machine's `smm=on` is
    /// [`crate::vm::VmConfig::command`]'s).
    pub fn qemu_args(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        if self.smm {
            v.extend([
                "-global".into(),
                "driver=cfi.pflash01,property=secure,value=on".into(),
            ]);
        }
        v.extend([
            "-drive".into(),
            format!(
                "if=pflash,format=raw,unit=0,readonly=on,file={}",
                self.code.display()
            ),
            "-drive".into(),
            format!("if=pflash,format=raw,unit=1,file={}", self.vars.display()),
        ]);
        v
    }
}

/// The boot loader on the ESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loader {
    Grub,
    SystemdBoot,
    /// Debian's signed chain, unmodified unless [`EspSpec::shim`] or [`EspSpec::grub`]
    /// say otherwise: `/EFI/BOOT/BOOTX64.EFI` is shim
    /// ([`SHIM_SIGNED`]), which starts `/EFI/BOOT/grubx64.efi` ([`GRUB_SIGNED`]), whose
    /// built-in config finds no `/EFI/debian` (its prefix) and sources
    /// `$cmdpath/grub.cfg`, the shipped `grub.cfg` at the same [`GRUB_CFG_PATH`]; the
    /// rest of the layout is [`Loader::Grub`]'s.
    ShimGrub,
}

impl Loader {
    /// GRUB reads the shipped `grub.cfg` and `grubenv` (signed or not).
    pub fn is_grub(self) -> bool {
        matches!(self, Loader::Grub | Loader::ShimGrub)
    }
}

/// One slot's files on the ESP.
#[derive(Debug, Clone)]
pub struct EspSlot {
    pub slot: Slot,
    pub vmlinuz: PathBuf,
    pub initrd: PathBuf,
    /// Options of this slot alone (systemd-boot's entry `options`; GRUB's `grub.cfg` gives
    /// every slot the same command line, so they must be empty there).
    pub options: String,
}

/// What goes on the ESP.
#[derive(Debug, Clone)]
pub struct EspSpec {
    pub loader: Loader,
    pub slots: Vec<EspSlot>,
    /// The command line of every slot after [`BASE_CMDLINE`] (GRUB: `node.cfg`'s
    /// `CMDLINE`; systemd-boot: each entry's `options`, after `validator.slot=`).
    pub cmdline: String,
    /// GRUB: the variables `grub-editenv` sets in `grubenv` (default: RAUC's initial
    /// state, both slots good, none tried).
    pub grubenv: Vec<(String, String)>,
    /// GRUB: the `grub.cfg` installed as `/EFI/BOOT/grub.cfg`.
    pub grub_cfg: PathBuf,
    /// systemd-boot: the entries' initial tries left (`+N`), `None`: no boot counting.
    pub tries: Option<u32>,
    /// The image size; `None`: what the files need plus 32 MiB, at least 64 MiB (FAT32
    /// needs 65525 clusters).
    pub size_mib: Option<u64>,
    /// [`Loader::ShimGrub`]: the shim put on the ESP instead of [`SHIM_SIGNED`].
    pub shim: Option<PathBuf>,
    /// [`Loader::ShimGrub`]: the GRUB put on the ESP instead of [`GRUB_SIGNED`].
    pub grub: Option<PathBuf>,
}

/// RAUC's initial state: both slots good, none being tried, A first.
pub fn default_grubenv() -> Vec<(String, String)> {
    [
        ("ORDER", "A B"),
        ("A_OK", "1"),
        ("A_TRY", "0"),
        ("B_OK", "1"),
        ("B_TRY", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl EspSpec {
    pub fn new(loader: Loader, slots: Vec<EspSlot>) -> EspSpec {
        EspSpec {
            loader,
            slots,
            cmdline: String::new(),
            grubenv: default_grubenv(),
            grub_cfg: crate::paths::workspace().join("examples/grub/grub.cfg"),
            tries: Some(3),
            size_mib: None,
            shim: None,
            grub: None,
        }
    }
}

/// The systemd-boot entry file name of `slot` with `tries` left (`slot-a+3.conf`).
pub fn entry_name(slot: Slot, tries: Option<u32>) -> String {
    match tries {
        Some(n) => format!("slot-{}+{n}.conf", slot.lower()),
        None => format!("slot-{}.conf", slot.lower()),
    }
}

/// Fills the FAT image `image` (a partition image, mtools-readable) to its last cluster
/// with one file, so that no directory or file can be created on it.
pub fn fill_fat(image: &Path) -> Result<u64, HarnessError> {
    let free = fat_free_bytes(image)?;
    let filler = image.with_extension("filler");
    let f = std::fs::File::create(&filler).map_err(|e| HarnessError::io(&filler, e))?;
    f.set_len(free).map_err(|e| HarnessError::io(&filler, e))?;
    drop(f);
    disk::run(
        mtools("mcopy")
            .arg("-i")
            .arg(image)
            .arg(&filler)
            .arg("::/FILLER.BIN"),
    )?;
    let _ = std::fs::remove_file(&filler);
    let left = fat_free_bytes(image)?;
    if left != 0 {
        return Err(HarnessError::Setup(format!(
            "{}: {left} bytes still free after filling",
            image.display()
        )));
    }
    Ok(free)
}

/// The free bytes of a FAT image, as `mdir` counts them.
fn fat_free_bytes(image: &Path) -> Result<u64, HarnessError> {
    let out = disk::run(mtools("mdir").arg("-i").arg(image).arg("::/"))?;
    out.lines()
        .find_map(|l| {
            let l = l.trim();
            let n = l.strip_suffix("bytes free")?;
            n.trim().replace([' ', ','], "").parse().ok()
        })
        .ok_or_else(|| {
            HarnessError::Setup(format!("mdir {}: no free count: {out}", image.display()))
        })
}

fn mtools(tool: &str) -> Command {
    let mut c = Command::new(tool);
    c.env("MTOOLS_SKIP_CHECK", "1");
    c
}

/// Quotes `s` for a GRUB script double-quoted string.
fn grub_quote(s: &str) -> Result<String, HarnessError> {
    if s.contains(['\n', '\r']) {
        return Err(HarnessError::Setup(format!(
            "GRUB command line {s:?}: a line break cannot go into node.cfg"
        )));
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
    Ok(out)
}

/// The early config built into GRUB's image: find the ESP by its `grub.cfg` and load it.
pub const GRUB_EARLY_CFG: &str = "search --no-floppy --file --set=root /EFI/BOOT/grub.cfg\n\
configfile /EFI/BOOT/grub.cfg\n";

/// Makes GRUB's `BOOTX64.EFI` at `out` with `grub-mkstandalone`.
pub fn make_grub_efi(out: &Path, scratch: &Path) -> Result<(), HarnessError> {
    let early = scratch.join("grub-early.cfg");
    std::fs::write(&early, GRUB_EARLY_CFG).map_err(|e| HarnessError::io(&early, e))?;
    let modules = GRUB_MODULES.join(" ");
    let mut mapping = OsString::from("boot/grub/grub.cfg=");
    mapping.push(&early);
    disk::run(
        Command::new("grub-mkstandalone")
            .args(["-O", "x86_64-efi", "--locales=", "--fonts=", "--themes="])
            .arg(format!("--install-modules={modules}"))
            .arg(format!("--modules={modules}"))
            .arg("-o")
            .arg(out)
            .arg(mapping),
    )?;
    Ok(())
}

/// Builds the ESP image at `image` (FAT32, volume label `ESP`).
pub fn build_esp(spec: &EspSpec, image: &Path, scratch: &Path) -> Result<(), HarnessError> {
    const MIB: u64 = 1 << 20;
    std::fs::create_dir_all(scratch).map_err(|e| HarnessError::io(scratch, e))?;
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let mut dirs: Vec<String> = vec!["/EFI".into(), "/EFI/BOOT".into()];
    let efi = scratch.join("BOOTX64.EFI");
    match spec.loader {
        Loader::Grub | Loader::ShimGrub => {
            let env = scratch.join("grubenv");
            let _ = std::fs::remove_file(&env);
            disk::run(Command::new("grub-editenv").arg(&env).arg("create"))?;
            if !spec.grubenv.is_empty() {
                let mut c = Command::new("grub-editenv");
                c.arg(&env).arg("set");
                for (k, v) in &spec.grubenv {
                    c.arg(format!("{k}={v}"));
                }
                disk::run(&mut c)?;
            }
            // First file after formatting: its clusters are contiguous.
            files.push((env, GRUBENV_PATH.into()));
            if spec.loader == Loader::ShimGrub {
                let ws = crate::paths::workspace();
                let shim = spec.shim.clone().unwrap_or_else(|| ws.join(SHIM_SIGNED));
                let grub = spec.grub.clone().unwrap_or_else(|| ws.join(GRUB_SIGNED));
                for (f, to) in [
                    (shim, "/EFI/BOOT/BOOTX64.EFI"),
                    (grub, "/EFI/BOOT/grubx64.efi"),
                ] {
                    if !f.is_file() {
                        return Err(HarnessError::Setup(format!(
                            "{}: not found (run scripts/provision)",
                            f.display()
                        )));
                    }
                    files.push((f, to.into()));
                }
            } else {
                make_grub_efi(&efi, scratch)?;
                files.push((efi, "/EFI/BOOT/BOOTX64.EFI".into()));
            }
            files.push((spec.grub_cfg.clone(), GRUB_CFG_PATH.into()));
            let node = scratch.join("node.cfg");
            let line = format!("{BASE_CMDLINE} {}", spec.cmdline);
            std::fs::write(
                &node,
                format!(
                    "# The kernel command line of both slots (sourced by grub.cfg).\nset CMDLINE={}\n",
                    grub_quote(line.trim_end())?
                ),
            )
            .map_err(|e| HarnessError::io(&node, e))?;
            files.push((node, NODE_CFG_PATH.into()));
            if let Some(s) = spec.slots.iter().find(|s| !s.options.trim().is_empty()) {
                return Err(HarnessError::Setup(format!(
                    "slot {}: options {:?} of one slot alone cannot be given under GRUB \
                     (grub.cfg gives every slot node.cfg's command line)",
                    s.slot, s.options
                )));
            }
        }
        Loader::SystemdBoot => {
            std::fs::copy(SYSTEMD_BOOT_EFI, &efi).map_err(|e| {
                HarnessError::Setup(format!(
                    "{SYSTEMD_BOOT_EFI}: {e} (install systemd-boot-efi: scripts/provision)"
                ))
            })?;
            files.push((efi, "/EFI/BOOT/BOOTX64.EFI".into()));
            dirs.push("/loader".into());
            dirs.push(ENTRIES_DIR.into());
            let conf = scratch.join("loader.conf");
            std::fs::write(&conf, "timeout 0\n").map_err(|e| HarnessError::io(&conf, e))?;
            files.push((conf, "/loader/loader.conf".into()));
            for s in &spec.slots {
                let e = scratch.join(format!("entry-{}.conf", s.slot.lower()));
                let options = format!(
                    "validator.slot={} {BASE_CMDLINE} {} {}",
                    s.slot, spec.cmdline, s.options
                );
                let options = options.split_whitespace().collect::<Vec<_>>().join(" ");
                std::fs::write(
                    &e,
                    format!(
                        "title slot {s}\nsort-key gate-{l}\nlinux /{s}/vmlinuz\ninitrd /{s}/initrd.img\noptions {options}\n",
                        s = s.slot,
                        l = s.slot.lower(),
                    ),
                )
                .map_err(|err| HarnessError::io(&e, err))?;
                files.push((
                    e,
                    format!("{ENTRIES_DIR}/{}", entry_name(s.slot, spec.tries)),
                ));
            }
        }
    }
    for s in &spec.slots {
        dirs.push(format!("/{}", s.slot));
        files.push((s.vmlinuz.clone(), format!("/{}/vmlinuz", s.slot)));
        files.push((s.initrd.clone(), format!("/{}/initrd.img", s.slot)));
    }
    let size = match spec.size_mib {
        Some(m) => m,
        None => {
            let mut bytes = 0;
            for (f, _) in &files {
                bytes += std::fs::metadata(f)
                    .map_err(|e| HarnessError::io(f, e))?
                    .len();
            }
            (bytes.div_ceil(MIB) + 32).max(64)
        }
    };
    let _ = std::fs::remove_file(image);
    let f = std::fs::File::create(image).map_err(|e| HarnessError::io(image, e))?;
    f.set_len(size * MIB)
        .map_err(|e| HarnessError::io(image, e))?;
    drop(f);
    disk::run(
        Command::new("mkfs.vfat")
            .args(["-F", "32", "-n", "ESP", "-i", "0e5b0a0b"])
            .arg(image),
    )?;
    let esp = Esp::image(image);
    for d in &dirs {
        disk::run(mtools("mmd").arg("-i").arg(esp.target()).arg(esp.mpath(d)?))?;
    }
    for (src, dst) in &files {
        esp.write_new(dst, src)?;
    }
    Ok(())
}

/// An ESP inside an image file (a whole disk or the partition alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Esp {
    pub image: PathBuf,
    /// Byte offset of the FAT file system in `image`.
    pub offset: u64,
}

/// FAT geometry from the boot sector (BIOS parameter block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    /// Byte offset of cluster 2 from the start of the file system.
    data_start: u64,
    cluster_bytes: u64,
}

fn geometry(bpb: &[u8]) -> Option<Geometry> {
    let u16at = |o: usize| {
        Some(u64::from(u16::from_le_bytes(
            bpb.get(o..o + 2)?.try_into().ok()?,
        )))
    };
    let bytes_per_sector = u16at(11)?;
    let sectors_per_cluster = u64::from(*bpb.get(13)?);
    let reserved = u16at(14)?;
    let fats = u64::from(*bpb.get(16)?);
    let root_entries = u16at(17)?;
    let fat16 = u16at(22)?;
    let fat32 = u64::from(u32::from_le_bytes(bpb.get(36..40)?.try_into().ok()?));
    let fat_sectors = if fat16 != 0 { fat16 } else { fat32 };
    if bytes_per_sector == 0 || sectors_per_cluster == 0 || fats == 0 || fat_sectors == 0 {
        return None;
    }
    let root_dir_sectors = (root_entries * 32).div_ceil(bytes_per_sector);
    Some(Geometry {
        data_start: (reserved + fats * fat_sectors + root_dir_sectors) * bytes_per_sector,
        cluster_bytes: sectors_per_cluster * bytes_per_sector,
    })
}

/// The cluster runs `mshowfat` prints for a file (`::/f <7-8><20-21>`).
fn cluster_runs(out: &str) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    for part in out.split('<').skip(1) {
        let Some(inner) = part.split('>').next() else {
            continue;
        };
        let mut ends = inner.split('-').map(|x| x.trim().parse::<u64>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) => runs.push((a, b)),
            (Some(Ok(a)), None) => runs.push((a, a)),
            _ => {}
        }
    }
    runs
}

impl Esp {
    /// The ESP partition (PARTLABEL [`ESP_LABEL`]) of a disk image.
    pub fn in_disk(disk_image: &Path) -> Result<Esp, HarnessError> {
        let (offset, _) = disk::partition_offset(disk_image, ESP_LABEL)?;
        Ok(Esp {
            image: disk_image.to_path_buf(),
            offset,
        })
    }

    /// An image that is the file system alone.
    pub fn image(path: &Path) -> Esp {
        Esp {
            image: path.to_path_buf(),
            offset: 0,
        }
    }

    /// mtools' `-i` argument: `image@@offset`.
    fn target(&self) -> OsString {
        let mut t = self.image.clone().into_os_string();
        if self.offset != 0 {
            t.push(format!("@@{}", self.offset));
        }
        t
    }

    /// `::/path` for an absolute ESP path.
    fn mpath(&self, path: &str) -> Result<String, HarnessError> {
        if !path.starts_with('/') {
            return Err(HarnessError::Setup(format!(
                "ESP path {path:?}: must be absolute"
            )));
        }
        // mtools expands wildcards itself; a path names one file.
        if let Some(c) = path
            .chars()
            .find(|c| c.is_control() || matches!(c, '*' | '?' | '['))
        {
            return Err(HarnessError::Setup(format!(
                "ESP path {path:?}: {c:?} is not allowed"
            )));
        }
        Ok(format!("::{path}"))
    }

    /// The names in directory `dir` (not `.` and `..`), sorted.
    pub fn list(&self, dir: &str) -> Result<Vec<String>, HarnessError> {
        let out = disk::run(
            mtools("mdir")
                .args(["-b", "-i"])
                .arg(self.target())
                .arg(self.mpath(dir)?),
        )?;
        let prefix = format!("{}/", self.mpath(dir)?.trim_end_matches('/'));
        let mut names: Vec<String> = out
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|n| n.trim_end_matches('/').to_string())
            .filter(|n| !n.is_empty() && n != "." && n != "..")
            .collect();
        names.sort();
        Ok(names)
    }

    /// The bytes of file `path`.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, HarnessError> {
        let mut c = mtools("mcopy");
        c.args(["-n", "-i"])
            .arg(self.target())
            .arg(self.mpath(path)?)
            .arg("-");
        let shown = format!("{c:?}");
        let out = c
            .output()
            .map_err(|e| HarnessError::Setup(format!("cannot run {shown}: {e}")))?;
        if !out.status.success() {
            return Err(HarnessError::Setup(format!(
                "{shown} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out.stdout)
    }

    /// Copies host file `src` to a new file `path` (an existing one is replaced).
    pub fn write_new(&self, path: &str, src: &Path) -> Result<(), HarnessError> {
        disk::run(
            mtools("mcopy")
                .args(["-o", "-D", "o", "-i"])
                .arg(self.target())
                .arg(src)
                .arg(self.mpath(path)?),
        )?;
        Ok(())
    }

    /// Renames `from` to `to` (same directory), as systemd-boot and `bootctl` do.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), HarnessError> {
        let name = to.rsplit('/').next().unwrap_or(to);
        disk::run(
            mtools("mren")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(from)?)
                .arg(name),
        )?;
        Ok(())
    }

    /// Deletes file `path`.
    pub fn remove(&self, path: &str) -> Result<(), HarnessError> {
        disk::run(
            mtools("mdel")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(path)?),
        )?;
        Ok(())
    }

    /// Rewrites the clusters file `path` already has with `bytes` (the same length), in
    /// place, as GRUB's `save_env` does: no new allocation, no directory change.
    pub fn overwrite_in_place(&self, path: &str, bytes: &[u8]) -> Result<(), HarnessError> {
        use std::os::unix::fs::FileExt;
        let old = self.read(path)?;
        if old.len() != bytes.len() {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: {} bytes, cannot rewrite it in place with {}",
                old.len(),
                bytes.len()
            )));
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.image)
            .map_err(|e| HarnessError::io(&self.image, e))?;
        let mut bpb = [0u8; 512];
        f.read_exact_at(&mut bpb, self.offset)
            .map_err(|e| HarnessError::io(&self.image, e))?;
        let g = geometry(&bpb).ok_or_else(|| {
            HarnessError::Setup(format!(
                "{}@{}: not a FAT boot sector",
                self.image.display(),
                self.offset
            ))
        })?;
        let shown = disk::run(
            mtools("mshowfat")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(path)?),
        )?;
        let mut left = bytes;
        for (first, last) in cluster_runs(&shown) {
            if left.is_empty() {
                break;
            }
            let at = self.offset + g.data_start + (first.saturating_sub(2)) * g.cluster_bytes;
            let n = usize::try_from((last + 1 - first) * g.cluster_bytes)
                .unwrap_or(usize::MAX)
                .min(left.len());
            f.write_all_at(&left[..n], at)
                .map_err(|e| HarnessError::io(&self.image, e))?;
            left = &left[n..];
        }
        if !left.is_empty() {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: mshowfat gave fewer clusters than the file needs: {shown}"
            )));
        }
        f.sync_all().map_err(|e| HarnessError::io(&self.image, e))?;
        if self.read(path)? != bytes {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: read back differs after the in-place write"
            )));
        }
        Ok(())
    }

    /// Copies ESP file `path` to `out` on the host.
    pub fn copy_out(&self, path: &str, out: &Path) -> Result<(), HarnessError> {
        let bytes = self.read(path)?;
        std::fs::write(out, bytes).map_err(|e| HarnessError::io(out, e))
    }

    /// `grub-editenv FILE list` of the ESP's `grubenv` (copied to `scratch` first), as
    /// (name, value) pairs in the file's order.
    pub fn grubenv(&self, scratch: &Path) -> Result<Vec<(String, String)>, HarnessError> {
        let tmp = scratch.join("grubenv.read");
        self.copy_out(GRUBENV_PATH, &tmp)?;
        let out = disk::run(Command::new("grub-editenv").arg(&tmp).arg("list"))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// One variable of [`Esp::grubenv`].
    pub fn grubenv_get(&self, scratch: &Path, name: &str) -> Result<Option<String>, HarnessError> {
        Ok(self
            .grubenv(scratch)?
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v))
    }

    /// Sets `vars` in the ESP's `grubenv` with `grub-editenv FILE set` on a copy, then
    /// writes the copy back over the file's own clusters.
    pub fn grubenv_set(&self, scratch: &Path, vars: &[(&str, &str)]) -> Result<(), HarnessError> {
        let tmp = scratch.join("grubenv.edit");
        self.copy_out(GRUBENV_PATH, &tmp)?;
        let mut c = Command::new("grub-editenv");
        c.arg(&tmp).arg("set");
        for (k, v) in vars {
            c.arg(format!("{k}={v}"));
        }
        disk::run(&mut c)?;
        let bytes = std::fs::read(&tmp).map_err(|e| HarnessError::io(&tmp, e))?;
        self.overwrite_in_place(GRUBENV_PATH, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_runs_of_mshowfat() {
        assert_eq!(cluster_runs("::/EFI/BOOT/grubenv <7-8>\n"), vec![(7, 8)]);
        assert_eq!(
            cluster_runs("::/x <7-8><20-21><30>"),
            vec![(7, 8), (20, 21), (30, 30)]
        );
        assert!(cluster_runs("::/x").is_empty());
    }

    #[test]
    fn fat_geometry() {
        let mut b = [0u8; 512];
        b[11..13].copy_from_slice(&512u16.to_le_bytes());
        b[13] = 1;
        b[14..16].copy_from_slice(&32u16.to_le_bytes());
        b[16] = 2;
        b[36..40].copy_from_slice(&1009u32.to_le_bytes());
        assert_eq!(
            geometry(&b),
            Some(Geometry {
                data_start: (32 + 2 * 1009) * 512,
                cluster_bytes: 512
            })
        );
        assert_eq!(geometry(&[0u8; 512]), None);
        assert_eq!(geometry(&[0u8; 10]), None);
    }

    #[test]
    fn grub_quoting() {
        assert_eq!(
            grub_quote("a \"b\" $c \\").unwrap(),
            "\"a \\\"b\\\" \\$c \\\\\""
        );
        assert!(grub_quote("a\nb").is_err());
    }

    /// A real FAT32 image: files written by mtools read back, grubenv made and set by
    /// grub-editenv, then rewritten in place at the clusters mtools allocated.
    #[test]
    fn esp_round_trip_with_grubenv() {
        let dir = crate::paths::run_dir("esp-unit").unwrap();
        let k = dir.join("k");
        std::fs::write(&k, b"kernel").unwrap();
        let mut spec = EspSpec::new(
            Loader::Grub,
            vec![EspSlot {
                slot: Slot::A,
                vmlinuz: k.clone(),
                initrd: k.clone(),
                options: String::new(),
            }],
        );
        spec.cmdline = "root=PARTLABEL=root-A \"q\"".into();
        let img = dir.join("esp.img");
        build_esp(&spec, &img, &dir.join("scratch")).unwrap();
        let esp = Esp::image(&img);
        assert_eq!(esp.read("/A/vmlinuz").unwrap(), b"kernel");
        assert_eq!(
            esp.list("/EFI/BOOT").unwrap(),
            ["BOOTX64.EFI", "grub.cfg", "grubenv", "node.cfg"]
        );
        let shipped = std::fs::read(&spec.grub_cfg).unwrap();
        assert_eq!(esp.read(GRUB_CFG_PATH).unwrap(), shipped);
        let node = String::from_utf8(esp.read(NODE_CFG_PATH).unwrap()).unwrap();
        assert!(
            node.contains(
                "set CMDLINE=\"console=ttyS0,115200 panic=-1 root=PARTLABEL=root-A \\\"q\\\"\""
            ),
            "{node}"
        );
        assert_eq!(esp.grubenv(&dir).unwrap(), default_grubenv());
        esp.grubenv_set(&dir, &[("A_OK", "0"), ("NEW", "x y")])
            .unwrap();
        let env = esp.grubenv(&dir).unwrap();
        assert!(env.contains(&("A_OK".into(), "0".into())), "{env:?}");
        assert!(env.contains(&("NEW".into(), "x y".into())), "{env:?}");
        assert_eq!(esp.read(GRUBENV_PATH).unwrap().len(), 1024);
        assert!(esp.read("/nope").is_err());
        assert!(esp.read("relative").is_err());
        assert!(esp.read("/EFI/BOOT/*").is_err());
        esp.rename("/EFI/BOOT/node.cfg", "old.cfg").unwrap();
        esp.remove("/EFI/BOOT/old.cfg").unwrap();
        assert_eq!(
            esp.list("/EFI/BOOT").unwrap(),
            ["BOOTX64.EFI", "grub.cfg", "grubenv"]
        );
        // One slot's own options cannot be expressed under GRUB.
        spec.slots[0].options = "x=1".into();
        let err = build_esp(&spec, &img, &dir.join("scratch")).unwrap_err();
        assert!(err.to_string().contains("slot A"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

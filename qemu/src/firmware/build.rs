//! What goes on the ESP, and the image that holds it.
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
//!   [`Ovmf::secure_boot`](super::Ovmf::secure_boot) (Secure Boot on, Microsoft's keys);
//! - systemd-boot ([`Loader::SystemdBoot`]): `/EFI/BOOT/BOOTX64.EFI` is Debian's
//!   `systemd-bootx64.efi`, `/loader/loader.conf` (`timeout 0`), and one Boot Loader
//!   Specification type #1 entry per slot, `/loader/entries/slot-<a|b>+<tries>.conf`
//!   (boot counting: systemd-boot renames `+LEFT[-DONE]` to `+(LEFT-1)-(DONE+1)` before it
//!   boots the entry and sets the `LoaderBootCountPath` EFI variable).
//!
//!
//! The paths of that layout are `esp.rs`'s ([`GRUBENV_PATH`], [`GRUB_CFG_PATH`],
//! [`NODE_CFG_PATH`], [`ENTRIES_DIR`]); the image is written through [`Esp`].
//!
//! Limits: the GRUB image carries only [`GRUB_MODULES`] (the commands the shipped
//! `grub.cfg` uses); the ESP holds x86-64 loaders only; one slot's own options cannot be
//! given under GRUB (the shipped `grub.cfg` gives every slot `node.cfg`'s command line).
//!
//! Slot order under systemd-boot: the entries carry `sort-key` values that put slot A
//! first, and `loader.conf` has no `default` line. systemd-boot (252, Debian 12) sorts
//! entries with no tries left after all others, but its `default` pattern matches an entry
//! whatever its tries left, so a `default slot-a*` would keep booting a slot A demoted to
//! `+0`; the sort order is what lets a demoted slot fall back.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::esp::{mtools, Esp, ENTRIES_DIR, GRUBENV_PATH, GRUB_CFG_PATH, NODE_CFG_PATH};
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
/// The command line both loaders start with (the serial console, and a panic ends the
/// VM); the shipped `grub.cfg` has the same default.
pub const BASE_CMDLINE: &str = "console=ttyS0,115200 panic=-1";

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
    /// The slot's Unified Kernel Image, put at `/<slot>/linux.efi` (the shipped grub.cfg
    /// then chainloads it).
    pub uki: Option<PathBuf>,
    /// Files put in `/<slot>/linux.efi.extra.d/` (name, content) beside the image.
    pub uki_extra: Vec<(String, Vec<u8>)>,
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
            let text = mkinitramfs::install::esp::node_cfg(&line)
                .map_err(|e| HarnessError::Setup(format!("GRUB command line: {e}")))?;
            std::fs::write(&node, text).map_err(|e| HarnessError::io(&node, e))?;
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
        if let Some(u) = &s.uki {
            files.push((u.clone(), format!("/{}/linux.efi", s.slot)));
        }
        if !s.uki_extra.is_empty() {
            let extra = format!("/{}/linux.efi.extra.d", s.slot);
            let local = scratch.join(format!("extra-{}", s.slot));
            std::fs::create_dir_all(&local).map_err(|e| HarnessError::io(&local, e))?;
            for (name, bytes) in &s.uki_extra {
                let f = local.join(name);
                std::fs::write(&f, bytes).map_err(|e| HarnessError::io(&f, e))?;
                files.push((f, format!("{extra}/{name}")));
            }
            dirs.push(extra);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
                uki: None,
                uki_extra: Vec::new(),
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
        // The grubenv's chain broken after its first cluster: GRUB's own FAT reader
        // (`grub-fstest`, GRUB's fs modules in user space) refuses the file, and
        // `fsck.fat` sees the free cluster in the chain.
        let fstest = |img: &Path| {
            std::process::Command::new("grub-fstest")
                .arg(img)
                .args(["cat", GRUBENV_PATH])
                .output()
                .unwrap()
        };
        assert!(fstest(&img).status.success());
        let first = esp.break_chain(GRUBENV_PATH).unwrap();
        assert!(first >= 2);
        let out = fstest(&img);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("invalid cluster"),
            "{said}"
        );
        let fsck = std::process::Command::new("fsck.fat")
            .arg("-n")
            .arg(&img)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&fsck.stdout);
        assert!(
            said.contains(&format!("Contains a free cluster ({first})")),
            "{said}"
        );
        assert!(
            esp.break_chain("/A/vmlinuz").is_err(),
            "one cluster: no chain"
        );
        // One slot's own options cannot be expressed under GRUB.
        spec.slots[0].options = "x=1".into();
        let err = build_esp(&spec, &img, &dir.join("scratch")).unwrap_err();
        assert!(err.to_string().contains("slot A"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

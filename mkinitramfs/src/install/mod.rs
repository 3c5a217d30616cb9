//! `mkinitramfs install`: a blank disk, or a disk image, laid out as a node's, from one or
//! two slot directories made by `mkinitramfs slot`.
//!
//! Contract: [`install`] reads each slot directory (its `SHA256SUMS` checked against every
//! file it uses before anything is written; its BOM must describe the layout this writes:
//! GRUB with the shipped `grub.cfg`'s paths, the root and signature partitions by
//! `PARTLABEL=root-{slot}` and `PARTLABEL=root-{slot}-sig`), plans the GPT of
//! `docs/INSTALL.md` ("The disk"): the ESP, then for slot A and slot B a root, a
//! root-verity and a root-verity-sig partition of the Discoverable Partitions types, each
//! aligned to 1 MiB, the root and hash partitions' PARTUUIDs the halves of the slot's root
//! hash (the other GUIDs derived from both root hashes, so the same inputs give the same
//! table), makes the ESP as an image of its own in the temporary directory (FAT32 by
//! `mkfs.vfat`, then with mtools the grubenv first, its clusters contiguous so GRUB's
//! `save_env` and the gate rewrite it in place, the boot loader: Debian's signed shim and
//! GRUB, or one GRUB image, the shipped `grub.cfg`, an optional `node.cfg` with the command
//! line, and each slot's kernel and initramfs; every file read back: [`esp`]), and then
//! writes the disk, in this order:
//! 1. each partition's content at its offset: the ESP's image, each slot's three images
//!    (the signature partition's rest zeroed, so no older signature is left behind it);
//! 2. the GPT, last, by `sfdisk`: a disk whose install stopped half-way holds no partition
//!    table (with `--force` the old one is wiped first), so the same command runs again.
//!
//! Then everything is read back from the disk: the GPT with the gate's own reader (every
//! partition's number, name, type, PARTUUID and extent as planned) and each image's bytes
//! at its offset against its digest, the ESP's included. A missing
//! DISK becomes a new image file, written beside it and renamed into place when all of
//! that held (so it is whole or absent); an existing regular file or block device is
//! written in place, and refused when it holds a partition table (GPT, primary or backup,
//! or an MBR with a partition) unless [`InstallSpec::force`], when a block device is in
//! use (the kernel's answer to an exclusive open: mounted, or held by device-mapper, RAID
//! or another install), or when it is too small. A directory, FIFO, character device or socket is
//! refused naming the path.
//!
//! Hand-written (the rest is Debian's `sfdisk`, `mkfs.vfat` and mtools, the tools an
//! installer system has): the plan and the read-back. No crate writes a FAT file system
//! GRUB and the firmware are known to read as `mkfs.vfat`'s, and a GPT writer would be a
//! second one beside `sfdisk`, whose table the test bed judges with `sfdisk --dump`.
//!
//! Current limits: GRUB layouts only (a systemd-boot slot is refused: its entries and
//! boot counting are the test bed's, `qemu/src/firmware/build.rs`); x86-64 partition
//! types; one ESP per disk; no UEFI boot entry is written (the line for `efibootmgr` is
//! returned); root and hash partitions are not zeroed past their images (dm-verity and the
//! file systems read only what their superblocks name).

pub mod esp;
mod plan;
mod target;

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub use plan::{Part, Plan};

/// One MiB: the alignment of every partition.
pub const MIB: u64 = 1 << 20;

/// Debian's signed shim, as `shim-signed` installs it.
pub const DEBIAN_SHIM: &str = "/usr/lib/shim/shimx64.efi.signed";
/// Debian's signed GRUB, as `grub-efi-amd64-signed` installs it.
pub const DEBIAN_GRUB: &str = "/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed";

/// An install problem. Each names the file, directory or disk it is about.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {why}")]
    Input { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{tool}: {why}")]
    Tool { tool: String, why: String },
    #[error("{path}: {why} (nothing was written)")]
    Target { path: PathBuf, why: String },
    #[error("{path}: read back after writing: {why}")]
    ReadBack { path: PathBuf, why: String },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn input(path: &Path, why: impl Into<String>) -> InstallError {
    InstallError::Input {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// What starts the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loader {
    /// Secure Boot: shim as `/EFI/BOOT/BOOTX64.EFI`, the signed GRUB it starts as
    /// `/EFI/BOOT/grubx64.efi`.
    ShimGrub { shim: PathBuf, grub: PathBuf },
    /// One GRUB image (`grub-mkstandalone`, with an early configuration that finds
    /// `/EFI/BOOT/grub.cfg`) as `/EFI/BOOT/BOOTX64.EFI`.
    Grub { efi: PathBuf },
}

/// What to install.
#[derive(Debug, Clone)]
pub struct InstallSpec {
    /// The disk or disk image.
    pub disk: PathBuf,
    /// One or two slot directories (`mkinitramfs slot` output), at most one per slot.
    pub slots: Vec<PathBuf>,
    pub loader: Loader,
    /// `grub.cfg`; `None`: the shipped `examples/grub/grub.cfg`.
    pub grub_cfg: Option<PathBuf>,
    /// The command line of both slots, written to `node.cfg`; `None`: no `node.cfg`.
    pub cmdline: Option<String>,
    /// The ESP's size in MiB (at least 64: FAT32 needs 65525 clusters).
    pub esp_mib: u64,
    /// Each root partition's size in MiB; `None`: the largest root image's.
    pub root_mib: Option<u64>,
    /// Each hash partition's size in MiB; `None`: the tree of a full root partition.
    pub verity_mib: Option<u64>,
    /// The grubenv's variables; `None`: RAUC's initial state (each installed slot good,
    /// none tried, A first).
    pub grubenv: Option<Vec<(String, String)>>,
    /// Replace a partition table the disk holds.
    pub force: bool,
}

impl InstallSpec {
    /// Defaults: Debian's signed shim and GRUB, the shipped `grub.cfg`, a 512 MiB ESP.
    pub fn new(disk: &Path, slots: Vec<PathBuf>) -> InstallSpec {
        InstallSpec {
            disk: disk.to_path_buf(),
            slots,
            loader: Loader::ShimGrub {
                shim: DEBIAN_SHIM.into(),
                grub: DEBIAN_GRUB.into(),
            },
            grub_cfg: None,
            cmdline: None,
            esp_mib: 512,
            root_mib: None,
            verity_mib: None,
            grubenv: None,
            force: false,
        }
    }
}

/// What was installed.
#[derive(Debug, Clone)]
pub struct Installed {
    pub plan: Plan,
    /// The command that makes the firmware's boot entry for this disk.
    pub efibootmgr: String,
}

/// One slot directory, checked.
#[derive(Debug, Clone)]
pub struct SlotDir {
    pub dir: PathBuf,
    /// `A` or `B`.
    pub slot: char,
    /// Lower-case hex.
    pub root_hash: String,
    /// SHA-256 of each file used, by its name in `SHA256SUMS`.
    pub digests: std::collections::BTreeMap<String, [u8; 32]>,
}

impl SlotDir {
    /// The files of a slot this install uses, relative to its directory.
    pub fn files(slot: char) -> [String; 6] {
        [
            "root.img".into(),
            "root.verity".into(),
            "root.verity-sig".into(),
            "bom.toml".into(),
            format!("esp/{slot}/vmlinuz"),
            format!("esp/{slot}/initrd.img"),
        ]
    }

    /// The slot's Unified Kernel Image, relative to its directory, when `mkinitramfs slot
    /// --uki-cmdline` made one (SHA256SUMS then lists it).
    pub fn uki_file(slot: char) -> String {
        format!("esp/{slot}/{}", crate::slot::UKI_NAME)
    }

    /// Whether the slot has a Unified Kernel Image (checked against SHA256SUMS).
    pub fn has_uki(&self) -> bool {
        self.digests.contains_key(&SlotDir::uki_file(self.slot))
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The size of one of its files.
    pub fn len(&self, name: &str) -> Result<u64, InstallError> {
        let p = self.path(name);
        Ok(std::fs::metadata(&p).map_err(io(&p))?.len())
    }
}

/// SHA-256 of a whole file, streamed.
pub(crate) fn file_digest(path: &Path) -> Result<([u8; 32], u64), InstallError> {
    let mut f =
        validator::util::fs::open_input(path, false).map_err(|e| input(path, e.to_string()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(io(path))?;
        if k == 0 {
            break;
        }
        h.update(buf.get(..k).unwrap_or_default());
        n += k as u64;
    }
    Ok((h.finalize().into(), n))
}

fn parse_sums(path: &Path) -> Result<std::collections::BTreeMap<String, [u8; 32]>, InstallError> {
    let raw =
        validator::util::fs::read_limited(path, 1 << 20).map_err(|e| input(path, e.to_string()))?;
    let text = std::str::from_utf8(&raw).map_err(|_| input(path, "not UTF-8"))?;
    let mut sums = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad = || input(path, format!("line {}: not `<sha256 hex>  <file>`", i + 1));
        let (hex, name) = line.split_once("  ").ok_or_else(bad)?;
        let bytes = validator::util::unhex(hex).ok_or_else(bad)?;
        let d: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        sums.insert(name.to_string(), d);
    }
    Ok(sums)
}

/// Reads and checks one slot directory: which slot it is, its BOM's layout, and every file
/// this install uses against `SHA256SUMS`.
pub fn read_slot(dir: &Path) -> Result<SlotDir, InstallError> {
    let m = std::fs::metadata(dir).map_err(io(dir))?;
    if !m.is_dir() {
        return Err(input(
            dir,
            "not a directory (a slot directory made by `mkinitramfs slot`)",
        ));
    }
    let slots: Vec<char> = ['A', 'B']
        .into_iter()
        .filter(|s| dir.join(format!("esp/{s}")).is_dir())
        .collect();
    let [slot] = slots[..] else {
        return Err(input(
            dir,
            "holds neither esp/A nor esp/B, or both: not one slot made by `mkinitramfs slot`",
        ));
    };
    let sums = parse_sums(&dir.join("SHA256SUMS"))?;
    let mut digests = std::collections::BTreeMap::new();
    for name in SlotDir::files(slot) {
        let want = sums
            .get(&name)
            .ok_or_else(|| input(&dir.join("SHA256SUMS"), format!("does not list {name}")))?;
        let (got, _) = file_digest(&dir.join(&name))?;
        if &got != want {
            return Err(input(
                &dir.join(&name),
                "does not match its SHA-256 in SHA256SUMS (damaged or changed since `mkinitramfs slot`)",
            ));
        }
        digests.insert(name, got);
    }
    // A slot built as a Unified Kernel Image: its image too, checked the same way.
    let uki = SlotDir::uki_file(slot);
    if let Some(want) = sums.get(&uki) {
        let (got, _) = file_digest(&dir.join(&uki))?;
        if &got != want {
            return Err(input(
                &dir.join(&uki),
                "does not match its SHA-256 in SHA256SUMS (damaged or changed since `mkinitramfs slot`)",
            ));
        }
        digests.insert(uki, got);
    }
    let hash_file = dir.join("root.roothash");
    let raw = validator::util::fs::read_limited(&hash_file, 4096)
        .map_err(|e| input(&hash_file, e.to_string()))?;
    let root_hash = String::from_utf8_lossy(&raw).trim().to_ascii_lowercase();
    if root_hash.len() != 64 || validator::util::unhex(&root_hash).is_none() {
        return Err(input(&hash_file, "not a SHA-256 root hash in hex"));
    }
    check_bom(&dir.join("bom.toml"), slot)?;
    Ok(SlotDir {
        dir: dir.to_path_buf(),
        slot,
        root_hash,
        digests,
    })
}

/// The slot's BOM must find what this install writes, where the shipped `grub.cfg` puts it.
fn check_bom(path: &Path, slot: char) -> Result<(), InstallError> {
    let loaded = validator::config::bom::load(path).map_err(|e| input(path, e.to_string()))?;
    let Some(s) = loaded.bom.slot else {
        return Err(input(
            path,
            "has no [slot]: a disk with two slots needs it (verity_sig = \"PARTLABEL=root-{slot}-sig\")",
        ));
    };
    let sub = |v: &str| v.replace("{slot}", &slot.to_string());
    let want = |what: &str, got: &str, expected: &str| {
        if sub(got) == sub(expected) {
            Ok(())
        } else {
            Err(input(
                path,
                format!("[slot] {what} = {got:?}: this install writes {expected:?}"),
            ))
        }
    };
    if s.bootloader != validator::config::bom::Bootloader::Grub {
        return Err(input(
            path,
            "[slot] bootloader is not \"grub\": install lays out GRUB's ESP only",
        ));
    }
    want("grubenv", &s.grubenv, esp::GRUBENV_PATH)?;
    want("kernel", &s.kernel, "/{slot}/vmlinuz")?;
    want("initrd", &s.initrd, "/{slot}/initrd.img")?;
    want(
        "root",
        s.root.as_deref().unwrap_or("PARTLABEL=root-{slot}"),
        "PARTLABEL=root-{slot}",
    )?;
    match &s.verity_sig {
        Some(v) => want("verity_sig", v, "PARTLABEL=root-{slot}-sig"),
        None => Err(input(
            path,
            "[slot] has no verity_sig: with two slots on one disk it must be \"PARTLABEL=root-{slot}-sig\"",
        )),
    }
}

/// The grubenv of a new install: each installed slot good, none tried, A first.
pub fn initial_grubenv(slots: &[SlotDir]) -> Vec<(String, String)> {
    let ok = |s: char| {
        if slots.iter().any(|d| d.slot == s) {
            "1"
        } else {
            "0"
        }
    };
    [
        ("ORDER", "A B".to_string()),
        ("A_OK", ok('A').into()),
        ("A_TRY", "0".into()),
        ("B_OK", ok('B').into()),
        ("B_TRY", "0".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Lays out the disk: see the module documentation.
pub fn install(spec: &InstallSpec) -> Result<Installed, InstallError> {
    let mut slots = Vec::new();
    for d in &spec.slots {
        let s = read_slot(d)?;
        if slots.iter().any(|x: &SlotDir| x.slot == s.slot) {
            return Err(input(d, format!("a second directory for slot {}", s.slot)));
        }
        slots.push(s);
    }
    if slots.is_empty() {
        return Err(input(&spec.disk, "no slot directory given"));
    }
    slots.sort_by_key(|s| s.slot);
    let files = esp::EspFiles::for_install(spec, &slots)?;
    let mut plan = plan::plan(spec, &slots)?;
    let mut t = target::Target::open(&spec.disk, plan.total, spec.force)?;
    let result = (|| {
        let esp_part = plan
            .parts
            .first_mut()
            .ok_or_else(|| input(&spec.disk, "the plan has no ESP"))?;
        let volume_id: String = esp_part.uuid.chars().take(8).collect();
        let image = esp::build(&files, esp_part.size, t.sector_size, &volume_id)?;
        let (digest, len) = file_digest(image.path())?;
        esp_part.content = Some((image.path().to_path_buf(), digest, len));
        t.write_images(&plan)?;
        t.write_gpt(&plan)?;
        t.read_back(&plan)
    })();
    // The ESP's content in the plan was a scratch image, not part of what was installed.
    if let Some(p) = plan.parts.first_mut() {
        p.content = None;
    }
    match result {
        Ok(()) => t.commit()?,
        Err(e) => {
            t.abandon();
            return Err(e);
        }
    }
    let efibootmgr = format!(
        "efibootmgr --create --disk {} --part 1 --label \"boot gate\" --loader '\\EFI\\BOOT\\BOOTX64.EFI'",
        spec.disk.display()
    );
    Ok(Installed { plan, efibootmgr })
}

#[cfg(test)]
mod tests;

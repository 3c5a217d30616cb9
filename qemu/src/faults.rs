//! The fault matrix's scenarios (`docs/FAULTS.md`): each one a good boot with exactly one
//! thing broken the way it breaks on a real node, set up here so the tests only pick a
//! name (the catalogue's `Scenario::named`, [`crate::catalogue`], calls [`setup`]).
//!
//! Contract: module faults replace `virtio_blk` (the root's disk driver, so nothing past
//! the modules stage can hide the refusal) by a real module file edited as the fault says
//! (signature stripped, cut in half, one `__versions` CRC changed and re-signed with a key
//! the BOM trusts, or the same module from Debian's `cloud` kernel flavour); the edited
//! files are written under `target/qemu-runs/fault-files-<pid>/`. Verity faults use the
//! variants of [`crate::verity`]. The A/B faults boot the gate's A/B node directly (no
//! firmware, for speed) with its ESP absent, full, on a read-only disk, or with a grubenv
//! GRUB cannot read, damaged or under a broken cluster chain ([`crate::scenario::EspCondition`]); every A/B fault follows reboots, so a
//! loop would show as more boots.
//!
//! Limits: the CRC fault is signed by a test key (trusted by the BOM, unknown to the
//! kernel), so only the gate can be shown refusing it; the kernel never sees it.

use std::path::{Path, PathBuf};
use std::process::Command;

use validator::config::bom::{HexString, RootHashSource};

use crate::scenario::{BootPath, EspCondition, Name, Roots, Scenario};
use crate::{disk, paths, HarnessError};

/// The module every module fault replaces.
pub const MODULE: &str = "virtio_blk";

/// A PARTUUID no disk of the test bed has.
pub const ABSENT_PARTUUID: &str = "0badc0de-5eed-4bad-8bad-00000000f00d";

/// The root hash scenario `verity-wrong-root-hash` pins in its BOM: a well-formed SHA-256
/// value that is not the image's.
pub const WRONG_ROOT_HASH: &str =
    "5a17c0de5a17c0de5a17c0de5a17c0de5a17c0de5a17c0de5a17c0de5a17c0de";

/// Where the corrupt BOM of `bom-corrupt` sits in the initramfs (the good one stays at
/// its usual path: mkinitramfs refuses to pack a BOM that does not parse).
pub const CORRUPT_BOM: &str = "/etc/validator/corrupt-bom.toml";

/// The BOM path of `bom-missing`: nothing is there.
pub const MISSING_BOM: &str = "/etc/validator/no-such-bom.toml";

/// VM memory of `low-memory` (MiB), against 1024 for the other scenarios: the kernel, the
/// unpacked initramfs with the 40-module BOM's modules, the loaded modules and PID 1 share
/// it.
pub const LOW_MEMORY_MIB: u32 = 192;

/// The hostile `validator.*` arguments of `garbage-cmdline` (after the good line): an
/// invalid value for every key that takes one, a key without its value, quotes, control
/// bytes, an overlong value, unknown keys, and an unterminated quote last (as the kernel
/// does, it runs to the end of the line). Each of these keys must show up in a warning.
pub const GARBAGE_ARGS: &[(&str, &str)] = &[
    ("validator.bom", "validator.bom"),
    ("validator.root_timeout", "validator.root_timeout=1e999"),
    ("validator.root-timeout", "validator.root-timeout=-5"),
    ("validator.on_stop", "validator.on_stop=\"reboot now\""),
    ("validator.debug", "validator.debug=maybe\u{1}"),
    ("validator.slot", "validator.slot=AB"),
    ("validator.verity_data", "validator.verity_data"),
    ("validator.verity_hash", "validator.verity_hash"),
    ("validator.verity_sig", "validator.verity_sig"),
    ("validator.esp", "validator.esp"),
    ("validator.nonsense", "validator.nonsense=1"),
    ("validator.", "validator.=x"),
    ("validator.on_panic", "validator.on_panic=\"reboot poweroff"),
];

/// An overlong value of a key that takes any text (`validator.esp`, read as a device
/// name and never used without `[slot]`): the kernel's whole line is 2048 bytes on
/// x86-64, so 1200 bytes of it.
pub fn overlong_arg() -> String {
    format!("validator.esp=PARTLABEL={}", "A".repeat(1200))
}

/// Bytes appended to the `garbage-cmdline` line that are not UTF-8 (the kernel passes
/// any byte on).
pub const GARBAGE_BYTES: &[u8] = b"validator.slot=\xff\xfe";

/// Sets up fault scenario `name` in `s` (a good boot); other names leave it as it is.
pub fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    let module_fault = |s: &mut Scenario, file: PathBuf| {
        s.module_overrides.push((MODULE.into(), file));
    };
    match name {
        Name::WrongPartuuid => {
            s.cmdline = format!(
                "root=PARTUUID={ABSENT_PARTUUID} ro validator.on_stop=poweroff validator.root_timeout=3"
            );
        }
        Name::VerityCorruptHash
        | Name::VerityWrongRootHash
        | Name::VerityEioData
        | Name::VerityEioHash
        | Name::VerityEioMount => {
            *s = crate::basic::named(Name::VerityCorrupt)?;
            s.verity = Some(match name {
                Name::VerityCorruptHash => crate::verity::Variant::CorruptHash,
                Name::VerityEioData => crate::verity::Variant::EioData,
                Name::VerityEioHash => crate::verity::Variant::EioHash,
                Name::VerityEioMount => crate::verity::Variant::EioMount,
                _ => crate::verity::Variant::Good,
            });
            if name == Name::VerityWrongRootHash {
                if let Some(v) = s.bom.verity.as_mut() {
                    v.source = RootHashSource::Bom;
                    v.root_hash = Some(HexString(WRONG_ROOT_HASH.into()));
                }
            }
        }
        Name::UnsignedModule => module_fault(s, edited_module(ModuleEdit::Unsigned)?),
        Name::TruncatedModule => module_fault(s, edited_module(ModuleEdit::Truncated)?),
        Name::CrcMismatch => {
            let (file, cert) = crc_mismatch_module()?;
            module_fault(s, file);
            s.bom.policy.trust.push(cert.display().to_string());
        }
        Name::WrongVermagic => {
            let cloud = paths::kernel("cloud")?;
            let tree = mkinitramfs::closure::KernelTree::open(&cloud.root)
                .map_err(|e| HarnessError::Setup(e.to_string()))?;
            let rel = tree
                .files
                .get(MODULE)
                .ok_or_else(|| HarnessError::Setup(format!("no {MODULE} in the cloud kernel")))?;
            module_fault(s, tree.moddir.join(rel));
        }
        Name::BomMissing => s.cmdline.push_str(&format!(" validator.bom={MISSING_BOM}")),
        Name::BomCorrupt => {
            let good = s
                .bom
                .to_toml()
                .map_err(|e| HarnessError::Setup(format!("BOM as TOML: {e}")))?;
            let f = paths::edited_files_dir()?.join("corrupt-bom.toml");
            write_atomic(&f, &corrupt_bom(&good))?;
            s.extra_initramfs_files
                .push((f, CORRUPT_BOM.trim_start_matches('/').into()));
            s.cmdline.push_str(&format!(" validator.bom={CORRUPT_BOM}"));
        }
        Name::GarbageCmdline => {
            for (_, arg) in GARBAGE_ARGS.iter().take(GARBAGE_ARGS.len() - 1) {
                s.cmdline.push(' ');
                s.cmdline.push_str(arg);
            }
            s.cmdline.push(' ');
            s.cmdline.push_str(&overlong_arg());
            s.cmdline_raw = GARBAGE_BYTES.to_vec();
            s.cmdline_raw.push(b' ');
            if let Some((_, last)) = GARBAGE_ARGS.last() {
                s.cmdline_raw.extend_from_slice(last.as_bytes());
            }
        }
        Name::LowMemory => {
            *s = crate::basic::named(Name::Modules40)?;
            s.memory_mib = Some(LOW_MEMORY_MIB);
        }
        Name::AbNoEsp
        | Name::AbEspFull
        | Name::AbEspReadOnly
        | Name::AbCorruptGrubenv
        | Name::AbGrubenvBrokenChain => {
            *s = Scenario::ab_gate(BootPath::Direct, Roots::Plain)?;
            // A missing ESP is waited for as long as a root; keep that short.
            s.cmdline.push_str(" validator.root_timeout=5");
            s.boot.follow_reboots = Some(3);
            if let Some(two) = s.boot.slots.as_mut() {
                two.esp = match name {
                    Name::AbNoEsp => EspCondition::Absent,
                    Name::AbEspFull => EspCondition::Full,
                    Name::AbEspReadOnly => EspCondition::ReadOnlyDisk,
                    Name::AbGrubenvBrokenChain => EspCondition::GrubenvBrokenChain,
                    _ => EspCondition::CorruptGrubenv,
                };
                if matches!(name, Name::AbEspFull | Name::AbEspReadOnly) {
                    two.a.tampered_modules.push("crc16".into());
                }
            }
        }
        _ => return Ok(()),
    }
    s.name = name.as_str().into();
    Ok(())
}

/// How a module file is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleEdit {
    /// The appended signature removed (the ELF body as built).
    Unsigned,
    /// The signed file cut to half its length.
    Truncated,
}

/// Writes `bytes` by rename, so tests running at once never see a partial file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), HarnessError> {
    validator::util::fs::write_atomic(path, bytes).map_err(|e| HarnessError::io(path, e))
}

/// The default kernel's [`MODULE`]: its file and bytes.
fn default_module() -> Result<(PathBuf, Vec<u8>), HarnessError> {
    let kernel = paths::kernel("default")?;
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let rel = tree
        .files
        .get(MODULE)
        .ok_or_else(|| HarnessError::Setup(format!("no {MODULE} in the default kernel")))?;
    let p = tree.moddir.join(rel);
    let bytes = std::fs::read(&p).map_err(|e| HarnessError::io(&p, e))?;
    Ok((p, bytes))
}

/// The body of a signed module (the ELF file as built, before `sign-file`).
fn body_of(signed: &[u8]) -> Result<Vec<u8>, HarnessError> {
    validator::formats::kmod::sig::split(signed)
        .map(|s| s.body.to_vec())
        .map_err(|e| HarnessError::Setup(format!("{MODULE}: {e}")))
}

/// [`MODULE`] edited as `edit` says, written under [`paths::edited_files_dir`].
pub fn edited_module(edit: ModuleEdit) -> Result<PathBuf, HarnessError> {
    let (_, signed) = default_module()?;
    let (bytes, name) = match edit {
        ModuleEdit::Unsigned => (body_of(&signed)?, "unsigned"),
        ModuleEdit::Truncated => (signed[..signed.len() / 2].to_vec(), "truncated"),
    };
    let out = paths::edited_files_dir()?.join(format!("{MODULE}-{name}.ko"));
    write_atomic(&out, &bytes)?;
    Ok(out)
}

/// The symbol whose `__versions` CRC [`crc_mismatch_module`] changes: the first import
/// of [`MODULE`] with a version record, other than `module_layout`.
pub fn crc_symbol(body: &[u8]) -> Result<(String, u64), HarnessError> {
    let elf = validator::formats::kmod::modinfo::parse_elf(body)
        .map_err(|e| HarnessError::Setup(format!("{MODULE}: {e}")))?;
    let found = elf
        .undefined()
        .filter(|u| u.name != "module_layout")
        .find_map(|u| {
            elf.version_of(u.name)
                .map(|v| (v.symbol.to_string(), v.crc))
        });
    found.ok_or_else(|| HarnessError::Setup(format!("{MODULE}: no versioned import")))
}

/// [`MODULE`] with one bit of the CRC it records for [`crc_symbol`] flipped, signed with
/// `sign-file` by a test key; returns the module and that key's certificate (PEM), which
/// the scenario's BOM trusts, so the CRC is the one thing wrong with it.
pub fn crc_mismatch_module() -> Result<(PathBuf, PathBuf), HarnessError> {
    let (_, signed) = default_module()?;
    let mut body = body_of(&signed)?;
    let (sym, crc) = crc_symbol(&body)?;
    // A __versions record: the CRC (64 bits on x86-64, little-endian), then the name
    // NUL-padded to 56 bytes.
    let mut rec = crc.to_le_bytes().to_vec();
    rec.extend_from_slice(sym.as_bytes());
    rec.resize(64, 0);
    let at = body
        .windows(rec.len())
        .position(|w| w == rec.as_slice())
        .ok_or_else(|| HarnessError::Setup(format!("{MODULE}: no __versions record for {sym}")))?;
    body[at] ^= 0x01;
    let dir = paths::edited_files_dir()?;
    let (key, cert) = (dir.join("crc-signer.key"), dir.join("crc-signer.pem"));
    let der = dir.join("crc-signer.der");
    if !der.exists() {
        test_support::keys::self_signed(
            &key,
            &cert,
            "fleet test module signing",
            "rsa:2048",
            2,
            &[],
        );
        disk::run(
            Command::new("openssl")
                .args(["x509", "-outform", "DER", "-in"])
                .arg(&cert)
                .arg("-out")
                .arg(&der),
        )?;
    }
    let out = dir.join(format!("{MODULE}-crc.ko"));
    std::fs::write(&out, &body).map_err(|e| HarnessError::io(&out, e))?;
    disk::run(
        Command::new(SIGN_FILE)
            .arg("sha256")
            .arg(&key)
            .arg(&der)
            .arg(&out),
    )?;
    Ok((out, cert))
}

/// The kernel's `sign-file` (package linux-kbuild-6.1).
pub const SIGN_FILE: &str = "/usr/lib/linux-kbuild-6.1/scripts/sign-file";

/// A BOM damaged as a torn write leaves it: the first half of the good text, cut inside a
/// line, then a few bytes of garbage.
pub fn corrupt_bom(good: &str) -> Vec<u8> {
    let mut cut = good.len() / 2;
    while !good.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut b = good.as_bytes()[..cut].to_vec();
    b.extend_from_slice(b"\x00\x00\xde\xad = [\n");
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The low-memory boot unpacks an image compressed as mkinitramfs ships it; a VM with
    /// the default memory or more takes the process's default.
    #[test]
    fn only_a_vm_with_less_memory_than_the_default_gets_mkinitramfs_level() {
        use crate::initramfs::Compression;
        let low = Scenario::named(Name::LowMemory).unwrap();
        assert_eq!(low.initramfs_compression(), Some(Compression::Product));
        assert_eq!(low.extras().compression, Some(Compression::Product));
        let mut good = Scenario::named(Name::Good).unwrap();
        assert_eq!(good.initramfs_compression(), None);
        good.memory_mib = Some(crate::vm::DEFAULT_MEMORY_MIB);
        assert_eq!(good.initramfs_compression(), None);
        good.memory_mib = Some(2048);
        assert_eq!(good.extras().compression, None);
    }

    #[test]
    fn corrupt_bom_does_not_parse_and_names_a_line() {
        let good = "schema = 1\nimage_id = \"img-1\"\n[kernel]\nrelease = \"6.1.0-57-amd64\"\n";
        let bad = corrupt_bom(good);
        let e = validator::config::bom::parse(&bad, Path::new("b.toml")).unwrap_err();
        assert!(e.to_string().contains("b.toml"), "{e}");
    }

    /// The table of `docs/FAULTS.md` and the tests agree: every `qemu/tests/FILE.rs::NAME`
    /// it names is a `#[test]` function of that file, and every test of
    /// `qemu/tests/faults.rs` has its row.
    #[test]
    fn fault_table_names_existing_tests() {
        let root = paths::workspace();
        let doc = std::fs::read_to_string(root.join("docs/FAULTS.md")).unwrap();
        let mut named = Vec::new();
        for line in doc.lines().filter(|l| l.starts_with("| ")) {
            for cell in line.split('`').filter(|c| c.starts_with("qemu/tests/")) {
                let (file, name) = cell
                    .split_once("::")
                    .unwrap_or_else(|| panic!("not file::name: {cell}"));
                named.push((file.to_string(), name.to_string()));
            }
        }
        assert!(named.len() >= 22, "{} tests named", named.len());
        let tests_of = |file: &str| -> Vec<String> {
            let src =
                std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let lines: Vec<&str> = src.lines().collect();
            lines
                .windows(2)
                .filter(|w| w[0].trim() == "#[test]")
                .filter_map(|w| {
                    let rest = w[1].trim().strip_prefix("fn ")?;
                    Some(rest.split('(').next()?.to_string())
                })
                .collect()
        };
        for (file, name) in &named {
            assert!(
                tests_of(file).contains(name),
                "docs/FAULTS.md names {file}::{name}, which is no test"
            );
        }
        for t in tests_of("qemu/tests/faults.rs") {
            assert!(
                named
                    .iter()
                    .any(|(f, n)| f == "qemu/tests/faults.rs" && *n == t),
                "qemu/tests/faults.rs::{t} has no row in docs/FAULTS.md"
            );
        }
    }

    #[test]
    fn garbage_fits_the_kernel_line() {
        let mut n = overlong_arg().len() + GARBAGE_BYTES.len();
        for (_, a) in GARBAGE_ARGS {
            n += a.len() + 1;
        }
        assert!(n < 1900, "{n} bytes of 2048");
    }
}

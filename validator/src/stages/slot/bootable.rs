//! Would the other slot's kernel start? Before a fallback under Secure Boot, the other
//! slot's kernel on the ESP is checked the way the kernel's `kexec_file_load` (and, after
//! a reboot, shim) will check it: its Authenticode signature
//! ([`crate::trust::authenticode`], the first signature, as the kernel) against the keys
//! they trust for it. A kernel that would be refused is no fallback target: the decision
//! is then stop, with a reason naming that kernel, instead of a kexec the kernel refuses
//! and a reboot into a slot that cannot start.
//!
//! Contract: [`check`] reads Secure Boot from efivarfs under the given `/sys`; when it is
//! not on (off, no UEFI, or unreadable), nothing is checked (without lockdown the kernel
//! does not check a kexec'd kernel's signature). When it is on, the trusted keys are the
//! kernel's built-in certificates (`kernel-builtin-*.der` in the initramfs's trust
//! directory, as mkinitramfs extracts them from the kernel image), UEFI `db`, and the MOK
//! list the kernel loads (`MokListRT` from shim's MOK variable table under
//! `firmware/efi/mok-variables`, else the `MokListRT` EFI variable; it carries shim's
//! vendor certificate, Debian's Secure Boot CA); an image digest in `dbx` is refused.
//! A database that cannot be read or parsed is left out and named in the result's notes;
//! a kernel that cannot be read is a refusal.
//!
//! Limits: `dbx` certificate entries, SBAT and `MokListXRT` are not judged; the fleet's
//! own certificates in the initramfs are not used (the kernel does not hold them for
//! kexec unless they are built in, in `db` or in MOK).

use std::path::Path;

use crate::config::layout;
use crate::formats::efisiglist;
use crate::trust::authenticode::{self, Rule};
use crate::trust::{Cert, TrustStore};
use crate::util::fs::read_limited;

/// The EFI global variable vendor, the image security database's and shim's.
const GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";
const IMAGE_SECURITY: &str = "d719b2cb-3d3a-4596-a3bc-dad00e67656f";
const SHIM_LOCK: &str = "605dab50-e046-4300-abb6-3dd810dd8b23";
/// The largest signature database read.
const DB_MAX: u64 = 1 << 20;
/// The largest kernel image read.
const KERNEL_MAX: u64 = crate::formats::vmlinuz::VMLINUZ_MAX;

/// What [`check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Why the kernel would not start; `None`: it would (or nothing was checked).
    pub refused: Option<String>,
    /// What was checked, or why nothing was (for the log).
    pub note: String,
}

/// Secure Boot as efivarfs says under `sys_root`: `Some(true)` on.
fn secure_boot(sys_root: &Path) -> Option<bool> {
    let var = sys_root.join(format!("firmware/efi/efivars/SecureBoot-{GLOBAL}"));
    let b = read_limited(&var, 64).ok()?;
    crate::formats::sysfs::efi_bool(&b).ok()
}

/// An efivarfs variable's value (after its four attribute bytes).
fn efivar(sys_root: &Path, name: &str, vendor: &str) -> Result<Option<Vec<u8>>, String> {
    let p = sys_root.join(format!("firmware/efi/efivars/{name}-{vendor}"));
    if p.symlink_metadata().is_err() {
        return Ok(None);
    }
    let b = read_limited(&p, DB_MAX).map_err(|e| e.to_string())?;
    b.get(4..)
        .map(|v| Some(v.to_vec()))
        .ok_or_else(|| format!("{}: shorter than its attributes", p.display()))
}

/// The MOK list the kernel loads: shim's MOK variable table first, else the variable.
fn mok_list(sys_root: &Path) -> Result<Option<Vec<u8>>, String> {
    let table = sys_root.join("firmware/efi/mok-variables/MokListRT");
    if table.symlink_metadata().is_ok() {
        return read_limited(&table, DB_MAX)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    efivar(sys_root, "MokListRT", SHIM_LOCK)
}

/// Checks the kernel at `kernel` as [`crate::stages::slot::bootable`] says.
pub fn check(sys_root: &Path, initramfs_root: &Path, kernel: &Path) -> Verdict {
    if secure_boot(sys_root) != Some(true) {
        return Verdict {
            refused: None,
            note: "Secure Boot is not on: the kernel does not check a kexec'd kernel".into(),
        };
    }
    let mut notes: Vec<String> = Vec::new();
    let mut store = TrustStore::new();
    let mut sources: Vec<String> = Vec::new();
    // The kernel's built-in keys, as mkinitramfs put them in the trust directory.
    let dir = initramfs_root.join(layout::TRUST_DIR);
    let mut builtin = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut names: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("kernel-builtin-"))
            })
            .collect();
        names.sort();
        for p in names {
            match read_limited(&p, crate::trust::CERT_FILE_MAX)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    Cert::from_der(&b, &p.display().to_string()).map_err(|e| e.to_string())
                }) {
                Ok(c) => {
                    store.add(c);
                    builtin += 1;
                }
                Err(e) => notes.push(e),
            }
        }
    }
    sources.push(format!("{builtin} built-in"));
    let mut forbidden: Vec<[u8; 32]> = Vec::new();
    for (what, value) in [
        ("db", efivar(sys_root, "db", IMAGE_SECURITY)),
        ("MokListRT", mok_list(sys_root)),
        ("dbx", efivar(sys_root, "dbx", IMAGE_SECURITY)),
    ] {
        let db = match value {
            Ok(Some(v)) => match efisiglist::parse(&v) {
                Ok(db) => db,
                Err(e) => {
                    notes.push(format!("{what}: {e}"));
                    continue;
                }
            },
            Ok(None) => continue,
            Err(e) => {
                notes.push(format!("{what}: {e}"));
                continue;
            }
        };
        if what == "dbx" {
            forbidden.extend(db.sha256s().copied());
            sources.push(format!("{} dbx digests", forbidden.len()));
            continue;
        }
        let mut n = 0;
        for der in db.certs() {
            match Cert::from_der(der, what) {
                Ok(c) => {
                    store.add(c);
                    n += 1;
                }
                Err(e) => notes.push(e.to_string()),
            }
        }
        sources.push(format!("{n} from {what}"));
    }
    let trusted = sources.join(", ");
    let image = match read_limited(kernel, KERNEL_MAX) {
        Ok(b) => b,
        Err(e) => {
            return Verdict {
                refused: Some(format!("{} cannot be read: {e}", kernel.display())),
                note: trusted,
            }
        }
    };
    let mut note = format!("keys: {trusted}");
    if !notes.is_empty() {
        note.push_str(&format!(" (left out: {})", notes.join("; ")));
    }
    match authenticode::verify(&image, &store, &forbidden, Rule::Kernel) {
        Ok(c) => Verdict {
            refused: None,
            note: format!(
                "{}: signature {} trusted through {}; {note}",
                kernel.display(),
                c.index,
                c.anchor
            ),
        },
        Err(e) => Verdict {
            refused: Some(format!(
                "{} would not start under Secure Boot: {e}",
                kernel.display()
            )),
            note,
        },
    }
}

//! Would the other slot's kernel start? Before a fallback under Secure Boot, the other
//! slot's kernel on the ESP is checked the way the kernel's `kexec_file_load` (and, after
//! a reboot, shim) will check it: its Authenticode signature
//! ([`crate::trust::authenticode`], the first signature, as the kernel) against the keys
//! they trust for it. A kernel that would be refused is no fallback target: the decision
//! is then stop, with a reason naming that kernel, instead of a kexec the kernel refuses
//! and a reboot into a slot that cannot start.
//!
//! Contract: [`check`] reads Secure Boot and the firmware's keys under the given `/sys`
//! ([`crate::runtime::uefi_keys`]); when Secure Boot is not on (off, no UEFI, or
//! unreadable), nothing is checked (without lockdown the kernel does not check a kexec'd
//! kernel's signature). When it is on, the trusted keys are the kernel's built-in
//! certificates (as mkinitramfs put them in the initramfs), UEFI `db` and the MOK list;
//! an image digest in `dbx` is refused. A database that cannot be read or parsed is left
//! out and named in the note; a kernel that cannot be read is a refusal.
//!
//! Limits: `dbx` certificate entries, SBAT and `MokListXRT` are not judged; the fleet's
//! own certificates in the initramfs are not used (the kernel does not hold them for
//! kexec unless they are built in, in `db` or in MOK).

use std::path::Path;

use crate::runtime::uefi_keys;
use crate::trust::authenticode::{self, Rule};
use crate::trust::TrustStore;
use crate::util::fs::read_limited;

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

/// Checks the kernel at `kernel` as [`crate::stages::slot::bootable`] says.
pub fn check(sys_root: &Path, initramfs_root: &Path, kernel: &Path) -> Verdict {
    let keys = uefi_keys::read(sys_root);
    if keys.secure_boot != Some(true) {
        return Verdict {
            refused: None,
            note: "Secure Boot is not on: the kernel does not check a kexec'd kernel".into(),
        };
    }
    let (builtin, mut notes) = uefi_keys::kernel_builtin(initramfs_root);
    let mut store = TrustStore::new();
    let n_builtin = builtin.len();
    for c in builtin
        .into_iter()
        .chain(keys.db.iter().cloned())
        .chain(keys.mok.iter().cloned())
    {
        store.add(c);
    }
    notes.extend(keys.notes.iter().cloned());
    let mut note = format!(
        "keys: {n_builtin} built-in, {} from db, {} from MokListRT, {} dbx digests",
        keys.db.len(),
        keys.mok.len(),
        keys.dbx_sha256.len()
    );
    if !notes.is_empty() {
        note.push_str(&format!(" (left out: {})", notes.join("; ")));
    }
    let image = match read_limited(kernel, KERNEL_MAX) {
        Ok(b) => b,
        Err(e) => {
            return Verdict {
                refused: Some(format!("{} cannot be read: {e}", kernel.display())),
                note,
            }
        }
    };
    match authenticode::verify(&image, &store, &keys.dbx_sha256, Rule::Kernel) {
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

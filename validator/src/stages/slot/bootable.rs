//! Would the other slot's kernel start? Before a fallback under Secure Boot, the other
//! slot's kernel on the ESP is checked the way the kernel's `kexec_file_load` (and, after
//! a reboot, shim) will check it: its Authenticode signature
//! ([`crate::trust::authenticode`], the first signature, as the kernel) against the keys
//! they trust for it. A kernel that would be refused is no fallback target: the decision
//! is then stop, with a reason naming that kernel, instead of a kexec the kernel refuses
//! and a reboot into a slot that cannot start.
//!
//! Contract: [`check`] takes Secure Boot and the firmware's keys as the boot read them
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

use crate::runtime::uefi_keys::{self, UefiKeys};
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

/// Checks the kernel at `kernel` as [`crate::stages::slot::bootable`] says, with the
/// firmware's `keys` and the kernel's built-in certificates from the initramfs at
/// `initramfs_root`.
pub fn check(keys: &UefiKeys, initramfs_root: &Path, kernel: &Path) -> Verdict {
    if keys.secure_boot != Some(true) {
        return Verdict {
            refused: None,
            note: "Secure Boot is not on: the kernel does not check a kexec'd kernel".into(),
        };
    }
    let (builtin, builtin_notes) = uefi_keys::kernel_builtin(initramfs_root);
    let mut note = format!("keys: {} built-in, {}", builtin.len(), keys.describe());
    if !builtin_notes.is_empty() {
        note.push_str(&format!(
            " (built-in left out: {})",
            builtin_notes.join("; ")
        ));
    }
    let mut store = TrustStore::new();
    for c in builtin
        .into_iter()
        .chain(keys.db.iter().cloned())
        .chain(keys.mok.iter().cloned())
    {
        store.add(c);
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

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
//! kernel's signature, and nothing checks the boot chain). When it is on, the kernel is
//! checked with the trusted keys the kernel's built-in certificates (as mkinitramfs put
//! them in the initramfs), UEFI `db` and the MOK list, and the revocation shim applies
//! when it boots that kernel after a reboot: `dbx` and `MokListXRT` (image digests, and
//! certificates its signature reaches: [`crate::trust::revocation`], as shim reads them)
//! and the
//! SBAT level `SbatLevelRT` (a kernel without `.sbat` passes, as through shim's protocol).
//! The boot chain in front of it, when the caller names it ([`Chain`]: shim and the GRUB
//! it starts, on the ESP), is judged as the firmware and shim will judge it at that
//! reboot: shim against `db` and `dbx` with the firmware's rule (EDK2's revocation,
//! certificate digests included), its own SBAT against the level (shim's self-check);
//! GRUB against `db`, the MOK list, `dbx` and `MokListXRT` as shim reads them, and its
//! SBAT (mandatory for what shim loads). A database that cannot be read or
//! parsed is left out and named in the note; an image that cannot be read is a refusal.
//!
//! Limits: the fleet's own certificates in the initramfs are not used (the kernel does not
//! hold them for kexec unless they are built in, in `db` or in MOK); the SBAT level is
//! the one in force, not the one shim may write at the next boot from its built-in
//! levels under `SbatPolicy`; with several signatures on one image, shim passes it when
//! one verifies although another reaches a revoked certificate, where this check (EDK2's
//! rule) refuses it.

use std::path::{Path, PathBuf};

use crate::formats::sbat::{self, Loaded};
use crate::runtime::uefi_keys::{self, UefiKeys};
use crate::trust::authenticode::{self, Rule};
use crate::trust::revocation::Revocations;
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

/// The boot chain in front of the kernel after a reboot: shim (what the firmware starts)
/// and the second stage it loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub shim: PathBuf,
    pub second_stage: PathBuf,
}

/// Checks the kernel at `kernel`, and the boot chain `chain` in front of it, as
/// [`crate::runtime::slot::bootable`] says, with the firmware's `keys` and the kernel's
/// built-in certificates from the initramfs at `initramfs_root`.
pub fn check(
    keys: &UefiKeys,
    initramfs_root: &Path,
    kernel: &Path,
    chain: Option<&Chain>,
) -> Verdict {
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
    let by_shim = [keys.dbx.as_shim_reads_it(), keys.mokx.as_shim_reads_it()];
    let mut kernel_store = TrustStore::new();
    for c in builtin
        .into_iter()
        .chain(keys.db.iter().cloned())
        .chain(keys.mok.iter().cloned())
    {
        kernel_store.add(c);
    }
    let mut checked = Vec::new();
    if let Some(chain) = chain {
        let mut db = TrustStore::new();
        let mut shim_store = TrustStore::new();
        for c in &keys.db {
            db.add(c.clone());
            shim_store.add(c.clone());
        }
        for c in &keys.mok {
            shim_store.add(c.clone());
        }
        let steps = [
            (
                &chain.shim,
                &db,
                std::slice::from_ref(&keys.dbx),
                Loaded::ByShim,
            ),
            (
                &chain.second_stage,
                &shim_store,
                &by_shim[..],
                Loaded::ByShim,
            ),
        ];
        for (path, store, lists, loaded) in steps {
            match judge(path, store, lists, Rule::Firmware, keys, loaded) {
                Ok(ok) => checked.push(ok),
                Err(why) => {
                    return Verdict {
                        refused: Some(format!("{} would not be reached: {why}", kernel.display())),
                        note,
                    }
                }
            }
        }
    }
    match judge(
        kernel,
        &kernel_store,
        &by_shim,
        Rule::Kernel,
        keys,
        Loaded::ThroughProtocol,
    ) {
        Ok(ok) => {
            checked.push(ok);
            Verdict {
                refused: None,
                note: format!("{}; {note}", checked.join("; ")),
            }
        }
        Err(why) => Verdict {
            refused: Some(why),
            note,
        },
    }
}

/// One image: its signature under `rule` against `store` and `lists`, then its SBAT
/// against the node's level. `Ok`: what passed; `Err`: why it would not start.
fn judge(
    path: &Path,
    store: &TrustStore,
    lists: &[Revocations],
    rule: Rule,
    keys: &UefiKeys,
    loaded: Loaded,
) -> Result<String, String> {
    let refused = |why: String| {
        format!(
            "{} would not start under Secure Boot: {why}",
            path.display()
        )
    };
    let image = read_limited(path, KERNEL_MAX)
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    let c = authenticode::verify(&image, store, lists, rule).map_err(|e| refused(e.to_string()))?;
    if let Some(level) = &keys.sbat_level {
        sbat::judge_pe(&image, level, loaded).map_err(|e| refused(e.to_string()))?;
    }
    Ok(format!(
        "{}: signature {} trusted through {}",
        path.display(),
        c.index,
        c.anchor
    ))
}

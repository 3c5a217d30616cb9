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
    let kernel_store = kernel_trusts(keys, builtin);
    let mut checked = match chain.map(|c| judge_chain(keys, c)).transpose() {
        Ok(c) => c.unwrap_or_default(),
        Err(why) => {
            return Verdict {
                refused: Some(format!("{} would not be reached: {why}", kernel.display())),
                note,
            }
        }
    };
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

/// What the kernel trusts for a kexec'd kernel: its built-in keys, `db` and the MOK list.
fn kernel_trusts(keys: &UefiKeys, builtin: Vec<crate::trust::Cert>) -> TrustStore {
    let mut store = TrustStore::new();
    for c in builtin
        .into_iter()
        .chain(keys.db.iter().cloned())
        .chain(keys.mok.iter().cloned())
    {
        store.add(c);
    }
    store
}

/// What shim trusts for what it loads: `db` and the MOK list.
fn shim_trusts(keys: &UefiKeys) -> TrustStore {
    let mut store = TrustStore::new();
    for c in keys.db.iter().chain(keys.mok.iter()) {
        store.add(c.clone());
    }
    store
}

/// The chain in front of a slot's kernel or image after a reboot: shim as the firmware
/// judges it (against `db` and `dbx`), the GRUB it starts as shim judges it (against `db`
/// and the MOK list, `dbx` and `MokListXRT` as shim reads them). `Ok`: what passed.
fn judge_chain(keys: &UefiKeys, chain: &Chain) -> Result<Vec<String>, String> {
    let by_shim = [keys.dbx.as_shim_reads_it(), keys.mokx.as_shim_reads_it()];
    let mut db = TrustStore::new();
    for c in &keys.db {
        db.add(c.clone());
    }
    let shim_store = shim_trusts(keys);
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
    steps
        .into_iter()
        .map(|(path, store, lists, loaded)| judge(path, store, lists, Rule::Firmware, keys, loaded))
        .collect()
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
    let image = read_limited(path, KERNEL_MAX)
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    judge_bytes(
        &path.display().to_string(),
        &image,
        store,
        lists,
        rule,
        keys,
        loaded,
    )
}

/// [`judge`] of an image's bytes, named `name`.
fn judge_bytes(
    name: &str,
    image: &[u8],
    store: &TrustStore,
    lists: &[Revocations],
    rule: Rule,
    keys: &UefiKeys,
    loaded: Loaded,
) -> Result<String, String> {
    let refused = |why: String| format!("{name} would not start under Secure Boot: {why}");
    let c = authenticode::verify(image, store, lists, rule).map_err(|e| refused(e.to_string()))?;
    if let Some(level) = &keys.sbat_level {
        sbat::judge_pe(image, level, loaded).map_err(|e| refused(e.to_string()))?;
    }
    Ok(format!(
        "{name}: signature {} trusted through {}",
        c.index, c.anchor
    ))
}

/// The other slot's Unified Kernel Image (`name`, its bytes as read once), checked as
/// shim will check it when GRUB chainloads it after a reboot (the firmware's rule against
/// `db` and the MOK list, `dbx` and `MokListXRT` as shim reads them, its SBAT, which shim
/// requires), and its `.linux` as the kernel's `kexec_file_load` will check it when the
/// init loads it from the image (the kernel's rule against its built-in keys, `db` and
/// the MOK list): the image is a fallback target only when both would pass. The chain in
/// front of it as [`check`] judges it.
pub fn check_uki(
    keys: &UefiKeys,
    initramfs_root: &Path,
    name: &str,
    image: &[u8],
    chain: Option<&Chain>,
) -> Verdict {
    if keys.secure_boot != Some(true) {
        return Verdict {
            refused: None,
            note: "Secure Boot is not on: nothing checks the image".into(),
        };
    }
    let mut v = Verdict {
        refused: None,
        note: keys.describe(),
    };
    match chain.map(|c| judge_chain(keys, c)).transpose() {
        Ok(c) => v.note = format!("{}; {}", c.unwrap_or_default().join("; "), v.note),
        Err(why) => {
            v.refused = Some(format!("{name} would not be reached: {why}"));
            return v;
        }
    }
    let shim_store = shim_trusts(keys);
    let by_shim = [keys.dbx.as_shim_reads_it(), keys.mokx.as_shim_reads_it()];
    let image_ok = judge_bytes(
        name,
        image,
        &shim_store,
        &by_shim,
        Rule::Firmware,
        keys,
        Loaded::ByShim,
    );
    // What a kexec takes out of it: an image without them (or with a section the stub
    // could take for another) is no fallback target either.
    let sections = crate::formats::pe::layout(image)
        .and_then(|l| {
            crate::formats::uki::unambiguous(&l)?;
            [".linux", ".initrd", ".cmdline"]
                .map(|s| l.section_bytes(image, s).map(|b| (s, b)))
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| format!("{name}: {e}"));
    let linux = sections.and_then(|all| {
        let mut linux = None;
        for (s, b) in all {
            match b {
                None => return Err(format!("{name}: no {s} section: nothing to kexec")),
                Some(b) if s == ".linux" => linux = Some(b),
                Some(_) => {}
            }
        }
        linux.ok_or_else(|| format!("{name}: no .linux section"))
    });
    let (builtin, _) = uefi_keys::kernel_builtin(initramfs_root);
    let kernel_store = kernel_trusts(keys, builtin);
    let kernel_ok = linux.and_then(|k| {
        judge_bytes(
            &format!("{name}'s .linux"),
            &k,
            &kernel_store,
            &by_shim,
            Rule::Kernel,
            keys,
            Loaded::ThroughProtocol,
        )
    });
    match (image_ok, kernel_ok) {
        (Ok(a), Ok(b)) => v.note = format!("{a}; {b}; {}", v.note),
        (Err(why), _) | (_, Err(why)) => v.refused = Some(why),
    }
    v
}

//! The one gated load-and-measure both module-loading stages go through (the `modules`
//! stage for the initramfs's modules, the preflight for the verified root's drivers), and
//! the one order the initramfs's modules load in (which `attest predict` and
//! `mkinitramfs` follow too).
//!
//! Contract: [`loader`] sets a [`Loader`] up the same way for both: the module
//! directory and its index, the gate (with the kernel command line's
//! `module_blacklist=`, which the kernel applies to every load), the options `modprobe`
//! would give ([`super::read_config`]), and `<proc>` for the digests the kernel gains as
//! crypto modules load. [`load_and_measure`] loads the names asked for, each after its
//! dependencies, then measures every module that loaded, in plan order, as
//! `module:<name> sha256:<digest of the image the kernel was given>` (with its options):
//! the digest is the gate's own, from the pass that checked the signature; a loaded
//! module without one is an error, never a second read. It measures even when a load
//! failed, so an attestation of a stopped boot still names what the kernel runs; the
//! first measurement that fails ends the measuring and is returned beside the results.
//! [`initramfs_order`]: on a UEFI boot, `efivarfs` first when the initramfs has it (the
//! firmware's keys it exposes decide the gate's trust for the rest), then the BOM's
//! `modules.load` without it.

use std::path::Path;

use super::{Loader, ModStatus, ModuleReport};
use crate::formats::kmod::index::Index;
use crate::formats::kmod::modprobe;
use crate::formats::tpm::measurement::Measurement;
use crate::gate::Gate;
use crate::runtime::measure::{self, MeasureError, Measurer};
use crate::sys::EFIVARFS;

/// The initramfs's load order: the module to load first on its own (`efivarfs`, on a
/// UEFI boot when the initramfs has it), then the rest of `names` in their order.
pub fn initramfs_order(
    names: &[String],
    uefi: bool,
    has_efivarfs: bool,
) -> (Option<String>, Vec<String>) {
    if uefi && has_efivarfs {
        let rest = names.iter().filter(|n| *n != EFIVARFS).cloned().collect();
        (Some(EFIVARFS.to_string()), rest)
    } else {
        (None, names.to_vec())
    }
}

/// A loader for the modules of `dir` (whose index is `index`), judging each with `gate`
/// (the command line's `module_blacklist=` added), giving each the `options` modprobe
/// would, and asking `<proc>/crypto` which digests the kernel holds.
pub fn loader(
    dir: &Path,
    index: Index,
    mut gate: Gate,
    options: modprobe::Config,
    cmdline: &str,
    sys: &Path,
    proc: &Path,
) -> Loader {
    gate.policy.module_blacklist = crate::config::cmdline::module_blacklist(cmdline);
    let mut l = Loader::new(dir, index, sys);
    l.proc_root = Some(proc.to_path_buf());
    l.options = options;
    l.gate = Some(gate);
    l
}

/// Measures every module of `results` that loaded, in their order, with the digest the
/// gate recorded; the first that cannot be measured ends it.
pub fn measure(
    results: &[ModuleReport],
    mut measurer: Option<&mut Measurer>,
    warnings: &mut Vec<String>,
) -> Result<(), MeasureError> {
    for r in results.iter().filter(|r| r.status == ModStatus::Loaded) {
        let sha = r.sha256.clone().ok_or_else(|| MeasureError::Unmeasurable {
            what: format!("module {}", r.name),
            why: "the gate recorded no digest of the image the kernel was given".into(),
        })?;
        let event = Measurement::Module {
            name: r.name.clone(),
            sha256: sha,
            options: r.options.clone().unwrap_or_default(),
        };
        measure::event(measurer.as_deref_mut(), warnings, &event, None)?;
    }
    Ok(())
}

/// What [`load_and_measure`] did.
#[derive(Debug)]
pub struct Gated {
    /// Each module asked for and each dependency, in plan order.
    pub results: Vec<ModuleReport>,
    /// Whether every loaded module was measured.
    pub measured: Result<(), MeasureError>,
    /// The time the measurements took, in microseconds.
    pub measure_us: u64,
}

/// Loads `names` (each after its dependencies) and measures every module that loaded.
pub fn load_and_measure(
    loader: &mut Loader,
    names: &[String],
    measurer: Option<&mut Measurer>,
    warnings: &mut Vec<String>,
) -> Gated {
    let results = loader.load_all(names);
    let t = std::time::Instant::now();
    let measured = measure(&results, measurer, warnings);
    Gated {
        results,
        measured,
        measure_us: u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efivarfs_goes_first_on_uefi_when_the_initramfs_has_it() {
        let names: Vec<String> = ["virtio_blk", "efivarfs", "ext4"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            initramfs_order(&names, true, true),
            (
                Some("efivarfs".to_string()),
                vec!["virtio_blk".to_string(), "ext4".to_string()]
            )
        );
        assert_eq!(initramfs_order(&names, false, true), (None, names.clone()));
        assert_eq!(initramfs_order(&names, true, false), (None, names.clone()));
    }
}

//! Stage `modules`: gate and load the BOM's modules from the initramfs, each after its
//! dependencies, with `finit_module(2)` directly (no kmod binary), and measure each loaded
//! module's image digest (from the gate's own read), through the one gated
//! load-and-measure the preflight's root drivers go through too
//! ([`crate::runtime::modload::gated`]); then check the kernel's taint.
//!
//! On a UEFI boot `efivarfs` is loaded first and mounted, and the firmware's keys decide
//! the gate's trust as they decide the kernel's (`runtime::uefi_keys::module_trust`:
//! under Secure Boot only the built-in keys, `db` and MOK; otherwise the initramfs's
//! certificates plus `db` and MOK).
//!
//! A refused module is reported as `rejected` and the kernel never sees it; a refusal,
//! a failed load or an image taint fails the stage as an image fault.

use super::{Classified, Context, Fault};
use crate::gate::{self, Gate};
use crate::runtime::measure::MeasureError;
use crate::runtime::modload::{
    gated, load_index, read_config, IndexLoadError, ModStatus, ModuleReport,
};
use crate::runtime::taint;
use crate::sys::EFIVARFS;

/// Why the modules stage failed.
#[derive(Debug, thiserror::Error)]
pub enum ModulesError {
    #[error(transparent)]
    Index(#[from] IndexLoadError),
    #[error("module gate: {0}")]
    GateSetup(#[from] gate::GateSetupError),
    #[error("initramfs {0}")]
    Options(#[from] crate::runtime::modload::OptionsError),
    #[error("module gate refused: {}", .0.join(", "))]
    Refused(Vec<String>),
    #[error("module(s) failed to load: {}", .0.join(", "))]
    LoadFailed(Vec<String>),
    #[error("kernel tainted {0:?} by module loading, not allowed by the BOM")]
    Tainted(String),
    #[error("kernel taint: {0}")]
    Taint(#[from] taint::TaintError),
    #[error(transparent)]
    Measure(#[from] MeasureError),
}

impl Classified for ModulesError {
    fn fault(&self) -> Fault {
        match self {
            ModulesError::Index(_)
            | ModulesError::GateSetup(_)
            | ModulesError::Options(_)
            | ModulesError::Refused(_)
            | ModulesError::LoadFailed(_)
            | ModulesError::Tainted(_) => Fault::Image,
            ModulesError::Taint(_) => Fault::Platform,
            ModulesError::Measure(e) => e.fault(),
        }
    }
}

/// Logs each module's outcome and names the failures: the modules the gate refused, and
/// those that failed to load or were skipped (not counting soft dependencies, which
/// modprobe does not require), each with why.
fn failures(results: &[ModuleReport]) -> (Vec<String>, Vec<String>) {
    for r in results {
        match r.status {
            ModStatus::Failed | ModStatus::Skipped | ModStatus::Rejected => log::error!(
                "module {}: {:?} {} {}",
                r.name,
                r.status,
                r.errno.as_deref().unwrap_or(""),
                r.message.as_deref().unwrap_or("")
            ),
            s => log::debug!("module {}: {s:?} in {} us", r.name, r.duration_us),
        }
    }
    let why = |r: &ModuleReport| {
        r.errno
            .as_deref()
            .or(r.message.as_deref())
            .unwrap_or("no reason recorded")
            .to_string()
    };
    let refused: Vec<String> = results
        .iter()
        .filter(|r| r.status == ModStatus::Rejected)
        .map(|r| format!("{} ({})", r.name, r.message.as_deref().unwrap_or("")))
        .collect();
    let bad: Vec<String> = results
        .iter()
        .filter(|r| !r.ok() && !r.softdep && r.status != ModStatus::Rejected)
        .map(|r| format!("{} ({})", r.name, why(r)))
        .collect();
    (refused, bad)
}

/// On a UEFI boot, once efivarfs is loaded: mounts it, reads the firmware's keys into the
/// context and what systemd-stub said of the boot into its facts, and narrows `gate`'s trust to what the kernel trusts for modules
/// (`runtime::uefi_keys::module_trust`) with `dbx`'s module hashes refused. Returns the
/// initramfs's store as it was (the verity stage checks the root hash's signature with
/// it).
fn follow_the_firmware(
    ctx: &mut Context,
    gate: Option<&mut Gate>,
) -> Option<crate::trust::TrustStore> {
    crate::sys::mount_efivarfs(&ctx.roots.sys);
    ctx.uefi = crate::runtime::uefi_keys::read(&ctx.roots.sys).into();
    // Whether a Unified Kernel Image started this kernel, and what its stub added to the
    // initramfs from outside the image (never read: named in the report).
    let (image, mut unread) = crate::runtime::uki::read(&ctx.roots.sys, &ctx.roots.initramfs);
    if image != crate::runtime::uki::BootImage::default() {
        ctx.facts.boot_image = Some(image);
    }
    ctx.facts.warnings.append(&mut unread);
    let keys = ctx.uefi_keys();
    let g = gate?;
    let narrowed = crate::runtime::uefi_keys::module_trust_logged(&g.trust, keys);
    let initramfs_trust = std::mem::replace(&mut g.trust, narrowed);
    g.policy.hash_blacklist = keys.module_hash_blacklist();
    log::info!(
        "module gate: Secure Boot {}; trusted: {} certificate(s) ({})",
        match keys.secure_boot {
            Some(true) => "on",
            Some(false) => "off",
            None => "unknown",
        },
        g.trust.certs.len(),
        keys.describe()
    );
    Some(initramfs_trust)
}

/// The stage: gate and load the BOM's modules from the initramfs, measure what was
/// loaded (even when the stage fails, so an attestation of a stopped boot still names
/// the modules the kernel runs), then check the kernel's taint.
pub fn run(ctx: &mut Context) -> Result<String, ModulesError> {
    let Some(b) = ctx.bom.as_ref() else {
        return Ok("no BOM: nothing to load".into());
    };
    let names: Vec<String> = b.bom.modules.load.iter().map(|m| m.0.clone()).collect();
    let allowed = b.bom.policy.taint_allowed.0.clone();
    let dir = ctx.roots.modules.join(&ctx.release);
    let index = load_index(&dir)?;
    // On a UEFI boot, efivarfs first when the initramfs has it (mkinitramfs packs it):
    // the EFI variables (the firmware's keys for the gate below, Secure Boot for the
    // preflight, the boot counting of systemd-boot for the slot stage).
    let efi = ctx.roots.sys.join("firmware/efi").is_dir();
    let (first, names) = gated::initramfs_order(&names, efi, index.entries.contains_key(EFIVARFS));
    // The options modprobe would give: the initramfs's modprobe.d, then the command line.
    let options = read_config(&ctx.roots.initramfs, Some(ctx.cmdline_bytes()))?;
    let g = Gate::from_initramfs(&ctx.roots.initramfs, &b.bom)?;
    log::info!(
        "module gate: {} trusted certificate(s), {} symbol CRCs, vermagic {:?}",
        g.trust.certs.len(),
        g.symvers.as_ref().map_or(0, |s| s.map.len()),
        g.policy.kernel_vermagic.as_deref().unwrap_or("")
    );
    let mut loader = gated::loader(
        &dir,
        index,
        g,
        options,
        &ctx.cmdline,
        &ctx.roots.sys,
        &ctx.roots.proc,
    );
    // On a UEFI boot: efivarfs first (Debian-signed, judged with the built-in keys), then
    // the firmware's keys decide the gate's trust as they decide the kernel's
    // (`runtime::uefi_keys::module_trust`), then the rest. The initramfs's store as loaded
    // stays for the root hash signature (the verity stage): a userspace check of our own,
    // which the kernel's keyrings do not bound.
    let mut done = Vec::new();
    let mut initramfs_trust = None;
    if efi {
        if let Some(f) = first {
            done.push(gated::load_and_measure(
                &mut loader,
                &[f],
                ctx.measurer.as_mut(),
                &mut ctx.facts.warnings,
            ));
        }
        initramfs_trust = follow_the_firmware(ctx, loader.gate.as_mut());
    }
    // A measurement that failed ends the measuring (the rest still loads).
    let measure_more = done.iter().all(|d| d.measured.is_ok());
    done.push(gated::load_and_measure(
        &mut loader,
        &names,
        if measure_more {
            ctx.measurer.as_mut()
        } else {
            None
        },
        &mut ctx.facts.warnings,
    ));
    let measured_us: u64 = done.iter().map(|d| d.measure_us).sum();
    let mut measured = Ok(());
    let mut results = Vec::new();
    for d in done {
        results.extend(d.results);
        measured = measured.and(d.measured);
    }
    let gate_trust = loader.gate.take().map(|g| g.trust);
    ctx.trust = initramfs_trust.or(gate_trust);
    let (refused, bad) = failures(&results);
    let loaded = results
        .iter()
        .filter(|r| r.status == ModStatus::Loaded)
        .count();
    let gate_us: u64 = results.iter().map(|m| m.gate_us).sum();
    ctx.facts.modules = results;
    if !refused.is_empty() {
        return Err(ModulesError::Refused(refused));
    }
    if !bad.is_empty() {
        return Err(ModulesError::LoadFailed(bad));
    }
    measured?;
    let taint = taint::read(&ctx.roots.proc, &allowed)?;
    let detail = format!(
        "{loaded} loaded (gate {} ms), measured in {} ms, taint {:?}",
        gate_us / 1000,
        measured_us / 1000,
        taint.flags
    );
    let unexpected_image: String = taint
        .unexpected
        .chars()
        .filter(|c| taint::IMAGE_TAINTS.contains(*c))
        .collect();
    if !taint.unexpected.is_empty() {
        ctx.facts.warnings.push(format!(
            "unexpected kernel taint {:?} (allowed {allowed:?})",
            taint.unexpected
        ));
    }
    ctx.facts.taint = Some(taint);
    if !unexpected_image.is_empty() {
        return Err(ModulesError::Tainted(unexpected_image));
    }
    Ok(detail)
}

#[cfg(test)]
mod tests;

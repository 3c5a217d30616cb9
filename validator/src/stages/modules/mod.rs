//! Stage `modules`: gate and load the BOM's modules from the initramfs, each after its
//! dependencies, with `finit_module(2)` directly (no kmod binary), through the loader the
//! preflight's root drivers share ([`crate::runtime::modload`]); then measure each loaded
//! module's image digest (from the gate's own read) and check the kernel's taint.
//!
//! On a UEFI boot `efivarfs` is loaded first and mounted, and the firmware's keys decide
//! the gate's trust as they decide the kernel's (`runtime::uefi_keys::module_trust`:
//! under Secure Boot only the built-in keys, `db` and MOK; otherwise the initramfs's
//! certificates plus `db` and MOK).
//!
//! A refused module is reported as `rejected` and the kernel never sees it; a refusal,
//! a failed load or an image taint fails the stage as an image fault.

use std::time::Instant;

use super::{Classified, Context, Fault};
use crate::formats::tpm::measurement::Measurement;
use crate::gate::{self, Gate};
use crate::runtime::measure::MeasureError;
use crate::runtime::modload::{
    load_index, read_config, IndexLoadError, Loader, ModStatus, ModuleReport,
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

/// Measures the loaded modules in plan order: each event is the module's name and the
/// SHA-256 of the image the kernel was given, as the gate computed it in the pass that
/// checked its signature. A loaded module without that digest is an error, never a
/// second read.
fn measure_loaded(ctx: &mut Context) -> Result<(), MeasureError> {
    let loaded: Vec<(String, Option<String>, String)> = ctx
        .facts
        .modules
        .iter()
        .filter(|m| m.status == ModStatus::Loaded)
        .map(|m| {
            (
                m.name.clone(),
                m.sha256.clone(),
                m.options.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (name, sha, options) in loaded {
        let sha = sha.ok_or_else(|| MeasureError::Unmeasurable {
            what: format!("module {name}"),
            why: "the gate recorded no digest of the image the kernel was given".into(),
        })?;
        ctx.measure(
            &Measurement::Module {
                name,
                sha256: sha,
                options,
            },
            None,
        )?;
    }
    Ok(())
}

/// The stage: gate and load the BOM's modules from the initramfs, measure what was
/// loaded (even when the stage fails, so an attestation of a stopped boot still names
/// the modules the kernel runs), then check the kernel's taint.
pub fn run(ctx: &mut Context) -> Result<String, ModulesError> {
    let Some(b) = ctx.bom.as_ref() else {
        return Ok("no BOM: nothing to load".into());
    };
    let mut names: Vec<String> = b.bom.modules.load.iter().map(|m| m.0.clone()).collect();
    let allowed = b.bom.policy.taint_allowed.0.clone();
    let dir = ctx.roots.modules.join(&ctx.release);
    let index = load_index(&dir)?;
    // On a UEFI boot, efivarfs first when the initramfs has it (mkinitramfs packs it):
    // the EFI variables (the firmware's keys for the gate below, Secure Boot for the
    // preflight, the boot counting of systemd-boot for the slot stage).
    let efi = ctx.roots.sys.join("firmware/efi").is_dir();
    let efivarfs_first = efi && index.entries.contains_key(EFIVARFS);
    if efivarfs_first {
        names.retain(|n| n != EFIVARFS);
    }
    let mut loader = Loader::new(&dir, index, &ctx.roots.sys);
    loader.proc_root = Some(ctx.roots.proc.clone());
    // The options modprobe would give: the initramfs's modprobe.d, then the command line.
    loader.options = read_config(&ctx.roots.initramfs, Some(ctx.cmdline_bytes()))?;
    let mut g = Gate::from_initramfs(&ctx.roots.initramfs, &b.bom)?;
    g.policy.module_blacklist = crate::config::cmdline::module_blacklist(&ctx.cmdline);
    log::info!(
        "module gate: {} trusted certificate(s), {} symbol CRCs, vermagic {:?}",
        g.trust.certs.len(),
        g.symvers.as_ref().map_or(0, |s| s.map.len()),
        g.policy.kernel_vermagic.as_deref().unwrap_or("")
    );
    loader.gate = Some(g);
    // On a UEFI boot: efivarfs first (Debian-signed, judged with the built-in keys), then
    // the firmware's keys decide the gate's trust as they decide the kernel's
    // (`runtime::uefi_keys::module_trust`), then the rest. The initramfs's store as loaded
    // stays for the root hash signature (the verity stage): a userspace check of our own,
    // which the kernel's keyrings do not bound.
    let mut results = Vec::new();
    let mut initramfs_trust = None;
    if efi {
        if efivarfs_first {
            results = loader.load_all(&[EFIVARFS.to_string()]);
        }
        crate::sys::mount_efivarfs(&ctx.roots.sys);
        ctx.uefi = crate::runtime::uefi_keys::read(&ctx.roots.sys).into();
        let keys = ctx.uefi_keys();
        if let Some(g) = loader.gate.as_mut() {
            let narrowed = crate::runtime::uefi_keys::module_trust_logged(&g.trust, keys);
            initramfs_trust = Some(std::mem::replace(&mut g.trust, narrowed));
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
        }
    }
    results.extend(loader.load_all(&names));
    let gate_trust = loader.gate.take().map(|g| g.trust);
    ctx.trust = initramfs_trust.or(gate_trust);
    for r in &results {
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
    let loaded = results
        .iter()
        .filter(|r| r.status == ModStatus::Loaded)
        .count();
    let gate_us: u64 = results.iter().map(|m| m.gate_us).sum();
    ctx.facts.modules = results;
    let t = Instant::now();
    let measured = measure_loaded(ctx);
    let measured_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
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

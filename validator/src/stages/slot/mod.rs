//! Stage `slot`: which A/B slot booted, what the boot loader and our record say about the
//! slots, and, once the decision is made ([`act`]), what is written back: the slot marked
//! good, or demoted, and the fallback to the other slot by kexec or reboot ([`fall_back`]).
//!
//! State lives on the ESP, which the stage finds (`validator.esp=`, else the one partition
//! of the EFI System type) and mounts read-write ([`esp`]); what the boot loaders and our
//! record hold, and how they change, is the A/B library [`crate::runtime::slot`] (the
//! operator's `validator slot` and `attest predict` use the same code). This stage keeps
//! what a boot does with it: load it at the start ([`run`]), say whether and where it may
//! fall back ([`fallback_target`], [`no_fallback`], [`over_bound`]), and carry out the
//! decision ([`act`], [`keep_report`], [`prepare_kexec`], [`fall_back`]).
//!
//! The kexec into the other slot is staged by [`kexec`]; errors are [`SlotError`].
//!
//! Missing or unusable state never stops a good boot: the stage records why slot handling
//! is off (a platform fault, in the report) and the boot goes on; only the fallback is then
//! impossible. The decision itself is made by `boot`; this stage only carries it out.
//! Where the state could not be read or written, the FAT driver's kernel lines about the
//! ESP (a broken cluster chain, the file system set read-only) follow the errors.
//!
//! Current limits: two slots, `A` and `B`; the ESP is vfat (its modules must be in the
//! BOM's `modules.load`).

pub mod esp;
pub mod kexec;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Context, Decision, Fault};
use crate::config::bom::{Bootloader, FallbackVia, MarkGood, Slot, SlotName};
use crate::config::layout;
use crate::formats::slotstate::{self, SlotRecord};
use crate::util::fs::read_limited;

use crate::runtime::read_fault;
use crate::runtime::slot::bootable;
pub use crate::runtime::slot::{BootLoader, Previous, Runtime, SlotError, SlotFacts};

impl super::Classified for SlotError {
    fn fault(&self) -> Fault {
        // A broken slot state never blames the image or the hardware.
        Fault::Platform
    }
}

/// A fallback about to happen.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: SlotName,
    pub via: FallbackVia,
    kernel: PathBuf,
    initrd: PathBuf,
    /// The target's Unified Kernel Image, when the ESP holds one: a kexec then loads its
    /// `.linux`, `.initrd` and `.cmdline` from the image, checked again as read.
    uki: Option<PathBuf>,
    cmdline: String,
    /// The kernel and initramfs read and measured for a kexec ([`prepare_kexec`]), or
    /// why they could not be.
    images: Option<Result<kexec::Images, String>>,
}

/// The stage: never fails the boot; what goes wrong is in the facts and the warnings.
pub fn run(ctx: &mut Context) -> Result<String, SlotError> {
    let Some(cfg) = ctx.bom.as_ref().and_then(|b| b.bom.slot.clone()) else {
        return Ok("no [slot] in the BOM: no A/B handling".into());
    };
    let mut facts = SlotFacts {
        bootloader: Some(cfg.bootloader),
        max_boots: cfg.max_boots,
        ..SlotFacts::default()
    };
    match open(ctx, &cfg, &mut facts) {
        Ok(rt) => {
            let detail = format!(
                "slot {} ({}), attempt {}, {} failed boot(s) before this one{}",
                rt.slot,
                describe(&facts.before),
                facts.attempts,
                facts.consecutive_failures,
                facts
                    .previous
                    .as_ref()
                    .map(|p| format!("; fell back from {} ({})", p.slot, p.via))
                    .unwrap_or_default()
            );
            ctx.slot = Some(rt);
            ctx.facts.slot = Some(facts);
            Ok(detail)
        }
        Err(why) => {
            ctx.facts
                .warnings
                .push(format!("slot handling off (platform fault): {why}"));
            facts.error = Some(why.to_string());
            ctx.facts.slot = Some(facts);
            Ok(format!("slot handling off: {why}"))
        }
    }
}

fn describe(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The errors' messages, each once, joined as the report shows them.
fn join(errors: &[SlotError]) -> String {
    crate::util::first_of_each(errors.iter().map(ToString::to_string)).join("; ")
}

/// Finds and mounts the ESP, reads the boot loader's state and our record, and counts
/// this boot.
fn open(ctx: &mut Context, cfg: &Slot, facts: &mut SlotFacts) -> Result<Runtime, SlotError> {
    let slot = ctx
        .args
        .slot
        .as_deref()
        .and_then(SlotName::parse)
        .ok_or(SlotError::NoSlotArg)?;
    facts.booted = Some(slot);
    let device = esp::find(ctx)?;
    facts.esp = Some(device.clone());
    let dir = esp::mount(ctx, &device)?;
    open_dir(ctx, cfg, facts, slot, dir)
}

/// Everything after the mount: the boot loader's state and our record in the mounted
/// ESP `dir`, and this boot counted.
pub(crate) fn open_dir(
    ctx: &mut Context,
    cfg: &Slot,
    facts: &mut SlotFacts,
    slot: SlotName,
    dir: PathBuf,
) -> Result<Runtime, SlotError> {
    let loaded = Runtime::load(cfg, slot, dir, true);
    let mut rt = loaded.runtime;
    let mut problems = loaded.errors;
    facts.before = loaded.view;
    facts.before.extend(rt.loader.firmware_view(&ctx.roots.sys));
    if loaded.created {
        ctx.facts
            .warnings
            .push("slot: created a new state record on the ESP".into());
    }
    if let Some(d) = rt.record.damaged.take() {
        ctx.facts
            .warnings
            .push(format!("slot: {d}: this boot starts a new record"));
    }
    facts.previous = previous(ctx, &rt);
    facts.consecutive_failures = rt.record.state.consecutive_failures;
    rt.over_bound = rt.record.state.consecutive_failures >= cfg.max_boots;
    // Count this boot before anything can go wrong: a crash later in it still counts.
    let (image_id, bom_sha) = (ctx.facts.image_id.clone(), ctx.facts.bom_sha256.clone());
    let state = &mut rt.record.state;
    let rec = state.slots.entry(slot.as_str().to_string()).or_default();
    if rec.bom_sha256 != bom_sha {
        *rec = SlotRecord {
            image_id,
            bom_sha256: bom_sha,
            ..SlotRecord::default()
        };
    }
    rec.attempts = rec.attempts.saturating_add(1);
    facts.attempts = rec.attempts;
    state.consecutive_failures = state.consecutive_failures.saturating_add(1);
    state.last_slot = Some(slot.as_str().to_string());
    if let Err(e) = rt.record.write() {
        problems.push(e);
    }
    if !problems.is_empty() {
        let mut why = join(&problems);
        // A damaged FAT reads EIO (and is then set read-only): its driver's lines say why.
        if let Some(esp) = facts.esp.as_deref() {
            let kernel = read_fault::fat_evidence(&ctx.roots.dev.join("kmsg"), esp);
            if !kernel.is_empty() {
                why = format!("{why}; kernel: {}", kernel.join("; "));
            }
        }
        ctx.facts
            .warnings
            .push(format!("slot state incomplete (platform fault): {why}"));
        facts.error = Some(why);
    }
    Ok(rt)
}

/// The boot that fell back into this one: its report came along (kexec), or our record
/// says the other slot's last boot fell back (reboot).
fn previous(ctx: &Context, rt: &Runtime) -> Option<Previous> {
    let other = rt.slot.other();
    let carried = ctx.roots.initramfs.join(layout::CARRIED_REPORT);
    if let Ok(bytes) = read_limited(&carried, slotstate::FILE_SIZE as u64) {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
            return Some(Previous {
                slot: v
                    .pointer("/slot/booted")
                    .and_then(|x| x.as_str())
                    .unwrap_or(other.as_str())
                    .to_string(),
                via: "kexec".into(),
                image_id: s("image_id"),
                decision: s("decision"),
                fault: s("fault"),
                reason: s("reason"),
                report: Some(v),
            });
        }
    }
    let state = &rt.record.state;
    let rec = state.slots.get(other.as_str())?;
    if state.last_slot.as_deref() != Some(other.as_str())
        || rec.last_decision.as_deref() != Some("fallback")
    {
        return None;
    }
    Some(Previous {
        slot: other.as_str().to_string(),
        via: "reboot".into(),
        image_id: rec.image_id.clone(),
        decision: rec.last_decision.clone(),
        fault: rec.last_fault.clone(),
        reason: rec.last_reason.clone(),
        report: rec.last_report.clone(),
    })
}

/// The slot a fallback would boot, if one may be tried: the boot loader still offers it,
/// our record has not seen its image fail, the bound on failed boots is not reached, and
/// under Secure Boot its kernel would start ([`bootable`]).
pub fn fallback_target(ctx: &Context) -> Option<SlotName> {
    let rt = ctx.slot.as_ref()?;
    if rt.over_bound || !rt.record.ok {
        return None;
    }
    let y = rt.slot.other();
    let offered = rt.loader.offers(y);
    let failed = rt
        .record
        .state
        .slots
        .get(y.as_str())
        .is_some_and(|r| r.good == Some(false));
    if !offered || failed {
        return None;
    }
    target_kernel(ctx, rt, y).refused.is_none().then_some(y)
}

/// Whether slot `y` boots as a Unified Kernel Image: GRUB (the shipped grub.cfg
/// chainloads `/<slot>/linux.efi` when the ESP holds it); systemd-boot boots its BLS
/// entry's kernel whatever else is on the ESP.
fn uses_uki(rt: &Runtime, y: SlotName) -> bool {
    rt.cfg.bootloader == Bootloader::Grub
        && crate::runtime::slot::uki_path(&rt.esp_dir, y)
            .symlink_metadata()
            .is_ok()
}

/// The other slot's kernel check, made once per boot: its Unified Kernel Image when the
/// ESP holds one (what GRUB would chainload, and what a kexec loads), else its kernel.
fn target_kernel<'a>(ctx: &Context, rt: &'a Runtime, y: SlotName) -> &'a bootable::Verdict {
    rt.target_kernel.get_or_init(|| {
        let uki = crate::runtime::slot::uki_path(&rt.esp_dir, y);
        if uses_uki(rt, y) {
            let v = match read_limited(&uki, crate::runtime::slot::UKI_MAX) {
                Ok(image) => bootable::check_uki(
                    ctx.uefi_keys(),
                    &ctx.roots.initramfs,
                    &uki.display().to_string(),
                    &image,
                    boot_chain(rt).as_ref(),
                ),
                Err(e) => bootable::Verdict {
                    refused: Some(format!("slot {y}'s image cannot be read: {e}")),
                    note: String::new(),
                },
            };
            match &v.refused {
                None => log::info!("slot: slot {y}'s image: {}", v.note),
                Some(why) => log::error!("slot: slot {y}'s image: {why} ({})", v.note),
            }
            return v;
        }
        let kernel = crate::runtime::slot::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.kernel, y));
        #[cfg(feature = "test-hooks")]
        if ctx.args.test_skip_kernel_check {
            log::warn!("slot: slot {y}'s kernel not checked (validator.test_skip_kernel_check)");
            return bootable::Verdict::default();
        }
        let v = bootable::check(
            ctx.uefi_keys(),
            &ctx.roots.initramfs,
            &kernel,
            boot_chain(rt).as_ref(),
        );
        match &v.refused {
            None => log::info!("slot: slot {y}'s kernel: {}", v.note),
            Some(why) => log::error!("slot: slot {y}'s kernel: {why} ({})", v.note),
        }
        v
    })
}

/// The chain in front of the slots' kernels after a reboot, when the ESP holds shim and
/// the GRUB it loads (Debian's signed chain: `EFI/BOOT/BOOTX64.EFI` and
/// `EFI/BOOT/grubx64.efi` beside it).
pub(super) fn boot_chain(rt: &Runtime) -> Option<bootable::Chain> {
    if rt.cfg.bootloader != Bootloader::Grub {
        return None;
    }
    let dir = rt.esp_dir.join("EFI/BOOT");
    let chain = bootable::Chain {
        shim: dir.join("BOOTX64.EFI"),
        second_stage: dir.join("grubx64.efi"),
    };
    chain.second_stage.is_file().then_some(chain)
}

/// Why the fallback was given up because the other slot's kernel would not start, when
/// it was ([`fallback_target`] checked it).
pub fn no_fallback(ctx: &Context) -> Option<String> {
    let rt = ctx.slot.as_ref()?;
    let why = rt.target_kernel.get()?.refused.as_ref()?;
    let y = rt.slot.other();
    let what = if uses_uki(rt, y) { "image" } else { "kernel" };
    Some(format!("slot {y}'s {what} {why}"))
}

/// Whether this boot is over the bound of failed boots (the decision then never falls
/// back, so a lost boot-loader state cannot make the node loop).
pub fn over_bound(ctx: &Context) -> bool {
    ctx.slot.as_ref().is_some_and(|rt| rt.over_bound)
}

/// Carries out the decision on the slots: marks this slot good (pass, quarantine),
/// demotes it (image fault), uses a try of the fallback target, gives the other slot back
/// its good mark when the preflight found the fault that made it fall back here to be the
/// hardware's ([`Runtime`]'s `repeated`), and records the decision and
/// `report_json` in our record. Returns the fallback plan when the decision is
/// `Fallback`.
pub fn act(
    ctx: &mut Context,
    decision: Decision,
    fault: Option<Fault>,
    reason: Option<&str>,
    report_json: &str,
) -> Option<Plan> {
    let rt = ctx.slot.as_mut()?;
    // The other slot's boot failed the same devices: its demotion blamed its image for
    // the hardware's fault (found by the preflight, stages::preflight::repeat).
    // Only a demotion made by the boot that fell back here is given back (not one an
    // operator or another fault made).
    let repeated = rt
        .repeated
        .as_ref()
        .filter(|r| r.source == crate::runtime::slot::RepeatSource::FellBack)
        .map(|r| r.slot.clone());
    let x = rt.slot;
    let mut done: Vec<String> = Vec::new();
    let mut problems: Vec<SlotError> = Vec::new();
    let mut note = |r: Result<(), SlotError>, what: String| match r {
        Ok(()) => done.push(what),
        Err(e) => problems.push(e),
    };
    let report: Option<serde_json::Value> = serde_json::from_str(report_json).ok();
    let up = matches!(decision, Decision::Pass | Decision::Quarantine);
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        note(rt.loader.mark(x, true), format!("marked {x} good"));
    } else if up {
        note(Ok(()), format!("left {x}'s try consumed (mark-good later)"));
    }
    let y = x.other();
    let demoted = rt.loader.marked(y) == Some(false)
        || rt
            .record
            .state
            .slots
            .get(y.as_str())
            .is_some_and(|r| r.good == Some(false));
    let undo =
        up && demoted && fault == Some(Fault::Hardware) && repeated.as_deref() == Some(y.as_str());
    if undo {
        note(
            rt.loader.mark(y, true),
            format!("gave {y} back its good mark (the same hardware fault on both slots)"),
        );
    }
    let kexec = decision == Decision::Fallback && rt.cfg.fallback == FallbackVia::Kexec;
    if fault == Some(Fault::Image) && kexec {
        // One write of the boot loader's state where it can.
        note(
            rt.loader.demote_and_use_try(x, y),
            format!("demoted {x}; used a try of {y}"),
        );
    } else if fault == Some(Fault::Image) {
        note(rt.loader.mark(x, false), format!("demoted {x}"));
    } else if kexec {
        note(rt.loader.use_try(y), format!("used a try of {y}"));
    }
    // The boot loader marks the other slot bad while our record holds it good: it was
    // demoted outside the gate (RAUC marks a slot non-bootable before it writes it; an
    // operator's `grub-editenv`). Our verdict was on the image that was there; it is
    // dropped so that the record and the boot loader agree again.
    let outside = !undo && demoted_outside(rt, y);
    if outside {
        note(
            Ok(()),
            format!("dropped our good mark of {y} (the boot loader marks it bad: demoted outside the gate)"),
        );
    }
    let mut plan = None;
    if decision == Decision::Fallback {
        let p = plan_for(rt, y);
        let how = match p.via {
            FallbackVia::Kexec => "kexec",
            FallbackVia::Reboot => "reboot",
        };
        note(Ok(()), format!("falling back to {y} by {how}"));
        plan = Some(p);
    }
    let state = &mut rt.record.state;
    let rec = state.slots.entry(x.as_str().to_string()).or_default();
    rec.last_decision = Some(decision.as_str().to_string());
    rec.last_fault = fault.map(|f| f.as_str().to_string());
    rec.last_reason = reason.map(str::to_string);
    rec.last_report = report;
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        rec.good = Some(true);
        rec.attempts = 0;
        state.consecutive_failures = 0;
    }
    if fault == Some(Fault::Image) {
        rec.good = Some(false);
    }
    if undo || outside {
        let other = state.slots.entry(y.as_str().to_string()).or_default();
        other.good = undo.then_some(true);
        other.attempts = 0;
    }
    note(rt.record.write(), "recorded the decision".into());
    let after = rt.view();
    if let Some(p) = plan.as_mut() {
        p.cmdline = kexec::target_cmdline(ctx, p.target);
    }
    if let Some(f) = ctx.facts.slot.as_mut() {
        f.after = after;
        f.action = Some(done.join("; "));
        // The errors the load already reported (an unreadable grubenv or record) are
        // not repeated.
        let earlier = f.error.take();
        problems.retain(|e| !earlier.as_deref().unwrap_or("").contains(&e.to_string()));
        let parts: Vec<String> = earlier
            .into_iter()
            .chain((!problems.is_empty()).then(|| join(&problems)))
            .collect();
        f.error = (!parts.is_empty()).then(|| parts.join("; "));
    }
    plan
}

/// Whether the boot loader marks slot `y` bad while our record holds it good.
fn demoted_outside(rt: &Runtime, y: SlotName) -> bool {
    rt.loader.marked(y) == Some(false)
        && rt
            .record
            .state
            .slots
            .get(y.as_str())
            .is_some_and(|r| r.good == Some(true))
}

/// The plan of a fallback to slot `y`: its kernel, initramfs and image on the ESP.
fn plan_for(rt: &Runtime, y: SlotName) -> Plan {
    Plan {
        target: y,
        via: rt.cfg.fallback,
        kernel: crate::runtime::slot::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.kernel, y)),
        initrd: crate::runtime::slot::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.initrd, y)),
        uki: uses_uki(rt, y).then(|| crate::runtime::slot::uki_path(&rt.esp_dir, y)),
        cmdline: String::new(),
        images: None,
    }
}

/// Replaces the report in this slot's record with `report` (the finished, quoted
/// report) and writes the record again; a failure is logged (the record keeps the
/// report [`act`] wrote).
pub fn keep_report(ctx: &mut Context, v: serde_json::Value) {
    let Some(rt) = ctx.slot.as_mut() else {
        return;
    };
    let x = rt.slot.as_str().to_string();
    rt.record.state.slots.entry(x).or_default().last_report = Some(v);
    if let Err(e) = rt.record.write() {
        log::warn!("slot: keeping the quoted report: {e}");
    }
}

/// Before the handover: the ESP is synced and unmounted, so that the root mounts a file
/// system nobody holds, and can check it first (`fsck.vfat` through its fstab: a power
/// cut during an update's ESP writes can leave a broken cluster chain). A failure is
/// logged; the root then finds the ESP still mounted at the slot stage's mount point.
pub fn release(ctx: &mut Context) {
    let Some(rt) = ctx.slot.as_ref() else {
        return;
    };
    crate::sys::sync();
    match crate::sys::umount(&rt.esp_dir) {
        Ok(()) => log::info!("slot: ESP synced and unmounted before the handover"),
        Err(e) => log::warn!("slot: the ESP stays mounted: {e}"),
    }
}

/// Before the report is quoted and the boot sealed: a fallback by kexec reads the other
/// slot's kernel and initramfs and measures what it read ([`kexec::prepare`]), so a
/// verifier can tell the kexec'd boot's images as it tells the boot loader's. The same
/// bytes are loaded later ([`fall_back`]).
pub fn prepare_kexec(ctx: &mut Context, plan: &mut Plan) {
    if plan.via == FallbackVia::Kexec {
        plan.images = Some(kexec::prepare(ctx, plan).map_err(|e| e.to_string()));
    }
}

/// Falls back to the plan's slot: the report and the TPM event log go along in an archive
/// appended to its initramfs ([`kexec::stage`]), the ESP is unmounted, then kexec; when
/// the kernel refuses the kexec, the try of the slot used for it is given back (where the
/// loader can: [`BootLoader::give_back_try`]) and the node reboots, so the boot loader
/// picks the slot itself. Never returns.
pub fn fall_back(ctx: &mut Context, plan: &Plan, report_json: &str) -> ! {
    let esp = esp::mountpoint(ctx);
    let t = std::time::Instant::now();
    let staged = match plan.via {
        FallbackVia::Kexec => match &plan.images {
            Some(Ok(images)) => kexec::stage(ctx, plan, images, report_json),
            Some(Err(why)) => Err(SlotError::KexecPrepared(why.clone())),
            None => Err(SlotError::KexecPrepared(
                "not read before the report".into(),
            )),
        },
        FallbackVia::Reboot => Err(SlotError::RebootAsked),
    };
    if plan.via == FallbackVia::Kexec && staged.is_err() {
        if let Some(rt) = ctx.slot.as_mut() {
            match rt.loader.give_back_try(plan.target) {
                Ok(true) => log::info!("slot: gave back the try of {}", plan.target),
                Ok(false) => log::warn!(
                    "slot: the boot loader cannot give back the try of {}",
                    plan.target
                ),
                Err(e) => log::warn!("slot: giving back the try of {}: {e}", plan.target),
            }
        }
    }
    let staging = t.elapsed();
    crate::sys::sync();
    if let Err(e) = crate::sys::umount(&esp) {
        log::warn!("{e}");
    }
    log::info!(
        "slot: staged in {} ms, ESP synced and unmounted in {} ms",
        staging.as_millis(),
        t.elapsed().saturating_sub(staging).as_millis()
    );
    match staged {
        Ok(()) => {
            log::info!("slot: kexec into slot {}", plan.target);
            let e = crate::sys::kexec_reboot();
            log::error!("slot: {e}; rebooting instead");
        }
        Err(why) => log::warn!(
            "slot: no kexec ({why}); rebooting into slot {}",
            plan.target
        ),
    }
    crate::runtime::power::finish(crate::config::cmdline::Action::Reboot)
}

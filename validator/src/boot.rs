//! Layer 11: the boot as PID 1 runs it - the order of the stages and the decision, nothing
//! else. Each stage's body lives in [`crate::stages`] under its report name; a failed
//! stage's error carries its fault class, and the decision reads only that class.
//!
//! The flow: `start`, `measure`, `modules`, `slot` (with `[slot]`), `storage`, `verity`
//! (when the BOM asks for a verified root), `mount`, `critical` (with verity),
//! `preflight`, `handover`. A failed stage stops the flow, except `preflight`: the root is
//! usable whatever it finds, so `handover` still runs and a hardware fault can quarantine.
//! The decision ([`decide`]): no fault, pass; a hardware fault with a usable root,
//! quarantine (boot on, the slot is not burned); a disk that failed reads of this slot's
//! root, fallback to the other slot without demoting this one when one may still be
//! tried (that boot, passing, is then a quarantine: the node runs and is drained); an
//! image fault, fallback to the other slot when one may still be tried, else stop; a platform fault, the BOM's
//! `slot.on_platform_fault` (stop, or quarantine with a usable root); anything else, stop.
//! Then the measurements are finished, the slots updated, the report published
//! ([`crate::report::publish`]: metrics and node labels into the new root, the JSON in
//! `/run`, one short console line), and the boot hands over, falls back (kexec or reboot)
//! or stops. Nothing here returns.

use std::path::Path;
use std::time::Instant;

use crate::config::bom::PlatformPolicy;
use crate::report::{publish, Report, StageReport, StageStatus};
use crate::stages::{self, Classified, Context, Decision, Fault, Roots, Stage};
use crate::sys;

/// Runs one stage: logs, times and records it; on failure the report takes the error's
/// fault class and message. Returns whether the stage passed.
fn stage<E: Classified>(
    ctx: &mut Context,
    report: &mut Report,
    which: Stage,
    f: fn(&mut Context) -> Result<String, E>,
) -> bool {
    // The test hook's whole purpose: the panic policy is tested with a real panic.
    #[cfg(feature = "test-hooks")]
    #[expect(clippy::panic, reason = "the test hook panics on purpose")]
    if ctx.args.test_panic.as_deref() == Some(which.name()) {
        panic!(
            "test panic requested at stage {} (validator.test_panic)",
            which.name()
        );
    }
    let name = which.name();
    log::info!("stage {name}: start");
    let start_us = sys::boottime_us().unwrap_or(0);
    let t = Instant::now();
    let r = f(ctx);
    let duration_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
    sys::reap_zombies();
    let (status, fault, detail) = match r {
        Ok(detail) => (StageStatus::Ok, None, detail),
        Err(e) => {
            let why = e.to_string();
            log::error!("stage {name} failed ({} fault): {why}", e.fault().as_str());
            report.fail(e.fault(), format!("{name}: {why}"));
            (StageStatus::Failed, Some(e.fault()), why)
        }
    };
    report.stages.push(StageReport {
        name: which,
        status,
        start_us,
        duration_us,
        fault,
        detail: Some(detail),
    });
    fault.is_none()
}

/// The stages in order; stops at the first failure. The `slot` stage runs whatever failed
/// after `start`: the decision needs the slot state to fall back.
fn run_stages(ctx: &mut Context, report: &mut Report) {
    use stages::*;
    let verity = |ctx: &Context| ctx.verity_cfg().is_some();
    let slots = |ctx: &Context| ctx.bom.as_ref().is_some_and(|b| b.bom.slot.is_some());
    let started = stage(ctx, report, Stage::Start, start::run);
    let _ = started
        && stage(ctx, report, Stage::Measure, measure::run)
        && stage(ctx, report, Stage::Modules, modules::run)
        && (!slots(ctx) || stage(ctx, report, Stage::Slot, slot::run))
        && stage(ctx, report, Stage::Storage, storage::run)
        && (!verity(ctx) || stage(ctx, report, Stage::Verity, verity::run))
        && stage(ctx, report, Stage::Mount, mount::run)
        && (!verity(ctx) || stage(ctx, report, Stage::Critical, critical::run))
        && {
            // The root is usable whatever the preflight finds (its hardware faults
            // quarantine, boot on): the handover checks still run.
            stage(ctx, report, Stage::Preflight, preflight::run);
            true
        }
        && stage(ctx, report, Stage::Handover, handover::run);
    if started && slots(ctx) && ctx.facts.slot.is_none() {
        stage(ctx, report, Stage::Slot, slot::run);
    }
}

/// The decision, from the first failure's fault class alone.
pub fn decide(report: &Report, ctx: &Context) -> Decision {
    let root_usable = report
        .stages
        .iter()
        .any(|s| s.name == Stage::Handover && s.status == StageStatus::Ok);
    let platform = ctx
        .bom
        .as_ref()
        .and_then(|b| b.bom.slot.as_ref())
        .map(|s| s.on_platform_fault)
        .unwrap_or_default();
    match report.fault {
        None => Decision::Pass,
        Some(Fault::Hardware) if root_usable => Decision::Quarantine,
        // The disk failed reads of this slot's root: the other slot lies elsewhere on it.
        // Fall back without demoting this slot (not the image's fault).
        Some(Fault::Hardware)
            if disk_read_fault(ctx) && stages::slot::fallback_target(ctx).is_some() =>
        {
            Decision::Fallback
        }
        Some(Fault::Platform) if root_usable && platform == PlatformPolicy::Quarantine => {
            Decision::Quarantine
        }
        Some(Fault::Image) if stages::slot::fallback_target(ctx).is_some() => Decision::Fallback,
        Some(_) => Decision::Stop,
    }
}

/// Whether this boot's root could not be read because the disk failed the reads
/// (`runtime::read_fault`): a fault of this slot's sectors, not of the node's boot.
fn disk_read_fault(ctx: &Context) -> bool {
    ctx.facts
        .verity
        .as_ref()
        .and_then(|v| v.read_fault.as_ref())
        .is_some_and(|f| f.cause == crate::runtime::read_fault::Cause::Disk)
}

/// A boot that passes after the other slot fell back into it for a hardware fault (its
/// disk failed reads) is a quarantine: the node runs, and the fleet drains it. Returns
/// the reason.
fn entered_for_hardware(ctx: &Context) -> Option<String> {
    let p = ctx.facts.slot.as_ref()?.previous.as_ref()?;
    (p.decision.as_deref() == Some("fallback") && p.fault.as_deref() == Some("hardware")).then(
        || {
            format!(
                "slot: slot {} fell back here for a hardware fault: {}",
                p.slot,
                p.reason.as_deref().unwrap_or("(no reason kept)")
            )
        },
    )
}

/// Runs the whole boot as PID 1. Never returns.
pub fn run_pid1() -> ! {
    let start = sys::boottime_us().unwrap_or(0);
    let api_errs = stages::start::mount_api_filesystems(Path::new("/"));
    sys::kmsg::init(log::LevelFilter::Info);
    // Keep our records: the default kmsg rate limit would drop most of them.
    if let Err(e) = std::fs::write("/proc/sys/kernel/printk_devkmsg", "on\n") {
        log::warn!("/proc/sys/kernel/printk_devkmsg: {e}");
    }
    log::info!("validator {} starting as PID 1", env!("CARGO_PKG_VERSION"));
    let mut ctx = Context::new(Roots::default());
    let mut report = Report::new(start);
    report.warnings = api_errs.iter().map(ToString::to_string).collect();
    run_stages(&mut ctx, &mut report);
    let mut decision = decide(&report, &ctx);
    if decision == Decision::Pass {
        if let Some(why) = entered_for_hardware(&ctx) {
            log::warn!("{why}: quarantine");
            report.fault = Some(Fault::Hardware);
            report.reason = Some(why);
            decision = Decision::Quarantine;
        }
    }
    if decision == Decision::Stop && report.fault == Some(Fault::Image) {
        // The other slot was not taken because its kernel would not start: say so.
        if let Some(why) = stages::slot::no_fallback(&ctx) {
            if let Some(r) = report.reason.as_mut() {
                r.push_str(&format!("; no fallback: {why}"));
            }
        }
    }
    if let Err(e) = stages::measure::finish(&mut ctx, decision) {
        report.fail(e.fault(), format!("{}: {e}", Stage::Handover.name()));
        decision = Decision::Stop;
    }
    report.absorb(&ctx.facts);
    report.decision = decision;
    publish::seal(&mut report, &ctx.roots.proc);
    let (fault, reason) = (report.fault, report.reason.clone());
    let mut plan = stages::slot::act(
        &mut ctx,
        decision,
        fault,
        reason.as_deref(),
        &report.to_json(),
    );
    if let Some(p) = plan.as_mut() {
        stages::slot::prepare_kexec(&mut ctx, p);
    }
    report.absorb(&ctx.facts);
    publish::emit(&mut ctx, &mut report);
    match (decision, plan) {
        (Decision::Pass | Decision::Quarantine, _) => {
            stages::slot::release(&mut ctx);
            let err = stages::handover::switch_root(
                &ctx.roots.new_root,
                &ctx.args.init,
                &ctx.args.init_args,
            );
            // Past this point the old root may be gone; say what happened and stop.
            report.fail(err.fault(), format!("{}: {err}", Stage::Handover.name()));
            report.decision = Decision::Stop;
            publish::emit(&mut ctx, &mut report);
        }
        (Decision::Fallback, Some(plan)) => {
            stages::slot::fall_back(&mut ctx, &plan, &report.to_json())
        }
        _ => {}
    }
    // A stop with slots never reboots into the same failure: the boot loader could loop.
    let action = match (ctx.slot.is_some(), ctx.args.on_stop) {
        (true, crate::config::cmdline::Action::Reboot) => crate::config::cmdline::Action::Halt,
        (_, a) => a,
    };
    log::error!("boot stopped; {action:?}");
    crate::runtime::power::finish(action)
}

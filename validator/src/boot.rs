//! Layer 8: the boot as PID 1 runs it - the order of the stages and the decision, nothing
//! else. Each stage's body lives in [`crate::stages`] under its report name; a failed
//! stage's error carries its fault class, and the decision reads only that.
//!
//! The flow: `start`, `measure`, `modules`, `storage`, `verity` (when the BOM asks for a
//! verified root), `mount`, `critical` (with verity), `handover`. A failed stage stops the
//! flow; the measurements are finished and the report is printed and written either way;
//! a pass hands over with `switch_root`, a stop ends in the command line's
//! `validator.on_stop` action. Nothing here returns to the caller.

use std::path::Path;
use std::time::Instant;

use crate::report::{Decision, Report, StageReport, StageStatus};
use crate::stages::{self, Classified, Context, Roots, Stage};
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
    #[allow(clippy::panic)]
    if ctx.args.test_panic.as_deref() == Some(which.name()) {
        panic!(
            "test panic requested at stage {} (validator.test_panic)",
            which.name()
        );
    }
    let name = which.name();
    log::info!("stage {name}: start");
    let t = Instant::now();
    let r = f(ctx);
    let duration_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
    sys::reap_zombies();
    let (status, detail, ok) = match r {
        Ok(detail) => (StageStatus::Ok, detail, true),
        Err(e) => {
            let why = e.to_string();
            log::error!("stage {name} failed ({} fault): {why}", e.fault().as_str());
            report.fail(e.fault(), format!("{name}: {why}"));
            (StageStatus::Failed, why, false)
        }
    };
    report.stages.push(StageReport {
        name: which,
        status,
        duration_us,
        detail: Some(detail),
    });
    ok
}

/// The stages in order; stops at the first failure. Returns whether all passed.
fn run_stages(ctx: &mut Context, report: &mut Report) -> bool {
    use stages::*;
    let verity = |ctx: &Context| ctx.verity_cfg().is_some();
    stage(ctx, report, Stage::Start, start::run)
        && stage(ctx, report, Stage::Measure, measure::run)
        && stage(ctx, report, Stage::Modules, modules::run)
        && stage(ctx, report, Stage::Storage, storage::run)
        && (!verity(ctx) || stage(ctx, report, Stage::Verity, verity::run))
        && stage(ctx, report, Stage::Mount, mount::run)
        && (!verity(ctx) || stage(ctx, report, Stage::Critical, critical::run))
        && stage(ctx, report, Stage::Handover, handover::run)
}

/// The decision: every stage passed and nothing failed since.
fn decide(report: &Report) -> Decision {
    match report.fault {
        None => Decision::Pass,
        Some(_) => Decision::Stop,
    }
}

/// Prints the report line on the console (one write) and writes the JSON to `/run`.
fn emit(ctx: &Context, report: &mut Report) {
    report.boottime_report_us = sys::boottime_us().unwrap_or(report.boottime_start_us);
    let path = ctx.roots.run.join("validator/report.json");
    let json = format!("{}\n", report.to_json());
    if let Err(e) = crate::util::fs::write_atomic(&path, json.as_bytes()) {
        log::error!("cannot write {}: {e}", path.display());
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out.write_all(report.console_line().as_bytes()).is_err() || out.flush().is_err() {
        log::error!("cannot write the report to the console");
    }
    log::info!(
        "decision: {:?} ({})",
        report.decision,
        report.reason.as_deref().unwrap_or("all stages passed")
    );
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
    log::info!(
        "validator {} starting as PID 1 (at {start} us)",
        env!("CARGO_PKG_VERSION")
    );
    let mut ctx = Context::new(Roots::default());
    let mut report = Report::new(start);
    report.warnings = api_errs.iter().map(ToString::to_string).collect();
    run_stages(&mut ctx, &mut report);
    let pass = decide(&report) == Decision::Pass;
    if let Err(e) = stages::measure::finish(&mut ctx, pass) {
        report.fail(e.fault(), format!("{}: {e}", Stage::Handover.name()));
    }
    report.absorb(&ctx.facts);
    report.decision = decide(&report);
    if report.decision == Decision::Pass {
        emit(&ctx, &mut report);
        let err =
            stages::handover::switch_root(&ctx.roots.new_root, &ctx.args.init, &ctx.args.init_args);
        // Past this point the old root may be gone; say what happened and stop.
        report.fail(err.fault(), format!("{}: {err}", Stage::Handover.name()));
    }
    emit(&ctx, &mut report);
    let action = ctx.args.on_stop;
    log::error!("boot stopped; {action:?}");
    stages::handover::finish(action)
}

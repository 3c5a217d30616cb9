//! The report's flat list of checks, derived from what each stage contributed.
//!
//! Contract: [`derive`](fn@derive) is a pure function of the report's other fields, so it gives the
//! same list in the init and in `validator report` (also for a v1 report). Each stage
//! contributes, in run order:
//! - the stage as a whole: check `<stage>` (`ok` pass, `failed` fail with the stage's
//!   fault class, `skipped` skip), timed;
//! - `start`: nothing more; `measure`: `tpm` (present and answering; a failure with a
//!   required TPM is a platform fault, without one a warning);
//! - `modules`: `module/<name>` per module (loaded, already loaded or built in: pass;
//!   refused by the gate or the kernel: fail, image fault, a soft dependency only a
//!   warning; not attempted: skip), timed; `taint` (letters the BOM does not allow: fail,
//!   image fault);
//! - `slot`: `slot/state` (slot handling off or incomplete: warning, platform fault);
//! - `critical`: `critical/<path>` per file read through verity (image fault);
//! - `preflight`: `preflight/<check>` per check of the stage (pass, warn, fail with its
//!   fault class, skip), and `root-module/<name>` per driver it gated and loaded from the
//!   root.
//!
//! Names are unique within a report.

use super::schema::{Check, CheckStatus, Report, StageStatus};
use crate::runtime::modload::ModStatus;
use crate::stages::{Fault, Stage};

fn check(name: String, stage: Stage, status: CheckStatus) -> Check {
    Check {
        name,
        stage,
        status,
        fault: None,
        detail: None,
        duration_us: None,
    }
}

/// Every check of the report, stage by stage in run order.
pub fn derive(r: &Report) -> Vec<Check> {
    let mut out = Vec::new();
    for s in &r.stages {
        let mut c = check(
            s.name.name().to_string(),
            s.name,
            match s.status {
                StageStatus::Ok => CheckStatus::Pass,
                StageStatus::Failed => CheckStatus::Fail,
                StageStatus::Skipped => CheckStatus::Skip,
            },
        );
        c.fault = match (s.status, s.fault) {
            (StageStatus::Failed, Some(f)) => Some(f),
            // A v1 report has no fault per stage: the failed stage is the first failure.
            (StageStatus::Failed, None) => r.fault,
            _ => None,
        };
        c.detail.clone_from(&s.detail);
        c.duration_us = Some(s.duration_us);
        out.push(c);
        match s.name {
            Stage::Measure => tpm(r, &mut out),
            Stage::Modules => modules(r, &mut out),
            Stage::Slot => slot(r, &mut out),
            Stage::Critical => critical(r, &mut out),
            Stage::Preflight => preflight(r, &mut out),
            _ => {}
        }
    }
    out
}

fn tpm(r: &Report, out: &mut Vec<Check>) {
    let Some(t) = &r.tpm else { return };
    let ok = t.present && t.failure.is_none();
    let mut c = check("tpm".into(), Stage::Measure, CheckStatus::Pass);
    if !ok {
        c.status = if t.required {
            CheckStatus::Fail
        } else {
            CheckStatus::Warn
        };
        c.fault = Some(Fault::Platform);
    }
    c.detail = Some(match (&t.failure, &t.device) {
        (Some(f), _) => f.clone(),
        (None, Some(d)) if t.present => format!(
            "{d}: {} event(s) in {} bank(s), {} command(s)",
            t.events,
            t.banks.len(),
            t.commands
        ),
        _ => "no TPM".into(),
    });
    c.duration_us = Some(t.time_us);
    out.push(c);
}

fn modules(r: &Report, out: &mut Vec<Check>) {
    for m in &r.modules {
        let status = match m.status {
            ModStatus::Loaded | ModStatus::AlreadyLoaded | ModStatus::Builtin => CheckStatus::Pass,
            ModStatus::Failed | ModStatus::Rejected if m.softdep => CheckStatus::Warn,
            ModStatus::Failed | ModStatus::Rejected => CheckStatus::Fail,
            ModStatus::Skipped => CheckStatus::Skip,
        };
        let mut c = check(format!("module/{}", m.name), Stage::Modules, status);
        if matches!(status, CheckStatus::Fail | CheckStatus::Warn) {
            c.fault = Some(Fault::Image);
        }
        c.detail = match (&m.message, &m.errno) {
            (Some(msg), _) => Some(msg.clone()),
            (None, Some(e)) => Some(e.clone()),
            (None, None) => Some(
                serde_json::to_value(m.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            ),
        };
        if m.duration_us > 0 {
            c.duration_us = Some(m.duration_us);
        }
        out.push(c);
    }
    if let Some(t) = &r.taint {
        let mut c = check("taint".into(), Stage::Modules, CheckStatus::Pass);
        if !t.unexpected.is_empty() {
            c.status = CheckStatus::Fail;
            c.fault = Some(Fault::Image);
        }
        c.detail = Some(if t.flags.is_empty() {
            "not tainted".into()
        } else {
            format!("tainted {} (not allowed: {:?})", t.flags, t.unexpected)
        });
        out.push(c);
    }
}

fn slot(r: &Report, out: &mut Vec<Check>) {
    let Some(s) = &r.slot else { return };
    let mut c = check("slot/state".into(), Stage::Slot, CheckStatus::Pass);
    match &s.error {
        Some(e) => {
            c.status = CheckStatus::Warn;
            c.fault = Some(Fault::Platform);
            c.detail = Some(e.clone());
        }
        None => c.detail = s.action.clone(),
    }
    out.push(c);
}

fn critical(r: &Report, out: &mut Vec<Check>) {
    let Some(v) = &r.verity else { return };
    for f in &v.critical_files {
        let mut c = check(
            format!("critical/{}", f.path),
            Stage::Critical,
            CheckStatus::Pass,
        );
        if !f.ok {
            c.status = CheckStatus::Fail;
            c.fault = Some(Fault::Image);
        }
        c.detail = Some(match &f.error {
            Some(e) => e.clone(),
            None => format!("{} bytes read through verity", f.bytes),
        });
        out.push(c);
    }
}

fn preflight(r: &Report, out: &mut Vec<Check>) {
    let Some(p) = &r.preflight else { return };
    for c in &p.checks {
        let mut k = check(format!("preflight/{}", c.name), Stage::Preflight, c.status);
        k.fault = c.fault;
        k.detail = Some(c.detail.clone());
        out.push(k);
    }
    for m in &p.modules {
        let status = match m.status {
            ModStatus::Loaded | ModStatus::AlreadyLoaded | ModStatus::Builtin => CheckStatus::Pass,
            ModStatus::Skipped => CheckStatus::Skip,
            ModStatus::Failed | ModStatus::Rejected => CheckStatus::Fail,
        };
        let mut k = check(format!("root-module/{}", m.name), Stage::Preflight, status);
        if status == CheckStatus::Fail {
            k.fault = Some(Fault::Image);
        }
        k.detail.clone_from(&m.message);
        k.duration_us = Some(m.duration_us);
        out.push(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::schema::StageReport;
    use crate::runtime::modload::ModuleReport;

    fn module(name: &str, status: ModStatus, softdep: bool) -> ModuleReport {
        let mut m: ModuleReport = serde_json::from_value(serde_json::json!({
            "name": name, "status": status, "duration_us": 7
        }))
        .unwrap();
        m.softdep = softdep;
        m
    }

    #[test]
    fn stages_and_modules_become_checks() {
        let mut r = Report::new(0);
        r.stages = vec![
            StageReport {
                name: Stage::Start,
                status: StageStatus::Ok,
                start_us: 1,
                duration_us: 2,
                fault: None,
                detail: Some("bom x".into()),
            },
            StageReport {
                name: Stage::Modules,
                status: StageStatus::Failed,
                start_us: 3,
                duration_us: 4,
                fault: Some(Fault::Image),
                detail: Some("module gate refused: b".into()),
            },
        ];
        r.modules = vec![
            module("a", ModStatus::Loaded, false),
            module("b", ModStatus::Rejected, false),
            module("c", ModStatus::Failed, true),
            module("d", ModStatus::Skipped, false),
            module("e", ModStatus::Builtin, false),
        ];
        let c = derive(&r);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["start", "modules", "module/a", "module/b", "module/c", "module/d", "module/e"]
        );
        let by = |n: &str| c.iter().find(|c| c.name == n).unwrap();
        assert_eq!(
            (by("modules").status, by("modules").fault),
            (CheckStatus::Fail, Some(Fault::Image))
        );
        assert_eq!(by("modules").duration_us, Some(4));
        assert_eq!(by("module/a").status, CheckStatus::Pass);
        assert_eq!(
            (by("module/b").status, by("module/b").fault),
            (CheckStatus::Fail, Some(Fault::Image))
        );
        assert_eq!(
            by("module/c").status,
            CheckStatus::Warn,
            "a soft dependency"
        );
        assert_eq!(
            (by("module/d").status, by("module/d").fault),
            (CheckStatus::Skip, None)
        );
        assert_eq!(by("module/e").detail.as_deref(), Some("builtin"));
        assert_eq!(by("start").fault, None);
    }
}

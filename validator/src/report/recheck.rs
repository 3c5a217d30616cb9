//! The live re-check (`validator recheck`, run by the shipped `validator-recheck.timer`):
//! the node's state now, from the boot's report and the preflight run again on the
//! running node.
//!
//! Contract: [`live`] is pure. From the boot's report (which stays as it was written: the
//! quoted one) and a preflight report made now, it gives the report of the node as it is
//! now:
//! - the preflight's checks and facts are the new ones, with the root drivers the boot
//!   gated and loaded, and its `root-modules` checks, kept (a re-check loads nothing, so a
//!   driver refused at boot still fails); the preflight stage is `ok`, or
//!   `failed` with the fault class the new checks decide;
//! - a fault the boot moved to the devices because both slots showed it
//!   (`preflight.repeated`) stays the devices' while the same check fails on the same
//!   devices (`stages::preflight::repeat::carry`), and the finding is kept;
//! - the decision is `quarantine` when the new preflight fails (whatever its fault class:
//!   a running node cannot fall back) or when a stage other than the preflight failed at
//!   boot (a quarantine the preflight did not raise is not the preflight's to clear), and
//!   `pass` otherwise; fault and reason follow the same rule;
//! - the derived checks and the GPU counts follow from the new facts; the quote is left
//!   out (it vouches for the boot's report only); [`Recheck`] says when this was and what
//!   the boot had decided.
//!
//! Only a boot that went on (pass, quarantine) can be re-checked ([`RecheckError`]).
//!
//! Limits: the checks the preflight stage makes are re-run; the modules, the verified
//! root and the measurements are the boot's and are not judged again.

use super::schema::{Recheck, Report, StageReport, StageStatus};
use crate::stages::preflight::{drivers, PreflightReport};
use crate::stages::{Decision, Stage};

/// Why a boot's report cannot be re-checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecheckError {
    /// The boot did not hand over to a root (fallback, stop): there is no running node.
    #[error("the boot's decision was {0}: only a boot that went on (pass, quarantine) can be re-checked")]
    NotRunning(&'static str),
    /// The report is itself a re-check's.
    #[error("the report is a re-check's, not a boot's (its recheck field is set)")]
    NotABoot,
}

/// The node's report now: `boot` re-judged with `now`, the preflight made at `at_unix_s`
/// (see the module's documentation).
pub fn live(boot: &Report, now: PreflightReport, at_unix_s: u64) -> Result<Report, RecheckError> {
    if !boot.decision.hands_over() {
        return Err(RecheckError::NotRunning(boot.decision.as_str()));
    }
    if boot.recheck.is_some() {
        return Err(RecheckError::NotABoot);
    }
    let mut r = boot.clone();
    let mut pre = now;
    if let Some(b) = &boot.preflight {
        pre.modules.clone_from(&b.modules);
        // The boot's verdict on the drivers it gated and loaded stands (nothing is loaded
        // again), before the checks made now, as in the boot.
        let kept = b
            .checks
            .iter()
            .filter(|c| c.name.starts_with(drivers::CHECK))
            .cloned();
        pre.checks.splice(0..0, kept);
    }
    drivers::attribute_no_device(&mut pre);
    // A fault the boot found on both slots' devices stays the devices' while the same
    // check fails on the same devices.
    if let Some(rep) = boot.preflight.as_ref().and_then(|b| b.repeated.as_ref()) {
        crate::stages::preflight::repeat::carry(&mut pre, rep);
    }
    let decided = pre
        .decide()
        .map(|(f, c)| (f, format!("preflight: {}: {}", c.name, c.detail)));
    let stage = StageReport {
        name: Stage::Preflight,
        status: if decided.is_some() {
            StageStatus::Failed
        } else {
            StageStatus::Ok
        },
        start_us: 0,
        duration_us: 0,
        fault: decided.as_ref().map(|d| d.0),
        detail: Some(pre.summary()),
    };
    match r.stages.iter_mut().find(|s| s.name == Stage::Preflight) {
        Some(s) => {
            s.status = stage.status;
            s.fault = stage.fault;
            s.detail = stage.detail;
        }
        None => r.stages.push(stage),
    }
    let other_failed = boot
        .stages
        .iter()
        .find(|s| s.name != Stage::Preflight && s.status == StageStatus::Failed);
    (r.decision, r.fault, r.reason) = match (&decided, other_failed) {
        (Some((f, why)), _) => (Decision::Quarantine, Some(*f), Some(why.clone())),
        (None, Some(_)) => (boot.decision, boot.fault, boot.reason.clone()),
        (None, None) => (Decision::Pass, None, None),
    };
    r.count_gpus(&pre);
    r.preflight = Some(pre);
    r.attestation = None;
    r.recheck = Some(Recheck {
        at_unix_s,
        boot_decision: boot.decision,
        boot_fault: boot.fault,
        boot_reason: boot.reason.clone(),
    });
    r.checks = super::checks::derive(&r);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::preflight::Check;
    use crate::stages::Fault;

    fn boot(decision: Decision, failed: Option<(Stage, Fault)>) -> Report {
        let mut r = Report::new(1);
        r.decision = decision;
        for name in [Stage::Modules, Stage::Preflight] {
            let f = failed.filter(|(s, _)| *s == name);
            r.stages.push(StageReport {
                name,
                status: if f.is_some() {
                    StageStatus::Failed
                } else {
                    StageStatus::Ok
                },
                start_us: 5,
                duration_us: 7,
                fault: f.map(|x| x.1),
                detail: None,
            });
            if let Some((s, fault)) = f {
                r.fault = Some(fault);
                r.reason = Some(format!("{}: it failed", s.name()));
            }
        }
        r.preflight = Some(PreflightReport {
            checks: vec![Check::fail(
                "mlx5-ports",
                Fault::Hardware,
                "mlx5_0 port 1 Down",
            )],
            ..Default::default()
        });
        r
    }

    fn now(checks: Vec<Check>) -> PreflightReport {
        PreflightReport {
            checks,
            ..Default::default()
        }
    }

    /// A port down at boot and up now: the quarantine clears, and the boot's verdict is
    /// kept beside the new one.
    #[test]
    fn a_recovered_port_clears_the_preflights_quarantine() {
        let b = boot(
            Decision::Quarantine,
            Some((Stage::Preflight, Fault::Hardware)),
        );
        let r = live(
            &b,
            now(vec![Check::pass("mlx5-ports", "2 ports Active")]),
            9,
        )
        .unwrap();
        assert_eq!(
            (r.decision, r.fault, r.reason.as_deref()),
            (Decision::Pass, None, None)
        );
        let s = r
            .stages
            .iter()
            .find(|s| s.name == Stage::Preflight)
            .unwrap();
        assert_eq!((s.status, s.fault), (StageStatus::Ok, None));
        let c = r.check("preflight/mlx5-ports").unwrap();
        assert_eq!(c.status, crate::report::CheckStatus::Pass);
        let k = r.recheck.as_ref().unwrap();
        assert_eq!((k.at_unix_s, k.boot_decision), (9, Decision::Quarantine));
        assert_eq!(k.boot_fault, Some(Fault::Hardware));
        assert!(r.attestation.is_none());
        // A re-check is not re-checked.
        assert_eq!(live(&r, now(vec![]), 10), Err(RecheckError::NotABoot));
    }

    /// A GPU fault the boot found on both slots (quarantine, hardware) is still the
    /// devices' at the re-check while the same GPU is unseen; `preflight.repeated` stays.
    #[test]
    fn a_fault_both_slots_showed_stays_the_hardwares() {
        use crate::stages::preflight::nvidia::GpuFact;
        let gpu = |a: &str, seen: bool| GpuFact {
            address: a.into(),
            pci_id: "10de:2335".into(),
            driver: seen.then(|| "nvidia".to_string()),
            model: None,
            minor: None,
            excluded: false,
            vbios: None,
        };
        let unseen = || {
            let mut p = now(vec![Check::fail("gpu-driver", Fault::Image, "not seen")
                .with_devices(vec!["0000:3a:00.0".into()])]);
            p.gpus = vec![gpu("0000:18:00.0", true), gpu("0000:3a:00.0", false)];
            p
        };
        let found = crate::stages::preflight::repeat::Repeated {
            slot: "A".into(),
            check: "gpu-driver".into(),
            devices: vec!["0000:3a:00.0".into()],
            source: crate::stages::preflight::repeat::RepeatSource::FellBack,
        };
        let mut b = boot(
            Decision::Quarantine,
            Some((Stage::Preflight, Fault::Hardware)),
        );
        let mut p = unseen();
        p.repeated = Some(found.clone());
        b.preflight = Some(p);
        let r = live(&b, unseen(), 9).unwrap();
        assert_eq!(
            (r.decision, r.fault),
            (Decision::Quarantine, Some(Fault::Hardware))
        );
        assert_eq!(r.preflight.as_ref().unwrap().repeated, Some(found));
    }

    /// A fault that appears after a passing boot raises a quarantine, of its own class.
    #[test]
    fn a_fault_that_appears_raises_a_quarantine() {
        let mut b = boot(Decision::Pass, None);
        b.preflight = Some(now(vec![Check::pass("gpus", "8 of 8")]));
        let r = live(
            &b,
            now(vec![Check::fail("gpus", Fault::Hardware, "7 of 8")]),
            3,
        )
        .unwrap();
        assert_eq!(r.decision, Decision::Quarantine);
        assert_eq!(r.fault, Some(Fault::Hardware));
        assert_eq!(r.reason.as_deref(), Some("preflight: gpus: 7 of 8"));
        let r = live(
            &b,
            now(vec![Check::fail("driver-version", Fault::Image, "570")]),
            3,
        )
        .unwrap();
        assert_eq!(
            (r.decision, r.fault),
            (Decision::Quarantine, Some(Fault::Image))
        );
    }

    /// A quarantine another stage raised stays, whatever the preflight finds now.
    #[test]
    fn a_quarantine_of_another_stage_stays() {
        let b = boot(
            Decision::Quarantine,
            Some((Stage::Modules, Fault::Platform)),
        );
        let r = live(&b, now(vec![Check::pass("mlx5-ports", "up")]), 3).unwrap();
        assert_eq!(r.decision, Decision::Quarantine);
        assert_eq!(r.fault, Some(Fault::Platform));
        assert_eq!(r.reason, b.reason);
    }

    /// A boot that fell back or stopped has no running node to re-check.
    #[test]
    fn only_a_boot_that_went_on_is_rechecked() {
        for d in [Decision::Fallback, Decision::Stop] {
            let b = boot(d, Some((Stage::Preflight, Fault::Image)));
            assert_eq!(
                live(&b, now(vec![]), 1),
                Err(RecheckError::NotRunning(d.as_str()))
            );
        }
    }
}

//! How a run ended, read from its console.
//!
//! Contract: [`classify`] reads console text: the root's init marker
//! ([`crate::rootfs::MARKER`]) means [`Verdict::RootInitReached`], else a kernel panic
//! line means [`Verdict::KernelPanic`], else the validator's console report line means
//! its [`Verdict::Decision`], else the timeout or QEMU's exit status; it also returns the
//! reports found ([`crate::reportcheck`]) and the marker line. [`Outcome`] is one boot's
//! typed result with its console and log path, and the helpers tests read it with.
//!
//! Limits: the kinds a run's end alone tells ([`Verdict::Rebooted`],
//! [`Verdict::Killed`]) are set by the caller (`boots.rs`), not by [`classify`];
//! timestamps are the kernel's own console stamps (`[    1.5]`), not the host's.

use std::path::PathBuf;
use std::time::Duration;

use crate::rootfs::MARKER;
use validator::report::{Decision, Report};

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The real root's init printed its marker (after our `switch_root`).
    RootInitReached,
    /// The validator printed its report and stopped the boot ("pass" that never reached the
    /// root shows up here too).
    Decision(Decision),
    /// The kernel panicked (the line after "Kernel panic - not syncing").
    KernelPanic(String),
    /// Still running at the timeout.
    Timeout,
    /// QEMU ended without any of the above.
    Exited(Option<i32>),
    /// The guest reset itself (a reboot that [`run_boots`](super::run_boots) followed)
    /// without any of the above.
    Rebooted,
    /// Killed by the harness ([`KillAt`](super::KillAt)) before any of the above.
    Killed,
}

/// The typed outcome of a run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub verdict: Verdict,
    /// The validator's full report (printed by the test bed's init), checked against the
    /// schema and the console line ([`crate::reportcheck`]).
    pub report: Option<Report>,
    /// The report as the root's init found it in `/run/validator/report.json`.
    pub root_report: Option<Report>,
    /// The root's init marker line.
    pub marker: Option<String>,
    pub console: String,
    pub log_path: PathBuf,
    pub wall: Duration,
    pub timed_out: bool,
}

impl Outcome {
    /// For the harness's own unit tests: a run that ended with `verdict` and printed
    /// `console`, nothing else known.
    #[cfg(test)]
    pub(crate) fn of_console(verdict: Verdict, console: &str) -> Outcome {
        Outcome {
            verdict,
            report: None,
            root_report: None,
            marker: None,
            console: console.into(),
            log_path: PathBuf::new(),
            wall: Duration::ZERO,
            timed_out: false,
        }
    }

    /// Seconds since boot printed by the root's init (`uptime=`).
    pub fn root_uptime(&self) -> Option<f64> {
        self.marker
            .as_ref()?
            .split_whitespace()
            .find_map(|w| w.strip_prefix("uptime=")?.parse().ok())
    }

    /// The kernel's timestamp (seconds) of the first console line containing `needle`.
    pub fn kernel_time_of(&self, needle: &str) -> Option<f64> {
        self.console
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| {
                let l = l.trim_start();
                let inner = l.strip_prefix('[')?.split(']').next()?;
                inner.trim().parse().ok()
            })
    }

    /// For tests: the report of a boot the validator stopped; panics on any other end.
    pub fn stopped(&self) -> &Report {
        assert_eq!(
            self.verdict,
            Verdict::Decision(Decision::Stop),
            "{}",
            self.describe()
        );
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report: {}", self.describe()))
    }

    /// For tests: the report of a boot that reached the real root's init; panics on any
    /// other end.
    pub fn reached_root(&self) -> &Report {
        assert_eq!(
            self.verdict,
            Verdict::RootInitReached,
            "{}",
            self.describe()
        );
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report: {}", self.describe()))
    }

    /// A one-line description for test failure messages.
    pub fn describe(&self) -> String {
        format!(
            "{:?} after {:.1}s (console log: {})",
            self.verdict,
            self.wall.as_secs_f64(),
            self.log_path.display()
        )
    }
}

/// Classifies console text.
pub fn classify(
    console: &str,
    timed_out: bool,
    code: Option<i32>,
) -> (Verdict, Option<Report>, Option<Report>, Option<String>) {
    let found = crate::reportcheck::read(console);
    let (report, root_report) = (found.report, found.root_report);
    let decided = found.line.as_ref().and_then(|l| {
        serde_json::from_value::<Decision>(serde_json::Value::String(l.decision.clone())).ok()
    });
    let marker = console
        .lines()
        .find(|l| l.starts_with(MARKER))
        .map(|l| l.trim_end().to_string());
    let panic = console.lines().find_map(|l| {
        l.find("Kernel panic - not syncing:").map(|i| {
            l[i + "Kernel panic - not syncing:".len()..]
                .trim()
                .to_string()
        })
    });
    let verdict = if marker.is_some() {
        Verdict::RootInitReached
    } else if let Some(p) = panic {
        Verdict::KernelPanic(p)
    } else if let Some(d) = decided {
        Verdict::Decision(d)
    } else if timed_out {
        Verdict::Timeout
    } else {
        Verdict::Exited(code)
    };
    (verdict, report, root_report, marker)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let (v, ..) = classify(
            "[ 1.0] x\nROOT-INIT-MARKER uptime=2.5 pid=1\n",
            false,
            Some(0),
        );
        assert_eq!(v, Verdict::RootInitReached);
        let (v, ..) = classify(
            "[ 2.0] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0\n",
            false,
            Some(0),
        );
        assert_eq!(
            v,
            Verdict::KernelPanic("Attempted to kill init! exitcode=0x0".into())
        );
        let mut rep = Report::new(1);
        rep.fail(validator::report::Fault::Image, "x".into());
        let bytes = validator::report::json::file_bytes(&rep);
        let text = format!(
            "{}{}",
            validator::report::console::full_line(&rep.to_json()),
            validator::report::console::line(&rep, &validator::report::json::digest(&bytes))
        );
        let (v, r, ..) = classify(&text, false, Some(0));
        assert_eq!(v, Verdict::Decision(Decision::Stop));
        assert!(r.is_some());
        assert_eq!(classify("", true, None).0, Verdict::Timeout);
        assert_eq!(classify("x", false, Some(1)).0, Verdict::Exited(Some(1)));
    }

    #[test]
    fn kernel_timestamps() {
        let o = Outcome {
            verdict: Verdict::Timeout,
            report: None,
            root_report: None,
            marker: Some("ROOT-INIT-MARKER uptime=2.25 pid=1".into()),
            console: "[    1.568855] Run /init as init process\n".into(),
            log_path: PathBuf::new(),
            wall: Duration::ZERO,
            timed_out: false,
        };
        assert_eq!(o.kernel_time_of("Run /init"), Some(1.568855));
        assert_eq!(o.root_uptime(), Some(2.25));
    }
}

//! One QEMU run's outcomes: the whole console, or one per boot.
//!
//! Contract: [`run`] boots a config and classifies the whole console as one [`Outcome`];
//! [`run_boots`] splits the console at each boot marker ([`VmConfig::boot_marker`]) into
//! one [`Outcome`] per boot, in order, with when each boot started; a boot that did not
//! end the run ended by a guest reset ([`Verdict::Rebooted`]), and the part where the run
//! ended carries its timeout, kill ([`Verdict::Killed`]) or exit status. [`Run::seen_at`]
//! tells when a text first reached the console, since QEMU started.
//!
//! Limits: boots are told apart by a console text, so a boot loader or kernel that prints
//! nothing is not counted; host times come from the watcher's polls (late by up to 20 ms).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::watch::{find, watch, Watched};
use super::{classify, Outcome, Verdict, VmConfig};
use crate::HarnessError;

/// Boots `cfg`, writing the console to `<dir>/console.log`; one outcome for the whole
/// console (see [`run_boots`] for one per boot).
pub fn run(cfg: &VmConfig, dir: &Path) -> Result<Outcome, HarnessError> {
    let w = watch(cfg, dir)?;
    let console = String::from_utf8_lossy(&w.console).into_owned();
    Ok(outcome(console, true, &w, w.log_path.clone(), w.wall))
}

/// Every boot of one QEMU run, in order.
#[derive(Debug, Clone)]
pub struct Run {
    /// One outcome per boot; its console is that boot's part of the log (the first also
    /// holds what came before the first boot marker).
    pub boots: Vec<Outcome>,
    /// When each boot started (its marker seen), since QEMU started.
    pub started: Vec<Duration>,
    /// Stopped because boot `follow_reboots + 1` started.
    pub boot_limit_reached: bool,
    /// When the [`KillAt`](super::KillAt) cut happened, since QEMU started.
    pub killed_at: Option<Duration>,
    pub timed_out: bool,
    /// QEMU's exit status when it ended by itself.
    pub exit_code: Option<i32>,
    pub console: String,
    pub log_path: PathBuf,
    pub wall: Duration,
    /// Byte offset in the console of each boot's start.
    offsets: Vec<usize>,
    /// (console length, time it was first seen) after each read.
    arrivals: Vec<(usize, Duration)>,
    raw: Vec<u8>,
}

impl Run {
    /// When `needle` was first seen on the console in boot `boot` (0-based), since QEMU
    /// started (late by up to one poll interval).
    pub fn seen_at(&self, boot: usize, needle: &str) -> Option<Duration> {
        self.seen_nth(boot, needle, 1)
    }

    /// When the `nth` (1-based) occurrence of `needle` was seen in boot `boot`.
    pub fn seen_nth(&self, boot: usize, needle: &str, nth: u32) -> Option<Duration> {
        let mut from = *self.offsets.get(boot)?;
        let to = self
            .offsets
            .get(boot + 1)
            .copied()
            .unwrap_or(self.raw.len());
        for _ in 1..nth {
            from += find(&self.raw[from..to], needle.as_bytes())? + needle.len();
        }
        let at = find(&self.raw[from..to], needle.as_bytes())? + from + needle.len();
        self.arrivals
            .iter()
            .find(|(len, _)| *len >= at)
            .map(|(_, t)| *t)
    }

    /// A one-line description for test failure messages.
    pub fn describe(&self) -> String {
        let v: Vec<String> = self
            .boots
            .iter()
            .map(|o| format!("{:?}", o.verdict))
            .collect();
        format!(
            "{} boot(s) [{}]{}{}{} after {:.1}s (console log: {})",
            self.boots.len(),
            v.join(", "),
            if self.boot_limit_reached {
                ", boot limit reached"
            } else {
                ""
            },
            match self.killed_at {
                Some(t) => format!(", killed at {:.2}s", t.as_secs_f64()),
                None => String::new(),
            },
            if self.timed_out { ", timed out" } else { "" },
            self.wall.as_secs_f64(),
            self.log_path.display()
        )
    }
}

/// Boots `cfg` and returns one outcome per boot (reboots are followed when
/// `cfg.follow_reboots` is set; otherwise there is one boot, or none when nothing printed
/// a boot marker, e.g. firmware that found nothing to boot).
pub fn run_boots(cfg: &VmConfig, dir: &Path) -> Result<Run, HarnessError> {
    let w = watch(cfg, dir)?;
    let limit = match (w.boot_limit_reached, cfg.follow_reboots) {
        (true, Some(n)) => Some(n as usize),
        _ => None,
    };
    let (mut offsets, end) = boot_starts(&w.console, cfg.boot_marker().as_bytes(), limit);
    let time_of = |off: usize| {
        w.arrivals
            .iter()
            .find(|(len, _)| *len > off)
            .map(|(_, t)| *t)
            .unwrap_or(w.wall)
    };
    let started: Vec<Duration> = offsets.iter().map(|o| time_of(*o)).collect();
    let mut boots = Vec::new();
    for (k, off) in offsets.iter().enumerate() {
        let from = if k == 0 { 0 } else { *off };
        let last = k + 1 == offsets.len();
        let to = offsets.get(k + 1).copied().unwrap_or(end);
        let text = String::from_utf8_lossy(&w.console[from..to]).into_owned();
        let ended_run = last && !w.boot_limit_reached;
        let until = if ended_run { w.wall } else { time_of(to) };
        boots.push(outcome(
            text,
            ended_run,
            &w,
            w.log_path.clone(),
            until.saturating_sub(started[k]),
        ));
    }
    if let Some(first) = offsets.first_mut() {
        *first = 0;
    }
    Ok(Run {
        boots,
        started,
        boot_limit_reached: w.boot_limit_reached,
        killed_at: w.killed_at,
        timed_out: w.timed_out,
        exit_code: w.code,
        console: String::from_utf8_lossy(&w.console).into_owned(),
        log_path: w.log_path,
        wall: w.wall,
        offsets,
        arrivals: w.arrivals,
        raw: w.console,
    })
}

/// The typed outcome of one console part; `ended_run`: this part is where the run ended
/// (so a timeout, a kill or QEMU's exit status belong to it), else the guest rebooted.
fn outcome(
    console: String,
    ended_run: bool,
    w: &Watched,
    log_path: PathBuf,
    wall: Duration,
) -> Outcome {
    let (timed_out, code) = if ended_run {
        (w.timed_out, w.code)
    } else {
        (false, None)
    };
    let (mut verdict, report, root_report, marker) = classify(&console, timed_out, code);
    if verdict == Verdict::Exited(None) {
        if ended_run && w.killed_at.is_some() {
            verdict = Verdict::Killed;
        } else if !ended_run {
            verdict = Verdict::Rebooted;
        }
    }
    Outcome {
        verdict,
        report,
        root_report,
        marker,
        console,
        log_path,
        wall,
        timed_out,
    }
}

/// Where each boot starts in `console` (each occurrence of `marker`), and where the last
/// counted boot ends: with `limit` (the boot limit was reached) the boots past it are
/// left out and the last one ends where the next began.
fn boot_starts(console: &[u8], marker: &[u8], limit: Option<usize>) -> (Vec<usize>, usize) {
    let mut offsets = Vec::new();
    let mut i = 0;
    while let Some(p) = find(&console[i..], marker) {
        offsets.push(i + p);
        i += p + marker.len();
    }
    let mut end = console.len();
    if let Some(limit) = limit {
        if let Some(e) = offsets.get(limit) {
            end = *e;
        }
        offsets.truncate(limit);
    }
    (offsets, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boots_split_at_their_markers() {
        let c = b"fw M1 a M2 b M3 c";
        assert_eq!(boot_starts(c, b"M", None), (vec![3, 8, 13], c.len()));
        assert_eq!(boot_starts(c, b"M", Some(2)), (vec![3, 8], 13));
        assert_eq!(boot_starts(b"nothing", b"M", None), (vec![], 7));
    }
}

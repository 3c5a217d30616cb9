//! The boot benchmark's split by stage: where the time from the kernel's `Run /init` to
//! the root's init goes, for ours and for the floor ([`crate::floor`]), both read from
//! kernel log timestamps on one clock.
//!
//! Ours: the start-up (from `Run /init` to the first `validator: stage NAME: start` line:
//! the exec and the API filesystems), then each stage from its line to the next one's,
//! the last (the handover: the report, the quote, `switch_root`) up to the root's marker;
//! the modules stage is also split, from the report, into the gate's time and the
//! kernel's (`finit_module`: each module's load time less its gate time, summed: on more
//! than one vCPU the two overlap). The floor writes its own lines at the same points
//! (`floor: init`, after its `insmod`s `floor: modules`, once the root device is there
//! `floor: device`, after the mount `floor: mounted`): its start-up, modules, storage,
//! mount and handover. A stage the floor has no counterpart for (the BOM, the TPM, the
//! preflight) has a floor of zero: all of it is ours.

use crate::vm::Outcome;

/// The floor's lines, in order, each with the stage it ends.
pub const FLOOR_MARKS: [(&str, &str); 4] = [
    ("floor: init", "start-up"),
    ("floor: modules", "modules"),
    ("floor: device", "storage"),
    ("floor: mounted", "mount"),
];

/// The name of the rows that split the modules stage (ours only).
pub const GATE_ROW: &str = "  modules: the gate (sum)";
pub const KERNEL_ROW: &str = "  modules: the kernel's loads (sum)";

/// Seconds per part of one boot, in the boot's order.
pub type Parts = Vec<(String, f64)>;

/// Ours: the start-up, each stage, and the modules stage's gate and kernel sums.
/// `run_init` and `marker` are the boot's two ends.
pub fn ours(o: &Outcome, run_init: f64, marker: f64) -> Parts {
    let mut marks: Vec<(String, f64)> = o
        .console
        .lines()
        .filter_map(|l| {
            let (t, rest) = kernel_line(l)?;
            let name = rest
                .strip_prefix("validator: stage ")?
                .strip_suffix(": start")?;
            Some((name.to_string(), t))
        })
        .collect();
    let mut parts = Vec::new();
    let mut from = ("start-up".to_string(), run_init);
    marks.push((String::new(), marker));
    for (name, t) in marks {
        parts.push((from.0, t - from.1));
        from = (name, t);
    }
    // The production init prints no report on the console: the root's copy then.
    if let Some(r) = o.report.as_ref().or(o.root_report.as_ref()) {
        let gate: u64 = r.modules.iter().map(|m| m.gate_us).sum();
        let load: u64 = r
            .modules
            .iter()
            .map(|m| m.duration_us.saturating_sub(m.gate_us))
            .sum();
        if let Some(i) = parts.iter().position(|(n, _)| n == "modules") {
            parts.insert(i + 1, (KERNEL_ROW.into(), us(load)));
            parts.insert(i + 1, (GATE_ROW.into(), us(gate)));
        }
    }
    parts
}

/// The floor: its start-up, modules, storage, mount and handover, from its own lines.
pub fn floor(o: &Outcome, run_init: f64, marker: f64) -> Parts {
    let mut parts = Vec::new();
    let mut from = run_init;
    for (needle, name) in FLOOR_MARKS {
        if let Some(t) = o.kernel_time_of(needle) {
            parts.push((name.to_string(), t - from));
            from = t;
        }
    }
    parts.push(("handover".into(), marker - from));
    parts
}

fn us(v: u64) -> f64 {
    validator::util::as_f64(v) / 1e6
}

/// A kernel log line's timestamp (seconds) and text.
fn kernel_line(l: &str) -> Option<(f64, &str)> {
    let inner = l.trim_start().strip_prefix('[')?;
    let (t, rest) = inner.split_once(']')?;
    Some((t.trim().parse().ok()?, rest.trim_start()))
}

/// Prints ours against the floor, part by part: ours, the floor, what is ours alone.
pub fn print(ours: &Parts, floor: &Parts) {
    println!("stage                                  ours        floor       ours - floor");
    let floor_of = |n: &str| floor.iter().find(|(m, _)| m == n).map(|(_, s)| *s);
    for (name, s) in ours {
        let f = floor_of(name);
        let split = name.starts_with("  ");
        let fs = f.map_or(if split { "" } else { "     0.000 s" }.to_string(), |f| {
            format!("{f:>10.3} s")
        });
        let diff = if split {
            String::new()
        } else {
            format!("{:>10.3} s", s - f.unwrap_or(0.0))
        };
        println!("{name:<36} {s:>10.3} s {fs:<12} {diff}");
    }
    for (name, f) in floor
        .iter()
        .filter(|(n, _)| !ours.iter().any(|(m, _)| m == n))
    {
        println!("{name:<36} {:>10.3} s {f:>10.3} s", 0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(console: &str) -> Outcome {
        Outcome::of_console(crate::vm::Verdict::RootInitReached, console)
    }

    #[test]
    fn stages_are_split_from_their_log_lines() {
        let o = outcome(
            "[    2.000000] Run /init as init process\n\
             [    2.050000] validator: stage start: start\n\
             [    2.060000] validator: BOM x\n\
             [    2.100000] validator: stage modules: start\n\
             [    2.600000] validator: stage handover: start\n\
             [    2.900000] root-init: reached\n",
        );
        let p = ours(&o, 2.0, 2.9);
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["start-up", "start", "modules", "handover"]);
        let secs: Vec<f64> = p.iter().map(|(_, s)| (s * 1000.0).round()).collect();
        assert_eq!(secs, [50.0, 50.0, 500.0, 300.0]);
        let f = outcome(
            "[    1.000000] Run /init as init process\n\
             [    1.020000] floor: init\n\
             [    1.420000] floor: modules\n\
             [    1.430000] floor: device\n\
             [    1.440000] floor: mounted\n",
        );
        let p = floor(&f, 1.0, 1.5);
        let secs: Vec<(&str, f64)> = p
            .iter()
            .map(|(n, s)| (n.as_str(), (s * 1000.0).round()))
            .collect();
        assert_eq!(
            secs,
            [
                ("start-up", 20.0),
                ("modules", 400.0),
                ("storage", 10.0),
                ("mount", 10.0),
                ("handover", 60.0)
            ]
        );
    }
}

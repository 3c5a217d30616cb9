//! The report as Prometheus metrics: a text exposition file (format 0.0.4) for
//! node_exporter's textfile collector, written by the init as `validator.prom` into the
//! new root's textfile directory (see [`super::publish`]).
//!
//! Contract: every metric is a gauge named `validator_*` with a `# HELP` and `# TYPE`
//! line, base units (`_seconds`, `_bytes`), no `_total` (nothing here counts up across
//! boots: each boot replaces the file), and the samples of one family together. Label
//! values are escaped as the format requires (`\\`, `\"`, `\n`); an unknown value is an
//! absent label, never an empty string. `promtool check metrics` accepts the file with no
//! lint warning (a QEMU test checks a real boot's file). The families:
//!
//! | metric | labels | value |
//! |---|---|---|
//! | `validator_report_info` | `schema`, `version`, `image`, `bom_sha256`, `kernel`, `slot`, `decision`, `fault`, `pool` | 1 |
//! | `validator_node_info` | `product_name`, `product_serial`, `board_serial`, `boot_id` | 1 |
//! | `validator_decision` | `decision` (each of pass, quarantine, fallback, stop) | 1 for the decision taken, else 0 |
//! | `validator_check_status` | `check`, `stage`, `status`, `fault` | 1 (one series per check) |
//! | `validator_stage_duration_seconds` | `stage`, `status` | the stage's time |
//! | `validator_init_start_seconds` | | CLOCK_BOOTTIME when the init started |
//! | `validator_init_duration_seconds` | | from the init's start to the report |
//! | `validator_modules` | `status` (each module status) | modules with that status |
//! | `validator_tpm_present`, `validator_tpm_required` | | 1 or 0 |
//! | `validator_tpm_extends`, `validator_tpm_commands` | | this boot's PCR extends and TPM commands |
//! | `validator_tpm_wait_seconds` | | time spent waiting for the TPM |
//! | `validator_pcr_info` | `bank`, `pcr`, `value` | 1 per PCR we extended |
//! | `validator_verity_verified` | | 1 when the kernel's verity status is `V` |
//! | `validator_kernel_taint` | | `/proc/sys/kernel/tainted` after module loading |
//! | `validator_slot_attempts`, `validator_slot_consecutive_failures` | | from the slot stage |
//! | `validator_previous_boot_info` | `slot`, `via`, `decision`, `fault`, `image` | 1 when this boot fell back from another |
//! | `validator_gpus` | `source` (`bom`, `pci`, `driver`) | GPUs, for each source known |
//! | `validator_peak_rss_bytes` | | PID 1's peak resident memory |
//! | `validator_warnings` | | problems that did not stop the boot |
//! | `validator_recheck_timestamp_seconds` | | a live re-check's time (Unix) |
//! | `validator_boot_info` | `decision`, `fault` | a live re-check's file: the boot's own verdict (1) |
//!
//! Families whose facts the boot did not reach (no TPM section, no slots, no re-check) are
//! left out. A live re-check (`validator recheck`) replaces the file with its own report,
//! whose decision and checks are the node's now ([`super::recheck`]).

use std::fmt::Write as _;

use super::schema::{CheckStatus, Report};
use crate::runtime::modload::ModStatus;
use crate::stages::Decision;
use crate::util::as_f64;

/// The file name in the textfile directory.
pub const FILE_NAME: &str = "validator.prom";

/// Escapes a label value.
fn label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &[(&str, Option<&str>)], value: f64) {
        self.out.push_str(name);
        let present: Vec<_> = labels
            .iter()
            .filter_map(|(k, v)| v.filter(|v| !v.is_empty()).map(|v| (k, v)))
            .collect();
        if !present.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in present.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", label_value(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

fn family<'a>(out: &'a mut String, name: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    Family { out }
}

fn secs(us: u64) -> f64 {
    as_f64(us) / 1e6
}

fn mod_status_word(s: ModStatus) -> &'static str {
    match s {
        ModStatus::Loaded => "loaded",
        ModStatus::AlreadyLoaded => "already_loaded",
        ModStatus::Builtin => "builtin",
        ModStatus::Failed => "failed",
        ModStatus::Rejected => "rejected",
        ModStatus::Skipped => "skipped",
    }
}

/// The metrics file for `r`.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let o = &mut out;
    identity(o, r);
    decision(o, r);
    checks(o, r);
    timing(o, r);
    modules(o, r);
    measured(o, r);
    slots(o, r);
    resources(o, r);
    recheck(o, r);
    family(
        o,
        "validator_warnings",
        "Problems in this boot that did not stop it.",
    )
    .sample("validator_warnings", &[], as_f64(r.warnings.len() as u64));
    out
}

/// The report's and the node's info families.
fn identity(o: &mut String, r: &Report) {
    let fault = r.fault.map(|f| f.as_str());
    family(
        o,
        "validator_report_info",
        "The boot's report: image, BOM digest, slot, kernel, decision and fault class (always 1).",
    )
    .sample(
        "validator_report_info",
        &[
            ("schema", Some(&r.schema)),
            ("version", Some(&r.validator_version)),
            ("image", r.image_id.as_deref()),
            ("bom_sha256", r.bom_sha256.as_deref()),
            ("kernel", r.kernel_release.as_deref()),
            ("slot", r.booted_slot()),
            ("decision", Some(r.decision.as_str())),
            ("fault", fault),
            ("pool", r.pool.as_deref()),
        ],
        1.0,
    );
    let n = &r.node;
    family(
        o,
        "validator_node_info",
        "Who the node is: DMI product name and serials, the kernel's boot id (always 1).",
    )
    .sample(
        "validator_node_info",
        &[
            ("product_name", n.product_name.as_deref()),
            ("product_serial", n.product_serial.as_deref()),
            ("board_serial", n.board_serial.as_deref()),
            ("boot_id", n.boot_id.as_deref()),
        ],
        1.0,
    );
}

/// The decision family: one series per decision, 1 for the one taken.
fn decision(o: &mut String, r: &Report) {
    let mut f = family(
        o,
        "validator_decision",
        "The boot's decision: 1 for the one taken, 0 for the others.",
    );
    for d in [
        Decision::Pass,
        Decision::Quarantine,
        Decision::Fallback,
        Decision::Stop,
    ] {
        f.sample(
            "validator_decision",
            &[("decision", Some(d.as_str()))],
            if d == r.decision { 1.0 } else { 0.0 },
        );
    }
}

/// The checks: one series per check, then their number by status.
fn checks(o: &mut String, r: &Report) {
    let mut f = family(
        o,
        "validator_check_status",
        "One series per check with its stage, status (pass, warn, fail, skip) and fault class (always 1).",
    );
    for c in &r.checks {
        f.sample(
            "validator_check_status",
            &[
                ("check", Some(&c.name)),
                ("stage", Some(c.stage.name())),
                ("status", Some(c.status.as_str())),
                ("fault", c.fault.map(|f| f.as_str())),
            ],
            1.0,
        );
    }
    let mut f = family(o, "validator_checks", "Checks of this boot by status.");
    for s in CheckStatus::ALL {
        let n = r.checks.iter().filter(|c| c.status == s).count();
        f.sample(
            "validator_checks",
            &[("status", Some(s.as_str()))],
            as_f64(n as u64),
        );
    }
}

/// The stages' durations and the init's start and duration.
fn timing(o: &mut String, r: &Report) {
    let mut f = family(
        o,
        "validator_stage_duration_seconds",
        "Time each boot stage took, with how it ended.",
    );
    for s in &r.stages {
        f.sample(
            "validator_stage_duration_seconds",
            &[
                ("stage", Some(s.name.name())),
                ("status", Some(s.status.as_str())),
            ],
            secs(s.duration_us),
        );
    }
    family(
        o,
        "validator_init_start_seconds",
        "Time since the kernel started (CLOCK_BOOTTIME) when the init started.",
    )
    .sample(
        "validator_init_start_seconds",
        &[],
        secs(r.boottime_start_us),
    );
    family(
        o,
        "validator_init_duration_seconds",
        "Time from the init's start to its report.",
    )
    .sample(
        "validator_init_duration_seconds",
        &[],
        secs(r.boottime_report_us.saturating_sub(r.boottime_start_us)),
    );
}

/// The kernel modules by status, one series per status.
fn modules(o: &mut String, r: &Report) {
    let mut f = family(
        o,
        "validator_modules",
        "Kernel modules by what happened to them.",
    );
    for s in [
        ModStatus::Loaded,
        ModStatus::AlreadyLoaded,
        ModStatus::Builtin,
        ModStatus::Failed,
        ModStatus::Rejected,
        ModStatus::Skipped,
    ] {
        let n = r.modules.iter().filter(|m| m.status == s).count();
        f.sample(
            "validator_modules",
            &[("status", Some(mod_status_word(s)))],
            as_f64(n as u64),
        );
    }
}

/// The GPU counts for each source known and the init's peak memory, when known.
fn resources(o: &mut String, r: &Report) {
    if let Some(g) = &r.gpus {
        let mut f = family(
            o,
            "validator_gpus",
            "GPUs as the BOM promises them, as found on PCI and as the driver sees them.",
        );
        for (source, v) in [("bom", g.bom), ("pci", g.pci), ("driver", g.driver)] {
            if let Some(v) = v {
                f.sample("validator_gpus", &[("source", Some(source))], f64::from(v));
            }
        }
    }
    if let Some(b) = r.peak_rss_bytes {
        family(
            o,
            "validator_peak_rss_bytes",
            "Peak resident memory of the init (PID 1), VmHWM.",
        )
        .sample("validator_peak_rss_bytes", &[], as_f64(b));
    }
}

/// A live re-check's families (`validator recheck`): when it ran and what the boot decided.
fn recheck(o: &mut String, r: &Report) {
    let Some(k) = &r.recheck else { return };
    family(
        o,
        "validator_recheck_timestamp_seconds",
        "When the preflight last ran again on the running node (Unix time).",
    )
    .sample(
        "validator_recheck_timestamp_seconds",
        &[],
        as_f64(k.at_unix_s),
    );
    family(
        o,
        "validator_boot_info",
        "The boot's own decision and fault class, before any re-check (always 1).",
    )
    .sample(
        "validator_boot_info",
        &[
            ("decision", Some(k.boot_decision.as_str())),
            ("fault", k.boot_fault.map(|f| f.as_str())),
        ],
        1.0,
    );
}

/// The TPM, verity and taint families, for the sections the boot reached.
fn measured(o: &mut String, r: &Report) {
    if let Some(t) = &r.tpm {
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        family(
            o,
            "validator_tpm_present",
            "1 when a TPM was found and answered.",
        )
        .sample("validator_tpm_present", &[], flag(t.present));
        family(
            o,
            "validator_tpm_required",
            "1 when the BOM requires a TPM.",
        )
        .sample("validator_tpm_required", &[], flag(t.required));
        family(
            o,
            "validator_tpm_extends",
            "PCR extends (events) made by this boot.",
        )
        .sample("validator_tpm_extends", &[], f64::from(t.events));
        family(
            o,
            "validator_tpm_commands",
            "TPM commands sent by this boot.",
        )
        .sample("validator_tpm_commands", &[], as_f64(t.commands));
        family(
            o,
            "validator_tpm_wait_seconds",
            "Time this boot spent waiting for the TPM.",
        )
        .sample("validator_tpm_wait_seconds", &[], secs(t.time_us));
        let mut f = family(
            o,
            "validator_pcr_info",
            "Each PCR this boot extended, by bank, with its value read back at the end (always 1).",
        );
        for (bank, pcrs) in &t.pcrs {
            for (pcr, value) in pcrs {
                f.sample(
                    "validator_pcr_info",
                    &[
                        ("bank", Some(bank)),
                        ("pcr", Some(&pcr.to_string())),
                        ("value", Some(value)),
                    ],
                    1.0,
                );
            }
        }
    }
    if let Some(v) = &r.verity {
        family(
            o,
            "validator_verity_verified",
            "1 when the kernel reports the verified root as verified (status V).",
        )
        .sample(
            "validator_verity_verified",
            &[],
            if v.status.as_deref() == Some("V") {
                1.0
            } else {
                0.0
            },
        );
    }
    if let Some(t) = &r.taint {
        family(
            o,
            "validator_kernel_taint",
            "The kernel's taint bits after the modules were loaded.",
        )
        .sample("validator_kernel_taint", &[], as_f64(t.value));
    }
}

/// The slot families, when the boot reached the slot stage.
fn slots(o: &mut String, r: &Report) {
    let Some(s) = &r.slot else { return };
    family(
        o,
        "validator_slot_attempts",
        "Boots of this slot's image since it was last marked good, this one included.",
    )
    .sample("validator_slot_attempts", &[], f64::from(s.attempts));
    family(
        o,
        "validator_slot_consecutive_failures",
        "Failed boots in a row before this one.",
    )
    .sample(
        "validator_slot_consecutive_failures",
        &[],
        f64::from(s.consecutive_failures),
    );
    if let Some(p) = &s.previous {
        family(
            o,
            "validator_previous_boot_info",
            "The boot this one fell back from: its slot, how (kexec or reboot), decision and fault (always 1).",
        )
        .sample(
            "validator_previous_boot_info",
            &[
                ("slot", Some(&p.slot)),
                ("via", Some(&p.via)),
                ("decision", p.decision.as_deref()),
                ("fault", p.fault.as_deref()),
                ("image", p.image_id.as_deref()),
            ],
            1.0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::schema::{Check, GpuCounts};
    use crate::stages::{Fault, Stage};

    #[test]
    fn families_and_escaping() {
        let mut r = Report::new(1_500_000);
        r.boottime_report_us = 2_000_000;
        r.image_id = Some("img-1".into());
        r.fail(Fault::Image, "x".into());
        r.checks.push(Check {
            name: "critical//etc/\"odd\"\\\nname".into(),
            stage: Stage::Critical,
            status: CheckStatus::Fail,
            fault: Some(Fault::Image),
            detail: None,
            duration_us: None,
        });
        r.gpus = Some(GpuCounts {
            bom: Some(8),
            pci: None,
            driver: Some(7),
        });
        let m = render(&r);
        assert!(m.contains(
            "validator_check_status{check=\"critical//etc/\\\"odd\\\"\\\\\\nname\",stage=\"critical\",status=\"fail\",fault=\"image\"} 1\n"
        ), "{m}");
        assert!(m.contains("validator_decision{decision=\"stop\"} 1\n"));
        assert!(m.contains("validator_decision{decision=\"pass\"} 0\n"));
        assert!(
            m.contains("validator_gpus{source=\"bom\"} 8\nvalidator_gpus{source=\"driver\"} 7\n")
        );
        assert!(!m.contains("source=\"pci\""));
        assert!(m.contains("validator_init_duration_seconds 0.5\n"));
        // Unknown values are absent labels, never empty ones.
        assert!(!m.contains("=\"\""), "{m}");
        // Every family: HELP, then TYPE gauge, then its samples, each family once.
        let mut seen = std::collections::BTreeSet::new();
        let mut current = String::new();
        for l in m.lines() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                current = rest.split(' ').next().unwrap().to_string();
                assert!(seen.insert(current.clone()), "{current} twice");
                assert!(current.starts_with("validator_"));
                assert!(!current.ends_with("_total"));
            } else if let Some(rest) = l.strip_prefix("# TYPE ") {
                assert_eq!(rest, format!("{current} gauge"));
            } else {
                assert!(l.starts_with(&current), "{l} outside {current}");
            }
        }
    }
}

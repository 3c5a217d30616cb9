//! The shipped Prometheus rules (`examples/prometheus/`): `promtool` (Debian's
//! `prometheus` package) checks them and runs their unit tests, and the series those
//! tests feed are shaped like the metrics the report renders: every metric name is one
//! of ours and its labels are ours plus the `instance` and `job` a scrape adds.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use validator::report::{prometheus, Check, CheckStatus, GpuCounts, Report};
use validator::runtime::slot::{Previous, SlotFacts};
use validator::stages::{Fault, Stage};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/prometheus")
}

fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut c = Command::new("promtool");
    c.args(args).current_dir(dir());
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap_or_else(|e| {
        panic!("promtool: {e} (install Debian's prometheus: scripts/provision)")
    });
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A report with every family the renderer can write.
fn full_report() -> Report {
    let mut r = Report::new(1_000_000);
    r.image_id = Some("img".into());
    r.bom_sha256 = Some("aa".into());
    r.kernel_release = Some("6.1.0-57-amd64".into());
    r.pool = Some("h200-a".into());
    r.node.product_name = Some("HGX".into());
    r.node.product_serial = Some("SN1".into());
    r.node.board_serial = Some("BS1".into());
    r.node.boot_id = Some("b".into());
    r.fail(Fault::Hardware, "preflight: gpus".into());
    r.checks.push(Check {
        name: "start".into(),
        stage: Stage::Start,
        status: CheckStatus::Fail,
        fault: Some(Fault::Hardware),
        detail: None,
        duration_us: Some(1),
    });
    r.gpus = Some(GpuCounts {
        bom: Some(8),
        pci: Some(8),
        driver: Some(7),
    });
    r.slot = Some(SlotFacts {
        booted: Some(validator::config::bom::SlotName::B),
        previous: Some(Previous {
            slot: "A".into(),
            via: "kexec".into(),
            image_id: Some("img-0".into()),
            decision: Some("fallback".into()),
            fault: Some("image".into()),
            reason: None,
            report: None,
        }),
        ..SlotFacts::default()
    });
    r.tpm = Some(
        serde_json::from_value(serde_json::json!({
            "required": true, "present": true, "device": "/dev/tpmrm0", "banks": ["sha256"],
            "pcr": 13, "events": 4, "commands": 9, "time_us": 1200,
            "pcrs": {"sha256": {"13": "00"}}, "failure": null, "binary_log": null,
            "cel_log": null, "firmware_log": false
        }))
        .unwrap(),
    );
    r.taint = Some(
        serde_json::from_value(serde_json::json!({
            "value": 0, "flags": "", "unexpected": ""
        }))
        .unwrap(),
    );
    // As a live re-check writes it (`validator recheck`).
    r.recheck = Some(validator::report::Recheck {
        at_unix_s: 1_700_000_000,
        boot_decision: validator::report::Decision::Quarantine,
        boot_fault: Some(Fault::Hardware),
        boot_reason: None,
    });
    r
}

/// Metric name -> label names, from an exposition text.
fn shapes(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, labels) = split_series(l.rsplit_once(' ').unwrap().0);
        m.entry(name).or_default().extend(labels);
    }
    m
}

fn split_series(s: &str) -> (String, Vec<String>) {
    match s.split_once('{') {
        None => (s.to_string(), vec![]),
        Some((name, rest)) => {
            let body = rest.trim_end_matches('}');
            let labels = body
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap().0.trim().to_string())
                .collect();
            (name.to_string(), labels)
        }
    }
}

#[test]
fn shipped_rules_pass_promtool_and_their_unit_tests() {
    let (ok, out) = promtool(&["check", "rules", "validator.rules.yml"], None);
    assert!(ok, "{out}");
    let (ok, out) = promtool(&["test", "rules", "validator.rules.test.yml"], None);
    assert!(ok && out.contains("SUCCESS"), "{out}");
    // Every alert of the rules file has a unit test.
    let rules = std::fs::read_to_string(dir().join("validator.rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir().join("validator.rules.test.yml")).unwrap();
    for l in rules.lines() {
        if let Some(a) = l.trim().strip_prefix("- alert: ") {
            assert!(tests.contains(&format!("alertname: {a}")), "{a} untested");
        }
        if let Some(r) = l.trim().strip_prefix("- record: ") {
            assert!(
                rules.matches(r).count() > 1 || tests.contains(r),
                "{r} untested"
            );
        }
    }
}

#[test]
fn rule_test_series_are_shaped_like_our_metrics() {
    let ours = shapes(&prometheus::render(&full_report()));
    let tests = std::fs::read_to_string(dir().join("validator.rules.test.yml")).unwrap();
    let mut n = 0;
    for l in tests.lines() {
        let Some(s) = l.trim().strip_prefix("- series: '") else {
            continue;
        };
        let (name, labels) = split_series(s.trim_end_matches('\''));
        let want = ours
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not a metric the report renders"));
        for label in labels {
            assert!(
                want.contains(&label) || label == "instance" || label == "job",
                "{name} has no label {label} (ours: {want:?})"
            );
        }
        n += 1;
    }
    assert!(n >= 10, "{n} series");
}

/// The renderer's file for a report with every family passes `promtool check metrics`
/// with no lint warning (a QEMU test checks a real boot's file too).
#[test]
fn every_family_passes_promtool_lint() {
    let text = prometheus::render(&full_report());
    for f in [
        "validator_gpus",
        "validator_previous_boot_info",
        "validator_pcr_info",
        "validator_node_info",
        "validator_boot_info",
        "validator_recheck_timestamp_seconds",
    ] {
        assert!(text.contains(f), "{f} missing");
    }
    let (ok, out) = promtool(&["check", "metrics"], Some(&text));
    assert!(ok && out.trim().is_empty(), "{out}\n{text}");
    // And promtool does lint: a counter without _total is reported.
    let (ok, out) = promtool(
        &["check", "metrics"],
        Some("# HELP x_bytes a\n# TYPE x_bytes counter\nx_bytes 1\n"),
    );
    assert!(!ok && out.contains("_total"), "{out}");
}

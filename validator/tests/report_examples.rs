//! The documented example reports (`docs/examples/report-*.json`, made by real boots and
//! by the slot code, see docs/REPORT.md) validate against the committed JSON Schema, say
//! what their names say, and give a console line under 1 KiB and NFD features that parse.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::Path;

use validator::report::{console, json, nfd, Decision, Fault, Report};

fn schema() -> jsonschema::Validator {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.schema.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    jsonschema::validator_for(&v).unwrap()
}

#[test]
fn examples_validate_and_mean_what_they_say() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let v = schema();
    let want: [(&str, Decision, Option<Fault>, bool); 5] = [
        ("report-good.json", Decision::Pass, None, false),
        (
            "report-image-fault.json",
            Decision::Stop,
            Some(Fault::Image),
            false,
        ),
        (
            "report-hardware-fault.json",
            Decision::Stop,
            Some(Fault::Hardware),
            false,
        ),
        ("report-fallback.json", Decision::Pass, None, true),
        (
            "report-both-bad.json",
            Decision::Stop,
            Some(Fault::Image),
            true,
        ),
    ];
    for (file, decision, fault, previous) in want {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let errs: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errs.is_empty(), "{file}: {errs:?}");
        let r: Report = serde_json::from_value(value).unwrap();
        assert_eq!(r.schema, "validator.report/v2", "{file}");
        assert_eq!((r.decision, r.fault), (decision, fault), "{file}");
        assert_eq!(r.previous_report().is_some(), previous, "{file}");
        if let Some(p) = r.previous_report() {
            let pv = serde_json::to_value(&p).unwrap();
            assert!(v.is_valid(&pv), "{file}: its previous report");
            assert_eq!(p.fault, Some(Fault::Image), "{file}");
        }
        assert!(!r.checks.is_empty(), "{file}");
        let failed = r.checks.iter().filter(|c| c.fault.is_some()).count();
        assert_eq!(failed > 0, fault.is_some(), "{file}");
        let line = console::line(&r, &json::digest(&json::file_bytes(&r)));
        assert!(line.len() <= console::LINE_MAX, "{file}");
        validator::formats::nfd::parse(&nfd::render(&r, "validator.gpu-fleet.example")).unwrap();
    }
}

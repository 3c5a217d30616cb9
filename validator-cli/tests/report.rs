//! `validator report`: the documented example reports rendered for a person, as
//! metrics, labels and a timeline; hostile input refused by name.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod run;
use run::validator;

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples")
        .join(name)
        .display()
        .to_string()
}

/// A scratch directory of this test's own: `tag` names the test, since the tests of one
/// binary run in parallel in one process and would otherwise remove each other's files.
fn tmp(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/test-tmp/report-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn examples_render_decision_first_then_checks_and_timings() {
    for (file, code, first) in [
        ("report-good.json", 0, "decision  PASS"),
        ("report-image-fault.json", 1, "decision  STOP (image fault)"),
        (
            "report-hardware-fault.json",
            1,
            "decision  STOP (hardware fault)",
        ),
        ("report-fallback.json", 0, "decision  PASS"),
        ("report-both-bad.json", 1, "decision  STOP (image fault)"),
    ] {
        let (c, out, err) = validator(&["report", &example(file)]);
        assert_eq!(c, code, "{file}: {err}");
        assert!(out.starts_with(first), "{file}: {out}");
        let r: validator::report::Report =
            serde_json::from_str(&std::fs::read_to_string(example(file)).unwrap()).unwrap();
        let checks = out.find("\nchecks ").unwrap();
        let timings = out.find("\ntimings ").unwrap();
        assert!(checks < timings, "{file}");
        for c in &r.checks {
            assert!(
                out[checks..timings].contains(&c.name),
                "{file}: check {}",
                c.name
            );
        }
        for s in &r.stages {
            assert!(
                out[timings..].contains(s.name.name()),
                "{file}: stage {:?}",
                s.name
            );
        }
    }
    // The image-fault report names the refused module as a failed check of class image.
    let (_, out, _) = validator(&["report", &example("report-image-fault.json")]);
    let row = out
        .lines()
        .find(|l| l.contains("module/virtio_blk"))
        .unwrap();
    assert!(row.trim_start().starts_with("fail   image"), "{row}");
}

/// `--brief`: one line per stage with its checks counted (the counts add up to the
/// report's), only the checks that warned or failed by name, and much shorter.
#[test]
fn brief_counts_checks_per_stage_and_names_only_the_bad_ones() {
    for file in [
        "report-good.json",
        "report-image-fault.json",
        "report-hardware-fault.json",
    ] {
        let (c_full, full, _) = validator(&["report", &example(file)]);
        let (c, out, err) = validator(&["report", "--brief", &example(file)]);
        assert_eq!(c, c_full, "{file}: {err}");
        assert_eq!(out.lines().next(), full.lines().next(), "{file}");
        assert!(
            out.lines().count() * 2 < full.lines().count(),
            "{file}: {out}"
        );
        let r: validator::report::Report =
            serde_json::from_str(&std::fs::read_to_string(example(file)).unwrap()).unwrap();
        let mut counted = 0;
        for s in &r.stages {
            let row = out
                .lines()
                .find(|l| l.split_whitespace().next() == Some(s.name.name()))
                .unwrap_or_else(|| panic!("{file}: no row for {:?}:\n{out}", s.name));
            let words: Vec<&str> = row.split("  ").filter(|w| !w.trim().is_empty()).collect();
            let checks = words.last().unwrap().trim();
            counted += checks
                .split(", ")
                .filter_map(|p| p.split_once(' ').and_then(|(n, _)| n.parse::<usize>().ok()))
                .sum::<usize>();
        }
        let in_stages = r
            .checks
            .iter()
            .filter(|c| r.stages.iter().any(|s| s.name == c.stage))
            .count();
        assert_eq!(counted, in_stages, "{file}: {out}");
        for c in &r.checks {
            let bad = matches!(
                c.status,
                validator::report::CheckStatus::Warn | validator::report::CheckStatus::Fail
            );
            let named = out.contains(&format!(" {}: ", c.name));
            assert_eq!(
                bad, named,
                "{file}: check {} ({:?})\n{out}",
                c.name, c.status
            );
        }
    }
}

#[test]
fn previous_renders_the_failed_slots_report() {
    let (c, out, err) = validator(&["report", "--previous", &example("report-fallback.json")]);
    assert_eq!(c, 1, "{err}");
    assert!(out.starts_with("decision  FALLBACK (image fault)"), "{out}");
    assert!(out.contains("slot      A"), "{out}");
    let (c, _, err) = validator(&["report", "--previous", &example("report-good.json")]);
    assert_eq!(c, 2);
    assert!(err.contains("no previous boot's report"), "{err}");
}

#[test]
fn metrics_labels_and_timeline_files() {
    let d = tmp("metrics");
    let prom = d.join("bad.prom");
    let nfd = d.join("validator");
    let svg = d.join("good.svg");
    let (c, out, err) = validator(&[
        "report",
        &example("report-image-fault.json"),
        "--prometheus",
        prom.to_str().unwrap(),
        "--nfd",
        nfd.to_str().unwrap(),
    ]);
    assert_eq!(c, 1, "{err}");
    assert!(out.contains("wrote "), "{out}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(text.contains("fault=\"image\""), "{text}");
    let lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap())
        .output()
        .expect("promtool (scripts/provision)");
    assert!(lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty());
    let f = validator::formats::nfd::parse(&std::fs::read_to_string(&nfd).unwrap()).unwrap();
    assert!(f.iter().any(|x| x.name == "fault" && x.value == "image"));
    let (c, _, err) = validator(&[
        "report",
        &example("report-good.json"),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{err}");
    let png = d.join("good.png");
    let st = Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(&svg)
        .status()
        .expect("rsvg-convert (scripts/provision)");
    assert!(st.success());
    assert!(std::fs::metadata(&png).unwrap().len() > 5000);
    let (c, _, err) = validator(&[
        "report",
        &example("report-good.json"),
        "--nfd",
        nfd.to_str().unwrap(),
        "--namespace",
        "kubernetes.io",
    ]);
    assert_eq!(c, 2);
    assert!(err.contains("namespace"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn hostile_reports_are_refused_or_defused() {
    let d = tmp("hostile");
    let empty = d.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let junk = d.join("junk.json");
    std::fs::write(&junk, "{\"schema\": 1}").unwrap();
    let bin = d.join("bin.json");
    std::fs::write(&bin, [0xff, 0xfe, 0x00]).unwrap();
    for p in [&empty, &junk, &bin, &d] {
        let (c, _, err) = validator(&["report", p.to_str().unwrap()]);
        assert_eq!(c, 2, "{}", p.display());
        assert!(err.contains(p.to_str().unwrap()), "{err}");
    }
    // Escape sequences in a report never reach the terminal.
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example("report-image-fault.json")).unwrap())
            .unwrap();
    r["reason"] = "modules: \u{1b}[2J\u{1b}]0;owned\u{7} gone".into();
    let evil = d.join("evil.json");
    std::fs::write(&evil, r.to_string()).unwrap();
    let (c, out, _) = validator(&["report", evil.to_str().unwrap()]);
    assert_eq!(c, 1);
    assert!(!out.contains('\u{1b}') && out.contains("?[2J"), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// A report of a schema this version does not know (`validator.report/v999`) is refused
/// by name, exit 2, not rendered as if it were one it knows.
#[test]
fn unknown_schema_is_refused() {
    let d = tmp("schema");
    let text = std::fs::read_to_string(example("report-good.json")).unwrap();
    let f = d.join("v999.json");
    std::fs::write(
        &f,
        text.replace("validator.report/v2", "validator.report/v999"),
    )
    .unwrap();
    let (c, out, err) = validator(&["report", f.to_str().unwrap()]);
    assert_eq!(c, 2, "{out}{err}");
    assert!(
        err.contains("validator.report/v999") && err.contains("v999.json"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 34 item 2: with several outputs, `report` wrote some and then failed (a bad
/// `--namespace` after `--svg` and `--prometheus` were written; a missing directory for
/// `--nfd` after an existing `--prometheus` file was replaced). Every argument and
/// target is judged first and the files are written all or none; the same file named
/// twice is refused.
#[test]
fn several_outputs_are_all_or_none() {
    let d = tmp("all-or-none");
    let (svg, prom, nfd) = (d.join("a.svg"), d.join("b.prom"), d.join("c.nfd"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let good = example("report-good.json");
    // All three outputs, and `extra` after them.
    let all_three = |extra: &[&str]| {
        let (svg, prom, nfd) = (s(&svg), s(&prom), s(&nfd));
        let mut args = vec![
            "report",
            &good,
            "--svg",
            &svg,
            "--prometheus",
            &prom,
            "--nfd",
            &nfd,
        ];
        args.extend_from_slice(extra);
        validator(&args)
    };
    let (c, _, err) = all_three(&["--namespace", "BAD NS"]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!svg.exists() && !prom.exists() && !nfd.exists());
    std::fs::write(&prom, "OLD").unwrap();
    let missing = d.join("missing-dir/x");
    let (c, _, err) = validator(&[
        "report",
        &good,
        "--prometheus",
        &s(&prom),
        "--nfd",
        &s(&missing),
    ]);
    assert_eq!(c, 2, "{err}");
    assert!(err.contains("missing-dir"), "{err}");
    assert_eq!(std::fs::read_to_string(&prom).unwrap(), "OLD");
    // The same file twice, however spelled: refused, the file unchanged.
    let again = d.join(".").join("b.prom");
    for (a, b) in [("--svg", &prom), ("--nfd", &again)] {
        let (c, _, err) = validator(&["report", &good, "--prometheus", &s(&prom), a, &s(b)]);
        assert_eq!(c, 2, "{err}");
        assert!(err.contains("the same file named twice"), "{err}");
        assert_eq!(std::fs::read_to_string(&prom).unwrap(), "OLD");
    }
    // All good: all three written, the old file replaced.
    let (c, out, err) = all_three(&[]);
    assert_eq!(c, 0, "{err}");
    assert_eq!(out.matches("wrote ").count(), 3, "{out}");
    assert!(std::fs::read_to_string(&prom)
        .unwrap()
        .contains("validator_"));
    assert!(svg.exists() && nfd.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 34 item 8: Unicode bidirectional controls (U+202E and the rest) in a report
/// reached the terminal and could make one name read as another; they are shown as `?`
/// like the control characters, and escaped in error messages.
#[test]
fn bidi_controls_never_reach_the_terminal() {
    let d = tmp("bidi");
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(example("report-image-fault.json")).unwrap())
            .unwrap();
    r["reason"] = "modules: evil\u{202e}gpj.exe\u{2066}x\u{2069} \u{200f}".into();
    r["pool"] = "pool\u{202d}a".into();
    let evil = d.join("evil.json");
    std::fs::write(&evil, r.to_string()).unwrap();
    for extra in [None, Some("--brief")] {
        let mut args = vec!["report", evil.to_str().unwrap()];
        args.extend(extra);
        let (c, out, _) = validator(&args);
        assert_eq!(c, 1);
        for bidi in ['\u{202e}', '\u{2066}', '\u{2069}', '\u{200f}', '\u{202d}'] {
            assert!(!out.contains(bidi), "{extra:?}: {bidi:?} in {out}");
        }
        assert!(out.contains("evil?gpj.exe?x?"), "{out}");
    }
    // A file name with one, in an error message: escaped.
    let name = d.join("x\u{202e}txt.json");
    let (c, _, err) = validator(&["report", name.to_str().unwrap()]);
    assert_eq!(c, 2);
    assert!(
        !err.contains('\u{202e}') && err.contains("x\\u{202e}txt.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

//! `validator recheck`, run as a process against the hardware fixture trees: a boot
//! quarantined by an InfiniBand port still training (`ib-port-init`) is re-checked once
//! the port is up (`good`): the node passes now, the textfile (`promtool check metrics`
//! clean) and the NFD features say so, the boot's report is left as it was. A port that
//! goes down after a passing boot (`port-down`) raises a quarantine. A BOM that is not
//! the boot's, a boot that fell back, and outputs onto a directory, a FIFO or a link are
//! refused with nothing written.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use validator::report::{Decision, Fault, Report, StageReport, StageStatus};
use validator::stages::preflight::{self, HwRoots, Options, PreflightReport};
use validator::stages::Stage;

mod run;
use run::validator;

fn ws() -> PathBuf {
    test_support::workspace()
}

fn fixture(v: &str) -> PathBuf {
    ws().join("validator/tests/fixtures/hw").join(v)
}

fn h200() -> PathBuf {
    ws().join("examples/hgx-h200-training.toml")
}

/// A node: the fixture's trees copied into `d`, its root with the BOM's `[report]`
/// directories linked into its `/run` as the shipped images link them, and the boot's
/// report (made by the preflight over `boot_fixture`, as the boot's stage makes it) and
/// BOM where the init leaves them.
struct Node {
    d: PathBuf,
    root: PathBuf,
}

impl Node {
    fn new(tag: &str, boot_fixture: &str, now_fixture: &str) -> Node {
        let d = test_support::tmpdir(&format!("recheck-{tag}"));
        for sub in ["sys", "proc", "root"] {
            test_support::copy_tree(&fixture(now_fixture).join(sub), &d.join(sub));
        }
        let root = d.join("root");
        let run = root.join("run/validator");
        for (link, to) in [
            (
                "var/lib/prometheus/node-exporter",
                "/run/validator/textfile",
            ),
            (
                "etc/kubernetes/node-feature-discovery/features.d",
                "/run/validator/nfd",
            ),
        ] {
            let l = root.join(link);
            std::fs::create_dir_all(l.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, &l).unwrap();
        }
        for sub in ["textfile", "nfd"] {
            std::fs::create_dir_all(run.join(sub)).unwrap();
        }
        let bom = validator::config::bom::load(&h200()).unwrap();
        std::fs::write(run.join("bom.toml"), &bom.bytes).unwrap();
        let r = boot_report(&bom, &fixture(boot_fixture));
        std::fs::write(
            run.join("report.json"),
            validator::report::json::file_bytes(&r),
        )
        .unwrap();
        Node { d, root }
    }

    fn run_dir(&self) -> PathBuf {
        self.root.join("run/validator")
    }

    fn recheck(&self, extra: &[&str]) -> (i32, String, String) {
        let p = |s: &str| self.d.join(s).display().to_string();
        let run = self.run_dir();
        let mut args = vec![
            "recheck".to_string(),
            "--report".into(),
            run.join("report.json").display().to_string(),
            "--bom".into(),
            run.join("bom.toml").display().to_string(),
            "--sysfs".into(),
            p("sys"),
            "--procfs".into(),
            p("proc"),
            "--root".into(),
            p("root"),
        ];
        if !extra.contains(&"--out") {
            args.push("--out".into());
            args.push(run.join("recheck.json").display().to_string());
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        validator(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn written(&self) -> Vec<String> {
        let run = self.run_dir();
        let mut v: Vec<String> = ["recheck.json", "textfile/validator.prom", "nfd/validator"]
            .iter()
            .filter(|f| run.join(f).exists())
            .map(|f| f.to_string())
            .collect();
        v.sort();
        v
    }
}

/// The report of a boot whose preflight stage ran over `hw` with `bom`.
fn boot_report(bom: &validator::config::bom::LoadedBom, hw: &Path) -> Report {
    let roots = HwRoots {
        sys: hw.join("sys"),
        proc: hw.join("proc"),
        root: hw.join("root"),
    };
    let mut opts = Options::from_bom(&bom.bom);
    opts.link_wait = std::time::Duration::ZERO;
    let mut pre = PreflightReport::default();
    preflight::check(&roots, &bom.bom, &opts, &mut pre);
    let mut r = Report::new(1_000);
    r.image_id = Some(bom.bom.image_id.0.clone());
    r.bom_sha256 = Some(bom.sha256.clone());
    r.pool = bom.bom.report.pool.clone();
    let decided = pre
        .decide()
        .map(|(f, c)| (f, format!("preflight: {}: {}", c.name, c.detail)));
    r.stages.push(StageReport {
        name: Stage::Preflight,
        status: if decided.is_some() {
            StageStatus::Failed
        } else {
            StageStatus::Ok
        },
        start_us: 2_000,
        duration_us: 3_000,
        fault: decided.as_ref().map(|d| d.0),
        detail: Some(pre.summary()),
    });
    if let Some((f, why)) = decided {
        r.decision = Decision::Quarantine;
        r.fault = Some(f);
        r.reason = Some(why);
    }
    r.preflight = Some(pre);
    r.checks = validator::report::checks::derive(&r);
    r
}

fn promtool_check(file: &Path) {
    let o = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap();
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "promtool check metrics {}: {}{}",
        file.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn a_port_that_came_up_clears_the_quarantine_and_the_boot_report_stays() {
    let n = Node::new("clears", "ib-port-init", "good");
    let boot = std::fs::read(n.run_dir().join("report.json")).unwrap();
    let before: Report =
        validator::report::json::parse(std::str::from_utf8(&boot).unwrap()).unwrap();
    assert_eq!(before.decision, Decision::Quarantine);
    assert_eq!(before.fault, Some(Fault::Hardware));

    let (code, out, err) = n.recheck(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS mlx5-ports:"), "{out}");
    assert!(
        out.trim_end()
            .ends_with("recheck: pass (the boot: quarantine)"),
        "{out}"
    );
    let run = n.run_dir();
    assert_eq!(std::fs::read(run.join("report.json")).unwrap(), boot);
    let live: Report =
        validator::report::json::parse(&std::fs::read_to_string(run.join("recheck.json")).unwrap())
            .unwrap();
    assert_eq!((live.decision, live.fault), (Decision::Pass, None));
    let k = live.recheck.as_ref().unwrap();
    assert_eq!(k.boot_decision, Decision::Quarantine);
    assert_eq!(k.boot_fault, Some(Fault::Hardware));
    assert!(k.boot_reason.as_deref().unwrap().contains("mlx5-ports"));
    // The textfile, through the link the image has, as node_exporter would serve it.
    let prom = run.join("textfile/validator.prom");
    promtool_check(&prom);
    let m = std::fs::read_to_string(&prom).unwrap();
    assert!(
        m.contains("validator_decision{decision=\"pass\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("validator_decision{decision=\"quarantine\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("validator_boot_info{decision=\"quarantine\",fault=\"hardware\"} 1\n"),
        "{m}"
    );
    assert!(m.contains("validator_recheck_timestamp_seconds "), "{m}");
    let report_info = m
        .lines()
        .find(|l| l.starts_with("validator_report_info{"))
        .unwrap();
    assert!(report_info.contains("decision=\"pass\""), "{report_info}");
    assert!(!report_info.contains("fault="), "{report_info}");
    let labels = std::fs::read_to_string(run.join("nfd/validator")).unwrap();
    let f = validator::formats::nfd::parse(&labels).unwrap();
    let get = |name: &str| {
        f.iter()
            .find(|x| x.name == name)
            .map(|x| x.value.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        (
            get("decision").as_str(),
            get("quarantine").as_str(),
            get("fault").as_str()
        ),
        ("pass", "false", "none"),
        "{labels}"
    );
    // `validator report` reads the re-check's file as any report.
    let (code, out, err) = validator(&["report", run.join("recheck.json").to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_port_that_went_down_after_a_passing_boot_raises_a_quarantine() {
    let n = Node::new("raises", "good", "port-down");
    // The JSON alone first.
    let (code, _, err) = n.recheck(&["--no-fleet-files"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(n.written(), ["recheck.json"]);
    let (code, out, err) = n.recheck(&[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("FAIL mlx5-ports:"), "{out}");
    assert!(
        out.contains("recheck: quarantine: preflight: mlx5-ports:"),
        "{out}"
    );
    let m = std::fs::read_to_string(n.run_dir().join("textfile/validator.prom")).unwrap();
    assert!(
        m.contains("validator_decision{decision=\"quarantine\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("validator_boot_info{decision=\"pass\"} 1\n"),
        "{m}"
    );
    let labels = std::fs::read_to_string(n.run_dir().join("nfd/validator")).unwrap();
    assert!(
        labels.lines().any(|l| l.ends_with("/quarantine=true")),
        "{labels}"
    );
}

#[test]
fn what_is_not_the_boots_or_cannot_be_written_is_refused_with_nothing_written() {
    let n = Node::new("hostile", "ib-port-init", "good");
    let run = n.run_dir();
    // Another BOM than the one the boot was judged by (one byte more).
    let bom = run.join("bom.toml");
    let good = std::fs::read(&bom).unwrap();
    let mut other = good.clone();
    other.extend_from_slice(b"\n");
    std::fs::write(&bom, &other).unwrap();
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not the BOM the boot was judged by"),
        "{err}"
    );
    assert!(n.written().is_empty(), "{:?}", n.written());
    std::fs::write(&bom, &good).unwrap();

    // A boot that fell back has no running node.
    let rp = run.join("report.json");
    let boot = std::fs::read(&rp).unwrap();
    let mut r: Report =
        validator::report::json::parse(std::str::from_utf8(&boot).unwrap()).unwrap();
    r.decision = Decision::Fallback;
    std::fs::write(&rp, validator::report::json::file_bytes(&r)).unwrap();
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("only a boot that went on"), "{err}");
    assert!(n.written().is_empty());
    // A truncated report.
    std::fs::write(&rp, &boot[..boot.len() / 2]).unwrap();
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("report.json"), "{err}");
    std::fs::write(&rp, &boot).unwrap();

    // The output onto a directory, a FIFO, a link: refused, and neither the textfile nor
    // the features file is written (all or none).
    let out = run.join("recheck.json");
    std::fs::create_dir(&out).unwrap();
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("recheck.json"), "{err}");
    std::fs::remove_dir(&out).unwrap();
    test_support::fifo(&out);
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    std::fs::remove_file(&out).unwrap();
    std::os::unix::fs::symlink(n.d.join("elsewhere"), &out).unwrap();
    let (code, _, err) = n.recheck(&[]);
    assert_eq!(code, 2, "{err}");
    assert!(!n.d.join("elsewhere").exists());
    std::fs::remove_file(&out).unwrap();
    assert!(n.written().is_empty(), "{:?}", n.written());

    // The boot's report as the output, by another name: refused, the report untouched.
    let rp = run.join("report.json");
    let (code, _, err) = n.recheck(&[
        "--out",
        n.d.join("root/run/../run/validator/report.json")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("the boot's report cannot be an output"),
        "{err}"
    );
    assert_eq!(std::fs::read(&rp).unwrap(), boot);
    assert!(n.written().is_empty(), "{:?}", n.written());

    // Then it runs.
    let (code, out, err) = n.recheck(&[]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        n.written(),
        ["nfd/validator", "recheck.json", "textfile/validator.prom"]
    );
}

//! The preflight's input table (`docs/FAULTS.md`, "Preflight inputs") drives this test:
//! for each row, the row's file in a copy of the `good` fixture is removed, then replaced
//! by a dangling symlink, a symlink loop and a directory, and the row's check must end as
//! the table says (status and fault class), naming the file when it fails. So the table
//! and the behaviour cannot drift, and no check passes on data it could not read (issue
//! 21 item 7: a GPU's `current_link_speed` missing gave "PASS 7 GPU link(s)" against a BOM
//! of 8 GPUs at x16).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use validator::config::bom::Bom;
use validator::stages::preflight::{self, CheckStatus, HwRoots, Options, PreflightReport};
use validator::stages::Fault;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bom() -> Bom {
    let mut b = validator::config::bom::load(&workspace().join("examples/hgx-h200-training.toml"))
        .unwrap()
        .bom;
    b.hardware.link_wait_s = Some(0);
    b
}

fn run(dir: &Path, bom: &Bom) -> PreflightReport {
    let roots = HwRoots {
        sys: dir.join("sys"),
        proc: dir.join("proc"),
        root: dir.join("root"),
    };
    let opts = Options {
        link_wait: Duration::ZERO,
        poll: Duration::from_millis(20),
    };
    let mut r = PreflightReport::default();
    preflight::check(&roots, bom, &opts, &mut r);
    r
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    check: String,
    file: String,
    missing: (CheckStatus, Option<Fault>),
    unreadable: (CheckStatus, Option<Fault>),
}

fn outcome(cell: &str) -> (CheckStatus, Option<Fault>) {
    match cell {
        "pass" => (CheckStatus::Pass, None),
        "skip" => (CheckStatus::Skip, None),
        "warn" => (CheckStatus::Warn, None),
        "fail (hardware)" => (CheckStatus::Fail, Some(Fault::Hardware)),
        "fail (image)" => (CheckStatus::Fail, Some(Fault::Image)),
        "fail (platform)" => (CheckStatus::Fail, Some(Fault::Platform)),
        other => panic!("docs/FAULTS.md preflight inputs: unknown outcome {other:?}"),
    }
}

fn table() -> Vec<Row> {
    let doc = std::fs::read_to_string(workspace().join("docs/FAULTS.md")).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Preflight inputs"))
        .expect("docs/FAULTS.md has a section \"Preflight inputs\"");
    let unquote = |c: &str| {
        c.strip_prefix('`')
            .and_then(|c| c.strip_suffix('`'))
            .unwrap_or_else(|| panic!("not in backticks: {c:?}"))
            .to_string()
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 5, "{l}");
            Row {
                check: unquote(cells[0]),
                file: unquote(cells[2]),
                missing: outcome(cells[3]),
                unreadable: outcome(cells[4]),
            }
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Break {
    Missing,
    Dangling,
    Loop,
    Directory,
}

#[test]
fn every_row_of_the_preflight_input_table_holds() {
    let rows = table();
    assert!(rows.len() >= 40, "{} rows", rows.len());
    let tmp = std::fs::canonicalize(common::tmpdir("preflight-inputs")).unwrap();
    let bak = std::fs::canonicalize(common::tmpdir("preflight-inputs-bak")).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hw/good");
    common::copy_tree(&fixtures, &tmp);
    let b = bom();
    let base = run(&tmp, &b);
    assert!(base.decide().is_none(), "{}", base.summary());
    let mut failures = Vec::new();
    for row in &rows {
        assert!(
            base.check(&row.check).is_some(),
            "the table names check {:?}, which the preflight does not run",
            row.check
        );
        let given = tmp.join(&row.file);
        let parent = std::fs::canonicalize(given.parent().unwrap()).unwrap();
        let name = given.file_name().unwrap();
        let file = parent.join(name);
        assert!(
            std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()),
            "{}: not a file of the good fixture",
            row.file
        );
        let saved = bak.join("saved");
        for how in [
            Break::Missing,
            Break::Dangling,
            Break::Loop,
            Break::Directory,
        ] {
            std::fs::rename(&file, &saved).unwrap();
            match how {
                Break::Missing => {}
                Break::Dangling => std::os::unix::fs::symlink("no-such-file-here", &file).unwrap(),
                Break::Loop => std::os::unix::fs::symlink(name, &file).unwrap(),
                Break::Directory => std::fs::create_dir(&file).unwrap(),
            }
            let r = run(&tmp, &b);
            match how {
                Break::Missing => {}
                Break::Directory => std::fs::remove_dir(&file).unwrap(),
                Break::Dangling | Break::Loop => std::fs::remove_file(&file).unwrap(),
            }
            std::fs::rename(&saved, &file).unwrap();
            let want = match how {
                Break::Missing => row.missing,
                _ => row.unreadable,
            };
            let c = r.check(&row.check).unwrap();
            let shown = file.display().to_string();
            let ok = (c.status, c.fault) == want
                && (c.status != CheckStatus::Fail || c.detail.contains(&shown))
                && (want.0 != CheckStatus::Fail || r.decide().is_some());
            if !ok {
                failures.push(format!(
                    "{} {how:?}: want {want:?}, got {:?} {:?}: {}",
                    row.file, c.status, c.fault, c.detail
                ));
            }
        }
    }
    // The tree is whole again.
    assert!(run(&tmp, &b).decide().is_none());
    std::fs::remove_dir_all(&tmp).unwrap();
    std::fs::remove_dir_all(&bak).unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from docs/FAULTS.md:\n{}",
        failures.len(),
        rows.len() * 4,
        failures.join("\n")
    );
}

/// Issue 21 item 7 as reported: one GPU's `current_link_speed` missing, dangling or a
/// loop must not give "PASS 7 GPU link(s)" while the BOM asks for 8 GPUs at x16.
#[test]
fn a_gpu_link_that_cannot_be_read_fails_gpu_links() {
    let tmp = std::fs::canonicalize(common::tmpdir("preflight-gpu-link")).unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hw/good");
    common::copy_tree(&fixtures, &tmp);
    let b = bom();
    let dev = std::fs::canonicalize(tmp.join("sys/bus/pci/devices/0000:c3:00.0")).unwrap();
    let file = dev.join("current_link_speed");
    std::fs::remove_file(&file).unwrap();
    for link in [None, Some("nowhere"), Some("current_link_speed")] {
        if let Some(t) = link {
            std::os::unix::fs::symlink(t, &file).unwrap();
        }
        let r = run(&tmp, &b);
        let c = r.check("gpu-links").unwrap();
        assert!(
            c.failed()
                && c.fault == Some(Fault::Hardware)
                && c.detail.contains(&file.display().to_string()),
            "{link:?}: {c:?}"
        );
        assert_eq!(r.decide().unwrap().0, Fault::Hardware);
        if link.is_some() {
            std::fs::remove_file(&file).unwrap();
        }
    }
    // Every link file gone (a function that shows no link) while the BOM bounds GPU links.
    for f in ["current_link_width", "max_link_speed", "max_link_width"] {
        std::fs::remove_file(dev.join(f)).unwrap();
    }
    let r = run(&tmp, &b);
    let c = r.check("gpu-links").unwrap();
    assert!(
        c.failed() && c.detail.contains(&file.display().to_string()),
        "{c:?}"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

//! The fuzz targets' committed inputs, replayed on the stable toolchain without libFuzzer:
//! every file under `fuzz/regressions/<target>/` (each finding of `scripts/fuzz`, and a few
//! hand-picked inputs per target) goes through the same entry point the fuzz target runs
//! (`test_support::fuzz`, the functions the libFuzzer targets call), with its round-trip and verdict
//! assertions. A fixed finding stays fixed in CI's default run.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support::fuzz as fuzz_entry;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn every_regression_input_passes_its_target() {
    let mut failed = Vec::new();
    let mut ran = 0;
    for dir in files(&fuzz_dir().join("regressions")) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let f = fuzz_entry::target(&name)
            .unwrap_or_else(|| panic!("fuzz/regressions/{name}: no fuzz target of that name"));
        for input in files(&dir) {
            let bytes = std::fs::read(&input).unwrap();
            if catch_unwind(AssertUnwindSafe(|| f(&bytes))).is_err() {
                failed.push(input.display().to_string());
            }
            ran += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "inputs that fail their target: {failed:#?}"
    );
    assert!(ran >= fuzz_entry::TARGETS.len(), "only {ran} inputs");
}

#[test]
fn every_target_has_inputs_a_fuzz_target_and_a_manifest_entry() {
    let fuzz = fuzz_dir();
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
    for (name, _) in fuzz_entry::TARGETS {
        let src = std::fs::read_to_string(fuzz.join(format!("fuzz_targets/{name}.rs")))
            .unwrap_or_else(|e| panic!("fuzz_targets/{name}.rs: {e}"));
        assert!(
            src.contains(&format!("validator_fuzz::{name}(data)")),
            "fuzz_targets/{name}.rs does not call its entry point"
        );
        assert!(
            manifest.contains(&format!(
                "name = \"{name}\"\npath = \"fuzz_targets/{name}.rs\""
            )),
            "fuzz/Cargo.toml has no [[bin]] for {name}"
        );
        assert!(
            !files(&fuzz.join("regressions").join(name)).is_empty(),
            "fuzz/regressions/{name} has no input"
        );
    }
    let targets = files(&fuzz.join("fuzz_targets"));
    assert_eq!(
        targets.len(),
        fuzz_entry::TARGETS.len(),
        "fuzz_targets/ and TARGETS disagree: {targets:?}"
    );
}

//! Keeps `docs/FUZZING.md` and the fuzz crate true about which parsers are fuzzed.
//!
//! How the parser modules are enumerated: every `.rs` file under `validator/src/formats/`
//! is one module of the parser layer (the layer's contract: pure parsers over bytes, and
//! the writers of the same formats), named by its path under `formats` (`verity/tree.rs`
//! -> `verity::tree`), except the layer's own `mod.rs`, unit-test submodules (`tests.rs`)
//! and a directory module's `mod.rs` that only declares submodules (no `fn` of its own:
//! its code is its submodules'). A directory module whose `mod.rs` holds code (`tpm`,
//! `kmod`, `verity`) counts as a module of its own.
//!
//! Each module must be either in the fuzz crate's list `PARSERS` (`test-support/src/fuzz/mod.rs`: the
//! module and the target that drives it), naming a target of `TARGETS` that has its
//! `fuzz/fuzz_targets/<name>.rs`, or in the table "Parsers without a fuzz target" of
//! `docs/FUZZING.md` with a reason; not both. Every entry of either list must name a module
//! that exists, so a moved or removed parser fails here too.
//!
//! Current limits: the test reads `test-support/src/fuzz/mod.rs` as text (it does not build the fuzz
//! crate; `fuzz_regressions` does), so it cannot tell whether a target really calls the
//! parser it is listed for; that stays a reviewer's check of `PARSERS`.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The parser modules under `validator/src/formats/`, as described in the file's doc.
fn parser_modules() -> BTreeSet<String> {
    fn walk(dir: &Path, under: &[String], out: &mut BTreeSet<String>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                let mut sub = under.to_vec();
                sub.push(name);
                walk(&p, &sub, out);
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            if stem == "tests" {
                continue;
            }
            let mut path = under.to_vec();
            if stem == "mod" {
                let text = std::fs::read_to_string(&p).unwrap();
                let has_code = text
                    .lines()
                    .map(str::trim_start)
                    .any(|l| l.starts_with("fn ") || l.starts_with("pub fn "));
                if path.is_empty() || !has_code {
                    continue;
                }
            } else {
                path.push(stem.to_string());
            }
            out.insert(path.join("::"));
        }
    }
    let mut out = BTreeSet::new();
    walk(&root().join("validator/src/formats"), &[], &mut out);
    out
}

/// The string pairs of a `const NAME: &[(&str, ...)] = &[ ... ];` list in `text`.
fn const_pairs(text: &str, name: &str) -> Vec<(String, String)> {
    let start = text
        .find(&format!("pub const {name}:"))
        .unwrap_or_else(|| panic!("test-support/src/fuzz/mod.rs has no `pub const {name}`"));
    let body = &text[start..];
    let body = &body[..body.find("];").unwrap()];
    body.lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("(\"")?;
            let (a, rest) = rest.split_once('"')?;
            let b = rest
                .trim_start_matches([',', ' '])
                .trim_start_matches('"')
                .split(['"', ')'])
                .next()?;
            Some((a.to_string(), b.trim().to_string()))
        })
        .collect()
}

/// The rows of `docs/FUZZING.md`'s table "Parsers without a fuzz target": module (in
/// backquotes, `formats::` optional) to reason.
fn unfuzzed_in_doc() -> BTreeMap<String, String> {
    let doc = read("docs/FUZZING.md");
    let start = doc
        .find("## Parsers without a fuzz target")
        .expect("docs/FUZZING.md has no section \"Parsers without a fuzz target\"");
    let section = &doc[start..];
    let section = match section[3..].find("\n## ") {
        Some(end) => &section[..end + 3],
        None => section,
    };
    let mut out = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let module = cells[0]
            .trim_matches('`')
            .trim_start_matches("formats::")
            .to_string();
        let why = cells.get(1).copied().unwrap_or("").to_string();
        assert!(
            !why.is_empty(),
            "docs/FUZZING.md: `{module}` without a reason"
        );
        out.insert(module, why);
    }
    out
}

#[test]
fn every_parser_has_a_fuzz_target_or_a_documented_reason() {
    let modules = parser_modules();
    assert!(
        modules.contains("gpt") && modules.contains("verity::tree"),
        "enumeration found {modules:?}"
    );
    let lib = read("test-support/src/fuzz/mod.rs");
    let targets: BTreeSet<String> = const_pairs(&lib, "TARGETS")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(targets.contains("gpt"), "TARGETS read as {targets:?}");
    let parsers = const_pairs(&lib, "PARSERS");
    let unfuzzed = unfuzzed_in_doc();
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for (module, target) in &parsers {
        listed.insert(module.clone());
        if !modules.contains(module) {
            problems.push(format!(
                "PARSERS names `{module}`, which is not a parser module"
            ));
        }
        if !targets.contains(target) {
            problems.push(format!(
                "PARSERS: `{module}` -> `{target}`, which is not in TARGETS"
            ));
        }
        if !root()
            .join(format!("fuzz/fuzz_targets/{target}.rs"))
            .is_file()
        {
            problems.push(format!("fuzz/fuzz_targets/{target}.rs is missing"));
        }
        if unfuzzed.contains_key(module) {
            problems.push(format!(
                "`{module}` has a fuzz target and is in docs/FUZZING.md's table of parsers without one"
            ));
        }
    }
    for module in unfuzzed.keys() {
        if !modules.contains(module) {
            problems.push(format!(
                "docs/FUZZING.md lists `{module}`, which is not a parser module"
            ));
        }
    }
    for module in &modules {
        if !listed.contains(module) && !unfuzzed.contains_key(module) {
            problems.push(format!(
                "formats::{module} has no fuzz target (test-support/src/fuzz/mod.rs PARSERS) and is not in \
                 docs/FUZZING.md's table \"Parsers without a fuzz target\""
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

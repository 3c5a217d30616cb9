//! The layer rule: each module of the validator uses only its own layer and those below
//! it (util -> formats -> trust -> sys -> config -> gate -> runtime -> stages -> report ->
//! attest -> boot). This test reads every source file with the workspace's one import
//! scanner (`test_support::imports`, which the import-cycle check uses too) and fails on a `crate::` or `super::` path that
//! points up, on an import cycle between the modules of one layer (`stages::storage` and
//! `stages::verity`, say), and on a stage that uses another stage (`stages::verity` using
//! `stages::storage`): what stages share lives in `runtime`, and only the framework of
//! `stages/mod.rs` (`Context`, `Fault`, `Classified`, ...) is common to them.
//!
//! `LAYERS_SRC=<dir>` checks another tree's `src` instead (to see the rules fail on an
//! older one).
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use test_support::imports::{self, module_path, sources};

/// The layers, bottom first.
const LAYERS: &[&str] = &[
    "util", "formats", "trust", "sys", "config", "gate", "runtime", "stages", "report", "attest",
    "boot",
];

/// The source tree checked: this crate's `src`, or `LAYERS_SRC`.
fn src_dir() -> PathBuf {
    std::env::var_os("LAYERS_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn rank(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == top)
}

/// Every module path a source text refers to (`crate::`, `super::`, `self::`, through
/// the shared scanner: `use` groups over several lines and inline modules included), as
/// its first two names (`stages::verity`), with the line it is on. `module` is the text's
/// own module path.
fn references(text: &str, module: &[String]) -> Vec<(usize, String)> {
    imports::references(text, module)
        .into_iter()
        .map(|r| {
            (
                r.line,
                r.path
                    .iter()
                    .take(2)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("::"),
            )
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

/// The violations in one file's text.
fn violations(rel: &Path, text: &str) -> Vec<String> {
    let module = module_path(rel);
    let Some(own) = module.first().and_then(|t| rank(t)) else {
        return Vec::new(); // lib.rs: declares the layers
    };
    references(text, &module)
        .into_iter()
        .filter_map(|(line, path)| {
            let top = path.split("::").next().unwrap_or("").to_string();
            let r = rank(&top)?;
            (r > own).then(|| {
                format!(
                    "{}:{line}: layer {} uses {top}, a higher layer",
                    rel.display(),
                    LAYERS[own]
                )
            })
        })
        .collect()
}

/// The edges between modules of one layer (`stages::storage` -> `stages::verity`): the
/// first two names of the file's module path to the first two of each reference.
fn edges(rel: &Path, text: &str) -> Vec<(String, String)> {
    let module = module_path(rel);
    if module.len() < 2 {
        return Vec::new(); // a layer's root module may use its children
    }
    let me = module
        .iter()
        .take(2)
        .cloned()
        .collect::<Vec<_>>()
        .join("::");
    references(text, &module)
        .into_iter()
        .filter(|(_, to)| {
            let mut p = to.split("::");
            p.next() == module.first().map(String::as_str)
                && p.next()
                    .is_some_and(|s| s.chars().next().is_some_and(|c| c.is_lowercase()))
                && *to != me
        })
        .map(|(_, to)| (me.clone(), to))
        .collect()
}

/// A cycle in the graph, if there is one.
fn find_cycle(edges: &[(String, String)]) -> Option<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().insert(b);
    }
    fn visit<'a>(
        n: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| *s == n) {
            let mut c: Vec<String> = stack[i..].iter().map(|s| s.to_string()).collect();
            c.push(n.to_string());
            return Some(c);
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for m in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, &graph, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_cycle_between_the_modules_of_a_layer() {
    let src = src_dir();
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut all = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        all.extend(edges(rel, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(all.len() > 10, "{all:?}");
    assert_eq!(find_cycle(&all), None);
    // The check sees a cycle when there is one.
    let mut with = all.clone();
    with.extend(edges(
        Path::new("stages/storage/mod.rs"),
        "use super::handover::x;",
    ));
    with.extend(edges(
        Path::new("stages/handover.rs"),
        "use crate::stages::storage::y;",
    ));
    assert!(find_cycle(&with).is_some());
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let src = src_dir();
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 30, "{} files", files.len());
    let mut bad = Vec::new();
    let mut tops = std::collections::BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        if let Some(t) = module_path(rel).first() {
            tops.insert(t.clone());
        }
        bad.extend(violations(rel, &std::fs::read_to_string(f).unwrap()));
    }
    assert!(bad.is_empty(), "imports pointing up:\n{}", bad.join("\n"));
    // Every top-level module is a known layer.
    let unknown: Vec<_> = tops.iter().filter(|t| rank(t).is_none()).collect();
    assert!(
        unknown.is_empty(),
        "modules outside the layers: {unknown:?}"
    );
}

#[test]
fn the_check_catches_upward_imports() {
    let f = Path::new("formats/gpt.rs");
    assert!(violations(f, "use crate::util::hex;").is_empty());
    assert_eq!(violations(f, "use crate::report::Report;").len(), 1);
    assert_eq!(violations(f, "use crate::{util, stages::Fault};").len(), 1);
    // A group over several lines, and a nested one.
    assert_eq!(
        violations(f, "use crate::{\n    util::hex,\n    report::Report,\n};").len(),
        1
    );
    assert_eq!(
        violations(
            f,
            "use crate::{util::{hex, le}, stages::{Context,\n Fault}};"
        )
        .len(),
        2
    );
    assert!(violations(f, "let s = \"crate::report::Report\";").is_empty());
    assert!(violations(f, "// use crate::report::Report;").is_empty());
    // `super::` from a nested module resolves within its layer...
    let g = Path::new("stages/modules/gate.rs");
    assert!(violations(g, "use super::super::Fault;").is_empty());
    assert!(violations(g, "let x = crate::config::layout::SYMVERS;").is_empty());
    assert_eq!(violations(g, "fn f() -> crate::report::Report {}").len(), 1);
    // ...and from a top-level file to its siblings.
    assert_eq!(
        violations(Path::new("report/mod.rs"), "use super::boot;").len(),
        1
    );
    assert!(violations(Path::new("boot.rs"), "use crate::report::Report;").is_empty());
}

/// Each layer's root module (`<layer>/mod.rs`, or `boot.rs`) says which layer it is, as
/// `//! Layer N` with N its place in [`LAYERS`] (bottom first, from 1), and the README's
/// layer chain (`util -> formats ... -> boot`) names the layers in this order.
#[test]
fn the_layer_headers_and_the_readme_follow_the_list() {
    let src = src_dir();
    let mut wrong = Vec::new();
    for (i, layer) in LAYERS.iter().enumerate() {
        let file = [
            src.join(layer).join("mod.rs"),
            src.join(format!("{layer}.rs")),
        ]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().next().unwrap_or("");
        let want = format!("//! Layer {}", i + 1);
        let next = first.get(want.len()..want.len() + 1).unwrap_or("");
        if !first.starts_with(&want) || next.chars().any(|c| c.is_ascii_digit()) {
            wrong.push(format!(
                "{}: {first:?} does not start with {want:?}",
                file.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let readme = std::fs::read_to_string(src.join("../../README.md")).unwrap();
    let start = readme.find("util -> ").expect("the README's layer chain");
    let end = start
        + readme[start..]
            .find("boot (")
            .expect("the chain ends in boot");
    let chain: Vec<String> = readme[start..end + "boot".len()]
        .split("->")
        .map(|part| {
            // A layer name, then a note in parentheses and line breaks.
            part.split_whitespace().next().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(chain, LAYERS, "the README's layer chain");
}

/// The stages: the modules under `src/stages` (files and directories).
fn stage_names(src: &Path) -> BTreeSet<String> {
    std::fs::read_dir(src.join("stages"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "mod")
        .collect()
}

/// The uses of another stage in one file of a stage: (the stage, the stage it uses,
/// `file:line`). The framework items of `stages/mod.rs` are not a stage.
fn sibling_uses(
    rel: &Path,
    text: &str,
    stages: &BTreeSet<String>,
) -> Vec<(String, String, String)> {
    let module = module_path(rel);
    let (Some("stages"), Some(me)) = (module.first().map(String::as_str), module.get(1)) else {
        return Vec::new(); // not in a stage (`stages/mod.rs` is the framework)
    };
    references(text, &module)
        .into_iter()
        .filter_map(|(line, to)| {
            let mut p = to.split("::");
            (p.next() == Some("stages"))
                .then(|| p.next())
                .flatten()
                .filter(|y| stages.contains(*y) && *y != me)
                .map(|y| {
                    (
                        me.clone(),
                        y.to_string(),
                        format!("{}:{line}", rel.display()),
                    )
                })
        })
        .collect()
}

#[test]
fn no_stage_uses_another_stage() {
    let src = src_dir();
    let stages = stage_names(&src);
    assert!(stages.len() >= 10, "{stages:?}");
    let mut files = Vec::new();
    sources(&src.join("stages"), &mut files);
    let mut uses = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        uses.extend(sibling_uses(
            rel,
            &std::fs::read_to_string(f).unwrap(),
            &stages,
        ));
    }
    let bad: BTreeSet<String> = uses
        .iter()
        .map(|(x, y, at)| format!("{at}: stage {x} uses stage {y}"))
        .collect();
    assert!(
        bad.is_empty(),
        "stages using other stages (share through runtime instead):\n{}",
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_check_catches_sibling_stage_uses() {
    let stages: BTreeSet<String> = ["measure", "modules", "storage", "verity", "handover"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let n = |file: &str, text: &str| sibling_uses(Path::new(file), text, &stages).len();
    // What main had before the runtime layer.
    assert_eq!(
        n("stages/verity.rs", "use super::storage::FoundPartition;"),
        1
    );
    assert_eq!(
        n("stages/start.rs", "        super::handover::finish(action)"),
        1
    );
    assert_eq!(
        n(
            "stages/preflight/drivers.rs",
            "use crate::stages::{measure, Context, Fault};"
        ),
        1
    );
    assert_eq!(
        n("stages/modules/gate.rs", "use super::super::measure::x;"),
        1
    );
    // The framework, the stage's own modules, lower layers and comments are fine.
    assert_eq!(
        n(
            "stages/verity.rs",
            "use super::{Classified, Context, Fault};"
        ),
        0
    );
    assert_eq!(n("stages/modules/gate.rs", "use super::super::Fault;"), 0);
    assert_eq!(n("stages/modules/gate.rs", "use super::batch;"), 0);
    assert_eq!(
        n(
            "stages/verity.rs",
            "use crate::runtime::measure::MeasureError;"
        ),
        0
    );
    assert_eq!(n("stages/verity.rs", "// use super::storage::x;"), 0);
    assert_eq!(
        n("stages/mod.rs", "pub root: Option<storage::RootReport>,"),
        0
    );
    assert_eq!(n("stages/mod.rs", "use super::storage::x;"), 0);
}

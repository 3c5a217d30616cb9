//! No import cycle between the modules of any crate of the workspace.
//!
//! Contract: for every member crate (the list below, checked against the workspace's
//! `Cargo.toml`), this test reads every `.rs` file under its `src/`, finds each
//! `crate::`, `$crate::`, `super::` and `self::` path in code (comments, strings and char
//! literals are blanked first; `use` groups, nested and over several lines, are followed;
//! `super::` inside an inline `mod tests { .. }` resolves from that inline module),
//! resolves it to the deepest module that is a file or directory under `src/`, and draws
//! an edge from the file's module to it. A module, for the graph, is a top-level module
//! of the crate; for `validator`, whose top-level modules are its layers, it is the
//! second level inside each layer (`stages::storage`), and a layer's own root module
//! (`stages/mod.rs`) is a node of its own. Edges between a module and its ancestor or
//! descendant (a parent declaring and re-exporting its children, a child using its
//! parent's types) and edges from or to the crate root (`lib.rs`, `main.rs`,
//! `src/bin/*`) are not counted. A failure names each cycle (`a -> b -> a`) and every
//! import line that makes one of its edges (`src/a.rs:12: use crate::b::X;`).
//!
//! Current limits: a text scan, not name resolution: a path brought in by a glob
//! (`use crate::a::*` then `b::x`) or through a re-export counts as an edge to the module
//! it names, not to where the item lives; a bare relative path (`child::x`) is only valid
//! from a module to its own children, which are not counted anyway. A method of an
//! inherent impl written in another module (`Scenario::named`, in `qemu::catalogue`) is
//! called through its type, so the call is no edge to that module. Macros are read as
//! the text they are written in. `src/bin/*` files are crate roots of their own and are
//! not resolved.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use test_support::imports::{blank, module_path, read_crate, references, Source};

/// The workspace's member crates (their directories) and how deep a graph node goes.
const CRATES: &[(&str, usize)] = &[
    ("init", 1),
    ("validator", 2),
    ("validator-cli", 1),
    ("mkinitramfs", 1),
    ("qemu", 1),
    ("qemu/sigcases", 1),
    ("test-support", 1),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// An edge of the module graph and the line that makes it.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// The edges between the graph's nodes (module paths trimmed to `depth` names).
fn edges(files: &[Source], depth: usize) -> Vec<Edge> {
    // The modules that are files or directories.
    let mut known: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in files {
        for n in 0..=f.module.len() {
            known.insert(f.module[..n].to_vec());
        }
    }
    let node = |path: &[String]| -> Vec<String> {
        let n = (0..=path.len().min(depth))
            .rev()
            .find(|n| known.contains(&path[..*n]))
            .unwrap_or(0);
        path[..n].to_vec()
    };
    let mut out = Vec::new();
    for f in files {
        let me = node(&f.module);
        if me.is_empty() {
            continue; // a crate root declares every module
        }
        let lines: Vec<&str> = f.text.lines().collect();
        for r in references(&f.text, &f.module) {
            let to = node(&r.path);
            if to.is_empty() || to.starts_with(&me) || me.starts_with(&to) {
                continue;
            }
            let e = Edge {
                from: me.join("::"),
                to: to.join("::"),
                at: format!(
                    "{}:{}: {}",
                    f.rel.display(),
                    r.line,
                    lines.get(r.line - 1).map_or("", |l| l.trim())
                ),
            };
            // One edge per line (`use crate::a::{X, Y}` names `a` twice).
            if !out
                .iter()
                .any(|o: &Edge| o.from == e.from && o.to == e.to && o.at == e.at)
            {
                out.push(e);
            }
        }
    }
    out
}

/// The cycles of a graph: for each strongly connected component of more than one node,
/// a shortest cycle through its first node and every edge inside the component.
fn cycles(edges: &[Edge]) -> Vec<(Vec<String>, Vec<Edge>)> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
        graph.entry(&e.to).or_default();
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for m in graph.get(n).into_iter().flatten() {
                if seen.insert(m.to_string()) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<String>> = graph.keys().map(|n| (*n, reach(n))).collect();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    for n in graph.keys() {
        if placed.contains(n) || !reaches[n].contains(*n) {
            continue;
        }
        let scc: BTreeSet<&str> = graph
            .keys()
            .filter(|m| reaches[n].contains(**m) && reaches[**m].contains(*n))
            .copied()
            .collect();
        placed.extend(scc.iter().copied());
        // A shortest way back to `n` inside the component.
        let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([*n]);
        let mut back = None;
        while let Some(a) = queue.pop_front() {
            for b in graph.get(a).into_iter().flatten() {
                if *b == *n {
                    back = Some(a);
                    queue.clear();
                    break;
                }
                if scc.contains(b) && !prev.contains_key(b) && b != n {
                    prev.insert(b, a);
                    queue.push_back(b);
                }
            }
        }
        let mut cycle = vec![n.to_string()];
        let mut at = back.unwrap();
        while at != *n {
            cycle.push(at.to_string());
            at = prev[at];
        }
        cycle.push(n.to_string());
        cycle.reverse();
        let inside: Vec<Edge> = edges
            .iter()
            .filter(|e| scc.contains(e.from.as_str()) && scc.contains(e.to.as_str()))
            .cloned()
            .collect();
        out.push((cycle, inside));
    }
    out
}

/// The failure text for a crate's cycles, or `None`.
fn describe(name: &str, found: &[(Vec<String>, Vec<Edge>)]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let mut s = format!("import cycles between the modules of {name}:\n");
    for (cycle, inside) in found {
        let mut members: BTreeSet<&str> = BTreeSet::new();
        for e in inside {
            members.insert(&e.from);
            members.insert(&e.to);
        }
        s.push_str(&format!("  cycle: {}\n", cycle.join(" -> ")));
        s.push_str(&format!(
            "  modules that reach each other: {}\n  their imports of each other:\n",
            members.into_iter().collect::<Vec<_>>().join(", ")
        ));
        for e in inside {
            s.push_str(&format!("    {} -> {}: {}\n", e.from, e.to, e.at));
        }
    }
    Some(s)
}

fn check(dir: &str) {
    let depth = CRATES
        .iter()
        .find(|(d, _)| *d == dir)
        .map(|(_, n)| *n)
        .unwrap();
    let files = read_crate(&workspace().join(dir));
    assert!(!files.is_empty(), "{dir}: no sources");
    let all = edges(&files, depth);
    // A scan that sees nothing would pass every crate: every file whose code names a
    // `crate::`, `super::` or `self::` path must give the scanner at least one reference.
    let unseen: Vec<String> = files
        .iter()
        .filter(|f| {
            let code: String = blank(&f.text).into_iter().collect();
            ["crate::", "super::", "self::"]
                .iter()
                .any(|p| code.contains(p))
                && references(&f.text, &f.module).is_empty()
        })
        .map(|f| f.module.join("::"))
        .collect();
    assert!(
        unseen.is_empty(),
        "{dir}: the scanner found no reference in {unseen:?}, whose code names module paths"
    );
    assert!(
        files.len() < 10 || !all.is_empty(),
        "{dir}: {} files but no edge found",
        files.len()
    );
    if let Some(msg) = describe(dir, &cycles(&all)) {
        panic!("{msg}");
    }
}

#[test]
fn validator_has_no_import_cycle() {
    check("validator");
}

#[test]
fn validator_cli_has_no_import_cycle() {
    check("validator-cli");
}

#[test]
fn mkinitramfs_has_no_import_cycle() {
    check("mkinitramfs");
}

#[test]
fn init_has_no_import_cycle() {
    check("init");
}

#[test]
fn qemu_has_no_import_cycle() {
    check("qemu");
}

#[test]
fn sigcases_has_no_import_cycle() {
    check("qemu/sigcases");
}

#[test]
fn test_support_has_no_import_cycle() {
    check("test-support");
}

/// The test bed's crate doc names every module it declares (the `bench_*` modules as a
/// group).
#[test]
fn the_test_bed_doc_lists_every_module() {
    let lib = std::fs::read_to_string(workspace().join("qemu/src/lib.rs")).unwrap();
    let doc: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let at = doc.find("Modules, roughly from the bottom up").unwrap();
    let list = &doc[at..];
    let list = &list[..list.find("\n\n").unwrap_or(list.len())];
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert!(declared.len() > 20, "{declared:?}");
    let missing: Vec<&&str> = declared
        .iter()
        .filter(|m| !list.contains(&format!("`{m}`")))
        .filter(|m| !(m.starts_with("bench_") && list.contains("`bench_*`")))
        .collect();
    assert!(
        missing.is_empty(),
        "qemu/src/lib.rs's module list misses {missing:?}"
    );
}

#[test]
fn every_workspace_member_is_checked() {
    let toml = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let line = toml
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in the workspace Cargo.toml");
    let members: BTreeSet<&str> = line.split('"').skip(1).step_by(2).collect();
    let checked: BTreeSet<&str> = CRATES.iter().map(|(d, _)| *d).collect();
    assert_eq!(members, checked);
}

fn file(rel: &str, text: &str) -> Source {
    let rel = Path::new(rel);
    Source {
        module: module_path(rel.strip_prefix("src").unwrap()),
        rel: rel.to_path_buf(),
        text: text.to_string(),
    }
}

#[test]
fn the_check_sees_a_cycle_and_names_its_lines() {
    let files = [
        file("src/lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        file("src/a.rs", "use crate::b::X;\n"),
        file("src/b.rs", "use crate::{\n    c::Y,\n    lib_item,\n};\n"),
        file("src/c.rs", "fn f() { super::a::g() }\n"),
    ];
    let found = cycles(&edges(&files, 1));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["a", "b", "c", "a"]);
    let msg = describe("t", &found).unwrap();
    assert!(msg.contains("src/b.rs:2: c::Y,"), "{msg}");
    assert!(
        msg.contains("src/c.rs:1: fn f() { super::a::g() }"),
        "{msg}"
    );
    // Without the closing edge there is none.
    let acyclic = &files[..3];
    assert!(cycles(&edges(acyclic, 1)).is_empty());
}

#[test]
fn the_check_reads_code_only() {
    let files = [
        file("src/a.rs", "use crate::b::X;\n"),
        file(
            "src/b.rs",
            "//! see [`crate::a`]\n// crate::a::x\n/* crate::a::y */\n\
             const S: &str = \"crate::a::z\";\nconst R: &str = r#\"super::a\"#;\n\
             const C: char = '{';\nfn f<'a>(x: &'a str) {}\n",
        ),
    ];
    assert!(cycles(&edges(&files, 1)).is_empty());
    // A char literal brace does not shift the inline-module depth.
    let b = file("src/b.rs", "const C: char = '{';\nuse crate::a::Y;\n");
    assert_eq!(cycles(&edges(&[files[0].clone(), b], 1)).len(), 1);
}

#[test]
fn super_resolves_from_inline_modules_and_directories() {
    // `super::` inside `mod tests` is the file's own module: no edge.
    let t = file(
        "src/a.rs",
        "fn g() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::g(); super::super::b::h(); }\n}\n",
    );
    let refs = references(&t.text, &t.module);
    let paths: Vec<String> = refs.iter().map(|r| r.path.join("::")).collect();
    assert_eq!(paths, ["a", "a::g", "b::h"]);
    // In a directory module, `super::` from a child is the parent, and the second level
    // is a node for depth 2 while parent and child do not make an edge.
    let files = [
        file(
            "src/stages/mod.rs",
            "pub mod x;\npub mod y;\npub use x::A;\n",
        ),
        file("src/stages/x.rs", "use super::y::B;\nuse super::Fault;\n"),
        file("src/stages/y/mod.rs", "use crate::stages::x::A;\n"),
    ];
    let e = edges(&files, 2);
    let pairs: Vec<(String, String)> = e.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
    assert_eq!(
        pairs,
        [
            ("stages::x".to_string(), "stages::y".to_string()),
            ("stages::y".to_string(), "stages::x".to_string())
        ]
    );
    assert_eq!(cycles(&e).len(), 1);
    // At depth 1 the same files are one node.
    assert!(edges(&files, 1).is_empty());
}

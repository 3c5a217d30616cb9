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

/// The workspace's member crates (their directories) and how deep a graph node goes.
const CRATES: &[(&str, usize)] = &[
    ("init", 1),
    ("validator", 2),
    ("validator-cli", 1),
    ("mkinitramfs", 1),
    ("qemu", 1),
    ("qemu/sigcases", 1),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The text with comments, string literals and char literals replaced by spaces (line
/// breaks kept, so positions and line numbers stay those of the source).
fn blank(text: &str) -> Vec<char> {
    let s: Vec<char> = text.chars().collect();
    let mut out = s.clone();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let wipe = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in out.iter_mut().take(to.min(s.len())).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = s[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(s.len(), |p| i + p);
            wipe(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < s.len() && depth > 0 {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if (c == 'r' || (c == 'b' && next == Some('r'))) && (i == 0 || !ident(s[i - 1])) && {
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let h = s[k..].iter().take_while(|&&c| c == '#').count();
            s.get(k + h) == Some(&'"')
        } {
            // A raw string: r"..", r#".."#, br##".."##.
            let k = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = s[k..].iter().take_while(|&&c| c == '#').count();
            let mut j = k + hashes + 1;
            loop {
                if j >= s.len() {
                    break;
                }
                if s[j] == '"'
                    && s[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&c| c == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            wipe(&mut out, i, j);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}', '\''); otherwise a lifetime.
            if next == Some('\\') {
                let mut j = i + 2;
                j += 1; // the escaped char, whatever it is
                while j < s.len() && s[j] != '\'' {
                    j += 1;
                }
                wipe(&mut out, i, j + 1);
                i = j + 1;
            } else if s.get(i + 2) == Some(&'\'') {
                wipe(&mut out, i, i + 3);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The module path of a source file relative to `src/` (`stages/modules/gate.rs` ->
/// `[stages, modules, gate]`, `stages/mod.rs` -> `[stages]`; `lib.rs`, `main.rs` and
/// `bin/*` -> `[]`, a crate root).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return Vec::new();
    }
    if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
        return Vec::new();
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn skip_ws(s: &[char], pos: &mut usize) {
    while *pos < s.len() && s[*pos].is_whitespace() {
        *pos += 1;
    }
}

/// The paths of a use tree starting at `pos` (`a::b::{c, d::{e, f}}` -> `a::b::c`,
/// `a::b::d::e`, `a::b::d::f`), each with where its last name starts; an expression path
/// (`a::b::f(x)`) is one path.
fn parse_tree(s: &[char], pos: &mut usize) -> Vec<(Vec<String>, usize)> {
    let mut segs: Vec<String> = Vec::new();
    let mut last_at = *pos;
    loop {
        skip_ws(s, pos);
        match s.get(*pos) {
            Some('{') => {
                *pos += 1;
                let mut group = Vec::new();
                loop {
                    skip_ws(s, pos);
                    match s.get(*pos) {
                        None => break,
                        Some('}') => {
                            *pos += 1;
                            break;
                        }
                        Some(',') => *pos += 1,
                        Some(_) => {
                            let before = *pos;
                            for (p, at) in parse_tree(s, pos) {
                                let mut full = segs.clone();
                                full.extend(p);
                                group.push((full, at));
                            }
                            if *pos == before {
                                *pos += 1; // not a path: step over it
                            }
                        }
                    }
                }
                if group.is_empty() {
                    group.push((segs, last_at));
                }
                return group;
            }
            Some('*') => {
                *pos += 1;
                return vec![(segs, last_at)];
            }
            _ => {}
        }
        let start = *pos;
        if s.get(*pos) == Some(&'$') {
            *pos += 1;
        }
        while *pos < s.len() && is_ident(s[*pos]) {
            *pos += 1;
        }
        if *pos == start {
            return vec![(segs, last_at)];
        }
        segs.push(s[start..*pos].iter().collect());
        last_at = start;
        let mut look = *pos;
        skip_ws(s, &mut look);
        if s.get(look) == Some(&':') && s.get(look + 1) == Some(&':') {
            *pos = look + 2;
        } else {
            return vec![(segs, last_at)];
        }
    }
}

/// One reference: the line it is on and the module path it resolves to (before trimming
/// to a known module).
#[derive(Debug)]
struct Reference {
    line: usize,
    path: Vec<String>,
}

/// Every `crate::`/`$crate::`/`super::`/`self::` path in a source text, resolved from
/// `module` (the file's module path) and the inline modules it sits in.
fn references(text: &str, module: &[String]) -> Vec<Reference> {
    let s = blank(text);
    let line_of = |pos: usize| s[..pos].iter().filter(|&&c| c == '\n').count() + 1;
    let mut out = Vec::new();
    // Inline modules we are inside: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut pending_mod: Option<String> = None;
    let mut depth = 0usize;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '{' {
            depth += 1;
            if let Some(name) = pending_mod.take() {
                inline.push((name, depth));
            }
            i += 1;
            continue;
        }
        if c == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
            continue;
        }
        if c == ';' {
            pending_mod = None;
        }
        let starts_ident = (is_ident(c) || c == '$') && (i == 0 || !is_ident(s[i - 1]));
        if !starts_ident {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < s.len() && is_ident(s[end]) {
            end += 1;
        }
        let word: String = s[i..end].iter().collect();
        if word == "mod" {
            let mut p = end;
            skip_ws(&s, &mut p);
            let n0 = p;
            while p < s.len() && is_ident(s[p]) {
                p += 1;
            }
            let name: String = s[n0..p].iter().collect();
            skip_ws(&s, &mut p);
            if !name.is_empty() && s.get(p) == Some(&'{') {
                pending_mod = Some(name);
            }
        }
        if matches!(word.as_str(), "crate" | "$crate" | "super" | "self") {
            // Only the head of a path: not `a::super`, not `self.x`.
            let mut b = i;
            while b > 0 && s[b - 1].is_whitespace() {
                b -= 1;
            }
            let after_colons = b > 0 && s[b - 1] == ':';
            let mut a = end;
            skip_ws(&s, &mut a);
            let then_colons = s.get(a) == Some(&':') && s.get(a + 1) == Some(&':');
            if !after_colons && then_colons {
                let mut pos = i;
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                for (segs, at) in parse_tree(&s, &mut pos) {
                    let line = line_of(at);
                    let mut path = here.clone();
                    for (k, seg) in segs.iter().enumerate() {
                        match seg.as_str() {
                            "crate" | "$crate" if k == 0 => path.clear(),
                            "super" => {
                                path.pop();
                            }
                            "self" => {}
                            _ => path.push(seg.clone()),
                        }
                    }
                    out.push(Reference { line, path });
                }
                // Step over the tree (its braces are balanced) but no further.
                i = pos.max(end);
                continue;
            }
        }
        i = end;
    }
    out
}

/// One source file of a crate: its path relative to the crate dir, its text.
#[derive(Clone)]
struct Source {
    rel: PathBuf,
    module: Vec<String>,
    text: String,
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn read_crate(dir: &Path) -> Vec<Source> {
    let src = dir.join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel_src = f.strip_prefix(&src).unwrap().to_path_buf();
            Source {
                module: module_path(&rel_src),
                rel: Path::new("src").join(&rel_src),
                text: std::fs::read_to_string(&f).unwrap(),
            }
        })
        .collect()
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
    // A scan that sees nothing would pass every crate: a crate of many files has imports.
    assert!(
        files.len() < 10 || all.len() > 10,
        "{dir}: {} files but only {} edges found",
        files.len(),
        all.len()
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

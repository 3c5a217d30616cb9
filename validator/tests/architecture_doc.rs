//! `docs/ARCHITECTURE.md` kept true by a test: the layers it lists are the crate's layers
//! in the order `tests/layers.rs` enforces and `src/lib.rs` declares; the stages of its
//! boot flow are [`Stage::ALL`] in run order; its decisions are every [`Decision`]; and
//! every source path it names (`validator/src/...`, `runtime/slot/grub.rs`, a crate
//! directory) exists; the "Where things live" table names modules and tests that exist; no
//! public function returns a string error. A moved module, a new stage or a new decision
//! fails here until the document follows.
// Test code: helpers unwrap and index as the tests do (a failure should stop the test
// loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::{Path, PathBuf};

use validator::stages::{Decision, Stage};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn doc() -> String {
    std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap()
}

/// The lines of the section that starts with the heading `## {title}` (up to the next
/// `## ` heading).
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let head = format!("## {title}");
    let mut lines = text.lines().skip_while(|l| l.trim() != head);
    assert!(
        lines.next().is_some(),
        "docs/ARCHITECTURE.md has no section `{head}`"
    );
    lines.take_while(|l| !l.starts_with("## ")).collect()
}

/// The first backticked word of each table row whose first cell is a number (`| 3 |
/// `trust` | ...`), in order.
fn numbered_rows(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            // "| 1 | `util` | ..." splits into ["", "1", "`util`", ...].
            if cells.len() < 3 || cells[1].parse::<u32>().is_err() {
                return None;
            }
            Some(cells[2].trim_matches('`').to_string())
        })
        .collect()
}

/// Every Decision, by an exhaustive match: a new variant does not compile here until it
/// is added to the list (and so to the document).
fn decisions() -> Vec<Decision> {
    let all = [
        Decision::Pass,
        Decision::Quarantine,
        Decision::Fallback,
        Decision::Stop,
    ];
    for d in all {
        match d {
            Decision::Pass | Decision::Quarantine | Decision::Fallback | Decision::Stop => {}
        }
    }
    all.to_vec()
}

/// The layer names of `tests/layers.rs`'s `LAYERS` constant, in order.
fn enforced_layers() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("validator/tests/layers.rs")).unwrap();
    let start = text
        .find("const LAYERS")
        .expect("LAYERS in tests/layers.rs");
    let body = &text[start..];
    let open = body.find("= &[").unwrap() + 4;
    let close = body[open..].find("];").unwrap() + open;
    body[open..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The `pub mod` declarations of `src/lib.rs`, in order.
fn declared_layers() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("validator/src/lib.rs")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

#[test]
fn layers_table_matches_the_enforced_layers() {
    let d = doc();
    let listed = numbered_rows(&section(&d, "Layers of `validator`"));
    assert_eq!(
        listed,
        enforced_layers(),
        "docs/ARCHITECTURE.md's layer table vs validator/tests/layers.rs LAYERS"
    );
    assert_eq!(
        listed,
        declared_layers(),
        "docs/ARCHITECTURE.md's layer table vs the `pub mod`s of validator/src/lib.rs"
    );
}

#[test]
fn stages_table_is_the_run_order() {
    let d = doc();
    let listed = numbered_rows(&section(&d, "Stages"));
    let actual: Vec<String> = Stage::ALL.iter().map(|s| s.name().to_string()).collect();
    assert_eq!(
        listed, actual,
        "docs/ARCHITECTURE.md's stage table vs stages::Stage::ALL"
    );
    // Each stage's home exists where the table says the report name lives.
    for s in &actual {
        let file = repo().join(format!("validator/src/stages/{s}.rs"));
        let dir = repo().join(format!("validator/src/stages/{s}/mod.rs"));
        assert!(
            file.exists() || dir.exists(),
            "stage {s} has no module stages/{s}.rs or stages/{s}/"
        );
    }
}

#[test]
fn boot_flow_names_every_stage_in_order() {
    let d = doc();
    let flow = section(&d, "One boot").join("\n");
    let mut at = 0;
    for s in Stage::ALL {
        let needle = format!("├─ {:<9}", s.name());
        let found = flow[at..]
            .find(&needle)
            .unwrap_or_else(|| panic!("the boot flow lacks `{needle}` after offset {at}"));
        at += found + needle.len();
    }
}

#[test]
fn decisions_table_is_every_decision() {
    let d = doc();
    let rows: Vec<String> = section(&d, "Decisions")
        .iter()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let word = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some(word.to_string())
        })
        .collect();
    let actual: Vec<String> = decisions().iter().map(|d| d.as_str().to_string()).collect();
    assert_eq!(
        rows, actual,
        "docs/ARCHITECTURE.md's decision table vs stages::Decision"
    );
}

/// Every backticked token of the document that names a source file or directory of the
/// workspace exists: `validator/src/gate/` or `gate/signature.rs` (relative to
/// `validator/src/` when not found from the repository root). Paths under `target/` are
/// build outputs and are not looked for (on a fresh clone they are not there yet).
#[test]
fn every_named_path_exists() {
    let d = doc();
    let mut missing = Vec::new();
    for (n, line) in d.lines().enumerate() {
        for (i, tok) in line.split('`').enumerate() {
            if i % 2 == 0 {
                continue; // outside backticks
            }
            let is_path = !tok.contains(' ')
                && !tok.contains("::")
                && !tok.starts_with('/')
                && !tok.contains('<')
                && !tok.contains('*')
                // Build outputs (`target/...`) exist only once something made them.
                && !tok.starts_with("target/")
                && (tok.ends_with(".rs") || (tok.contains('/') && tok.ends_with('/')));
            if !is_path {
                continue;
            }
            let from_root = repo().join(tok);
            let from_src = repo().join("validator/src").join(tok);
            if !from_root.exists() && !from_src.exists() {
                missing.push(format!("line {}: `{tok}`", n + 1));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// "No public function of the library returns `Result<_, String>`": every `pub fn` (and
/// `FromStr`'s `type Err`) of `validator/src`, its signature joined over lines, returns a
/// typed error.
#[test]
fn no_public_function_returns_a_string_error() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    assert!(doc().contains("no public function of the library returns `Result<_, String>`"));
    let mut files = Vec::new();
    walk(&repo().join("validator/src"), &mut files);
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let signature = if t.starts_with("pub fn ") {
                // Up to the body's brace or the end of a declaration.
                let mut s = String::new();
                for l in &lines[i..] {
                    s.push_str(l.trim());
                    s.push(' ');
                    if l.contains('{') || l.trim_end().ends_with(';') {
                        break;
                    }
                }
                s
            } else if t.starts_with("type Err = ") {
                t.to_string()
            } else {
                continue;
            };
            let squeezed: String = signature.split_whitespace().collect();
            let returns = squeezed
                .rsplit_once("->")
                .map(|(_, r)| r.trim_end_matches(['{', ';', ' ']).to_string())
                .unwrap_or_default();
            let string_err = returns.starts_with("Result<") && returns.ends_with(",String>");
            if string_err || squeezed.contains("typeErr=String;") {
                found.push(format!("{}:{}: {}", f.display(), i + 1, t));
            }
        }
    }
    assert!(
        found.is_empty(),
        "public String errors:\n{}",
        found.join("\n")
    );
}

/// The "Where things live" table: every row names a module that exists and at least one
/// test file that exists and holds tests (`#[test]`).
#[test]
fn where_things_live_names_modules_and_their_tests() {
    let d = doc();
    let rows: Vec<&str> = section(&d, "Where things live")
        .into_iter()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| concept"))
        .collect();
    assert!(rows.len() >= 20, "{} rows", rows.len());
    let paths = |cell: &str| -> Vec<String> {
        cell.split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, p)| p.to_string())
            .collect()
    };
    let mut wrong = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let (Some(module), Some(tests)) = (cells.get(1), cells.get(2)) else {
            wrong.push(format!("{row}: not three cells"));
            continue;
        };
        let (modules, tests) = (paths(module), paths(tests));
        if modules.is_empty() || tests.is_empty() {
            wrong.push(format!("{row}: no module or no test named"));
        }
        for m in &modules {
            if !repo().join(m).is_file() {
                wrong.push(format!("{row}: no module {m}"));
            }
        }
        for t in &tests {
            match std::fs::read_to_string(repo().join(t)) {
                Ok(text) if text.contains("#[test]") => {}
                Ok(_) => wrong.push(format!("{row}: {t} has no test")),
                Err(e) => wrong.push(format!("{row}: {t}: {e}")),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

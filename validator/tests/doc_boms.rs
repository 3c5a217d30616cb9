//! Every BOM the project shows an operator parses as the init would read it: the files
//! under `examples/` and each `toml` block of the README and `docs/` (a block without
//! `schema` is a part of a BOM and is parsed under a minimal header). A `[hardware]`
//! table in the docs names only keys the parser knows, and `docs/BOM.md`'s `[hardware]`
//! key table lists every key of the type.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]

use std::path::{Path, PathBuf};

use validator::config::bom;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ```toml blocks of a Markdown file, with the line each starts on.
fn toml_blocks(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut open {
            None if line.trim_start().starts_with("```toml") => open = Some((i + 2, String::new())),
            Some(_) if line.trim_start().starts_with("```") => out.extend(open.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    assert!(
        open.is_none(),
        "{}: a toml block is not closed",
        path.display()
    );
    out
}

fn docs() -> Vec<PathBuf> {
    let mut v = vec![workspace().join("README.md")];
    for e in std::fs::read_dir(workspace().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            v.push(p);
        }
    }
    v.sort();
    v
}

#[test]
fn every_bom_snippet_in_the_docs_parses() {
    let mut seen = 0;
    for doc in docs() {
        for (line, body) in toml_blocks(&doc) {
            let text = if body.contains("\nschema = ") || body.starts_with("schema = ") {
                body.clone()
            } else {
                format!("schema = 1\nimage_id = \"doc\"\n[kernel]\nrelease = \"6.1.0-57-amd64\"\n{body}")
            };
            let name = format!("{}:{line}", doc.display());
            if let Err(e) = bom::parse(text.as_bytes(), Path::new(&name)) {
                panic!("the BOM snippet at {name} does not parse: {e}\n{body}");
            }
            seen += 1;
        }
    }
    // docs/BOM.md's full BOM and the fixture node's part (docs/FIXTURES.md) at least.
    assert!(seen >= 2, "{seen} snippets");
}

#[test]
fn every_example_bom_parses() {
    let mut n = 0;
    for e in std::fs::read_dir(workspace().join("examples")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            if let Err(e) = bom::load(&p) {
                panic!("{e}");
            }
            n += 1;
        }
    }
    assert_eq!(n, 3);
}

/// `docs/BOM.md`'s `[hardware]` table (its section "`[hardware]` keys") has a row for
/// every key the parser takes.
#[test]
fn the_bom_doc_lists_every_hardware_key() {
    let doc = std::fs::read_to_string(workspace().join("docs/BOM.md")).unwrap();
    let start = doc
        .find("\n## `[hardware]` keys\n")
        .expect("docs/BOM.md has a section \"`[hardware]` keys\"");
    let section = &doc[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    // Every key, set: serialize a value with each key present.
    let full =
        std::fs::read_to_string(workspace().join("examples/hgx-h200-training.toml")).unwrap();
    let b = bom::parse(full.as_bytes(), Path::new("h200")).unwrap().bom;
    let table = toml::Table::try_from(&b.hardware).unwrap();
    // The first cell of each row: the keys it is about.
    let rows: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.split('|').nth(1).unwrap_or_default())
        .collect();
    for key in table.keys() {
        assert!(
            rows.iter().any(|r| r.contains(&format!("`{key}`"))),
            "docs/BOM.md's [hardware] table has no row for {key}"
        );
    }
}

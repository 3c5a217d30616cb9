//! The import scanner the layer rule (`validator/tests/layers.rs`) and the import-cycle
//! check (`qemu/tests/import_cycles.rs`) both read the sources with: every `crate::`,
//! `$crate::`, `super::` and `self::` path in code, resolved to a module path.
//!
//! Contract: comments, string literals and char literals are blanked first (line breaks
//! kept, so line numbers stay the source's); `use` groups, nested and over several lines,
//! are followed item by item; `super::` inside an inline `mod tests { .. }` resolves from
//! that inline module. [`fn@module_path`] names a file's module (`stages/modules/gate.rs` ->
//! `[stages, modules, gate]`; `lib.rs`, `main.rs` and `bin/*` are crate roots, `[]`).
//!
//! Current limits: a text scan, not name resolution: a path brought in by a glob
//! (`use crate::a::*` then `b::x`) or through a re-export counts as a reference to the
//! module it names, not to where the item lives; a bare relative path (`child::x`) is
//! not seen. Macros are read as the text they are written in.

use std::path::{Path, PathBuf};

/// The text with comments, string literals and char literals replaced by spaces (line
/// breaks kept, so positions and line numbers stay those of the source).
pub fn blank(text: &str) -> Vec<char> {
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
pub fn module_path(rel: &Path) -> Vec<String> {
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

pub fn is_ident(c: char) -> bool {
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
pub fn parse_tree(s: &[char], pos: &mut usize) -> Vec<(Vec<String>, usize)> {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub line: usize,
    pub path: Vec<String>,
}

/// Every `crate::`/`$crate::`/`super::`/`self::` path in a source text, resolved from
/// `module` (the file's module path) and the inline modules it sits in.
pub fn references(text: &str, module: &[String]) -> Vec<Reference> {
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
#[derive(Debug, Clone)]
pub struct Source {
    pub rel: PathBuf,
    pub module: Vec<String>,
    pub text: String,
}

pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
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

pub fn read_crate(dir: &Path) -> Vec<Source> {
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

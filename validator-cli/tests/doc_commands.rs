//! Every command line the README and `docs/*.md` show an operator runs as written (issue
//! 33 item 6; the BOM snippets are `validator/tests/doc_boms.rs`'s): each line of a
//! ```` ```sh ````, ```` ```bash ```` or ```` ```console ```` block (console: the `$ ` lines)
//! that runs `validator` or `mkinitramfs` (also as a path ending in `/validator`, and as
//! `cargo run -p validator-cli -- ...` / `cargo run -p mkinitramfs -- ...`) names a
//! subcommand path that exists (each level in its parent's `Commands:`, and
//! `PROGRAM PATH --help` exits 0), and every option on it (`--long`, `--long=VALUE`, `-s`)
//! is one that path's `--help` lists.
//!
//! Shell and the docs' notation as read here: a line ending in `\` continues; a `#` that
//! starts a word ends the line (a comment); `&&`, `||`, `;`, `&` and a pipe start another
//! command (`validator ... | jq` checks the part before the pipe, the `jq` part is not
//! ours); a redirection drops its target (`> FILE`, `2>&1`); a here-document's body is
//! skipped; quoted words and `$(...)` are values, never options; `VAR=value` before the
//! program is skipped. `[...]` and `(...)` are optional and alternative groups: their
//! options are checked like any other; `a|b` (and ` | ` inside a group, or before an
//! option) lists alternatives, each checked: `--compress gzip|zstd|none`, `attest
//! ak|quote|verify`, `--prometheus OUT | --nfd OUT`. Lines of other programs (sfdisk,
//! dd, grub-editenv, cargo build, install, scripts/...) are not checked.
//!
//! Limits: option values and positional arguments are not checked (`--compress gzip` is
//! checked for `--compress` only, `completions bash` for `completions` only); a
//! placeholder where a subcommand goes (`validator COMMAND`) stops the check of that line
//! at the placeholder; commands in prose (inline code spans) and in ```` ```text ````
//! blocks are not read; `qemu-harness` and `scripts/*` are not checked; whether a line's
//! options may be combined (clap's groups, `requires`, conflicts) is not checked, only
//! that each exists.
//!
//! `mkinitramfs` is another package's binary, which Cargo does not build for this
//! package's tests: the test runs `cargo build -p mkinitramfs --bin mkinitramfs` with
//! the profile it was built with (a no-op when the binary is fresh) and takes the path
//! Cargo reports, so a stale binary is never what is checked.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// At least this many command lines are found in the README and docs (33 when the test
/// was written; this is 80% of that): fewer means the extractor broke, not that the docs
/// shrank that much.
const MIN_COMMANDS: usize = 27;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The programs whose command lines are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Program {
    Validator,
    Mkinitramfs,
}

impl Program {
    fn name(self) -> &'static str {
        match self {
            Program::Validator => "validator",
            Program::Mkinitramfs => "mkinitramfs",
        }
    }

    fn binary(self) -> &'static Path {
        match self {
            Program::Validator => Path::new(env!("CARGO_BIN_EXE_validator")),
            Program::Mkinitramfs => mkinitramfs(),
        }
    }
}

/// The `mkinitramfs` binary, built by Cargo for this test's profile (see the file's doc).
fn mkinitramfs() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_BIN_EXE_validator")).parent().unwrap();
        let profile = match dir.file_name().and_then(OsStr::to_str).unwrap() {
            "debug" => "dev",
            other => other,
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(workspace())
            .args(["build", "-p", "mkinitramfs", "--bin", "mkinitramfs"])
            .args(["--profile", profile, "--message-format=json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo build -p mkinitramfs --bin mkinitramfs --profile {profile}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "mkinitramfs")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .unwrap_or_else(|| panic!("cargo build -p mkinitramfs reported no executable"))
    })
}

/// One shell word: its text with the quotes removed, and whether any of it was quoted
/// (a quoted word is a value, never an option or a subcommand).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    quoted: bool,
}

/// A command line of a doc that runs one of the programs.
#[derive(Debug)]
struct DocCommand {
    file: String,
    /// The line it starts on (1-based).
    line: usize,
    /// The logical line as the doc shows it (continuations joined, the comment dropped).
    text: String,
    program: Program,
    /// The words after the program (after `--` for `cargo run`).
    args: Vec<Word>,
}

/// The commands of our programs in the shell blocks of one Markdown file.
fn commands(file: &str, markdown: &str) -> Vec<DocCommand> {
    let mut out = Vec::new();
    // The open fence: its backticks and whether it is a shell block, a console block.
    let mut fence: Option<(String, bool, bool)> = None;
    // A logical line being continued: where it started and its text so far.
    let mut pending: Option<(usize, String)> = None;
    // The delimiter of a here-document being skipped.
    let mut heredoc: Option<String> = None;
    for (i, raw) in markdown.lines().enumerate() {
        let trimmed = raw.trim_start();
        let Some((ticks, shell, console)) = &fence else {
            if trimmed.starts_with("```") {
                let ticks: String = trimmed.chars().take_while(|&c| c == '`').collect();
                let lang = trimmed[ticks.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("");
                let lang = lang.trim_start_matches('{').trim_end_matches('}');
                let shell = matches!(lang, "sh" | "bash" | "shell" | "console");
                fence = Some((ticks, shell, lang == "console"));
            }
            continue;
        };
        if trimmed.starts_with(ticks.as_str()) && trimmed.trim_matches('`').trim().is_empty() {
            fence = None;
            pending = None;
            heredoc = None;
            continue;
        }
        if !shell {
            continue;
        }
        if let Some(delim) = &heredoc {
            if raw.trim() == delim {
                heredoc = None;
            }
            continue;
        }
        let mut code = raw;
        if *console && pending.is_none() {
            match raw.trim_start().strip_prefix("$ ") {
                Some(c) => code = c,
                None => continue,
            }
        }
        let code = strip_comment(code);
        let (code, continued) = match code.strip_suffix('\\') {
            Some(c) => (c, true),
            None => (code, false),
        };
        let (_, text) = pending.get_or_insert_with(|| (i + 1, String::new()));
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(code.trim());
        if continued {
            continue;
        }
        let (start, text) = pending.take().unwrap();
        heredoc = heredoc_delimiter(&text);
        for seg in segments(&text) {
            if let Some((program, args)) = program(&seg) {
                out.push(DocCommand {
                    file: file.to_string(),
                    line: start,
                    text: text.clone(),
                    program,
                    args,
                });
            }
        }
    }
    out
}

/// The line without its comment: a `#` that starts a word outside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        prev = c;
    }
    line.trim_end()
}

/// The delimiter of a here-document the line starts (`<<EOF`, `<<'EOF'`, `<<-"EOF"`).
fn heredoc_delimiter(line: &str) -> Option<String> {
    let rest = line.split_once("<<")?.1;
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim_start();
    let word = rest.split_whitespace().next()?;
    let word = word.trim_matches(|c| c == '\'' || c == '"');
    (!word.is_empty() && !word.starts_with('<')).then(|| word.to_string())
}

/// The words of a line being split into simple commands.
#[derive(Debug, Default)]
struct Splitter {
    segs: Vec<Vec<Word>>,
    seg: Vec<Word>,
    word: String,
    in_word: bool,
    quoted: bool,
    /// The next word is a redirection's target.
    drop_next: bool,
}

impl Splitter {
    fn end_word(&mut self) {
        if self.in_word && !std::mem::take(&mut self.drop_next) {
            self.seg.push(Word {
                text: std::mem::take(&mut self.word),
                quoted: self.quoted,
            });
        }
        self.word.clear();
        self.in_word = false;
        self.quoted = false;
    }

    fn end_command(&mut self) {
        self.end_word();
        let seg = std::mem::take(&mut self.seg);
        if !seg.is_empty() {
            self.segs.push(seg);
        }
    }

    fn push(&mut self, c: char) {
        self.word.push(c);
        self.in_word = true;
    }
}

/// The simple commands of a logical line, as words: split at `&&`, `||`, `;`, `&` and
/// pipes, redirections and their targets dropped. The docs' notation: `[`/`(` groups
/// stay in the words' text; inside a group, and at the top level before an option,
/// ` | ` separates alternatives instead of piping; `a|b` is one word.
fn segments(line: &str) -> Vec<Vec<Word>> {
    let c: Vec<char> = line.chars().collect();
    let mut s = Splitter::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        i += 1;
        match ch {
            '\'' => {
                let end = (i..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len());
                s.word.extend(&c[i..end]);
                (s.in_word, s.quoted, i) = (true, true, end + 1);
            }
            '"' | '`' => {
                let end = skip_quoted(&c, i, ch);
                s.word.extend(&c[i..end.min(c.len())]);
                (s.in_word, s.quoted, i) = (true, true, end + 1);
            }
            '$' if next == Some('(') => {
                let end = skip_subst(&c, i + 1);
                s.word.extend(&c[i - 1..(end + 1).min(c.len())]);
                (s.in_word, i) = (true, end + 1);
            }
            '\\' => {
                s.word.extend(next);
                (s.in_word, i) = (true, i + 1);
            }
            '|' if next == Some('|') => {
                s.end_command();
                i += 1;
            }
            '|' => {
                let spaced =
                    i == 1 || c[i - 2].is_whitespace() || next.is_none_or(char::is_whitespace);
                let then_option = c[i..]
                    .iter()
                    .find(|c| !c.is_whitespace())
                    .is_some_and(|&c| c == '-' || c == '[');
                if !spaced {
                    // `gzip|zstd`, `ak|quote`: one word of alternatives.
                    s.push('|');
                } else if depth == 0 && !then_option {
                    s.end_command();
                } else {
                    s.end_word();
                }
            }
            '&' if next == Some('>') => {
                s.end_word();
                s.drop_next = true;
                i += 1;
            }
            ';' | '&' => {
                s.end_command();
                i += usize::from(next == Some('&'));
            }
            '>' | '<' => {
                // `2>`: the descriptor is part of the redirection.
                if s.in_word && !s.quoted && s.word.chars().all(|d| d.is_ascii_digit()) {
                    s.word.clear();
                    s.in_word = false;
                }
                s.end_word();
                while i < c.len() && matches!(c[i], '>' | '<' | '&' | '-') {
                    i += 1;
                }
                s.drop_next = true;
                // `2>&1`, `>FILE`: the target is glued to the operator.
                s.in_word = i < c.len() && !c[i].is_whitespace();
            }
            c0 if c0.is_whitespace() => s.end_word(),
            '[' | '(' => {
                depth += 1;
                s.push(ch);
            }
            ']' | ')' => {
                depth = depth.saturating_sub(1);
                s.push(ch);
            }
            _ => s.push(ch),
        }
    }
    s.end_command();
    s.segs
}

/// The index of the closing `q` of a quoted string whose text starts at `i` (a `"`
/// string may hold `$(...)` with quotes of its own).
fn skip_quoted(c: &[char], mut i: usize, q: char) -> usize {
    while i < c.len() && c[i] != q {
        if c[i] == '\\' {
            i += 1;
        } else if q == '"' && c[i] == '$' && c.get(i + 1) == Some(&'(') {
            i = skip_subst(c, i + 2);
        }
        i += 1;
    }
    i
}

/// The index of the `)` closing a `$(` whose text starts at `i`.
fn skip_subst(c: &[char], mut i: usize) -> usize {
    let mut depth = 1;
    while i < c.len() {
        match c[i] {
            '\'' => i = (i + 1..c.len()).find(|&j| c[j] == '\'').unwrap_or(c.len()),
            '"' => i = skip_quoted(c, i + 1, '"'),
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The program a simple command runs, if it is one of ours, and its arguments.
fn program(seg: &[Word]) -> Option<(Program, Vec<Word>)> {
    let mut i = 0;
    while let Some(w) = seg.get(i) {
        let t = w.text.trim_start_matches('(');
        let assignment = !w.quoted
            && t.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
        if assignment || matches!(t, "sudo" | "do" | "then" | "else" | "time" | "exec" | "!") {
            i += 1;
        } else {
            break;
        }
    }
    let first = seg.get(i)?;
    if first.quoted {
        return None;
    }
    let rest = || seg[i + 1..].to_vec();
    match first.text.trim_start_matches('(').rsplit('/').next()? {
        "validator" => Some((Program::Validator, rest())),
        "mkinitramfs" => Some((Program::Mkinitramfs, rest())),
        "cargo" => cargo_run(&seg[i + 1..]),
        _ => None,
    }
}

/// `cargo run -p PACKAGE [--bin NAME] [...] -- ARGS` of one of our programs.
fn cargo_run(args: &[Word]) -> Option<(Program, Vec<Word>)> {
    if args.first()?.text != "run" {
        return None;
    }
    let mut names = Vec::new();
    let mut rest = Vec::new();
    let mut it = args[1..].iter();
    while let Some(w) = it.next() {
        let t = w.text.as_str();
        match t {
            "--" => {
                rest = it.cloned().collect();
                break;
            }
            "-p" | "--package" | "--bin" => names.extend(it.next().map(|w| w.text.clone())),
            _ => {
                let value = t
                    .strip_prefix("--package=")
                    .or_else(|| t.strip_prefix("--bin="))
                    .or_else(|| t.strip_prefix("-p").filter(|v| !v.is_empty()));
                names.extend(value.map(str::to_string));
            }
        }
    }
    let program = if names.iter().any(|n| n == "mkinitramfs") {
        Program::Mkinitramfs
    } else if names
        .iter()
        .any(|n| n == "validator-cli" || n == "validator")
    {
        Program::Validator
    } else {
        return None;
    };
    Some((program, rest))
}

/// What a command's `--help` lists.
#[derive(Debug, Clone, Default)]
struct Help {
    commands: Vec<String>,
    long: HashSet<String>,
    short: HashSet<char>,
}

/// Reads clap's help: the `Commands:` section's names (indented two columns) and every
/// option declaration (`-o, --output <DIR>`, `--json`: indented at most six columns; the
/// descriptions and possible values are indented further).
fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    for line in text.lines() {
        let t = line.trim_start();
        if t.is_empty() {
            continue;
        }
        let indent = line.len() - t.len();
        if indent == 0 {
            section = t;
        } else if section == "Commands:" && indent == 2 {
            help.commands
                .extend(t.split_whitespace().next().map(str::to_string));
        } else if indent <= 6 && t.starts_with('-') {
            let decl = t.split("  ").next().unwrap();
            for part in decl.split(", ") {
                let tok = part.split_whitespace().next().unwrap_or("");
                let tok = tok.split(['<', '[', '=']).next().unwrap();
                if let Some(long) = tok.strip_prefix("--") {
                    help.long.insert(long.to_string());
                } else if let Some(short) = tok.strip_prefix('-') {
                    help.short.extend(short.chars().next());
                }
            }
        }
    }
    help
}

/// The `--help` of each command path asked for, run once.
#[derive(Debug, Default)]
struct Helps(HashMap<(Program, Vec<String>), Result<Help, String>>);

impl Helps {
    fn get(&mut self, program: Program, path: &[String]) -> Result<Help, String> {
        self.0
            .entry((program, path.to_vec()))
            .or_insert_with(|| {
                let out = Command::new(program.binary())
                    .args(path)
                    .arg("--help")
                    .output()
                    .unwrap();
                if out.status.success() {
                    Ok(parse_help(&String::from_utf8_lossy(&out.stdout)))
                } else {
                    let err = String::from_utf8_lossy(&out.stderr);
                    Err(format!(
                        "{}: {}",
                        out.status,
                        err.lines().next().unwrap_or("").trim()
                    ))
                }
            })
            .clone()
    }
}

/// A word without the docs' group brackets and ellipsis: `[--json]` is `--json`,
/// `CERT]...]` is `CERT`.
fn ungrouped(t: &str) -> &str {
    t.trim_start_matches(['[', '('])
        .trim_end_matches([']', ')', '.'])
}

/// A placeholder where a subcommand would go: `COMMAND`, `<command>`, `...`, `$X`.
fn placeholder(t: &str) -> bool {
    t.is_empty()
        || t.starts_with(['<', '$'])
        || t.chars().all(|c| c == '.')
        || (t.chars().any(|c| c.is_ascii_uppercase()) && t.chars().all(|c| !c.is_ascii_lowercase()))
}

/// What is wrong with one command line (nothing when it runs as written), and whether
/// its options were checked (not when a placeholder stands for its subcommand).
fn check(cmd: &DocCommand, helps: &mut Helps) -> (Vec<String>, bool) {
    let prog = cmd.program;
    let shown = |path: &[String]| {
        std::iter::once(prog.name())
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut problems = Vec::new();
    // Alternatives where a subcommand goes (`attest ak|quote`) give several paths.
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    let mut idx = 0;
    let levels = loop {
        let mut levels = Vec::new();
        for path in &paths {
            match helps.get(prog, path) {
                Ok(h) => levels.push(h),
                Err(e) => {
                    problems.push(format!("`{} --help` fails ({e})", shown(path)));
                    return (problems, false);
                }
            }
        }
        if levels.iter().all(|h| h.commands.is_empty()) {
            break levels;
        }
        let Some(w) = cmd.args.get(idx) else {
            break levels;
        };
        let t = ungrouped(&w.text);
        if w.quoted || t.starts_with('-') {
            break levels;
        }
        if placeholder(t) {
            return (problems, false);
        }
        let mut next = Vec::new();
        for (path, help) in paths.iter().zip(&levels) {
            for alt in t.split('|') {
                if help.commands.iter().any(|c| c == alt) {
                    next.push(path.iter().cloned().chain([alt.to_string()]).collect());
                } else {
                    problems.push(format!(
                        "unknown subcommand `{alt}` of `{}` (it has: {})",
                        shown(path),
                        help.commands.join(", ")
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return (problems, false);
        }
        paths = next;
        idx += 1;
    };
    for w in &cmd.args[idx..] {
        if w.quoted {
            continue;
        }
        if w.text == "--" {
            break;
        }
        for piece in ungrouped(&w.text).split('|').map(ungrouped) {
            let option = if let Some(long) = piece.strip_prefix("--") {
                match long.split('=').next().unwrap() {
                    "" => continue,
                    name => format!("--{name}"),
                }
            } else if piece.len() == 2 && piece.starts_with('-') {
                match piece.chars().nth(1).unwrap() {
                    s if s.is_ascii_alphabetic() => format!("-{s}"),
                    _ => continue,
                }
            } else {
                continue;
            };
            let known = |h: &Help| match option.strip_prefix("--") {
                Some(long) => h.long.contains(long),
                None => h.short.contains(&option.chars().nth(1).unwrap()),
            };
            for (path, help) in paths.iter().zip(&levels) {
                if !known(help) {
                    problems.push(format!(
                        "unknown option `{option}`: `{} --help` does not list it",
                        shown(path)
                    ));
                }
            }
        }
    }
    (problems, true)
}

/// The README and every `docs/*.md`, as (path relative to the workspace, text).
fn docs() -> Vec<(String, String)> {
    let root = workspace();
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    files.sort();
    files
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            (rel, std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// Checks the commands; the problems as `FILE:LINE: what` with the line shown, and how
/// many commands had their options checked.
fn check_all(cmds: &[DocCommand], helps: &mut Helps) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut checked = 0;
    for cmd in cmds {
        let (found, options_checked) = check(cmd, helps);
        checked += usize::from(options_checked);
        for p in found {
            problems.push(format!("{}:{}: {p}\n    {}", cmd.file, cmd.line, cmd.text));
        }
    }
    (problems, checked)
}

#[test]
fn every_command_line_in_the_docs_runs_as_written() {
    let mut helps = Helps::default();
    let mut problems = Vec::new();
    let mut report = String::new();
    let mut total = 0;
    for (file, text) in docs() {
        let cmds = commands(&file, &text);
        let (found, checked) = check_all(&cmds, &mut helps);
        if !cmds.is_empty() {
            writeln!(
                report,
                "{file}: {} command lines ({checked} with their options)",
                cmds.len()
            )
            .unwrap();
        }
        total += cmds.len();
        problems.extend(found);
    }
    println!("{report}{total} command lines checked");
    assert!(
        problems.is_empty(),
        "{} doc command line problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        total >= MIN_COMMANDS,
        "only {total} command lines found in the README and docs (at least {MIN_COMMANDS} \
         expected): has the extractor broken?\n{report}"
    );
}

/// The extractor and the check on a made-up doc: a wrong option and a wrong subcommand
/// are reported with their file and line; what is not ours (a comment, a pipe's other
/// side, a quoted value, another program, a text block) is not.
#[test]
fn a_wrong_command_line_is_reported() {
    let md = r##"# Doc

```sh
validator slot status --esp /boot/efi --jsn   # --not-an-option in a comment
validator modules chek --vmlinuz X
validator report FILE --brief | jq --not-ours .
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) cargo run -p mkinitramfs -- \
    list [--bogus] "--quoted" initrd.img 2>&1 > out.txt && sfdisk --nonsense
validator attest ak|quot ...
validator preflight --bom bom.toml [--wait SECONDS] [--gate-modules [--vmlinuz V] [--trust CERT]...]
validator verity verify --data D --hash H (--root-hash HEX | --sgi FILE) | grep --not-ours
cat <<EOF
validator no-such-command
EOF
```

```text
validator no-such-command
```

```console
$ validator bom check --strict FILE
validator output line, not a command
```
"##;
    let cmds = commands("made-up.md", md);
    let lines: Vec<(usize, Program)> = cmds.iter().map(|c| (c.line, c.program)).collect();
    assert_eq!(
        lines,
        [
            (4, Program::Validator),
            (5, Program::Validator),
            (6, Program::Validator),
            (7, Program::Mkinitramfs),
            (9, Program::Validator),
            (10, Program::Validator),
            (11, Program::Validator),
            (22, Program::Validator),
        ]
    );
    let (problems, checked) = check_all(&cmds, &mut Helps::default());
    let heads: Vec<&str> = problems.iter().map(|p| p.lines().next().unwrap()).collect();
    assert_eq!(
        heads,
        [
            "made-up.md:4: unknown option `--jsn`: `validator slot status --help` does not list it",
            "made-up.md:5: unknown subcommand `chek` of `validator modules` (it has: check, help)",
            "made-up.md:7: unknown option `--bogus`: `mkinitramfs list --help` does not list it",
            "made-up.md:9: unknown subcommand `quot` of `validator attest` (it has: ak, quote, ek, \
             make-credential, activate, predict, verify, help)",
            "made-up.md:11: unknown option `--sgi`: `validator verity verify --help` does not list it",
            "made-up.md:22: unknown option `--strict`: `validator bom check --help` does not list it",
        ],
        "{problems:#?}"
    );
    // The bad subcommands' lines stop at the subcommand.
    assert_eq!(checked, 6);
}

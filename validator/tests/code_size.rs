//! The size rule, kept by a test: no file over 700 lines in any crate's `src/`, and no
//! function over 120 lines in the library, the CLIs or the init (the test bed's functions
//! are exempt: its case tables may stay tables). A function or file that grows past its
//! limit fails here with its path, line and length, to be split by what it does.

use std::path::{Path, PathBuf};

use test_support::imports::sources;
use test_support::sizes::functions;

/// The most lines a file in a crate's `src/` has.
const FILE_MAX: usize = 700;
/// The most lines a function of what ships has.
const FUNCTION_MAX: usize = 120;

/// Every crate's `src/` (the fuzz workspace's too).
const CRATES: &[&str] = &[
    "init",
    "validator",
    "validator-cli",
    "mkinitramfs",
    "qemu",
    "qemu/sigcases",
    "test-support",
    "fuzz",
];
/// The crates whose functions the function limit holds for: what ships.
const SHIPPED: &[&str] = &["init", "validator", "validator-cli", "mkinitramfs"];

fn files(krate: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    sources(&test_support::workspace().join(krate).join("src"), &mut out);
    assert!(!out.is_empty(), "{krate}/src has no Rust file");
    out
}

fn shown(p: &Path) -> String {
    p.strip_prefix(test_support::workspace())
        .unwrap_or(p)
        .display()
        .to_string()
}

#[test]
fn no_file_in_a_crates_src_is_over_700_lines() {
    let mut long = Vec::new();
    for k in CRATES {
        for f in files(k) {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            if n > FILE_MAX {
                long.push(format!("{}: {n} lines", shown(&f)));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {FILE_MAX} lines (split them by what the code does):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_of_what_ships_is_over_120_lines() {
    let mut long = Vec::new();
    let mut seen = 0;
    for k in SHIPPED {
        for f in files(k) {
            for func in functions(&std::fs::read_to_string(&f).unwrap()) {
                seen += 1;
                if func.lines > FUNCTION_MAX {
                    long.push(format!(
                        "{}:{}: fn {} is {} lines",
                        shown(&f),
                        func.line,
                        func.name,
                        func.lines
                    ));
                }
            }
        }
    }
    // The scan found the functions (a scanner that sees none would pass anything).
    assert!(seen > 1000, "only {seen} functions found");
    assert!(
        long.is_empty(),
        "functions over {FUNCTION_MAX} lines (split them by what they do):\n{}",
        long.join("\n")
    );
}

//! Process tests of `validator slot ...` on a grubenv or an ESP directory (issue 21): a
//! demotion or promotion holds as GRUB reads the grubenv, the grubenv and the record
//! agree after a failed write, and no write follows a symlink out of the ESP.
// Test code: helpers unwrap and index as the tests do (a failure should stop the test
// loudly); the workspace denies these outside tests.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../../validator/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

use common::{run_deadline, tmpdir, Ran};

fn validator(args: &[&str]) -> Ran {
    let mut c = Command::new(env!("CARGO_BIN_EXE_validator"));
    c.args(args);
    let r = run_deadline(c, 120);
    r.assert_no_panic(&args.join(" "));
    r
}

const SIG: &[u8] = b"# GRUB Environment Block\n";

fn block(lines: &str, size: usize) -> Vec<u8> {
    let mut b = SIG.to_vec();
    b.extend_from_slice(lines.as_bytes());
    b.resize(size, b'#');
    b
}

/// Every value of `name` in the file, in order (GRUB's `load_env` takes the last).
fn values(file: &Path, name: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(str::to_string)
        .collect()
}

/// Issue 21 item 3: `mark-bad` on a grubenv defining `A_OK` twice (in one block, or in
/// two concatenated blocks) said "marked A bad" while GRUB still read `A_OK=1` (the last
/// definition wins). Every definition is rewritten, and the read-back agrees.
#[test]
fn mark_bad_holds_on_duplicate_definitions() {
    let dir = tmpdir("slot-dup");
    let mut two = block("ORDER=A B\nA_OK=1\nA_TRY=0\n", 1024);
    two.extend_from_slice(&block("A_OK=1\nA_TRY=1\n", 1024));
    let cases = [
        (
            "one",
            block("ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nA_OK=1\n", 1024),
        ),
        ("two", two),
    ];
    for (name, bytes) in cases {
        let f = dir.join(name);
        std::fs::write(&f, &bytes).unwrap();
        let fs = f.to_str().unwrap();
        let r = validator(&["slot", "mark-bad", "--grubenv", fs, "--slot", "A"]);
        assert_eq!(r.code, Some(0), "{name}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("A_OK=0"), "{name}: {}", r.stdout);
        assert!(values(&f, "A_OK").iter().all(|v| v == "0"), "{name}");
        assert!(values(&f, "A_TRY").iter().all(|v| v == "0"), "{name}");
        assert_eq!(std::fs::metadata(&f).unwrap().len(), bytes.len() as u64);
        let r = validator(&["slot", "mark-good", "--grubenv", fs, "--slot", "A"]);
        assert_eq!(r.code, Some(0), "{name}: {}{}", r.stdout, r.stderr);
        assert!(values(&f, "A_OK").iter().all(|v| v == "1"), "{name}");
        let r = validator(&["slot", "status", "--grubenv", fs]);
        assert!(r.stdout.contains("A_OK=1"), "{name}: {}", r.stdout);
    }
    // A rewrite of every definition that does not fit the block: refused, nothing written.
    let f = dir.join("full");
    let bytes = block("A_OK=\nA_TRY=0\nA_OK=\n", SIG.len() + 21);
    std::fs::write(&f, &bytes).unwrap();
    let r = validator(&[
        "slot",
        "mark-good",
        "--grubenv",
        f.to_str().unwrap(),
        "--slot",
        "A",
    ]);
    assert_ne!(r.code, Some(0), "{}", r.stdout);
    assert_eq!(std::fs::read(&f).unwrap(), bytes);
    std::fs::remove_dir_all(&dir).unwrap();
}

const COPY: usize = 256 * 1024;

/// An ESP directory with a grubenv (`lines`) and our record's two zero-filled copies.
fn esp(dir: &Path, lines: &str) -> std::path::PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir.join("EFI/BOOT")).unwrap();
    std::fs::create_dir_all(dir.join("validator")).unwrap();
    std::fs::write(dir.join("EFI/BOOT/grubenv"), block(lines, 1024)).unwrap();
    for c in ["state.0", "state.1"] {
        std::fs::write(dir.join("validator").join(c), vec![0u8; COPY]).unwrap();
    }
    dir.join("EFI/BOOT/grubenv")
}

const GOOD: &str = "ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n";

/// Issue 21 item 4: when the record could not be written (`state.0` a directory, a copy
/// missing) `mark-bad` had already changed the grubenv, exited 2 without saying so, and
/// `status` then saw no problem. Now nothing changes (the record is checked first), and
/// `status` reports a grubenv and record that disagree (exit 1).
#[test]
fn mark_is_both_or_neither_and_status_sees_disagreement() {
    let root = tmpdir("slot-atomic");
    for broken in ["dir", "missing"] {
        let d = root.join(broken);
        let env = esp(&d, GOOD);
        let s0 = d.join("validator/state.0");
        let s1 = d.join("validator/state.1");
        std::fs::remove_file(&s0).unwrap();
        if broken == "dir" {
            std::fs::create_dir(&s0).unwrap();
        } else {
            std::fs::remove_file(&s1).unwrap();
        }
        let before = std::fs::read(&env).unwrap();
        let ds = d.to_str().unwrap();
        let r = validator(&["slot", "mark-bad", "--esp", ds, "--slot", "A"]);
        assert_ne!(r.code, Some(0), "{broken}: {}", r.stdout);
        assert!(r.stderr.contains("state."), "{broken}: {}", r.stderr);
        assert_eq!(
            std::fs::read(&env).unwrap(),
            before,
            "{broken}: grubenv changed"
        );
    }
    // A record that says A is bad and a grubenv that boots it: status says so, exit 1.
    let d = root.join("disagree");
    let env = esp(&d, GOOD);
    let ds = d.to_str().unwrap();
    let r = validator(&["slot", "mark-bad", "--esp", ds, "--slot", "A"]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let r = validator(&["slot", "status", "--esp", ds]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    std::fs::write(&env, block(GOOD, 1024)).unwrap();
    let r = validator(&["slot", "status", "--esp", ds]);
    assert_eq!(r.code, Some(1), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("slot A: the boot loader marks it good, our record bad"),
        "{}",
        r.stdout
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 21 item 5: with `--esp DIR`, a symlink at `validator/state.0`, `state.1`,
/// `EFI/BOOT/grubenv` (or a symlinked directory on the way) made `mark-*` overwrite the
/// file it points to outside the ESP. Nothing outside is written now; the command fails
/// naming the path.
#[test]
fn slot_writes_never_follow_symlinks_out_of_the_esp() {
    let root = tmpdir("slot-symlink");
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    for (i, link) in [
        "validator/state.0",
        "validator/state.1",
        "EFI/BOOT/grubenv",
        "validator",
        "EFI/BOOT",
    ]
    .into_iter()
    .enumerate()
    {
        let d = root.join(format!("esp{i}"));
        esp(&d, GOOD);
        // The target: a copy of what the link replaces, outside the ESP.
        let at = d.join(link);
        let target = outside.join(format!("t{i}"));
        std::fs::rename(&at, &target).unwrap();
        std::os::unix::fs::symlink(&target, &at).unwrap();
        let snapshot = |p: &Path| -> Vec<(String, Vec<u8>)> {
            let mut v = Vec::new();
            let mut stack = vec![p.to_path_buf()];
            while let Some(q) = stack.pop() {
                if q.is_dir() {
                    for e in std::fs::read_dir(&q).unwrap() {
                        stack.push(e.unwrap().path());
                    }
                } else {
                    v.push((q.display().to_string(), std::fs::read(&q).unwrap()));
                }
            }
            v.sort();
            v
        };
        let before = snapshot(&outside);
        let ds = d.to_str().unwrap();
        for cmd in ["mark-bad", "mark-good"] {
            let r = validator(&["slot", cmd, "--esp", ds, "--slot", "A"]);
            // `state.1` alone: the write goes to `state.0` (both invalid), which is fine.
            if link != "validator/state.1" {
                assert_ne!(r.code, Some(0), "{link} {cmd}: {}", r.stdout);
                assert!(r.stderr.contains(ds), "{link} {cmd}: {}", r.stderr);
            }
        }
        assert!(
            snapshot(&outside) == before,
            "{link}: a file outside the ESP changed"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

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

use test_support as common;

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

fn validator_in(cwd: &Path, args: &[&str]) -> Ran {
    let mut c = Command::new(env!("CARGO_BIN_EXE_validator"));
    c.current_dir(cwd).args(args);
    let r = run_deadline(c, 120);
    r.assert_no_panic(&args.join(" "));
    r
}

/// `status --esp DIR` of `d`: its exit code and its `problem:` lines.
fn problems(d: &Path) -> (Option<i32>, Vec<String>) {
    let r = validator(&["slot", "status", "--esp", d.to_str().unwrap()]);
    let p = r
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("problem: "))
        .map(str::to_string)
        .collect();
    (r.code, p)
}

/// Issue 34 item 3: `slot status` called broken states healthy (exit 0, no problem):
/// both copies of the record failing their checksum, an empty `validator/` directory,
/// `validator` a regular file, and grubenv states under which GRUB finds no bootable slot
/// (both `_OK=0`, both tried, an `ORDER` naming no known slot). Each is now a named
/// problem, exit 1, as a missing record directory already was.
#[test]
fn status_names_every_broken_state() {
    let root = tmpdir("slot-broken");
    // The healthy control: a written record and a grubenv that boots A.
    let good = root.join("good");
    esp(&good, GOOD);
    let r = validator(&[
        "slot",
        "mark-good",
        "--esp",
        good.to_str().unwrap(),
        "--slot",
        "A",
    ]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_eq!(problems(&good), (Some(0), vec![]));
    let copy_of_good = |name: &str| {
        let d = root.join(name);
        common::copy_tree(&good, &d);
        d
    };
    // Both copies damaged (one byte of each payload flipped).
    let d = copy_of_good("both-damaged");
    for c in ["state.0", "state.1"] {
        let p = d.join("validator").join(c);
        let mut b = std::fs::read(&p).unwrap();
        b[60] ^= 1;
        std::fs::write(&p, b).unwrap();
    }
    let dir = d.join("validator").display().to_string();
    let (code, p) = problems(&d);
    assert_eq!(code, Some(1), "{p:?}");
    assert!(
        p.iter()
            .any(|l| l.starts_with(&format!("no valid state record at {dir}: state.0: "))),
        "{p:?}"
    );
    // An empty record directory.
    let d = copy_of_good("empty-dir");
    for c in ["state.0", "state.1"] {
        std::fs::remove_file(d.join("validator").join(c)).unwrap();
    }
    let (code, p) = problems(&d);
    assert_eq!(code, Some(1), "{p:?}");
    assert!(
        p.iter().any(|l| l.contains("no valid state record at")),
        "{p:?}"
    );
    // `validator` a regular file.
    let d = copy_of_good("file");
    std::fs::remove_dir_all(d.join("validator")).unwrap();
    std::fs::write(d.join("validator"), "x").unwrap();
    let (code, p) = problems(&d);
    assert_eq!(code, Some(1), "{p:?}");
    assert!(
        p.iter().any(|l| l.contains("no valid state record at")),
        "{p:?}"
    );
    // A missing directory, as before.
    let d = copy_of_good("missing");
    std::fs::remove_dir_all(d.join("validator")).unwrap();
    let (code, p) = problems(&d);
    assert_eq!(code, Some(1), "{p:?}");
    assert!(
        p.iter().any(|l| l.starts_with("no state record at")),
        "{p:?}"
    );
    // Grubenv states under which GRUB boots nothing (record left out: --grubenv alone).
    for (what, lines) in [
        ("both bad", "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=0\nB_TRY=0\n"),
        (
            "both tried",
            "ORDER=A B\nA_OK=1\nA_TRY=1\nB_OK=1\nB_TRY=1\n",
        ),
        (
            "unknown order",
            "ORDER=C D\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n",
        ),
        ("nothing set", ""),
    ] {
        let f = root.join("grubenv");
        std::fs::write(&f, block(lines, 1024)).unwrap();
        let r = validator(&["slot", "status", "--grubenv", f.to_str().unwrap()]);
        assert_eq!(r.code, Some(1), "{what}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains(&format!(
                "problem: {}: GRUB would find no bootable slot at the next boot",
                f.display()
            )),
            "{what}: {}",
            r.stdout
        );
    }
    // One slot left is enough; ORDER's first bootable word wins.
    for lines in [
        "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=1\nB_TRY=0\n",
        "ORDER=C B\nA_OK=0\nB_OK=1\n",
        "A_OK=1\n",
    ] {
        let f = root.join("grubenv");
        std::fs::write(&f, block(lines, 1024)).unwrap();
        let r = validator(&["slot", "status", "--grubenv", f.to_str().unwrap()]);
        assert_eq!(r.code, Some(0), "{lines:?}: {}{}", r.stdout, r.stderr);
    }
    // A mark over a record with no valid copy starts a new one, and says so.
    let d = copy_of_good("mark-over-damaged");
    for c in ["state.0", "state.1"] {
        std::fs::write(d.join("validator").join(c), vec![7u8; COPY]).unwrap();
    }
    let r = validator(&[
        "slot",
        "mark-good",
        "--esp",
        d.to_str().unwrap(),
        "--slot",
        "A",
    ]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("a new record was started"),
        "{}",
        r.stdout
    );
    assert_eq!(problems(&d), (Some(0), vec![]));
    std::fs::remove_dir_all(&root).unwrap();
}

/// Issue 34 item 4: a record at generation 2^64-1 never changed again (the generation
/// saturated, both copies carried it, copy 0 won the tie): `mark-bad` said it marked the
/// slot and `status` then disagreed. Generations wrap (RFC 1982 serial arithmetic): the
/// next write is generation 0, it is the newest, and it holds when read back.
#[test]
fn a_record_at_the_last_generation_still_advances() {
    use validator::formats::slotstate::{decode, encode, Record, State, FILE_SIZE};
    let d = tmpdir("slot-generation");
    esp(&d, GOOD);
    let write = |copy: &str, generation: u64| {
        let bytes = encode(
            &Record {
                generation,
                state: State::default(),
            },
            FILE_SIZE,
        )
        .unwrap();
        std::fs::write(d.join("validator").join(copy), bytes).unwrap();
    };
    write("state.0", u64::MAX);
    write("state.1", u64::MAX - 1);
    let ds = d.to_str().unwrap();
    let r = validator(&["slot", "mark-bad", "--esp", ds, "--slot", "B"]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let back = decode(&std::fs::read(d.join("validator/state.1")).unwrap()).unwrap();
    assert_eq!(back.generation, 0);
    assert_eq!(back.state.slots["B"].good, Some(false));
    let r = validator(&["slot", "status", "--esp", ds]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("record generation 0,"), "{}", r.stdout);
    // And the next write after that goes to the other copy, generation 1.
    let r = validator(&["slot", "mark-good", "--esp", ds, "--slot", "B"]);
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let back = decode(&std::fs::read(d.join("validator/state.0")).unwrap()).unwrap();
    assert_eq!(
        (back.generation, back.state.slots["B"].good),
        (1, Some(true))
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 34 items 6 and 8: `--grubenv grubenv` (a bare name, run where the file is)
/// failed with `openat(grubenv, ...): ENOENT`; `./grubenv`, an absolute path and a path
/// through a symlinked directory worked. All four work now, for `status` and `mark-*`,
/// as do `--esp .` and `--esp` through a link. A `--grubenv` that is itself a symlink is
/// refused by name (exit 2), and a link on the ESP is named as a link, not only ELOOP.
#[test]
fn grubenv_and_esp_in_every_spelling() {
    let root = tmpdir("slot-spelling");
    let d = root.join("esp");
    let env = esp(&d, GOOD);
    let envdir = env.parent().unwrap();
    std::os::unix::fs::symlink(envdir, root.join("link")).unwrap();
    let abs = env.display().to_string();
    let linked = root.join("link/grubenv").display().to_string();
    for (cwd, arg) in [
        (envdir, "grubenv"),
        (envdir, "./grubenv"),
        (root.as_path(), abs.as_str()),
        (root.as_path(), linked.as_str()),
        (root.as_path(), "link/grubenv"),
    ] {
        let r = validator_in(cwd, &["slot", "status", "--grubenv", arg]);
        assert_eq!(r.code, Some(0), "{arg}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("A_OK=1"), "{arg}: {}", r.stdout);
        let r = validator_in(cwd, &["slot", "mark-bad", "--grubenv", arg, "--slot", "A"]);
        assert_eq!(r.code, Some(0), "{arg}: {}{}", r.stdout, r.stderr);
        assert_eq!(values(&env, "A_OK"), ["0"], "{arg}");
        let r = validator_in(cwd, &["slot", "mark-good", "--grubenv", arg, "--slot", "A"]);
        assert_eq!(r.code, Some(0), "{arg}: {}{}", r.stdout, r.stderr);
        assert_eq!(values(&env, "A_OK"), ["1"], "{arg}");
    }
    std::os::unix::fs::symlink(&d, root.join("esplink")).unwrap();
    for (cwd, arg) in [
        (d.as_path(), "."),
        (root.as_path(), "esp"),
        (root.as_path(), "esplink"),
    ] {
        let r = validator_in(cwd, &["slot", "mark-good", "--esp", arg, "--slot", "A"]);
        assert_eq!(r.code, Some(0), "{arg}: {}{}", r.stdout, r.stderr);
        let r = validator_in(cwd, &["slot", "status", "--esp", arg]);
        assert_eq!(r.code, Some(0), "{arg}: {}{}", r.stdout, r.stderr);
    }
    // The grubenv given as a link: refused by name, nothing written.
    let before = std::fs::read(&env).unwrap();
    std::os::unix::fs::symlink(&env, root.join("envlink")).unwrap();
    for cmd in [&["status"][..], &["mark-bad", "--slot", "A"]] {
        let mut args = vec!["slot"];
        args.extend_from_slice(cmd);
        args.extend_from_slice(&["--grubenv", "envlink"]);
        let r = validator_in(&root, &args);
        assert_eq!(r.code, Some(2), "{cmd:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("envlink: is a symbolic link")
                && r.stderr.contains("never followed through one"),
            "{}",
            r.stderr
        );
    }
    assert_eq!(std::fs::read(&env).unwrap(), before);
    // A link inside the ESP: the problem names it as a link.
    std::fs::rename(&env, root.join("real-grubenv")).unwrap();
    std::os::unix::fs::symlink(root.join("real-grubenv"), &env).unwrap();
    let (code, p) = problems(&d);
    assert_eq!(code, Some(1), "{p:?}");
    assert!(
        p.iter().any(|l| l.contains(
            "the path holds a symbolic link, and files here are never followed through one"
        )),
        "{p:?}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// `docs/SLOTS.md` lists every problem `slot status` reports (the lines the tests above
/// produce), with the exit code.
#[test]
fn slots_doc_lists_every_status_problem() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/SLOTS.md"))
            .unwrap();
    let (_, section) = doc
        .split_once("## What `validator slot status` calls a problem")
        .expect("the section");
    assert!(section.contains("exits 1 when there is any"), "{section}");
    for line in [
        "no valid state record at DIR: state.0: WHY; state.1: WHY",
        "GRUB would find no bootable slot at the next boot",
        "no state record at DIR",
        "slot X: the boot loader marks it good, our record bad",
        "the path holds a symbolic link, and files here are never followed through one",
        "(left alone)",
        "two entries for slot X",
        "no BLS entry",
    ] {
        assert!(
            section.contains(line),
            "docs/SLOTS.md does not list {line:?}"
        );
    }
}

//! `suite`: runs every test of the workspace, as `cargo test --workspace` would, but as
//! one queue of jobs over a fixed number of workers instead of one test binary after
//! another. `scripts/test` runs it after the lints.
//!
//! Why: `cargo test` runs the binaries in turn, and libtest's threads wait at the end of
//! each binary for its longest test. On a two-core machine the QEMU boots then left a
//! core idle for about a third of the suite. Here each test of a split binary is a
//! process of its own (`<binary> <name> --exact`), a binary that is not split is one
//! job, and the heaviest jobs start first (longest-processing-time order), so no core
//! waits while work is queued. The binaries under `qemu/tests/` are split, and those the
//! weights file names a test of; the others build shared cases once per process (the
//! signature-rule sets), so they run whole, one test at a time.
//!
//! Contract: every test that `cargo test --workspace` runs is run (the doc tests as one
//! `cargo test --doc` job); a job's output is printed whole when it fails, a line per job
//! when it passes; the exit status is 0 when every job passed, 1 when one failed, 2 when
//! the suite could not be listed or started. Each job runs in its package's directory
//! with `CARGO_MANIFEST_DIR` set, as cargo runs it.
//!
//! Set-up: the QEMU tests wait for one job, `qemu-harness prebuild` (the static init with
//! and without the test hooks, the operator's CLI, the Debian root: minutes of builds that
//! their first tests would otherwise make while the others wait); it starts first, and the
//! other workers run the tests that need none of it meanwhile.
//!
//! Weights: `scripts/test-weights` (`<source> <test> <seconds>`, `#` comments) orders the
//! queue. `*` as the test weighs the whole binary, or for a split one each test the file
//! does not name; a job it does not weigh weighs 60 s under `qemu/tests/` and 1 s
//! elsewhere. Each run writes what it measured, in the same
//! format, to `target/suite-times.tsv`, so the file can be refreshed by copying.
//!
//! `--only qemu/tests/tpm,validator/tests` runs the binaries whose source starts with one
//! of the prefixes (no doc tests).
//!
//! Limits: a job that hangs holds its worker (the VMs have their own deadlines); tests
//! that share in-process state are run in separate processes, so shared caches on disk
//! must take file locks (the QEMU crate's static builds and Debian root do).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

const USAGE: &str = "usage: suite [--jobs N] [--only SOURCE-PREFIX[,...]]";

/// One test binary, as cargo reported it.
struct Binary {
    /// Its source, relative to the workspace (`qemu/tests/ab.rs`).
    source: String,
    exe: PathBuf,
    /// Its package's directory.
    dir: PathBuf,
}

/// What a worker runs.
struct Job {
    source: String,
    /// The test's name, or `*` for the whole binary (and the doc tests).
    test: String,
    weight: f64,
    program: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    /// Waits for the set-up job (a QEMU test).
    after_setup: bool,
    /// Is the set-up job.
    setup: bool,
}

/// What a job did.
struct Done {
    source: String,
    test: String,
    secs: f64,
    ok: bool,
    /// The job's output, read back when it failed (empty when it passed).
    output: String,
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("suite: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, String> {
    let mut jobs_n: usize = 2;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--jobs" | "-j" => {
                jobs_n = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--jobs needs a positive number")?;
            }
            "--only" => only = Some(args.next().ok_or("--only needs a source prefix")?),
            "-h" | "--help" => {
                println!("{USAGE}\n(runs every test of the workspace; see the source's doc)");
                return Ok(true);
            }
            other => return Err(format!("unknown argument '{other}' ({USAGE})")),
        }
    }
    let ws = workspace();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (mut binaries, harness) = build(&ws, &cargo)?;
    if let Some(p) = &only {
        binaries.retain(|b| p.split(',').any(|p| b.source.starts_with(p)));
    }
    let weights = read_weights(&ws.join("scripts/test-weights"))?;
    let mut jobs = Vec::new();
    for b in &binaries {
        jobs.extend(jobs_of(b, &weights)?);
    }
    jobs.extend(only.is_none().then(|| {
        Job {
            source: "doc-tests".into(),
            test: "*".into(),
            weight: weights
                .get(&("doc-tests".to_string(), "*".to_string()))
                .copied()
                .unwrap_or(10.0),
            program: PathBuf::from(&cargo),
            args: ["test", "--locked", "--workspace", "--doc", "-q"]
                .map(String::from)
                .to_vec(),
            dir: ws.clone(),
            after_setup: false,
            setup: false,
        }
    }));
    // The QEMU tests' shared builds (`qemu-harness prebuild`: the static init and CLI,
    // the Debian root), first, while the other workers run the tests that need none.
    if let Some(h) = harness.filter(|_| jobs.iter().any(|j| j.after_setup)) {
        jobs.push(Job {
            source: "qemu-harness".into(),
            test: "prebuild".into(),
            weight: f64::INFINITY,
            program: h,
            args: vec!["prebuild".into()],
            dir: ws.join("qemu"),
            after_setup: false,
            setup: true,
        });
    }
    jobs.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    let total = jobs.len();
    println!(
        "suite: {total} jobs from {} test binaries on {jobs_n} workers, heaviest first",
        binaries.len()
    );
    let started = Instant::now();
    let done = work(jobs, jobs_n, &ws)?;
    let failed: Vec<&Done> = done.iter().filter(|d| !d.ok).collect();
    write_times(&ws, &done);
    println!(
        "suite: {} of {total} jobs passed, {} failed, in {:.0} s",
        total - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    for d in &failed {
        println!("suite: FAILED {} {}", d.source, d.test);
    }
    Ok(failed.is_empty())
}

/// The workspace root: this crate's parent directory.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Builds every test binary (`cargo test --no-run`) and returns them, with the test bed's
/// `qemu-harness` binary (built with them) when cargo reported it.
fn build(ws: &Path, cargo: &str) -> Result<(Vec<Binary>, Option<PathBuf>), String> {
    let mut child = Command::new(cargo)
        .current_dir(ws)
        .args(["test", "--locked", "--workspace", "--no-run"])
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo's stdout was not piped")?;
    let mut out = Vec::new();
    let mut harness = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
        let Ok(m) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let at = |p: &str| m.pointer(p);
        if at("/reason").and_then(|v| v.as_str()) != Some("compiler-artifact") {
            continue;
        }
        if let Some(h) = harness_of(&m) {
            harness = Some(h);
        }
        if at("/profile/test").and_then(serde_json::Value::as_bool) != Some(true) {
            continue;
        }
        let (Some(exe), Some(src), Some(manifest)) = (
            at("/executable").and_then(|v| v.as_str()),
            at("/target/src_path").and_then(|v| v.as_str()),
            at("/manifest_path").and_then(|v| v.as_str()),
        ) else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .ok_or_else(|| format!("manifest path {manifest} has no directory"))?;
        let source = Path::new(src)
            .strip_prefix(ws)
            .unwrap_or(Path::new(src))
            .display()
            .to_string();
        out.push(Binary {
            source,
            exe: PathBuf::from(exe),
            dir: dir.to_path_buf(),
        });
    }
    let st = child
        .wait()
        .map_err(|e| format!("waiting for cargo: {e}"))?;
    if !st.success() {
        return Err(format!("cargo test --no-run failed ({st})"));
    }
    out.sort_by(|a, b| a.source.cmp(&b.source));
    out.dedup_by(|a, b| a.exe == b.exe);
    Ok((out, harness))
}

/// The `qemu-harness` program itself, if cargo's artifact message `m` is it: the binary
/// target built as a program, not as its own unit tests (`cargo test --no-run` builds
/// both under that target name, in no fixed order).
fn harness_of(m: &serde_json::Value) -> Option<PathBuf> {
    let at = |p: &str| m.pointer(p);
    if at("/target/name").and_then(|v| v.as_str()) != Some("qemu-harness")
        || at("/profile/test").and_then(serde_json::Value::as_bool) != Some(false)
    {
        return None;
    }
    at("/executable")
        .and_then(|v| v.as_str())
        .map(PathBuf::from)
}

type Weights = HashMap<(String, String), f64>;

/// The weights file: `<source> <test> <seconds>` per line.
fn read_weights(path: &Path) -> Result<Weights, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Weights::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut w = Weights::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let [source, test, secs] = f.as_slice() else {
            return Err(format!(
                "{}:{}: expected '<source> <test> <seconds>'",
                path.display(),
                n + 1
            ));
        };
        let secs: f64 = secs
            .parse()
            .map_err(|_| format!("{}:{}: '{secs}' is no number", path.display(), n + 1))?;
        w.insert((source.to_string(), test.to_string()), secs);
    }
    Ok(w)
}

/// The jobs of one binary: one per test when it is split (it is under `qemu/tests/`, or
/// the weights file names one of its tests), else one for the whole binary.
fn jobs_of(b: &Binary, weights: &Weights) -> Result<Vec<Job>, String> {
    let qemu = b.source.starts_with("qemu/tests/");
    let split = qemu || weights.keys().any(|(s, t)| *s == b.source && t != "*");
    let of = |t: &str| weights.get(&(b.source.clone(), t.to_string())).copied();
    let default = of("*").unwrap_or(if qemu { 60.0 } else { 1.0 });
    let job = |test: String, mut args: Vec<String>| {
        args.push("--test-threads=1".into());
        Job {
            source: b.source.clone(),
            weight: of(&test).unwrap_or(default),
            program: b.exe.clone(),
            args,
            dir: b.dir.clone(),
            test,
            after_setup: qemu,
            setup: false,
        }
    };
    if !split {
        return Ok(vec![job("*".into(), Vec::new())]);
    }
    Ok(list(b)?
        .into_iter()
        .map(|t| job(t.clone(), vec![t, "--exact".into()]))
        .collect())
}

/// The tests a binary holds (`--list --format terse`).
fn list(b: &Binary) -> Result<Vec<String>, String> {
    let out = Command::new(&b.exe)
        .current_dir(&b.dir)
        .env("CARGO_MANIFEST_DIR", &b.dir)
        .args(["--list", "--format", "terse"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", b.exe.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} --list failed: {}",
            b.source,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(String::from)
        .collect())
}

/// Runs the jobs, heaviest first, on `n` workers; prints a line as each ends.
/// The queue the workers share: the jobs not started, heaviest first, and whether the
/// set-up job (if any) has ended.
struct Queue {
    jobs: VecDeque<(usize, Job)>,
    setup_done: bool,
}

/// Runs the jobs on `n` workers, each taking the heaviest job it may start (a QEMU test
/// only once the set-up job ended, passed or not: the tests build what is missing
/// themselves); prints a line as each ends.
fn work(jobs: Vec<Job>, n: usize, ws: &Path) -> Result<Vec<Done>, String> {
    let logs = ws.join("target/suite-logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let total = jobs.len();
    let setup_done = !jobs.iter().any(|j| j.setup);
    let queue = Arc::new((
        Mutex::new(Queue {
            jobs: jobs.into_iter().enumerate().collect(),
            setup_done,
        }),
        Condvar::new(),
    ));
    let done = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..n)
        .map(|_| {
            let (queue, done, logs) = (queue.clone(), done.clone(), logs.clone());
            std::thread::spawn(move || {
                while let Some((i, job)) = take(&queue) {
                    let d = run_job(&job, &logs.join(format!("{i}.log")));
                    if job.setup {
                        let (q, ready) = &*queue;
                        q.lock().unwrap_or_else(|p| p.into_inner()).setup_done = true;
                        ready.notify_all();
                    }
                    let mut all = done.lock().unwrap_or_else(|p| p.into_inner());
                    report(&d, all.len() + 1, total);
                    all.push(d);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().map_err(|_| "a worker panicked")?;
    }
    let done = std::mem::take(&mut *done.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(done)
}

/// The next job a worker may start, waiting while every job left waits for the set-up;
/// `None` when the queue is empty.
fn take(queue: &(Mutex<Queue>, Condvar)) -> Option<(usize, Job)> {
    let (q, ready) = queue;
    let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if q.jobs.is_empty() {
            return None;
        }
        let setup_done = q.setup_done;
        if let Some(at) = q
            .jobs
            .iter()
            .position(|(_, j)| setup_done || !j.after_setup)
        {
            return q.jobs.remove(at);
        }
        q = ready.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

/// Runs one job with its output in `log`.
fn run_job(job: &Job, log: &Path) -> Done {
    let started = Instant::now();
    let result = File::create(log).and_then(|f| {
        let err = f.try_clone()?;
        Command::new(&job.program)
            .args(&job.args)
            .current_dir(&job.dir)
            .env("CARGO_MANIFEST_DIR", &job.dir)
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(err)
            .status()
    });
    let secs = started.elapsed().as_secs_f64();
    // The log is read back only for a failed job: it is what the report then prints.
    let (ok, mut output) = match result {
        Ok(st) if st.success() => (true, String::new()),
        Ok(_) => (false, String::new()),
        Err(e) => (
            false,
            format!("suite: cannot run {}: {e}\n", job.program.display()),
        ),
    };
    if !ok {
        if let Ok(mut f) = File::open(log) {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            output.insert_str(0, &String::from_utf8_lossy(&bytes));
        }
    }
    Done {
        source: job.source.clone(),
        test: job.test.clone(),
        secs,
        ok,
        output,
    }
}

fn report(d: &Done, n: usize, total: usize) {
    let verdict = if d.ok { "ok" } else { "FAILED" };
    println!(
        "[{n:>4}/{total}] {verdict:<6} {:>7.1} s  {} {}",
        d.secs, d.source, d.test
    );
    if !d.ok {
        println!("---- output of {} {} ----\n{}", d.source, d.test, d.output);
    }
}

/// What this run measured, in the weights file's format.
fn write_times(ws: &Path, done: &[Done]) {
    let mut rows: Vec<&Done> = done.iter().collect();
    rows.sort_by(|a, b| (&a.source, &a.test).cmp(&(&b.source, &b.test)));
    let mut text = String::from("# measured by target/debug/suite: <source> <test> <seconds>\n");
    for d in rows {
        text.push_str(&format!("{} {} {:.1}\n", d.source, d.test, d.secs));
    }
    let path = ws.join("target/suite-times.tsv");
    if let Err(e) = std::fs::write(&path, text) {
        eprintln!("suite: {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed weights file parses, and weighs the real node's upgrade test.
    #[test]
    fn the_committed_weights_parse() {
        let w = read_weights(&workspace().join("scripts/test-weights")).unwrap();
        assert!(
            w.keys().any(|(s, _)| s == "qemu/tests/real_node.rs"),
            "{w:?}"
        );
        assert!(w.values().all(|s| *s > 0.0));
    }

    /// The harness is the program, whichever order cargo reports its two builds in (the
    /// unit tests' one, run with `prebuild`, would filter every test out and pass).
    #[test]
    fn the_harness_is_the_program_not_its_unit_tests() {
        let artifact = |test: bool, exe: &str| {
            serde_json::json!({
                "reason": "compiler-artifact",
                "target": { "name": "qemu-harness", "kind": ["bin"] },
                "profile": { "test": test },
                "executable": exe,
            })
        };
        let program = artifact(false, "/t/debug/qemu-harness");
        let tests = artifact(true, "/t/debug/deps/qemu_harness-0123");
        assert_eq!(
            harness_of(&program),
            Some(PathBuf::from("/t/debug/qemu-harness"))
        );
        assert_eq!(harness_of(&tests), None);
        let other = serde_json::json!({
            "target": { "name": "validator" },
            "profile": { "test": false },
            "executable": "/t/debug/validator",
        });
        assert_eq!(harness_of(&other), None);
    }

    /// A line without three fields, or with a weight that is no number, is an error that
    /// names the file and the line.
    #[test]
    fn a_bad_weights_line_names_its_place() {
        let dir = std::env::temp_dir().join(format!("suite-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (text, want) in [
            ("# c\n(doc tests) * 1\n", ":2: expected"),
            ("a b c d\n", ":1: expected"),
            ("a b x\n", ":1: 'x' is no number"),
        ] {
            let f = dir.join("w");
            std::fs::write(&f, text).unwrap();
            let e = read_weights(&f).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! The TPM client and the event logs against a real TPM: swtpm (libtpms) on 127.0.0.1,
//! checked against tpm2-tools (`tpm2_pcrread`, `tpm2_eventlog`) talking to the same TPM
//! and reading the same log.
//!
//! Needs `swtpm`, `swtpm_setup` and tpm2-tools in PATH (scripts/provision installs them);
//! without them the tests fail. Temporary files go under `target/test-tmp/`.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use validator::formats::tpm::cel::{self, CelRecord};
use validator::formats::tpm::eventlog::EventLog;
use validator::formats::tpm::{from_hex, to_hex, HashAlg, PcrValues};
use validator::sys::tpm::{TcpTransport, Tpm};

fn have_tools() -> bool {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let all = ok("swtpm", "--version")
        && ok("swtpm_setup", "--print-capabilities")
        && ok("tpm2_pcrread", "--version")
        && ok("tpm2_eventlog", "--version");
    // The tools are part of the test bed (scripts/provision installs them): a missing one
    // is a failure, never a silent pass.
    assert!(
        all,
        "swtpm, swtpm_setup or tpm2-tools missing: run scripts/provision"
    );
    all
}

/// A fresh directory `target/test-tmp/tpm-swtpm-<name>-<pid>`.
fn work_dir(name: &str) -> PathBuf {
    common::tmpdir(&format!("tpm-swtpm-{name}"))
}

/// Manufactures a TPM 2.0 state with exactly these PCR banks active.
fn setup_state(dir: &Path, banks: &str) {
    let out = Command::new("swtpm_setup")
        .arg("--tpm2")
        .arg("--tpmstate")
        .arg(dir)
        .args(["--pcr-banks", banks, "--overwrite"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swtpm_setup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running swtpm, killed when dropped (also when a test fails).
struct Swtpm {
    child: Child,
    port: u16,
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Swtpm {
    /// Starts `swtpm socket` on free 127.0.0.1 ports with `--flags <flags>`.
    fn start(dir: &Path, flags: &str) -> Swtpm {
        for _ in 0..5 {
            // The swtpm TCTI of tpm2-tools expects the control port right after the data
            // port.
            let port = free_port_pair();
            let ctrl = port + 1;
            let log = std::fs::File::create(dir.join("swtpm.log")).unwrap();
            let child = Command::new("swtpm")
                .args(["socket", "--tpm2", "--tpmstate"])
                .arg(format!("dir={}", dir.display()))
                .arg("--server")
                .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
                .arg("--ctrl")
                .arg(format!("type=tcp,port={ctrl},bindaddr=127.0.0.1"))
                .args(["--flags", flags])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut tpm = Swtpm { child, port };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if tpm.child.try_wait().unwrap().is_some() {
                    break; // port taken meanwhile: try others
                }
                if TcpStream::connect(tpm.addr()).is_ok() {
                    return tpm;
                }
                thread::sleep(Duration::from_millis(20));
            }
            let _ = tpm.child.kill();
        }
        panic!(
            "swtpm did not start: {}",
            std::fs::read_to_string(dir.join("swtpm.log")).unwrap_or_default()
        );
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn connect(&self) -> Tpm<TcpTransport> {
        Tpm::new(TcpTransport::connect(self.addr(), Duration::from_secs(2)).unwrap())
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id().cast_signed()), sig).unwrap();
    }

    /// `tpm2_pcrread` through the swtpm TCTI.
    fn tpm2_pcrread(&self, banks: &[HashAlg], pcrs: &[u32]) -> PcrValues {
        let list: Vec<String> = pcrs.iter().map(|p| p.to_string()).collect();
        let sel: Vec<String> = banks
            .iter()
            .map(|b| format!("{}:{}", b.name(), list.join(",")))
            .collect();
        let out = Command::new("tpm2_pcrread")
            .arg(sel.join("+"))
            .env(
                "TPM2TOOLS_TCTI",
                format!("swtpm:host=127.0.0.1,port={}", self.port),
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tpm2_pcrread: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_pcr_listing(&text)
    }
}

/// A free port P with P+1 free too.
fn free_port_pair() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
}

/// Parses the `  sha256:\n    9 : 0x...` listing of `tpm2_pcrread` and of the `pcrs:`
/// section of `tpm2_eventlog`.
fn parse_pcr_listing(text: &str) -> PcrValues {
    let mut values = PcrValues::new();
    let mut bank = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_suffix(':') {
            bank = HashAlg::from_name(name);
            continue;
        }
        let Some((idx, val)) = t.split_once(':') else {
            continue;
        };
        let (Some(b), Ok(i)) = (bank, idx.trim().parse::<u32>()) else {
            continue;
        };
        let hex = val.trim().trim_start_matches("0x");
        values
            .entry(b)
            .or_default()
            .insert(i, from_hex(hex).unwrap());
    }
    values
}

/// Only the PCRs in `pcrs`.
fn select(values: &PcrValues, pcrs: &[u32]) -> PcrValues {
    values
        .iter()
        .map(|(b, m)| {
            let sub: BTreeMap<u32, Vec<u8>> = m
                .iter()
                .filter(|(p, _)| pcrs.contains(p))
                .map(|(p, v)| (*p, v.clone()))
                .collect();
            (*b, sub)
        })
        .collect()
}

fn merge(mut a: PcrValues, b: PcrValues) -> PcrValues {
    for (bank, m) in b {
        a.entry(bank).or_default().extend(m);
    }
    a
}

fn show(values: &PcrValues) -> String {
    let mut s = String::new();
    for (b, m) in values {
        for (p, v) in m {
            s.push_str(&format!("{b}:{p} = {}\n", to_hex(v)));
        }
    }
    s
}

/// The whole flow for one bank set: banks, extends logged in both log formats, replay
/// against our PCR_Read, `tpm2_pcrread` and `tpm2_eventlog`.
fn bank_set(banks: &[HashAlg], name: &str) {
    if !have_tools() {
        return;
    }
    let names: Vec<&str> = banks.iter().map(|b| b.name()).collect();
    let dir = work_dir(name);
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    setup_state(&state, &names.join(","));
    let swtpm = Swtpm::start(&state, "not-need-init,startup-clear");
    let mut tpm = swtpm.connect();

    let got = tpm.get_pcr_banks().unwrap();
    assert_eq!(got, banks, "active banks");
    assert_eq!(tpm.stats().commands, 1, "GetCapability: one command");

    let mut log = EventLog::new(&got);
    let mut cel_log = Vec::new();
    let mut extends = 0;
    for round in 0..3 {
        for pcr in [9, 11] {
            let what = format!("boot-gate test: PCR {pcr} round {round}");
            let digests = log.measure(pcr, what.as_bytes()).unwrap();
            let before = tpm.stats().commands;
            tpm.pcr_extend(pcr, &digests).unwrap();
            assert_eq!(tpm.stats().commands, before + 1, "PCR_Extend: one command");
            extends += 1;
        }
        let rec = CelRecord::systemd(15, "phase", &format!("step-{round}"), &got);
        tpm.pcr_extend(15, &rec.digests).unwrap();
        extends += 1;
        cel_log.extend_from_slice(&rec.to_bytes());
    }
    let after_extends = tpm.stats();

    let expected_bin = log.replay();
    let expected_cel = cel::replay(&cel::parse(&cel_log).unwrap());
    let expected = merge(expected_bin.clone(), expected_cel);
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        {
            let mut b = banks.to_vec();
            b.sort();
            b
        },
        "replay covers every bank"
    );

    let mut read = PcrValues::new();
    for pcr in [9, 11, 15] {
        let before = tpm.stats().commands;
        for (b, v) in tpm.pcr_read(pcr, &got).unwrap() {
            read.entry(b).or_default().insert(pcr, v);
        }
        assert_eq!(tpm.stats().commands, before + 1, "PCR_Read: one command");
    }
    assert_eq!(read, expected, "PCR_Read vs replay\n{}", show(&expected));
    let stats = tpm.stats();
    eprintln!(
        "{name}: {} commands in {:?} total; {extends} extends took {} commands, {:?}",
        stats.commands,
        stats.time,
        after_extends.commands - 1,
        after_extends.time
    );
    // swtpm serves one connection at a time: hand it over to tpm2-tools.
    drop(tpm);

    let theirs = swtpm.tpm2_pcrread(&got, &[9, 11, 15]);
    assert_eq!(theirs, expected, "tpm2_pcrread vs replay");

    let path = dir.join("eventlog.bin");
    std::fs::write(&path, log.to_bytes()).unwrap();
    assert_eq!(
        EventLog::parse(&std::fs::read(&path).unwrap()).unwrap(),
        log
    );
    let out = Command::new("tpm2_eventlog").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tpm2_eventlog: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pcrs = text
        .split_once("\npcrs:\n")
        .map(|(_, p)| p)
        .expect("tpm2_eventlog printed no pcrs: section");
    let theirs = parse_pcr_listing(pcrs);
    assert_eq!(theirs, expected_bin, "tpm2_eventlog pcrs vs our replay");
    assert_eq!(select(&expected, &[9, 11]), expected_bin);
    std::fs::write(dir.join("tpm2-measure.log"), &cel_log).unwrap();
    drop(swtpm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sha1_sha256_banks() {
    bank_set(&[HashAlg::Sha1, HashAlg::Sha256], "sha1-sha256");
}

#[test]
fn sha256_sha384_banks() {
    bank_set(&[HashAlg::Sha256, HashAlg::Sha384], "sha256-sha384");
}

#[test]
fn startup_on_a_fresh_tpm() {
    if !have_tools() {
        return;
    }
    let dir = work_dir("startup");
    setup_state(&dir, "sha256");
    let swtpm = Swtpm::start(&dir, "not-need-init");
    let mut tpm = swtpm.connect();
    let e = tpm.get_pcr_banks().unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_GetCapability(TPM_CAP_PCRS) failed: TPM_RC_INITIALIZE (0x100)"
    );
    assert!(tpm.startup_clear().unwrap(), "first Startup");
    assert!(
        !tpm.startup_clear().unwrap(),
        "second Startup: already started"
    );
    assert_eq!(tpm.get_pcr_banks().unwrap(), vec![HashAlg::Sha256]);
    // PCR 17 needs locality 4: the TPM's code comes back by name.
    let d = vec![(HashAlg::Sha256, HashAlg::Sha256.digest(b"x"))];
    let e = tpm.pcr_extend(17, &d).unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Extend failed: TPM_RC_LOCALITY (0x907)"
    );
    drop(tpm);
    drop(swtpm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hung_then_killed_tpm_gives_errors_not_hangs() {
    if !have_tools() {
        return;
    }
    let dir = work_dir("killed");
    setup_state(&dir, "sha256");

    // A stopped TPM: the command times out.
    let swtpm = Swtpm::start(&dir, "not-need-init,startup-clear");
    let mut tpm = swtpm.connect().with_timeout(Duration::from_millis(500));
    assert_eq!(tpm.get_pcr_banks().unwrap(), vec![HashAlg::Sha256]);
    swtpm.signal(Signal::SIGSTOP);
    let start = Instant::now();
    let e = tpm.pcr_read(9, &[HashAlg::Sha256]).unwrap_err();
    let took = start.elapsed();
    assert!(e.is_timeout(), "{e}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(1500),
        "{took:?}"
    );
    // The transport refuses to go on after a timeout.
    let e = tpm.pcr_read(9, &[HashAlg::Sha256]).unwrap_err();
    assert!(e.to_string().contains("unusable"), "{e}");
    drop(tpm);
    drop(swtpm);

    // A TPM killed while our command waits: the error comes as soon as it dies.
    let swtpm = Swtpm::start(&dir, "not-need-init,startup-clear");
    let mut tpm = swtpm.connect();
    assert_eq!(tpm.get_pcr_banks().unwrap(), vec![HashAlg::Sha256]);
    swtpm.signal(Signal::SIGSTOP);
    let pid = Pid::from_raw(swtpm.child.id().cast_signed());
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        kill(pid, Signal::SIGKILL).unwrap();
    });
    let start = Instant::now();
    let e = tpm.pcr_read(9, &[HashAlg::Sha256]).unwrap_err();
    let took = start.elapsed();
    killer.join().unwrap();
    assert!(!e.is_timeout(), "{e}");
    assert!(
        e.to_string().starts_with("TPM2_PCR_Read: 127.0.0.1:"),
        "{e}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}: {e}");
    eprintln!("killed TPM: {e} after {took:?}");

    // The connection is not used again.
    let e = tpm.get_pcr_banks().unwrap_err();
    assert!(e.to_string().contains("unusable"), "{e}");
    drop(tpm);
    drop(swtpm);
    let _ = std::fs::remove_dir_all(&dir);
}

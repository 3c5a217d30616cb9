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
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use common::swtpm::{have_tools, setup_state, Swtpm};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use validator::formats::tpm::cel::{self, CelRecord};
use validator::formats::tpm::eventlog::EventLog;
use validator::formats::tpm::{from_hex, to_hex, HashAlg, PcrValues};

/// Sends `sig` to the swtpm (stop it, let it go on).
fn signal(swtpm: &Swtpm, sig: Signal) {
    kill(Pid::from_raw(swtpm.pid().cast_signed()), sig).unwrap();
}

/// A fresh directory `target/test-tmp/tpm-swtpm-<name>-<pid>`.
fn work_dir(name: &str) -> PathBuf {
    common::tmpdir(&format!("tpm-swtpm-{name}"))
}

/// `tpm2_pcrread` through the swtpm TCTI.
fn tpm2_pcrread(swtpm: &Swtpm, banks: &[HashAlg], pcrs: &[u32]) -> PcrValues {
    let list: Vec<String> = pcrs.iter().map(|p| p.to_string()).collect();
    let sel: Vec<String> = banks
        .iter()
        .map(|b| format!("{}:{}", b.name(), list.join(",")))
        .collect();
    let out = Command::new("tpm2_pcrread")
        .arg(sel.join("+"))
        .env("TPM2TOOLS_TCTI", swtpm.tcti())
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
    if !have_tools(&["tpm2_pcrread", "tpm2_eventlog"]) {
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

    let theirs = tpm2_pcrread(&swtpm, &got, &[9, 11, 15]);
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
    if !have_tools(&["tpm2_pcrread", "tpm2_eventlog"]) {
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
    if !have_tools(&["tpm2_pcrread", "tpm2_eventlog"]) {
        return;
    }
    let dir = work_dir("killed");
    setup_state(&dir, "sha256");

    // A stopped TPM: the command times out.
    let swtpm = Swtpm::start(&dir, "not-need-init,startup-clear");
    let mut tpm = swtpm.connect().with_timeout(Duration::from_millis(500));
    assert_eq!(tpm.get_pcr_banks().unwrap(), vec![HashAlg::Sha256]);
    signal(&swtpm, Signal::SIGSTOP);
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
    signal(&swtpm, Signal::SIGSTOP);
    let pid = Pid::from_raw(swtpm.pid().cast_signed());
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

/// A legacy SHA-1 log (older firmware on TPM 2.0 machines): the real firmware, shim, GRUB
/// and gate events of an `sb-node` boot (`tests/fixtures/attest/tpm-eventlog.bin`)
/// rewritten as `TCG_PCR_EVENT` records. `tpm2_eventlog` and we replay it to the same
/// SHA-1 values, which are those of the crypto-agile original; continued by us, it stays
/// a legacy log `tpm2_eventlog` reads, with our event's extend in it.
#[test]
fn a_legacy_sha1_log_replays_as_tpm2_eventlog_replays_it() {
    if !have_tools(&["tpm2_eventlog"]) {
        return;
    }
    let dir = work_dir("legacy");
    let agile_bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attest/tpm-eventlog.bin"),
    )
    .unwrap();
    let agile = EventLog::parse(&agile_bytes).unwrap();
    let mut legacy = Vec::new();
    for e in agile.events() {
        let d = &e
            .digests
            .iter()
            .find(|(id, _)| *id == HashAlg::Sha1.alg_id())
            .unwrap()
            .1;
        legacy.extend_from_slice(&e.pcr.to_le_bytes());
        legacy.extend_from_slice(&e.event_type.to_le_bytes());
        legacy.extend_from_slice(d);
        legacy.extend_from_slice(&u32::try_from(e.data.len()).unwrap().to_le_bytes());
        legacy.extend_from_slice(&e.data);
    }
    let theirs = |bytes: &[u8], name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = Command::new("tpm2_eventlog").arg(&path).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "tpm2_eventlog {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pcrs = text
            .split_once("\npcrs:\n")
            .map(|(_, p)| p.to_string())
            .unwrap();
        parse_pcr_listing(&pcrs)
    };
    let mut log = EventLog::parse(&legacy).unwrap();
    assert!(log.is_legacy());
    let ours = log.replay();
    assert_eq!(ours.keys().copied().collect::<Vec<_>>(), [HashAlg::Sha1]);
    assert_eq!(ours[&HashAlg::Sha1], agile.replay()[&HashAlg::Sha1]);
    assert_eq!(
        theirs(&legacy, "legacy.bin")[&HashAlg::Sha1],
        ours[&HashAlg::Sha1]
    );
    log.measure(13, b"decision:pass").unwrap();
    let continued = log.to_bytes();
    assert_eq!(&continued[..legacy.len()], &legacy[..]);
    assert_eq!(
        theirs(&continued, "continued.bin")[&HashAlg::Sha1],
        log.replay()[&HashAlg::Sha1]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

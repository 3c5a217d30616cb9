//! The verifier against root on the node: each attack an attacker with root after the
//! handover can make (write the report, the log and its order; use the TPM, whose AK needs
//! no authorisation, to extend any PCR and quote any data), built from the real `sb-node`
//! boot of the fixture (`tests/fixtures/attest/`) and a swtpm extended as the boot the
//! attacker had would have extended it, quoted and sealed as our init does. Each is
//! refused, naming what differs; the honest boot replayed the same way verifies, and
//! `tpm2_eventlog` replays every accepted log to the quoted values.
//!
//! Needs swtpm and tpm2-tools (scripts/provision installs them). Temporary files go under
//! `target/test-tmp/`.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use common::swtpm::{have_tools, setup_state, Swtpm};
use validator::attest::reference::Reference;
use validator::attest::verify::{
    verify_report, BootLoaderError, FileError, KexecError, Policy, SealError, VerifyError,
};
use validator::formats::tpm::attest::{
    ak_template, format_selection, parse_selection, KeyKind, Public,
};
use validator::formats::tpm::eventlog::{Event, EventLog, EV_EVENT_TAG, EV_IPL, EV_NO_ACTION};
use validator::formats::tpm::measurement::{Measurement, Seal};
use validator::formats::tpm::HashAlg;
use validator::sys::tpm::{TcpTransport, Tpm, RH_ENDORSEMENT};

/// What the init quotes: the pinned PCRs, 11 and 13, in both banks of the fixture's log.
const INIT_SELECTION: &str =
    "sha1:0,1,2,3,4,5,6,7,8,9,11,13,14+sha256:0,1,2,3,4,5,6,7,8,9,11,13,14";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attest")
}

struct Fixture {
    reference: Reference,
    report: serde_json::Value,
    log: EventLog,
}

fn fixture() -> Fixture {
    let d = fixture_dir();
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    Fixture {
        reference: Reference::parse(&String::from_utf8(read("reference.json")).unwrap()).unwrap(),
        report: serde_json::from_slice(&read("report.json")).unwrap(),
        log: EventLog::parse(&read("tpm-eventlog.bin")).unwrap(),
    }
}

/// The fixture's records before its seal: what the real boot had measured when its init
/// quoted.
fn before_seal(log: &EventLog) -> Vec<Event> {
    let (last, rest) = log.events().split_last().unwrap();
    assert!(
        last.data.starts_with(b"sealed:"),
        "the fixture's log ends with its seal"
    );
    rest.to_vec()
}

/// A TPM of our own, extended as a boot would extend it.
struct Node {
    _swtpm: Swtpm,
    tpm: Tpm<TcpTransport>,
    ak: Public,
    dir: PathBuf,
}

impl Node {
    fn new(name: &str) -> Node {
        let dir = common::tmpdir(&format!("attest-attacks-{name}"));
        setup_state(&dir, "sha1,sha256");
        let swtpm = Swtpm::start(&dir, "not-need-init,startup-clear");
        let mut tpm = swtpm.connect();
        let ak = tpm
            .create_primary(RH_ENDORSEMENT, &ak_template(KeyKind::EccP256))
            .unwrap();
        tpm.flush_context(ak.handle).unwrap();
        Node {
            _swtpm: swtpm,
            tpm,
            ak: ak.public,
            dir,
        }
    }

    /// Extends every record that a TPM extends (not `EV_NO_ACTION`) with its digests.
    fn extend(&mut self, records: &[Event]) {
        for e in records.iter().filter(|e| e.event_type != EV_NO_ACTION) {
            let d: Vec<(HashAlg, Vec<u8>)> = e
                .digests
                .iter()
                .filter_map(|(id, d)| HashAlg::from_alg_id(*id).map(|h| (h, d.clone())))
                .collect();
            self.tpm.pcr_extend(e.pcr, &d).unwrap();
        }
    }

    /// `report` with a quote over `selection` whose qualifying data is the report's
    /// digest (as the init makes it, or as `validator attest quote` would for root), and
    /// the `TPMS_ATTEST` bytes.
    fn quote(&mut self, report: &serde_json::Value, selection: &str) -> (Vec<u8>, Vec<u8>) {
        let mut r = report.clone();
        let digest = validator::report::json::quoted_digest_of(&r);
        let key = self
            .tpm
            .create_primary(RH_ENDORSEMENT, &ak_template(KeyKind::EccP256))
            .unwrap();
        let sel = parse_selection(selection).unwrap();
        let (attest, sig) = self.tpm.quote(key.handle, &digest, &sel).unwrap();
        self.tpm.flush_context(key.handle).unwrap();
        r["attestation"]["quote"] = serde_json::json!({
            "ak": "ecc",
            "ak_name": validator::util::hex(&key.public.name()),
            "ak_public": b64(&key.public.to_2b()),
            "pcrs": format_selection(&attest.pcr_select),
            "attest": b64(&attest.bytes),
            "signature": b64(&sig.to_bytes()),
            "clock": attest.clock,
        });
        (serde_json::to_vec(&r).unwrap(), attest.bytes)
    }

    /// The seal the init extends after its quote, appended to `log` and extended.
    fn seal(&mut self, log: &mut EventLog, attest: &[u8]) {
        let m = Measurement::Seal(Seal::Quote(validator::trust::keys::sha256(attest)));
        let d = log.measure(m.pcr(13), m.text().as_bytes()).unwrap();
        self.tpm.pcr_extend(m.pcr(13), &d).unwrap();
    }
}

/// A log with the fixture's Spec ID event and these records.
fn log_of(template: &EventLog, records: &[Event]) -> EventLog {
    let banks = template.spec_id().banks();
    let mut l = EventLog::new(&banks);
    for e in records {
        l.append(e.clone()).unwrap();
    }
    l
}

/// A boot as our init ends it: `records` extended, the report quoted as the init
/// quotes it, the seal extended and logged. Returns the node, the report, the log.
fn booted(name: &str, f: &Fixture, records: &[Event]) -> (Node, Vec<u8>, EventLog) {
    let mut node = Node::new(name);
    node.extend(records);
    let (report, attest) = node.quote(&f.report, INIT_SELECTION);
    let mut log = log_of(&f.log, records);
    node.seal(&mut log, &attest);
    (node, report, log)
}

fn verify(node: &Node, f: &Fixture, report: &[u8], log: &[u8]) -> Result<(), VerifyError> {
    verify_report(
        &node.ak,
        std::slice::from_ref(&f.reference),
        report,
        log,
        &Policy::default(),
    )
    .map(|_| ())
}

/// The record whose data starts with `prefix`.
fn position(records: &[Event], prefix: &str) -> usize {
    records
        .iter()
        .position(|e| e.data.starts_with(prefix.as_bytes()))
        .unwrap()
}

/// A record of ours with its real digests of `text`.
fn ours(log: &EventLog, pcr: u32, text: &str) -> Event {
    let mut l = log_of(log, &[]);
    l.measure(pcr, text.as_bytes()).unwrap();
    l.events()[0].clone()
}

/// `tpm2_eventlog` replays the accepted log to the values the TPM holds.
fn tpm2_eventlog_agrees(node: &mut Node, log: &[u8]) {
    let p = node.dir.join("accepted.bin");
    std::fs::write(&p, log).unwrap();
    let out = Command::new("tpm2_eventlog").arg(&p).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mine = log_of(&EventLog::parse(log).unwrap(), &[])
        .spec_id()
        .banks();
    for bank in mine {
        for pcr in [0u32, 7, 9, 11, 13, 14] {
            let live = node.tpm.pcr_read(pcr, &[bank]).unwrap();
            let hex = validator::util::hex(&live[0].1);
            let line = format!("{pcr:<2} : 0x{hex}");
            assert!(
                text.contains(&line),
                "tpm2_eventlog {bank} PCR {pcr}: no `{line}` in\n{text}"
            );
        }
    }
}

#[test]
fn the_real_boot_replayed_into_a_tpm_verifies_and_tpm2_eventlog_agrees() {
    if !have_tools(&["tpm2_eventlog"]) {
        return;
    }
    let f = fixture();
    let (mut node, report, log) = booted("honest", &f, &before_seal(&f.log));
    let bytes = log.to_bytes();
    verify(&node, &f, &report, &bytes).unwrap_or_else(|e| panic!("{e}"));
    tpm2_eventlog_agrees(&mut node, &bytes);
}

/// Attack 1: a boot with `init=/bin/sh` on its command line keeps its honest digests (the
/// replay still equals the quote), retypes its real `cmdline:` event so an `EV_IPL`-only
/// comparison skips it, and adds a copy of the good one without digests (or not
/// extended): refused, the copy by the parser, the retyped event by its type.
#[test]
fn attack_1_a_retyped_event_and_a_digestless_copy_are_refused() {
    have_tools(&[]);
    let f = fixture();
    let mut records = before_seal(&f.log);
    let at = position(&records, "cmdline:");
    let good = records[at].clone();
    let bad_text = format!("{} init=/bin/sh", String::from_utf8_lossy(&good.data));
    records[at] = ours(&f.log, 13, &bad_text);
    let (node, report, log) = booted("attack-1", &f, &records);
    // The honest log of that boot: refused for its command line.
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::Event { actual, .. }) => {
            assert!(actual.ends_with("init=/bin/sh"), "{actual}")
        }
        r => panic!("{r:?}"),
    }
    // The attacker's log: the real event retyped, a digest-less copy of the good one.
    let mut forged = log.events().to_vec();
    forged[at].event_type = EV_EVENT_TAG;
    let mut copy = good.clone();
    copy.digests.clear();
    forged.insert(at + 1, copy);
    let bytes = raw_log(&f.log, &forged);
    match verify(&node, &f, &report, &bytes) {
        Err(VerifyError::Log(why)) => assert!(why.contains("0 digests"), "{why}"),
        r => panic!("{r:?}"),
    }
    // The copy with all its digests but not extended (EV_NO_ACTION): refused by its type.
    let mut copy = good.clone();
    copy.event_type = EV_NO_ACTION;
    forged[at + 1] = copy;
    let bytes = raw_log(&f.log, &forged);
    match verify(&node, &f, &report, &bytes) {
        Err(VerifyError::NotOurs { pcr: 13, why, .. }) => {
            assert!(why.contains("event type 0x6"), "{why}")
        }
        r => panic!("{r:?}"),
    }
    // The retyped event alone (no copy): still judged, by its type.
    forged.remove(at + 1);
    match verify(&node, &f, &report, &raw_log(&f.log, &forged)) {
        Err(VerifyError::NotOurs { pcr: 13, why, .. }) => {
            assert!(why.contains("init=/bin/sh"), "{why}")
        }
        r => panic!("{r:?}"),
    }
    // A digest for one bank only: refused by the parser.
    let mut forged = log.events().to_vec();
    forged[at].digests.truncate(1);
    assert!(matches!(
        verify(&node, &f, &report, &raw_log(&f.log, &forged)),
        Err(VerifyError::Log(_))
    ));
}

/// The log's bytes as given, records written as they are (also records `append` would
/// refuse, such as one with too few digests).
fn raw_log(template: &EventLog, records: &[Event]) -> Vec<u8> {
    let mut v = log_of(template, &[]).to_bytes();
    for e in records {
        v.extend_from_slice(&e.pcr.to_le_bytes());
        v.extend_from_slice(&e.event_type.to_le_bytes());
        v.extend_from_slice(&u32::try_from(e.digests.len()).unwrap().to_le_bytes());
        for (id, d) in &e.digests {
            v.extend_from_slice(&id.to_le_bytes());
            v.extend_from_slice(d);
        }
        v.extend_from_slice(&u32::try_from(e.data.len()).unwrap().to_le_bytes());
        v.extend_from_slice(&e.data);
    }
    v
}

/// Attack 2: a quote over `sha256:23` alone, qualifying data the report's digest, the
/// good boot's log beside it, while the TPM's PCRs hold a bad boot: refused for its
/// selection, naming the PCRs it leaves out.
#[test]
fn attack_2_a_quote_that_leaves_pcrs_out_is_refused() {
    have_tools(&[]);
    let f = fixture();
    let good = before_seal(&f.log);
    let mut bad = good.clone();
    let at = position(&bad, "cmdline:");
    bad[at] = ours(
        &f.log,
        13,
        &format!("{} init=/bin/sh", String::from_utf8_lossy(&bad[at].data)),
    );
    let mut node = Node::new("attack-2");
    node.extend(&bad);
    let (report, attest) = node.quote(&f.report, "sha256:23");
    let mut log = log_of(&f.log, &good);
    // The seal the attacker writes for this quote (PCR 13 is not quoted: no extend needed).
    let m = Measurement::Seal(Seal::Quote(validator::trust::keys::sha256(&attest)));
    log.measure(13, m.text().as_bytes()).unwrap();
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::Selection { missing, .. }) => {
            assert_eq!(
                missing,
                "sha1:0,1,2,3,4,5,6,7,8,9,11,13,14+sha256:0,1,2,3,4,5,6,7,8,9,11,13,14"
            )
        }
        r => panic!("{r:?}"),
    }
    // A quote of every PCR but 13 in one bank: still refused, naming that one.
    let (report, attest) = node.quote(
        &f.report,
        "sha1:0,1,2,3,4,5,6,7,8,9,11,13,14+sha256:0,1,2,3,4,5,6,7,8,9,11,14",
    );
    let mut log = log_of(&f.log, &bad);
    node.seal(&mut log, &attest);
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::Selection { missing, .. }) => assert_eq!(missing, "sha256:13"),
        r => panic!("{r:?}"),
    }
}

/// Attack 3: GRUB read another `/A/vmlinuz`; its PCR 9 event renamed (the path is not
/// part of the digest) so a by-name check skips it. Against the image's complete list of
/// what its GRUB reads (`grub.cfg`, `grubenv` of any content, `node.cfg`, the kernel, the
/// initramfs, in order): refused at the first record that differs, also when root
/// extended the predicted digests after the boot, or when `grubenv` is gone and another
/// initramfs takes its place. Against a list that is not complete (each predicted file
/// once, by digest): the renamed kernel, a kernel measured twice, and a record with the
/// predicted digest in one bank only are refused.
#[test]
fn attack_3_a_boot_loader_file_is_judged_by_its_digest() {
    have_tools(&[]);
    let f = fixture();
    let good = before_seal(&f.log);
    let pcr9 = |text: &[u8]| {
        good.iter()
            .position(|e| e.pcr == 9 && e.data.ends_with(text))
            .unwrap()
    };
    let (at, init_at, env_at) = (
        pcr9(b"/A/vmlinuz\0"),
        pcr9(b"/A/initrd.img\0"),
        pcr9(b"/grubenv\0"),
    );
    let other = |text: &str, like: &Event, name: &[u8]| {
        let mut e = ours(&f.log, 9, text);
        e.event_type = like.event_type;
        e.data = name.to_vec();
        e
    };
    let mut bad = good.clone();
    bad[at] = other("another kernel", &good[at], b"/A/vmlinuz-renamed\0");
    let (node, report, log) = booted("attack-3", &f, &bad);
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::BootLoader {
            pcr: 9,
            why: BootLoaderError::Record { index, path, .. },
        }) => assert_eq!((index, path.as_str()), (4, "/A/vmlinuz")),
        r => panic!("{r:?}"),
    }
    // Another kernel and initramfs read; root extended the predicted ones afterwards.
    let mut appended = bad.clone();
    appended[init_at] = other("another initramfs", &good[init_at], b"/A/initrd.img\0");
    let first_ours = position(&appended, "enter-initrd");
    appended.insert(first_ours, good[init_at].clone());
    appended.insert(first_ours, good[at].clone());
    let (node, report, log) = booted("attack-3-appended", &f, &appended);
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::BootLoader {
            pcr: 9,
            why: BootLoaderError::Count { got: 7, .. },
        }) => {}
        r => panic!("{r:?}"),
    }
    // grubenv gone, another initramfs read in its place, the predicted one extended after.
    let mut no_env = good.clone();
    no_env.remove(env_at);
    let init_now = init_at - 1;
    no_env[init_now] = other("another initramfs", &good[init_at], b"/A/initrd.img\0");
    let first_ours = position(&no_env, "enter-initrd");
    no_env.insert(first_ours, good[init_at].clone());
    let (node, report, log) = booted("attack-3-no-env", &f, &no_env);
    match verify(&node, &f, &report, &log.to_bytes()) {
        Err(VerifyError::BootLoader {
            pcr: 9,
            why: BootLoaderError::Record { path, .. },
        }) => assert_eq!(path, "/EFI/BOOT/node.cfg"),
        r => panic!("{r:?}"),
    }
    // A list that is not complete: each predicted file once, by digest.
    let mut loose = f.reference.clone();
    for s in &mut loose.slots {
        s.files_complete = false;
    }
    let check = |name: &str, records: &[Event]| {
        let (node, report, log) = booted(name, &f, records);
        verify_report(
            &node.ak,
            std::slice::from_ref(&loose),
            &report,
            &log.to_bytes(),
            &Policy::default(),
        )
    };
    match check("attack-3-loose", &bad) {
        Err(VerifyError::File {
            path,
            why: FileError::NotRead,
            ..
        }) => assert_eq!(path, "/A/vmlinuz"),
        r => panic!("{r:?}"),
    }
    let mut twice = good.clone();
    twice.insert(at + 1, good[at].clone());
    match check("attack-3-twice", &twice) {
        Err(VerifyError::File {
            why: FileError::Repeated { count: 2 },
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
    let mut mixed = good.clone();
    mixed[at].digests[0].1[0] ^= 1;
    match check("attack-3-mixed", &mixed) {
        Err(VerifyError::File {
            why: FileError::MixedBanks { .. },
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
    // What such a list cannot tell: another kernel read first, the predicted one
    // extended after (docs/ATTESTATION.md: a fleet then pins PCR 9, or predicts the whole list).
    assert!(check("attack-3-loose-appended", &appended).is_ok());
}

/// Attack 4: a good boot, then root rewrites the report (8 GPUs everywhere, another
/// serial) and quotes the new digest with the same AK over the same PCRs: the quote shows
/// the seal the init extended after its own, so it cannot replay to the log before the
/// seal, and the seal names the init's quote; cutting the seal off the log does not help.
#[test]
fn attack_4_a_rewritten_report_requoted_after_the_boot_is_refused() {
    have_tools(&[]);
    let f = fixture();
    let (mut node, report, log) = booted("attack-4", &f, &before_seal(&f.log));
    verify(&node, &f, &report, &log.to_bytes()).unwrap();
    let mut rewritten: serde_json::Value = serde_json::from_slice(&report).unwrap();
    rewritten["node"]["serial"] = "SERIAL-OF-A-GOOD-NODE".into();
    rewritten["warnings"] = serde_json::json!([]);
    let (requoted, attest) = node.quote(&rewritten, INIT_SELECTION);
    // The log as the boot left it (sealed with the init's quote).
    match verify(&node, &f, &requoted, &log.to_bytes()) {
        Err(VerifyError::Seal(SealError::OtherQuote { log, .. })) => {
            assert!(log.starts_with("quote sha256:"), "{log}")
        }
        r => panic!("{r:?}"),
    }
    // The log with the attacker's own seal in place of the init's: the quote came after
    // the init's seal, so the records before the attacker's do not replay to it.
    let mut forged = log.events().to_vec();
    forged.pop();
    let mut l = log_of(&f.log, &forged);
    let m = Measurement::Seal(Seal::Quote(validator::trust::keys::sha256(&attest)));
    l.measure(13, m.text().as_bytes()).unwrap();
    assert!(matches!(
        verify(&node, &f, &requoted, &l.to_bytes()),
        Err(VerifyError::PcrDigest { .. })
    ));
    // The log cut between the quote and the seal.
    let cut = log_of(&f.log, &forged);
    match verify(&node, &f, &requoted, &cut.to_bytes()) {
        Err(VerifyError::Seal(SealError::NotASeal { .. })) => {}
        r => panic!("{r:?}"),
    }
    // The original report, its log cut before the seal: refused the same way.
    assert!(matches!(
        verify(&node, &f, &report, &cut.to_bytes()),
        Err(VerifyError::Seal(_))
    ));
}

/// The records a boot makes for a reference entry's events (digests in the log's banks).
fn records_of(
    log: &EventLog,
    events: &[validator::attest::reference::ExpectedEvent],
) -> Vec<Event> {
    events
        .iter()
        .filter(|x| !x.optional)
        .map(|x| Event {
            pcr: x.pcr,
            event_type: EV_IPL,
            digests: log
                .spec_id()
                .banks()
                .iter()
                .map(|b| {
                    (
                        b.alg_id(),
                        validator::util::unhex(&x.digests[b.name()]).unwrap(),
                    )
                })
                .collect(),
            data: x.data.clone().into_bytes(),
        })
        .collect()
}

/// A fallback by kexec: slot A's boot fails its image and loads slot B's kernel and
/// initramfs, measuring their digests before its seal; slot B's boot (the kexec entry)
/// passes. Verified when what A loaded is what the image has for slot B; refused when
/// A's kexec event names another initramfs (one root put on the ESP) or is missing.
#[test]
fn a_kexec_boot_is_judged_by_what_the_boot_before_it_loaded() {
    have_tools(&[]);
    let f = fixture();
    let good = before_seal(&f.log);
    // The image installed in slot B too: its boot-loader entry reads the same files.
    let mut reference = f.reference.clone();
    let a_files = reference.slots[0].files.clone();
    let b = reference
        .slots
        .iter()
        .position(|s| s.slot.as_str() == "B" && s.entry.as_str() == "boot-loader")
        .unwrap();
    reference.slots[b].files = a_files.clone();
    let sha = |path: &str| {
        a_files
            .iter()
            .find(|x| x.path.ends_with(path))
            .unwrap()
            .digests["sha256"]
            .clone()
    };
    let b_kexec = reference
        .slots
        .iter()
        .find(|s| s.slot.as_str() == "B" && s.entry.as_str() == "kexec")
        .unwrap()
        .clone();
    let chain = |initrd: Option<String>| {
        // Slot A: its events up to the root hash, then the fallback.
        let mut records: Vec<Event> = good
            .iter()
            .take_while(|e| !e.data.starts_with(b"decision:"))
            .cloned()
            .collect();
        records.push(ours(&f.log, 13, "decision:fallback"));
        if let Some(i) = initrd {
            records.push(ours(
                &f.log,
                13,
                &format!("kexec:B kernel sha256:{} initrd sha256:{i}", sha("vmlinuz")),
            ));
        }
        records.push(ours(
            &f.log,
            13,
            &format!("sealed:sha256:{}", "00".repeat(32)),
        ));
        // Slot B, started by that kexec.
        records.extend(records_of(&f.log, &b_kexec.events));
        records.push(ours(&f.log, 13, "decision:pass"));
        records.push(ours(&f.log, 11, "leave-initrd"));
        records
    };
    let run = |name: &str, initrd: Option<String>| {
        let (node, report, log) = booted(name, &f, &chain(initrd));
        verify_report(
            &node.ak,
            std::slice::from_ref(&reference),
            &report,
            &log.to_bytes(),
            &Policy::default(),
        )
    };
    let v = run("kexec-good", Some(sha("initrd.img"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.boots.len(), 2);
    assert_eq!(
        (v.boots[0].decision.as_str(), v.boots[1].slot.as_str()),
        ("fallback", "B")
    );
    match run("kexec-other-initrd", Some("ab".repeat(32))) {
        Err(VerifyError::Kexec {
            boot: 2,
            why: KexecError::UnknownFile { what, .. },
        }) => assert_eq!(what, "initramfs"),
        r => panic!("{r:?}"),
    }
    match run("kexec-unmeasured", None) {
        Err(VerifyError::Kexec {
            boot: 2,
            why: KexecError::NotMeasured,
        }) => {}
        r => panic!("{r:?}"),
    }
}

/// Variants an attacker tries next: a quote of the same boot's PCRs with another clock
/// (another quote of the same values: its seal is not the log's); a second Spec ID
/// header; a report giving a key twice; events moved across a PCR boundary.
#[test]
fn variants_are_refused() {
    have_tools(&[]);
    let f = fixture();
    let records = before_seal(&f.log);
    let (mut node, report, log) = booted("variants", &f, &records);
    // A second TPM extended to the same pre-seal values and quoted: the same PCRs,
    // another clock; the log's seal names the first quote.
    let mut twin = Node::new("variants-twin");
    twin.extend(&records);
    let (other, _) = twin.quote(&f.report, INIT_SELECTION);
    assert!(matches!(
        verify(&twin, &f, &other, &log.to_bytes()),
        Err(VerifyError::Seal(_))
    ));
    // Another log appended whole: its header does not read as a record.
    let mut two = log.to_bytes();
    two.extend_from_slice(&log_of(&f.log, &[]).to_bytes());
    assert!(matches!(
        verify(&node, &f, &report, &two),
        Err(VerifyError::Log(_))
    ));
    // A second Spec ID event written as a record (all its digests, not extended).
    let header = log_of(&f.log, &[]).to_bytes();
    let mut second = log.events()[0].clone();
    second.pcr = 0;
    second.event_type = EV_NO_ACTION;
    second.digests = second
        .digests
        .iter()
        .map(|(id, d)| (*id, vec![0; d.len()]))
        .collect();
    second.data = header[32..].to_vec();
    let mut all = log.events().to_vec();
    all.insert(all.len() - 1, second);
    match verify(&node, &f, &report, &raw_log(&f.log, &all)) {
        Err(VerifyError::Log(why)) => assert!(why.contains("second Spec ID"), "{why}"),
        r => panic!("{r:?}"),
    }
    // The report with `decision` given twice, "stop" first.
    let text = String::from_utf8(report.clone()).unwrap();
    let twice = text.replacen("{", "{\"decision\":\"stop\",", 1);
    match verify(&node, &f, twice.as_bytes(), &log.to_bytes()) {
        Err(VerifyError::Report(why)) => assert!(why.contains("given twice"), "{why}"),
        r => panic!("{r:?}"),
    }
    // enter-initrd (PCR 11) moved after the BOM (PCR 13): the same replay, events of
    // ours before any boot.
    let mut moved = log.events().to_vec();
    let e = position(&moved, "enter-initrd");
    let b = position(&moved, "bom:");
    moved.swap(e, b);
    assert!(matches!(
        verify(&node, &f, &report, &log_of(&f.log, &moved).to_bytes()),
        Err(VerifyError::NotOurs { .. })
    ));
    // leave-initrd moved before the decision: refused at the decision.
    let mut moved = log.events().to_vec();
    let d = position(&moved, "decision:");
    let l = position(&moved, "leave-initrd");
    let leave = moved.remove(l);
    moved.insert(d, leave);
    assert!(matches!(
        verify(&node, &f, &report, &log_of(&f.log, &moved).to_bytes()),
        Err(VerifyError::Event { .. })
    ));
    // An event of ours added by root after the seal, extended: the seal is no longer last.
    let mut late = log_of(&f.log, log.events());
    let d = late.measure(13, b"decision:pass").unwrap();
    node.tpm.pcr_extend(13, &d).unwrap();
    assert!(matches!(
        verify(&node, &f, &report, &late.to_bytes()),
        Err(VerifyError::Seal(_))
    ));
    // A log whose header declares only an algorithm the verifier does not compute: its
    // digests would replay to nothing and match anything. A quote of PCR 23 alone, the
    // good boot's texts, the seal of that quote: refused for the header.
    let mut bare = EventLog::new(&[HashAlg::Sha256]).to_bytes();
    let id = [0x0b, 0x00, 0x20, 0x00];
    let at = bare.windows(4).position(|w| w == id).unwrap();
    bare[at..at + 2].copy_from_slice(&0x7777u16.to_le_bytes());
    let (forged_report, attest) = node.quote(&f.report, "sha256:23");
    let mut unknown: Vec<Event> = records
        .iter()
        .map(|e| Event {
            digests: vec![(0x7777, vec![0; 32])],
            ..e.clone()
        })
        .collect();
    let seal = Measurement::Seal(Seal::Quote(validator::trust::keys::sha256(&attest)));
    unknown.push(Event {
        pcr: 13,
        event_type: EV_IPL,
        digests: vec![(0x7777, vec![0; 32])],
        data: seal.text().into_bytes(),
    });
    let mut bytes = bare.clone();
    bytes.extend_from_slice(&raw_log(&f.log, &unknown)[log_of(&f.log, &[]).to_bytes().len()..]);
    match verify(&node, &f, &forged_report, &bytes) {
        Err(VerifyError::Log(why)) => assert!(why.contains("0x7777"), "{why}"),
        r => panic!("{r:?}"),
    }
    // And the honest log still verifies beside all of this.
    verify(&node, &f, &report, &log.to_bytes()).unwrap();
}

/// A small Unified Kernel Image (Debian's systemd-stub with tiny sections, unsigned: the
/// verifier reads only what the stub measures of it), and its records as systemd-stub 252
/// logs them in the fixture's banks.
fn uki(dir: &Path, initrd: &[u8]) -> (Vec<u8>, Vec<Event>) {
    let image = mkinitramfs::uki::build(
        dir,
        &mkinitramfs::uki::UkiInputs {
            stub: Path::new(mkinitramfs::uki::DEBIAN_STUB),
            linux: b"a kernel",
            initrd,
            cmdline: "validator.slot=A ro",
            osrel: "ID=test\n",
            epoch: 0,
        },
        &mkinitramfs::uki::Signing::Unsigned,
    )
    .unwrap();
    let banks = fixture().log.spec_id().banks();
    let records = validator::formats::uki::events(&image)
        .unwrap()
        .into_iter()
        .map(|e| Event {
            pcr: 11,
            event_type: EV_IPL,
            digests: banks
                .iter()
                .map(|b| (b.alg_id(), b.digest(&e.digested)))
                .collect(),
            data: validator::formats::uki::event_data(e.section),
        })
        .collect();
    (image, records)
}

/// The fixture's records with `stub` before the first (as the firmware's log holds
/// systemd-stub's events before the kernel's).
fn with_stub(f: &Fixture, stub: &[Event]) -> Vec<Event> {
    let mut r = before_seal(&f.log);
    let at = r.iter().position(|e| e.pcr == 11 || e.pcr == 13).unwrap();
    for (k, e) in stub.iter().enumerate() {
        r.insert(at + k, e.clone());
    }
    r
}

/// A boot through a Unified Kernel Image (issue 31): systemd-stub's PCR 11 events precede
/// ours. Judged against a reference whose slot A entry predicts them (`stub`), the honest
/// boot verifies and `tpm2_eventlog` agrees; refused, each naming why: the stub's events
/// of another image (one byte of its initramfs), one pair left out, a stub event extended
/// after the initramfs started (root imitating the stub), and the same honest boot judged
/// against the fixture's own reference, which predicts no image.
#[test]
fn a_boot_through_a_unified_kernel_image_is_judged_by_its_stub_events() {
    if !have_tools(&["tpm2_eventlog"]) {
        return;
    }
    let f = fixture();
    let dir = common::tmpdir("attest-attacks-uki");
    let (image, stub) = uki(&dir, b"the initramfs");
    let mut with_image = f.reference.clone();
    for s in with_image.slots.iter_mut().filter(|s| {
        s.slot == validator::config::bom::SlotName::A
            && s.entry == validator::attest::reference::Entry::BootLoader
    }) {
        s.stub = Some(
            validator::attest::predict::stub_reference(&image, validator::config::bom::SlotName::A)
                .unwrap(),
        );
    }
    let g = Fixture {
        reference: with_image,
        report: f.report.clone(),
        log: f.log.clone(),
    };
    let (mut node, report, log) = booted("uki-honest", &g, &with_stub(&f, &stub));
    let bytes = log.to_bytes();
    verify(&node, &g, &report, &bytes).unwrap_or_else(|e| panic!("{e}"));
    tpm2_eventlog_agrees(&mut node, &bytes);
    // The fixture's reference (a plain kernel and initramfs) admits no stub event.
    let e = verify(&node, &f, &report, &bytes).unwrap_err();
    assert!(
        matches!(&e, VerifyError::Stub { why, .. } if why.contains("predicts no Unified Kernel Image")),
        "{e}"
    );
    // Another image's events: its initramfs one byte off.
    let (_, other) = uki(&dir, b"the initramfz");
    let (node, report, log) = booted("uki-other", &g, &with_stub(&f, &other));
    let e = verify(&node, &g, &report, &log.to_bytes()).unwrap_err();
    assert!(
        matches!(&e, VerifyError::Stub { why, .. } if why.contains("not the image's content of .initrd")),
        "{e}"
    );
    // The .initrd pair left out.
    let short = &stub[..stub.len() - 2];
    let (node, report, log) = booted("uki-short", &g, &with_stub(&f, short));
    let e = verify(&node, &g, &report, &log.to_bytes()).unwrap_err();
    assert!(
        matches!(&e, VerifyError::Stub { why, .. } if why.contains("is missing")),
        "{e}"
    );
    // Root imitating the stub after the handover: a stub event after ours.
    let mut late = with_stub(&f, &stub);
    late.push(stub[0].clone());
    let (node, report, log) = booted("uki-late", &g, &late);
    let e = verify(&node, &g, &report, &log.to_bytes()).unwrap_err();
    assert!(
        matches!(&e, VerifyError::NotOurs { why, .. } if why.contains("after the initramfs started")),
        "{e}"
    );
}

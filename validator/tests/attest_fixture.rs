//! The verifier on the evidence of a real boot (`tests/fixtures/attest/`: the `sb-node`
//! scenario's report and event log, the AK enrolled from its TPM, the reference predicted
//! from its image by `validator attest predict`; the QEMU tests make and check the same
//! evidence afresh on every run): it verifies, and every corruption is refused with an
//! error, never a panic and never a pass.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::Path;

use base64::Engine as _;
use validator::attest::reference::Reference;
use validator::attest::verify::{verify_report, Policy, VerifyError};
use validator::formats::tpm::attest::Public;

struct Fixture {
    ak: Public,
    reference: Reference,
    report: Vec<u8>,
    log: Vec<u8>,
}

fn fixture() -> Fixture {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/attest");
    let read = |n: &str| std::fs::read(d.join(n)).unwrap();
    Fixture {
        ak: Public::parse_2b(&read("ak.pub")).unwrap(),
        reference: Reference::parse(&String::from_utf8(read("reference.json")).unwrap()).unwrap(),
        report: read("report.json"),
        log: read("tpm-eventlog.bin"),
    }
}

fn verify(f: &Fixture, report: &[u8], log: &[u8]) -> Result<(), VerifyError> {
    verify_report(
        &f.ak,
        std::slice::from_ref(&f.reference),
        report,
        log,
        &Policy::default(),
    )
    .map(|_| ())
}

#[test]
fn the_real_boot_verifies() {
    let f = fixture();
    let v = verify_report(
        &f.ak,
        std::slice::from_ref(&f.reference),
        &f.report,
        &f.log,
        &Policy::default(),
    )
    .unwrap();
    assert_eq!(v.boots.len(), 1);
    assert_eq!(v.boots[0].decision.as_str(), "pass");
    assert_eq!(v.files_checked, 4);
}

/// Each byte of the quote and of its signature changed in turn: refused every time.
#[test]
fn a_changed_byte_of_the_quote_or_signature_is_refused() {
    let f = fixture();
    let text = String::from_utf8(f.report.clone()).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    for field in ["attest", "signature"] {
        let orig = v["attestation"]["quote"][field]
            .as_str()
            .unwrap()
            .to_string();
        let bytes = b64.decode(&orig).unwrap();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            let changed = text.replace(&orig, &b64.encode(&b));
            assert!(
                verify(&f, changed.as_bytes(), &f.log).is_err(),
                "{field} byte {i} changed and still verified"
            );
        }
    }
}

/// The log cut short or with one byte changed: refused (a log that no longer parses, or
/// one that replays to other PCRs, or events that differ), never verified.
#[test]
fn a_cut_or_changed_log_is_refused() {
    let f = fixture();
    for cut in (0..f.log.len()).step_by(97) {
        assert!(
            verify(&f, &f.report, &f.log[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    // The PCRs the quote covers: a change elsewhere is outside what it proves.
    let v: serde_json::Value = serde_json::from_slice(&f.report).unwrap();
    let sel = v["attestation"]["quote"]["pcrs"].as_str().unwrap();
    let quoted: Vec<u32> = validator::formats::tpm::attest::parse_selection(sel)
        .unwrap()
        .into_iter()
        .flat_map(|(_, p)| p)
        .collect();
    for i in (0..f.log.len()).step_by(13) {
        let mut l = f.log.clone();
        l[i] ^= 0x20;
        if let Ok(()) = verify(&f, &f.report, &l) {
            // A byte neither the replay nor our checks read may change (the description
            // of a firmware or boot-loader event, vendor data); no digest may, and none
            // of our events' texts.
            let ours = validator::formats::tpm::eventlog::EventLog::parse(&l).unwrap();
            let orig = validator::formats::tpm::eventlog::EventLog::parse(&f.log).unwrap();
            let pick = |log: &validator::formats::tpm::eventlog::EventLog| {
                log.events()
                    .iter()
                    .filter(|e| quoted.contains(&e.pcr))
                    .map(|e| {
                        let ours = [11, 13].contains(&e.pcr);
                        (
                            e.pcr,
                            e.digests.clone(),
                            if ours { e.data.clone() } else { vec![] },
                        )
                    })
                    .collect::<Vec<_>>()
            };
            assert!(
                pick(&ours) == pick(&orig),
                "byte {i} changed a digest or one of our events and still verified"
            );
        }
    }
}

/// Empty, truncated and non-JSON reports, and a reference whose event digest differs.
#[test]
fn broken_reports_and_references_are_named() {
    let f = fixture();
    for bad in [&b""[..], b"{", b"null", &f.report[..f.report.len() / 2]] {
        let e = verify(&f, bad, &f.log).unwrap_err();
        assert!(matches!(e, VerifyError::Report(_)), "{e}");
    }
    let mut r = f.reference.clone();
    let x = &mut r.slots[0].events[5];
    let d = x.digests.get_mut("sha256").unwrap();
    *d = d.replace(&d[..2], "00");
    let want = x.data.clone();
    match verify_report(&f.ak, &[r], &f.report, &f.log, &Policy::default()) {
        Err(VerifyError::Event {
            expected, index, ..
        }) => {
            assert_eq!(expected, want);
            assert_eq!(index, 6);
        }
        other => panic!("{other:?}"),
    }
}

//! Unit tests of `eventlog` (moved out of `eventlog.rs` to keep it under 700 lines).

use super::*;
use crate::formats::tpm::to_hex;

const BANKS: [HashAlg; 2] = [HashAlg::Sha1, HashAlg::Sha256];

fn sample() -> EventLog {
    let mut log = EventLog::new(&BANKS);
    log.measure(9, b"boot-gate: kernel").unwrap();
    log.measure(11, b"boot-gate: modules gated").unwrap();
    log.measure(9, b"boot-gate: initramfs").unwrap();
    log
}

#[test]
fn header_bytes() {
    let b = EventLog::new(&BANKS).to_bytes();
    let mut want = vec![0, 0, 0, 0, 3, 0, 0, 0];
    want.extend_from_slice(&[0; 20]);
    want.extend_from_slice(&[37, 0, 0, 0]); // 16 + 4 + 4 + 4 + 2*4 + 1
    want.extend_from_slice(b"Spec ID Event03\0");
    want.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 2, 2, 0, 0, 0]);
    want.extend_from_slice(&[0x04, 0, 20, 0, 0x0B, 0, 32, 0, 0]);
    assert_eq!(b, want);
}

#[test]
fn round_trip_and_replay() {
    let log = sample();
    let bytes = log.to_bytes();
    let back = EventLog::parse(&bytes).unwrap();
    assert_eq!(back, log);
    assert_eq!(back.to_bytes(), bytes);
    assert_eq!(back.spec_id().banks(), BANKS.to_vec());
    assert_eq!(back.events().len(), 3);
    assert_eq!(back.events()[1].event_type, EV_IPL);

    let values = back.replay();
    for h in BANKS {
        let z = vec![0u8; h.size()];
        let p9 = h.extend(
            &h.extend(&z, &h.digest(b"boot-gate: kernel")),
            &h.digest(b"boot-gate: initramfs"),
        );
        let p11 = h.extend(&z, &h.digest(b"boot-gate: modules gated"));
        assert_eq!(values[&h][&9], p9);
        assert_eq!(values[&h][&11], p11);
        assert_eq!(values[&h].len(), 2);
    }
    assert_eq!(values.len(), 2);
}

#[test]
fn known_replay_value() {
    // One extend of sha256("abc") into a zero PCR, computed independently:
    // sha256(32 zero bytes || ba7816bf...).
    let mut log = EventLog::new(&[HashAlg::Sha256]);
    log.measure(11, b"abc").unwrap();
    let v = log.replay();
    let mut cat = vec![0u8; 32];
    cat.extend_from_slice(&HashAlg::Sha256.digest(b"abc"));
    assert_eq!(
        to_hex(&v[&HashAlg::Sha256][&11]),
        to_hex(&HashAlg::Sha256.digest(&cat))
    );
}

#[test]
fn truncated_at_every_offset_is_an_error() {
    let bytes = sample().to_bytes();
    // Record boundaries parse as shorter logs; every other cut is an error.
    let mut boundaries = vec![];
    let mut off = SHA1_EVENT_HEADER + 37;
    boundaries.push(off);
    for e in sample().events() {
        off += 12 + e.digests.iter().map(|(_, d)| 2 + d.len()).sum::<usize>() + 4 + e.data.len();
        boundaries.push(off);
    }
    assert_eq!(off, bytes.len());
    for n in 0..bytes.len() {
        let r = EventLog::parse(&bytes[..n]);
        if boundaries.contains(&n) {
            assert!(r.is_ok(), "cut at {n}");
        } else {
            let e = r.unwrap_err();
            assert!(e.to_string().contains("byte"), "{e}");
        }
    }
}

#[test]
fn malformed_logs() {
    let good = sample().to_bytes();
    let with = |at: usize, v: &[u8]| {
        let mut b = good.clone();
        b[at..at + v.len()].copy_from_slice(v);
        EventLog::parse(&b).unwrap_err()
    };
    // Not a Spec ID event first (another type, another signature): read as the legacy
    // SHA-1 format, where these bytes are records that do not fit.
    let e = with(4, &[4, 0, 0, 0]);
    assert!(e.to_string().contains("truncated at byte"), "{e}");
    // Spec ID digest not zero.
    assert!(with(8, &[1]).to_string().contains("digest is not zero"));
    // Signature.
    assert!(with(32, b"Spec ID Event02")
        .to_string()
        .contains("truncated at byte"));
    // Wrong digest size for sha256 in the Spec ID event.
    let e = with(66, &[31]);
    assert_eq!(
        e.to_string(),
        "event log: byte 64: sha256 digest size 31, expected 32"
    );
    // No algorithms.
    let e = with(56, &[0]);
    assert!(e.to_string().contains("numberOfAlgorithms is 0"), "{e}");
    // Huge algorithm count: truncated, no allocation.
    let e = with(56, &[0xFF, 0xFF, 0xFF, 0x7F]);
    assert!(
        matches!(
            e,
            EventLogError::Truncated {
                what: "digestSizes",
                ..
            }
        ),
        "{e}"
    );
    // eventDataSize disagreeing with the contents.
    let e = with(28, &[38]);
    assert!(
        e.to_string()
            .contains("eventDataSize 38, but its contents take 37"),
        "{e}"
    );
    // First record: digest count beyond the algorithms, or short of them (a record
    // without a digest for a bank of the header).
    let rec = SHA1_EVENT_HEADER + 37;
    for n in [3u8, 1, 0] {
        let e = with(rec + 8, &[n]);
        assert_eq!(
            e.to_string(),
            format!(
                "event log: byte {}: {n} digests, but the Spec ID event declares 2 algorithms and every record carries one of each",
                rec + 8
            )
        );
    }
    // Unknown algorithm in a record.
    let e = with(rec + 12, &[0x12, 0]);
    assert!(
        e.to_string().contains("0x0012 is not in the Spec ID event"),
        "{e}"
    );
    // Same algorithm twice.
    let e = with(rec + 12 + 22, &[0x04, 0]);
    assert!(
        e.to_string().contains("two digests of algorithm 0x0004"),
        "{e}"
    );
    // Event size beyond the end.
    let e = with(rec + 12 + 22 + 34, &[0xFF, 0xFF, 0xFF, 0xFF]);
    assert!(
        matches!(
            e,
            EventLogError::Truncated {
                what: "event data",
                ..
            }
        ),
        "{e}"
    );
    assert!(EventLog::parse(&[]).is_err());
}

#[test]
fn fuzzed_bytes_never_panic() {
    // Flip every byte of a good log in turn: parse must return, never panic, and
    // whatever parses must serialise back to the same bytes.
    let good = sample().to_bytes();
    for i in 0..good.len() {
        for x in [0x01u8, 0x80, 0xFF] {
            let mut b = good.clone();
            b[i] ^= x;
            if let Ok(log) = EventLog::parse(&b) {
                assert_eq!(log.to_bytes(), b, "flip {x:#x} at {i}");
                let _ = log.replay();
            }
        }
    }
}

#[test]
fn append_checks_digests_against_the_spec_id_event() {
    let mut log = EventLog::new(&BANKS);
    let e = log
        .append(Event {
            pcr: 9,
            event_type: EV_EVENT_TAG,
            digests: vec![(0x000B, vec![0; 32]), (0x0004, vec![0; 20])],
            data: vec![],
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "event log: record does not fit the log: digests [0x000b/32, 0x0004/20] (algorithm/size), the log needs [0x0004/20, 0x000b/32]"
    );
    log.append(Event {
        pcr: 9,
        event_type: EV_EVENT_TAG,
        digests: vec![(0x0004, vec![0; 20]), (0x000B, vec![0; 32])],
        data: vec![1, 2, 3],
    })
    .unwrap();
    // A log whose Spec ID event names an algorithm we cannot compute.
    let mut bytes = EventLog::new(&BANKS).to_bytes();
    bytes[60] = 0x12; // sha1 -> sm3_256 (same size field left as 20)
    let mut odd = EventLog::parse(&bytes).unwrap();
    assert_eq!(odd.spec_id().banks(), vec![HashAlg::Sha256]);
    let e = odd.measure(9, b"x").unwrap_err();
    assert!(e.to_string().contains("algorithm 0x0012"), "{e}");
}

#[test]
fn replay_startup_locality_and_no_action() {
    let mut log = EventLog::new(&[HashAlg::Sha256]);
    let mut loc = STARTUP_LOCALITY_SIGNATURE.to_vec();
    loc.push(3);
    log.append(Event {
        pcr: 0,
        event_type: EV_NO_ACTION,
        digests: vec![(0x000B, vec![0; 32])],
        data: loc,
    })
    .unwrap();
    // Another EV_NO_ACTION, on PCR 5: touches PCR 5 (zeros), extends nothing.
    log.append(Event {
        pcr: 5,
        event_type: EV_NO_ACTION,
        digests: vec![(0x000B, vec![7; 32])],
        data: b"anything".to_vec(),
    })
    .unwrap();
    let v = log.replay();
    let mut want0 = vec![0u8; 32];
    want0[31] = 3;
    assert_eq!(v[&HashAlg::Sha256][&0], want0);
    assert_eq!(v[&HashAlg::Sha256][&5], vec![0u8; 32]);
    log.measure(0, b"crtm").unwrap();
    let v = log.replay();
    assert_eq!(
        v[&HashAlg::Sha256][&0],
        HashAlg::Sha256.extend(&want0, &HashAlg::Sha256.digest(b"crtm"))
    );
}

/// A StartupLocality record after PCR 0's first extend says nothing about PCR 0 any
/// more: it must not change the extended value.
#[test]
fn late_startup_locality_does_not_change_pcr0() {
    let mut log = EventLog::new(&BANKS);
    log.measure(0, b"crtm").unwrap();
    let before = log.replay();
    let mut loc = STARTUP_LOCALITY_SIGNATURE.to_vec();
    loc.push(3);
    log.append(Event {
        pcr: 0,
        event_type: EV_NO_ACTION,
        digests: vec![(0x0004, vec![0; 20]), (0x000B, vec![0; 32])],
        data: loc,
    })
    .unwrap();
    assert_eq!(log.replay(), before);
    for h in BANKS {
        assert_eq!(
            before[&h][&0],
            h.extend(&vec![0; h.size()], &h.digest(b"crtm"))
        );
    }
}

/// PCR indexes 24 and up do not exist: refused when parsed and when appended.
#[test]
fn pcr_indexes_beyond_23_are_refused() {
    let mut log = EventLog::new(&BANKS);
    log.measure(23, b"last").unwrap();
    let good = log.to_bytes();
    assert!(EventLog::parse(&good).is_ok());
    let at = good.len() - (4 + 4 + 4 + 2 + 20 + 2 + 32 + 4 + 4);
    for pcr in [24u32, 0xffff_ffff] {
        let mut bad = good.clone();
        bad[at..at + 4].copy_from_slice(&pcr.to_le_bytes());
        let e = EventLog::parse(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("event log: byte {at}: PCR index {pcr} does not exist (0-23)")
        );
        assert!(log.measure(pcr, b"x").is_err());
    }
}

#[test]
fn replay_hcrtm_starts_pcr0_at_locality_4() {
    let mut log = EventLog::new(&[HashAlg::Sha1]);
    let d = HashAlg::Sha1.digest(b"HCRTM");
    log.append(Event {
        pcr: 0,
        event_type: EV_EFI_HCRTM_EVENT,
        digests: vec![(0x0004, d.clone())],
        data: b"HCRTM".to_vec(),
    })
    .unwrap();
    let mut start = vec![0u8; 20];
    start[19] = 4;
    assert_eq!(
        log.replay()[&HashAlg::Sha1][&0],
        HashAlg::Sha1.extend(&start, &d)
    );
}

/// The legacy SHA-1 format: a log of `TCG_PCR_EVENT` records reads, replays in the SHA-1
/// bank as the crypto-agile log of the same events does, writes back the same bytes and
/// is continued in its own format.
#[test]
fn legacy_sha1_logs_read_replay_and_continue() {
    let agile = sample();
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
    let mut log = EventLog::parse(&legacy).unwrap();
    assert!(log.is_legacy());
    assert_eq!(log.events().len(), agile.events().len());
    assert_eq!(log.to_bytes(), legacy);
    assert_eq!(log.replay()[&HashAlg::Sha1], agile.replay()[&HashAlg::Sha1]);
    assert!(!log.replay().contains_key(&HashAlg::Sha256));
    // Continued: one SHA-1 digest per record, in the legacy layout.
    let d = log.measure(13, b"decision:pass").unwrap();
    assert_eq!(
        d,
        vec![(HashAlg::Sha1, HashAlg::Sha1.digest(b"decision:pass"))]
    );
    let again = EventLog::parse(&log.to_bytes()).unwrap();
    assert!(again.is_legacy());
    assert_eq!(again, log);
    // Cut anywhere inside a record: an error naming the byte.
    for n in 1..legacy.len() {
        if let Err(e) = EventLog::parse(&legacy[..n]) {
            assert!(e.to_string().contains("byte"), "{e}");
        }
    }
    assert!(EventLog::parse(b"").is_err());
}

//! Unit tests of `client` (moved out of `client.rs` to keep it under 700 lines).

use super::*;
use std::collections::VecDeque;

/// A transport answering from a script and recording what it was sent.
#[derive(Debug, Default)]
struct Script {
    answers: VecDeque<Result<Vec<u8>, TpmError>>,
    sent: Vec<Vec<u8>>,
}

impl Script {
    fn new(answers: Vec<Vec<u8>>) -> Script {
        Script {
            answers: answers.into_iter().map(Ok).collect(),
            sent: Vec::new(),
        }
    }
}

impl Transport for Script {
    fn transact(&mut self, cmd: &[u8], _: Duration) -> Result<Vec<u8>, TpmError> {
        self.sent.push(cmd.to_vec());
        self.answers.pop_front().unwrap_or_else(|| {
            Err(TpmError::Channel {
                endpoint: "script".into(),
                why: "no more answers".into(),
            })
        })
    }
}

fn fast(script: Script) -> Tpm<Script> {
    let mut t = Tpm::new(script);
    t.retry.first = Duration::from_millis(1);
    t.retry.max = Duration::from_millis(2);
    t
}

/// A response: header with the right size, then `body`.
fn resp(tag: u16, rc: u32, body: &[u8]) -> Vec<u8> {
    let mut v = tag.to_be_bytes().to_vec();
    v.extend_from_slice(&u32::try_from(10 + body.len()).unwrap().to_be_bytes());
    v.extend_from_slice(&rc.to_be_bytes());
    v.extend_from_slice(body);
    v
}

fn rc(code: u32) -> Vec<u8> {
    resp(ST_NO_SESSIONS, code, &[])
}

/// GetCapability(TPM_CAP_PCRS) response: sha1 and sha256 active, sha384 allocated
/// but empty, sm3_256 active (unsupported, ignored).
const CAP_PCRS: &[u8] = &[
    0x80, 0x01, 0x00, 0x00, 0x00, 0x2B, 0x00, 0x00, 0x00, 0x00, // header, 43 bytes
    0x00, // moreData
    0x00, 0x00, 0x00, 0x05, // TPM_CAP_PCRS
    0x00, 0x00, 0x00, 0x04, // count
    0x00, 0x04, 0x03, 0xFF, 0xFF, 0xFF, // sha1
    0x00, 0x0B, 0x03, 0xFF, 0xFF, 0xFF, // sha256
    0x00, 0x0C, 0x03, 0x00, 0x00, 0x00, // sha384, no PCR
    0x00, 0x12, 0x03, 0xFF, 0xFF, 0xFF, // sm3_256
];

fn pcr_read_resp(counter: u32, pcr: u32, vals: &[(HashAlg, Vec<u8>)]) -> Vec<u8> {
    let mut b = counter.to_be_bytes().to_vec();
    b.extend_from_slice(&u32::try_from(vals.len()).unwrap().to_be_bytes());
    for (a, _) in vals {
        let mut sel = [0u8; 3];
        sel[(pcr / 8) as usize] = 1 << (pcr % 8);
        b.extend_from_slice(&a.alg_id().to_be_bytes());
        b.push(3);
        b.extend_from_slice(&sel);
    }
    b.extend_from_slice(&u32::try_from(vals.len()).unwrap().to_be_bytes());
    for (_, v) in vals {
        b.extend_from_slice(&u16::try_from(v.len()).unwrap().to_be_bytes());
        b.extend_from_slice(v);
    }
    resp(ST_NO_SESSIONS, 0, &b)
}

const EXTEND_OK: &[u8] = &[
    0x80, 0x02, 0x00, 0x00, 0x00, 0x13, 0x00, 0x00, 0x00, 0x00, // header, 19 bytes
    0x00, 0x00, 0x00, 0x00, // parameterSize
    0x00, 0x00, 0x01, 0x00, 0x00, // nonce, attributes (continueSession), hmac
];

#[test]
fn get_pcr_banks_from_recorded_response() {
    let mut t = fast(Script::new(vec![CAP_PCRS.to_vec()]));
    assert_eq!(
        t.get_pcr_banks().unwrap(),
        vec![HashAlg::Sha1, HashAlg::Sha256]
    );
    let s = t.stats();
    assert_eq!(s.commands, 1);
    let sent = &t.into_transport().sent;
    assert_eq!(
        sent[0],
        [
            0x80, 0x01, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x01, 0x7A, // header
            0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
        ]
    );
}

#[test]
fn get_pcr_banks_rejects_trailing_bytes_and_wrong_capability() {
    let mut long = CAP_PCRS.to_vec();
    long.push(0);
    long[5] += 1;
    let e = fast(Script::new(vec![long])).get_pcr_banks().unwrap_err();
    assert!(
        e.to_string().contains("1 unexpected bytes at byte 43"),
        "{e}"
    );
    let mut wrong = CAP_PCRS.to_vec();
    wrong[14] = 6;
    let e = fast(Script::new(vec![wrong])).get_pcr_banks().unwrap_err();
    assert!(e.to_string().contains("expected TPM_CAP_PCRS"), "{e}");
    let mut lying = CAP_PCRS.to_vec();
    lying[18] = 0xFF;
    let e = fast(Script::new(vec![lying])).get_pcr_banks().unwrap_err();
    assert!(e.to_string().contains("exceeds 16"), "{e}");
}

#[test]
fn pcr_read_recorded_bytes() {
    let v = HashAlg::Sha256.digest(b"pcr9");
    let r = pcr_read_resp(0x2A, 9, &[(HashAlg::Sha256, v.clone())]);
    assert_eq!(r.len(), 62);
    let mut t = fast(Script::new(vec![r]));
    assert_eq!(
        t.pcr_read(9, &[HashAlg::Sha256]).unwrap(),
        vec![(HashAlg::Sha256, v)]
    );
    assert_eq!(
        t.into_transport().sent[0],
        [
            0x80, 0x01, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x01, 0x7E, // header
            0x00, 0x00, 0x00, 0x01, 0x00, 0x0B, 0x03, 0x00, 0x02, 0x00,
        ]
    );
}

#[test]
fn pcr_read_loops_until_every_bank_is_read() {
    let v1 = vec![1u8; 20];
    let v384 = vec![3u8; 48];
    let v256 = vec![2u8; 32];
    let mut t = fast(Script::new(vec![
        // The TPM answers only sha1 and sha384 first, then sha256.
        pcr_read_resp(
            7,
            11,
            &[(HashAlg::Sha1, v1.clone()), (HashAlg::Sha384, v384.clone())],
        ),
        pcr_read_resp(7, 11, &[(HashAlg::Sha256, v256.clone())]),
    ]));
    let got = t
        .pcr_read(11, &[HashAlg::Sha256, HashAlg::Sha1, HashAlg::Sha384])
        .unwrap();
    assert_eq!(
        got,
        vec![
            (HashAlg::Sha256, v256),
            (HashAlg::Sha1, v1),
            (HashAlg::Sha384, v384)
        ]
    );
    assert_eq!(t.stats().commands, 2);
    let sent = t.into_transport().sent;
    // The second command asks for sha256 only (PCR 11: byte 1, bit 3).
    assert_eq!(
        sent[1],
        [
            0x80, 0x01, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x01, 0x7E, 0x00, 0x00, 0x00, 0x01,
            0x00, 0x0B, 0x03, 0x00, 0x08, 0x00,
        ]
    );
}

#[test]
fn pcr_read_restarts_when_the_counter_moves() {
    let a = |n: u8| vec![n; 20];
    let b = |n: u8| vec![n; 32];
    let mut t = fast(Script::new(vec![
        pcr_read_resp(1, 0, &[(HashAlg::Sha1, a(1))]),
        pcr_read_resp(2, 0, &[(HashAlg::Sha256, b(2))]),
        pcr_read_resp(2, 0, &[(HashAlg::Sha1, a(3)), (HashAlg::Sha256, b(3))]),
    ]));
    let got = t.pcr_read(0, &[HashAlg::Sha1, HashAlg::Sha256]).unwrap();
    assert_eq!(got, vec![(HashAlg::Sha1, a(3)), (HashAlg::Sha256, b(3))]);
    assert_eq!(t.stats().commands, 3);
}

#[test]
fn pcr_read_rejects_unasked_values_and_empty_answers() {
    let e = fast(Script::new(vec![pcr_read_resp(
        1,
        10,
        &[(HashAlg::Sha1, vec![0; 20])],
    )]))
    .pcr_read(9, &[HashAlg::Sha1])
    .unwrap_err();
    assert!(
        e.to_string().contains("returns PCR 10 of bank 0x0004"),
        "{e}"
    );
    let e = fast(Script::new(vec![pcr_read_resp(1, 9, &[])]))
        .pcr_read(9, &[HashAlg::Sha1])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no value returned for PCR 9 in [sha1]"),
        "{e}"
    );
    // Digest of the wrong size for the bank.
    let e = fast(Script::new(vec![pcr_read_resp(
        1,
        9,
        &[(HashAlg::Sha1, vec![0; 32])],
    )]))
    .pcr_read(9, &[HashAlg::Sha1])
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("sha1 digest at byte 28 has 32 bytes"),
        "{e}"
    );
    let e = fast(Script::new(vec![]))
        .pcr_read(32, &[HashAlg::Sha1])
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn truncated_and_lying_responses() {
    let good = pcr_read_resp(1, 9, &[(HashAlg::Sha256, vec![9; 32])]);
    // Truncated at every length: an error each time, never a panic.
    for n in 0..good.len() {
        let r = fast(Script::new(vec![good[..n].to_vec()])).pcr_read(9, &[HashAlg::Sha256]);
        assert!(r.is_err(), "length {n}");
    }
    // Truncated with the size field fixed up: a parameter truncation, by offset.
    let mut short = good[..good.len() - 4].to_vec();
    short[5] -= 4;
    let e = fast(Script::new(vec![short]))
        .pcr_read(9, &[HashAlg::Sha256])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Read: malformed response: truncated at byte 30: TPM2B_DIGEST needs 32 bytes, 28 left"
    );
    // The size field lies.
    let mut lie = good.clone();
    lie[5] += 1;
    let e = fast(Script::new(vec![lie]))
        .pcr_read(9, &[HashAlg::Sha256])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Read: malformed response: size field says 63 bytes, received 62"
    );
}

#[test]
fn pcr_extend_recorded_bytes() {
    let d = HashAlg::Sha256.digest(b"hello");
    let mut t = fast(Script::new(vec![EXTEND_OK.to_vec()]));
    t.pcr_extend(11, &[(HashAlg::Sha256, d.clone())]).unwrap();
    let sent = t.into_transport().sent;
    let mut want = vec![
        0x80, 0x02, 0x00, 0x00, 0x00, 0x41, 0x00, 0x00, 0x01, 0x82, // header, 65 bytes
        0x00, 0x00, 0x00, 0x0B, // PCR 11
        0x00, 0x00, 0x00, 0x09, // authorizationSize
        0x40, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, // TPM_RS_PW, empty
        0x00, 0x00, 0x00, 0x01, 0x00, 0x0B, // one sha256 digest
    ];
    want.extend_from_slice(&d);
    assert_eq!(sent, vec![want]);
}

#[test]
fn pcr_extend_covers_every_active_bank_in_one_command() {
    let mut t = fast(Script::new(vec![CAP_PCRS.to_vec(), EXTEND_OK.to_vec()]));
    t.get_pcr_banks().unwrap();
    let d1 = (HashAlg::Sha1, HashAlg::Sha1.digest(b"x"));
    let d256 = (HashAlg::Sha256, HashAlg::Sha256.digest(b"x"));
    let d384 = (HashAlg::Sha384, HashAlg::Sha384.digest(b"x"));
    let e = t.pcr_extend(9, std::slice::from_ref(&d256)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Extend: digests must cover exactly the active banks; missing [sha1], not active []"
    );
    let e = t
        .pcr_extend(9, &[d1.clone(), d256.clone(), d384])
        .unwrap_err();
    assert!(e.to_string().contains("not active [sha384]"), "{e}");
    let e = t.pcr_extend(9, &[d1.clone(), d1.clone()]).unwrap_err();
    assert!(e.to_string().contains("two sha1 digests"), "{e}");
    let e = t
        .pcr_extend(9, &[(HashAlg::Sha1, vec![0; 19]), d256.clone()])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("sha1 digest has 19 bytes, expected 20"),
        "{e}"
    );
    // Nothing was sent for the refused calls.
    assert_eq!(t.stats().commands, 1);
    t.pcr_extend(9, &[d1, d256]).unwrap();
    assert_eq!(t.stats().commands, 2);
    let sent = t.into_transport().sent;
    assert_eq!(sent[1].len(), 10 + 4 + 4 + 9 + 4 + 2 + 20 + 2 + 32);
}

#[test]
fn pcr_extend_error_responses() {
    let d = vec![(HashAlg::Sha256, vec![0; 32])];
    let e = fast(Script::new(vec![rc(0x907)]))
        .pcr_extend(17, &d)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Extend failed: TPM_RC_LOCALITY (0x907)"
    );
    assert_eq!(e.response_code(), Some(ResponseCode::LOCALITY));
    let e = fast(Script::new(vec![rc(0x1C4)]))
        .pcr_extend(9, &d)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_PCR_Extend failed: TPM_RC_VALUE (parameter 1) (0x1c4)"
    );
    let e = fast(Script::new(vec![rc(0x18B)]))
        .pcr_extend(9, &d)
        .unwrap_err();
    assert!(
        e.to_string().contains("TPM_RC_HANDLE (handle 1) (0x18b)"),
        "{e}"
    );
    let e = fast(Script::new(vec![rc(0x101)]))
        .pcr_extend(9, &d)
        .unwrap_err();
    assert!(e.to_string().contains("TPM_RC_FAILURE (0x101)"), "{e}");
    // A success answered with the no-sessions tag.
    let mut bad = EXTEND_OK.to_vec();
    bad[1] = 0x01;
    let e = fast(Script::new(vec![bad])).pcr_extend(9, &d).unwrap_err();
    assert!(
        e.to_string().contains("expected 0x8002 (TPM_ST_SESSIONS)"),
        "{e}"
    );
}

#[test]
fn retry_then_success() {
    let mut t = fast(Script::new(vec![
        rc(0x922),
        rc(0x908),
        rc(0x90A),
        CAP_PCRS.to_vec(),
    ]));
    assert_eq!(t.get_pcr_banks().unwrap().len(), 2);
    assert_eq!(t.stats().commands, 4);
    let sent = t.into_transport().sent;
    assert!(sent.iter().all(|c| *c == sent[0]));
}

#[test]
fn retries_exhausted() {
    let mut t = fast(Script::new(vec![rc(0x922); 6]));
    let e = t.get_pcr_banks().unwrap_err();
    assert_eq!(
        e.to_string(),
        "TPM2_GetCapability(TPM_CAP_PCRS): TPM still busy after 5 tries: TPM_RC_RETRY (0x922)"
    );
    assert_eq!(t.stats().commands, 5);
}

#[test]
fn default_backoff_is_bounded() {
    // 4 waits between 5 tries: 10 + 20 + 40 + 80 ms.
    let start = Instant::now();
    let mut t = Tpm::new(Script::new(vec![rc(0x90A); 5]));
    assert!(matches!(
        t.get_pcr_banks(),
        Err(TpmError::Busy { tries: 5, .. })
    ));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn transport_errors_name_the_command() {
    let mut t = fast(Script::new(vec![]));
    let e = t.pcr_read(0, &[HashAlg::Sha1]).unwrap_err();
    assert_eq!(e.to_string(), "TPM2_PCR_Read: script: no more answers");
}

#[test]
fn startup_clear_bytes_and_already_started() {
    let mut t = fast(Script::new(vec![rc(0), rc(0x100), rc(0x101)]));
    assert!(t.startup_clear().unwrap());
    assert!(!t.startup_clear().unwrap());
    let e = t.startup_clear().unwrap_err();
    assert_eq!(e.to_string(), "TPM2_Startup failed: TPM_RC_FAILURE (0x101)");
    let sent = t.into_transport().sent;
    assert_eq!(sent[0], [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x44, 0, 0]);
}

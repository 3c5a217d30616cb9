//! The TPM: command responses, quote structures, the event log and CEL-JSON.

use super::*;

/// TPM responses: the input is the TPM's answers back to back (each as long as its
/// header's size field says), handed to our client for the commands the boot sends.
pub fn tpm_response(data: &[u8]) {
    use formats::tpm::{HashAlg, ResponseCode, TpmError};
    use validator::sys::tpm::{Tpm, Transport};

    struct Script<'a>(&'a [u8]);
    impl Transport for Script<'_> {
        fn transact(&mut self, _cmd: &[u8], _timeout: Duration) -> Result<Vec<u8>, TpmError> {
            let channel = |why: &str| TpmError::Channel {
                endpoint: "fuzz".into(),
                why: why.into(),
            };
            if self.0.is_empty() {
                return Err(channel("no more responses"));
            }
            let size = self
                .0
                .get(2..6)
                .map_or(self.0.len(), |b| {
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
                })
                .clamp(1, self.0.len());
            let (resp, rest) = self.0.split_at(size);
            self.0 = rest;
            let rc = resp
                .get(6..10)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            if ResponseCode(rc).is_retryable() {
                // The client would sleep before retrying: keep the fuzzer fast.
                return Err(channel("busy code withheld"));
            }
            Ok(resp.to_vec())
        }
    }

    let mut tpm = Tpm::new(Script(data));
    let _ = tpm.startup_clear();
    let banks = match tpm.get_pcr_banks() {
        Ok(b) => {
            for (i, x) in b.iter().enumerate() {
                assert!(!b[..i].contains(x), "bank {x} listed twice: {b:?}");
            }
            b
        }
        Err(_) => vec![HashAlg::Sha256],
    };
    let check = |r: Result<Vec<(HashAlg, Vec<u8>)>, TpmError>, banks: &[HashAlg]| {
        if let Ok(values) = r {
            assert_eq!(values.len(), banks.len());
            for ((alg, v), want) in values.iter().zip(banks) {
                assert_eq!(alg, want);
                assert_eq!(v.len(), alg.size(), "{alg} value of {} bytes", v.len());
            }
        }
    };
    check(tpm.pcr_read(0, &banks), &banks);
    let digests: Vec<(HashAlg, Vec<u8>)> = banks.iter().map(|b| (*b, b.digest(b"fuzz"))).collect();
    let _ = tpm.pcr_extend(11, &digests);
    check(tpm.pcr_read(11, &banks), &banks);
}

/// `[selector][rest]`: the attestation structures a verifier reads from a node: 0 a
/// `TPMT_PUBLIC`, 1 a `TPM2B_PUBLIC`, 2 a `TPMS_ATTEST`, 3 a `TPMT_SIGNATURE`; 4 a
/// `[u16 big-endian length][TPM2B_PUBLIC][TPMT_SIGNATURE][TPMS_ATTEST]` checked as a
/// quote; 5 a reference file (`validator.reference/v1`); 6 a credential file
/// (`tpm2_makecredential -o`, written back the same). A public area written back
/// parses to the same; a signature too; a quote keeps exactly its bytes; a quote's
/// signature never verifies under a key that is no AK; a reference written back reads
/// the same.
pub fn tpm_attest(data: &[u8]) {
    use formats::tpm::attest::{Attest, Public, Signature};
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel % 7 == 6 {
        use formats::tpm::attest::CredentialFile;
        if let Ok(c) = CredentialFile::parse(rest) {
            assert_eq!(c.to_bytes(), rest, "a credential file writes back the same");
        }
        return;
    }
    if sel % 7 == 5 {
        // A PCR list (`sha256:0,7+sha1:11`) written back reads as the same selection.
        use formats::tpm::attest::{format_selection, parse_selection};
        if let Ok(p) = parse_selection(&String::from_utf8_lossy(rest)) {
            assert_eq!(
                parse_selection(&format_selection(&p)).ok().as_ref(),
                Some(&p),
                "a PCR list reads back the same"
            );
        }
        if let Ok(r) =
            validator::attest::reference::Reference::parse(&String::from_utf8_lossy(rest))
        {
            let again = validator::attest::reference::Reference::parse(&r.to_text());
            assert_eq!(
                again.ok().as_ref(),
                Some(&r),
                "a reference reads back the same"
            );
        }
        return;
    }
    match sel % 7 {
        0 => {
            if let Ok(p) = Public::parse(rest) {
                assert_eq!(p.bytes, rest, "a public area keeps its bytes");
                assert_eq!(Public::parse_2b(&p.to_2b()).ok(), Some(p.clone()));
                let _ = p.name();
            }
        }
        1 => {
            if let Ok(p) = Public::parse_2b(rest) {
                assert_eq!(p.to_2b(), rest, "a TPM2B_PUBLIC writes back the same");
            }
        }
        2 => {
            if let Ok(a) = Attest::parse(rest) {
                assert_eq!(a.bytes, rest, "a quote keeps its bytes");
            }
        }
        3 => {
            if let Ok(s) = Signature::parse(rest) {
                assert_eq!(s.to_bytes(), rest, "a signature writes back the same");
            }
        }
        _ => {
            let Some((len, rest)) = rest.split_first_chunk::<2>() else {
                return;
            };
            let n = usize::from(u16::from_be_bytes(*len)).min(rest.len());
            let (public, rest) = rest.split_at(n);
            let Ok(ak) = Public::parse_2b(public) else {
                return;
            };
            for cut in 0..rest.len().min(600) {
                let (sig, msg) = rest.split_at(cut);
                if let Ok(sig) = Signature::parse(sig) {
                    let r = validator::trust::quote::verify_signature(&ak, msg, &sig);
                    if !ak.is_attestation_key() {
                        assert!(r.is_err(), "only an AK's signature verifies");
                    }
                    let _ = Attest::parse(msg);
                }
            }
        }
    }
}

/// The TCG crypto-agile binary event log: parse, replay, and the log written back parses
/// to the same log and replays to the same values; every record read as one of our events
/// (`formats::tpm::measurement`) renders back to its bytes.
pub fn eventlog(data: &[u8]) {
    use formats::tpm::eventlog::EventLog;
    let Ok(log) = EventLog::parse(data) else {
        return;
    };
    let values = log.replay();
    let again = EventLog::parse(&log.to_bytes())
        .unwrap_or_else(|e| panic!("a parsed event log written back does not parse: {e}"));
    assert_eq!(again, log, "event log changed through to_bytes");
    assert_eq!(again.replay(), values);
    // Every record read as one of our events, as the verifier reads them: what reads
    // renders back to the same bytes and belongs on the PCR it was on.
    for e in log.events() {
        if let Ok(m) = formats::tpm::measurement::Measurement::parse(e.pcr, &e.data, 13) {
            assert_eq!(m.text().as_bytes(), &e.data[..], "{m:?}");
            assert_eq!(m.pcr(13), e.pcr, "{m:?}");
        }
    }
}

/// systemd's CEL-JSON log: parse, replay, and the records written back parse the same.
pub fn cel(data: &[u8]) {
    use formats::tpm::cel;
    let Ok(records) = cel::parse(data) else {
        return;
    };
    let values = cel::replay(&records);
    let bytes: Vec<u8> = records.iter().flat_map(|r| r.to_bytes()).collect();
    let again = cel::parse(&bytes)
        .unwrap_or_else(|e| panic!("parsed CEL records written back do not parse: {e}"));
    assert_eq!(again, records, "CEL records changed through to_bytes");
    assert_eq!(cel::replay(&again), values);
}

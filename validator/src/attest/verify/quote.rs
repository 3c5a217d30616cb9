//! The checks of the quote against the log: its signature and qualifying data, the
//! seal that must end the log and name it, the replay of the records before the seal,
//! the selection it must cover, and the banks the log may declare (steps 2-4 of
//! [`super`]).

use std::collections::BTreeSet;

use super::{SealError, VerifyError};
use crate::attest::reference::Reference;
use crate::formats::tpm::attest::{format_selection, pcr_digest, Attest, Public, Signature};
use crate::formats::tpm::eventlog::{replay_events, Event, EventLog, EV_IPL};
use crate::formats::tpm::measurement::{Measurement, Seal, PHASE_PCR, PINNED_PCRS};
use crate::formats::tpm::{HashAlg, PcrValues};
use crate::trust::quote::verify_signature;

/// The quote's signature by `ak` and its qualifying data equal to `qualifying` (`what`
/// names it for the message). Returns the parsed quote and the signature's hash.
pub(super) fn signed_quote(
    ak: &Public,
    attest: &[u8],
    sig: &[u8],
    qualifying: &[u8],
    what: &'static str,
) -> Result<(Attest, HashAlg), VerifyError> {
    let sig = Signature::parse(sig).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    verify_signature(ak, attest, &sig)?;
    let a = Attest::parse(attest).map_err(|e| VerifyError::Malformed(e.to_string()))?;
    if a.extra_data != qualifying {
        return Err(VerifyError::Qualifying {
            what,
            want: crate::util::hex(qualifying),
            got: crate::util::hex(&a.extra_data),
        });
    }
    Ok((a, sig.hash()))
}

/// Whether `records` replay to the PCR values the quote signed.
pub(super) fn replays_to(a: &Attest, hash: HashAlg, records: &[Event]) -> Result<(), VerifyError> {
    let mut values: PcrValues = replay_events(records);
    for (bank, pcrs) in &a.pcr_select {
        for p in pcrs {
            values
                .entry(*bank)
                .or_default()
                .entry(*p)
                .or_insert_with(|| vec![0; bank.size()]);
        }
    }
    let got =
        pcr_digest(hash, &a.pcr_select, &values).map_err(|e| VerifyError::Log(e.to_string()))?;
    if got != a.pcr_digest {
        return Err(VerifyError::PcrDigest {
            pcrs: format_selection(&a.pcr_select),
            want: crate::util::hex(&a.pcr_digest),
            got: crate::util::hex(&got),
        });
    }
    Ok(())
}

/// Step 3: the log's last record is the seal naming this quote; returns the records
/// before it (what the quote signed).
pub(super) fn sealed_prefix<'a>(
    log: &'a EventLog,
    attest: &[u8],
    pcr: u32,
) -> Result<&'a [Event], VerifyError> {
    let Some((last, before)) = log.events().split_last() else {
        return Err(SealError::EmptyLog.into());
    };
    let seal = (last.pcr == pcr && last.event_type == EV_IPL)
        .then(|| Measurement::parse(last.pcr, &last.data, pcr).ok())
        .flatten();
    let want = crate::trust::keys::sha256(attest);
    match seal {
        Some(Measurement::Seal(Seal::Quote(d))) if d == want => Ok(before),
        Some(Measurement::Seal(s)) => Err(SealError::OtherQuote {
            log: match s {
                Seal::Quote(d) => format!("quote sha256:{}", crate::util::hex(&d)),
                Seal::Unquoted => "no quote".into(),
            },
            report: crate::util::hex(&want),
        }
        .into()),
        _ => Err(SealError::NotASeal {
            data: String::from_utf8_lossy(&last.data).into_owned(),
            pcr: last.pcr,
        }
        .into()),
    }
}

/// Every bank the log's header declares is one this verifier computes: a digest in an
/// algorithm it does not know can be neither replayed nor compared, and a log made only
/// of such digests would replay to zeros and match anything.
pub(super) fn judgeable(log: &EventLog) -> Result<(), VerifyError> {
    let unknown: Vec<String> = log
        .spec_id()
        .algorithms
        .iter()
        .filter(|a| HashAlg::from_alg_id(a.alg_id).is_none())
        .map(|a| format!("{:#06x}", a.alg_id))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(VerifyError::Log(format!(
        "the header declares digest algorithms this verifier does not compute ({}): their digests can be neither replayed nor compared",
        unknown.join(", ")
    )))
}

/// Step 4: the quote covers the PCRs a verdict rests on, in every bank the log records.
pub(super) fn check_selection(
    a: &Attest,
    log: &EventLog,
    references: &[Reference],
    pcr: u32,
) -> Result<(), VerifyError> {
    let mut need: BTreeSet<u32> = PINNED_PCRS.iter().copied().collect();
    need.extend([PHASE_PCR, pcr]);
    need.extend(
        references
            .iter()
            .flat_map(|r| r.slots.iter().flat_map(|s| s.files.iter().map(|f| f.pcr))),
    );
    let banks = log.spec_id().banks();
    let mut missing = Vec::new();
    for b in &banks {
        let have: BTreeSet<u32> = a
            .pcr_select
            .iter()
            .filter(|(qb, _)| qb == b)
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let lack: Vec<u32> = need.difference(&have).copied().collect();
        if !lack.is_empty() {
            missing.push((*b, lack));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(VerifyError::Selection {
        quoted: format_selection(&a.pcr_select),
        missing: format_selection(&missing),
        need: need
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        banks: banks.iter().map(|b| b.name()).collect::<Vec<_>>().join("+"),
    })
}

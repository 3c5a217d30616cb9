//! Verifying a node's boot: its report, the TPM quote in it, its event log, against the
//! enrolled attestation key and the reference files of the images the fleet accepts.
//!
//! Contract ([`verify_report`]), each step refusing with its own [`VerifyError`]:
//! 1. the report reads and carries a quote; the quote's AK is the enrolled one (same
//!    public area);
//! 2. the quote's signature verifies with that AK ([`crate::trust::quote`]), its magic
//!    and type are a quote's, its qualifying data is the report's digest
//!    ([`crate::report::json::quoted_digest_of`]): the report is the one the TPM signed;
//! 3. the event log replays to the PCR values the quote signed (PCRs without events are
//!    zero, as after a reset);
//! 4. our events in the log (the EV_IPL records in PCR 11 and the reference's PCR), cut
//!    into boots at each `enter-initrd` (the first started by the boot loader, each later
//!    one by a kexec fallback, whose log is carried over), equal a reference slot entry's
//!    prediction event for event - data and every digest the log holds - up to the
//!    decision: a pass must have measured every event but the optional ones, a boot that
//!    stopped short a part of them, in order; then `decision:<word>` and, when the boot
//!    went on, `leave-initrd`, and nothing after; the first event that differs is named
//!    with the expected and the actual text;
//! 5. the boot loader's file events (PCR 9) naming the first boot's slot files have the
//!    predicted digests;
//! 6. policy: every boot but the last fell back (when the policy allows fallbacks), the
//!    last one's decision is accepted, and the report says the same decision and image;
//! 7. freshness: with the node's last accepted clock, the quote's reset count and clock
//!    must be newer (a replayed quote is not).
//!
//! [`verify_quote`] does steps 2-3 alone for a challenge (`validator attest quote
//! --nonce`): the qualifying data is the verifier's nonce.
//!
//! Current limits: the firmware's PCRs (0-7) are checked only as far as the log replays
//! to them (they are not predicted; pin them per hardware model in the policy of the
//! fleet); a legacy SHA-1 log proves the SHA-1 bank alone (the quote covers only the banks
//! the log records).

use base64::Engine as _;

use super::reference::{ExpectedEvent, Reference, SlotReference};
use crate::formats::tpm::attest::{pcr_digest, Attest, ClockInfo, Public, Signature};
use crate::formats::tpm::eventlog::{Event, EventLog, EV_IPL};
use crate::formats::tpm::{HashAlg, PcrValues};
use crate::trust::quote::{verify_signature, QuoteSigError};

/// What the fleet accepts.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Decisions accepted for the boot the report is from (`pass`, `quarantine`).
    pub accept: Vec<String>,
    /// Whether boots before it in the same log may have fallen back.
    pub allow_fallback: bool,
    /// The node's last accepted quote: a newer one must follow it.
    pub last: Option<ClockInfo>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            accept: vec!["pass".into()],
            allow_fallback: true,
            last: None,
        }
    }
}

/// One boot found in the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Boot {
    pub image_id: String,
    pub slot: String,
    pub decision: String,
}

/// A verified report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// The AK's name (hex).
    pub ak_name: String,
    /// The boots in the log, the report's last.
    pub boots: Vec<Boot>,
    /// The quote's clock and counters (keep them for the next freshness check).
    pub clock: ClockInfo,
    /// The boot loader's file events checked (0 when the boot loader logs none).
    pub files_checked: usize,
}

/// Why a report or quote is refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("report: {0}")]
    Report(String),
    #[error("the report's AK (name {got}) is not the enrolled AK (name {want}): the quote is from another TPM")]
    AkMismatch { want: String, got: String },
    #[error("quote: {0}")]
    Malformed(String),
    #[error("quote signature: {0}")]
    Signature(#[from] QuoteSigError),
    #[error("the quote's qualifying data {got} is not {want} ({what})")]
    Qualifying {
        what: &'static str,
        want: String,
        got: String,
    },
    #[error("event log: {0}")]
    Log(String),
    #[error("the event log does not replay to the quoted PCRs ({pcrs}): quoted digest {want}, the log's {got}")]
    PcrDigest {
        pcrs: String,
        want: String,
        got: String,
    },
    #[error("image {0} is not in the accepted set")]
    NotAccepted(String),
    #[error("boot {boot}, event {index} of ours: expected {expected:?}, got {actual:?}")]
    Event {
        boot: usize,
        index: usize,
        expected: String,
        actual: String,
    },
    #[error("boot {boot} of slot {slot} ended in decision {decision}, which the policy does not accept{}", if *.last { "" } else { " before the last boot" })]
    Decision {
        boot: usize,
        slot: String,
        decision: String,
        last: bool,
    },
    #[error("the report says {field} {report:?}, the measured boot {measured:?}")]
    Inconsistent {
        field: &'static str,
        report: String,
        measured: String,
    },
    #[error("stale quote: reset count {reset}, clock {clock} ms, not newer than the last accepted (reset count {last_reset}, clock {last_clock} ms): a replayed quote")]
    Stale {
        reset: u32,
        clock: u64,
        last_reset: u32,
        last_clock: u64,
    },
}

fn b64(what: &str, s: &str) -> Result<Vec<u8>, VerifyError> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| VerifyError::Report(format!("attestation.quote.{what} is not base64: {e}")))
}

/// Steps 2-3: the quote's signature by `ak`, its qualifying data equal to `qualifying`
/// (`what` names it for the message), and, with a log, the log's replay equal to the
/// quoted PCRs. Returns the parsed quote.
pub fn verify_quote(
    ak: &Public,
    attest: &[u8],
    sig: &[u8],
    qualifying: &[u8],
    what: &'static str,
    log: Option<&EventLog>,
) -> Result<Attest, VerifyError> {
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
    if let Some(log) = log {
        let mut values: PcrValues = log.replay();
        for (bank, pcrs) in &a.pcr_select {
            for p in pcrs {
                values
                    .entry(*bank)
                    .or_default()
                    .entry(*p)
                    .or_insert_with(|| vec![0; bank.size()]);
            }
        }
        let got = pcr_digest(sig.hash(), &a.pcr_select, &values).map_err(VerifyError::Log)?;
        if got != a.pcr_digest {
            return Err(VerifyError::PcrDigest {
                pcrs: crate::formats::tpm::attest::format_selection(&a.pcr_select),
                want: crate::util::hex(&a.pcr_digest),
                got: crate::util::hex(&got),
            });
        }
    }
    Ok(a)
}

/// Our events in the log, cut into boots at each `enter-initrd`.
fn boots(log: &EventLog, pcr: u32) -> Result<Vec<Vec<&Event>>, VerifyError> {
    let mut out: Vec<Vec<&Event>> = Vec::new();
    for e in log.events() {
        if e.event_type != EV_IPL || !(e.pcr == crate::config::PHASE_PCR || e.pcr == pcr) {
            continue;
        }
        if e.pcr == crate::config::PHASE_PCR && e.data == b"enter-initrd" {
            out.push(Vec::new());
        }
        match out.last_mut() {
            Some(b) => b.push(e),
            None => {
                return Err(VerifyError::Log(format!(
                    "an event of ours ({:?}, PCR {}) before any enter-initrd",
                    String::from_utf8_lossy(&e.data),
                    e.pcr
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(VerifyError::Log(
            "no boot of ours in the log (no enter-initrd in PCR 11)".into(),
        ));
    }
    Ok(out)
}

fn text(e: &Event) -> String {
    String::from_utf8_lossy(&e.data).into_owned()
}

/// Whether the log's event is the expected one: PCR, data and every digest it holds.
fn same(a: &Event, x: &ExpectedEvent) -> bool {
    a.pcr == x.pcr && a.data == x.data.as_bytes() && same_digests(a, &x.digests)
}

/// Whether every digest the log's event holds (in a bank we know) is the predicted one.
fn same_digests(a: &Event, want: &super::reference::Digests) -> bool {
    a.digests.iter().all(|(id, d)| {
        HashAlg::from_alg_id(*id).is_none_or(|h| {
            want.get(h.name())
                .is_some_and(|w| w.eq_ignore_ascii_case(&crate::util::hex(d)))
        })
    })
}

/// How far a boot's events follow a slot's prediction: `Ok(decision)` when all of
/// them do, else the index of the first that does not, with the expected text. A boot
/// that passed must have measured every event but the optional ones, in order; a boot
/// that stopped short (any other decision) measured a part of them, in order (a stage
/// that failed measures what it did, e.g. the modules that loaded).
fn follow(boot: &[&Event], s: &SlotReference, pcr: u32) -> Result<String, (usize, String)> {
    let exp = &s.events;
    let Some(dpos) = boot
        .iter()
        .position(|a| a.pcr == pcr && a.data.starts_with(b"decision:"))
    else {
        let want = exp
            .iter()
            .find(|x| !x.optional)
            .map_or("decision:<word>".to_string(), |x| x.data.clone());
        return Err((
            boot.len(),
            format!("{want} ... decision:<word> (the boot has no decision)"),
        ));
    };
    let decision = boot
        .get(dpos)
        .and_then(|a| a.data.strip_prefix(b"decision:"))
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .unwrap_or_default();
    let strict = decision == "pass";
    let mut j = 0;
    for (k, a) in boot.iter().enumerate().take(dpos) {
        let from = j;
        loop {
            match exp.get(j) {
                None => {
                    let want = exp.get(from).map_or("decision:<word>", |x| x.data.as_str());
                    return Err((k, want.to_string()));
                }
                Some(x) if same(a, x) => {
                    j += 1;
                    break;
                }
                Some(x) if x.optional || !strict => j += 1,
                Some(x) => return Err((k, x.data.clone())),
            }
        }
    }
    if strict {
        if let Some(x) = exp.iter().skip(j).find(|x| !x.optional) {
            return Err((dpos, x.data.clone()));
        }
    }
    let mut k = dpos;
    for x in super::predict::decision_events(&decision, pcr) {
        match boot.get(k) {
            Some(a) if same(a, &x) => k += 1,
            _ => return Err((k, x.data)),
        }
    }
    if boot.get(k).is_some() {
        return Err((k, "the end of the boot".into()));
    }
    Ok(decision)
}

/// Verifies a boot's report (steps 1-7 of the module doc).
pub fn verify_report(
    ak: &Public,
    references: &[Reference],
    report_json: &[u8],
    log_bytes: &[u8],
    policy: &Policy,
) -> Result<Verified, VerifyError> {
    let v: serde_json::Value = serde_json::from_slice(report_json).map_err(|e| {
        VerifyError::Report(format!(
            "not JSON: line {} column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    let report: crate::report::Report =
        serde_json::from_value(v.clone()).map_err(|e| VerifyError::Report(e.to_string()))?;
    let q = report
        .attestation
        .as_ref()
        .and_then(|a| a.quote.as_ref())
        .ok_or_else(|| {
            VerifyError::Report(
                match report.attestation.as_ref().and_then(|a| a.failure.clone()) {
                    Some(f) => format!("no quote: {f}"),
                    None => "no quote (attestation.quote is missing)".into(),
                },
            )
        })?;
    let theirs = Public::parse_2b(&b64("ak_public", &q.ak_public)?)
        .map_err(|e| VerifyError::Report(e.to_string()))?;
    if theirs.bytes != ak.bytes {
        return Err(VerifyError::AkMismatch {
            want: crate::util::hex(&ak.name()),
            got: crate::util::hex(&theirs.name()),
        });
    }
    let log = EventLog::parse(log_bytes).map_err(|e| VerifyError::Log(e.to_string()))?;
    let digest = crate::report::json::quoted_digest_of(&v);
    let a = verify_quote(
        ak,
        &b64("attest", &q.attest)?,
        &b64("signature", &q.signature)?,
        &digest,
        "the report's digest: the report was changed after the boot, or the quote is another report's",
        Some(&log),
    )?;
    if let Some(last) = &policy.last {
        let newer = a.clock.reset_count > last.reset_count
            || (a.clock.reset_count == last.reset_count && a.clock.clock > last.clock);
        if !newer {
            return Err(VerifyError::Stale {
                reset: a.clock.reset_count,
                clock: a.clock.clock,
                last_reset: last.reset_count,
                last_clock: last.clock,
            });
        }
    }
    // Our events, boot by boot, against the accepted references.
    let pcrs: std::collections::BTreeSet<u32> = references.iter().map(|r| r.pcr).collect();
    let pcr = match pcrs.len() {
        1 => pcrs.into_iter().next().unwrap_or(13),
        0 => return Err(VerifyError::NotAccepted("any (no reference given)".into())),
        _ => {
            return Err(VerifyError::Report(
                "the references measure into different PCRs".into(),
            ))
        }
    };
    let found = boots(&log, pcr)?;
    let mut out = Vec::new();
    for (n, boot) in found.iter().enumerate() {
        // Every boot but the first was started by kexec (the log is carried over only
        // then); the first by the boot loader.
        let entry = if n == 0 { "boot-loader" } else { "kexec" };
        let number = n + 1;
        let bom = boot
            .iter()
            .find(|e| e.pcr == pcr && e.data.starts_with(b"bom:"))
            .map(|e| text(e));
        let candidates: Vec<(&Reference, &SlotReference)> = references
            .iter()
            .flat_map(|r| r.slots.iter().map(move |s| (r, s)))
            .filter(|(_, s)| s.entry == entry)
            .filter(|(_, s)| {
                bom.is_some() && s.events.iter().any(|x| Some(&x.data) == bom.as_ref())
            })
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::NotAccepted(
                bom.unwrap_or_else(|| "without a BOM event".into()),
            ));
        }
        let mut best: Option<(usize, String)> = None;
        let mut matched = None;
        for (r, s) in &candidates {
            match follow(boot, s, pcr) {
                Ok(d) => {
                    matched = Some(Boot {
                        image_id: r.image_id.clone(),
                        slot: s.slot.clone(),
                        decision: d,
                    });
                    break;
                }
                Err((k, want)) => {
                    if best.as_ref().is_none_or(|(bk, _)| k > *bk) {
                        best = Some((k, want));
                    }
                }
            }
        }
        let Some(b) = matched else {
            let (k, expected) = best.unwrap_or((0, String::new()));
            return Err(VerifyError::Event {
                boot: number,
                index: k + 1,
                expected,
                actual: boot
                    .get(k)
                    .map_or("the end of the boot".into(), |e| text(e)),
            });
        };
        let last = number == found.len();
        let ok = if last {
            policy.accept.contains(&b.decision)
        } else {
            policy.allow_fallback && b.decision == "fallback"
        };
        if !ok {
            return Err(VerifyError::Decision {
                boot: number,
                slot: b.slot,
                decision: b.decision,
                last,
            });
        }
        out.push(b);
    }
    let last = out
        .last()
        .cloned()
        .ok_or_else(|| VerifyError::Log("no boot".into()))?;
    if report.decision.as_str() != last.decision {
        return Err(VerifyError::Inconsistent {
            field: "decision",
            report: report.decision.as_str().into(),
            measured: last.decision,
        });
    }
    if report.image_id.as_deref() != Some(last.image_id.as_str()) {
        return Err(VerifyError::Inconsistent {
            field: "image_id",
            report: report.image_id.unwrap_or_default(),
            measured: last.image_id,
        });
    }
    // The boot loader's files for the first boot's slot.
    let mut files_checked = 0;
    if let Some(first) = out.first() {
        let slot = references
            .iter()
            .filter(|r| r.image_id == first.image_id)
            .find_map(|r| r.slot(&first.slot));
        for f in slot.map(|s| s.files.as_slice()).unwrap_or_default() {
            for e in log.events().iter().filter(|e| e.pcr == f.pcr) {
                let path = e.data.strip_suffix(b"\0").unwrap_or(&e.data);
                if path != f.path.as_bytes() {
                    continue;
                }
                if !same_digests(e, &f.digests) {
                    return Err(VerifyError::Event {
                        boot: 1,
                        index: 0,
                        expected: format!("{} with the predicted digest", f.path),
                        actual: format!(
                            "{} with another digest: the boot loader read another file",
                            f.path
                        ),
                    });
                }
                files_checked += 1;
            }
        }
    }
    Ok(Verified {
        ak_name: crate::util::hex(&ak.name()),
        boots: out,
        clock: a.clock,
        files_checked,
    })
}

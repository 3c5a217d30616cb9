//! Verifying a node's boot: its report, the TPM quote in it, its event log, against the
//! enrolled attestation key and the reference files of the images the fleet accepts.
//!
//! The verifier believes only what the TPM signed. The node's root can write the report,
//! the log and its order, and can use the TPM (the AK needs no authorisation) to extend
//! any PCR and quote any data; it cannot forge the TPM's signature or undo an extend.
//!
//! Contract ([`verify_report`]), each step refusing with its own [`VerifyError`]:
//! 1. the report reads (JSON with no key given twice) and carries a quote; the quote's AK
//!    is the enrolled one (same public area);
//! 2. the quote's signature verifies with that AK ([`crate::trust::quote`]), its magic
//!    and type are a quote's, its qualifying data is the report's digest
//!    ([`crate::report::json::quoted_digest_of`]);
//! 3. the log's last record is the boot's seal
//!    ([`crate::formats::tpm::measurement::Seal`]), naming this quote (the SHA-256 of
//!    its `TPMS_ATTEST`); the records before it replay to the PCR values the quote
//!    signed (PCRs without events are zero, as after a reset): a quote made after the
//!    seal, by anyone, shows the seal and cannot verify for any report;
//! 4. the quote's selection covers, in every bank the log records, the pinned PCRs of the
//!    plan (0-9, 14), PCR 11, our PCR and every PCR the references predict a file in: a
//!    narrower quote is refused, naming what it leaves out;
//! 5. every record on PCR 11 and on our PCR, whatever its type, is one of our events
//!    ([`crate::formats::tpm::measurement::Measurement`]: `EV_IPL`, its text ours, on its
//!    own PCR); events whose digest is of their own text carry exactly those digests;
//!    except, before the first of ours, systemd-stub's section events on PCR 11
//!    (`stub.rs`), which must be exactly those the first boot's reference entry predicts
//!    of its Unified Kernel Image (an entry without one admits none);
//! 6. our events, cut into boots at each `enter-initrd` (the first started by the boot
//!    loader, each later one by a kexec fallback, whose log is carried over), equal a
//!    reference slot entry's prediction event for event - the measurement and every
//!    digest - up to the decision: a pass must have measured every event but the optional
//!    ones, a boot that stopped short a part of them, in order; then the decision events
//!    and the boot's seal, and nothing after; the first event that differs is named with
//!    the expected and the actual text;
//!    A boot started by kexec must follow a boot that ended `decision:fallback` and
//!    `kexec:<slot> kernel sha256:... initrd sha256:...`, naming its slot, with a kernel
//!    and an initramfs whose digests are files the accepted image has for that slot;
//! 7. the files the reference predicts the boot loader measured for the slot the first
//!    boot followed: a complete list (`files_complete`) must be every record in their PCRs,
//!    in order, each with the predicted digest in every bank (a file without digests: one
//!    record of any content, GRUB's environment block), so a boot loader that read a
//!    kernel, an initramfs or a configuration the image does not have is refused even when
//!    root extended the predicted digests afterwards; otherwise each file appears exactly
//!    once (matched by PCR and digest, never by the text beside it);
//! 8. policy: every boot but the last fell back (when the policy allows fallbacks), the
//!    last one's decision is accepted, and the report says the same decision and image;
//! 9. freshness: with the node's last accepted clock, the quote's reset count and clock
//!    must be newer (a replayed quote is not).
//!
//! [`verify_quote`] does steps 2 and a whole-log replay alone for a challenge
//! (`validator attest quote --nonce`): the qualifying data is the verifier's nonce.
//!
//! Current limits: the firmware's PCRs (0-8, 14) are checked only as far as the log
//! replays to them (pin their values per hardware model in the fleet's policy), and so
//! is PCR 9 beyond the predicted files when the reference's list is not complete; the
//! content of GRUB's environment block is not predicted; a legacy SHA-1 log proves the SHA-1 bank alone (the quote covers only
//! the banks the log records); a log whose header declares an algorithm this verifier
//! does not compute is refused.

use std::collections::BTreeSet;

use base64::Engine as _;

use super::reference::{Entry, Reference, SlotReference};
use crate::config::bom::SlotName;
use crate::formats::tpm::attest::{Attest, ClockInfo, Public};
use crate::formats::tpm::eventlog::{Event, EventLog, EV_IPL};
use crate::formats::tpm::measurement::{Decision, Measurement, Phase, PHASE_PCR};
use crate::formats::tpm::HashAlg;
use crate::trust::quote::QuoteSigError;

mod files;
mod follow;
mod quote;
mod stub;
use files::{check_files, check_kexec, same_digests};
use follow::follow;
use quote::{check_selection, judgeable, replays_to, sealed_prefix, signed_quote};

/// What the fleet accepts.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Decisions accepted for the boot the report is from (`pass`, `quarantine`).
    pub accept: Vec<Decision>,
    /// Whether boots before it in the same log may have fallen back.
    pub allow_fallback: bool,
    /// The node's last accepted quote: a newer one must follow it.
    pub last: Option<ClockInfo>,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            accept: vec![Decision::Pass],
            allow_fallback: true,
            last: None,
        }
    }
}

/// One boot found in the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Boot {
    pub image_id: String,
    pub slot: SlotName,
    pub decision: Decision,
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
    /// The boot loader's file events checked (as many as the reference predicts).
    pub files_checked: usize,
}

/// Why a boot is not sealed to the report's quote (the attacks the seal stops differ by
/// which).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the event log has no record")]
    EmptyLog,
    /// The log's seal names another quote (or none): a report quoted again after the boot.
    #[error("the log's seal names {log}, the report's quote is sha256:{report}")]
    OtherQuote { log: String, report: String },
    /// The log's last record is no seal: a log cut after the quote, or a quote the init did
    /// not make.
    #[error("the log's last record ({data:?} on PCR {pcr}) is not the boot's seal: a log cut after the quote, or a quote the init did not make")]
    NotASeal { data: String, pcr: u32 },
    /// A boot of the log (counted from 1) does not end with its seal.
    #[error("boot {boot} of the log does not end with its seal")]
    BootUnsealed { boot: usize },
}

/// Why a boot started by kexec is not one the accepted images explain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KexecError {
    #[error("the boot before it measured no kexec (what it loaded is unknown)")]
    NotMeasured,
    #[error("the boot before it loaded slot {loaded}'s images, this boot is slot {slot}")]
    OtherSlot { loaded: String, slot: SlotName },
    /// The kernel or initramfs loaded is none of the image's files for the slot.
    #[error("the {what} loaded (sha256:{digest}) is none of the files image {image} has for slot {slot}")]
    UnknownFile {
        what: &'static str,
        digest: String,
        image: String,
        slot: SlotName,
    },
}

/// Why a predicted boot-loader file is not in the log as the image has it (a reference
/// whose file list is not complete: each file once, by digest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("the reference gives no digest")]
    NoDigest,
    /// A record matches the file in one bank and not in another.
    #[error("a record ({record:?}) has its digest in one bank and another in the next")]
    MixedBanks { record: String },
    #[error("no record has the predicted digest: the boot loader read another file")]
    NotRead,
    #[error("{count} records have the predicted digest, one must")]
    Repeated { count: usize },
}

/// Why a PCR's boot-loader records are not the image's complete list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootLoaderError {
    /// Another number of records than the image's boot loader makes (`records` and
    /// `files` list them).
    #[error("{got} records ({records}), the image's boot loader makes {want} ({files})")]
    Count {
        got: usize,
        records: String,
        want: usize,
        files: String,
    },
    /// Record `index` (from 1) is not the file the image reads at that place.
    #[error("record {index} ({record}) is not {path} with its predicted digest")]
    Record {
        index: usize,
        record: String,
        path: String,
    },
}

/// Why a report or quote is refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The report is not a report (not JSON, a key twice, not the schema, an AK that does
    /// not read): unusable evidence.
    #[error("report: {0}")]
    Report(String),
    /// The report carries no quote (the reason it gives, if any).
    #[error("report: {0}")]
    NotQuoted(String),
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
    #[error("the quote covers {quoted} but not {missing}: a report's quote must cover PCRs {need} in every bank the log records ({banks})")]
    Selection {
        quoted: String,
        missing: String,
        need: String,
        banks: String,
    },
    #[error("the boot is not sealed to its quote: {0}")]
    Seal(#[from] SealError),
    #[error("event log record {index} (PCR {pcr}): {why}")]
    NotOurs { index: usize, pcr: u32, why: String },
    /// What systemd-stub measured is not what the accepted image's entry predicts.
    #[error("event log record {index} (PCR 11): {why}")]
    Stub { index: usize, why: String },
    #[error("image {0} is not in the accepted set")]
    NotAccepted(String),
    #[error("boot {boot}, event {index} of ours: expected {expected:?}, got {actual:?}")]
    Event {
        boot: usize,
        index: usize,
        expected: String,
        actual: String,
    },
    #[error("boot {boot}, started by kexec: {why}")]
    Kexec { boot: usize, why: KexecError },
    #[error("the boot loader's file {path} (PCR {pcr}): {why}")]
    File {
        path: String,
        pcr: u32,
        why: FileError,
    },
    #[error("PCR {pcr}: {why}: the boot loader read files the image does not have")]
    BootLoader { pcr: u32, why: BootLoaderError },
    #[error("boot {boot} of slot {slot} ended in decision {decision}, which the policy does not accept{}", if *.last { "" } else { " before the last boot" })]
    Decision {
        boot: usize,
        slot: SlotName,
        decision: Decision,
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

/// A challenge: the quote's signature by `ak`, its qualifying data equal to `qualifying`
/// (`what` names it for the message), and, with a log, the whole log's replay equal to
/// the quoted PCRs (the live PCRs, the seal included). Returns the parsed quote.
pub fn verify_quote(
    ak: &Public,
    attest: &[u8],
    sig: &[u8],
    qualifying: &[u8],
    what: &'static str,
    log: Option<&EventLog>,
) -> Result<Attest, VerifyError> {
    let (a, hash) = signed_quote(ak, attest, sig, qualifying, what)?;
    if let Some(log) = log {
        replays_to(&a, hash, log.events())?;
    }
    Ok(a)
}

/// One record of ours: its index in the log (from 1), the record, what it measures.
#[derive(Debug, Clone)]
pub(super) struct Ours<'a> {
    pub(super) index: usize,
    pub(super) record: &'a Event,
    pub(super) m: Measurement,
}

impl Ours<'_> {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.record.data).into_owned()
    }
}

/// Step 5: every record on PCR 11 and `pcr`, whatever its type, read as one of ours.
fn ours(records: &[Event], pcr: u32) -> Result<Vec<Ours<'_>>, VerifyError> {
    let mut out = Vec::new();
    for (i, e) in records.iter().enumerate() {
        if e.pcr != PHASE_PCR && e.pcr != pcr {
            continue;
        }
        let not_ours = |why: String| VerifyError::NotOurs {
            index: i + 1,
            pcr: e.pcr,
            why,
        };
        // systemd-stub's records (judged by `stub`) run before the kernel, so before ours.
        if let Some(section) = stub::section(e) {
            if !out.is_empty() {
                return Err(not_ours(format!(
                    "systemd-stub's event for {section} after the initramfs started: the stub runs before the kernel"
                )));
            }
            continue;
        }
        if e.event_type != EV_IPL {
            return Err(not_ours(format!(
                "{:?} has event type {:#x}; every record on PCRs {PHASE_PCR} and {pcr} is one of ours (EV_IPL)",
                String::from_utf8_lossy(&e.data),
                e.event_type
            )));
        }
        let m = Measurement::parse(e.pcr, &e.data, pcr).map_err(|err| not_ours(err.to_string()))?;
        let text = m.text();
        if let Some(data) = m.digested(&text, None) {
            for (id, d) in &e.digests {
                if let Some(h) = HashAlg::from_alg_id(*id) {
                    if h.digest(data) != *d {
                        return Err(not_ours(format!(
                            "{text:?}: its {h} digest is not the digest of what it names"
                        )));
                    }
                }
            }
        }
        out.push(Ours {
            index: i + 1,
            record: e,
            m,
        });
    }
    Ok(out)
}

/// Our records cut into boots at each `enter-initrd`; each boot's seal taken off its end
/// (every boot ends with one: the init seals before it falls back, hands over or stops).
fn boots<'a, 'b>(ours: &'b [Ours<'a>]) -> Result<Vec<&'b [Ours<'a>]>, VerifyError> {
    let mut starts = Vec::new();
    for (k, o) in ours.iter().enumerate() {
        if o.m == Measurement::Phase(Phase::EnterInitrd) {
            starts.push(k);
        } else if starts.is_empty() {
            return Err(VerifyError::NotOurs {
                index: o.index,
                pcr: o.record.pcr,
                why: format!("{:?} before any enter-initrd", o.text()),
            });
        }
    }
    if starts.is_empty() {
        return Err(VerifyError::Log(format!(
            "no boot of ours in the log (no enter-initrd in PCR {PHASE_PCR})"
        )));
    }
    let mut out = Vec::new();
    for (n, &from) in starts.iter().enumerate() {
        let to = starts.get(n + 1).copied().unwrap_or(ours.len());
        let boot = ours
            .get(from..to)
            .ok_or_else(|| VerifyError::Log(format!("boot {} has no events", n + 1)))?;
        match boot.split_last() {
            Some((last, rest)) if matches!(last.m, Measurement::Seal(_)) => out.push(rest),
            _ => return Err(SealError::BootUnsealed { boot: n + 1 }.into()),
        }
    }
    Ok(out)
}

/// Step 1: the report's JSON (no key twice at any level) and its typed form.
fn read_report(
    report_json: &[u8],
) -> Result<(serde_json::Value, crate::report::Report), VerifyError> {
    let v = crate::report::json::parse_value(report_json)
        .map_err(|e| VerifyError::Report(format!("not JSON: {e}")))?;
    let report: crate::report::Report = serde_json::from_value(v.clone())
        .map_err(|e| VerifyError::Report(format!("not a report: {e}")))?;
    Ok((v, report))
}

/// The one PCR the references measure into.
fn reference_pcr(references: &[Reference]) -> Result<u32, VerifyError> {
    let pcrs: BTreeSet<u32> = references.iter().map(|r| r.pcr).collect();
    let mut it = pcrs.into_iter();
    match (it.next(), it.next()) {
        (Some(p), None) => Ok(p),
        (None, _) => Err(VerifyError::NotAccepted("any (no reference given)".into())),
        (Some(_), Some(_)) => Err(VerifyError::Report(
            "the references measure into different PCRs".into(),
        )),
    }
}

/// Step 6 for one boot: the accepted reference entry it follows.
fn judge_boot<'r>(
    number: usize,
    boot: &[Ours<'_>],
    stub_seen: &[stub::Seen<'_>],
    references: &'r [Reference],
    pcr: u32,
) -> Result<(Boot, &'r SlotReference, Option<Measurement>), VerifyError> {
    // Every boot but the first was started by kexec (the log is carried over only then);
    // the first by the boot loader.
    let entry = if number == 1 {
        Entry::BootLoader
    } else {
        Entry::Kexec
    };
    let bom = boot.iter().find(|o| matches!(o.m, Measurement::Bom { .. }));
    let candidates: Vec<(&Reference, &SlotReference)> = references
        .iter()
        .flat_map(|r| r.slots.iter().map(move |s| (r, s)))
        .filter(|(_, s)| s.entry == entry)
        .filter(|(_, s)| {
            bom.is_some_and(|b| s.events.iter().any(|x| x.data.as_bytes() == b.record.data))
        })
        .collect();
    if candidates.is_empty() {
        return Err(VerifyError::NotAccepted(
            bom.map_or_else(|| "without a BOM event".into(), Ours::text),
        ));
    }
    // What systemd-stub measured before the first boot's kernel (nothing before a
    // kexec'd one: the log's stub records all precede our first).
    let seen: &[stub::Seen<'_>] = if number == 1 { stub_seen } else { &[] };
    let mut stub_miss = None;
    let candidates: Vec<_> = candidates
        .into_iter()
        .filter(|(_, s)| match stub::matches(seen, s.stub.as_ref()) {
            Ok(()) => true,
            Err(e) => {
                stub_miss.get_or_insert(e);
                false
            }
        })
        .collect();
    if let (true, Some((index, why))) = (candidates.is_empty(), stub_miss) {
        return Err(VerifyError::Stub { index, why });
    }
    let mut best: Option<(usize, String)> = None;
    for (r, s) in &candidates {
        match follow(boot, s, pcr) {
            Ok((decision, kexec)) => {
                return Ok((
                    Boot {
                        image_id: r.image_id.clone(),
                        slot: s.slot,
                        decision,
                    },
                    s,
                    kexec,
                ))
            }
            Err((k, want)) => {
                if best.as_ref().is_none_or(|(bk, _)| k > *bk) {
                    best = Some((k, want));
                }
            }
        }
    }
    let (k, expected) = best.unwrap_or((0, String::new()));
    Err(VerifyError::Event {
        boot: number,
        index: k + 1,
        expected,
        actual: boot.get(k).map_or("the end of the boot".into(), Ours::text),
    })
}

/// Verifies a boot's report (steps 1-9 of the module doc) with its event log's bytes.
pub fn verify_report(
    ak: &Public,
    references: &[Reference],
    report_json: &[u8],
    log_bytes: &[u8],
    policy: &Policy,
) -> Result<Verified, VerifyError> {
    let log = EventLog::parse(log_bytes).map_err(|e| VerifyError::Log(e.to_string()))?;
    verify_report_log(ak, references, report_json, &log, policy)
}

/// [`verify_report`] with the event log already parsed (a caller that read it to name a
/// log that does not parse, as the CLI does, parses it once).
pub fn verify_report_log(
    ak: &Public,
    references: &[Reference],
    report_json: &[u8],
    log: &EventLog,
    policy: &Policy,
) -> Result<Verified, VerifyError> {
    let (v, report) = read_report(report_json)?;
    let q = report
        .attestation
        .as_ref()
        .and_then(|a| a.quote.as_ref())
        .ok_or_else(|| {
            VerifyError::NotQuoted(
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
    let pcr = reference_pcr(references)?;
    judgeable(log)?;
    let attest = b64("attest", &q.attest)?;
    let (a, hash) = signed_quote(
        ak,
        &attest,
        &b64("signature", &q.signature)?,
        &crate::report::json::quoted_digest_of(&v),
        "the report's digest: the report was changed after the boot, or the quote is another report's",
    )?;
    let quoted = sealed_prefix(log, &attest, pcr)?;
    replays_to(&a, hash, quoted)?;
    check_selection(&a, log, references, pcr)?;
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
    let ours = ours(log.events(), pcr)?;
    let stub_seen = stub::seen(log.events());
    let found = boots(&ours)?;
    let mut out = Vec::new();
    let mut first = None;
    // What the previous boot measured it loaded by kexec.
    let mut loaded: Option<Measurement> = None;
    for (n, boot) in found.iter().enumerate() {
        let number = n + 1;
        let (b, entry, kexec) = judge_boot(number, boot, &stub_seen, references, pcr)?;
        if number == 1 {
            first = Some(entry);
        } else {
            check_kexec(number, &b, loaded.take(), references)?;
        }
        loaded = kexec;
        let last = number == found.len();
        let ok = if last {
            policy.accept.contains(&b.decision)
        } else {
            policy.allow_fallback && b.decision == Decision::Fallback
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
    if report.decision != last.decision {
        return Err(VerifyError::Inconsistent {
            field: "decision",
            report: report.decision.as_str().into(),
            measured: last.decision.as_str().into(),
        });
    }
    if report.image_id.as_deref() != Some(last.image_id.as_str()) {
        return Err(VerifyError::Inconsistent {
            field: "image_id",
            report: report.image_id.unwrap_or_default(),
            measured: last.image_id,
        });
    }
    // The boot loader's files of the entry the first boot followed.
    let first = first.ok_or_else(|| VerifyError::Log("no boot".into()))?;
    let files_checked = check_files(quoted, first)?;
    Ok(Verified {
        ak_name: crate::util::hex(&ak.name()),
        boots: out,
        clock: a.clock,
        files_checked,
    })
}

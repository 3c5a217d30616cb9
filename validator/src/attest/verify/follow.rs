//! Step 6 for one boot and one reference entry: how far the boot's events follow the
//! entry's prediction, up to the decision, the decision's own events and a kexec's.

use super::super::reference::{ExpectedEvent, SlotReference};
use super::{same_digests, Ours};
use crate::formats::tpm::measurement::{Decision, Measurement};

/// Whether the log's record is the predicted event: PCR, measurement and every digest in
/// a bank we know. Both texts are canonical (the record's was read back by
/// [`Measurement::parse`], the reference's by [`Reference::parse`] or made by
/// `predict`), so equal texts are equal measurements.
fn same(a: &Ours<'_>, x: &ExpectedEvent) -> bool {
    a.record.pcr == x.pcr
        && a.record.data == x.data.as_bytes()
        && same_digests(a.record, &x.digests)
}

/// How far a boot's events follow a slot's prediction: `Ok(decision)` when all of
/// them do, else the index (in the boot) of the first that does not, with the expected
/// text. A boot that passed must have measured every event but the optional ones, in
/// order; a boot that stopped short (any other decision) measured a part of them, in
/// order (a stage that failed measures what it did, e.g. the modules that loaded).
pub(super) fn follow(
    boot: &[Ours<'_>],
    s: &SlotReference,
    pcr: u32,
) -> Result<(Decision, Option<Measurement>), (usize, String)> {
    let exp = &s.events;
    let Some((dpos, decision)) = boot.iter().enumerate().find_map(|(k, a)| match a.m {
        Measurement::Decision(d) => Some((k, d)),
        _ => None,
    }) else {
        let want = exp
            .iter()
            .find(|x| !x.optional)
            .map_or("decision:<word>".to_string(), |x| x.data.clone());
        return Err((
            boot.len(),
            format!("{want} ... decision:<word> (the boot has no decision)"),
        ));
    };
    // A boot that went on into its root (pass, quarantine) ran every stage before the
    // handover: it measured every event but the optional ones.
    let strict = decision.hands_over();
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
    let ending =
        super::super::predict::decision_events(decision, pcr).map_err(|e| (k, e.to_string()))?;
    for x in ending {
        match boot.get(k) {
            Some(a) if same(a, &x) => k += 1,
            _ => return Err((k, x.data)),
        }
    }
    // A fallback by kexec measured what it loaded for the next boot.
    let mut kexec = None;
    if let Some(a) = boot.get(k).filter(|_| decision == Decision::Fallback) {
        if matches!(a.m, Measurement::Kexec { .. }) {
            kexec = Some(a.m.clone());
            k += 1;
        }
    }
    if boot.get(k).is_some() {
        return Err((k, "the end of the boot (its seal)".into()));
    }
    Ok((decision, kexec))
}

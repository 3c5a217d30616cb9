//! The records systemd-stub makes in PCR 11 before the kernel starts, when the slot boots
//! through a Unified Kernel Image ([`crate::formats::uki`]): read off the log apart from
//! ours, and judged against the reference entry the first boot follows.
//!
//! Contract: a record on PCR 11 of type `EV_IPL` whose data is the name of a section the
//! stub measures (UTF-16LE with its NUL, exactly) is the stub's; every such record must
//! come before the first record of ours (the stub runs before the kernel). The first
//! boot's entry must predict exactly these records: the same sections and parts in the
//! same order, each with the predicted digest in every bank the log records; an entry
//! with no stub admits none.

use super::super::reference::{StubPart, StubReference};
use super::same_digests;
use crate::formats::tpm::eventlog::{Event, EV_IPL};
use crate::formats::tpm::measurement::PHASE_PCR;

/// One record of the stub: its index in the log (from 1), the record, its section.
#[derive(Debug, Clone)]
pub(super) struct Seen<'a> {
    pub index: usize,
    pub record: &'a Event,
    pub section: &'static str,
}

/// The stub's section named by `e`, when `e` is one of the stub's records.
pub(super) fn section(e: &Event) -> Option<&'static str> {
    (e.pcr == PHASE_PCR && e.event_type == EV_IPL)
        .then(|| crate::formats::uki::section_of(&e.data))
        .flatten()
}

/// The stub's records in the log, in order.
pub(super) fn seen(records: &[Event]) -> Vec<Seen<'_>> {
    records
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            section(e).map(|section| Seen {
                index: i + 1,
                record: e,
                section,
            })
        })
        .collect()
}

/// Whether `seen` are the records `want` predicts; else why not (naming the log's
/// record).
pub(super) fn matches(
    seen: &[Seen<'_>],
    want: Option<&StubReference>,
) -> Result<(), (usize, String)> {
    let Some(want) = want else {
        return match seen.first() {
            None => Ok(()),
            Some(s) => Err((
                s.index,
                format!(
                    "PCR 11 holds {} events of systemd-stub (the first for {}), but the reference \
                     predicts no Unified Kernel Image for this slot",
                    seen.len(),
                    s.section
                ),
            )),
        };
    };
    for (k, x) in want.events.iter().enumerate() {
        let part = match x.part {
            StubPart::Name => "name",
            StubPart::Content => "content",
        };
        let Some(s) = seen.get(k) else {
            return Err((
                seen.last().map_or(0, |s| s.index),
                format!(
                    "systemd-stub measured {} events; the image's {} of {} is missing",
                    seen.len(),
                    part,
                    x.section
                ),
            ));
        };
        if s.section != x.section || !same_digests(s.record, &x.digests) {
            return Err((
                s.index,
                format!(
                    "systemd-stub's event for {} is not the image's {} of {} (a section that is not the accepted image's)",
                    s.section, part, x.section
                ),
            ));
        }
    }
    match seen.get(want.events.len()) {
        Some(s) => Err((
            s.index,
            format!(
                "systemd-stub measured {} events, the image {}: {} is not the image's",
                seen.len(),
                want.events.len(),
                s.section
            ),
        )),
        None => Ok(()),
    }
}

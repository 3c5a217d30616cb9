//! Our A/B state record: what the boot loader's few variables cannot hold - attempts per
//! slot image, the last decision and the last report of each slot, and the number of
//! consecutive failed boots - kept on the ESP in two copies.
//!
//! Each copy is a fixed-size file ([`FILE_SIZE`]): the magic `VGSTATE1`, a generation
//! number (little-endian u64), the payload's length (u32), the SHA-256 of generation,
//! length and payload, then the payload (JSON of [`State`]) and zero padding. A writer
//! rewrites the copy with the older (or broken) generation in place and syncs it, so a
//! power cut at any moment leaves the other copy whole; a reader takes the valid copy with
//! the newest generation ([`newest`]).
//!
//! Generations wrap: the next generation after 2^64-1 is 0, and "newer" is serial-number
//! arithmetic (RFC 1982, [`newer`]): `a` is newer than `b` when `a - b` modulo 2^64 is
//! between 1 and 2^63-1. The two copies are one write apart, so the copy written last is
//! always the newer one, before and after the wrap (a record never stops advancing).
//!
//! Contract: [`decode`] accepts only a copy whose checksum matches, and never panics on
//! any bytes; [`encode`] refuses a payload that does not fit rather than cutting it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The magic at the start of each copy.
pub const MAGIC: &[u8; 8] = b"VGSTATE1";
/// Header: magic, generation, length, SHA-256.
pub const HEADER: usize = 8 + 8 + 4 + 32;
/// The size of each copy on the ESP.
pub const FILE_SIZE: usize = 256 * 1024;
/// The file names of the two copies in the state directory.
pub const COPIES: [&str; 2] = ["state.0", "state.1"];

/// What we remember about one slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// The image this record is about (a new image in the slot starts a new record).
    pub image_id: Option<String>,
    pub bom_sha256: Option<String>,
    /// Boots of this image since it was last marked good.
    pub attempts: u32,
    /// The last verdict on this image: `Some(true)` marked good, `Some(false)` demoted.
    pub good: Option<bool>,
    pub last_decision: Option<String>,
    pub last_fault: Option<String>,
    pub last_reason: Option<String>,
    /// The last boot's report, as it was written.
    pub last_report: Option<serde_json::Value>,
}

/// The record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Boots in a row (either slot) that did not end in a usable system.
    pub consecutive_failures: u32,
    /// By slot name (`A`, `B`).
    pub slots: BTreeMap<String, SlotRecord>,
    /// The slot of the last boot that wrote the record.
    pub last_slot: Option<String>,
}

/// One decoded copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub generation: u64,
    pub state: State,
}

/// Why a copy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("state copy: {0}")]
    Invalid(String),
    #[error("state record of {need} bytes does not fit in {size}")]
    TooLarge { need: usize, size: usize },
}

fn invalid(why: impl Into<String>) -> StateError {
    StateError::Invalid(why.into())
}

fn digest(generation: u64, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(generation.to_le_bytes());
    h.update(
        u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    h.update(payload);
    h.finalize().into()
}

/// Encodes a copy of `size` bytes.
pub fn encode(r: &Record, size: usize) -> Result<Vec<u8>, StateError> {
    let payload = serde_json::to_vec(&r.state).map_err(|e| invalid(e.to_string()))?;
    let need = HEADER + payload.len();
    if need > size {
        return Err(StateError::TooLarge { need, size });
    }
    let len = u32::try_from(payload.len()).map_err(|_| StateError::TooLarge { need, size })?;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&r.generation.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&digest(r.generation, &payload));
    out.extend_from_slice(&payload);
    out.resize(size, 0);
    Ok(out)
}

/// Decodes one copy.
pub fn decode(bytes: &[u8]) -> Result<Record, StateError> {
    use crate::util::le::{u32_le, u64_le};
    if bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err(invalid("no VGSTATE1 magic"));
    }
    let generation = u64_le(bytes, 8).ok_or_else(|| invalid("truncated header"))?;
    let len = u32_le(bytes, 16).ok_or_else(|| invalid("truncated header"))?;
    let sum = bytes
        .get(20..HEADER)
        .ok_or_else(|| invalid("truncated header"))?;
    let len = usize::try_from(len).map_err(|_| invalid("length"))?;
    let payload = bytes
        .get(HEADER..HEADER.saturating_add(len))
        .ok_or_else(|| invalid(format!("payload of {len} bytes runs past the end")))?;
    if sum != digest(generation, payload) {
        return Err(invalid("checksum mismatch (a torn or damaged write)"));
    }
    let state: State =
        serde_json::from_slice(payload).map_err(|e| invalid(format!("payload: {e}")))?;
    Ok(Record { generation, state })
}

/// Whether generation `a` is newer than `b` (serial-number arithmetic, RFC 1982: the
/// module doc has the rule).
pub fn newer(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 63
}

/// The generation written after `g` (wrapping: after 2^64-1 comes 0).
pub fn next_generation(g: u64) -> u64 {
    g.wrapping_add(1)
}

/// The valid copy with the newest generation ([`newer`]), with its index (copy 0 on a
/// tie); `None` if neither is.
pub fn newest(copies: &[Result<Record, StateError>; 2]) -> Option<(usize, &Record)> {
    let mut best: Option<(usize, &Record)> = None;
    for (i, c) in copies.iter().enumerate() {
        if let Ok(r) = c {
            if best.is_none_or(|(_, b)| newer(r.generation, b.generation)) {
                best = Some((i, r));
            }
        }
    }
    best
}

/// Which copy to write next: the one not holding the newest valid record.
pub fn next_copy(copies: &[Result<Record, StateError>; 2]) -> usize {
    match newest(copies) {
        Some((0, _)) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(generation: u64) -> Record {
        let mut state = State {
            consecutive_failures: 1,
            ..State::default()
        };
        state.slots.insert(
            "A".into(),
            SlotRecord {
                image_id: Some("img".into()),
                attempts: 2,
                good: Some(false),
                last_report: Some(serde_json::json!({"decision": "fallback"})),
                ..SlotRecord::default()
            },
        );
        Record { generation, state }
    }

    #[test]
    fn round_trip_and_every_torn_write_is_caught() {
        let a = encode(&rec(7), 4096).unwrap();
        assert_eq!(a.len(), 4096);
        assert_eq!(decode(&a).unwrap(), rec(7));
        // A write cut at any byte (the rest still holding the old copy or zeros) is
        // refused; so is any flipped byte of header or payload.
        let old = encode(&rec(5), 4096).unwrap();
        let used = HEADER + serde_json::to_vec(&rec(7).state).unwrap().len();
        for cut in 0..used {
            let mut torn = a[..cut].to_vec();
            torn.extend_from_slice(&old[cut..]);
            if torn != a {
                assert!(
                    decode(&torn).is_err() || decode(&torn).unwrap() == rec(5),
                    "cut {cut}"
                );
            }
            let mut zeroed = a[..cut].to_vec();
            zeroed.resize(4096, 0);
            assert!(decode(&zeroed).is_err(), "cut {cut}");
            let mut f = a.clone();
            f[cut] ^= 0x40;
            assert!(decode(&f).is_err(), "flip {cut}");
        }
        assert!(decode(&[]).is_err());
        assert!(matches!(
            encode(&rec(1), 64),
            Err(StateError::TooLarge { .. })
        ));
    }

    #[test]
    fn newest_valid_copy_wins() {
        let ok = |g| Ok(rec(g));
        let bad = || Err(StateError::Invalid("x".into()));
        assert_eq!(newest(&[ok(3), ok(4)]).map(|(i, _)| i), Some(1));
        assert_eq!(next_copy(&[ok(3), ok(4)]), 0);
        assert_eq!(newest(&[ok(5), bad()]).map(|(i, _)| i), Some(0));
        assert_eq!(next_copy(&[ok(5), bad()]), 1);
        assert_eq!(newest(&[bad(), bad()]), None);
        assert_eq!(next_copy(&[bad(), bad()]), 0);
    }

    /// A record at generation 2^64-1 still advances: the next write is generation 0 and
    /// is the newest copy, whichever copy holds it; generations far apart compare by the
    /// serial-number rule.
    #[test]
    fn generation_wraps_and_stays_newest() {
        let top = u64::MAX;
        assert_eq!(next_generation(top), 0);
        for (a, b) in [(0, top), (1, 0), (5, top - 3), (top, top - 1)] {
            assert!(newer(a, b) && !newer(b, a), "{a} {b}");
        }
        assert!(!newer(7, 7));
        let copies = [Ok(rec(top)), Ok(rec(next_generation(top)))];
        assert_eq!(
            newest(&copies).map(|(i, r)| (i, r.generation)),
            Some((1, 0))
        );
        assert_eq!(next_copy(&copies), 0);
        let copies = [Ok(rec(0)), Ok(rec(top))];
        assert_eq!(newest(&copies).map(|(i, _)| i), Some(0));
        assert_eq!(next_copy(&copies), 1);
    }
}

//! systemd's userspace measurement log: TCG CEL-JSON records in an RFC 7464 JSON text
//! sequence, as `/run/log/systemd/tpm2-measure.log` holds them (systemd
//! `docs/TPM2_PCR_MEASUREMENTS.md`). Each record is `0x1E`, one JSON object, `0x0A`:
//!
//! ```text
//! {"pcr":11,"digests":[{"hashAlg":"sha256","digest":"<hex>"}],
//!  "content_type":"systemd","content":{"eventType":"phase","string":"enter-initrd"}}
//! ```
//!
//! [`CelRecord::to_bytes`] gives one record's bytes; the caller appends them to the file
//! (systemd takes `flock(LOCK_EX)` on it while writing). [`parse`] is strict: every
//! record must be terminated by its line feed, so a truncated last record is an error,
//! not a shorter log. Digests of algorithms other than SHA-1/256/384/512 are skipped.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{from_hex, replay_extend, to_hex, HashAlg, PcrValues, PCR_COUNT};

const RS: u8 = 0x1E;
const LF: u8 = 0x0A;

/// A malformed measurement log, naming the record (from 0) and its byte offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    #[error("measurement log: record {record} at byte {offset}: {why}")]
    Invalid {
        record: usize,
        offset: usize,
        why: String,
    },
}

/// One CEL-JSON record.
#[derive(Debug, Clone, PartialEq)]
pub struct CelRecord {
    pub pcr: u32,
    pub digests: Vec<(HashAlg, Vec<u8>)>,
    pub content_type: String,
    pub content: Value,
}

#[derive(Serialize, Deserialize)]
struct JsonDigest {
    #[serde(rename = "hashAlg")]
    hash_alg: String,
    digest: String,
}

#[derive(Serialize, Deserialize)]
struct JsonRecord {
    pcr: u32,
    digests: Vec<JsonDigest>,
    #[serde(default)]
    content_type: String,
    #[serde(default)]
    content: Value,
}

impl CelRecord {
    /// A systemd-style record measuring `string` (its bytes, without a terminator) into
    /// `pcr` in each bank, with `{"eventType": event_type, "string": string}` as content.
    pub fn systemd(pcr: u32, event_type: &str, string: &str, banks: &[HashAlg]) -> CelRecord {
        CelRecord {
            pcr,
            digests: banks
                .iter()
                .map(|b| (*b, b.digest(string.as_bytes())))
                .collect(),
            content_type: "systemd".to_string(),
            content: serde_json::json!({ "eventType": event_type, "string": string }),
        }
    }

    /// The record as one JSON text sequence element: `0x1E`, JSON, `0x0A`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let rec = JsonRecord {
            pcr: self.pcr,
            digests: self
                .digests
                .iter()
                .map(|(h, d)| JsonDigest {
                    hash_alg: h.name().to_string(),
                    digest: to_hex(d),
                })
                .collect(),
            content_type: self.content_type.clone(),
            content: self.content.clone(),
        };
        let mut v = vec![RS];
        // Serialising plain strings, numbers and a `Value` cannot fail.
        v.extend_from_slice(&serde_json::to_vec(&rec).unwrap_or_default());
        v.push(LF);
        v
    }
}

/// Parses a whole measurement log.
pub fn parse(bytes: &[u8]) -> Result<Vec<CelRecord>, CelError> {
    let mut records = Vec::new();
    let first = bytes.iter().position(|b| *b == RS).unwrap_or(bytes.len());
    let (lead, _) = bytes.split_at(first);
    if let Some(i) = lead.iter().position(|b| !b.is_ascii_whitespace()) {
        return Err(CelError::Invalid {
            record: 0,
            offset: i,
            why: "data before the first record separator (0x1E)".into(),
        });
    }
    let mut start = first;
    // Each record: RS, then its text up to the next RS (or the end).
    while let Some(after) = bytes.get(start + 1..) {
        let end = after
            .iter()
            .position(|b| *b == RS)
            .map_or(bytes.len(), |i| start + 1 + i);
        let record = records.len();
        let invalid = |why: String| CelError::Invalid {
            record,
            offset: start,
            why,
        };
        let text = after.get(..end - start - 1).unwrap_or_default();
        // Trailing whitespace after the line feed is tolerated, nothing else.
        let trimmed_len = text.len()
            - text
                .iter()
                .rev()
                .take_while(|b| b.is_ascii_whitespace() && **b != LF)
                .count();
        let Some(json) = text.get(..trimmed_len).and_then(|t| t.strip_suffix(&[LF])) else {
            return Err(invalid(
                "not terminated by a line feed (truncated record?)".into(),
            ));
        };
        let rec: JsonRecord =
            serde_json::from_slice(json).map_err(|e| invalid(format!("bad JSON: {e}")))?;
        if rec.pcr >= PCR_COUNT {
            return Err(invalid(format!(
                "PCR index {} does not exist (0-{})",
                rec.pcr,
                PCR_COUNT - 1
            )));
        }
        let mut digests: Vec<(HashAlg, Vec<u8>)> = Vec::with_capacity(rec.digests.len());
        for d in rec.digests {
            let Some(h) = HashAlg::from_name(&d.hash_alg) else {
                continue;
            };
            let raw = from_hex(&d.digest)
                .ok_or_else(|| invalid(format!("{h} digest {:?} is not hex", d.digest)))?;
            if raw.len() != h.size() {
                return Err(invalid(format!(
                    "{h} digest has {} bytes, expected {}",
                    raw.len(),
                    h.size()
                )));
            }
            if digests.iter().any(|(a, _)| *a == h) {
                return Err(invalid(format!("two {h} digests")));
            }
            digests.push((h, raw));
        }
        records.push(CelRecord {
            pcr: rec.pcr,
            digests,
            content_type: rec.content_type,
            content: rec.content,
        });
        start = end;
    }
    Ok(records)
}

/// The PCR values the records imply, per bank, for every PCR they touch, from zeros.
pub fn replay(records: &[CelRecord]) -> PcrValues {
    let mut values = PcrValues::new();
    for r in records {
        for (h, d) in &r.digests {
            replay_extend(&mut values, *h, r.pcr, d);
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    const BANKS: [HashAlg; 2] = [HashAlg::Sha256, HashAlg::Sha384];

    fn sample() -> Vec<CelRecord> {
        vec![
            CelRecord::systemd(11, "phase", "enter-initrd", &BANKS),
            CelRecord::systemd(11, "phase", "leave-initrd", &BANKS),
            CelRecord::systemd(15, "machine-id", "machine-id:0123", &BANKS),
        ]
    }

    #[test]
    fn record_bytes() {
        let r = CelRecord::systemd(11, "phase", "enter-initrd", &[HashAlg::Sha256]);
        let b = r.to_bytes();
        assert_eq!(b[0], 0x1E);
        assert_eq!(*b.last().unwrap(), b'\n');
        let text = std::str::from_utf8(&b[1..b.len() - 1]).unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"pcr\":11,\"digests\":[{{\"hashAlg\":\"sha256\",\"digest\":\"{}\"}}],\
                 \"content_type\":\"systemd\",\"content\":{{\"eventType\":\"phase\",\"string\":\"enter-initrd\"}}}}",
                to_hex(&HashAlg::Sha256.digest(b"enter-initrd"))
            )
        );
    }

    #[test]
    fn round_trip_and_replay() {
        let recs = sample();
        let bytes: Vec<u8> = recs.iter().flat_map(|r| r.to_bytes()).collect();
        let back = parse(&bytes).unwrap();
        assert_eq!(back, recs);
        let v = replay(&back);
        for h in BANKS {
            let z = vec![0u8; h.size()];
            let p11 = h.extend(
                &h.extend(&z, &h.digest(b"enter-initrd")),
                &h.digest(b"leave-initrd"),
            );
            assert_eq!(v[&h][&11], p11);
            assert_eq!(v[&h][&15], h.extend(&z, &h.digest(b"machine-id:0123")));
        }
        assert_eq!(v.len(), 2);
        assert!(parse(b"").unwrap().is_empty());
    }

    #[test]
    fn parses_systemd_written_records() {
        // As systemd writes it (content keys in its order), plus an unknown bank that is
        // skipped and an unknown extra field that is ignored.
        let d = to_hex(&HashAlg::Sha256.digest(b"sysinit"));
        let text = format!(
            "\x1e{{\"pcr\":11,\"digests\":[{{\"hashAlg\":\"sm3_256\",\"digest\":\"00\"}},{{\"hashAlg\":\"sha256\",\"digest\":\"{d}\"}}],\"content_type\":\"systemd\",\"content\":{{\"string\":\"sysinit\",\"eventType\":\"phase\"}},\"x\":1}}\n"
        );
        let r = parse(text.as_bytes()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].digests.len(), 1);
        assert_eq!(r[0].content["string"], "sysinit");
    }

    #[test]
    fn truncated_at_every_offset_is_an_error() {
        let recs = sample();
        let bytes: Vec<u8> = recs.iter().flat_map(|r| r.to_bytes()).collect();
        let mut ends = vec![0];
        let mut off = 0;
        for r in &recs {
            off += r.to_bytes().len();
            ends.push(off);
        }
        for n in 0..bytes.len() {
            let r = parse(&bytes[..n]);
            if ends.contains(&n) {
                assert!(r.is_ok(), "cut at {n}");
            } else {
                let e = r.unwrap_err();
                let CelError::Invalid { record, offset, .. } = &e;
                assert_eq!(*offset, ends[*record], "{e}");
            }
        }
    }

    #[test]
    fn malformed_records() {
        let good = CelRecord::systemd(9, "phase", "x", &[HashAlg::Sha1]).to_bytes();
        let s = String::from_utf8(good.clone()).unwrap();
        let hex = to_hex(&HashAlg::Sha1.digest(b"x"));
        let bad = |t: String| parse(t.as_bytes()).unwrap_err().to_string();
        assert!(bad(s.replace(&hex, "zz")).contains("sha1 digest \"zz\" is not hex"));
        assert!(bad(s.replace(&hex, "00")).contains("sha1 digest has 1 bytes, expected 20"));
        assert!(bad(s.replace("\"pcr\":9", "\"pcr\":-1")).contains("bad JSON"));
        assert!(bad(s.replace("\"pcr\":9,", "")).contains("missing field `pcr`"));
        for pcr in ["24", "4294967295"] {
            assert_eq!(
                bad(s.replace("\"pcr\":9", &format!("\"pcr\":{pcr}"))),
                format!(
                    "measurement log: record 0 at byte 0: PCR index {pcr} does not exist (0-23)"
                )
            );
        }
        let e = bad(format!("junk{s}"));
        assert_eq!(
            e,
            "measurement log: record 0 at byte 0: data before the first record separator (0x1E)"
        );
        let e = bad(format!("{s}{s}\x1e\n"));
        assert!(
            e.starts_with(&format!(
                "measurement log: record 2 at byte {}",
                2 * good.len()
            )),
            "{e}"
        );
        let two = s.replace(
            &format!("{{\"hashAlg\":\"sha1\",\"digest\":\"{hex}\"}}"),
            &format!("{{\"hashAlg\":\"sha1\",\"digest\":\"{hex}\"}},{{\"hashAlg\":\"SHA1\",\"digest\":\"{hex}\"}}"),
        );
        assert!(bad(two).contains("two sha1 digests"));
        // Trailing whitespace after the line feed is fine.
        assert_eq!(parse(format!("{s}  ").as_bytes()).unwrap().len(), 1);
    }
}

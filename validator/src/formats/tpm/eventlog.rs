//! The TCG PC Client event log (TCG PC Client Platform Firmware Profile §10): the format
//! of `/sys/kernel/security/tpm0/binary_bios_measurements`, and of the log the gate
//! writes for the PCRs it extends. Crypto-agile logs (below) and the legacy SHA-1 format
//! older firmware still writes on TPM 2.0 machines (`TCG_PCR_EVENT` records only: PCR,
//! type, SHA-1 digest, size, data; no Spec ID event) are both read, replayed and
//! continued in their own format: a legacy log records the SHA-1 digest alone, so only
//! the SHA-1 bank can be checked against it.
//!
//! Layout, all integers LITTLE-endian (unlike the TPM wire protocol):
//! - first record, `TCG_PCClientPCREvent` (SHA-1 format): pcrIndex 0, eventType
//!   `EV_NO_ACTION`, 20 zero bytes, eventDataSize, then `TCG_EfiSpecIDEvent`
//!   ("Spec ID Event03", the algorithms and their digest sizes, vendor info);
//! - then `TCG_PCR_EVENT2` records: pcrIndex, eventType, digest count, (algId, digest)
//!   pairs (sizes from the Spec ID event), eventSize, event data.
//!
//! Our records are `EV_IPL` events (the type shim, GRUB and systemd-stub use for what
//! they load and run) whose data is a description and whose digests are the digests of
//! that data, one per bank in the Spec ID event's order.

use super::{pcr_slot, replay_extend, HashAlg, PcrValues, PCR_COUNT};

/// `EV_NO_ACTION`: informational, not extended.
pub const EV_NO_ACTION: u32 = 0x0000_0003;
/// `EV_EVENT_TAG`.
pub const EV_EVENT_TAG: u32 = 0x0000_0006;
/// `EV_IPL`: the type of our records.
pub const EV_IPL: u32 = 0x0000_000D;
/// `EV_EFI_HCRTM_EVENT`: PCR 0 starts at locality 4.
const EV_EFI_HCRTM_EVENT: u32 = 0x8000_0010;

const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
/// What every Spec ID event's signature starts with ("Spec ID Event00" of TPM 1.2 too).
const SPEC_ID_PREFIX: &[u8] = b"Spec ID Event";
const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";
/// Size of the `TCG_PCClientPCREvent` header (pcr, type, SHA-1 digest, size).
const SHA1_EVENT_HEADER: usize = 4 + 4 + 20 + 4;

/// A malformed log, or a record that does not fit the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventLogError {
    #[error("event log truncated at byte {offset}: {what} needs {need} bytes, {left} left")]
    Truncated {
        offset: usize,
        what: &'static str,
        need: usize,
        left: usize,
    },
    #[error("event log: byte {offset}: {why}")]
    Invalid { offset: usize, why: String },
    #[error("event log: record does not fit the log: {0}")]
    Record(String),
}

/// An algorithm of the Spec ID event and its digest size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlgorithmSize {
    pub alg_id: u16,
    pub digest_size: u16,
}

/// `TCG_EfiSpecIDEvent`: the algorithms every record carries digests for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecIdEvent {
    pub platform_class: u32,
    pub spec_version_minor: u8,
    pub spec_version_major: u8,
    pub spec_errata: u8,
    pub uintn_size: u8,
    pub algorithms: Vec<AlgorithmSize>,
    pub vendor_info: Vec<u8>,
}

/// One `TCG_PCR_EVENT2` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub pcr: u32,
    pub event_type: u32,
    /// `(TPM_ALG_ID, digest)`, in the record's order.
    pub digests: Vec<(u16, Vec<u8>)>,
    pub data: Vec<u8>,
}

/// A crypto-agile event log: the Spec ID event and the records after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    spec: SpecIdEvent,
    events: Vec<Event>,
    /// The legacy SHA-1 format (`TCG_PCR_EVENT` records only, no Spec ID event), as
    /// older firmware writes it on TPM 2.0 machines: `spec` then lists SHA-1 alone.
    legacy: bool,
}

/// Little-endian reader over the log, reporting offsets.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], EventLogError> {
        let Some(s) = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
        else {
            return Err(EventLogError::Truncated {
                offset: self.pos,
                what,
                need: n,
                left: self.left(),
            });
        };
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], EventLogError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, EventLogError> {
        let [b] = self.array(what)?;
        Ok(b)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, EventLogError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, EventLogError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
}

impl SpecIdEvent {
    /// A Spec ID event for these banks, in this order: PC Client platform class, spec
    /// version 2.0 errata 0, UINTN of 8 bytes, no vendor info.
    pub fn for_banks(banks: &[HashAlg]) -> SpecIdEvent {
        SpecIdEvent {
            platform_class: 0,
            spec_version_minor: 0,
            spec_version_major: 2,
            spec_errata: 0,
            uintn_size: 2,
            algorithms: banks
                .iter()
                .map(|b| AlgorithmSize {
                    alg_id: b.alg_id(),
                    digest_size: u16::try_from(b.size()).unwrap_or(u16::MAX),
                })
                .collect(),
            vendor_info: Vec::new(),
        }
    }

    /// The banks of the algorithms we know, in the event's order.
    pub fn banks(&self) -> Vec<HashAlg> {
        self.algorithms
            .iter()
            .filter_map(|a| HashAlg::from_alg_id(a.alg_id))
            .collect()
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut v = SPEC_ID_SIGNATURE.to_vec();
        v.extend_from_slice(&self.platform_class.to_le_bytes());
        v.extend_from_slice(&[
            self.spec_version_minor,
            self.spec_version_major,
            self.spec_errata,
            self.uintn_size,
        ]);
        v.extend_from_slice(&len_u32(self.algorithms.len()).to_le_bytes());
        for a in &self.algorithms {
            v.extend_from_slice(&a.alg_id.to_le_bytes());
            v.extend_from_slice(&a.digest_size.to_le_bytes());
        }
        v.push(u8::try_from(self.vendor_info.len()).unwrap_or(u8::MAX));
        v.extend_from_slice(&self.vendor_info);
        v
    }

    fn size_of(&self, alg_id: u16) -> Option<usize> {
        self.algorithms
            .iter()
            .find(|a| a.alg_id == alg_id)
            .map(|a| usize::from(a.digest_size))
    }
}

impl EventLog {
    /// A new log for these banks (give the TPM's active banks, in its order), with no
    /// records yet.
    pub fn new(banks: &[HashAlg]) -> EventLog {
        EventLog {
            spec: SpecIdEvent::for_banks(banks),
            events: Vec::new(),
            legacy: false,
        }
    }

    /// Parses a whole log, crypto-agile (its first record is the "Spec ID Event03"
    /// event) or else the legacy SHA-1 format. Every record must fit exactly; a
    /// malformed or truncated log is an error naming the byte offset.
    pub fn parse(bytes: &[u8]) -> Result<EventLog, EventLogError> {
        if !is_crypto_agile(bytes) {
            let mut c = Cursor { buf: bytes, pos: 0 };
            let mut events = Vec::new();
            while c.left() > 0 {
                events.push(parse_sha1_event(&mut c)?);
            }
            if events.is_empty() {
                return Err(EventLogError::Invalid {
                    offset: 0,
                    why: "empty: no record".into(),
                });
            }
            return Ok(EventLog {
                spec: SpecIdEvent::for_banks(&[HashAlg::Sha1]),
                events,
                legacy: true,
            });
        }
        let mut c = Cursor { buf: bytes, pos: 0 };
        let spec = parse_spec_id(&mut c)?;
        let mut events = Vec::new();
        while c.left() > 0 {
            let at = c.pos;
            let e = parse_event2(&mut c, &spec)?;
            // A log has one header: a second one is another log appended to this one.
            if e.event_type == EV_NO_ACTION && e.data.starts_with(SPEC_ID_PREFIX) {
                return Err(EventLogError::Invalid {
                    offset: at,
                    why: "a second Spec ID event: one log holds one header".into(),
                });
            }
            events.push(e);
        }
        Ok(EventLog {
            spec,
            events,
            legacy: false,
        })
    }

    /// Whether the log is in the legacy SHA-1 format (a continued one stays in it).
    pub fn is_legacy(&self) -> bool {
        self.legacy
    }

    /// The Spec ID event.
    pub fn spec_id(&self) -> &SpecIdEvent {
        &self.spec
    }

    /// The records after the Spec ID event.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Appends an `EV_IPL` record for `pcr` whose data is `data` and whose digests are
    /// the digests of `data` in every bank of the log, and returns those digests, to
    /// extend the PCR with ([`crate::sys::tpm::Tpm::pcr_extend`]).
    pub fn measure(
        &mut self,
        pcr: u32,
        data: &[u8],
    ) -> Result<Vec<(HashAlg, Vec<u8>)>, EventLogError> {
        let mut digests = Vec::with_capacity(self.spec.algorithms.len());
        for a in &self.spec.algorithms {
            let Some(h) = HashAlg::from_alg_id(a.alg_id) else {
                return Err(EventLogError::Record(format!(
                    "cannot compute digests of algorithm {:#06x}",
                    a.alg_id
                )));
            };
            digests.push((h, h.digest(data)));
        }
        self.append(Event {
            pcr,
            event_type: EV_IPL,
            digests: digests
                .iter()
                .map(|(h, d)| (h.alg_id(), d.clone()))
                .collect(),
            data: data.to_vec(),
        })?;
        Ok(digests)
    }

    /// Appends a record, which must carry one digest per algorithm of the Spec ID event,
    /// in that order and of those sizes.
    pub fn append(&mut self, event: Event) -> Result<(), EventLogError> {
        let algs = &self.spec.algorithms;
        if event.digests.len() != algs.len()
            || event
                .digests
                .iter()
                .zip(algs)
                .any(|((id, d), a)| *id != a.alg_id || d.len() != usize::from(a.digest_size))
        {
            let have: Vec<String> = event
                .digests
                .iter()
                .map(|(id, d)| format!("{id:#06x}/{}", d.len()))
                .collect();
            let want: Vec<String> = algs
                .iter()
                .map(|a| format!("{:#06x}/{}", a.alg_id, a.digest_size))
                .collect();
            return Err(EventLogError::Record(format!(
                "digests [{}] (algorithm/size), the log needs [{}]",
                have.join(", "),
                want.join(", ")
            )));
        }
        if u32::try_from(event.data.len()).is_err() {
            return Err(EventLogError::Record("event data over 4 GiB".into()));
        }
        if event.pcr >= PCR_COUNT {
            return Err(EventLogError::Record(format!(
                "PCR {} does not exist (0-{})",
                event.pcr,
                PCR_COUNT - 1
            )));
        }
        self.events.push(event);
        Ok(())
    }

    /// The log as bytes: the Spec ID event, then every record (a legacy log: every
    /// record as `TCG_PCR_EVENT`).
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.legacy {
            let mut v = Vec::with_capacity(64 * self.events.len());
            for e in &self.events {
                v.extend_from_slice(&e.pcr.to_le_bytes());
                v.extend_from_slice(&e.event_type.to_le_bytes());
                // `append` and the parser keep exactly one SHA-1 digest per record.
                let d = e
                    .digests
                    .first()
                    .map_or(&[0u8; 20][..], |(_, d)| d.as_slice());
                v.extend_from_slice(d);
                v.extend_from_slice(&len_u32(e.data.len()).to_le_bytes());
                v.extend_from_slice(&e.data);
            }
            return v;
        }
        let spec = self.spec.to_bytes();
        let mut v = Vec::with_capacity(SHA1_EVENT_HEADER + spec.len() + 128 * self.events.len());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&EV_NO_ACTION.to_le_bytes());
        v.extend_from_slice(&[0u8; 20]);
        v.extend_from_slice(&len_u32(spec.len()).to_le_bytes());
        v.extend_from_slice(&spec);
        for e in &self.events {
            v.extend_from_slice(&e.pcr.to_le_bytes());
            v.extend_from_slice(&e.event_type.to_le_bytes());
            v.extend_from_slice(&len_u32(e.digests.len()).to_le_bytes());
            for (id, d) in &e.digests {
                v.extend_from_slice(&id.to_le_bytes());
                v.extend_from_slice(d);
            }
            v.extend_from_slice(&len_u32(e.data.len()).to_le_bytes());
            v.extend_from_slice(&e.data);
        }
        v
    }

    /// The PCR values the log implies, per bank, for every PCR it touches, as
    /// `tpm2_eventlog` computes them: every PCR starts at zeros; `EV_NO_ACTION` records
    /// are not extended, but a "StartupLocality" one on PCR 0 sets PCR 0's last byte to
    /// the locality; `EV_EFI_HCRTM_EVENT` sets it to 4 before extending. Both only say
    /// where PCR 0 starts, so they count only before PCR 0's first extend (a later one
    /// cannot change what the TPM already holds). Digests of algorithms we do not support
    /// are skipped.
    pub fn replay(&self) -> PcrValues {
        replay_events(&self.events)
    }
}

/// [`EventLog::replay`] of these records (a log's first records: what the PCRs held when
/// they had been extended).
pub fn replay_events(events: &[Event]) -> PcrValues {
    let mut values = PcrValues::new();
    let mut hcrtm = false;
    // Banks whose PCR 0 has been extended.
    let mut extended0 = std::collections::BTreeSet::new();
    for e in events {
        let locality = if e.event_type == EV_NO_ACTION && e.pcr == 0 && !hcrtm {
            startup_locality(&e.data)
        } else {
            None
        };
        if e.event_type == EV_EFI_HCRTM_EVENT && e.pcr == 0 {
            hcrtm = true;
        }
        for (id, d) in &e.digests {
            let Some(h) = HashAlg::from_alg_id(*id) else {
                continue;
            };
            if d.len() != h.size() {
                continue;
            }
            let starting = e.pcr == 0 && !extended0.contains(&h);
            let slot = pcr_slot(&mut values, h, e.pcr);
            if starting && e.event_type == EV_EFI_HCRTM_EVENT {
                if let Some(last) = slot.last_mut() {
                    *last = 4;
                }
            } else if let Some(l) = locality.filter(|l| *l > 0 && starting) {
                if let Some(last) = slot.last_mut() {
                    *last = l;
                }
            }
            if e.event_type != EV_NO_ACTION {
                replay_extend(&mut values, h, e.pcr, d);
                if e.pcr == 0 {
                    extended0.insert(h);
                }
            }
        }
    }
    values
}

/// The locality of a "StartupLocality" `EV_NO_ACTION` event's data.
fn startup_locality(data: &[u8]) -> Option<u8> {
    data.strip_prefix(STARTUP_LOCALITY_SIGNATURE)?
        .first()
        .copied()
}

/// Whether `bytes` starts with a crypto-agile log's Spec ID event (PCR 0,
/// `EV_NO_ACTION`, the "Spec ID Event03" signature); anything else is read as the legacy
/// SHA-1 format (TPM 1.2's "Spec ID Event00" logs included).
fn is_crypto_agile(bytes: &[u8]) -> bool {
    let ty = bytes
        .get(4..8)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes);
    let sig = bytes.get(SHA1_EVENT_HEADER..SHA1_EVENT_HEADER + SPEC_ID_SIGNATURE.len());
    ty == Some(EV_NO_ACTION) && sig == Some(&SPEC_ID_SIGNATURE[..])
}

/// One `TCG_PCR_EVENT` (the legacy format): PCR, type, SHA-1 digest, size, data.
fn parse_sha1_event(c: &mut Cursor<'_>) -> Result<Event, EventLogError> {
    let pcr_at = c.pos;
    let pcr = c.u32("TCG_PCR_EVENT pcrIndex")?;
    if pcr >= PCR_COUNT {
        return Err(EventLogError::Invalid {
            offset: pcr_at,
            why: format!("PCR index {pcr} does not exist (0-{})", PCR_COUNT - 1),
        });
    }
    let event_type = c.u32("TCG_PCR_EVENT eventType")?;
    let digest = c.bytes(20, "TCG_PCR_EVENT digest")?.to_vec();
    let n = c.u32("TCG_PCR_EVENT eventDataSize")? as usize;
    let data = c.bytes(n, "event data")?.to_vec();
    Ok(Event {
        pcr,
        event_type,
        digests: vec![(HashAlg::Sha1.alg_id(), digest)],
        data,
    })
}

fn parse_spec_id(c: &mut Cursor<'_>) -> Result<SpecIdEvent, EventLogError> {
    let start = c.pos;
    let pcr = c.u32("Spec ID event pcrIndex")?;
    let ty = c.u32("Spec ID event eventType")?;
    let digest = c.bytes(20, "Spec ID event digest")?;
    let size_at = c.pos;
    let size = c.u32("Spec ID event eventDataSize")?;
    let invalid = |offset: usize, why: String| EventLogError::Invalid { offset, why };
    if ty != EV_NO_ACTION {
        return Err(invalid(
            start + 4,
            format!("first record has eventType {ty:#x}, not EV_NO_ACTION: not a crypto-agile log"),
        ));
    }
    if pcr != 0 {
        return Err(invalid(start, format!("Spec ID event on PCR {pcr}, not 0")));
    }
    if digest.iter().any(|b| *b != 0) {
        return Err(invalid(
            start + 8,
            "Spec ID event digest is not zero".into(),
        ));
    }
    let data_start = c.pos;
    let sig = c.bytes(16, "Spec ID signature")?;
    if sig != SPEC_ID_SIGNATURE {
        return Err(invalid(
            data_start,
            format!(
                "signature {:?}, expected \"Spec ID Event03\"",
                String::from_utf8_lossy(sig)
            ),
        ));
    }
    let platform_class = c.u32("platformClass")?;
    let spec_version_minor = c.u8("specVersionMinor")?;
    let spec_version_major = c.u8("specVersionMajor")?;
    let spec_errata = c.u8("specErrata")?;
    let uintn_size = c.u8("uintnSize")?;
    let n_at = c.pos;
    let n = c.u32("numberOfAlgorithms")? as usize;
    if n == 0 {
        return Err(invalid(n_at, "numberOfAlgorithms is 0".into()));
    }
    if n.saturating_mul(4) > c.left() {
        return Err(EventLogError::Truncated {
            offset: c.pos,
            what: "digestSizes",
            need: n.saturating_mul(4),
            left: c.left(),
        });
    }
    let mut algorithms = Vec::with_capacity(n);
    for _ in 0..n {
        let at = c.pos;
        let alg_id = c.u16("algorithmId")?;
        let digest_size = c.u16("digestSize")?;
        if let Some(h) = HashAlg::from_alg_id(alg_id) {
            if usize::from(digest_size) != h.size() {
                return Err(invalid(
                    at,
                    format!("{h} digest size {digest_size}, expected {}", h.size()),
                ));
            }
        }
        if digest_size == 0 {
            return Err(invalid(
                at,
                format!("algorithm {alg_id:#06x} has digest size 0"),
            ));
        }
        if algorithms
            .iter()
            .any(|a: &AlgorithmSize| a.alg_id == alg_id)
        {
            return Err(invalid(at, format!("algorithm {alg_id:#06x} listed twice")));
        }
        algorithms.push(AlgorithmSize {
            alg_id,
            digest_size,
        });
    }
    let vn = c.u8("vendorInfoSize")?;
    let vendor_info = c.bytes(usize::from(vn), "vendorInfo")?.to_vec();
    let used = c.pos - data_start;
    if used != size as usize {
        return Err(invalid(
            size_at,
            format!("Spec ID eventDataSize {size}, but its contents take {used} bytes"),
        ));
    }
    Ok(SpecIdEvent {
        platform_class,
        spec_version_minor,
        spec_version_major,
        spec_errata,
        uintn_size,
        algorithms,
        vendor_info,
    })
}

fn parse_event2(c: &mut Cursor<'_>, spec: &SpecIdEvent) -> Result<Event, EventLogError> {
    let pcr_at = c.pos;
    let pcr = c.u32("TCG_PCR_EVENT2 pcrIndex")?;
    if pcr >= PCR_COUNT {
        return Err(EventLogError::Invalid {
            offset: pcr_at,
            why: format!("PCR index {pcr} does not exist (0-{})", PCR_COUNT - 1),
        });
    }
    let event_type = c.u32("TCG_PCR_EVENT2 eventType")?;
    let count_at = c.pos;
    let count = c.u32("TCG_PCR_EVENT2 digest count")? as usize;
    // TCG PC Client PFP: every record carries one digest per bank of the Spec ID event; a
    // record without one could be counted by a reader and skipped by the replay.
    if count != spec.algorithms.len() {
        return Err(EventLogError::Invalid {
            offset: count_at,
            why: format!(
                "{count} digests, but the Spec ID event declares {} algorithms and every record carries one of each",
                spec.algorithms.len()
            ),
        });
    }
    let mut digests = Vec::with_capacity(count);
    for _ in 0..count {
        let at = c.pos;
        let id = c.u16("digest algorithmId")?;
        let Some(size) = spec.size_of(id) else {
            return Err(EventLogError::Invalid {
                offset: at,
                why: format!("digest algorithm {id:#06x} is not in the Spec ID event"),
            });
        };
        if digests.iter().any(|(d, _)| *d == id) {
            return Err(EventLogError::Invalid {
                offset: at,
                why: format!("two digests of algorithm {id:#06x}"),
            });
        }
        digests.push((id, c.bytes(size, "digest")?.to_vec()));
    }
    let n = c.u32("TCG_PCR_EVENT2 eventSize")? as usize;
    let data = c.bytes(n, "event data")?.to_vec();
    Ok(Event {
        pcr,
        event_type,
        digests,
        data,
    })
}

/// A length as the log's 32-bit count field; saturates (a log we write never holds
/// 4 GiB in one field, and the parser rejects what does not fit).
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;

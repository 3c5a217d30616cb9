//! Our measurements: the one vocabulary of the events the init extends into the TPM,
//! `attest predict` predicts and `attest verify` judges, and the PCR plan they follow.
//!
//! Contract: every event of ours is a [`Measurement`]; [`Measurement::text`] is the one
//! place its event-log data is formatted, [`Measurement::parse`] the one place it is read
//! back (a text that does not render back to the same bytes is refused, so two texts
//! never name one event), [`Measurement::pcr`] the one place its PCR is chosen and
//! [`Measurement::content`] the one place it says which bytes are digested. The PCR plan
//! ([`PHASE_PCR`], [`DEFAULT_PCR`], [`PINNED_PCRS`], [`BOOT_LOADER_FILE_PCR`]) lives here
//! and nowhere else.
//!
//! The events, in the order a boot makes them (`docs/ATTESTATION.md`, "The PCR plan"):
//! `enter-initrd` (PCR 11); `bom:<image_id> sha256:<hex>` (digest of the BOM's bytes);
//! `cmdline:<line>` (digest of `/proc/cmdline`'s bytes); `module:<name> sha256:<hex>` (digest
//! of the text); `verity-root-hash:<hex>` (digest of the hex text, what was signed);
//! `decision:<word>`; `leave-initrd` (PCR 11, when the boot goes on), or after a
//! `fallback` by kexec `kexec:<slot> kernel sha256:<hex> initrd sha256:<hex>` (what the
//! init loaded for the other slot); and last
//! `sealed:sha256:<hex of the SHA-256 of the quote's TPMS_ATTEST>` or `sealed:unquoted`,
//! extended after the boot's quote so that no later quote can show the PCR values the
//! init's quote signed.
//!
//! Current limits: the text of a command line that is not UTF-8 replaces the bad bytes
//! (its digest is still of the raw bytes).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The PCR systemd-pcrphase uses for the boot phases (`enter-initrd`, `leave-initrd`).
pub const PHASE_PCR: u32 = 11;
/// Our PCR unless the BOM's `[measure] pcr` names another.
pub const DEFAULT_PCR: u32 = 13;
/// The PCR into which GRUB measures the files it reads (the slot's kernel and initramfs).
pub const BOOT_LOADER_FILE_PCR: u32 = 9;
/// The PCRs every quote covers besides ours and the phase PCR, and that a fleet pins per
/// hardware model: firmware, Secure Boot policy and boot loader (0-9), and shim's MOK
/// lists (14: the keys a Secure Boot kernel trusts for modules besides its own and `db`'s).
pub const PINNED_PCRS: [u32; 11] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14];

/// What the boot does next: the decision the report states and the log measures.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Hand over to the real root; the slot is good.
    Pass,
    /// Hand over, but the hardware is not what the BOM promises: the fleet drains the
    /// node; the slot is not burned.
    Quarantine,
    /// The image is bad: demote this slot and boot the other one (kexec or reboot).
    Fallback,
    /// Stop in a safe state with the report on the console (no usable root, both slots
    /// bad, the bound on failed boots reached, or a platform fault the policy stops on).
    Stop,
}

impl Decision {
    /// Every decision.
    pub const ALL: [Decision; 4] = [
        Decision::Pass,
        Decision::Quarantine,
        Decision::Fallback,
        Decision::Stop,
    ];

    /// The word the report, the log and the measurement use.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Pass => "pass",
            Decision::Quarantine => "quarantine",
            Decision::Fallback => "fallback",
            Decision::Stop => "stop",
        }
    }

    /// The decision a word names.
    pub fn from_word(w: &str) -> Option<Decision> {
        Decision::ALL.into_iter().find(|d| d.as_str() == w)
    }

    /// Whether the boot goes on into the real root.
    pub fn hands_over(self) -> bool {
        matches!(self, Decision::Pass | Decision::Quarantine)
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is no [`Decision`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a decision (pass, quarantine, fallback or stop)")]
pub struct NotADecision(pub String);

impl std::str::FromStr for Decision {
    type Err = NotADecision;
    fn from_str(s: &str) -> Result<Decision, NotADecision> {
        Decision::from_word(s).ok_or_else(|| NotADecision(s.to_string()))
    }
}

/// A systemd-pcrphase phase word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    EnterInitrd,
    LeaveInitrd,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::EnterInitrd => "enter-initrd",
            Phase::LeaveInitrd => "leave-initrd",
        }
    }
}

/// The event that closes a boot, after its quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// The SHA-256 of the `TPMS_ATTEST` the TPM signed for this boot's report.
    Quote([u8; 32]),
    /// No quote was made (none asked for, or the TPM refused it).
    Unquoted,
}

/// One event of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Measurement {
    Phase(Phase),
    /// The BOM: its `image_id` and the SHA-256 of its bytes (lower-case hex).
    Bom {
        image_id: String,
        sha256: String,
    },
    /// The kernel command line as text.
    Cmdline(String),
    /// A loaded module: its name, the SHA-256 of the image the kernel was given and the
    /// parameters it was given with it (empty: none; the text then ends at the digest, as
    /// before options were measured).
    Module {
        name: String,
        sha256: String,
        options: String,
    },
    /// The verity root hash, lower-case hex.
    VerityRootHash(String),
    Decision(Decision),
    /// A boot falling back by kexec: the slot it starts and the SHA-256 (lower-case hex)
    /// of the kernel and of the initramfs it loaded (as read from the ESP, before this
    /// boot's report and log are appended to the initramfs).
    Kexec {
        slot: String,
        kernel_sha256: String,
        initrd_sha256: String,
    },
    Seal(Seal),
}

/// Which bytes an event's digests are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content<'a> {
    /// The event's own text.
    Text,
    /// These bytes (the root hash's hex text).
    Bytes(&'a [u8]),
    /// Bytes the measurer holds: the BOM file, the raw command line.
    External,
}

/// An event's data that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeasurementError {
    #[error("PCR {pcr}: {text:?} is not an event of ours")]
    Unknown { pcr: u32, text: String },
    #[error("PCR {pcr}: {text:?} is an event of ours on the wrong PCR (it belongs on PCR {want})")]
    WrongPcr { pcr: u32, want: u32, text: String },
}

const SHA256_PREFIX: &str = "sha256:";

fn is_hex(s: &str, len: Option<usize>) -> bool {
    !s.is_empty()
        && len.is_none_or(|l| s.len() == l)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Measurement {
    /// The event's data in the log (and in systemd's CEL log), the one place it is made.
    pub fn text(&self) -> String {
        match self {
            Measurement::Phase(p) => p.as_str().to_string(),
            Measurement::Bom { image_id, sha256 } => format!("bom:{image_id} sha256:{sha256}"),
            Measurement::Cmdline(line) => format!("cmdline:{line}"),
            Measurement::Module {
                name,
                sha256,
                options,
            } if options.is_empty() => format!("module:{name} sha256:{sha256}"),
            Measurement::Module {
                name,
                sha256,
                options,
            } => format!("module:{name} sha256:{sha256} options:{options}"),
            Measurement::VerityRootHash(h) => format!("verity-root-hash:{h}"),
            Measurement::Decision(d) => format!("decision:{}", d.as_str()),
            Measurement::Kexec {
                slot,
                kernel_sha256,
                initrd_sha256,
            } => format!(
                "kexec:{slot} kernel {SHA256_PREFIX}{kernel_sha256} initrd {SHA256_PREFIX}{initrd_sha256}"
            ),
            Measurement::Seal(Seal::Quote(d)) => {
                format!("sealed:{SHA256_PREFIX}{}", crate::util::hex(d))
            }
            Measurement::Seal(Seal::Unquoted) => "sealed:unquoted".into(),
        }
    }

    /// The PCR it goes into: the phase words into [`PHASE_PCR`], everything else into
    /// `ours` (the BOM's `[measure] pcr`).
    pub fn pcr(&self, ours: u32) -> u32 {
        match self {
            Measurement::Phase(_) => PHASE_PCR,
            _ => ours,
        }
    }

    /// The bytes whose digests are extended.
    pub fn content(&self) -> Content<'_> {
        match self {
            Measurement::Bom { .. } | Measurement::Cmdline(_) => Content::External,
            Measurement::VerityRootHash(h) => Content::Bytes(h.as_bytes()),
            _ => Content::Text,
        }
    }

    /// The bytes digested, given the text and the external bytes (the BOM file, the raw
    /// command line); `None` when the event needs external bytes that were not given.
    pub fn digested<'a>(&'a self, text: &'a str, external: Option<&'a [u8]>) -> Option<&'a [u8]> {
        match self.content() {
            Content::Text => Some(text.as_bytes()),
            Content::Bytes(b) => Some(b),
            Content::External => external,
        }
    }

    /// The kind systemd's CEL-JSON log gives the event (`content.eventType`).
    pub fn cel_kind(&self) -> &'static str {
        match self {
            Measurement::Phase(_) => "phase",
            Measurement::Bom { .. } => "validator-bom",
            Measurement::Cmdline(_) => "validator-cmdline",
            Measurement::Module { .. } => "validator-module",
            Measurement::VerityRootHash(_) => "validator-verity",
            Measurement::Decision(_) => "validator-decision",
            Measurement::Kexec { .. } => "validator-kexec",
            Measurement::Seal(_) => "validator-seal",
        }
    }

    /// Reads an event of ours back from its PCR and data. Refuses data that is not one of
    /// our events, one on another PCR than its own, and any text that does not render
    /// back to the same bytes.
    pub fn parse(pcr: u32, data: &[u8], ours: u32) -> Result<Measurement, MeasurementError> {
        let text = String::from_utf8_lossy(data);
        let unknown = || MeasurementError::Unknown {
            pcr,
            text: text.to_string(),
        };
        let m = std::str::from_utf8(data)
            .ok()
            .and_then(Measurement::from_text)
            .ok_or_else(unknown)?;
        if m.text().as_bytes() != data {
            return Err(unknown());
        }
        let want = m.pcr(ours);
        if want != pcr {
            return Err(MeasurementError::WrongPcr {
                pcr,
                want,
                text: text.to_string(),
            });
        }
        Ok(m)
    }

    fn from_text(t: &str) -> Option<Measurement> {
        if t == Phase::EnterInitrd.as_str() {
            return Some(Measurement::Phase(Phase::EnterInitrd));
        }
        if t == Phase::LeaveInitrd.as_str() {
            return Some(Measurement::Phase(Phase::LeaveInitrd));
        }
        let (kind, rest) = t.split_once(':')?;
        let named = |rest: &str| -> Option<(String, String)> {
            let (name, sha) = rest.rsplit_once(' ')?;
            let sha = sha.strip_prefix(SHA256_PREFIX)?;
            (!name.is_empty() && is_hex(sha, Some(64))).then(|| (name.to_string(), sha.to_string()))
        };
        match kind {
            "bom" => named(rest).map(|(image_id, sha256)| Measurement::Bom { image_id, sha256 }),
            "cmdline" => Some(Measurement::Cmdline(rest.to_string())),
            "module" => {
                // The name has no space; the digest is fixed-length; the options are the
                // rest.
                let (name, rest) = rest.split_once(' ')?;
                let (digest, options) = match rest.split_once(" options:") {
                    Some((d, o)) => (d, o.to_string()),
                    None => (rest, String::new()),
                };
                let sha = digest.strip_prefix(SHA256_PREFIX)?;
                (!name.is_empty() && is_hex(sha, Some(64))).then(|| Measurement::Module {
                    name: name.to_string(),
                    sha256: sha.to_string(),
                    options,
                })
            }
            "verity-root-hash" => {
                is_hex(rest, None).then(|| Measurement::VerityRootHash(rest.to_string()))
            }
            "decision" => Decision::from_word(rest).map(Measurement::Decision),
            "kexec" => {
                let mut w = rest.split(' ');
                let (Some(slot), Some("kernel"), Some(k), Some("initrd"), Some(i), None) =
                    (w.next(), w.next(), w.next(), w.next(), w.next(), w.next())
                else {
                    return None;
                };
                let hex = |s: &str| {
                    s.strip_prefix(SHA256_PREFIX)
                        .filter(|h| is_hex(h, Some(64)))
                        .map(str::to_string)
                };
                (!slot.is_empty()).then_some(())?;
                Some(Measurement::Kexec {
                    slot: slot.to_string(),
                    kernel_sha256: hex(k)?,
                    initrd_sha256: hex(i)?,
                })
            }
            "sealed" if rest == "unquoted" => Some(Measurement::Seal(Seal::Unquoted)),
            "sealed" => {
                let hex = rest.strip_prefix(SHA256_PREFIX)?;
                let b = crate::util::unhex(hex).filter(|_| is_hex(hex, Some(64)))?;
                <[u8; 32]>::try_from(b.as_slice())
                    .ok()
                    .map(|d| Measurement::Seal(Seal::Quote(d)))
            }
            _ => None,
        }
    }

    /// The events that end a boot with `decision`: the word into our PCR, then
    /// `leave-initrd` when the boot goes on into the root.
    pub fn decision_events(decision: Decision) -> Vec<Measurement> {
        let mut v = vec![Measurement::Decision(decision)];
        if decision.hands_over() {
            v.push(Measurement::Phase(Phase::LeaveInitrd));
        }
        v
    }
}

impl fmt::Display for Measurement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Measurement> {
        let h = "ab".repeat(32);
        vec![
            Measurement::Phase(Phase::EnterInitrd),
            Measurement::Bom {
                image_id: "img-1 x".into(),
                sha256: h.clone(),
            },
            Measurement::Cmdline("BOOT_IMAGE=/A/vmlinuz a=\"b c\"".into()),
            Measurement::Cmdline(String::new()),
            Measurement::Module {
                name: "dm_verity".into(),
                sha256: h.clone(),
                options: String::new(),
            },
            Measurement::Module {
                name: "nvidia".into(),
                sha256: h.clone(),
                options: "NVreg_A=1  NVreg_B=\"x y\" options:z".into(),
            },
            Measurement::VerityRootHash(h.clone()),
            Measurement::Decision(Decision::Fallback),
            Measurement::Kexec {
                slot: "B".into(),
                kernel_sha256: h.clone(),
                initrd_sha256: "cd".repeat(32),
            },
            Measurement::Phase(Phase::LeaveInitrd),
            Measurement::Seal(Seal::Quote([7; 32])),
            Measurement::Seal(Seal::Unquoted),
        ]
    }

    /// Every event renders to one text and reads back to itself on its own PCR only.
    #[test]
    fn every_event_reads_back_on_its_own_pcr_only() {
        for m in every_kind() {
            let t = m.text();
            let pcr = m.pcr(13);
            assert_eq!(
                Measurement::parse(pcr, t.as_bytes(), 13),
                Ok(m.clone()),
                "{t}"
            );
            let other = if pcr == 11 { 13 } else { 11 };
            assert!(
                matches!(
                    Measurement::parse(other, t.as_bytes(), 13),
                    Err(MeasurementError::WrongPcr { .. })
                ),
                "{t} on PCR {other}"
            );
        }
        assert_eq!(
            Measurement::parse(16, b"decision:pass", 16),
            Ok(Measurement::Decision(Decision::Pass))
        );
    }

    /// Texts that are near ours but not ours: refused, never read as another event.
    #[test]
    fn near_misses_are_refused() {
        let h = "ab".repeat(32);
        for bad in [
            "enter-initrd ".to_string(),
            "Enter-initrd".into(),
            "decision:PASS".into(),
            "decision:".into(),
            format!("module:dm_verity sha256:{}", "AB".repeat(32)),
            format!("module:dm verity sha256:{h}"),
            format!("module: sha256:{h}"),
            format!("module:x sha256:{}", &h[2..]),
            format!("bom:img sha1:{h}"),
            "verity-root-hash:".into(),
            "verity-root-hash:xyz".into(),
            "sealed:".into(),
            format!("sealed:sha256:{}", "cd".repeat(31)),
            "sealed:quoted".into(),
            format!("kexec:B kernel sha256:{h}"),
            format!("kexec:B kernel sha256:{h} initrd sha256:{h} x"),
            format!("kexec: kernel sha256:{h} initrd sha256:{h}"),
            format!("kexec:B initrd sha256:{h} kernel sha256:{h}"),
            "quoted".into(),
            String::new(),
        ] {
            assert!(
                Measurement::parse(13, bad.as_bytes(), 13).is_err()
                    && Measurement::parse(11, bad.as_bytes(), 13).is_err(),
                "{bad:?} read as an event"
            );
        }
        assert!(Measurement::parse(13, b"cmdline:\xff", 13).is_err());
    }

    #[test]
    fn the_digested_bytes() {
        let m = Measurement::VerityRootHash("00ff".into());
        assert_eq!(m.digested(&m.text(), None), Some(&b"00ff"[..]));
        let m = Measurement::Cmdline("a".into());
        assert_eq!(m.digested(&m.text(), None), None);
        assert_eq!(m.digested(&m.text(), Some(b"a\xff")), Some(&b"a\xff"[..]));
        let m = Measurement::Decision(Decision::Stop);
        assert_eq!(
            m.digested("decision:stop", None),
            Some(&b"decision:stop"[..])
        );
        for d in Decision::ALL {
            assert_eq!(d.as_str().parse::<Decision>(), Ok(d));
        }
    }
}

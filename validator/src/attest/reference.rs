//! The reference file (`validator.reference/v1`): what a good boot of one image measures,
//! per slot, as the image build predicts it ([`super::predict`]) and the verifier
//! compares a node's event log with ([`super::verify`]).
//!
//! Contract: one JSON object, every field required, unknown fields refused (a reference
//! with a field this verifier does not understand could mean a check it would skip).
//! [`Reference::parse`] names the line and column of what is wrong; the JSON Schema
//! `docs/reference.schema.json` is generated from these types (a test keeps it so).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::bom::SlotName;
use crate::formats::tpm::measurement::{Decision, Measurement, MeasurementError};

/// The schema name of the reference file.
pub const SCHEMA: &str = "validator.reference/v1";

/// Digests of one measurement, bank name (`sha1`, `sha256`, `sha384`, `sha512`) to hex.
pub type Digests = BTreeMap<String, String>;

/// PCR values: bank name, then PCR index, then hex.
pub type Pcrs = BTreeMap<String, BTreeMap<u32, String>>;

/// What a good boot of one image measures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    /// [`SCHEMA`].
    pub schema: String,
    /// The BOM's `image_id` and the SHA-256 of its bytes.
    pub image_id: String,
    pub bom_sha256: String,
    /// The kernel release the image boots.
    pub kernel_release: String,
    /// The BOM's `[measure] pcr` (PCR 11 gets the phase words).
    pub pcr: u32,
    /// Whether the prediction is for a UEFI boot (efivarfs is loaded first).
    pub uefi: bool,
    /// One prediction per slot the image may be installed in.
    pub slots: Vec<SlotReference>,
}

/// The measurements of the image booted from one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlotReference {
    /// `A` or `B`.
    pub slot: SlotName,
    /// How the slot's kernel was started: `boot-loader` (its boot entry) or `kexec` (by
    /// the init of the other slot, falling back; the command line is then the init's).
    pub entry: Entry,
    /// The kernel command line, as `/proc/cmdline` shows it.
    pub cmdline: String,
    /// Our events before the decision, in order: `enter-initrd` (PCR 11), the BOM, the
    /// command line, each initramfs module, the verity root hash, each root driver
    /// (optional: it loads only when its device is there). The decision
    /// (`decision:<word>`) and, when the boot goes on, `leave-initrd` follow.
    pub events: Vec<ExpectedEvent>,
    /// Files the boot loader measures for this slot (GRUB: PCR 9, the kernel and the
    /// initramfs, and where the install gives them its configuration files), in the
    /// order it reads them.
    pub files: Vec<ExpectedFile>,
    /// Whether `files` are every record the boot loader makes in their PCRs, in that
    /// order (a file with no digests standing for one record of any content: GRUB's
    /// environment block, which follows the A/B state); absent or false: each file with
    /// digests must appear once, and other records are replayed but not judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub files_complete: bool,
    /// When the slot boots through a Unified Kernel Image (`boot-loader` entries only):
    /// what systemd-stub measures into PCR 11 before the kernel starts, ahead of our
    /// `enter-initrd`. Absent: the boot loader starts the kernel itself, and no stub
    /// event may be in the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stub: Option<StubReference>,
    /// The values of PCR 11 and our PCR at the end of a boot of this slot that measured
    /// every event above, per decision (`pass`, `quarantine`), as the boot's quote signs
    /// them (before the seal that follows the quote).
    pub pcrs: BTreeMap<Decision, Pcrs>,
}

/// What systemd-stub measures of a Unified Kernel Image
/// ([`crate::formats::uki`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StubReference {
    /// Every event in order: two per measured section, its name, then its content.
    pub events: Vec<StubRecord>,
    /// PCR 11 after the last of them, per bank: what `systemd-measure calculate` gives
    /// for the same sections, and what a TPM policy on the image alone pins.
    pub pcr11: BTreeMap<String, String>,
}

/// One event of the stub.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StubRecord {
    /// The section (`.linux`), the event's data in UTF-16LE in the log.
    pub section: String,
    /// `name`: the digests are of the section's name with its NUL; `content`: of the
    /// section's bytes.
    pub part: StubPart,
    pub digests: Digests,
}

/// Which bytes of a section a stub event digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StubPart {
    Name,
    Content,
}

/// How a slot's kernel was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Entry {
    /// By the boot loader, from the slot's own boot entry (the first boot in a log).
    BootLoader,
    /// By the other slot's init, falling back to this one (every later boot in a log).
    Kexec,
}

impl Entry {
    pub fn as_str(self) -> &'static str {
        match self {
            Entry::BootLoader => "boot-loader",
            Entry::Kexec => "kexec",
        }
    }
}

/// One predicted event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedEvent {
    pub pcr: u32,
    /// The event data as the log holds it.
    pub data: String,
    /// The digests extended, per bank.
    pub digests: Digests,
    /// Whether a good boot may leave it out (a root driver without its device).
    pub optional: bool,
}

impl ExpectedEvent {
    /// The event of ours it predicts (`ours`: the reference's PCR).
    pub fn measurement(&self, ours: u32) -> Result<Measurement, MeasurementError> {
        Measurement::parse(self.pcr, self.data.as_bytes(), ours)
    }
}

/// One predicted boot-loader file measurement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpectedFile {
    pub pcr: u32,
    /// The path the boot loader logs (`/A/vmlinuz`): for people, never compared.
    pub path: String,
    /// The digests of its content; empty: any content (only in a complete list).
    pub digests: Digests,
}

/// A reference that does not read.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("line {line} column {column}: {source}")]
    Json {
        line: usize,
        column: usize,
        source: serde_json::Error,
    },
    #[error("schema {0:?} is not {SCHEMA}")]
    Schema(String),
    #[error("slot {slot} ({entry}), stub event {index}: {why}")]
    Stub {
        slot: SlotName,
        entry: &'static str,
        index: usize,
        why: String,
    },
    #[error("slot {slot} ({entry}), event {index}: {source}")]
    Event {
        slot: SlotName,
        entry: &'static str,
        index: usize,
        source: MeasurementError,
    },
}

impl Reference {
    /// Reads a reference from JSON text.
    pub fn parse(text: &str) -> Result<Reference, ReferenceError> {
        let r: Reference = serde_json::from_str(text).map_err(|source| ReferenceError::Json {
            line: source.line(),
            column: source.column(),
            source,
        })?;
        if r.schema != SCHEMA {
            return Err(ReferenceError::Schema(r.schema));
        }
        // Every predicted event is one of ours, on its own PCR; every stub event names a
        // section the stub measures, a name event digesting that name.
        for s in &r.slots {
            if let Some(stub) = &s.stub {
                check_stub(s, stub)?;
            }
            for (i, e) in s.events.iter().enumerate() {
                e.measurement(r.pcr)
                    .map_err(|source| ReferenceError::Event {
                        slot: s.slot,
                        entry: s.entry.as_str(),
                        index: i + 1,
                        source,
                    })?;
            }
        }
        Ok(r)
    }

    /// The JSON text (pretty, with a final newline).
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            serde_json::json!({"schema": SCHEMA, "error": e.to_string()}).to_string()
        });
        s.push('\n');
        s
    }

    /// The slot's prediction for its boot loader's entry.
    pub fn slot(&self, slot: SlotName) -> Option<&SlotReference> {
        self.slots
            .iter()
            .find(|s| s.slot == slot && s.entry == Entry::BootLoader)
    }
}

/// A slot's stub events: known sections, boot-loader entries only, a name event's
/// digests those of its name.
fn check_stub(s: &SlotReference, stub: &StubReference) -> Result<(), ReferenceError> {
    let bad = |index: usize, why: String| ReferenceError::Stub {
        slot: s.slot,
        entry: s.entry.as_str(),
        index,
        why,
    };
    if s.entry != Entry::BootLoader {
        return Err(bad(0, "a kexec entry starts no stub".into()));
    }
    for (i, e) in stub.events.iter().enumerate() {
        let known = crate::formats::uki::section_of(&crate::formats::uki::event_data(&e.section));
        if known.is_none() {
            return Err(bad(
                i + 1,
                format!("{:?} is no section systemd-stub measures", e.section),
            ));
        }
        if e.part == StubPart::Name {
            let mut name = e.section.as_bytes().to_vec();
            name.push(0);
            for (bank, hex) in &e.digests {
                let alg = crate::formats::tpm::HashAlg::from_name(bank);
                if alg.is_some_and(|a| crate::util::hex(&a.digest(&name)) != *hex) {
                    return Err(bad(
                        i + 1,
                        format!("its {bank} digest is not that of the name {:?}", e.section),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The JSON Schema of [`Reference`], as committed in `docs/reference.schema.json`.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(Reference);
    let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_schema_is_generated_from_the_types() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.schema.json");
        let want = json_schema();
        if std::env::var_os("VALIDATOR_WRITE_SCHEMA").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what the types generate; run VALIDATOR_WRITE_SCHEMA=1 cargo test -p validator --lib attest::reference",
            path.display()
        );
    }

    #[test]
    fn bad_references_are_named() {
        let e = Reference::parse("{").unwrap_err().to_string();
        assert!(e.starts_with("line 1 column 1"), "{e}");
        let r = Reference {
            schema: "validator.reference/v0".into(),
            image_id: "i".into(),
            bom_sha256: "00".into(),
            kernel_release: "6.1".into(),
            pcr: 13,
            uefi: true,
            slots: vec![],
        };
        let e = Reference::parse(&r.to_text()).unwrap_err().to_string();
        assert!(e.contains("is not validator.reference/v1"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(&r.to_text()).unwrap();
        v["extra"] = 1.into();
        let e = Reference::parse(&v.to_string()).unwrap_err().to_string();
        assert!(e.contains("unknown field `extra`"), "{e}");
    }
}

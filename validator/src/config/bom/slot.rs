//! The BOM's `[slot]` table: A/B slots - the boot loader that holds the state, where the
//! state, kernels and initramfs live on the ESP, and what the boot does with a failure.
//!
//! Contract: [`Slot::check`] refuses what the init could not use (paths that are not
//! absolute on the ESP, an unusable `max_boots`, entry ids that are no BLS id, root
//! templates that name no partition), each as a [`SlotConfigError`] variant naming the
//! key and value ([`SlotConfigError::key`]); the BOM's cross-checks put it on that key's
//! line (the `[slot]` line where the key is a default). An empty path is refused like
//! any path that is not absolute.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A `[slot]` section the init could not use: the key and the value at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotConfigError {
    /// The section's TOML does not parse (as [`Slot::from_toml`] reads it).
    #[error("line {line}: {message}")]
    Toml { line: usize, message: String },
    #[error("{key} {value:?} is not an absolute path on the ESP")]
    NotEspPath { key: &'static str, value: String },
    #[error("max_boots {0} is outside 1..16")]
    MaxBoots(u32),
    #[error("entries has no id for slot {0}")]
    NoEntry(SlotName),
    #[error("entries.{slot} {id:?} is not a BLS entry id")]
    NotEntryId { slot: SlotName, id: String },
    #[error("{key} {value:?} is not PARTLABEL=..., PARTUUID=... or /dev/...")]
    NotPartition { key: &'static str, value: String },
}

/// An A/B slot.
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
pub enum SlotName {
    A,
    B,
}

impl SlotName {
    /// `A` or `B`.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotName::A => "A",
            SlotName::B => "B",
        }
    }

    /// The other slot.
    pub fn other(self) -> SlotName {
        match self {
            SlotName::A => SlotName::B,
            SlotName::B => SlotName::A,
        }
    }

    /// From `A`/`B` (either case).
    pub fn parse(s: &str) -> Option<SlotName> {
        match s {
            "A" | "a" => Some(SlotName::A),
            "B" | "b" => Some(SlotName::B),
            _ => None,
        }
    }

    /// `template` with `{slot}` replaced by this slot's name.
    pub fn fill(self, template: &str) -> String {
        template.replace("{slot}", self.as_str())
    }
}

impl fmt::Display for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The boot loader that holds the A/B state.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Bootloader {
    /// GRUB with `examples/grub/grub.cfg`: RAUC's variables in the grubenv.
    #[default]
    Grub,
    /// systemd-boot's boot counting on BLS entries.
    SystemdBoot,
}

/// When a slot is marked good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MarkGood {
    /// When every check in the initramfs passed.
    #[default]
    Initramfs,
    /// Later, by `validator slot mark-good` from a service on the booted system; the try
    /// stays consumed until then.
    Later,
}

/// How the boot falls back to the other slot after an image fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FallbackVia {
    /// `kexec_file_load` of the other slot's kernel and initramfs (no firmware, no POST);
    /// a reboot when that fails.
    #[default]
    Kexec,
    /// A reboot through the firmware and the boot loader.
    Reboot,
}

/// What a platform fault (no TPM, no ESP, bad command line) does to the boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlatformPolicy {
    /// Stop in the safe state with the report; the slot is not demoted.
    #[default]
    Stop,
    /// Boot on and report quarantine, when the root is usable.
    Quarantine,
}

fn default_grubenv() -> String {
    "/EFI/BOOT/grubenv".into()
}
fn default_kernel() -> String {
    "/{slot}/vmlinuz".into()
}
fn default_initrd() -> String {
    "/{slot}/initrd.img".into()
}
fn default_state_dir() -> String {
    "/validator".into()
}
fn default_max_boots() -> u32 {
    3
}
fn default_entries() -> BTreeMap<SlotName, String> {
    [
        (SlotName::A, "slot-a".to_string()),
        (SlotName::B, "slot-b".to_string()),
    ]
    .into_iter()
    .collect()
}

/// A/B slots: where the state lives and what the boot does with it. Paths are on the ESP;
/// `{slot}` stands for `A` or `B`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slot {
    #[serde(default)]
    pub bootloader: Bootloader,
    /// The GRUB environment block (grub).
    #[serde(default = "default_grubenv")]
    pub grubenv: String,
    /// BLS entry ids of the slots (systemd-boot), `/loader/entries/<id>[+L[-D]].conf`.
    #[serde(default = "default_entries")]
    pub entries: BTreeMap<SlotName, String>,
    #[serde(default)]
    pub mark_good: MarkGood,
    #[serde(default)]
    pub fallback: FallbackVia,
    /// Consecutive failed boots (both slots) after which the node stops in the safe
    /// state, even if the boot loader would try again.
    #[serde(default = "default_max_boots")]
    pub max_boots: u32,
    #[serde(default)]
    pub on_platform_fault: PlatformPolicy,
    /// Each slot's kernel and initramfs on the ESP (for kexec).
    #[serde(default = "default_kernel")]
    pub kernel: String,
    #[serde(default = "default_initrd")]
    pub initrd: String,
    /// The slot's root when `root=` does not name it (`PARTLABEL=root-{slot}`).
    pub root: Option<String>,
    /// The slot's `root-verity-sig` partition when `validator.verity_sig=` does not name
    /// it (`PARTLABEL=root-{slot}-sig`).
    pub verity_sig: Option<String>,
    /// Our state record (two copies) on the ESP.
    #[serde(default = "default_state_dir")]
    pub state_dir: String,
}

impl SlotConfigError {
    /// The `[slot]` key at fault (`entries` for an entry id), if the error is about one.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            SlotConfigError::NotEspPath { key, .. } | SlotConfigError::NotPartition { key, .. } => {
                Some(key)
            }
            SlotConfigError::MaxBoots(_) => Some("max_boots"),
            SlotConfigError::NoEntry(_) | SlotConfigError::NotEntryId { .. } => Some("entries"),
            SlotConfigError::Toml { .. } => None,
        }
    }
}

impl Slot {
    /// A `[slot]` section from its TOML body (defaults for what it omits), checked.
    pub fn from_toml(text: &str) -> Result<Slot, SlotConfigError> {
        let s: Slot = toml::from_str(text).map_err(|e| SlotConfigError::Toml {
            line: e.span().map_or(1, |s| super::lines::line_of(text, s.start)),
            message: e.message().to_string(),
        })?;
        s.check()?;
        Ok(s)
    }

    /// The checks the init relies on: absolute ESP paths without `..`, an entry id for
    /// each slot, a usable bound, root templates that name a partition.
    pub fn check(&self) -> Result<(), SlotConfigError> {
        for (key, p) in [
            ("grubenv", &self.grubenv),
            ("kernel", &self.kernel),
            ("initrd", &self.initrd),
            ("state_dir", &self.state_dir),
        ] {
            let filled = SlotName::A.fill(p);
            if !filled.starts_with('/')
                || filled.split('/').any(|c| c == "..")
                || filled.contains('\0')
                || filled.len() > 255
            {
                return Err(SlotConfigError::NotEspPath {
                    key,
                    value: p.clone(),
                });
            }
        }
        if !(1..=16).contains(&self.max_boots) {
            return Err(SlotConfigError::MaxBoots(self.max_boots));
        }
        for s in [SlotName::A, SlotName::B] {
            let id = self.entries.get(&s).ok_or(SlotConfigError::NoEntry(s))?;
            match crate::formats::bls::EntryName::parse(&format!("{id}.conf")) {
                Ok(n) if n.id == *id && !n.counting() => {}
                _ => {
                    return Err(SlotConfigError::NotEntryId {
                        slot: s,
                        id: id.clone(),
                    })
                }
            }
        }
        for (key, t) in [("root", &self.root), ("verity_sig", &self.verity_sig)] {
            if let Some(t) = t {
                let filled = SlotName::A.fill(t);
                if !(filled.starts_with("PARTLABEL=")
                    || filled.starts_with("PARTUUID=")
                    || filled.starts_with("/dev/"))
                {
                    return Err(SlotConfigError::NotPartition {
                        key,
                        value: t.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Slot `s`'s root and `root-verity-sig` partitions from the templates (for the
    /// storage stage, when the command line does not name them).
    pub fn root_specs(
        &self,
        s: SlotName,
    ) -> (
        Option<crate::config::cmdline::RootSpec>,
        Option<crate::config::cmdline::RootSpec>,
    ) {
        use crate::config::cmdline::parse_root;
        (
            self.root.as_deref().map(|t| parse_root(&s.fill(t))),
            self.verity_sig.as_deref().map(|t| parse_root(&s.fill(t))),
        )
    }

    /// The ESP path of slot `s`'s kernel, initramfs, or the state directory.
    pub fn path(&self, template: &str, s: SlotName) -> String {
        s.fill(template)
    }
}

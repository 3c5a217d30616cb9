//! The image's bill of materials (BOM): one TOML file, kept in Git, embedded in the
//! initramfs, loaded by the init and reported by digest.
//!
//! Parsing is strict: unknown keys and bad values are errors that name the file and line.
//! The digest is SHA-256 over the exact bytes that were parsed, so the report, the TPM
//! measurement and the file in Git can be compared with `sha256sum`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest, Sha256};

use crate::util::hex;

/// The only schema version this build reads.
pub const SCHEMA: u32 = 1;

/// A BOM problem, with the file and line it is on.
#[derive(Debug, thiserror::Error)]
pub enum BomError {
    #[error("BOM {0}")]
    Read(#[from] crate::util::fs::InputError),
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $what:literal, $ok:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                let ok: fn(&str) -> bool = $ok;
                if ok(&s) {
                    Ok($name(s))
                } else {
                    Err(serde::de::Error::custom(format!(
                        concat!("invalid ", $what, " {:?}"),
                        s
                    )))
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

fn version_like(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b".+~_-:".contains(&c))
}

checked_string!(
    /// A version string: starts with a letter or digit, then letters, digits and `.+~_-:`.
    Version,
    "version (letters, digits and .+~_-: only)",
    version_like
);
checked_string!(
    /// A module name as the kernel spells it (`-` and `_` are equal, compared normalised).
    ModuleName,
    "module name (letters, digits, - and _ only)",
    |s| !s.is_empty()
        && s.len() < 56
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
);

impl ModuleName {
    /// The name with `-` replaced by `_`, as the kernel keys modules.
    pub fn normalized(&self) -> String {
        crate::formats::kmod::normalize_name(&self.0)
    }
}

/// How strictly vermagic is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VermagicMode {
    /// The kernel's rule plus: the release must equal the expected release exactly.
    #[default]
    Strict,
    /// Only the kernel's own rule.
    Kernel,
}

/// NVIDIA kernel-module flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// The open kernel modules (`license=Dual MIT/GPL`).
    Open,
    /// The proprietary modules (`license=NVIDIA`).
    Proprietary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    /// `uname -r` of the kernel this image boots.
    pub release: Version,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nvidia {
    pub driver_version: Version,
    pub flavour: Flavour,
    pub fabric_manager_version: Option<Version>,
}

/// Versions of the user-space parts of the image.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Components {
    pub ofed: Option<Version>,
    pub container_toolkit: Option<Version>,
    pub kubelet: Option<Version>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Modules {
    /// Modules the init loads, in this order (each after its dependencies).
    #[serde(default)]
    pub load: Vec<ModuleName>,
}

checked_string!(
    /// A lower-case or upper-case hex SHA-256 (64 digits).
    Sha256Hex,
    "SHA-256 (64 hex digits)",
    |s| s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
);
checked_string!(
    /// Kernel taint letters (`/proc/sys/kernel/tainted` as `dmesg` prints them).
    TaintLetters,
    "taint letters (from PFSRMBUDAWCIOELKXTNJ)",
    |s| s.bytes().all(|c| b"PFSRMBUDAWCIOELKXTNJ".contains(&c))
);

checked_string!(
    /// Hex digits (an even number of them; empty allowed).
    HexString,
    "hex string",
    |s| s.len().is_multiple_of(2) && s.bytes().all(|c| c.is_ascii_hexdigit())
);
checked_string!(
    /// A dm-verity hash algorithm.
    VerityAlgorithm,
    "verity algorithm (sha1, sha256, sha512)",
    |s| matches!(s, "sha1" | "sha256" | "sha512")
);
checked_string!(
    /// An absolute path inside the root filesystem.
    RootPath,
    "absolute path",
    |s| s.starts_with('/') && !s.split('/').any(|c| c == "..") && !s.contains('\0')
);

/// Where the trusted root hash comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootHashSource {
    /// The DPS `root-verity-sig` partition, checked against the trust store.
    #[default]
    Signature,
    /// `verity.root_hash` in this BOM.
    Bom,
}

/// What dm-verity does when a block does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCorruption {
    /// The read fails with EIO (the default).
    #[default]
    Eio,
    Restart,
    Panic,
    Ignore,
}

/// The verified root (presence of `[verity]` makes it required).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verity {
    #[serde(default)]
    pub source: RootHashSource,
    pub root_hash: Option<HexString>,
    /// Trusted parameters the superblock must agree with (each optional).
    pub algorithm: Option<VerityAlgorithm>,
    pub data_block_size: Option<u32>,
    pub hash_block_size: Option<u32>,
    pub data_blocks: Option<u64>,
    pub salt: Option<HexString>,
    /// Byte offset of the superblock on the hash partition.
    #[serde(default)]
    pub hash_offset: u64,
    #[serde(default)]
    pub on_corruption: OnCorruption,
    #[serde(default)]
    pub ignore_zero_blocks: bool,
    #[serde(default)]
    pub check_at_most_once: bool,
    /// Also hand the signature to the kernel (`root_hash_sig_key_desc`); the signer must
    /// then be in the kernel's trusted keyring too.
    #[serde(default)]
    pub kernel_signature: bool,
    /// Files read in full through the verity device before the handover.
    #[serde(default)]
    pub critical: Vec<RootPath>,
}

/// Whether the boot needs a working TPM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TpmPolicy {
    /// No TPM, or a TPM failing, stops the boot (a platform fault).
    #[default]
    Required,
    /// Measured when there is a TPM; its absence or failure is reported only.
    Optional,
}

fn default_pcr() -> u32 {
    13
}

fn default_tpm_timeout() -> u64 {
    2000
}

/// Measured boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    #[serde(default)]
    pub tpm: TpmPolicy,
    /// The PCR for the BOM, command line, modules, root hash and decision (PCR 11 gets
    /// the systemd phase strings).
    #[serde(default = "default_pcr")]
    pub pcr: u32,
    /// Deadline of each TPM command, in milliseconds.
    #[serde(default = "default_tpm_timeout")]
    pub timeout_ms: u64,
}

impl Default for Measure {
    fn default() -> Measure {
        Measure {
            tpm: TpmPolicy::Required,
            pcr: default_pcr(),
            timeout_ms: default_tpm_timeout(),
        }
    }
}

/// Boot policies.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// `strict` (default): a module's vermagic release must equal `kernel.release`;
    /// `kernel`: only the kernel's own rule.
    #[serde(default)]
    pub vermagic: VermagicMode,
    /// Modules that may load without `intree=Y` (NVIDIA, OFED...).
    #[serde(default)]
    pub out_of_tree: Vec<ModuleName>,
    /// Required SHA-256 of module files, by module name.
    #[serde(default)]
    pub module_sha256: BTreeMap<String, Sha256Hex>,
    /// Taint flags allowed after the modules are loaded (e.g. "OE"); others are reported.
    #[serde(default)]
    pub taint_allowed: TaintLetters,
    /// Extra certificates trusted to sign modules and root hashes (files, relative to the
    /// BOM), embedded in the initramfs next to the kernel's built-in keys.
    #[serde(default)]
    pub trust: Vec<String>,
}

/// The hardware the image expects on the node.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    pub gpus: Option<u32>,
    pub nvswitches: Option<u32>,
    pub nvme: Option<u32>,
    pub mlx5_ports: Option<u32>,
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

impl Slot {
    /// A `[slot]` section from its TOML body (defaults for what it omits), checked.
    pub fn from_toml(text: &str) -> Result<Slot, String> {
        let s: Slot = toml::from_str(text).map_err(|e| e.message().to_string())?;
        s.check()?;
        Ok(s)
    }

    /// The checks the init relies on: absolute ESP paths without `..`, an entry id for
    /// each slot, a usable bound, root templates that name a partition.
    pub fn check(&self) -> Result<(), String> {
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
                return Err(format!("{key} {p:?} is not an absolute path on the ESP"));
            }
        }
        if !(1..=16).contains(&self.max_boots) {
            return Err(format!("max_boots {} is outside 1..16", self.max_boots));
        }
        for s in [SlotName::A, SlotName::B] {
            let id = self
                .entries
                .get(&s)
                .ok_or_else(|| format!("entries has no id for slot {s}"))?;
            match crate::formats::bls::EntryName::parse(&format!("{id}.conf")) {
                Ok(n) if n.id == *id && !n.counting() => {}
                _ => return Err(format!("entries.{s} {id:?} is not a BLS entry id")),
            }
        }
        for (key, t) in [("root", &self.root), ("verity_sig", &self.verity_sig)] {
            if let Some(t) = t {
                let filled = SlotName::A.fill(t);
                if !(filled.starts_with("PARTLABEL=")
                    || filled.starts_with("PARTUUID=")
                    || filled.starts_with("/dev/"))
                {
                    return Err(format!(
                        "{key} {t:?} is not PARTLABEL=..., PARTUUID=... or /dev/..."
                    ));
                }
            }
        }
        Ok(())
    }

    /// The ESP path of slot `s`'s kernel, initramfs, or the state directory.
    pub fn path(&self, template: &str, s: SlotName) -> String {
        s.fill(template)
    }
}

fn default_textfile_dir() -> String {
    "/var/lib/prometheus/node-exporter".into()
}
fn default_nfd_dir() -> String {
    "/etc/kubernetes/node-feature-discovery/features.d".into()
}
fn default_nfd_namespace() -> String {
    "validator.gpu-fleet.example".into()
}

/// Where the report goes besides the console and `/run` (`[report]`): directories are
/// paths in the new root, resolved as it will see them after `switch_root` (a directory
/// that is, or links into, `/run` is written in the `/run` the new root inherits); an
/// empty directory turns that output off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportCfg {
    /// node_exporter's textfile collector directory (`validator.prom`).
    #[serde(default = "default_textfile_dir")]
    pub textfile_dir: String,
    /// Node Feature Discovery's local features directory (`validator`).
    #[serde(default = "default_nfd_dir")]
    pub nfd_dir: String,
    /// The label namespace of the features (a DNS subdomain the fleet owns).
    #[serde(default = "default_nfd_namespace")]
    pub nfd_namespace: String,
    /// The node pool this image is built for: the `pool` label of the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

impl Default for ReportCfg {
    fn default() -> ReportCfg {
        ReportCfg {
            textfile_dir: default_textfile_dir(),
            nfd_dir: default_nfd_dir(),
            nfd_namespace: default_nfd_namespace(),
            pool: None,
        }
    }
}

impl ReportCfg {
    /// The checks the init relies on: absolute directories without `..`, a namespace NFD
    /// publishes, a pool that is a label value.
    pub fn check(&self) -> Result<(), String> {
        for (key, d) in [
            ("textfile_dir", &self.textfile_dir),
            ("nfd_dir", &self.nfd_dir),
        ] {
            if !d.is_empty()
                && (!d.starts_with('/')
                    || d.split('/').any(|c| c == "..")
                    || d.contains('\0')
                    || d.len() > 255)
            {
                return Err(format!("{key} {d:?} is not an absolute path (or \"\")"));
            }
        }
        if !crate::formats::nfd::valid_namespace(&self.nfd_namespace) {
            return Err(format!(
                "nfd_namespace {:?} is not a label namespace NFD publishes (a lower-case DNS \
                 subdomain outside kubernetes.io)",
                self.nfd_namespace
            ));
        }
        if let Some(p) = &self.pool {
            if !crate::formats::nfd::valid_label_part(p) {
                return Err(format!(
                    "pool {p:?} is not a label value (letters, digits, -_. inside, at most 63)"
                ));
            }
        }
        Ok(())
    }
}

/// The bill of materials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bom {
    pub schema: u32,
    pub image_id: Version,
    pub kernel: Kernel,
    pub nvidia: Option<Nvidia>,
    #[serde(default)]
    pub components: Components,
    /// Firmware set: component name to version.
    #[serde(default)]
    pub firmware: BTreeMap<String, Version>,
    #[serde(default)]
    pub modules: Modules,
    #[serde(default)]
    pub policy: Policy,
    #[serde(default)]
    pub hardware: Hardware,
    /// The verified root; absent: the root is mounted as `root=` names it.
    pub verity: Option<Verity>,
    #[serde(default)]
    pub measure: Measure,
    /// A/B slots; absent: no slot handling (every failure stops the boot).
    pub slot: Option<Slot>,
    /// Where the report goes (metrics, node labels).
    #[serde(default)]
    pub report: ReportCfg,
}

/// A BOM together with the bytes it was read from.
#[derive(Debug, Clone)]
pub struct LoadedBom {
    pub bom: Bom,
    /// The exact bytes that were parsed: what is measured, and what [`LoadedBom::sha256`]
    /// is the digest of.
    pub bytes: Vec<u8>,
    /// Lower-case hex SHA-256 of `bytes`.
    pub sha256: String,
    pub path: PathBuf,
}

/// The largest BOM read (a BOM is a few KiB of TOML).
pub const BOM_MAX: u64 = 1 << 20;

fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

/// Parses BOM bytes; `path` only names the source in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<LoadedBom, BomError> {
    let invalid = |line, message: String| BomError::Invalid {
        path: path.to_path_buf(),
        line,
        message,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = line_of(&String::from_utf8_lossy(bytes), e.valid_up_to());
        invalid(line, "not UTF-8".into())
    })?;
    let bom: Bom = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
        invalid(line, e.message().to_string())
    })?;
    if bom.measure.pcr > 23 || bom.measure.pcr == crate::config::PHASE_PCR {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("pcr"))
            .map_or(1, |i| i + 1);
        return Err(invalid(
            line,
            format!(
                "measure.pcr {} is not usable (0-23, and not 11, which holds the boot phases)",
                bom.measure.pcr
            ),
        ));
    }
    if !(10..=60_000).contains(&bom.measure.timeout_ms) {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("timeout_ms"))
            .map_or(1, |i| i + 1);
        return Err(invalid(
            line,
            format!(
                "measure.timeout_ms {} is outside 10..60000",
                bom.measure.timeout_ms
            ),
        ));
    }
    if bom.schema != SCHEMA {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("schema"))
            .map_or(1, |i| i + 1);
        return Err(invalid(
            line,
            format!(
                "schema {} is not supported (this build reads {SCHEMA})",
                bom.schema
            ),
        ));
    }
    if let Some(slot) = &bom.slot {
        if let Err(why) = slot.check() {
            let line = text
                .lines()
                .position(|l| l.trim_start().starts_with("[slot]"))
                .map_or(1, |i| i + 1);
            return Err(invalid(line, format!("slot: {why}")));
        }
    }
    if let Err(why) = bom.report.check() {
        let line = text
            .lines()
            .position(|l| l.trim_start().starts_with("[report]"))
            .map_or(1, |i| i + 1);
        return Err(invalid(line, format!("report: {why}")));
    }
    let mut seen = std::collections::BTreeSet::new();
    for m in &bom.modules.load {
        if !seen.insert(m.normalized()) {
            let line = text
                .find(&format!("\"{}\"", m.0))
                .map_or(1, |o| line_of(text, o));
            return Err(invalid(line, format!("module {} is listed twice", m.0)));
        }
    }
    Ok(LoadedBom {
        bom,
        bytes: bytes.to_vec(),
        sha256: hex(&Sha256::digest(bytes)),
        path: path.to_path_buf(),
    })
}

/// Reads and parses a BOM file.
pub fn load(path: &Path) -> Result<LoadedBom, BomError> {
    let bytes = crate::util::fs::read_limited(path, BOM_MAX)?;
    parse(&bytes, path)
}

impl Bom {
    /// The BOM as TOML (used by tools that derive a BOM from another one).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
schema = 1
image_id = "qemu-node-2026.11.30"

[kernel]
release = "6.1.0-57-amd64"

[nvidia]
driver_version = "550.127.05"
flavour = "open"
fabric_manager_version = "550.127.05"

[components]
kubelet = "1.31.4"

[firmware]
cx7 = "28.42.1000"

[modules]
load = ["virtio_pci", "virtio-blk", "ext4"]

[hardware]
gpus = 8
"#;

    fn err(text: &str) -> (usize, String) {
        match parse(text.as_bytes(), Path::new("bom.toml")) {
            Err(BomError::Invalid { line, message, .. }) => (line, message),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn parses_and_digests() {
        let b = parse(GOOD.as_bytes(), Path::new("bom.toml")).unwrap();
        assert_eq!(b.bom.kernel.release.as_str(), "6.1.0-57-amd64");
        assert_eq!(b.bom.nvidia.as_ref().unwrap().flavour, Flavour::Open);
        assert_eq!(b.bom.modules.load[1].normalized(), "virtio_blk");
        assert_eq!(b.bom.hardware.gpus, Some(8));
        assert_eq!(b.sha256, hex(&Sha256::digest(GOOD.as_bytes())));
        // Round trip through to_toml keeps the content.
        let again = parse(b.bom.to_toml().unwrap().as_bytes(), Path::new("x")).unwrap();
        assert_eq!(again.bom, b.bom);
    }

    #[test]
    fn unknown_key_names_its_line() {
        let text = GOOD.replace("gpus = 8", "gpus = 8\ngpu = 8");
        let (line, msg) = err(&text);
        assert_eq!(line, 24);
        assert!(msg.contains("unknown field `gpu`"), "{msg}");
    }

    #[test]
    fn bad_values_name_their_line() {
        let (line, msg) = err(&GOOD.replace("\"open\"", "\"closed\""));
        assert_eq!(line, 10);
        assert!(msg.contains("closed"), "{msg}");
        let (line, msg) = err(&GOOD.replace("\"6.1.0-57-amd64\"", "\"6.1 amd64\""));
        assert_eq!(line, 6);
        assert!(msg.contains("invalid version"), "{msg}");
        let (line, msg) = err(&GOOD.replace("\"ext4\"", "\"ext4/../x\""));
        assert_eq!(line, 20);
        assert!(msg.contains("invalid module name"), "{msg}");
        let (line, _) = err(&GOOD.replace("gpus = 8", "gpus = -1"));
        assert_eq!(line, 23);
        let (line, msg) = err(&GOOD.replace("schema = 1", "schema = 2"));
        assert_eq!(line, 2);
        assert!(msg.contains("schema 2"), "{msg}");
        let (line, msg) = err(&GOOD.replace("\"ext4\"", "\"virtio_blk\""));
        assert_eq!(line, 20);
        assert!(msg.contains("listed twice"), "{msg}");
    }

    /// `[report]`: defaults when absent; directories, namespace and pool checked, on the
    /// section's line.
    #[test]
    fn report_section() {
        let b = parse(GOOD.as_bytes(), Path::new("bom.toml")).unwrap().bom;
        assert_eq!(b.report, ReportCfg::default());
        assert_eq!(b.report.textfile_dir, "/var/lib/prometheus/node-exporter");
        let with = |body: &str| format!("{GOOD}\n[report]\n{body}\n");
        let ok = parse(
            with("pool = \"h200-a\"\ntextfile_dir = \"\"\nnfd_namespace = \"gpu.example.com\"")
                .as_bytes(),
            Path::new("bom.toml"),
        )
        .unwrap()
        .bom;
        assert_eq!(ok.report.pool.as_deref(), Some("h200-a"));
        assert_eq!(ok.report.nfd_dir, ReportCfg::default().nfd_dir);
        let section = GOOD.lines().count() + 2;
        for (body, why) in [
            ("textfile_dir = \"var/lib\"", "textfile_dir"),
            ("nfd_dir = \"/etc/../x\"", "nfd_dir"),
            ("nfd_namespace = \"kubernetes.io\"", "nfd_namespace"),
            ("nfd_namespace = \"Upper.example\"", "nfd_namespace"),
            ("pool = \"has space\"", "pool"),
        ] {
            let (line, msg) = err(&with(body));
            assert_eq!(line, section, "{body}: {msg}");
            assert!(msg.contains(why), "{body}: {msg}");
        }
        let (_, msg) = err(&with("colour = \"red\""));
        assert!(msg.contains("colour"), "{msg}");
    }

    #[test]
    fn missing_and_malformed() {
        let (_, msg) = err("schema = 1\n");
        assert!(msg.contains("missing field"), "{msg}");
        let (line, _) = err("schema = 1\nimage_id = \n");
        assert_eq!(line, 2);
        let (line, msg) = err("schema = 1\n\u{0}");
        assert_eq!(line, 2, "{msg}");
        match parse(b"\xff\xfe", Path::new("b")) {
            Err(BomError::Invalid { message, .. }) => assert_eq!(message, "not UTF-8"),
            other => panic!("{other:?}"),
        }
    }
}

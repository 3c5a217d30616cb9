//! The image's bill of materials (BOM): one TOML file, kept in Git, embedded in the
//! initramfs, loaded by the init and reported by digest.
//!
//! Parsing is strict: unknown keys and bad values are errors that name the file and the
//! line of the key (from the TOML parser's spans). [`parse`] also refuses every BOM the
//! init could not boot with: verity values no superblock or kernel can match (block
//! sizes, data block count, salt and root-hash lengths), `source = "bom"` without a root
//! hash, pins of names that are no module, and a module named twice (`-` and `_` are the
//! same) in any list or map. The init and `validator bom check` both load a BOM through
//! [`parse`], so they refuse the same BOMs.
//!
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
    s.len() <= 128
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b".+~_-:".contains(&c))
}

checked_string!(
    /// A version string: starts with a letter or digit, then letters, digits and `.+~_-:`.
    Version,
    "version (letters, digits and .+~_-: only)",
    version_like
);
/// True for a module name as the kernel spells it: 1 to 55 letters, digits, `-`, `_`.
pub fn is_module_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 56
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

checked_string!(
    /// A module name as the kernel spells it (`-` and `_` are equal, compared normalised).
    ModuleName,
    "module name (letters, digits, - and _ only)",
    is_module_name
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
    /// Drivers that live on the verified root (`/lib/modules/<release>` there): gated
    /// and loaded by the preflight, after the root is mounted (nvidia, mlx5_ib ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub root: Vec<ModuleName>,
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
    /// Required SHA-256 of module files, by module name (checked by [`parse`]).
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

/// The hardware the image expects on the node (`[hardware]`, see [`super::hardware`]).
pub use super::hardware::Hardware;

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
    text.as_bytes()
        .get(..offset.min(text.len()))
        .unwrap_or_default()
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

/// What is wrong at `offset`: a control character TOML does not allow is named (the
/// parser's own message for it can be empty or about something else), otherwise the
/// parser's message on one line.
fn parse_message(text: &str, offset: Option<usize>, message: &str) -> String {
    let rest = offset.and_then(|o| text.get(o..)).unwrap_or_default();
    let mut chars = rest.chars();
    match (chars.next(), chars.next()) {
        (Some('\0'), _) => "a NUL character, which TOML does not allow".into(),
        (Some('\r'), next) if next != Some('\n') => {
            "a carriage return without a line feed (TOML lines end in LF or CRLF)".into()
        }
        (Some(c), _) if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => format!(
            "control character U+{:04X}, which TOML does not allow",
            u32::from(c)
        ),
        _ if message.trim().is_empty() => "not valid TOML".into(),
        _ => message.trim().lines().collect::<Vec<_>>().join("; "),
    }
}

/// Lines of keys in the BOM text, from the TOML parser's spans.
struct KeyLines<'a> {
    text: &'a str,
    doc: Option<toml_edit::ImDocument<&'a str>>,
}

impl<'a> KeyLines<'a> {
    fn new(text: &'a str) -> KeyLines<'a> {
        KeyLines {
            text,
            doc: toml_edit::ImDocument::parse(text).ok(),
        }
    }

    /// The line of the key at `path` (or of element `index` of its array value); where
    /// that is not in the text (a default), the line of the nearest enclosing key or
    /// table, else 1.
    fn of(&self, path: &[&str], index: Option<usize>) -> usize {
        let Some(doc) = &self.doc else { return 1 };
        let mut item = doc.as_item();
        let mut span = None;
        let mut complete = true;
        for key in path {
            let Some((k, v)) = item.as_table_like().and_then(|t| t.get_key_value(key)) else {
                complete = false;
                break;
            };
            span = k.span().or(span);
            item = v;
        }
        if let (true, Some(i)) = (complete, index) {
            if let Some(v) = item.as_array().and_then(|a| a.get(i)) {
                span = v.span().or(span);
            }
        }
        span.map_or(1, |s| line_of(self.text, s.start))
    }

    /// The line of key `key` of the map at `path`.
    fn of_key(&self, path: &[&str], key: &str) -> usize {
        let mut p = path.to_vec();
        p.push(key);
        self.of(&p, None)
    }
}

/// Module names a list or map of the BOM holds twice (`-` and `_` are the same): the
/// first duplicate's position.
fn first_duplicate<'b>(names: impl Iterator<Item = &'b str>) -> Option<(usize, &'b str)> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .enumerate()
        .find(|(_, n)| !seen.insert(crate::formats::kmod::normalize_name(n)))
}

/// The kernel's dm-verity takes data blocks of at most the page size (4096 on x86-64).
pub const VERITY_MAX_DATA_BLOCK: u32 = 4096;

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
        let at = e.span().map(|s| s.start);
        let line = at.map_or(1, |o| line_of(text, o));
        invalid(line, parse_message(text, at, e.message()))
    })?;
    check(&bom, &KeyLines::new(text)).map_err(|(line, message)| invalid(line, message))?;
    Ok(LoadedBom {
        bom,
        bytes: bytes.to_vec(),
        sha256: hex(&Sha256::digest(bytes)),
        path: path.to_path_buf(),
    })
}

/// Every check beyond the schema's types, with the line of the key at fault.
fn check(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    if bom.schema != SCHEMA {
        return Err((
            lines.of(&["schema"], None),
            format!(
                "schema {} is not supported (this build reads {SCHEMA})",
                bom.schema
            ),
        ));
    }
    if bom.measure.pcr > 23 || bom.measure.pcr == crate::config::PHASE_PCR {
        return Err((
            lines.of(&["measure", "pcr"], None),
            format!(
                "measure.pcr {} is not usable (0-23, and not 11, which holds the boot phases)",
                bom.measure.pcr
            ),
        ));
    }
    if !(10..=60_000).contains(&bom.measure.timeout_ms) {
        return Err((
            lines.of(&["measure", "timeout_ms"], None),
            format!(
                "measure.timeout_ms {} is outside 10..60000",
                bom.measure.timeout_ms
            ),
        ));
    }
    for (field, names) in [
        ("modules.load", &bom.modules.load),
        ("modules.root", &bom.modules.root),
        ("policy.out_of_tree", &bom.policy.out_of_tree),
    ] {
        if let Some((i, m)) = first_duplicate(names.iter().map(ModuleName::as_str)) {
            let path: Vec<&str> = field.split('.').collect();
            return Err((
                lines.of(&path, Some(i)),
                format!("module {m} is listed twice in {field}"),
            ));
        }
    }
    // A module is loaded from the initramfs or from the root, not both.
    if let Some(m) = bom.modules.root.iter().find(|r| {
        bom.modules
            .load
            .iter()
            .any(|l| l.normalized() == r.normalized())
    }) {
        let i = bom
            .modules
            .root
            .iter()
            .position(|r| r == m)
            .unwrap_or_default();
        return Err((
            lines.of(&["modules", "root"], Some(i)),
            format!("module {m} is listed twice (in modules.load and modules.root)"),
        ));
    }
    let pins = ["policy", "module_sha256"];
    for k in bom.policy.module_sha256.keys() {
        if !is_module_name(k) {
            return Err((
                lines.of_key(&pins, k),
                format!(
                    "policy.module_sha256 key {k:?} is not a module name (letters, digits, - and _)"
                ),
            ));
        }
    }
    if let Some((_, m)) = first_duplicate(bom.policy.module_sha256.keys().map(String::as_str)) {
        return Err((
            lines.of_key(&pins, m),
            format!(
                "module {} is pinned twice in policy.module_sha256 (- and _ are the same)",
                crate::formats::kmod::normalize_name(m)
            ),
        ));
    }
    if let Some(slot) = &bom.slot {
        if let Err(why) = slot.check() {
            return Err((lines.of(&["slot"], None), format!("slot: {why}")));
        }
    }
    if let Some(v) = &bom.verity {
        check_verity(v, lines)?;
    }
    if let Err(why) = bom.report.check() {
        return Err((lines.of(&["report"], None), format!("report: {why}")));
    }
    if let Err(e) = super::hardware::validate(&bom.hardware) {
        return Err((lines.of(&["hardware", e.key], None), e.message));
    }
    Ok(())
}

/// The `[verity]` values the init could boot with.
fn check_verity(v: &Verity, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    use crate::formats::verity::superblock::{self, Algorithm};
    let at = |key: &str| lines.of(&["verity", key], None);
    let algorithm = v
        .algorithm
        .as_ref()
        .and_then(|a| Algorithm::from_name(a.as_str()));
    match (&v.root_hash, v.source) {
        (None, RootHashSource::Bom) => {
            return Err((
                at("source"),
                "verity.source is \"bom\" but there is no verity.root_hash".into(),
            ))
        }
        (Some(h), _) => {
            let len = h.0.len() / 2;
            let want: Vec<usize> = match algorithm {
                Some(a) => vec![a.digest_size()],
                None => vec![20, 32, 64],
            };
            if !want.contains(&len) {
                let what = match algorithm {
                    Some(a) => format!("{} bytes for {}", a.digest_size(), a.name()),
                    None => "20 (sha1), 32 (sha256) or 64 (sha512) bytes".into(),
                };
                return Err((
                    at("root_hash"),
                    format!("verity.root_hash has {len} bytes, not {what}"),
                ));
            }
        }
        (None, RootHashSource::Signature) => {}
    }
    if let Some(s) = v.data_block_size {
        if !s.is_power_of_two() || !(512..=VERITY_MAX_DATA_BLOCK).contains(&s) {
            return Err((
                at("data_block_size"),
                format!(
                    "verity.data_block_size {s} is not a power of two from 512 to \
                     {VERITY_MAX_DATA_BLOCK} (the kernel's dm-verity takes at most the page size)"
                ),
            ));
        }
    }
    if let Some(s) = v.hash_block_size {
        if !superblock::valid_block_size(s) {
            return Err((
                at("hash_block_size"),
                format!(
                    "verity.hash_block_size {s} is not a power of two from {} to {}",
                    superblock::BLOCK_SIZES.start(),
                    superblock::BLOCK_SIZES.end()
                ),
            ));
        }
    }
    if let Some(n) = v.data_blocks {
        let bytes = n.checked_mul(u64::from(v.data_block_size.unwrap_or(512)));
        if n == 0 || bytes.is_none_or(|b| b > i64::MAX as u64) {
            return Err((
                at("data_blocks"),
                format!(
                    "verity.data_blocks {n} is not a usable count (at least 1, and the data \
                     size must fit in 63 bits; leave it out to take the superblock's)"
                ),
            ));
        }
    }
    if let Some(s) = &v.salt {
        if s.0.len() / 2 > superblock::MAX_SALT {
            return Err((
                at("salt"),
                format!(
                    "verity.salt has {} bytes; a verity superblock holds at most {}",
                    s.0.len() / 2,
                    superblock::MAX_SALT
                ),
            ));
        }
    }
    Ok(())
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

    /// The line of the first line of `text` starting with `prefix`.
    fn line_starting(text: &str, prefix: &str) -> usize {
        text.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
    }

    /// A NUL byte or lone carriage returns: the error says what is wrong, never an
    /// empty message.
    #[test]
    fn control_characters_are_named() {
        let (line, msg) = err("schema = 1\n\u{0}");
        assert_eq!(line, 2);
        assert!(msg.contains("NUL"), "{msg}");
        let (line, msg) = err("schema = 1\nimage_id = \"a\0b\"\n");
        assert_eq!(line, 2);
        assert!(msg.contains("NUL"), "{msg}");
        // In a comment the parser has no message at all.
        let (line, msg) = err("schema = 1\n# a \u{0} b\n");
        assert_eq!(line, 2);
        assert!(msg.contains("NUL"), "{msg}");
        let (_, msg) = err("schema = 1\n# a \u{7} b\n");
        assert!(msg.contains("U+0007"), "{msg}");
        let (line, msg) = err(&GOOD.replace('\n', "\r"));
        assert_eq!(line, 1);
        assert!(msg.contains("carriage return"), "{msg}");
        // CRLF is fine.
        assert!(parse(GOOD.replace('\n', "\r\n").as_bytes(), Path::new("b")).is_ok());
    }

    /// A bad measure.pcr is reported on its own line, not on the first line that starts
    /// with "pcr".
    #[test]
    fn measure_pcr_names_its_own_line() {
        let text = GOOD.replace("cx7 = \"28.42.1000\"", "pcr_fw = \"1.0\"")
            + "\n[measure]\ntimeout_ms = 100\npcr = 11\n";
        let (line, msg) = err(&text);
        assert_eq!(line, line_starting(&text, "pcr ="), "{msg}");
        assert!(msg.contains("measure.pcr 11"), "{msg}");
        let text = GOOD.to_string() + "\n[measure]\npcr = 7\ntimeout_ms = 5\n";
        let (line, msg) = err(&text);
        assert_eq!(line, line_starting(&text, "timeout_ms"), "{msg}");
        // Dotted keys and inline tables name their line too.
        let text = GOOD.replace("[nvidia]", "measure.pcr = 99\n\n[nvidia]");
        let (line, _) = err(&text);
        assert_eq!(line, line_starting(&text, "measure.pcr"));
    }

    /// BOMs the init could not boot with are refused by parse (so by the init and by
    /// `validator bom check` alike), each on the line of the key at fault.
    #[test]
    fn boms_no_boot_could_use_are_refused_on_the_key_line() {
        let hash32 = "ab".repeat(32);
        let good_verity = format!(
            "\n[verity]\nsource = \"bom\"\nroot_hash = \"{hash32}\"\nalgorithm = \"sha256\"\n\
             data_block_size = 4096\nhash_block_size = 4096\ndata_blocks = 256\nsalt = \"{}\"\n",
            "cd".repeat(256)
        );
        assert!(parse((GOOD.to_string() + &good_verity).as_bytes(), Path::new("b")).is_ok());
        let cases: Vec<(String, &str, &str)> = vec![
            (
                "\n[verity]\nsource = \"bom\"\n".into(),
                "source",
                "no verity.root_hash",
            ),
            (
                "\n[verity]\nsource = \"bom\"\nroot_hash = \"00\"\n".into(),
                "root_hash",
                "has 1 bytes",
            ),
            (
                format!("\n[verity]\nalgorithm = \"sha512\"\nroot_hash = \"{hash32}\"\n"),
                "root_hash",
                "not 64 bytes for sha512",
            ),
            (
                "\n[verity]\nroot_hash = \"\"\n".into(),
                "root_hash",
                "has 0 bytes",
            ),
            (
                "\n[verity]\ndata_block_size = 3\n".into(),
                "data_block_size",
                "data_block_size 3 is not a power of two",
            ),
            (
                "\n[verity]\ndata_block_size = 8192\n".into(),
                "data_block_size",
                "page size",
            ),
            (
                "\n[verity]\nhash_block_size = 0\n".into(),
                "hash_block_size",
                "hash_block_size 0",
            ),
            (
                "\n[verity]\ndata_blocks = 0\n".into(),
                "data_blocks",
                "data_blocks 0",
            ),
            (
                format!("\n[verity]\nsalt = \"{}\"\n", "ab".repeat(300)),
                "salt",
                "300 bytes",
            ),
            (
                "\n[policy.module_sha256]\n\"../../etc/passwd x\" = \"".to_string()
                    + &"0".repeat(64)
                    + "\"\n",
                "\"../../etc",
                "is not a module name",
            ),
            (
                "\n[policy.module_sha256]\n\"\" = \"".to_string() + &"0".repeat(64) + "\"\n",
                "\"\"",
                "\"\" is not a module name",
            ),
            (
                format!(
                    "\n[policy.module_sha256]\nmlx5-core = \"{}\"\nmlx5_core = \"{}\"\n",
                    "0".repeat(64),
                    "1".repeat(64)
                ),
                "mlx5_core",
                "pinned twice",
            ),
            (
                "\n[policy]\nout_of_tree = [\"nvidia\",\n  \"nvidia-uvm\",\n  \"nvidia_uvm\"]\n"
                    .into(),
                "  \"nvidia_uvm",
                "listed twice in policy.out_of_tree",
            ),
        ];
        for (extra, key, want) in cases {
            let text = GOOD.to_string() + &extra;
            let (line, msg) = err(&text);
            assert!(msg.contains(want), "{extra}: {msg}");
            assert_eq!(line, line_starting(&text, key), "{extra}: {msg}");
        }
    }
}

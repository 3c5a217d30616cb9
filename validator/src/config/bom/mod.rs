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
//!
//! Layout: this module holds the top-level [`Bom`], [`LoadedBom`], [`parse`] and [`load`];
//! each section has its own file (`kernel`, `nvidia`, `components`, `modules`, `policy`,
//! `verity`, `measure`, `slot`, `report`, and [`hardware`]), re-exported here so every
//! type is `config::bom::X`; [`hardware`] stays a public module of its own (its checks
//! and limits have names of their own). `checked` makes the checked string types,
//! `lines` finds the line of a key, `checks` holds the cross-checks.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::util::hex;

mod checked;
mod checks;
mod components;
pub mod hardware;
mod kernel;
mod lines;
mod measure;
mod modules;
mod nvidia;
mod policy;
mod report;
mod slot;
mod verity;

pub use checked::Version;
pub use components::{Components, OFED_MODULES};
/// The hardware the image expects on the node (`[hardware]`, see [`hardware`]).
pub use hardware::Hardware;
pub use kernel::Kernel;
pub use measure::{AkKind, Measure, TpmPolicy};
pub use modules::{is_module_name, ModuleName, Modules};
pub use nvidia::{Flavour, Nvidia};
pub use policy::{Policy, Sha256Hex, TaintLetters, VermagicMode};
pub use report::{ReportCfg, ReportCfgError};
pub use slot::{
    Bootloader, FallbackVia, MarkGood, PlatformPolicy, Slot, SlotConfigError, SlotName,
};
pub use verity::{
    HexString, OnCorruption, RootHashSource, RootPath, Verity, VerityAlgorithm,
    VERITY_DATA_BLOCK_MAX,
};

use lines::{line_of, parse_message, KeyLines};

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
        invalid(line, removed_hint(parse_message(text, at, e.message())))
    })?;
    checks::check(&bom, &KeyLines::new(text)).map_err(|(line, message)| invalid(line, message))?;
    Ok(LoadedBom {
        bom,
        bytes: bytes.to_vec(),
        sha256: hex(&Sha256::digest(bytes)),
        path: path.to_path_buf(),
    })
}

/// A parser message with a pointer to what replaced a removed key.
fn removed_hint(message: String) -> String {
    if message.starts_with("unknown field `firmware`") {
        format!(
            "{message}; [firmware] was never checked and is no longer read: the firmware \
             the preflight holds the node to is hardware.gpu_vbios, hardware.nvswitch_bios \
             and hardware.mlx5_fw_version"
        )
    } else {
        message
    }
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
mod tests;

//! The BOM's `[policy]` table: how strictly the module gate judges (vermagic mode,
//! out-of-tree modules, pinned module digests, allowed taint, extra trusted certificates).
//!
//! Contract: values are checked by type here; pins of names that are no module and
//! duplicates are refused by the BOM's cross-checks (`checks.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::checked::checked_string;
use super::ModuleName;

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

checked_string!(
    #[derive(Default)]
    /// A lower-case or upper-case hex SHA-256 (64 digits).
    Sha256Hex,
    "SHA-256 (64 hex digits)",
    |s| s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
);
checked_string!(
    #[derive(Default)]
    /// Kernel taint letters (`/proc/sys/kernel/tainted` as `dmesg` prints them).
    TaintLetters,
    "taint letters (from PFSRMBUDAWCIOELKXTNJ)",
    |s| s.bytes().all(|c| b"PFSRMBUDAWCIOELKXTNJ".contains(&c))
);

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
    /// Required SHA-256 of module files, by module name (checked by [`super::parse`]).
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

//! The BOM's `[modules]` table and the module names every section uses: what the init
//! loads from the initramfs (`load`) and what the preflight loads from the verified root
//! (`root`).
//!
//! Contract: names are module names as the kernel spells them ([`is_module_name`]);
//! `-` and `_` are the same name ([`ModuleName::normalized`]). A name listed twice, or in
//! both lists, is refused by the BOM's cross-checks (`checks.rs`), not here.

use serde::{Deserialize, Serialize};

use super::checked::checked_string;

/// True for a module name as the kernel spells it: 1 to 55 letters, digits, `-`, `_`.
pub fn is_module_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() < 56
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

checked_string!(
    #[derive(Default)]
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

//! What the gate holds modules to ([`Policy`], from the BOM by [`Policy::from_bom`]) and
//! the BOM's own module rules: out-of-tree modules only when the BOM lists them, the
//! NVIDIA flavour by the `nvidia` module's licence. The SHA-256 allowlist and
//! `module_blacklist=` are applied by the gate's pass over the file (`Gate::inspect`).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::bom::{Flavour, VermagicMode};
use crate::formats::kmod::modinfo;

use super::{Gate, ReasonCode, Verdict};

/// What the gate holds modules to.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The kernel release modules must be built for (strict mode).
    pub release: Option<String>,
    /// The kernel's full vermagic string, when known (from its image).
    pub kernel_vermagic: Option<String>,
    pub mode: VermagicMode,
    /// Unsigned modules are refused (default true).
    pub require_signature: bool,
    /// Modules allowed without `intree=Y`; `None`: no restriction (no BOM policy).
    pub out_of_tree: Option<BTreeSet<String>>,
    pub flavour: Option<Flavour>,
    /// Module name to required lower-case hex SHA-256 of its file.
    pub sha256: BTreeMap<String, String>,
    /// An undefined symbol missing from the table is a failure (the table is complete).
    pub unknown_symbols_fatal: bool,
    /// The kernel command line's `module_blacklist=` names
    /// ([`crate::config::cmdline::module_blacklist`]).
    pub module_blacklist: Vec<String>,
    /// The kernel's `bin:` blacklist (UEFI `dbx` and `MokListXRT` SHA-256 entries,
    /// [`crate::runtime::uefi_keys`] reads them): a module whose image digest is listed is
    /// refused once its signature verified, as Debian's `mod_is_hash_blacklisted` does.
    pub hash_blacklist: Vec<[u8; 32]>,
    /// Digests crypto modules loaded before the one judged gave the kernel (Debian 6.1's
    /// `sha512_generic`); shared by clones of the policy.
    pub module_digests: super::ModuleDigests,
}

impl Policy {
    /// The policy a BOM asks for (signatures always required).
    pub fn from_bom(bom: &crate::config::bom::Bom) -> Policy {
        Policy {
            release: Some(bom.kernel.release.to_string()),
            kernel_vermagic: None,
            mode: bom.policy.vermagic,
            require_signature: true,
            out_of_tree: Some(
                bom.policy
                    .out_of_tree
                    .iter()
                    .map(|m| m.normalized())
                    .collect(),
            ),
            flavour: bom.nvidia.as_ref().map(|n| n.flavour),
            sha256: bom
                .policy
                .module_sha256
                .iter()
                .map(|(k, v)| {
                    (
                        crate::formats::kmod::normalize_name(k),
                        v.0.to_ascii_lowercase(),
                    )
                })
                .collect(),
            unknown_symbols_fatal: true,
            module_blacklist: Vec::new(),
            hash_blacklist: Vec::new(),
            module_digests: super::ModuleDigests::default(),
        }
    }
}

impl Gate {
    pub(super) fn check_policy(&self, name: &str, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        let mi = &elf.modinfo;
        let intree = mi.get("intree") == Some("Y");
        if !intree
            && !self
                .policy
                .out_of_tree
                .as_ref()
                .is_none_or(|allowed| allowed.contains(name))
        {
            v.reason(
                ReasonCode::OutOfTree,
                "out-of-tree module not listed in the BOM's policy.out_of_tree",
            );
        }
        if name == "nvidia" {
            if let Some(f) = self.policy.flavour {
                let lic = v.license.clone().unwrap_or_default();
                let ok = match f {
                    Flavour::Open => lic == "Dual MIT/GPL",
                    Flavour::Proprietary => lic == "NVIDIA",
                };
                if !ok {
                    v.reason(
                        ReasonCode::Flavour,
                        format!("licence '{lic}' is not the {f:?} flavour the BOM names"),
                    );
                }
            }
        }
    }
}

//! One line of the report per module the loader touched ([`ModuleReport`]) and what
//! happened to it ([`ModStatus`]).

use serde::{Deserialize, Serialize};

use crate::gate;

/// What happened to one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModStatus {
    Loaded,
    AlreadyLoaded,
    Builtin,
    /// The kernel refused it (errno in the report).
    Failed,
    /// The module gate refused it; the kernel was never asked to load it.
    Rejected,
    /// Not attempted: a dependency failed or the file is missing from the index.
    Skipped,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One line of the report's `modules` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModuleReport {
    pub name: String,
    pub status: ModStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Symbolic errno (`ENOENT`) when the kernel refused the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Loaded as a soft dependency of another module (its failure is not fatal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub softdep: bool,
    /// Why the module gate refused it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<gate::Reason>,
    /// The signature as `modinfo` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig_hashalgo: Option<String>,
    /// SHA-256 of the module image the kernel was given (decompressed, signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The parameters the kernel was given with it, as `modprobe` would give them (the
    /// root's `modprobe.d` `options`, then the command line's `MODULE.PARAM=`); absent:
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<String>,
    /// When the module's turn came (CLOCK_BOOTTIME, µs); 0 when it was not attempted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_us: u64,
    /// Time spent in the gate (part of `duration_us`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gate_us: u64,
    pub duration_us: u64,
}

impl ModuleReport {
    pub(crate) fn new(name: &str, status: ModStatus) -> ModuleReport {
        ModuleReport {
            name: name.to_string(),
            status,
            path: None,
            errno: None,
            message: None,
            softdep: false,
            reasons: Vec::new(),
            signer: None,
            sig_key: None,
            sig_hashalgo: None,
            sha256: None,
            options: None,
            start_us: 0,
            gate_us: 0,
            duration_us: 0,
        }
    }

    /// Whether this outcome lets dependants load.
    pub fn ok(&self) -> bool {
        matches!(
            self.status,
            ModStatus::Loaded | ModStatus::AlreadyLoaded | ModStatus::Builtin
        )
    }
}

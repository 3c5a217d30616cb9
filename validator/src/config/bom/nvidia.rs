//! The BOM's `[nvidia]` table: the NVIDIA driver version and flavour the image carries
//! (and the fabric manager's version).
//!
//! Contract: versions are checked strings; the flavour is `open` or `proprietary`, by the
//! licence the modules declare. Limits: reported, not compared with the modules here.

use serde::{Deserialize, Serialize};

use super::Version;

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
pub struct Nvidia {
    pub driver_version: Version,
    pub flavour: Flavour,
    pub fabric_manager_version: Option<Version>,
}

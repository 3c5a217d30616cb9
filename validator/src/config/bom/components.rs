//! The BOM's `[components]` table: versions of the user-space parts of the image (OFED,
//! the container toolkit, kubelet).
//!
//! Contract: each is optional and a checked [`Version`]; they are reported, not checked
//! against the node.

use serde::{Deserialize, Serialize};

use super::Version;

/// Versions of the user-space parts of the image.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Components {
    pub ofed: Option<Version>,
    pub container_toolkit: Option<Version>,
    pub kubelet: Option<Version>,
}

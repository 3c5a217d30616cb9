//! The BOM's `[kernel]` table: the kernel this image boots, by `uname -r`.
//!
//! Contract: the release is a [`Version`] (checked alphabet); whether it matches the
//! running kernel or the modules is for the stages to judge.

use serde::{Deserialize, Serialize};

use super::Version;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    /// `uname -r` of the kernel this image boots.
    pub release: Version,
}

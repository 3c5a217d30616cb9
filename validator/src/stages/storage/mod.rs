//! Stage `storage`: wait for the root device named by `root=` (or by the BOM's `[slot]`
//! templates), or for the verity root's partitions when the BOM has a `[verity]` section,
//! with the `root=` deadline.
//!
//! Finding and waiting for devices is shared with other stages and lives in
//! [`crate::runtime::devices`] (the verity partitions' rules in
//! [`crate::runtime::verity_parts`]); this stage decides what to wait for and records the
//! root it found.

pub mod verity_parts;

use serde::{Deserialize, Serialize};

use super::{Classified, Context, Fault};
use crate::config::cmdline::RootSpec;
use crate::runtime::devices::{find_root, FoundPartition, StorageError};
use crate::runtime::verity_parts::PartsError;

/// The root filesystem we mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RootReport {
    #[serde(flatten)]
    pub partition: FoundPartition,
    pub fstype: String,
    pub read_only: bool,
    pub mountpoint: String,
}

/// The booted slot's root and signature partitions from the BOM's `[slot]` templates.
pub(crate) fn slot_specs(ctx: &Context) -> (Option<RootSpec>, Option<RootSpec>) {
    let cfg = ctx.bom.as_ref().and_then(|b| b.bom.slot.as_ref());
    let slot = ctx
        .args
        .slot
        .as_deref()
        .and_then(crate::config::bom::SlotName::parse);
    match (cfg, slot) {
        (Some(c), Some(s)) => c.root_specs(s),
        _ => (None, None),
    }
}

/// Why the storage stage failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageStageError {
    #[error("no root= on the kernel command line")]
    NoRootSpec,
    /// The device did not show up in time: a disk or controller is missing.
    #[error(transparent)]
    NotFound(StorageError),
    /// The disk layout is not the image's (ambiguous names, bad verity partitions).
    #[error(transparent)]
    Layout(StorageError),
    #[error(transparent)]
    Verity(#[from] PartsError),
}

impl From<StorageError> for StorageStageError {
    fn from(e: StorageError) -> StorageStageError {
        match e {
            StorageError::NotFound { .. } | StorageError::Io { .. } => {
                StorageStageError::NotFound(e)
            }
            StorageError::Ambiguous { .. } => StorageStageError::Layout(e),
        }
    }
}

impl Classified for StorageStageError {
    fn fault(&self) -> Fault {
        match self {
            StorageStageError::NoRootSpec => Fault::Platform,
            StorageStageError::NotFound(_) => Fault::Hardware,
            StorageStageError::Layout(_) | StorageStageError::Verity(_) => Fault::Image,
        }
    }
}

/// The stage: wait for the root device named by `root=`, or for the verity root's
/// partitions when the BOM has a `[verity]` section.
pub fn run(ctx: &mut Context) -> Result<String, StorageStageError> {
    if let Some(cfg) = ctx.verity_cfg().cloned() {
        return verity_parts::run(ctx, &cfg);
    }
    let spec = ctx
        .args
        .root
        .clone()
        .or_else(|| slot_specs(ctx).0)
        .ok_or(StorageStageError::NoRootSpec)?;
    let found = ctx.wait_scan(
        &format!("root device {spec}"),
        |parts| find_root(&spec, parts),
        |e| e,
    )?;
    let detail = format!("{spec} is {}", found.device);
    ctx.facts.root = Some(RootReport {
        partition: found,
        fstype: String::new(),
        read_only: ctx.args.read_only,
        mountpoint: ctx.roots.new_root.display().to_string(),
    });
    Ok(detail)
}

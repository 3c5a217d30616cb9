//! The verity root's partitions, the rules shared by the `storage` stage (which waits for
//! them) and the `verity` stage (which verifies them): named on the command line, or by
//! the systemd convention (data PARTUUID = first 128 bits of the root hash, hash PARTUUID
//! = last 128 bits), or by their Discoverable Partitions types; and reading the
//! `root-verity-sig` partition (parsed here, verified by the `verity` stage).
//!
//! Contract: pure over a scan's partitions, except [`read_sig_partition`], which reads at
//! most [`SIG_PARTITION_MAX`] bytes. Current limits: x86-64 DPS types only.

use super::devices::{matches, FoundPartition};
use crate::config::cmdline::RootSpec;
use crate::formats::verity::sig::{self, SigError};
use crate::formats::verity::{
    uuid_from_hash, DPS_ROOT_VERITY_SIG_X86_64, DPS_ROOT_VERITY_X86_64, DPS_ROOT_X86_64,
};

/// Why the verity partitions cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PartsError {
    #[error("{0}")]
    Partitions(String),
    #[error("{device}: {why}")]
    Read { device: String, why: String },
    #[error(transparent)]
    Signature(#[from] SigError),
    #[error("no trusted root hash: the BOM's verity.source is \"bom\" but it has no root_hash")]
    NoRootHash,
}

/// Where the verity partitions are named on the command line (`validator.verity_data=`,
/// `validator.verity_hash=`, `validator.verity_sig=`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub data: Option<RootSpec>,
    pub hash: Option<RootSpec>,
    pub sig: Option<RootSpec>,
}

/// The partitions the verity root is made of.
#[derive(Debug, Clone)]
pub struct Parts {
    pub data: FoundPartition,
    pub hash: FoundPartition,
    pub sig: Option<SigPartition>,
}

/// The `root-verity-sig` partition and what it holds (read once, verified later).
#[derive(Debug, Clone)]
pub struct SigPartition {
    pub partition: FoundPartition,
    pub sig: sig::RootHashSig,
}

fn unique<'a>(
    parts: &'a [FoundPartition],
    what: &str,
    f: impl Fn(&FoundPartition) -> bool,
) -> Result<Option<&'a FoundPartition>, PartsError> {
    let hits: Vec<&FoundPartition> = parts.iter().filter(|p| f(p)).collect();
    match hits.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(PartsError::Partitions(format!(
            "more than one {what} partition: {}",
            hits.iter()
                .map(|p| p.device.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Finds the signature partition (when the root hash comes from one).
pub fn find_sig(
    parts: &[FoundPartition],
    names: &Names,
) -> Result<Option<FoundPartition>, PartsError> {
    if let Some(spec) = &names.sig {
        return Ok(parts.iter().find(|p| matches(spec, p)).cloned());
    }
    Ok(unique(parts, "root-verity-sig", |p| {
        p.type_uuid == DPS_ROOT_VERITY_SIG_X86_64
    })?
    .cloned())
}

/// Finds the data and hash partitions for `root_hash`; `None` until both are there.
pub fn find_data_hash(
    parts: &[FoundPartition],
    names: &Names,
    root_hash: &[u8],
) -> Result<Option<(FoundPartition, FoundPartition)>, PartsError> {
    // Named on the command line; else the PARTUUID made of one half of the root hash;
    // else the one partition of the DPS type.
    let locate = |named: &Option<RootSpec>,
                  half: Option<&[u8]>,
                  what: &str,
                  ty: &str|
     -> Result<Option<FoundPartition>, PartsError> {
        if let Some(spec) = named {
            return Ok(parts.iter().find(|p| matches(spec, p)).cloned());
        }
        let conv = half
            .filter(|_| root_hash.len() >= 32)
            .and_then(uuid_from_hash);
        match conv.and_then(|u| parts.iter().find(|p| p.partuuid == u).cloned()) {
            Some(p) => Ok(Some(p)),
            None => Ok(unique(parts, what, |p| p.type_uuid == ty)?.cloned()),
        }
    };
    let n = root_hash.len();
    let data = locate(&names.data, root_hash.get(..16), "root", DPS_ROOT_X86_64)?;
    let hash = locate(
        &names.hash,
        root_hash.get(n.saturating_sub(16)..),
        "root-verity",
        DPS_ROOT_VERITY_X86_64,
    )?;
    Ok(data.zip(hash))
}

/// Most bytes read from a signature partition (systemd-repart writes a few KiB of JSON).
pub const SIG_PARTITION_MAX: usize = 64 * 1024;

/// Reads the head of a `root-verity-sig` partition.
pub fn read_sig_partition(device: &str) -> Result<Vec<u8>, PartsError> {
    crate::sys::read_device_at(device, 0, SIG_PARTITION_MAX).map_err(|e| PartsError::Read {
        device: device.into(),
        why: e.to_string(),
    })
}

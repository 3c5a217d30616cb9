//! The `storage` stage's part for a verified root: wait for the verity root's partitions
//! (found by the rules of [`crate::runtime::verity_parts`]) and read the `root-verity-sig`
//! partition (parsed here, verified by the `verity` stage).

use super::{RootReport, StorageStageError};
use crate::config::bom::{RootHashSource, Verity};
use crate::formats::verity::sig;
use crate::runtime::verity_parts::{
    find_data_hash, find_sig, read_sig_partition, Names, Parts, PartsError, SigPartition,
};
use crate::stages::Context;

/// Waits for the verity partitions (the root hash is only parsed here, to find them by
/// convention; it is verified in the verity stage).
pub fn run(ctx: &mut Context, cfg: &Verity) -> Result<String, StorageStageError> {
    let names = Names {
        data: ctx.args.verity_data.clone(),
        hash: ctx.args.verity_hash.clone(),
        sig: ctx
            .args
            .verity_sig
            .clone()
            .or_else(|| super::slot_specs(ctx).1),
    };
    let what = "the verity root's partitions (data, hash and, for a signed root hash, signature)";
    let parts = ctx.wait_scan(
        what,
        |found| -> Result<Option<Parts>, StorageStageError> {
            let (sig, root) = match cfg.source {
                RootHashSource::Bom => (
                    None,
                    cfg.root_hash
                        .as_ref()
                        .and_then(|h| crate::util::unhex(h.as_str()))
                        .ok_or(PartsError::NoRootHash)?,
                ),
                RootHashSource::Signature => {
                    let Some(sigp) = find_sig(found, &names)? else {
                        return Ok(None);
                    };
                    let bytes = read_sig_partition(&sigp.device)?;
                    let parsed = sig::parse(&bytes).map_err(PartsError::Signature)?;
                    let root = parsed.root_hash.clone();
                    (
                        Some(SigPartition {
                            partition: sigp,
                            sig: parsed,
                        }),
                        root,
                    )
                }
            };
            Ok(find_data_hash(found, &names, &root)?.map(|(data, hash)| Parts { data, hash, sig }))
        },
        StorageStageError::NotFound,
    )?;
    let detail = format!(
        "verity data {} hash {}{}",
        parts.data.device,
        parts.hash.device,
        parts
            .sig
            .as_ref()
            .map(|s| format!(" signature {}", s.partition.device))
            .unwrap_or_default()
    );
    ctx.facts.root = Some(RootReport {
        partition: parts.data.clone(),
        fstype: String::new(),
        read_only: true,
        mountpoint: ctx.roots.new_root.display().to_string(),
    });
    ctx.verity_parts = Some(parts);
    Ok(detail)
}

//! Stage `critical`: the BOM's critical files are read in full through the mounted
//! verity device, so a corrupted block in them stops this boot rather than a training job
//! hours later (dm-verity checks each block as it is read; a bad one reads as `EIO`).
//!
//! The reading is [`crate::runtime::critical::read_critical`]: each file streamed through
//! one bounded buffer, regular files only (a FIFO or a device on the root is refused,
//! never waited on). When every failed file failed with `EIO`, the cause is told apart
//! ([`crate::runtime::read_fault`]): a block that failed its hash is the image's fault; a
//! read the disk could not do (the verity status still `V`, and the kernel's failed read
//! on its disk) is the hardware's; anything else stays the image's. Limits: a
//! huge critical file takes as long to read as it is large; the BOM names which files are
//! read.

use super::{Classified, Context, Fault};
use crate::runtime::critical::read_critical;
use crate::runtime::read_fault::{self, Cause, ReadFault};

/// Why the critical stage failed.
#[derive(Debug, thiserror::Error)]
pub enum CriticalError {
    /// Files that could not be read in full; with an `EIO`, what the kernel says made the
    /// reads fail ([`read_fault::judge`]).
    #[error("critical file(s) unreadable through verity: {}{}", .files.join(", "),
        .cause.as_ref().map(|f| format!(": {}", f.describe())).unwrap_or_default())]
    Unreadable {
        files: Vec<String>,
        cause: Option<ReadFault>,
    },
}

impl Classified for CriticalError {
    fn fault(&self) -> Fault {
        match self {
            // The disk could not read a block dm-verity had no reason to refuse.
            CriticalError::Unreadable {
                cause:
                    Some(ReadFault {
                        cause: Cause::Disk, ..
                    }),
                ..
            } => Fault::Hardware,
            // A block that failed its hash, or a file the image holds wrongly.
            CriticalError::Unreadable { .. } => Fault::Image,
        }
    }
}

/// The stage.
pub fn run(ctx: &mut Context) -> Result<String, CriticalError> {
    let files: Vec<String> = ctx
        .verity_cfg()
        .map(|c| c.critical.iter().map(|p| p.to_string()).collect())
        .unwrap_or_default();
    let results = read_critical(&ctx.roots.new_root, &files);
    let failed: Vec<(&str, &str)> = results
        .iter()
        .filter(|c| !c.ok)
        .map(|c| (c.path.as_str(), c.error.as_deref().unwrap_or("")))
        .collect();
    let bad: Vec<String> = failed.iter().map(|(p, e)| format!("{p} ({e})")).collect();
    // Judged only when every failure is an `EIO` (a missing or irregular file is the
    // image's whatever the disk does).
    let eio = !failed.is_empty() && failed.iter().all(|(_, e)| e.starts_with("EIO:"));
    let bytes: u64 = results.iter().map(|c| c.bytes).sum();
    let cause = ctx.facts.verity.as_ref().filter(|_| eio).map(|v| {
        read_fault::of_verity(
            &ctx.roots.dev,
            &ctx.roots.sys,
            &v.data_device,
            &v.hash_device,
        )
    });
    if let Some(v) = ctx.facts.verity.as_mut() {
        v.critical_files = results;
        if let Some(f) = &cause {
            v.read_fault = Some(f.clone());
        }
    }
    if bad.is_empty() {
        Ok(format!(
            "{} file(s), {bytes} bytes read through verity",
            files.len()
        ))
    } else {
        Err(CriticalError::Unreadable { files: bad, cause })
    }
}

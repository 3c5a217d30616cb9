//! Stage `critical`: the BOM's critical files are read in full through the mounted
//! verity device, so a corrupted block in them stops this boot rather than a training job
//! hours later (dm-verity checks each block as it is read; a bad one reads as `EIO`).
//!
//! The reading is [`crate::runtime::critical::read_critical`]: each file streamed through
//! one bounded buffer, regular files only (a FIFO or a device on the root is refused,
//! never waited on). Limits: a huge critical file takes as long to read as it is large;
//! the BOM names which files are read.

use super::{Classified, Context, Fault};
use crate::runtime::critical::read_critical;

/// Why the critical stage failed.
#[derive(Debug, thiserror::Error)]
pub enum CriticalError {
    #[error("critical file(s) unreadable through verity: {}", .0.join(", "))]
    Unreadable(Vec<String>),
}

impl Classified for CriticalError {
    fn fault(&self) -> Fault {
        Fault::Image
    }
}

/// The stage.
pub fn run(ctx: &mut Context) -> Result<String, CriticalError> {
    let files: Vec<String> = ctx
        .verity_cfg()
        .map(|c| c.critical.iter().map(|p| p.to_string()).collect())
        .unwrap_or_default();
    let results = read_critical(&ctx.roots.new_root, &files);
    let bad: Vec<String> = results
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{} ({})", c.path, c.error.as_deref().unwrap_or("")))
        .collect();
    let bytes: u64 = results.iter().map(|c| c.bytes).sum();
    if let Some(v) = ctx.facts.verity.as_mut() {
        v.critical_files = results;
    }
    if bad.is_empty() {
        Ok(format!(
            "{} file(s), {bytes} bytes read through verity",
            files.len()
        ))
    } else {
        Err(CriticalError::Unreadable(bad))
    }
}

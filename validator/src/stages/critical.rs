//! Stage `critical`: the BOM's critical files are read in full through the mounted
//! verity device, so a corrupted block in them stops this boot rather than a training job
//! hours later (dm-verity checks each block as it is read; a bad one reads as `EIO`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Classified, Context, Fault};

/// One critical file read through the verity device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CriticalFile {
    pub path: String,
    pub bytes: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Reads each critical file in full under `root` (the mounted verity device).
pub fn read_critical(root: &Path, files: &[String]) -> Vec<CriticalFile> {
    use std::io::Read;
    files
        .iter()
        .map(|f| {
            let path = root.join(f.trim_start_matches('/'));
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            let r = std::fs::File::open(&path).and_then(|mut h| loop {
                match h.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            });
            CriticalFile {
                path: f.clone(),
                bytes: total,
                ok: r.is_ok(),
                error: r.err().map(|e| {
                    let name = crate::sys::io_errno_name(&e).unwrap_or_default();
                    format!("{name}: {e} after {total} bytes")
                }),
            }
        })
        .collect()
}

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

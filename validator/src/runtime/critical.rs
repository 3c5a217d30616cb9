//! Reading critical files in full, as the `critical` stage does after mounting the verity
//! root (the [`CriticalFile`] results are the `verity` report's `critical_files`).
//!
//! Contract: each file is streamed through one [`READ_BUF`] buffer (memory does not grow
//! with the file) and must be a regular file (a FIFO or a device is refused, never waited
//! on); a failure is a result naming its errno and the bytes read, never a panic.
//! Limits: a huge critical file takes as long to read as it is large.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::util::fs::{open_input, InputError};

/// One critical file read through the verity device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CriticalFile {
    pub path: String,
    pub bytes: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The read buffer: a critical file is streamed through it, so the init's memory does not
/// grow with the file.
pub const READ_BUF: usize = 1 << 20;

/// Reads each critical file in full under `root` (the mounted verity device).
pub fn read_critical(root: &Path, files: &[String]) -> Vec<CriticalFile> {
    use std::io::Read;
    files
        .iter()
        .map(|f| {
            let path = root.join(f.trim_start_matches('/'));
            let mut buf = vec![0u8; READ_BUF];
            let mut total = 0u64;
            // A regular file only: a FIFO would block the open forever, a device has no
            // end.
            let opened = open_input(&path, false).map_err(|e| match e {
                InputError::Io { source, .. } => source,
                other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
            });
            let r = opened.and_then(|mut h| loop {
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
                error: r.err().map(|e| match crate::sys::io_errno_name(&e) {
                    Some(name) => format!("{name}: {e} after {total} bytes"),
                    None => e.to_string(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regular files are read in full; a FIFO, a directory and a missing file are failures
    /// that name what they are, and the FIFO is refused without waiting for a writer.
    #[test]
    fn critical_files_are_regular_files_read_in_full() {
        let d = std::env::temp_dir().join(format!("vld-critical-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sbin")).unwrap();
        std::fs::write(d.join("sbin/init"), vec![7u8; READ_BUF + 5]).unwrap();
        nix::unistd::mkfifo(
            &d.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let files: Vec<String> = ["/sbin/init", "/fifo", "/sbin", "/missing"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let r = read_critical(&d, &files);
        assert!(r[0].ok && r[0].bytes == READ_BUF as u64 + 5, "{:?}", r[0]);
        assert!(!r[1].ok, "{:?}", r[1]);
        assert!(
            r[1].error
                .as_deref()
                .unwrap()
                .ends_with("is a FIFO, not a regular file"),
            "{:?}",
            r[1]
        );
        assert!(
            r[2].error
                .as_deref()
                .unwrap()
                .ends_with("is a directory, not a regular file"),
            "{:?}",
            r[2]
        );
        assert!(
            r[3].error.as_deref().unwrap().starts_with("ENOENT: "),
            "{:?}",
            r[3]
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

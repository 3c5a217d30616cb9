//! A read through the verity device that failed with `EIO`, told apart: a block that
//! failed its hash (the image) or a read the disk could not do (the hardware).
//! dm-verity returns `EIO` for both; what differs is the kernel's own account.
//!
//! Contract: [`judge`] reads the verity target's status (`DM_TABLE_STATUS`): `C` once
//! any block failed its hash (dm-verity sets it in `verity_handle_err`, in every mode, and
//! never clears it), `V` while every check so far was good. After an `EIO`, `C` is
//! corruption; `V` means the read failed below dm-verity, which passes a disk's error
//! through without hashing (no FEC configured) and never counts it as corruption (Linux
//! 6.1 and 6.12 alike). The kernel log's lines for the same boot are kept as evidence:
//! the block layer's `I/O error, dev <disk>, sector <n> ...` and dm-verity's
//! `device-mapper: verity: <dev>: data|metadata block <n> is corrupted`.
//!
//! Limits: a status that cannot be read leaves the cause unknown (the caller keeps its
//! own class). With `ignore_corruption` a mismatch reads no `EIO` at all; with
//! `restart_on_corruption` or `panic_on_corruption` the kernel acts before the init can.
//! A block that read bad data and then failed its re-read (dm-verity's recheck, 6.1.80 and
//! later) is counted as corruption by the kernel, and so here.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sys::{dm, kmsg};

/// Kernel log lines kept as evidence, at most.
const EVIDENCE: usize = 4;

/// What made the reads fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// dm-verity found a block whose hash is wrong (status `C`): the image.
    Corruption,
    /// The status is still `V`: the disk failed the read (the hardware).
    Disk,
    /// The status could not be read.
    Unknown,
}

/// The verdict on failed reads through the verity device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReadFault {
    pub cause: Cause,
    /// The verity target's status as the kernel reported it (`V`, `C`), or why it could
    /// not be read.
    pub status: String,
    /// The kernel's own lines for it, newest last.
    pub kernel: Vec<String>,
}

impl ReadFault {
    /// One line for a reason: the cause, the status and the newest kernel line.
    pub fn describe(&self) -> String {
        let what = match self.cause {
            Cause::Corruption => "a block failed its hash (corruption)",
            Cause::Disk => "the disk failed the read, no hash mismatch (an I/O error)",
            Cause::Unknown => "cause unknown",
        };
        match self.kernel.last() {
            Some(k) => format!("{what}; dm-verity status {}; kernel: {k}", self.status),
            None => format!("{what}; dm-verity status {}", self.status),
        }
    }
}

/// Whether a kernel log message speaks of a failed read or a hash mismatch.
pub fn is_evidence(m: &str) -> bool {
    (m.contains(" error, dev ") && m.contains(" sector "))
        || (m.starts_with("device-mapper: verity") && m.contains("is corrupted"))
}

/// The kernel log's newest lines (at `kmsg_path`, `/dev/kmsg`) of failed reads and hash
/// mismatches; none, with a warning logged, when the log cannot be read.
pub fn evidence(kmsg_path: &Path) -> Vec<String> {
    kmsg::read_messages(kmsg_path, EVIDENCE, is_evidence).unwrap_or_else(|e| {
        log::warn!("reading the kernel log for read errors: {e}");
        Vec::new()
    })
}

/// The cause of failed reads through the device-mapper device `dm_name`: its verity
/// status (via the control node under `dev_root`), and the kernel log at `kmsg`.
pub fn judge(dev_root: &Path, sys_root: &Path, kmsg_path: &Path, dm_name: &str) -> ReadFault {
    let kernel = evidence(kmsg_path);
    let status = dm::Control::open(dev_root, sys_root)
        .and_then(|c| c.status(dm_name, false))
        .map(|t| {
            t.first()
                .map(|s| s.params.trim().to_string())
                .unwrap_or_default()
        });
    match status {
        Ok(s) => ReadFault {
            cause: match s.as_str() {
                "C" => Cause::Corruption,
                "V" => Cause::Disk,
                _ => Cause::Unknown,
            },
            status: s,
            kernel,
        },
        Err(e) => ReadFault {
            cause: Cause::Unknown,
            status: format!("unreadable: {e}"),
            kernel,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_lines_for_reads_and_mismatches_are_evidence() {
        for m in [
            "I/O error, dev vda, sector 2099200 op 0x0:(READ) flags 0x80700 phys_seg 32 prio class 0",
            "critical medium error, dev nvme0n1, sector 8 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2",
            "device-mapper: verity: 254:0: data block 1234 is corrupted",
            "device-mapper: verity: 254:0: metadata block 57 is corrupted",
        ] {
            assert!(is_evidence(m), "{m}");
        }
        for m in [
            "Buffer I/O error on dev dm-0, logical block 1234, async page read",
            "validator: stage critical: start",
            "device-mapper: verity: sha256 using implementation \"sha256-generic\"",
        ] {
            assert!(!is_evidence(m), "{m}");
        }
    }

    #[test]
    fn a_verdict_names_its_cause_status_and_kernel_line() {
        let f = ReadFault {
            cause: Cause::Disk,
            status: "V".into(),
            kernel: vec!["I/O error, dev vda, sector 8".into()],
        };
        assert_eq!(
            f.describe(),
            "the disk failed the read, no hash mismatch (an I/O error); dm-verity status V; \
             kernel: I/O error, dev vda, sector 8"
        );
        // No device-mapper control here: unknown, with why.
        let d = std::env::temp_dir().join(format!("vld-readfault-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let j = judge(&d, &d, &d.join("kmsg"), "root");
        assert_eq!(j.cause, Cause::Unknown);
        assert!(j.status.starts_with("unreadable: "), "{}", j.status);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

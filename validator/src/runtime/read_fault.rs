//! A read through the verity device (or of a plain root) that failed with `EIO`, told
//! apart: a block that failed its hash (the image) or a read the disk could not do (the
//! hardware). dm-verity returns `EIO` for both; what differs is the kernel's own account.
//!
//! Contract: [`judge`] reads the verity target's status (`DM_TABLE_STATUS`, its first
//! word): `C` once any block failed its hash (dm-verity sets it in `verity_handle_err`, in
//! every mode, and never clears it), `V` while every check so far was good. After an `EIO`,
//! `C` is corruption. `V` is the disk only when the kernel log also holds the block
//! layer's line for a read that failed on one of the disks under the device (`I/O error,
//! dev <disk>, sector <n> ...`, printed for the whole disk): dm-verity passes a disk's
//! error through without hashing and never counts it as corruption (Linux 6.1 and 6.12
//! alike, no FEC). `V` without such a line is unknown (a filesystem inside a signed image
//! that returns `EIO` itself, a filesystem larger than the verity data): the caller keeps
//! its image class. [`judge_plain`] does the same for a root without verity (no status:
//! the disk's line alone). The lines kept as evidence are that disk's and dm-verity's
//! `device-mapper: verity: <dev>: data|metadata block <n> is corrupted`. For the ESP,
//! [`fat_evidence`] keeps the FAT driver's lines about its partition (a damaged FAT reads
//! `EIO` with no disk error; only the driver's line says why).
//!
//! Limits: the log lines are matched by disk name, not by time (an older error of the
//! same disk counts); `blk_print_req_error` is rate limited, so a burst can hide the
//! line and leave the cause unknown. With `ignore_corruption` a mismatch reads no `EIO`
//! at all; with `restart_on_corruption` or `panic_on_corruption` the kernel acts before
//! the init can. A block that read bad data and then failed its re-read (dm-verity's
//! recheck, 6.1.80 and later) is counted as corruption by the kernel, and so here.

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
    /// The status is still `V` and the kernel logged a failed read on the disk under it:
    /// the disk failed the read (the hardware).
    Disk,
    /// Neither: the status could not be read, or it is `V` with no failed read logged.
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
            Cause::Unknown => "not a hash mismatch the kernel logged, nor a disk error it logged",
        };
        let status = if self.status.starts_with("none") {
            String::new()
        } else {
            format!("; dm-verity status {}", self.status)
        };
        match self.kernel.last() {
            Some(k) => format!("{what}{status}; kernel: {k}"),
            None => format!("{what}{status}"),
        }
    }
}

/// Whether a kernel log message speaks of a failed read or a hash mismatch.
pub fn is_evidence(m: &str) -> bool {
    (m.contains(" error, dev ") && m.contains(" sector "))
        || (m.starts_with("device-mapper: verity") && m.contains("is corrupted"))
}

/// Whether `m` is the block layer's line for a failed request on disk `disk`
/// (`<status> error, dev <disk>, sector ...`).
pub fn is_disk_error(m: &str, disk: &str) -> bool {
    m.contains(&format!(" error, dev {disk}, sector "))
}

/// Whether `m` is the FAT driver's line about the file system on partition `name`
/// (`FAT-fs (<name>): ...`): the damage it found (`error, fat_get_cluster: invalid
/// cluster chain ...`) and what it did (`Filesystem has been set read-only`).
pub fn is_fat_line(m: &str, name: &str) -> bool {
    m.strip_prefix("FAT-fs (")
        .and_then(|r| r.strip_prefix(name))
        .is_some_and(|r| r.starts_with("): "))
}

/// The kernel log's newest lines (at `kmsg_path`) of the FAT driver about the file system
/// on `device` (`/dev/vda1`), each once, oldest first; none, with a warning logged, when
/// the log cannot be read. A read of a FAT file that fails with `EIO` and no disk error
/// is the file system's damage, which only these lines name.
pub fn fat_evidence(kmsg_path: &Path, device: &str) -> Vec<String> {
    let Some(name) = Path::new(device).file_name().map(|n| n.to_string_lossy()) else {
        return Vec::new();
    };
    let lines =
        kmsg::read_messages(kmsg_path, EVIDENCE, |m| is_fat_line(m, &name)).unwrap_or_else(|e| {
            log::warn!("reading the kernel log for FAT errors: {e}");
            Vec::new()
        });
    crate::util::first_of_each(lines)
}

/// The whole disk a partition's device node lies on (`/dev/vda5` -> `vda`,
/// `/dev/nvme0n1p2` -> `nvme0n1`), from sysfs under `sys_root`: the parent of
/// `class/block/<name>` when that is a partition, else the device itself.
pub fn disk_of(sys_root: &Path, device: &str) -> Option<String> {
    let name = Path::new(device)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let class = sys_root.join("class/block").join(&name);
    if !class.join("partition").exists() {
        return class.exists().then_some(name);
    }
    let target = std::fs::canonicalize(&class).ok()?;
    Some(target.parent()?.file_name()?.to_string_lossy().into_owned())
}

/// The disks under `devices` (partition device nodes), each once.
pub fn disks_of(sys_root: &Path, devices: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in devices {
        match disk_of(sys_root, d) {
            Some(disk) if !out.contains(&disk) => out.push(disk),
            Some(_) => {}
            None => log::warn!("{d}: no disk found for it under {}", sys_root.display()),
        }
    }
    out
}

/// The kernel log's newest lines (at `kmsg_path`, `/dev/kmsg`) of failed reads on
/// `disks` and of hash mismatches; none, with a warning logged, when the log cannot be
/// read.
pub fn evidence(kmsg_path: &Path, disks: &[String]) -> Vec<String> {
    let keep = |m: &str| {
        (m.starts_with("device-mapper: verity") && m.contains("is corrupted"))
            || disks.iter().any(|d| is_disk_error(m, d))
    };
    kmsg::read_messages(kmsg_path, EVIDENCE, keep).unwrap_or_else(|e| {
        log::warn!("reading the kernel log for read errors: {e}");
        Vec::new()
    })
}

/// The verity target's status word (`V`, `C`) of the device-mapper device `dm_name`.
fn verity_status(dev_root: &Path, sys_root: &Path, dm_name: &str) -> Result<String, String> {
    let targets = dm::Control::open(dev_root, sys_root)
        .and_then(|c| c.status(dm_name, false))
        .map_err(|e| e.to_string())?;
    let t = targets
        .first()
        .ok_or_else(|| format!("{dm_name}: no target in DM_TABLE_STATUS"))?;
    t.params
        .split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| format!("{dm_name}: an empty verity status"))
}

/// The cause of failed reads through the device-mapper device `dm_name` whose data and
/// hash lie on `disks`: its verity status (via the control node under `dev_root`), and
/// the kernel log at `kmsg_path`.
pub fn judge(
    dev_root: &Path,
    sys_root: &Path,
    kmsg_path: &Path,
    dm_name: &str,
    disks: &[String],
) -> ReadFault {
    let kernel = evidence(kmsg_path, disks);
    let disk_line = kernel
        .iter()
        .any(|m| disks.iter().any(|d| is_disk_error(m, d)));
    match verity_status(dev_root, sys_root, dm_name) {
        Ok(s) => ReadFault {
            cause: match s.as_str() {
                "C" => Cause::Corruption,
                "V" if disk_line => Cause::Disk,
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

/// [`judge`] of the root's verity device (the init's, [`crate::config::VERITY_DM_NAME`])
/// over the partitions `data` and `hash`, with the kernel log at `dev_root/kmsg`.
pub fn of_verity(dev_root: &Path, sys_root: &Path, data: &str, hash: &str) -> ReadFault {
    judge(
        dev_root,
        sys_root,
        &dev_root.join("kmsg"),
        crate::config::VERITY_DM_NAME,
        &disks_of(sys_root, &[data, hash]),
    )
}

/// [`judge_plain`] of the plain root `device`, with the kernel log at `dev_root/kmsg`.
pub fn of_plain(dev_root: &Path, sys_root: &Path, device: &str) -> ReadFault {
    judge_plain(&dev_root.join("kmsg"), &disks_of(sys_root, &[device]))
}

/// The cause of failed reads of a plain (unverified) root on `disks`: the disk's, when
/// the kernel logged a failed read on one of them; else unknown.
pub fn judge_plain(kmsg_path: &Path, disks: &[String]) -> ReadFault {
    let kernel = evidence(kmsg_path, disks);
    ReadFault {
        cause: if kernel.is_empty() {
            Cause::Unknown
        } else {
            Cause::Disk
        },
        status: "none (not a verity device)".into(),
        kernel,
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
    fn the_fat_drivers_lines_are_matched_by_partition() {
        let m = "FAT-fs (vda1): error, fat_get_cluster: invalid cluster chain (i_pos 32834)";
        assert!(is_fat_line(m, "vda1"));
        assert!(is_fat_line(
            "FAT-fs (vda1): Filesystem has been set read-only",
            "vda1"
        ));
        assert!(!is_fat_line(m, "vda"));
        assert!(!is_fat_line(m, "vda11"));
        assert!(!is_fat_line("FAT-fs (vda11): error", "vda1"));
        assert!(!is_fat_line("I/O error, dev vda, sector 8", "vda1"));
    }

    /// Read from a file in `/dev/kmsg`'s record format: the device's lines, each once.
    #[test]
    fn fat_evidence_keeps_the_devices_lines_once() {
        let d = std::env::temp_dir().join(format!("vld-fat-kmsg-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let k = d.join("kmsg");
        std::fs::write(
            &k,
            "3,1,1,-;FAT-fs (vda1): error, fat_get_cluster: invalid cluster chain (i_pos 9)\n",
        )
        .unwrap();
        assert_eq!(
            fat_evidence(&k, "/dev/vda1"),
            ["FAT-fs (vda1): error, fat_get_cluster: invalid cluster chain (i_pos 9)"]
        );
        assert!(fat_evidence(&k, "/dev/vdb1").is_empty());
        assert!(fat_evidence(&d.join("none"), "/dev/vda1").is_empty());
        std::fs::remove_dir_all(&d).unwrap();
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
        let j = judge(&d, &d, &d.join("kmsg"), "root", &["vda".into()]);
        assert_eq!(j.cause, Cause::Unknown);
        assert!(j.status.starts_with("unreadable: "), "{}", j.status);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A failed read counts for the disks named, and a plain root's cause is the disk
    /// only with such a line.
    #[test]
    fn only_the_disks_own_lines_count() {
        let line =
            "I/O error, dev vda, sector 2048 op 0x0:(READ) flags 0x0 phys_seg 1 prio class 2";
        assert!(is_disk_error(line, "vda"));
        assert!(!is_disk_error(line, "vd"));
        assert!(!is_disk_error(line, "sr0"));
        let d = std::env::temp_dir().join(format!("vld-readfault-plain-{}", std::process::id()));
        std::fs::write(&d, format!("3,1,1,-;{line}\n")).unwrap();
        assert_eq!(judge_plain(&d, &["vda".into()]).cause, Cause::Disk);
        let other = judge_plain(&d, &["nvme0n1".into()]);
        assert_eq!((other.cause, other.kernel.len()), (Cause::Unknown, 0));
        std::fs::remove_file(&d).unwrap();
    }

    /// A partition's disk is its parent in sysfs; a whole disk is itself.
    #[test]
    fn a_partition_lies_on_its_parent_disk() {
        let d = std::env::temp_dir().join(format!("vld-diskof-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let dev = d.join("devices/pci0/virtio1/block/vda");
        std::fs::create_dir_all(dev.join("vda5")).unwrap();
        std::fs::write(dev.join("vda5/partition"), "5\n").unwrap();
        std::fs::create_dir_all(d.join("class/block")).unwrap();
        std::os::unix::fs::symlink(dev.join("vda5"), d.join("class/block/vda5")).unwrap();
        std::os::unix::fs::symlink(&dev, d.join("class/block/vda")).unwrap();
        assert_eq!(disk_of(&d, "/dev/vda5").as_deref(), Some("vda"));
        assert_eq!(disk_of(&d, "/dev/vda").as_deref(), Some("vda"));
        assert_eq!(disk_of(&d, "/dev/nope"), None);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

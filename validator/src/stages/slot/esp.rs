//! The ESP: finding it ([`find`]: `validator.esp=`, else the one partition of the EFI
//! System type), mounting it read-write under `/run` ([`mount`]); paths on it are
//! `crate::runtime::slot::esp_path`. (efivarfs, for the boot loader's EFI variables, is mounted with the
//! API filesystems: `crate::sys::mount_efivarfs`.)
//!
//! Contract: more than one match is an error, never a guess; no match within the
//! command line's root timeout is an error naming the disks seen. A mount refused on
//! write-protected media says so (the kernel's `EACCES` alone does not).
//!
//! Current limits: the ESP is vfat (its modules must be in the BOM's `modules.load`); the
//! partition scan is the storage stage's.

use std::path::{Path, PathBuf};

use super::{Context, SlotError};
use crate::config::ESP_TYPE;

/// Where the stage mounts the ESP.
pub fn mountpoint(ctx: &Context) -> PathBuf {
    ctx.roots.run.join("validator/esp")
}

/// Waits for the ESP to appear and returns its device node.
pub fn find(ctx: &Context) -> Result<String, SlotError> {
    let spec = ctx.args.esp.clone();
    let esp = ctx.wait_scan(
        "the ESP",
        |parts| -> Result<_, SlotError> {
            let hits: Vec<_> = parts
                .iter()
                .filter(|p| match &spec {
                    Some(s) => crate::runtime::devices::matches(s, p),
                    None => p.type_uuid == ESP_TYPE,
                })
                .collect();
            match hits.as_slice() {
                [] => Ok(None),
                [one] => Ok(Some((*one).clone())),
                many => Err(SlotError::ManyEsps {
                    devices: many.iter().map(|p| p.device.clone()).collect(),
                }),
            }
        },
        SlotError::EspNotFound,
    )?;
    Ok(esp.device)
}

/// The vfat options the ESP is mounted with: none. Not `flush`: with it, every close of a
/// file opened for writing sleeps a tenth of a second, whatever was written (the kernel's
/// `fat_file_release` calls `io_schedule_timeout(HZ/10)`), 0.4 s of every A/B boot (three
/// record writes and `grubenv`). Every write the gate makes on the ESP is synced before it
/// is reported done instead: the record's copies and `grubenv` by `fsync` (which on vfat
/// also writes the FAT and flushes the disk's cache), a boot-counting rename by `fsync` of
/// its directory.
pub const MOUNT_OPTIONS: Option<&str> = None;

/// Mounts the ESP `device` read-write at [`mountpoint`] with [`MOUNT_OPTIONS`] and
/// returns that directory.
pub fn mount(ctx: &Context, device: &str) -> Result<PathBuf, SlotError> {
    let dir = mountpoint(ctx);
    std::fs::create_dir_all(&dir).map_err(|source| SlotError::Io {
        path: dir.clone(),
        source,
    })?;
    crate::sys::mount(
        device,
        &dir,
        Some("vfat"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        MOUNT_OPTIONS,
    )
    .map_err(|source| SlotError::Mount {
        device: device.to_string(),
        source,
        read_only: device_read_only(&ctx.roots.sys, device),
    })?;
    Ok(dir)
}

/// Whether the kernel marks block device `device` (`/dev/NAME`) read-only (its sysfs `ro`
/// is `1`; a partition is read-only when its disk is).
fn device_read_only(sys_root: &Path, device: &str) -> bool {
    let Some(name) = Path::new(device).file_name() else {
        return false;
    };
    let ro = sys_root.join("class/block").join(name).join("ro");
    crate::util::fs::read_text_limited(&ro, crate::util::fs::SYSFS_VALUE_MAX)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read-only flag comes from the partition's sysfs `ro`; anything else (absent,
    /// `0`, a bad name) is not read-only.
    #[test]
    fn read_only_device_is_read_from_sysfs() {
        let d = std::env::temp_dir().join(format!("vld-slot-ro-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (name, ro) in [("vdb1", "1\n"), ("vda1", "0\n")] {
            let p = d.join("class/block").join(name);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("ro"), ro).unwrap();
        }
        assert!(device_read_only(&d, "/dev/vdb1"));
        assert!(!device_read_only(&d, "/dev/vda1"));
        assert!(!device_read_only(&d, "/dev/vdc1"));
        assert!(!device_read_only(&d, "/"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

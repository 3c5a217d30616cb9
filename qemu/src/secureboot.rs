//! The firmware as the judge of a signed boot chain: OVMF with Secure Boot on and a `db` of
//! our choosing starts, or refuses, Debian's signed shim from an ESP (shim then starts
//! Debian's signed GRUB, which finds no bootable slot and halts).
//!
//! Contract: [`firmware_starts_shim`] builds the ESP of [`crate::firmware::Loader::ShimGrub`]
//! with no slots, a variable store made from [`crate::firmware::OVMF_VARS_MS`] (Microsoft's
//! PK and KEK, Secure Boot on) whose `db` is replaced by the given certificates when
//! some are given, boots it once, and says whether shim ran (GRUB's banner on the console)
//! or the firmware refused it (EDK2's "Access Denied" for the boot option). The VM is cut
//! a few seconds after the refusal (the firmware would wait in its boot manager).
//!
//! Limits: `dbx` is the store's own; only the removable-media path is offered.

use std::path::Path;
use std::time::Duration;

use crate::disk::{self, Content, PartitionSpec};
use crate::firmware::{self, EspSpec, Loader, Ovmf};
use crate::vm::{self, KillAt, VmConfig};
use crate::HarnessError;

/// What the firmware did with shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirmwareVerdict {
    /// Shim ran (and started GRUB).
    pub started: bool,
    /// The firmware refused the image ("Access Denied").
    pub refused: bool,
    pub console: String,
}

/// EDK2's message when Secure Boot refuses a boot option's image.
pub const ACCESS_DENIED: &str = "Access Denied";
/// GRUB's banner.
pub const GRUB_BANNER: &str = "Welcome to GRUB!";

/// Boots shim under Secure Boot with `db` replaced by `db_certs` (DER; `None`: the store's
/// own, Microsoft's) in `dir`.
pub fn firmware_starts_shim(
    dir: &Path,
    db_certs: Option<&[Vec<u8>]>,
) -> Result<FirmwareVerdict, HarnessError> {
    std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(dir, e))?;
    let mut store = crate::efivars::VarStore::open(Path::new(firmware::OVMF_VARS_MS))?;
    if let Some(certs) = db_certs {
        store.replace(
            "db",
            crate::efivars::IMAGE_SECURITY_DATABASE,
            &crate::efivars::db(certs),
        )?;
    }
    let mut ovmf = Ovmf::with_store(dir, &store)?;
    ovmf.code = firmware::OVMF_CODE_SECBOOT.into();
    ovmf.smm = true;
    let esp = dir.join("esp.img");
    firmware::build_esp(
        &EspSpec::new(Loader::ShimGrub, Vec::new()),
        &esp,
        &dir.join("esp-files"),
    )?;
    let d = dir.join("disk.img");
    disk::build_disk(
        &d,
        &[PartitionSpec {
            label: firmware::ESP_LABEL.into(),
            type_uuid: firmware::ESP_TYPE.into(),
            uuid: None,
            content: Content::Raw(esp),
        }],
        dir,
    )?;
    let mut cfg = VmConfig::uefi(ovmf);
    cfg.disks.push(d);
    cfg.tpm = None;
    cfg.timeout = Duration::from_secs(120);
    cfg.kill_at = Some(KillAt::on(ACCESS_DENIED, Duration::from_secs(2)));
    let o = vm::run(&cfg, dir)?;
    crate::paths::remove_images(dir);
    Ok(FirmwareVerdict {
        started: o.console.contains(GRUB_BANNER),
        refused: o.console.contains(ACCESS_DENIED),
        console: o.console,
    })
}

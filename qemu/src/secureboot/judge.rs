//! The firmware as the judge of a signed boot chain: OVMF with Secure Boot on and a `db`
//! of our choosing starts, or refuses, Debian's signed shim from an ESP without slots
//! (shim then starts Debian's signed GRUB, which finds no bootable slot and halts).
//!
//! Contract: see the parent module's doc ([`super`]); each function boots one VM and
//! reports what its console showed.

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
    firmware_starts_chain(dir, db_certs, None, None)
}

/// How [`change_cert_table`] changes a signed image's attribute certificate table; the
/// signatures and the Authenticode digest stay as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableChange {
    /// This many zero bytes appended inside the table, after its last entry (the security
    /// directory's size grown by as much): EDK2's walk reads an entry of length 0 there
    /// and stops short of the table's end; shim refuses it too (an entry under 8 bytes).
    Trailing(usize),
    /// The last entry grown by one byte, counted in its length and in the directory's
    /// size: the table ends with an entry not padded to 8 bytes. EDK2's walk stops at it;
    /// shim's takes it.
    UnpaddedLast,
}

/// `image`, a signed PE image whose certificate table ends the file (as sbsign and
/// Microsoft's signing leave it), with its table changed as `change` says.
pub fn change_cert_table(image: &[u8], change: TableChange) -> Result<Vec<u8>, HarnessError> {
    let bad = |m: String| HarnessError::Setup(format!("changing the certificate table: {m}"));
    let pe = validator::formats::pe::parse(image).map_err(|e| bad(e.to_string()))?;
    let table = pe.cert_table.clone();
    if table.end != image.len() {
        return Err(bad(format!(
            "the table ({table:?}) does not end the file ({} bytes)",
            image.len()
        )));
    }
    let word = |at: usize| {
        validator::util::le::u32_le(image, at)
            .ok_or_else(|| bad(format!("no 32-bit word at {at:#x}")))
    };
    let grow = match change {
        TableChange::Trailing(n) => n,
        TableChange::UnpaddedLast => 1,
    };
    let grow32 = u32::try_from(grow).map_err(|_| bad(format!("{grow} bytes to add")))?;
    let mut out = image.to_vec();
    out.resize(image.len() + grow, 0);
    let mut put = |at: usize, v: u32| {
        out.get_mut(at..at + 4)
            .map(|w| w.copy_from_slice(&v.to_le_bytes()))
            .ok_or_else(|| bad(format!("no 32-bit word at {at:#x}")))
    };
    let size_at = pe.cert_entry + 4;
    put(size_at, word(size_at)?.saturating_add(grow32))?;
    if change == TableChange::UnpaddedLast {
        // The last entry, stepping by lengths rounded up to 8 as the firmware does.
        let mut at = table.start;
        loop {
            let len = usize::try_from(word(at)?).unwrap_or(usize::MAX);
            match at.checked_add(len.div_ceil(8).saturating_mul(8)) {
                Some(next) if len >= 8 && next < table.end => at = next,
                _ => break,
            }
        }
        let len = word(at)?;
        if len % 8 != 0 {
            return Err(bad(format!(
                "the last entry at {at:#x} is already unpadded (length {len})"
            )));
        }
        put(at, len.saturating_add(1))?;
    }
    Ok(out)
}

/// Boots Debian's chain under Secure Boot as [`firmware_starts_shim`] does, with shim
/// and GRUB taken from `shim` and `grub` when given (Debian's signed ones otherwise).
pub fn firmware_starts_chain(
    dir: &Path,
    db_certs: Option<&[Vec<u8>]>,
    shim: Option<&Path>,
    grub: Option<&Path>,
) -> Result<FirmwareVerdict, HarnessError> {
    let mut store = crate::efivars::VarStore::open(Path::new(firmware::OVMF_VARS_MS))?;
    if let Some(certs) = db_certs {
        store.replace(
            "db",
            crate::efivars::IMAGE_SECURITY_DATABASE,
            &crate::efivars::db(certs),
        )?;
    }
    boot_chain(dir, &store, shim, grub, ACCESS_DENIED)
}

/// Shim's alert when it refuses the image it was to start (an SBAT or `dbx` refusal of
/// GRUB): `Verification failed: (0x1A) Security Violation`, in a box that waits for a key.
pub const SHIM_REFUSED: &str = "Verification failed";

/// Boots Debian's chain under Secure Boot (Microsoft's store) with shim's SBAT level
/// variable `SbatLevel` set to `level` as a level shim keeps (non-volatile, boot
/// services only; shim replaces it only by a newer date): shim applies it to GRUB.
/// Says whether GRUB started or shim refused it ([`SHIM_REFUSED`]).
pub fn shim_starts_grub_at_sbat_level(
    dir: &Path,
    level: &str,
) -> Result<FirmwareVerdict, HarnessError> {
    let mut store = crate::efivars::VarStore::open(Path::new(firmware::OVMF_VARS_MS))?;
    store.add(
        "SbatLevel",
        crate::efivars::SHIM_LOCK,
        crate::efivars::NV_BS,
        level.as_bytes(),
    )?;
    let mut v = boot_chain(dir, &store, None, None, SHIM_REFUSED)?;
    v.refused = v.console.contains(SHIM_REFUSED);
    Ok(v)
}

/// Boots shim and GRUB (Debian's, or `shim`, `grub`) from an ESP without slots under
/// `store` with Secure Boot on, cut a few seconds after `refusal` shows.
fn boot_chain(
    dir: &Path,
    store: &crate::efivars::VarStore,
    shim: Option<&Path>,
    grub: Option<&Path>,
    refusal: &str,
) -> Result<FirmwareVerdict, HarnessError> {
    std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(dir, e))?;
    let mut ovmf = Ovmf::with_store(dir, store)?;
    ovmf.code = firmware::OVMF_CODE_SECBOOT.into();
    ovmf.smm = true;
    let esp = dir.join("esp.img");
    let mut spec = EspSpec::new(Loader::ShimGrub, Vec::new());
    spec.shim = shim.map(Path::to_path_buf);
    spec.grub = grub.map(Path::to_path_buf);
    firmware::build_esp(&spec, &esp, &dir.join("esp-files"))?;
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
    cfg.kill_at = Some(KillAt::on(refusal, Duration::from_secs(2)));
    let o = vm::run(&cfg, dir)?;
    crate::paths::remove_images(dir);
    Ok(FirmwareVerdict {
        started: o.console.contains(GRUB_BANNER),
        refused: o.console.contains(ACCESS_DENIED),
        console: o.console,
    })
}

//! The fallback's kexec: the command line of the slot to boot ([`target_cmdline`]) and
//! the staging of its kernel and initramfs ([`stage`]) with this boot's report and TPM
//! event log appended as one more cpio archive (`etc/validator/carried/`), which the next
//! boot's gate reads as the previous boot's.
//!
//! Contract: [`prepare`] reads the kernel and the initramfs once and measures their
//! digests before the report is quoted; when the target slot is a Unified Kernel Image
//! on the ESP, both come from its `.linux` and `.initrd` and the command line from its
//! `.cmdline`, out of the image's bytes as read once and checked as shim and the kernel
//! would check them (an image that would be refused is no kexec: the caller reboots); [`stage`] loads those same bytes
//! (`kexec_file_load(2)`, the kernel from a memfd); the reboot into it is the caller's
//! ([`super::fall_back`]). An event log that cannot be read is left out, never
//! an error; anything else that fails is returned, and the caller then reboots instead.
//!
//! Current limits: the kernel (at most 256 MiB) and the initramfs (at most 1 GiB) are
//! read whole, the event log at most 64 MiB; under Secure Boot the kernel checks the new kernel's signature (docs/SLOTS.md).

use super::{Context, Plan, SlotError};
use crate::config::bom::SlotName;
use crate::config::layout;
use crate::formats::tpm::measurement::Measurement;
use crate::runtime::slot::{same_line_for, KERNEL_LOAD_LOG};
use crate::util::fs::read_limited;

/// The other slot's kernel command line: what its boot loader would give it (see
/// [`crate::runtime::slot::BootLoader::kexec_cmdline`]), or this boot's line naming it.
pub fn target_cmdline(ctx: &Context, y: SlotName) -> String {
    match ctx.slot.as_ref() {
        Some(rt) => rt.loader.kexec_cmdline(y, &ctx.cmdline),
        None => same_line_for(&ctx.cmdline, y),
    }
}

/// The other slot's kernel and initramfs as read from the ESP for a kexec, and the
/// command line of its image when it came from one.
#[derive(Debug, Clone)]
pub struct Images {
    kernel: Vec<u8>,
    initrd: Vec<u8>,
    cmdline: Option<String>,
}

/// The kernel, initramfs and command line inside the Unified Kernel Image at `path`, read
/// once and checked as those bytes ([`crate::runtime::slot::bootable::check_uki`]: the
/// image as shim would judge it, its `.linux` as the kernel's `kexec_file_load` will): the
/// sections are taken from the bytes that were checked, never read again.
fn from_uki(ctx: &Context, path: &std::path::Path) -> Result<Images, SlotError> {
    let image = read_limited(path, crate::runtime::slot::UKI_MAX)
        .map_err(|source| SlotError::KexecInput { source })?;
    let name = path.display().to_string();
    let chain = ctx.slot.as_ref().and_then(super::boot_chain);
    let v = crate::runtime::slot::bootable::check_uki(
        ctx.uefi_keys(),
        &ctx.roots.initramfs,
        &name,
        &image,
        chain.as_ref(),
    );
    if let Some(why) = v.refused {
        return Err(SlotError::KexecPrepared(why));
    }
    let layout = crate::formats::pe::layout(&image)
        .map_err(|e| SlotError::KexecPrepared(format!("{name}: {e}")))?;
    let section = |s: &str| -> Result<Vec<u8>, SlotError> {
        layout
            .section_bytes(&image, s)
            .map_err(|e| SlotError::KexecPrepared(format!("{name}: {e}")))?
            .ok_or_else(|| SlotError::KexecPrepared(format!("{name}: no {s} section")))
    };
    // The stub hands the kernel its `.cmdline` without a final line break.
    let line = String::from_utf8_lossy(&section(".cmdline")?)
        .trim_end_matches(['\n', '\r', '\0'])
        .to_string();
    Ok(Images {
        kernel: section(".linux")?,
        initrd: section(".initrd")?,
        cmdline: Some(line),
    })
}

/// Reads the plan's kernel and initramfs (from the target's Unified Kernel Image when it
/// has one) and measures what was read (`kexec:<slot> kernel sha256:... initrd
/// sha256:...`), before the report is quoted and the boot sealed. A measurement that
/// fails is a warning: the fallback goes on.
pub fn prepare(ctx: &mut Context, plan: &Plan) -> Result<Images, SlotError> {
    let input = |source| SlotError::KexecInput { source };
    let images = match &plan.uki {
        Some(path) => from_uki(ctx, path)?,
        None => Images {
            kernel: read_limited(&plan.kernel, crate::formats::vmlinuz::VMLINUZ_MAX)
                .map_err(input)?,
            initrd: read_limited(&plan.initrd, crate::formats::newc::INITRAMFS_MAX)
                .map_err(input)?,
            cmdline: None,
        },
    };
    let (kernel, initrd) = (&images.kernel, &images.initrd);
    let hex = |b: &[u8]| crate::util::hex(&crate::trust::keys::sha256(b));
    let event = Measurement::Kexec {
        slot: plan.target.to_string(),
        kernel_sha256: hex(kernel),
        initrd_sha256: hex(initrd),
    };
    if let Err(e) = ctx.measure(&event, None) {
        log::warn!("slot: measuring the kexec: {e}");
    }
    Ok(images)
}

/// Loads the plan's kernel and its initramfs, as [`prepare`] read them, with this boot's
/// report (`report_json`) and event log appended, for a kexec.
pub fn stage(
    ctx: &Context,
    plan: &Plan,
    images: &Images,
    report_json: &str,
) -> Result<(), SlotError> {
    let kexec = |source| SlotError::Kexec { source };
    let kernel = crate::sys::memfd_with("kernel", &images.kernel).map_err(kexec)?;
    let mut initrd = images.initrd.clone();
    // The kernel unpacks archives one after another; the next must start 4-aligned.
    while !initrd.len().is_multiple_of(4) {
        initrd.push(0);
    }
    let mut carry = crate::formats::newc::Writer::new();
    carry
        .dir("etc")
        .dir("etc/validator")
        .dir("etc/validator/carried")
        .file(layout::CARRIED_REPORT, report_json.as_bytes());
    let log = ctx.roots.run.join(crate::runtime::measure::BINARY_LOG);
    if let Ok(bytes) = read_limited(&log, crate::runtime::measure::EVENT_LOG_MAX) {
        carry.file(layout::CARRIED_EVENTLOG, &bytes);
    }
    initrd.extend_from_slice(&carry.finish());
    let fd = crate::sys::memfd_with("initrd", &initrd).map_err(kexec)?;
    // An image's own command line (the one it was signed with), else the plan's.
    let cmdline = images.cmdline.as_deref().unwrap_or(&plan.cmdline);
    match &plan.uki {
        Some(u) => log::info!(
            "slot: kexec_file_load of {}'s .linux and .initrd ({} bytes), its command line {cmdline:?}",
            u.display(),
            initrd.len(),
        ),
        None => log::info!(
            "slot: kexec_file_load {} with {} ({} bytes), command line {cmdline:?}",
            plan.kernel.display(),
            plan.initrd.display(),
            initrd.len(),
        ),
    }
    let t = std::time::Instant::now();
    crate::sys::kexec_file_load(&kernel, &fd, cmdline).map_err(kexec)?;
    // The kernel's own share of the staging (reading the kernel, checking its signature,
    // copying and hashing every segment for purgatory), apart from ours.
    log::info!("slot: {KERNEL_LOAD_LOG} {} ms", t.elapsed().as_millis());
    Ok(())
}

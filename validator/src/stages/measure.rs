//! Stage `measure`: what the boot checked goes into the TPM, with logs a verifier can
//! replay.
//!
//! The measurement plan (also in `docs/ATTESTATION.md`, "The PCR plan"):
//! - PCR 11: the phase strings `enter-initrd` (when the init starts) and `leave-initrd`
//!   (just before `switch_root`), each extended as the SHA digests of the bare string, as
//!   systemd-pcrphase does, so PCR 11 policies signed for systemd-based boots keep working;
//! - the BOM's `measure.pcr` (default 13): the BOM file, the kernel command line, every
//!   loaded module (in plan order, after loading: the text `module:<name> sha256:<digest
//!   of the image the kernel got>`), the verity root hash (its hex text, as signed) and
//!   the boot decision (`decision:pass` / `decision:stop`); after the report's quote,
//!   `report::publish` has the measurer seal the boot (`sealed:sha256:<quote digest>`).
//!   Every text comes from `formats::tpm::measurement`.
//!
//! Every measurement is one `TPM2_PCR_Extend` carrying all active banks. The firmware's
//! binary log (`<securityfs>/tpm0/binary_bios_measurements`) is copied and our records
//! appended (`EV_IPL`, one digest per bank of its Spec ID event); the same events go to
//! systemd's CEL-JSON log. Both land in `/run` and survive `switch_root`.
//!
//! The measurer itself is shared ([`crate::runtime::measure`]); this stage opens it and
//! finishes it. A missing TPM, or one that fails mid-boot, is a platform fault; the BOM's
//! `measure.tpm` says whether that stops the boot (`required`) or is reported
//! (`optional`). After a TPM failure no further command is sent: one bounded wait, not
//! one per measurement.

use std::time::Duration;

use super::{Context, Decision};
use crate::config::bom::TpmPolicy;
use crate::formats::tpm::measurement::{Measurement, Phase};
use crate::runtime::measure::{self, MeasureError, Measurer, TpmFailure, EVENT_LOG_MAX};

fn cfg(ctx: &Context) -> crate::config::bom::Measure {
    ctx.bom
        .as_ref()
        .map(|b| b.bom.measure.clone())
        .unwrap_or_default()
}

/// A TPM failure: fatal when the BOM requires the TPM, else a warning.
fn tpm_failed(ctx: &mut Context, e: TpmFailure) -> Result<(), MeasureError> {
    let required = cfg(ctx).tpm == TpmPolicy::Required;
    measure::failed(required, e, &mut ctx.facts.warnings)
}

/// The stage: open the TPM, `enter-initrd` into PCR 11, then the BOM (the bytes that were
/// parsed) and the command line (as read once by `start`) into the BOM's PCR.
pub fn run(ctx: &mut Context) -> Result<String, MeasureError> {
    let c = cfg(ctx);
    let sec = ctx.roots.sys.join("kernel/security");
    if let Err(e) = crate::sys::mount(
        "securityfs",
        &sec,
        Some("securityfs"),
        nix::mount::MsFlags::empty(),
        None,
    ) {
        if e.errno != nix::errno::Errno::EBUSY {
            log::warn!("{e}");
        }
    }
    let carried = match crate::util::fs::read_limited(
        &ctx.roots
            .initramfs
            .join(crate::config::layout::CARRIED_EVENTLOG),
        EVENT_LOG_MAX,
    ) {
        Ok(b) => Some(b),
        Err(crate::util::fs::InputError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            None
        }
        Err(e) => {
            log::warn!("carried event log {e}; not used");
            None
        }
    };
    let m = Measurer::open(
        &ctx.roots.dev,
        &sec,
        carried.as_deref(),
        c.pcr,
        c.tpm == TpmPolicy::Required,
        Duration::from_millis(c.timeout_ms),
    );
    let failure = m.report.failure.clone();
    ctx.measurer = Some(m);
    if let Some(f) = failure {
        tpm_failed(ctx, TpmFailure::Recorded(f))?;
        return Ok("no TPM (optional)".into());
    }
    if let Some(m) = ctx.measurer.as_mut() {
        if let Err(e) = m.phase(Phase::EnterInitrd) {
            tpm_failed(ctx, e)?;
        }
    }
    if let Some(b) = ctx.bom.as_ref() {
        let event = Measurement::Bom {
            image_id: b.bom.image_id.to_string(),
            sha256: b.sha256.clone(),
        };
        let bytes = b.bytes.clone();
        ctx.measure(&event, Some(&bytes))?;
    }
    let line = ctx.cmdline.clone();
    // The exact bytes, also when the text had to replace some.
    let bytes = ctx
        .cmdline_raw
        .clone()
        .unwrap_or_else(|| line.as_bytes().to_vec());
    ctx.measure(&Measurement::Cmdline(line), Some(&bytes))?;
    let r = ctx
        .measurer
        .as_ref()
        .map(|m| m.report.clone())
        .unwrap_or_default();
    Ok(format!(
        "TPM {} banks {} (PCR 11 and {}), {} events",
        r.device.as_deref().unwrap_or("?"),
        r.banks.join("+"),
        r.pcr,
        r.events
    ))
}

/// The end of measuring, on every path: the decision word, `leave-initrd` when the boot
/// goes on into the root, then the PCRs read back and both logs written under `/run`.
pub fn finish(ctx: &mut Context, decision: Decision) -> Result<(), MeasureError> {
    let mut result = ctx.measure(&Measurement::Decision(decision), None);
    if decision.hands_over() && result.is_ok() {
        if let Some(Err(e)) = ctx
            .measurer
            .as_mut()
            .filter(|m| m.ok())
            .map(|m| m.phase(Phase::LeaveInitrd))
        {
            result = tpm_failed(ctx, e);
        }
    }
    let run = ctx.roots.run.clone();
    if let Some(m) = ctx.measurer.as_mut() {
        m.finish(&run);
        ctx.facts.tpm = Some(m.report.clone());
    }
    result
}

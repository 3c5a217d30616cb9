//! Stage `measure`: what the boot checked goes into the TPM, with logs a verifier can
//! replay.
//!
//! The measurement plan (also in the README):
//! - PCR 11: the phase strings `enter-initrd` (when the init starts) and `leave-initrd`
//!   (just before `switch_root`), each extended as the SHA digests of the bare string, as
//!   systemd-pcrphase does, so PCR 11 policies signed for systemd-based boots keep working;
//! - the BOM's `measure.pcr` (default 13): the BOM file, the kernel command line, every
//!   loaded module (in plan order, after loading: the text `module:<name> sha256:<digest
//!   of the image the kernel got>`), the verity root hash (its hex text, as signed) and
//!   the boot decision (`decision:pass` / `decision:stop`).
//!
//! Every measurement is one `TPM2_PCR_Extend` carrying all active banks. The firmware's
//! binary log (`<securityfs>/tpm0/binary_bios_measurements`) is copied and our records
//! appended (`EV_IPL`, one digest per bank of its Spec ID event); the same events go to
//! systemd's CEL-JSON log. Both land in `/run` and survive `switch_root`.
//!
//! A missing TPM, or one that fails mid-boot, is a platform fault; the BOM's
//! `measure.tpm` says whether that stops the boot (`required`) or is reported
//! (`optional`). After a TPM failure no further command is sent: one bounded wait, not
//! one per measurement.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Classified, Context, Fault};
use crate::config::bom::TpmPolicy;
use crate::config::PHASE_PCR;
use crate::formats::tpm::cel::CelRecord;
use crate::formats::tpm::eventlog::{Event, EventLog, EV_IPL};
use crate::formats::tpm::HashAlg;
use crate::sys::tpm::{DeviceTransport, Tpm};

/// Where the binary log copy goes under `/run`.
pub const BINARY_LOG: &str = "validator/tpm-eventlog.bin";
/// systemd's CEL-JSON measurement log under `/run`.
pub const CEL_LOG: &str = "log/systemd/tpm2-measure.log";
/// Most bytes read from an event log (the firmware's in securityfs, or one carried over
/// kexec in the initramfs): a firmware log is tens of KiB; a larger file is refused with a
/// warning naming it and the limit, and a new log is started.
pub const EVENT_LOG_MAX: u64 = 64 << 20;

/// What the report says about measurements.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TpmReport {
    pub required: bool,
    /// Whether a TPM was found and answered.
    pub present: bool,
    pub device: Option<String>,
    pub banks: Vec<String>,
    /// Our PCR (besides 11).
    pub pcr: u32,
    /// Events measured (each one extend).
    pub events: u32,
    /// TPM commands sent and the time spent waiting for the TPM.
    pub commands: u64,
    pub time_us: u64,
    /// Values of the PCRs we extended, read back at the end: bank -> PCR -> hex.
    pub pcrs: std::collections::BTreeMap<String, std::collections::BTreeMap<u32, String>>,
    /// The first TPM failure: which command, which response code.
    pub failure: Option<String>,
    pub binary_log: Option<String>,
    pub cel_log: Option<String>,
    /// Whether the binary log continues the firmware's log (else it is new).
    pub firmware_log: bool,
    /// Whether it continues the log a boot that fell back by kexec carried over.
    #[serde(default)]
    pub carried_log: bool,
}

/// Copies the client's command count and TPM time into the report.
fn note_stats<T: crate::sys::tpm::Transport>(report: &mut TpmReport, tpm: &Tpm<T>) {
    let s = tpm.stats();
    report.commands = u64::from(s.commands);
    report.time_us = s.time.as_micros() as u64;
}

/// The measurer of one boot.
#[derive(Debug)]
pub struct Measurer {
    tpm: Option<Tpm<DeviceTransport>>,
    banks: Vec<HashAlg>,
    log: Option<EventLog>,
    cel: Vec<u8>,
    touched: BTreeSet<u32>,
    pub report: TpmReport,
}

impl Measurer {
    /// Opens the TPM under `dev_root` and reads the log to continue: `carried` (the log a
    /// boot that fell back by kexec handed over: the firmware's events and its own, all
    /// in the TPM already) or else the firmware's under `securityfs`. Failures are
    /// recorded in the report, not returned.
    pub fn open(
        dev_root: &Path,
        securityfs: &Path,
        carried: Option<&[u8]>,
        pcr: u32,
        required: bool,
        timeout: Duration,
    ) -> Measurer {
        let mut m = Measurer {
            tpm: None,
            banks: Vec::new(),
            log: None,
            cel: Vec::new(),
            touched: BTreeSet::new(),
            report: TpmReport {
                required,
                pcr,
                ..TpmReport::default()
            },
        };
        let dev = match DeviceTransport::open(dev_root) {
            Ok(d) => d,
            Err(e) => {
                m.report.failure = Some(e.to_string());
                return m;
            }
        };
        m.report.device = Some(dev.path().display().to_string());
        let mut tpm = Tpm::new(dev).with_timeout(timeout);
        match tpm.get_pcr_banks() {
            Ok(b) if !b.is_empty() => m.banks = b,
            Ok(_) => {
                m.report.failure = Some("the TPM has no active PCR bank we support".into());
                m.note_stats(&tpm);
                return m;
            }
            Err(e) => {
                m.report.failure = Some(e.to_string());
                m.note_stats(&tpm);
                return m;
            }
        }
        m.report.present = true;
        m.report.banks = m.banks.iter().map(|b| b.name().to_string()).collect();
        if let Some(c) = carried {
            match EventLog::parse(c) {
                Ok(l) => {
                    m.report.carried_log = true;
                    m.report.firmware_log = true;
                    m.log = Some(l);
                    m.note_stats(&tpm);
                    m.tpm = Some(tpm);
                    return m;
                }
                Err(e) => log::warn!("carried event log: {e}; using the firmware's"),
            }
        }
        let fw = securityfs.join("tpm0/binary_bios_measurements");
        let read = match crate::util::fs::read_limited(&fw, EVENT_LOG_MAX) {
            Ok(b) => Some(b),
            Err(crate::util::fs::InputError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            // Too large, not a file, unreadable: said, then a new log.
            Err(e) => {
                log::warn!("firmware event log {e}; starting a new log");
                None
            }
        };
        m.log = match read.map(|b| EventLog::parse(&b)) {
            Some(Ok(l)) => {
                m.report.firmware_log = true;
                Some(l)
            }
            Some(Err(e)) => {
                log::warn!(
                    "firmware event log {}: {e}; starting a new log",
                    fw.display()
                );
                Some(EventLog::new(&m.banks))
            }
            None => Some(EventLog::new(&m.banks)),
        };
        m.note_stats(&tpm);
        m.tpm = Some(tpm);
        m
    }

    fn note_stats<T: crate::sys::tpm::Transport>(&mut self, tpm: &Tpm<T>) {
        note_stats(&mut self.report, tpm);
    }

    /// Whether measuring works (a TPM answered and has not failed).
    pub fn ok(&self) -> bool {
        self.tpm.is_some() && self.report.failure.is_none()
    }

    /// Extends `pcr` with the digests of `data` in every bank and logs the event with
    /// `description` as its data. Returns the failure, if this is the first.
    pub fn measure(
        &mut self,
        pcr: u32,
        description: &str,
        data: &[u8],
        cel_event_type: &str,
    ) -> Result<(), String> {
        let Some(tpm) = self.tpm.as_mut() else {
            return Err(self
                .report
                .failure
                .clone()
                .unwrap_or_else(|| "no TPM".into()));
        };
        if let Some(f) = &self.report.failure {
            return Err(f.clone());
        }
        let mut algs: Vec<HashAlg> = self.banks.clone();
        if let Some(l) = &self.log {
            for b in l.spec_id().banks() {
                if !algs.contains(&b) {
                    algs.push(b);
                }
            }
        }
        let digests: Vec<(HashAlg, Vec<u8>)> = algs.iter().map(|a| (*a, a.digest(data))).collect();
        let for_tpm: Vec<(HashAlg, Vec<u8>)> = digests
            .iter()
            .filter(|(a, _)| self.banks.contains(a))
            .cloned()
            .collect();
        let r = tpm.pcr_extend(pcr, &for_tpm);
        note_stats(&mut self.report, tpm);
        if let Err(e) = r {
            let msg = format!("measuring {description} into PCR {pcr}: {e}");
            self.report.failure = Some(msg.clone());
            return Err(msg);
        }
        self.report.events += 1;
        self.touched.insert(pcr);
        if let Some(l) = self.log.as_mut() {
            let ids: Vec<(u16, Vec<u8>)> = l
                .spec_id()
                .banks()
                .iter()
                .filter_map(|b| {
                    digests
                        .iter()
                        .find(|(a, _)| a == b)
                        .map(|(a, d)| (a.alg_id(), d.clone()))
                })
                .collect();
            if let Err(e) = l.append(Event {
                pcr,
                event_type: EV_IPL,
                digests: ids,
                data: description.as_bytes().to_vec(),
            }) {
                log::warn!("event log: {e}");
            }
        }
        let mut rec = CelRecord::systemd(pcr, cel_event_type, description, &self.banks);
        rec.digests = digests
            .iter()
            .filter(|(a, _)| self.banks.contains(a))
            .cloned()
            .collect();
        self.cel.extend_from_slice(&rec.to_bytes());
        Ok(())
    }

    /// A systemd-pcrphase phase word into PCR 11.
    pub fn phase(&mut self, word: &str) -> Result<(), String> {
        self.measure(PHASE_PCR, word, word.as_bytes(), "phase")
    }

    /// Reads back every PCR we touched and writes both logs under `run_root`. Call once,
    /// at the end.
    pub fn finish(&mut self, run_root: &Path) {
        if let (Some(tpm), None) = (self.tpm.as_mut(), &self.report.failure) {
            for pcr in self.touched.clone() {
                match tpm.pcr_read(pcr, &self.banks) {
                    Ok(vals) => {
                        for (b, v) in vals {
                            self.report
                                .pcrs
                                .entry(b.name().to_string())
                                .or_default()
                                .insert(pcr, crate::util::hex(&v));
                        }
                    }
                    Err(e) => {
                        self.report.failure = Some(format!("reading PCR {pcr}: {e}"));
                        break;
                    }
                }
            }
            note_stats(&mut self.report, tpm);
        }
        if let Some(l) = &self.log {
            if self.report.events > 0 {
                let p: PathBuf = run_root.join(BINARY_LOG);
                match crate::util::fs::write_atomic(&p, &l.to_bytes()) {
                    Ok(()) => self.report.binary_log = Some(p.display().to_string()),
                    Err(e) => log::error!("{}: {e}", p.display()),
                }
            }
        }
        if !self.cel.is_empty() {
            let p = run_root.join(CEL_LOG);
            match crate::util::fs::write_atomic(&p, &self.cel) {
                Ok(()) => self.report.cel_log = Some(p.display().to_string()),
                Err(e) => log::error!("{}: {e}", p.display()),
            }
        }
    }
}

/// A measurement that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// The TPM is missing or failed and the BOM requires it.
    #[error("TPM required by the BOM: {0}")]
    Required(String),
    /// What should be measured is not there (never measured as empty bytes).
    #[error("cannot measure {what}: {why}")]
    Unmeasurable { what: String, why: String },
}

impl Classified for MeasureError {
    fn fault(&self) -> Fault {
        match self {
            MeasureError::Required(_) => Fault::Platform,
            MeasureError::Unmeasurable { .. } => Fault::Image,
        }
    }
}

fn cfg(ctx: &Context) -> crate::config::bom::Measure {
    ctx.bom
        .as_ref()
        .map(|b| b.bom.measure.clone())
        .unwrap_or_default()
}

/// A TPM failure: fatal when the BOM requires the TPM, else a warning.
fn tpm_failed(ctx: &mut Context, e: String) -> Result<(), MeasureError> {
    if cfg(ctx).tpm == TpmPolicy::Required {
        Err(MeasureError::Required(e))
    } else {
        ctx.facts.warnings.push(format!("TPM (optional): {e}"));
        Ok(())
    }
}

/// Measures one event into the BOM's PCR. After a TPM failure nothing more is sent (the
/// failure was already reported once).
pub fn event(
    ctx: &mut Context,
    description: &str,
    data: &[u8],
    kind: &str,
) -> Result<(), MeasureError> {
    let pcr = cfg(ctx).pcr;
    let Some(m) = ctx.measurer.as_mut() else {
        return Ok(());
    };
    if !m.ok() {
        return Ok(());
    }
    match m.measure(pcr, description, data, kind) {
        Ok(()) => Ok(()),
        Err(e) => tpm_failed(ctx, e),
    }
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
        tpm_failed(ctx, f)?;
        return Ok("no TPM (optional)".into());
    }
    if let Some(m) = ctx.measurer.as_mut() {
        if let Err(e) = m.phase("enter-initrd") {
            tpm_failed(ctx, e)?;
        }
    }
    if let Some(b) = ctx.bom.as_ref() {
        let description = format!("bom:{} sha256:{}", b.bom.image_id, b.sha256);
        let bytes = b.bytes.clone();
        event(ctx, &description, &bytes, "validator-bom")?;
    }
    let line = ctx.cmdline.clone();
    // The exact bytes, also when the text had to replace some.
    let bytes = ctx
        .cmdline_raw
        .clone()
        .unwrap_or_else(|| line.as_bytes().to_vec());
    event(ctx, &format!("cmdline:{line}"), &bytes, "validator-cmdline")?;
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
pub fn finish(ctx: &mut Context, decision: super::Decision) -> Result<(), MeasureError> {
    let word = format!("decision:{}", decision.as_str());
    let mut result = event(ctx, &word, word.as_bytes(), "validator-decision");
    if decision.hands_over() && result.is_ok() {
        if let Some(Err(e)) = ctx
            .measurer
            .as_mut()
            .filter(|m| m.ok())
            .map(|m| m.phase("leave-initrd"))
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

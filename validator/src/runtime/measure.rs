//! The TPM measurer the stages share: one per boot, opened by the `measure` stage and used
//! by every stage that measures (modules, verity, preflight's root modules), then finished
//! by the `measure` stage at the end.
//!
//! Contract: every measurement is one `TPM2_PCR_Extend` carrying all active banks, of an
//! event of the one vocabulary ([`Measurer::record`],
//! [`crate::formats::tpm::measurement::Measurement`]). The last is the seal
//! ([`Measurer::seal`], after the boot's quote): nothing is measured or quoted after it,
//! and the logs are written again with it as their last record. The
//! firmware's binary log (`<securityfs>/tpm0/binary_bios_measurements`), or the log a boot
//! that fell back by kexec carried over, is continued with our records (`EV_IPL`, one
//! digest per bank of its Spec ID event); the same events go to systemd's CEL-JSON log.
//! Both are written under `/run` ([`BINARY_LOG`], [`CEL_LOG`]) and survive `switch_root`.
//! After a TPM failure no further command is sent: one bounded wait, not one per
//! measurement; the first failure is kept in the [`TpmReport`]. Whether a failure stops
//! the boot is the BOM's `measure.tpm` ([`event`], [`failed`]); the fault class of a
//! [`MeasureError`] is given where the stages classify errors.
//!
//! Current limits: the PCR and the policy are those the measurer was opened with (the
//! BOM's, read once); one TPM (`tpm0`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::formats::tpm::cel::CelRecord;
use crate::formats::tpm::eventlog::{Event, EventLog, EV_IPL};
use crate::formats::tpm::measurement::{Measurement, Phase, Seal};
use crate::formats::tpm::{HashAlg, TpmError};
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
    report.time_us = u64::try_from(s.time.as_micros()).unwrap_or(u64::MAX);
}

/// The measurer of one boot.
#[derive(Debug)]
pub struct Measurer {
    tpm: Option<Tpm<DeviceTransport>>,
    banks: Vec<HashAlg>,
    log: Option<EventLog>,
    cel: Vec<u8>,
    touched: BTreeSet<u32>,
    /// Whether the boot was sealed ([`Measurer::seal`]): nothing is measured or quoted
    /// after it.
    sealed: bool,
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
            sealed: false,
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

    /// The TPM client, its active banks and the PCRs this boot extended, while the TPM
    /// works (for the quote, [`super::attest`]).
    /// The banks a verifier can check against the log: the active banks the log records
    /// digests for (a legacy SHA-1 firmware log: SHA-1 alone).
    pub(crate) fn client(
        &mut self,
    ) -> Option<(&mut Tpm<DeviceTransport>, Vec<HashAlg>, &BTreeSet<u32>)> {
        if self.report.failure.is_some() || self.sealed {
            return None;
        }
        let logged = self.log.as_ref().map(|l| l.spec_id().banks());
        let banks: Vec<HashAlg> = self
            .banks
            .iter()
            .copied()
            .filter(|b| logged.as_ref().is_none_or(|l| l.contains(b)))
            .collect();
        let tpm = self.tpm.as_mut()?;
        Some((tpm, banks, &self.touched))
    }

    /// Whether measuring works (a TPM answered and has not failed).
    pub fn ok(&self) -> bool {
        self.tpm.is_some() && self.report.failure.is_none()
    }

    /// Whether the boot was sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed
    }

    /// Measures one event of ours into its PCR ([`Measurement::pcr`] with the measurer's
    /// PCR), its digests of the bytes [`Measurement::content`] names: `external` for the
    /// BOM and the raw command line.
    pub fn record(
        &mut self,
        event: &Measurement,
        external: Option<&[u8]>,
    ) -> Result<(), TpmFailure> {
        let text = event.text();
        let Some(data) = event.digested(&text, external) else {
            return Err(TpmFailure::Recorded(format!(
                "{text}: the bytes it measures were not given"
            )));
        };
        let pcr = event.pcr(self.report.pcr);
        self.measure(pcr, &text, data, event.cel_kind())
    }

    /// Extends `pcr` with the digests of `data` in every bank and logs the event with
    /// `description` as its data. Returns the failure, if this is the first.
    pub fn measure(
        &mut self,
        pcr: u32,
        description: &str,
        data: &[u8],
        cel_event_type: &str,
    ) -> Result<(), TpmFailure> {
        let Some(tpm) = self.tpm.as_mut() else {
            return Err(self
                .report
                .failure
                .clone()
                .map_or(TpmFailure::Absent, TpmFailure::Recorded));
        };
        if let Some(f) = &self.report.failure {
            return Err(TpmFailure::Recorded(f.clone()));
        }
        if self.sealed {
            return Err(TpmFailure::Recorded(format!(
                "measuring {description}: the boot was sealed after its quote"
            )));
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
        if let Err(source) = r {
            let e = TpmFailure::Extend {
                description: description.to_string(),
                pcr,
                source,
            };
            self.report.failure = Some(e.to_string());
            return Err(e);
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
    pub fn phase(&mut self, phase: Phase) -> Result<(), TpmFailure> {
        self.record(&Measurement::Phase(phase), None)
    }

    /// Closes the boot after its quote (`attest` = the `TPMS_ATTEST` the TPM signed, or
    /// `None` when there is none): extends `sealed:...` into our PCR, so that any later
    /// quote, by anyone, shows it and cannot vouch for the PCR values the boot's quote
    /// signed, then writes both logs again under `run_root` with the seal as their last
    /// record. Nothing is measured or quoted after it. Returns the failure, if any.
    pub fn seal(&mut self, run_root: &Path, attest: Option<&[u8]>) -> Result<(), TpmFailure> {
        let seal = match attest {
            Some(a) => Seal::Quote(crate::trust::keys::sha256(a)),
            None => Seal::Unquoted,
        };
        let r = self.record(&Measurement::Seal(seal), None);
        self.sealed = true;
        self.write_logs(run_root);
        r
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
        self.write_logs(run_root);
    }

    /// Writes the binary log and the CEL-JSON log under `run_root` (each by rename).
    fn write_logs(&mut self, run_root: &Path) {
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
    Required(TpmFailure),
    /// What should be measured is not there (never measured as empty bytes).
    #[error("cannot measure {what}: {why}")]
    Unmeasurable { what: String, why: String },
}

/// Why the TPM did not take a measurement.
#[derive(Debug, thiserror::Error)]
pub enum TpmFailure {
    /// There is no TPM (none was opened).
    #[error("no TPM")]
    Absent,
    /// The TPM failed before (opening it, or an earlier command): the first failure as the
    /// report records it; nothing more is sent.
    #[error("{0}")]
    Recorded(String),
    /// `TPM2_PCR_Extend` failed.
    #[error("measuring {description} into PCR {pcr}: {source}")]
    Extend {
        description: String,
        pcr: u32,
        source: TpmError,
    },
}

/// A TPM failure under the BOM's policy: fatal when the TPM is `required`, else a warning
/// pushed to `warnings` (`TPM (optional): ...`).
pub fn failed(
    required: bool,
    e: TpmFailure,
    warnings: &mut Vec<String>,
) -> Result<(), MeasureError> {
    if required {
        Err(MeasureError::Required(e))
    } else {
        warnings.push(format!("TPM (optional): {e}"));
        Ok(())
    }
}

/// Measures one event of ours ([`Measurer::record`]). No
/// measurer, or one whose TPM already failed, measures nothing (the failure was already
/// reported once). A failure now goes through [`failed`] with the policy the measurer was
/// opened with.
pub fn event(
    measurer: Option<&mut Measurer>,
    warnings: &mut Vec<String>,
    what: &Measurement,
    external: Option<&[u8]>,
) -> Result<(), MeasureError> {
    let Some(m) = measurer else {
        return Ok(());
    };
    if !m.ok() {
        return Ok(());
    }
    let required = m.report.required;
    match m.record(what, external) {
        Ok(()) => Ok(()),
        Err(e) => failed(required, e, warnings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure stops the boot only when the TPM is required; else it is a warning. No
    /// measurer measures nothing and fails nothing.
    #[test]
    fn a_failure_is_fatal_only_when_required() {
        let mut warnings = Vec::new();
        let e = failed(true, TpmFailure::Absent, &mut warnings).unwrap_err();
        assert_eq!(e.to_string(), "TPM required by the BOM: no TPM");
        assert!(warnings.is_empty());
        failed(false, TpmFailure::Recorded("gone".into()), &mut warnings).unwrap();
        assert_eq!(warnings, ["TPM (optional): gone"]);
        event(
            None,
            &mut warnings,
            &Measurement::Phase(Phase::EnterInitrd),
            None,
        )
        .unwrap();
        assert_eq!(warnings.len(), 1);
    }
}

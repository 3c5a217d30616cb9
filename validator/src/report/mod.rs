//! Layer 7: the one health report of a boot, as JSON, and its console line.
//!
//! The schema is versioned ([`SCHEMA`]); fields are only ever added within a version. The
//! report is built from the stages' [`Facts`] and their outcomes; it derives both
//! `Serialize` and `Deserialize`, so the test bed and fleet tools read it typed. The init
//! prints it as one line, prefixed with [`PREFIX`], on the console, and writes it to
//! `/run/validator/report.json` (which survives `switch_root`) by write-to-temporary-
//! then-rename, so a reader never sees half a report.

use serde::{Deserialize, Serialize};

use crate::stages::measure::TpmReport;
use crate::stages::modules::taint::TaintReport;
use crate::stages::modules::ModuleReport;
use crate::stages::preflight::PreflightReport;
use crate::stages::slot::SlotFacts;
use crate::stages::storage::RootReport;
use crate::stages::verity::VerityReport;
pub use crate::stages::{Decision, Fault};
use crate::stages::{Facts, Stage};

/// Schema identifier carried by every report.
pub const SCHEMA: &str = "validator.report/v1";
/// Prefix of the console line that carries the report.
pub const PREFIX: &str = "VALIDATOR-REPORT ";

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    Ok,
    Failed,
    Skipped,
}

/// One stage's line in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageReport {
    pub name: Stage,
    pub status: StageStatus,
    pub duration_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The health report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub validator_version: String,
    pub image_id: Option<String>,
    pub bom_sha256: Option<String>,
    pub kernel_release: Option<String>,
    /// CLOCK_BOOTTIME when the init started and when the report was made, in µs.
    pub boottime_start_us: u64,
    pub boottime_report_us: u64,
    pub stages: Vec<StageReport>,
    pub modules: Vec<ModuleReport>,
    pub root: Option<RootReport>,
    /// `/proc/sys/kernel/tainted` after the modules were loaded.
    pub taint: Option<TaintReport>,
    /// The verified root (when the BOM asks for one).
    pub verity: Option<VerityReport>,
    /// Measurements: PCR values we extended, TPM commands and time, logs.
    pub tpm: Option<TpmReport>,
    /// The preflight's checks and the hardware facts behind them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PreflightReport>,
    /// The A/B slots: which booted, their state before and after, the fallback that led
    /// here (with that boot's report).
    #[serde(default)]
    pub slot: Option<SlotFacts>,
    pub decision: Decision,
    pub fault: Option<Fault>,
    pub reason: Option<String>,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn new(boottime_start_us: u64) -> Report {
        Report {
            schema: SCHEMA.into(),
            validator_version: env!("CARGO_PKG_VERSION").into(),
            image_id: None,
            bom_sha256: None,
            kernel_release: None,
            boottime_start_us,
            boottime_report_us: boottime_start_us,
            stages: Vec::new(),
            modules: Vec::new(),
            root: None,
            taint: None,
            verity: None,
            tpm: None,
            preflight: None,
            slot: None,
            decision: Decision::Pass,
            fault: None,
            reason: None,
            warnings: Vec::new(),
        }
    }

    /// Marks the boot as stopped, keeping the first reason.
    pub fn fail(&mut self, fault: Fault, reason: String) {
        self.decision = Decision::Stop;
        if self.reason.is_none() {
            self.reason = Some(reason);
            self.fault = Some(fault);
        }
    }

    /// Takes in what the stages found out (warnings are appended).
    pub fn absorb(&mut self, facts: &Facts) {
        self.image_id.clone_from(&facts.image_id);
        self.bom_sha256.clone_from(&facts.bom_sha256);
        self.kernel_release.clone_from(&facts.kernel_release);
        self.modules.clone_from(&facts.modules);
        self.root.clone_from(&facts.root);
        self.taint.clone_from(&facts.taint);
        self.verity.clone_from(&facts.verity);
        self.tpm.clone_from(&facts.tpm);
        self.preflight.clone_from(&facts.preflight);
        self.slot.clone_from(&facts.slot);
        for w in &facts.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
    }

    /// The report line of one module, by name.
    pub fn module(&self, name: &str) -> Option<&ModuleReport> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// The stage lines' names, in order.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name.name()).collect()
    }

    /// The report as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        match serde_json::to_string(self) {
            Ok(s) => s,
            // Only a non-string map key could fail; keep the line parseable anyway.
            Err(e) => serde_json::json!({"schema": SCHEMA, "error": e.to_string()}).to_string(),
        }
    }

    /// The console line: prefix, JSON, newline.
    pub fn console_line(&self) -> String {
        format!("{PREFIX}{}\n", self.to_json())
    }
}

/// Finds and parses the last report line in console output (for harnesses and fleet
/// tooling).
pub fn find_in_console(text: &str) -> Option<Report> {
    text.lines()
        .rev()
        .filter_map(|l| l.find(PREFIX).and_then(|i| l.get(i + PREFIX.len()..)))
        .find_map(|j| serde_json::from_str(j.trim_end_matches('\r')).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_round_trips_through_console_text() {
        let mut r = Report::new(1000);
        r.image_id = Some("img".into());
        r.stages.push(StageReport {
            name: Stage::Start,
            status: StageStatus::Ok,
            duration_us: 5,
            detail: None,
        });
        r.fail(Fault::Image, "first".into());
        r.fail(Fault::Hardware, "second".into());
        let console = format!("[    1.0] noise\r\n{}[    2.0] more\n", r.console_line());
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["decision"], "stop");
        assert_eq!(v["fault"], "image");
        assert_eq!(v["reason"], "first");
        assert_eq!(v["stages"][0]["name"], "start");
        assert_eq!(v["stages"][0]["status"], "ok");
        let typed = find_in_console(&console).unwrap();
        assert_eq!(typed, r);
        assert!(find_in_console("nothing here").is_none());
    }
}

//! The report's types: schema `validator.report/v2`.
//!
//! Contract: every field of v1 is kept with its name and meaning (`docs/REPORT.md` has
//! the v1 -> v2 table); v2 adds the node's identity, the BOM's pool, the flat list of
//! checks, stage start times and fault classes, module start times, the GPU counts and
//! PID 1's peak memory. Fields added in v2 have defaults, so a v1 report (one carried
//! from a slot running an older image) reads into [`Report`]. [`json_schema`] is the JSON
//! Schema of these types, as committed in `docs/report.schema.json`.

use serde::{Deserialize, Serialize};

use crate::runtime::measure::TpmReport;
use crate::runtime::modload::ModuleReport;
use crate::runtime::node::NodeFacts;
use crate::runtime::slot::SlotFacts;
use crate::runtime::taint::TaintReport;
use crate::stages::storage::RootReport;
use crate::stages::verity::VerityReport;
use crate::stages::{Decision, Facts, Fault, Stage};

/// Schema identifier carried by every report this build makes.
pub const SCHEMA: &str = "validator.report/v2";
/// The schema identifier of the first version (still read).
pub const SCHEMA_V1: &str = "validator.report/v1";

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    Ok,
    Failed,
    Skipped,
}

impl StageStatus {
    /// The word the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Ok => "ok",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
        }
    }
}

/// One stage's line in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StageReport {
    pub name: Stage,
    pub status: StageStatus,
    /// When the stage started (CLOCK_BOOTTIME, µs; 0 in v1 reports).
    #[serde(default)]
    pub start_us: u64,
    pub duration_us: u64,
    /// The fault class of a failed stage (v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// How a check ended (the preflight's own type: one list of statuses for both).
pub use crate::stages::preflight::CheckStatus;

/// One check: a stage as a whole, or one thing a stage judged (a module, a critical file,
/// the kernel's taint, the TPM, a preflight check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    /// Unique in the report: the stage's name for the stage as a whole, else
    /// `<kind>/<subject>` (`module/virtio_blk`, `critical//sbin/init`, `tpm`, `taint`).
    pub name: String,
    /// The stage that made the check.
    pub stage: Stage,
    pub status: CheckStatus,
    /// What a failure or warning points at.
    pub fault: Option<Fault>,
    pub detail: Option<String>,
    /// How long the check took, when it was timed.
    pub duration_us: Option<u64>,
}

/// The GPUs: as the BOM promises them, as found on PCI and as the driver sees them (each
/// `null` when not known in this boot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuCounts {
    pub bom: Option<u32>,
    pub pci: Option<u32>,
    pub driver: Option<u32>,
}

/// The health report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: String,
    pub validator_version: String,
    /// Who the node is (v2).
    #[serde(default)]
    pub node: NodeFacts,
    pub image_id: Option<String>,
    pub bom_sha256: Option<String>,
    pub kernel_release: Option<String>,
    /// The node pool the BOM's `[report] pool` names (v2).
    #[serde(default)]
    pub pool: Option<String>,
    pub decision: Decision,
    pub fault: Option<Fault>,
    /// The first failure, prefixed with its stage.
    pub reason: Option<String>,
    /// CLOCK_BOOTTIME when the init started and when the report was made, in µs.
    pub boottime_start_us: u64,
    pub boottime_report_us: u64,
    /// PID 1's peak resident memory (`VmHWM`), in bytes (v2).
    #[serde(default)]
    pub peak_rss_bytes: Option<u64>,
    /// Every check, stage by stage (v2; `report::checks::derive`).
    #[serde(default)]
    pub checks: Vec<Check>,
    pub stages: Vec<StageReport>,
    pub modules: Vec<ModuleReport>,
    pub root: Option<RootReport>,
    /// `/proc/sys/kernel/tainted` after the modules were loaded.
    pub taint: Option<TaintReport>,
    /// The verified root (when the BOM asks for one).
    pub verity: Option<VerityReport>,
    /// Measurements: PCR values we extended, TPM commands and time, logs.
    pub tpm: Option<TpmReport>,
    /// The A/B slots: which booted, their state before and after, the fallback that led
    /// here (with that boot's report).
    #[serde(default)]
    pub slot: Option<SlotFacts>,
    /// How the kernel was started: what systemd-stub said of a Unified Kernel Image, and
    /// the companion files the init ignored (absent: no stub and nothing ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_image: Option<crate::runtime::uki::BootImage>,
    /// The preflight's checks and the hardware facts behind them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<crate::stages::preflight::PreflightReport>,
    /// GPU counts (v2): the BOM's now; PCI's and the driver's once the preflight finds
    /// them.
    #[serde(default)]
    pub gpus: Option<GpuCounts>,
    pub warnings: Vec<String>,
    /// The TPM quote of this boot, bound to this report (the report's canonical JSON
    /// without this field is what the quote's qualifying data digests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<crate::runtime::attest::Attestation>,
    /// Set in a live re-check's report only (`validator recheck`): when it ran and what
    /// the boot had decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck: Option<Recheck>,
}

/// A live re-check: when the preflight ran again, and the boot's own verdict (the report
/// around it says what the node is now).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Recheck {
    /// Seconds since the Unix epoch.
    pub at_unix_s: u64,
    pub boot_decision: Decision,
    pub boot_fault: Option<Fault>,
    pub boot_reason: Option<String>,
}

impl Report {
    pub fn new(boottime_start_us: u64) -> Report {
        Report {
            schema: SCHEMA.into(),
            validator_version: env!("CARGO_PKG_VERSION").into(),
            node: NodeFacts::default(),
            image_id: None,
            bom_sha256: None,
            kernel_release: None,
            pool: None,
            decision: Decision::Pass,
            fault: None,
            reason: None,
            boottime_start_us,
            boottime_report_us: boottime_start_us,
            peak_rss_bytes: None,
            checks: Vec::new(),
            stages: Vec::new(),
            modules: Vec::new(),
            root: None,
            taint: None,
            verity: None,
            tpm: None,
            slot: None,
            boot_image: None,
            preflight: None,
            gpus: None,
            warnings: Vec::new(),
            attestation: None,
            recheck: None,
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
        self.node.clone_from(&facts.node);
        self.image_id.clone_from(&facts.image_id);
        self.bom_sha256.clone_from(&facts.bom_sha256);
        self.kernel_release.clone_from(&facts.kernel_release);
        self.pool.clone_from(&facts.pool);
        self.modules.clone_from(&facts.modules);
        self.root.clone_from(&facts.root);
        self.taint.clone_from(&facts.taint);
        self.verity.clone_from(&facts.verity);
        self.tpm.clone_from(&facts.tpm);
        self.slot.clone_from(&facts.slot);
        self.boot_image.clone_from(&facts.boot_image);
        self.preflight.clone_from(&facts.preflight);
        if facts.bom_gpus.is_some() {
            let g = self.gpus.get_or_insert_with(GpuCounts::default);
            g.bom = facts.bom_gpus;
        }
        if let Some(p) = &facts.preflight {
            self.count_gpus(p);
        }
        for w in &facts.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
    }

    /// The GPU counts the preflight `p` found: on PCI, and behind the driver (the GPUs its
    /// procfs describes; none when it is not loaded).
    pub fn count_gpus(&mut self, p: &crate::stages::preflight::PreflightReport) {
        let g = self.gpus.get_or_insert_with(GpuCounts::default);
        g.pci = u32::try_from(p.gpus.len()).ok();
        g.driver = p
            .driver
            .as_ref()
            .and_then(|_| u32::try_from(p.gpus.iter().filter(|x| x.model.is_some()).count()).ok());
    }

    /// The report line of one module, by name.
    pub fn module(&self, name: &str) -> Option<&ModuleReport> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// The check by name.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The stage lines' names, in order.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.name.name()).collect()
    }

    /// The slot this boot ran from, when known.
    pub fn booted_slot(&self) -> Option<&'static str> {
        self.slot
            .as_ref()
            .and_then(|s| s.booted)
            .map(|s| s.as_str())
    }

    /// The report of the boot this one fell back from, when it was carried or recorded
    /// and reads as a report.
    pub fn previous_report(&self) -> Option<Report> {
        let v = self.slot.as_ref()?.previous.as_ref()?.report.as_ref()?;
        serde_json::from_value(v.clone()).ok()
    }

    /// The report as one line of JSON (no newline). Serialising cannot fail in practice
    /// (only string map keys); if it did, the line is still JSON naming the error.
    pub fn to_json(&self) -> String {
        match serde_json::to_string(self) {
            Ok(s) => s,
            Err(e) => serde_json::json!({"schema": SCHEMA, "error": e.to_string()}).to_string(),
        }
    }
}

/// The JSON Schema (draft 2020-12) of [`Report`], as committed in
/// `docs/report.schema.json`.
pub fn json_schema() -> serde_json::Value {
    let mut schema = schemars::schema_for!(Report);
    schema.insert("$id".into(), "validator.report/v2".into());
    schema.insert(
        "title".into(),
        "validator.report/v2: the boot gate's health report".into(),
    );
    schema.to_value()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failure_wins_and_v1_reports_still_read() {
        let mut r = Report::new(1000);
        r.fail(Fault::Image, "first".into());
        r.fail(Fault::Hardware, "second".into());
        assert_eq!(
            (r.decision, r.fault, r.reason.as_deref()),
            (Decision::Stop, Some(Fault::Image), Some("first"))
        );
        // A v1 report (as a slot with an older image wrote it) reads with v2's defaults.
        let v1 = r#"{"schema":"validator.report/v1","validator_version":"0.1.0",
            "image_id":"img","bom_sha256":null,"kernel_release":"6.1.0-57-amd64",
            "boottime_start_us":1,"boottime_report_us":2,
            "stages":[{"name":"start","status":"ok","duration_us":5,"detail":"bom img"}],
            "modules":[],"root":null,"taint":null,"verity":null,"tpm":null,
            "decision":"stop","fault":"image","reason":"start: x","warnings":[]}"#;
        let r: Report = serde_json::from_str(v1).unwrap();
        assert_eq!(r.schema, SCHEMA_V1);
        assert_eq!(r.stages[0].start_us, 0);
        assert!(r.checks.is_empty() && r.node == NodeFacts::default());
        assert_eq!(r.image_id.as_deref(), Some("img"));
    }

    /// The committed schema is what the types generate (regenerate with
    /// `VALIDATOR_WRITE_SCHEMA=1 cargo test -p validator --lib committed_schema`).
    #[test]
    fn committed_schema_is_generated_from_the_types() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/report.schema.json");
        let want = format!(
            "{}\n",
            serde_json::to_string_pretty(&json_schema()).unwrap()
        );
        if std::env::var_os("VALIDATOR_WRITE_SCHEMA").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is not what the types generate; run VALIDATOR_WRITE_SCHEMA=1 cargo test -p \
             validator --lib committed_schema",
            path.display()
        );
    }
}

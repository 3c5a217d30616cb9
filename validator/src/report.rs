//! Stage `report`: the one health report of a boot, as JSON.
//!
//! The schema is versioned ([`SCHEMA`]); fields are only ever added within a version. The
//! init prints the report as one line, prefixed with [`PREFIX`], on the console, and
//! writes it to `/run/validator/report.json` (which survives `switch_root`) by write-to-
//! temporary-then-rename, so a reader never sees half a report.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::modules::ModuleReport;
use crate::storage::FoundPartition;

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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageReport {
    pub name: &'static str,
    pub status: StageStatus,
    pub duration_us: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What the boot does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Hand over to the real root.
    Pass,
    /// Stop in a safe state with this report on the console.
    Stop,
}

/// What a failure points at: only image faults burn an A/B slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// Something we built is wrong (BOM, module, root hash, versions).
    Image,
    /// Hardware the BOM promises is missing or degraded.
    Hardware,
    /// The platform around the image (no TPM, firmware, command line).
    Platform,
}

/// The root filesystem we mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RootReport {
    #[serde(flatten)]
    pub partition: FoundPartition,
    pub fstype: String,
    pub read_only: bool,
    pub mountpoint: String,
}

/// The kernel's taint after module loading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaintReport {
    pub value: u64,
    /// As `dmesg` prints them (`POE`...).
    pub flags: String,
    /// Flags the BOM's `policy.taint_allowed` does not allow.
    pub unexpected: String,
}

/// Taint bits to letters, in the kernel's `taint_flags` order.
pub fn taint_letters(value: u64) -> String {
    const LETTERS: &[u8] = b"PFSRMBUDAWCIOELKXTNJ";
    LETTERS
        .iter()
        .enumerate()
        .filter(|(i, _)| value & (1 << i) != 0)
        .map(|(_, c)| *c as char)
        .collect()
}

/// The health report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub validator_version: &'static str,
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
    pub verity: Option<crate::verity::VerityReport>,
    /// Measurements: PCR values we extended, TPM commands and time, logs.
    pub tpm: Option<crate::measure::TpmReport>,
    pub decision: Decision,
    pub fault: Option<Fault>,
    pub reason: Option<String>,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn new(boottime_start_us: u64) -> Report {
        Report {
            schema: SCHEMA,
            validator_version: env!("CARGO_PKG_VERSION"),
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

    /// The report as one line of JSON (no newline).
    pub fn to_json(&self) -> String {
        // Serialising plain structs with string keys cannot fail.
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"{e}\"}}"))
    }

    /// The console line: prefix, JSON, newline.
    pub fn console_line(&self) -> String {
        format!("{PREFIX}{}\n", self.to_json())
    }
}

/// Finds and parses the report line in console output (for harnesses and fleet tooling).
pub fn find_in_console(text: &str) -> Option<serde_json::Value> {
    text.lines()
        .rev()
        .filter_map(|l| l.find(PREFIX).map(|i| &l[i + PREFIX.len()..]))
        .find_map(|j| serde_json::from_str(j.trim_end_matches('\r')).ok())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync,
/// rename. Creates the directory if needed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "report".into());
    let tmp: PathBuf = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_round_trips_through_console_text() {
        let mut r = Report::new(1000);
        r.image_id = Some("img".into());
        r.stages.push(StageReport {
            name: "start",
            status: StageStatus::Ok,
            duration_us: 5,
            detail: None,
        });
        r.fail(Fault::Image, "first".into());
        r.fail(Fault::Hardware, "second".into());
        let console = format!("[    1.0] noise\r\n{}[    2.0] more\n", r.console_line());
        let v = find_in_console(&console).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["decision"], "stop");
        assert_eq!(v["fault"], "image");
        assert_eq!(v["reason"], "first");
        assert_eq!(v["stages"][0]["status"], "ok");
        assert!(find_in_console("nothing here").is_none());
    }

    #[test]
    fn taint_letters_follow_the_kernel() {
        assert_eq!(taint_letters(0), "");
        assert_eq!(taint_letters(1), "P");
        assert_eq!(taint_letters((1 << 12) | (1 << 13)), "OE");
        assert_eq!(taint_letters(1 << 9), "W");
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = std::env::temp_dir().join(format!("vld-rep-{}", std::process::id()));
        let p = dir.join("sub/report.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

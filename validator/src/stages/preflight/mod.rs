//! Stage `preflight`: the hardware the BOM promises, checked after the verified root is
//! mounted and before the handover.
//!
//! Part 1 ([`drivers`]): the BOM's `modules.root` drivers are gated and loaded from the
//! new root's `/lib/modules/<release>` with the same gate and loader as the initramfs's
//! modules (`stages::modules`); a refused driver is an image fault.
//!
//! Part 2 ([`check`]): checks that read only sysfs, procfs and the new root, each root a
//! parameter ([`HwRoots`]), so the same code runs against fixture trees, in the init and on
//! a live node (`validator preflight`): PCI inventory and the NVIDIA driver's view
//! ([`nvidia`], over [`pci`]), the fabric manager on the root ([`fabricmanager`]), mlx5
//! ports ([`mlx5`]) and NVMe controllers ([`nvme`]) with a wait while they come up, PCIe
//! links and AER counters ([`pcie`]), the kernel command line, Secure Boot, lockdown and
//! the kernel's taint ([`platform`]). Each check records its name, status, fault class
//! and detail; a file that cannot be read or parsed fails the check that needed it, with
//! the file's path in the detail. A file that may be absent is absent only when nothing
//! is at its path ([`present`]): a dangling symlink or a loop there is unreadable, not
//! absent. Every device the BOM counts or bounds is judged, or its check fails naming the
//! file; `docs/FAULTS.md` ("Preflight inputs") tables each check's inputs and what a
//! missing or unreadable one gives, and `tests/preflight_inputs.rs` holds it.
//!
//! The decision rule ([`PreflightReport::decide`]): the stage fails when any check fails;
//! its fault class is that of the first failing check with an image fault if there is
//! one (an image fault is fixed by falling back to the other slot, whatever else is
//! wrong), otherwise that of the first failing check in run order. Warnings (correctable
//! AER errors, links below their capability but above the BOM's minimum) do not fail it.
//! A driver that does not see some of its devices is the hardware's fault when the other
//! slot's boot showed the same ([`repeat`]).
//!
//! Current limits: mlx5 Ethernet (RoCE) ports are judged only when their netdev is up
//! (the preflight does not configure networks, so in the initramfs they are reported as
//! not brought up); Secure Boot is read from efivarfs, which the start stage mounts on
//! every UEFI boot (unknown if that mount failed).

pub mod drivers;
pub mod fabricmanager;
pub mod mlx5;
pub mod nvidia;
pub mod nvme;
pub mod pci;
pub mod pcie;
pub mod platform;
pub mod repeat;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Classified, Context, Fault};
use crate::config::bom::Bom;
use crate::formats::sysfs::ValueError;
use crate::util::fs::{read_limited, read_text_limited, InputError};

/// Most bytes read from one sysfs or procfs value (they are at most a page).
pub const VALUE_MAX: u64 = 64 << 10;

/// The roots a preflight reads: `/sys`, `/proc` and the new root.
#[derive(Debug, Clone)]
pub struct HwRoots {
    pub sys: PathBuf,
    pub proc: PathBuf,
    pub root: PathBuf,
}

/// How a check ended: the preflight's checks and the report's list of every check
/// (`report::CheckStatus` is this type).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Pass,
    /// Reported; does not fail the stage or the boot.
    Warn,
    Fail,
    /// Not judged (not attempted, the BOM asks for nothing here, or nothing is there to
    /// judge).
    Skip,
}

impl CheckStatus {
    /// Every status, in the order the metrics list them.
    pub const ALL: [CheckStatus; 4] = [
        CheckStatus::Pass,
        CheckStatus::Warn,
        CheckStatus::Fail,
        CheckStatus::Skip,
    ];

    /// The word the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skip => "skip",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    pub name: String,
    pub status: CheckStatus,
    /// What a failure points at (set on failures only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    pub detail: String,
    /// The failure is a state that was still settling at the deadline (ports trained but
    /// not yet activated by the subnet manager): retry before replacing hardware.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub transient: bool,
    /// The devices (PCI addresses) a failure names as not seen by their driver: the
    /// evidence [`repeat`] compares across slots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

impl Check {
    pub fn pass(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Pass, None, detail)
    }
    pub fn warn(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Warn, None, detail)
    }
    pub fn skip(name: &str, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Skip, None, detail)
    }
    pub fn fail(name: &str, fault: Fault, detail: impl Into<String>) -> Check {
        Check::new(name, CheckStatus::Fail, Some(fault), detail)
    }
    fn new(
        name: &str,
        status: CheckStatus,
        fault: Option<Fault>,
        detail: impl Into<String>,
    ) -> Check {
        Check {
            name: name.to_string(),
            status,
            fault,
            detail: detail.into(),
            transient: false,
            devices: Vec::new(),
        }
    }
    /// The check, naming `devices` as the ones its driver did not see.
    pub fn with_devices(mut self, devices: Vec<String>) -> Check {
        self.devices = devices;
        self
    }
    pub fn failed(&self) -> bool {
        self.status == CheckStatus::Fail
    }
}

/// What the preflight found: every check and the facts behind them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreflightReport {
    pub checks: Vec<Check>,
    /// The drivers gated and loaded from the new root (boot only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<crate::runtime::modload::ModuleReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<nvidia::GpuFact>,
    /// Display controllers that are not NVIDIA GPUs (`0000:00:01.0 1234:1111`): on PCI,
    /// not counted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_displays: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvswitches: Vec<nvidia::NvSwitchFact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<nvidia::DriverFact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric_manager: Option<fabricmanager::FabricManagerFact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<mlx5::PortFact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvme: Vec<nvme::NvmeFact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<pcie::LinkFact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aer: Vec<pcie::AerFact>,
    #[serde(default)]
    pub platform: platform::PlatformFact,
    /// Time spent waiting for ports and controllers to come up.
    pub waited_ms: u64,
    /// The deciding check failed the same devices in the boot of the slot that fell back
    /// to this one: the fault was moved to the hardware ([`repeat`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated: Option<repeat::Repeated>,
}

impl PreflightReport {
    /// The stage's verdict: `None` when no check failed, else the fault class and the
    /// check that gives it (the first image fault, else the first failure).
    pub fn decide(&self) -> Option<(Fault, &Check)> {
        let mut failing = self.checks.iter().filter(|c| c.failed());
        let first = failing.clone().next()?;
        let pick = failing
            .find(|c| c.fault == Some(Fault::Image))
            .unwrap_or(first);
        Some((pick.fault.unwrap_or(Fault::Hardware), pick))
    }

    /// The check by name.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// A one-line summary: counts and, on failure, the deciding check.
    pub fn summary(&self) -> String {
        let count = |s| self.checks.iter().filter(|c| c.status == s).count();
        let base = format!(
            "{} passed, {} failed, {} warned, {} skipped",
            count(CheckStatus::Pass),
            count(CheckStatus::Fail),
            count(CheckStatus::Warn),
            count(CheckStatus::Skip)
        );
        match self.decide() {
            None => base,
            Some((f, c)) => format!("{base}; {} fault: {}: {}", f.as_str(), c.name, c.detail),
        }
    }
}

/// A file that could not be read or parsed, with its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct Issue {
    pub path: PathBuf,
    pub why: String,
}

impl Issue {
    pub fn new(path: &Path, why: impl Into<String>) -> Issue {
        Issue {
            path: path.to_path_buf(),
            why: why.into(),
        }
    }

    /// From a bounded read's error (the path is kept once).
    pub fn from_input(e: InputError) -> Issue {
        let path = e.path().to_path_buf();
        let why = match &e {
            InputError::Io { source, .. } => source.to_string(),
            other => {
                let s = other.to_string();
                let prefix = format!("{}: ", path.display());
                s.strip_prefix(&prefix).map_or(s.clone(), str::to_string)
            }
        };
        Issue { path, why }
    }
}

/// Reads a sysfs/procfs value (bounded, never blocking).
pub fn read_value(path: &Path) -> Result<String, Issue> {
    read_text_limited(path, VALUE_MAX).map_err(Issue::from_input)
}

/// Whether a directory entry exists, without following it: a dangling symlink or a
/// symlink loop is there (and then fails to read, naming itself), not absent.
pub fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Reads a value that may be absent (`None` when nothing is at the path). A dangling
/// symlink is not absence: it is an issue naming it.
pub fn read_optional(path: &Path) -> Result<Option<String>, Issue> {
    match read_text_limited(path, VALUE_MAX) {
        Ok(s) => Ok(Some(s)),
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            if present(path) {
                Err(Issue::new(path, "dangling symbolic link"))
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(Issue::from_input(e)),
    }
}

/// Reads a binary value (an EFI variable).
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, Issue> {
    read_limited(path, VALUE_MAX).map_err(Issue::from_input)
}

/// Reads and parses one value; a parse error names the file.
pub fn parse_value<T>(
    path: &Path,
    f: impl FnOnce(&str) -> Result<T, ValueError>,
) -> Result<T, Issue> {
    let text = read_value(path)?;
    f(&text).map_err(|e| Issue::new(path, e.0))
}

/// The entries of a directory, sorted by name (`None` when it does not exist). Names that
/// are not UTF-8 are an issue naming the directory.
pub fn list_dir(dir: &Path) -> Result<Option<Vec<String>>, Issue> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Issue::new(dir, e.to_string())),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| Issue::new(dir, e.to_string()))?;
        let name = e.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| Issue::new(dir, format!("entry {name:?} is not UTF-8")))?;
        out.push(name.to_string());
        if out.len() > 65536 {
            return Err(Issue::new(dir, "more than 65536 entries"));
        }
    }
    out.sort();
    Ok(Some(out))
}

/// The directory a sysfs link points at, resolved (kernfs links are relative).
pub fn resolve(link: &Path) -> Result<PathBuf, Issue> {
    std::fs::canonicalize(link).map_err(|e| Issue::new(link, e.to_string()))
}

/// The last name of the target of a symlink (`driver -> ../../bus/pci/drivers/nvidia`
/// gives `nvidia`); `None` when there is no link.
pub fn link_name(link: &Path) -> Result<Option<String>, Issue> {
    match std::fs::read_link(link) {
        Ok(t) => Ok(Some(
            t.file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| Issue::new(link, format!("link target {t:?} has no UTF-8 name")))?
                .to_string(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Issue::new(link, e.to_string())),
    }
}

/// How the checks run.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long to wait for mlx5 ports and NVMe controllers (the BOM's `link_wait_s`).
    pub link_wait: Duration,
    /// How often to look again while waiting.
    pub poll: Duration,
}

/// How often the preflight looks at the mlx5 ports and NVMe controllers again while it
/// waits for them. A port that comes up waits at most this long to be seen (half of it on
/// average). One look (`mlx5::check` and `nvme::check` over the HGX fixture: ten ports,
/// their netdevs, the controllers) costs about 1 ms of one core on the development
/// machine, so polling takes about 2% of one core while the node waits
/// (`scripts/bench preflight`).
pub const LINK_POLL: Duration = Duration::from_millis(50);

impl Options {
    /// The BOM's deadline, polling every [`LINK_POLL`].
    pub fn from_bom(bom: &Bom) -> Options {
        Options {
            link_wait: bom.hardware.link_wait(),
            poll: LINK_POLL,
        }
    }
}

/// Runs every sysfs/procfs/root check (part 2) and adds the results to `report`, in this
/// order: PCI, GPUs and the driver, NVSwitches, the fabric manager, mlx5 ports and NVMe
/// (waiting up to `opts.link_wait` while they come up), PCIe links and AER, platform.
pub fn check(roots: &HwRoots, bom: &Bom, opts: &Options, report: &mut PreflightReport) {
    let hw = &bom.hardware;
    let (devices, issues) = pci::scan(&roots.sys);
    report.checks.push(if issues.is_empty() {
        Check::pass("pci", format!("{} PCI functions", devices.len()))
    } else {
        Check::fail(
            "pci",
            Fault::Hardware,
            issues
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    });
    let inv = pci::Inventory::new(&devices, hw);
    nvidia::check(roots, bom, &inv, report);
    fabricmanager::check(roots, bom, report);
    // Ports train and controllers probe after their drivers load: wait for them.
    let start = Instant::now();
    let deadline = start + opts.link_wait;
    loop {
        let (ports, port_checks, ports_settling) = mlx5::check(roots, hw, &inv);
        let (ctrls, nvme_check, nvme_settling) = nvme::check(roots, hw);
        let done = !(ports_settling || nvme_settling) || Instant::now() >= deadline;
        if done {
            let waited = start.elapsed();
            report.waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            let note = |mut c: Check| {
                if c.failed() && !opts.link_wait.is_zero() {
                    c.detail
                        .push_str(&format!(" (after waiting {:.1} s)", waited.as_secs_f64()));
                }
                c
            };
            report.ports = ports;
            report.checks.extend(port_checks.into_iter().map(note));
            report.nvme = ctrls;
            report.checks.push(note(nvme_check));
            break;
        }
        std::thread::sleep(
            opts.poll
                .min(deadline.saturating_duration_since(Instant::now())),
        );
    }
    pcie::check(hw, &inv, report);
    platform::check(roots, bom, report);
}

/// Why the preflight stage failed: the deciding check, by its fault class.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{check}: {detail}{}", more_text(*.more))]
    Image {
        check: String,
        detail: String,
        more: usize,
    },
    #[error("{check}: {detail}{}", more_text(*.more))]
    Hardware {
        check: String,
        detail: String,
        more: usize,
    },
    #[error("{check}: {detail}{}", more_text(*.more))]
    Platform {
        check: String,
        detail: String,
        more: usize,
    },
}

fn more_text(more: usize) -> String {
    match more {
        0 => String::new(),
        n => format!(" (and {n} more failed check(s))"),
    }
}

impl Classified for PreflightError {
    fn fault(&self) -> Fault {
        match self {
            PreflightError::Image { .. } => Fault::Image,
            PreflightError::Hardware { .. } => Fault::Hardware,
            PreflightError::Platform { .. } => Fault::Platform,
        }
    }
}

impl PreflightError {
    /// The error for a report whose checks failed (`None` when none did).
    pub fn from_report(r: &PreflightReport) -> Option<PreflightError> {
        let (fault, c) = r.decide()?;
        let check = c.name.clone();
        let detail = c.detail.clone();
        let more = r
            .checks
            .iter()
            .filter(|c| c.failed())
            .count()
            .saturating_sub(1);
        Some(match fault {
            Fault::Image => PreflightError::Image {
                check,
                detail,
                more,
            },
            Fault::Hardware => PreflightError::Hardware {
                check,
                detail,
                more,
            },
            Fault::Platform => PreflightError::Platform {
                check,
                detail,
                more,
            },
        })
    }
}

/// The stage: gate and load the BOM's root drivers, then every check; the facts go to
/// the report whatever the outcome.
pub fn run(ctx: &mut Context) -> Result<String, PreflightError> {
    let Some(b) = ctx.bom.as_ref() else {
        return Ok("no BOM: nothing to check".into());
    };
    let bom = b.bom.clone();
    let mut report = PreflightReport::default();
    if !bom.modules.root.is_empty() {
        drivers::load_root_modules(ctx, &bom, &mut report);
    }
    #[cfg_attr(
        not(feature = "test-hooks"),
        expect(unused_mut, reason = "the test hook replaces the roots")
    )]
    let mut roots = HwRoots {
        sys: ctx.roots.sys.clone(),
        proc: ctx.roots.proc.clone(),
        root: ctx.roots.new_root.clone(),
    };
    #[cfg(feature = "test-hooks")]
    if let Some(dir) = &ctx.args.test_hw_fixture {
        let d = ctx.roots.new_root.join(dir.trim_start_matches('/'));
        log::warn!(
            "preflight: hardware read from the fixture {} (validator.test_hw_fixture)",
            d.display()
        );
        roots = HwRoots {
            sys: d.join("sys"),
            proc: d.join("proc"),
            root: d.join("root"),
        };
    }
    check(&roots, &bom, &Options::from_bom(&bom), &mut report);
    drivers::attribute_no_device(&mut report);
    let other = repeat::OtherSlot {
        fell_back: ctx.facts.slot.as_ref().and_then(|s| s.previous.as_ref()),
        last: ctx.slot.as_ref().and_then(|rt| {
            let y = rt.slot.other();
            let report = rt
                .record
                .state
                .slots
                .get(y.as_str())?
                .last_report
                .as_ref()?;
            Some(repeat::LastBoot {
                slot: y.as_str(),
                this: rt.slot.as_str(),
                report,
            })
        }),
    };
    if repeat::attribute(&mut report, other) {
        if let Some(rt) = ctx.slot.as_mut() {
            rt.repeated.clone_from(&report.repeated);
        }
        log::warn!(
            "preflight: the same device fault on both slots, so the hardware's: {:?}",
            report.repeated
        );
    }
    let summary = report.summary();
    let err = PreflightError::from_report(&report);
    for c in report
        .checks
        .iter()
        .filter(|c| c.status == CheckStatus::Warn)
    {
        ctx.facts
            .warnings
            .push(format!("preflight {}: {}", c.name, c.detail));
    }
    ctx.facts.preflight = Some(report);
    match err {
        None => Ok(summary),
        Some(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(checks: Vec<Check>) -> PreflightReport {
        PreflightReport {
            checks,
            ..PreflightReport::default()
        }
    }

    #[test]
    fn image_faults_decide_first_then_run_order() {
        let hw = Check::fail("gpus", Fault::Hardware, "7 of 8");
        let img = Check::fail("fabric-manager", Fault::Image, "570.124.06");
        let plat = Check::fail("x", Fault::Platform, "p");
        let ok = Check::pass("nvme", "2 live");
        let warn = Check::warn("aer", "correctable");
        assert!(report(vec![ok.clone(), warn.clone()]).decide().is_none());
        let r = report(vec![ok.clone(), hw.clone(), img.clone()]);
        let (f, c) = r.decide().unwrap();
        assert_eq!((f, c.name.as_str()), (Fault::Image, "fabric-manager"));
        let e = PreflightError::from_report(&r).unwrap();
        assert_eq!(e.fault(), Fault::Image);
        assert_eq!(
            e.to_string(),
            "fabric-manager: 570.124.06 (and 1 more failed check(s))"
        );
        let r = report(vec![plat.clone(), hw.clone()]);
        assert_eq!(r.decide().unwrap().0, Fault::Platform);
        let r = report(vec![hw, plat, warn]);
        let e = PreflightError::from_report(&r).unwrap();
        assert_eq!(
            (e.fault(), e.to_string().as_str()),
            (Fault::Hardware, "gpus: 7 of 8 (and 1 more failed check(s))")
        );
        assert!(PreflightError::from_report(&report(vec![ok])).is_none());
    }
}

//! GPUs and NVSwitches: on PCI (hardware) and behind the NVIDIA driver (image).
//!
//! Checks, in order:
//! - `gpus` (hardware): NVIDIA GPUs on PCI against `hardware.gpus` and `gpu_pci_ids` (a
//!   GPU missing from the bus, or another model than the BOM names);
//! - `gpu-driver` (image): every GPU on PCI has a `/proc/driver/nvidia/gpus/<bdf>` entry
//!   that is not `GPU Excluded` - the driver seeing fewer GPUs than PCI shows is the
//!   image's fault (wrong driver for the GPU, a driver that failed to initialise it),
//!   unless both slots show it on the same GPUs ([`super::repeat`]);
//! - `driver-version`, `driver-flavour` (image): `/proc/driver/nvidia/version` against
//!   the BOM's `[nvidia]`, cross-checked with `/sys/module/nvidia/{version,taint}`;
//! - `gpu-vbios` (hardware): every GPU the driver sees runs `hardware.gpu_vbios` (its
//!   entry's `Video BIOS`);
//! - `nvswitches` (hardware on PCI, image behind `nvidia-nvswitch`):
//!   `/proc/driver/nvidia-nvswitch/devices/<bdf>/information` for each NVSwitch on PCI;
//! - `nvswitch-bios` (hardware): every NVSwitch `nvidia-nvswitch` sees runs
//!   `hardware.nvswitch_bios` (its entry's `BIOS Version`).
//!
//! Firmware versions are compared without regard to case (the driver prints
//! `96.00.a5.00.01`, `nvidia-smi` `96.00.A5.00.01`); a device the driver does not see has
//! no version to judge and is the `gpu-driver` / `nvswitches` failure.
//!
//! With no NVIDIA device on PCI at all, the driver checks are skipped: there is nothing
//! for a driver to see, and the missing hardware is already the `gpus` failure.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::pci::{Inventory, PciDevice, Role};
use super::{list_dir, parse_value, read_optional, Check, HwRoots, PreflightReport};
use crate::config::bom::hardware::{FwVersion, Hardware};
use crate::config::bom::{Bom, Flavour, Nvidia};
use crate::formats::sysfs::{self, DriverFlavour, DriverVersion};
use crate::stages::Fault;

/// One GPU on PCI, with what the driver says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuFact {
    pub address: String,
    pub pci_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `Model` from the driver's procfs entry (absent: the driver does not see it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub excluded: bool,
    /// `Video BIOS` from the driver's procfs entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbios: Option<String>,
}

/// One NVSwitch on PCI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvSwitchFact {
    pub address: String,
    pub pci_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// `BIOS Version` from `nvidia-nvswitch`'s procfs entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<String>,
}

/// The loaded NVIDIA driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriverFact {
    pub version: String,
    /// `open` or `proprietary`.
    pub flavour: String,
    /// The NVRM id line.
    pub nvrm: String,
    /// `/sys/module/nvidia/version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_version: Option<String>,
    /// `/sys/module/nvidia/taint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_taint: Option<String>,
}

fn flavour_name(f: DriverFlavour) -> &'static str {
    match f {
        DriverFlavour::Open => "open",
        DriverFlavour::Proprietary => "proprietary",
    }
}

/// Runs the GPU, driver and NVSwitch checks.
pub fn check(roots: &HwRoots, bom: &Bom, inv: &Inventory, report: &mut PreflightReport) {
    let hw = &bom.hardware;
    let gpus = inv.of(Role::Gpu);
    let switches = inv.of(Role::NvSwitch);
    let procdir = roots.proc.join("driver/nvidia");

    // On PCI.
    report.other_displays = other_displays(inv);
    let mut facts = gpu_facts(&gpus);
    report.checks.push(gpus_check(hw, &gpus));

    if gpus.is_empty() && switches.is_empty() {
        skip_driver_checks(report);
        report.gpus = facts;
        switch_checks(roots, bom, inv, report);
        return;
    }

    // Behind the driver.
    report.checks.push(gpu_driver_check(&procdir, &mut facts));
    report.checks.push(firmware_check(
        "gpu-vbios",
        "GPU",
        "gpu_vbios",
        hw.gpu_vbios.as_ref(),
        facts
            .iter()
            .map(|f| (f.address.as_str(), f.vbios.as_deref())),
    ));
    report.gpus = facts;

    // The driver's version and flavour.
    driver_checks(roots, bom, report);
    switch_checks(roots, bom, inv, report);
}

/// The display controllers on PCI that are not our GPUs (another vendor's display
/// controller is no GPU of ours), for the report.
fn other_displays(inv: &Inventory) -> Vec<String> {
    inv.devices
        .iter()
        .filter(|(d, r)| *r != Role::Gpu && d.class >> 16 == 0x03)
        .map(|(d, _)| format!("{} {} class {:#08x}", d.address, d.id, d.class))
        .collect()
}

/// A fact for each GPU on PCI, with nothing yet from the driver.
fn gpu_facts(gpus: &[&PciDevice]) -> Vec<GpuFact> {
    gpus.iter()
        .map(|d| GpuFact {
            address: d.address.clone(),
            pci_id: d.id.to_string(),
            driver: d.driver.clone(),
            model: None,
            minor: None,
            excluded: false,
            vbios: None,
        })
        .collect()
}

/// Judges `gpus`: the NVIDIA GPUs on PCI against the BOM's `gpus` count and
/// `gpu_pci_ids` models.
fn gpus_check(hw: &Hardware, gpus: &[&PciDevice]) -> Check {
    let listed = gpus
        .iter()
        .map(|d| format!("{} ({})", d.address, d.id))
        .collect::<Vec<_>>()
        .join(", ");
    let wrong_model: Vec<String> = gpus
        .iter()
        .filter(|d| !hw.gpu_pci_ids.is_empty() && !hw.gpu_pci_ids.contains(&d.id))
        .map(|d| format!("{} is {}", d.address, d.id))
        .collect();
    let want_ids = hw
        .gpu_pci_ids
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" or ");
    match hw.gpus {
        None if hw.gpu_pci_ids.is_empty() => Check::skip(
            "gpus",
            format!("{} NVIDIA GPU(s) on PCI; the BOM sets no count", gpus.len()),
        ),
        Some(n) if gpus.len() != n as usize => Check::fail(
            "gpus",
            Fault::Hardware,
            format!(
                "{} NVIDIA GPU(s) on PCI, the BOM expects {n}{}",
                gpus.len(),
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(": {listed}")
                }
            ),
        ),
        _ if !wrong_model.is_empty() => Check::fail(
            "gpus",
            Fault::Hardware,
            format!(
                "not the GPU the BOM names ({want_ids}): {}",
                wrong_model.join(", ")
            ),
        ),
        _ if gpus.is_empty() => Check::pass("gpus", "no NVIDIA GPU on PCI, as the BOM says"),
        _ => Check::pass(
            "gpus",
            format!("{} NVIDIA GPU(s) on PCI: {listed}", gpus.len()),
        ),
    }
}

/// Records the driver checks as skipped: with no NVIDIA device on PCI there is nothing
/// for the driver to see.
fn skip_driver_checks(report: &mut PreflightReport) {
    let why = "no NVIDIA device on PCI: nothing for the driver to see";
    for name in [
        "gpu-driver",
        "gpu-vbios",
        "driver-version",
        "driver-flavour",
    ] {
        report.checks.push(Check::skip(name, why));
    }
}

/// Reads the driver's entry of every GPU on PCI (under `procdir`,
/// `/proc/driver/nvidia`) into its fact and judges `gpu-driver`: the driver sees every
/// GPU and excludes none.
fn gpu_driver_check(procdir: &Path, facts: &mut [GpuFact]) -> Check {
    let (unseen, problems) = read_gpu_entries(procdir, facts);
    let seen = facts
        .iter()
        .filter(|f| f.model.is_some() && !f.excluded)
        .count();
    if !problems.is_empty() {
        Check::fail("gpu-driver", Fault::Image, problems.join("; "))
    } else if !unseen.is_empty() {
        Check::fail(
            "gpu-driver",
            Fault::Image,
            format!(
                "the driver sees {seen} of the {} GPU(s) on PCI; not seen: {}",
                facts.len(),
                unseen.join(", ")
            ),
        )
        .with_devices(
            facts
                .iter()
                .filter(|f| f.model.is_none() || f.excluded)
                .map(|f| f.address.clone())
                .collect(),
        )
    } else if facts.is_empty() {
        Check::skip("gpu-driver", "no GPU on PCI")
    } else {
        Check::pass("gpu-driver", format!("the driver sees all {seen} GPU(s)"))
    }
}

/// Fills each GPU's fact from `<procdir>/gpus/<bdf>/information`. Returns the GPUs the
/// driver does not see or excludes, and the entries (or the directory) that cannot be
/// read or disagree with PCI.
fn read_gpu_entries(procdir: &Path, facts: &mut [GpuFact]) -> (Vec<String>, Vec<String>) {
    let mut unseen = Vec::new();
    let mut problems = Vec::new();
    let entries = match list_dir(&procdir.join("gpus")) {
        Ok(e) => e.unwrap_or_default(),
        Err(e) => {
            problems.push(e.to_string());
            return (unseen, problems);
        }
    };
    for f in facts.iter_mut() {
        if entries.contains(&f.address) {
            read_gpu_entry(procdir, f, &mut unseen, &mut problems);
        } else {
            unseen.push(unseen_gpu(f));
        }
    }
    (unseen, problems)
}

/// How a GPU without a driver entry is named in `gpu-driver`: its address and what it
/// is bound to.
fn unseen_gpu(f: &GpuFact) -> String {
    format!(
        "{} ({})",
        f.address,
        match &f.driver {
            Some(d) => format!("bound to {d}, no /proc/driver/nvidia/gpus entry"),
            None => "bound to no driver".into(),
        }
    )
}

/// Reads one GPU's driver entry into its fact: an excluded GPU goes to `unseen`, an
/// entry that cannot be read or names another Bus Location to `problems`.
fn read_gpu_entry(
    procdir: &Path,
    f: &mut GpuFact,
    unseen: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    let path = procdir.join("gpus").join(&f.address).join("information");
    match parse_value(&path, sysfs::gpu_information) {
        Ok(info) => {
            if info.bus_location != f.address {
                problems.push(format!(
                    "{}: Bus Location {} is not {}",
                    path.display(),
                    info.bus_location,
                    f.address
                ));
            }
            if info.excluded {
                unseen.push(format!("{} (GPU Excluded: Yes)", f.address));
            }
            f.model = Some(info.model);
            f.minor = info.minor;
            f.excluded = info.excluded;
            f.vbios = info.vbios;
        }
        Err(e) => problems.push(e.to_string()),
    }
}

/// Reads the loaded driver's version and flavour and judges `driver-version` and
/// `driver-flavour` against the BOM's `[nvidia]`.
fn driver_checks(roots: &HwRoots, bom: &Bom, report: &mut PreflightReport) {
    let path = roots.proc.join("driver/nvidia/version");
    let v = match read_driver_version(&path) {
        Ok(v) => v,
        Err(why) => {
            report
                .checks
                .push(Check::fail("driver-version", Fault::Image, why.clone()));
            report
                .checks
                .push(Check::fail("driver-flavour", Fault::Image, why));
            return;
        }
    };
    let modver_path = roots.sys.join("module/nvidia/version");
    let taint_path = roots.sys.join("module/nvidia/taint");
    let module_version = read_module_file(&modver_path, module_version_text);
    let module_taint = read_module_file(&taint_path, sysfs::module_taint);
    let fact = DriverFact {
        version: v.version.clone(),
        flavour: flavour_name(v.flavour).to_string(),
        nvrm: v.nvrm.clone(),
        module_version: module_version.clone().ok().flatten(),
        module_taint: module_taint.clone().ok().flatten(),
    };
    let want = bom.nvidia.as_ref();
    report.checks.push(driver_version_check(
        &v,
        &path,
        &module_version,
        &modver_path,
        want,
    ));
    report.checks.push(driver_flavour_check(
        &v,
        &path,
        &module_taint,
        &taint_path,
        want,
    ));
    report.driver = Some(fact);
}

/// Reads and parses `/proc/driver/nvidia/version` (at `path`); the error is the
/// message both driver checks fail with.
fn read_driver_version(path: &Path) -> Result<DriverVersion, String> {
    match read_optional(path) {
        Ok(Some(text)) => {
            sysfs::nvidia_version(&text).map_err(|e| format!("{}: {e}", path.display()))
        }
        Ok(None) => Err(format!(
            "the nvidia driver is not loaded ({} does not exist)",
            path.display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads a `/sys/module/nvidia` file that may be absent and parses it; the error is the
/// message of a file that cannot be read or parsed (naming it).
fn read_module_file(
    path: &Path,
    parse: fn(&str) -> Result<String, sysfs::ValueError>,
) -> Result<Option<String>, String> {
    read_optional(path)
        .map_err(|e| e.to_string())
        .and_then(|o| match o {
            None => Ok(None),
            Some(t) => parse(&t)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
        })
}

/// Parses `/sys/module/nvidia/version`.
fn module_version_text(text: &str) -> Result<String, sysfs::ValueError> {
    sysfs::padded(text, "a module version")
}

/// Judges `driver-version`: the procfs version (at `path`) agrees with
/// `/sys/module/nvidia/version` (at `modver_path`) and with the BOM's driver version.
fn driver_version_check(
    v: &DriverVersion,
    path: &Path,
    module_version: &Result<Option<String>, String>,
    modver_path: &Path,
    want: Option<&Nvidia>,
) -> Check {
    match (module_version, want) {
        (Err(e), _) => Check::fail("driver-version", Fault::Image, e.clone()),
        (Ok(Some(m)), _) if *m != v.version => Check::fail(
            "driver-version",
            Fault::Image,
            format!(
                "{} says {}, {} says {m}",
                path.display(),
                v.version,
                modver_path.display()
            ),
        ),
        (_, Some(n)) if n.driver_version.as_str() != v.version => Check::fail(
            "driver-version",
            Fault::Image,
            format!(
                "driver {} is loaded, the BOM names {}",
                v.version, n.driver_version
            ),
        ),
        (_, Some(_)) => Check::pass("driver-version", format!("driver {}", v.version)),
        (_, None) => Check::skip(
            "driver-version",
            format!("driver {}; the BOM has no [nvidia] section", v.version),
        ),
    }
}

/// Judges `driver-flavour`: the procfs flavour (at `path`) agrees with the module's
/// taint (`P`: proprietary; read from `taint_path`) and with the BOM's flavour.
fn driver_flavour_check(
    v: &DriverVersion,
    path: &Path,
    module_taint: &Result<Option<String>, String>,
    taint_path: &Path,
    want: Option<&Nvidia>,
) -> Check {
    let by_taint = match module_taint {
        Ok(Some(t)) => Some(if t.contains('P') {
            DriverFlavour::Proprietary
        } else {
            DriverFlavour::Open
        }),
        _ => None,
    };
    match (module_taint, want) {
        (Err(e), _) => Check::fail("driver-flavour", Fault::Image, e.clone()),
        (_, _) if by_taint.is_some_and(|t| t != v.flavour) => Check::fail(
            "driver-flavour",
            Fault::Image,
            format!(
                "{} names the {} flavour but {} says {:?}",
                path.display(),
                flavour_name(v.flavour),
                taint_path.display(),
                module_taint
                    .as_ref()
                    .ok()
                    .and_then(Option::as_deref)
                    .unwrap_or("")
            ),
        ),
        (_, Some(n)) => flavour_against_bom(v.flavour, n),
        (_, None) => Check::skip("driver-flavour", flavour_name(v.flavour)),
    }
}

/// Judges `driver-flavour` once the driver agrees with itself: the loaded flavour
/// against the BOM's `[nvidia] flavour`.
fn flavour_against_bom(loaded: DriverFlavour, n: &Nvidia) -> Check {
    let want = match n.flavour {
        Flavour::Open => DriverFlavour::Open,
        Flavour::Proprietary => DriverFlavour::Proprietary,
    };
    if want == loaded {
        Check::pass("driver-flavour", flavour_name(loaded))
    } else {
        Check::fail(
            "driver-flavour",
            Fault::Image,
            format!(
                "the {} driver is loaded, the BOM names the {} flavour",
                flavour_name(loaded),
                flavour_name(want)
            ),
        )
    }
}

fn switch_checks(roots: &HwRoots, bom: &Bom, inv: &Inventory, report: &mut PreflightReport) {
    let hw = &bom.hardware;
    let switches = inv.of(Role::NvSwitch);
    let procdir = roots.proc.join("driver/nvidia-nvswitch/devices");
    let mut facts: Vec<NvSwitchFact> = switches
        .iter()
        .map(|d| NvSwitchFact {
            address: d.address.clone(),
            pci_id: d.id.to_string(),
            driver: d.driver.clone(),
            bios: None,
        })
        .collect();
    let mut problems = Vec::new();
    let mut unseen = Vec::new();
    match list_dir(&procdir) {
        Err(e) => problems.push(e.to_string()),
        Ok(entries) => {
            let entries = entries.unwrap_or_default();
            for f in facts.iter_mut() {
                if !entries.contains(&f.address) {
                    unseen.push(f.address.clone());
                    continue;
                }
                let path = procdir.join(&f.address).join("information");
                match parse_value(&path, sysfs::nvswitch_information) {
                    Ok(i) => f.bios = Some(i.bios_version),
                    Err(e) => problems.push(e.to_string()),
                }
            }
        }
    }
    let on_pci = facts.len();
    let seen = on_pci - unseen.len();
    report.checks.push(match hw.nvswitches {
        Some(n) if on_pci != n as usize => Check::fail(
            "nvswitches",
            Fault::Hardware,
            format!(
                "{on_pci} NVSwitch(es) on PCI, the BOM expects {n}{}",
                if facts.is_empty() {
                    String::new()
                } else {
                    format!(
                        ": {}",
                        facts
                            .iter()
                            .map(|f| f.address.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ),
        ),
        _ if !problems.is_empty() => Check::fail("nvswitches", Fault::Image, problems.join("; ")),
        _ if !unseen.is_empty() => Check::fail(
            "nvswitches",
            Fault::Image,
            format!(
                "nvidia-nvswitch sees {seen} of the {on_pci} NVSwitch(es) on PCI; not seen: {}",
                unseen.join(", ")
            ),
        )
        .with_devices(unseen.clone()),
        None => Check::skip(
            "nvswitches",
            format!("{on_pci} NVSwitch(es) on PCI; the BOM sets no count"),
        ),
        Some(_) => Check::pass(
            "nvswitches",
            format!("{on_pci} NVSwitch(es) on PCI, all seen by nvidia-nvswitch"),
        ),
    });
    report.checks.push(firmware_check(
        "nvswitch-bios",
        "NVSwitch",
        "nvswitch_bios",
        hw.nvswitch_bios.as_ref(),
        facts
            .iter()
            .map(|f| (f.address.as_str(), f.bios.as_deref())),
    ));
    report.nvswitches = facts;
}

/// Judges the firmware the driver reports for each device (`None`: not seen, judged by
/// the device's own check) against the BOM's `key`.
fn firmware_check<'a>(
    name: &str,
    what: &str,
    key: &str,
    want: Option<&FwVersion>,
    devices: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Check {
    let seen: Vec<(&str, &str)> = devices.filter_map(|(a, v)| Some((a, v?))).collect();
    let Some(want) = want else {
        let mut versions: Vec<&str> = seen.iter().map(|(_, v)| *v).collect();
        versions.sort_unstable();
        versions.dedup();
        return Check::skip(
            name,
            format!(
                "{what} firmware {}; the BOM sets no {key}",
                if versions.is_empty() {
                    "not seen".to_string()
                } else {
                    versions.join(", ")
                }
            ),
        );
    };
    let wrong: Vec<String> = seen
        .iter()
        .filter(|(_, v)| !v.eq_ignore_ascii_case(want.as_str()))
        .map(|(a, v)| format!("{a} runs {v}"))
        .collect();
    if seen.is_empty() {
        Check::skip(name, format!("no {what} seen by the driver to run {want}"))
    } else if wrong.is_empty() {
        Check::pass(name, format!("{} {what}(s) run {want}", seen.len()))
    } else {
        Check::fail(
            name,
            Fault::Hardware,
            format!("not the BOM's {key} {want}: {}", wrong.join(", ")),
        )
    }
}

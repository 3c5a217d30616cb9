//! The fabric manager on the verified root: its dpkg package (`nvidia-fabricmanager-NNN`,
//! or `nvidia-fabricmanager`) must be installed, its binary present, and its version equal
//! to the loaded driver's (and to the BOM's `fabric_manager_version`). On an NVSwitch
//! system a fabric manager that differs from the driver never trains NVLink (NCCL hangs),
//! so every failure here is an image fault.
//!
//! The check runs when the BOM names a fabric manager version or expects NVSwitches.
//! The version is the package's Debian version without epoch and revision
//! (`570.172.08-1` is `570.172.08`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Check, HwRoots, Issue, PreflightReport};
use crate::config::bom::Bom;
use crate::formats::sysfs::{self, DpkgPackage};
use crate::stages::Fault;
use crate::util::fs::{read_text_limited, InputError};

/// Most bytes read from dpkg's status file (a large root has a few MB).
pub const DPKG_STATUS_MAX: u64 = 64 << 20;
/// Where dpkg keeps its status, relative to the root.
pub const DPKG_STATUS: &str = "var/lib/dpkg/status";
/// The fabric manager's binary, relative to the root.
pub const FM_BINARY: &str = "usr/bin/nv-fabricmanager";

/// The fabric manager found on the root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FabricManagerFact {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The package's upstream version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `/usr/bin/nv-fabricmanager` is a regular file.
    pub binary: bool,
}

fn is_fm_package(p: &DpkgPackage) -> bool {
    let n = p.package.as_str();
    n == "nvidia-fabricmanager"
        || n.strip_prefix("nvidia-fabricmanager-")
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|c| c.is_ascii_digit()))
}

/// The installed fabric manager package in a dpkg status file.
pub fn find_package(status: &Path) -> Result<Option<DpkgPackage>, Issue> {
    let text = match read_text_limited(status, DPKG_STATUS_MAX) {
        Ok(t) => t,
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(Issue::from_input(e)),
    };
    let pkgs = sysfs::dpkg_status(&text).map_err(|e| Issue::new(status, e.0))?;
    Ok(pkgs.into_iter().find(|p| is_fm_package(p) && p.installed()))
}

/// Runs the fabric manager check.
pub fn check(roots: &HwRoots, bom: &Bom, report: &mut PreflightReport) {
    let want_fm = bom
        .nvidia
        .as_ref()
        .and_then(|n| n.fabric_manager_version.as_ref());
    let needed = want_fm.is_some() || bom.hardware.nvswitches.is_some_and(|n| n > 0);
    if !needed {
        report.checks.push(Check::skip(
            "fabric-manager",
            "the BOM names no fabric manager and no NVSwitch",
        ));
        return;
    }
    let status = roots.root.join(DPKG_STATUS);
    let binary_path = roots.root.join(FM_BINARY);
    let binary = std::fs::metadata(&binary_path).is_ok_and(|m| m.is_file());
    let pkg = match find_package(&status) {
        Ok(p) => p,
        Err(e) => {
            report
                .checks
                .push(Check::fail("fabric-manager", Fault::Image, e.to_string()));
            return;
        }
    };
    let fact = FabricManagerFact {
        package: pkg.as_ref().map(|p| p.package.clone()),
        version: pkg.as_ref().map(|p| p.upstream_version().to_string()),
        binary,
    };
    let driver = report.driver.as_ref().map(|d| d.version.clone());
    let c = match (&pkg, &fact.version) {
        (Some(p), Some(v)) => {
            let named = format!("{} {} ({})", p.package, p.version, status.display());
            if !binary {
                Check::fail(
                    "fabric-manager",
                    Fault::Image,
                    format!(
                        "{named} is installed but {} is missing",
                        binary_path.display()
                    ),
                )
            } else if let Some(d) = driver.as_ref().filter(|d| *d != v) {
                Check::fail(
                    "fabric-manager",
                    Fault::Image,
                    format!("fabric manager {v} does not match the driver {d}: {named}"),
                )
            } else if let Some(w) = want_fm.filter(|w| w.as_str() != v) {
                Check::fail(
                    "fabric-manager",
                    Fault::Image,
                    format!("fabric manager {v} is not the BOM's {w}: {named}"),
                )
            } else {
                Check::pass(
                    "fabric-manager",
                    match driver {
                        Some(d) => format!("fabric manager {v} matches the driver {d}"),
                        None => format!("fabric manager {v} (no driver loaded to compare)"),
                    },
                )
            }
        }
        _ => Check::fail(
            "fabric-manager",
            Fault::Image,
            format!(
                "no installed nvidia-fabricmanager package in {}{}",
                status.display(),
                if binary {
                    format!(" ({} exists without a package)", binary_path.display())
                } else {
                    format!(" and no {}", binary_path.display())
                }
            ),
        ),
    };
    report.checks.push(c);
    report.fabric_manager = Some(fact);
}

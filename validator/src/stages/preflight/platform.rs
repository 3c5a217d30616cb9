//! Platform facts: the kernel command line a GPU node needs, firmware Secure Boot, the
//! kernel's lockdown mode and its taint.
//!
//! - `cmdline` (image): every `hardware.cmdline` word (`intel_iommu=on`, `iommu=pt`) is a
//!   parameter of `/proc/cmdline`, compared as the kernel splits and names parameters
//!   (`-` and `_` equal in names). The command line is part of the boot entry the image's
//!   slot carries, so falling back fixes it.
//! - `secure-boot` (hardware): the `SecureBoot` EFI variable through efivarfs
//!   (`/sys/firmware/efi/efivars/SecureBoot-8be4df61-...`: four attribute bytes and the
//!   value) against `hardware.secure_boot`. A firmware setting: rolling the image back
//!   cannot change it. Without `/sys/firmware/efi` the node booted without UEFI (Secure
//!   Boot off); with efivarfs listing variables but no `SecureBoot`, the firmware has no
//!   Secure Boot (off); with it but no efivarfs mounted (the start stage mounts it on
//!   every UEFI boot) the state is unknown, which fails a BOM that requires a value.
//! - `lockdown`: the bracketed mode of `/sys/kernel/security/lockdown`, reported.
//! - `taint` (image): `/proc/sys/kernel/tainted` after the drivers loaded; letters that
//!   point at modules (`P`, `F`, `C`, `O`, `E`) and that `policy.taint_allowed` does not
//!   allow fail, as in the modules stage; others are reported.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{read_bytes, read_optional, Check, HwRoots, Issue, PreflightReport};
use crate::config::bom::{Bom, Hardware};
use crate::config::cmdline;
use crate::formats::sysfs;
use crate::runtime::taint;
use crate::stages::Fault;

/// `SecureBoot` in the EFI global variable namespace.
pub use crate::runtime::uefi_keys::SECURE_BOOT_VAR;

/// Whether efivarfs lists at least one variable under `sys_root` (it is mounted).
fn efivars_listed(sys_root: &Path) -> bool {
    std::fs::read_dir(sys_root.join(crate::runtime::uefi_keys::EFIVARS))
        .is_ok_and(|mut d| d.next().is_some())
}

/// Platform facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PlatformFact {
    /// Booted through UEFI (`/sys/firmware/efi` exists).
    pub efi: bool,
    /// Firmware Secure Boot (`None`: unknown, efivarfs not mounted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// The active lockdown mode (`none`, `integrity`, `confidentiality`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lockdown: Option<String>,
    /// Kernel taint letters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<String>,
}

fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// Runs the platform checks.
pub fn check(roots: &HwRoots, bom: &Bom, report: &mut PreflightReport) {
    let hw = &bom.hardware;
    // The command line.
    report.checks.push(cmdline_check(&roots.proc, hw));

    // Secure Boot.
    let efi = roots.sys.join("firmware/efi").is_dir();
    let var = roots.sys.join(SECURE_BOOT_VAR);
    let sb = read_secure_boot(&roots.sys, efi, &var);
    report
        .checks
        .push(secure_boot_check(&sb, hw.secure_boot, efi, &var));

    // Lockdown (reported).
    let lpath = roots.sys.join("kernel/security/lockdown");
    let lockdown = read_lockdown(&lpath);
    report.checks.push(lockdown_check(&lockdown, &lpath));

    // Taint.
    let allowed = bom.policy.taint_allowed.as_str();
    let t = taint::read(&roots.proc, allowed);
    report.checks.push(taint_check(&t, allowed));
    report.platform = PlatformFact {
        efi,
        secure_boot: sb.ok().flatten(),
        lockdown: lockdown.ok().flatten(),
        taint: t.ok().map(|t| t.flags),
    };
}

/// Judges `cmdline`: every `hardware.cmdline` word is a parameter of `<proc>/cmdline`.
fn cmdline_check(proc: &Path, hw: &Hardware) -> Check {
    let path = proc.join("cmdline");
    if hw.cmdline.is_empty() {
        return Check::skip("cmdline", "the BOM requires no command-line words");
    }
    let text = match super::read_value(&path) {
        Err(e) => return Check::fail("cmdline", Fault::Image, e.to_string()),
        Ok(text) => text,
    };
    let line = match sysfs::one_line(&text, "a command line") {
        Err(e) => return Check::fail("cmdline", Fault::Image, format!("{}: {e}", path.display())),
        Ok(line) => line,
    };
    let params = cmdline::split(line).params;
    let missing: Vec<&str> = hw
        .cmdline
        .iter()
        .map(|w| w.as_str())
        .filter(|w| !has_param(&params, w))
        .collect();
    if missing.is_empty() {
        Check::pass(
            "cmdline",
            format!(
                "has {}",
                hw.cmdline
                    .iter()
                    .map(|w| w.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        )
    } else {
        Check::fail(
            "cmdline",
            Fault::Image,
            format!("{} lacks {}", path.display(), missing.join(" ")),
        )
    }
}

/// Whether a command-line word (`name` or `name=value`) is one of `params`, names
/// compared as the kernel compares them.
fn has_param(params: &[cmdline::Param], word: &str) -> bool {
    let (name, value) = match word.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (word, None),
    };
    params
        .iter()
        .any(|p| norm(&p.name) == norm(name) && p.value.as_deref() == value)
}

/// Reads firmware Secure Boot from the `SecureBoot` variable at `var` (`None`: unknown,
/// efivarfs not mounted); off without UEFI (`efi` false) or when efivarfs lists
/// variables but not this one.
fn read_secure_boot(sys: &Path, efi: bool, var: &Path) -> Result<Option<bool>, Issue> {
    if !efi {
        Ok(Some(false))
    } else if var.symlink_metadata().is_ok() {
        read_bytes(var).and_then(|b| {
            sysfs::efi_bool(&b)
                .map(Some)
                .map_err(|e| Issue::new(var, e.to_string()))
        })
    } else if efivars_listed(sys) {
        // efivarfs is there (it lists variables) and the firmware sets no SecureBoot:
        // a firmware without Secure Boot.
        Ok(Some(false))
    } else {
        Ok(None)
    }
}

/// Judges `secure-boot`: what was read (`sb`) against `hardware.secure_boot`.
fn secure_boot_check(
    sb: &Result<Option<bool>, Issue>,
    want: Option<bool>,
    efi: bool,
    var: &Path,
) -> Check {
    let no_var = var.symlink_metadata().is_err();
    match (sb, want) {
        (Err(e), _) => Check::fail("secure-boot", Fault::Hardware, e.to_string()),
        (Ok(v), None) => Check::skip(
            "secure-boot",
            format!("Secure Boot {}", shown_secure_boot(efi, no_var, var, *v)),
        ),
        (Ok(Some(v)), Some(want)) if *v == want => Check::pass(
            "secure-boot",
            format!(
                "Secure Boot {}",
                shown_secure_boot(efi, no_var, var, Some(*v))
            ),
        ),
        (Ok(v), Some(want)) => Check::fail(
            "secure-boot",
            Fault::Hardware,
            format!(
                "Secure Boot {}, the BOM requires it {}",
                shown_secure_boot(efi, no_var, var, *v),
                if want { "on" } else { "off" }
            ),
        ),
    }
}

/// How a Secure Boot state reads in the `secure-boot` detail, with why it is what it is
/// (`no_var`: nothing at the variable's path `var`).
fn shown_secure_boot(efi: bool, no_var: bool, var: &Path, v: Option<bool>) -> String {
    match (efi, v) {
        (false, _) => "off (booted without UEFI)".to_string(),
        (true, Some(true)) => "on".into(),
        (true, Some(false)) if no_var => format!(
            "off (efivarfs has no {}: the firmware has no Secure Boot)",
            var.display()
        ),
        (true, Some(false)) => "off".into(),
        (true, None) => format!(
            "unknown ({} not readable: efivarfs not mounted?)",
            var.display()
        ),
    }
}

/// Reads the active lockdown mode from `lpath` (`None`: securityfs shows no lockdown
/// file); the error is the message of a file that cannot be read or parsed.
fn read_lockdown(lpath: &Path) -> Result<Option<String>, String> {
    match read_optional(lpath) {
        Ok(Some(t)) => sysfs::lockdown(&t)
            .map(Some)
            .map_err(|e| format!("{}: {e}", lpath.display())),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Reports `lockdown`: the mode, a skip without the file at `lpath`, a warning when it
/// cannot be read.
fn lockdown_check(lockdown: &Result<Option<String>, String>, lpath: &Path) -> Check {
    match lockdown {
        Ok(Some(m)) => Check::pass("lockdown", format!("lockdown {m}")),
        Ok(None) => Check::skip(
            "lockdown",
            format!("{} not present (securityfs not mounted?)", lpath.display()),
        ),
        Err(e) => Check::warn("lockdown", e.clone()),
    }
}

/// Judges `taint`: letters that point at modules and that `allowed` (the BOM's
/// `taint_allowed`) does not allow fail; other unexpected letters warn.
fn taint_check(t: &Result<taint::TaintReport, taint::TaintError>, allowed: &str) -> Check {
    match t {
        Err(e) => Check::fail("taint", Fault::Image, e.to_string()),
        Ok(t) => {
            let image: String = t
                .unexpected
                .chars()
                .filter(|c| taint::IMAGE_TAINTS.contains(*c))
                .collect();
            if !image.is_empty() {
                Check::fail(
                    "taint",
                    Fault::Image,
                    format!(
                        "kernel tainted {:?} ({:?} not allowed by the BOM's taint_allowed {allowed:?})",
                        t.flags, image
                    ),
                )
            } else if !t.unexpected.is_empty() {
                Check::warn("taint", format!("kernel tainted {:?}", t.flags))
            } else {
                Check::pass("taint", format!("kernel taint {:?}", t.flags))
            }
        }
    }
}

//! NVMe controllers from `/sys/class/nvme/nvme*`: `state`, `model`, `serial`,
//! `firmware_rev` (space padded by the drive: trimmed), `transport`, `address`, and the
//! namespaces under the controller (`nvme0n1`, or the hidden per-path `nvme1c1n1` of a
//! multipath-capable drive). Controllers are counted, not block devices, so a dual-port
//! drive counts once.
//!
//! `nvme` (hardware): at least `hardware.nvme` controllers are `live`, each with a
//! namespace and (when the BOM lists models) one of `nvme_models`. The driver probes
//! controllers asynchronously after it loads, so while too few are live the caller waits.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{list_dir, parse_value, read_optional, resolve, Check, HwRoots, Issue};
use crate::config::bom::hardware::Hardware;
use crate::formats::sysfs;
use crate::stages::Fault;

/// One NVMe controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NvmeFact {
    /// `nvme0`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `live`, `new`, `resetting`, `connecting`, `deleting`, `dead` ...
    pub state: String,
    pub model: String,
    pub serial: String,
    pub firmware_rev: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    pub namespaces: Vec<String>,
}

/// `nvme<c>n<n>` or `nvme<s>c<c>n<n>`.
fn is_namespace(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("nvme") else {
        return false;
    };
    let digits_then = |s: &str, sep: char| -> Option<usize> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        (end > 0 && s.get(end..)?.starts_with(sep)).then_some(end)
    };
    let Some(a) = digits_then(rest, 'n').or_else(|| digits_then(rest, 'c')) else {
        return false;
    };
    let tail = rest.get(a..).unwrap_or("");
    let tail = match tail.strip_prefix('c') {
        Some(t) => {
            let Some(b) = digits_then(t, 'n') else {
                return false;
            };
            t.get(b..).unwrap_or("")
        }
        None => tail,
    };
    tail.strip_prefix('n')
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
}

fn read_controller(class: &Path, name: &str) -> Result<NvmeFact, Issue> {
    let dir = resolve(&class.join(name))?;
    let text =
        |f: &str, what: &'static str| parse_value(&dir.join(f), move |t| sysfs::padded(t, what));
    let address = match read_optional(&dir.join("address"))? {
        None => None,
        Some(t) => Some(
            sysfs::padded(&t, "an address").map_err(|e| Issue::new(&dir.join("address"), e.0))?,
        ),
    };
    let transport = match read_optional(&dir.join("transport"))? {
        None => None,
        Some(t) => Some(
            sysfs::padded(&t, "a transport")
                .map_err(|e| Issue::new(&dir.join("transport"), e.0))?,
        ),
    };
    Ok(NvmeFact {
        name: name.to_string(),
        state: text("state", "a controller state")?,
        model: text("model", "a model")?,
        serial: text("serial", "a serial number")?,
        firmware_rev: text("firmware_rev", "a firmware revision")?,
        address,
        transport,
        namespaces: list_dir(&dir)?
            .unwrap_or_default()
            .into_iter()
            .filter(|n| is_namespace(n))
            .collect(),
    })
}

/// Reads every controller and judges them: the facts, the `nvme` check, and whether
/// waiting could still change the outcome.
pub fn check(roots: &HwRoots, hw: &Hardware) -> (Vec<NvmeFact>, Check, bool) {
    let class = roots.sys.join("class/nvme");
    let mut ctrls = Vec::new();
    let mut issues = Vec::new();
    match list_dir(&class) {
        Err(e) => issues.push(e.to_string()),
        Ok(names) => {
            for n in names.unwrap_or_default() {
                match read_controller(&class, &n) {
                    Ok(c) => ctrls.push(c),
                    Err(e) => issues.push(e.to_string()),
                }
            }
        }
    }
    let live: Vec<&NvmeFact> = ctrls.iter().filter(|c| c.state == "live").collect();
    let describe = |c: &NvmeFact| format!("{} {:?} {}", c.name, c.model, c.state);
    let listed = ctrls.iter().map(describe).collect::<Vec<_>>().join(", ");
    let wrong_model: Vec<String> = live
        .iter()
        .filter(|c| {
            !hw.nvme_models.is_empty() && !hw.nvme_models.iter().any(|m| m.as_str() == c.model)
        })
        .map(|c| format!("{} is {:?}", c.name, c.model))
        .collect();
    let no_namespace: Vec<&str> = live
        .iter()
        .filter(|c| c.namespaces.is_empty())
        .map(|c| c.name.as_str())
        .collect();
    if !issues.is_empty() {
        return (
            ctrls,
            Check::fail("nvme", Fault::Hardware, issues.join("; ")),
            false,
        );
    }
    let (check, settling) = match hw.nvme {
        None => (
            Check::skip(
                "nvme",
                format!(
                    "{} NVMe controller(s) ({} live); the BOM sets no count",
                    ctrls.len(),
                    live.len()
                ),
            ),
            false,
        ),
        Some(n) if live.len() < n as usize => (
            Check::fail(
                "nvme",
                Fault::Hardware,
                format!(
                    "{} of {n} NVMe controller(s) live{}{listed}",
                    live.len(),
                    if listed.is_empty() { "" } else { ": " }
                ),
            ),
            true,
        ),
        Some(_) if !wrong_model.is_empty() => (
            Check::fail(
                "nvme",
                Fault::Hardware,
                format!("not a model the BOM lists: {}", wrong_model.join(", ")),
            ),
            false,
        ),
        Some(_) if !no_namespace.is_empty() => (
            Check::fail(
                "nvme",
                Fault::Hardware,
                format!(
                    "live controller(s) without a namespace: {}",
                    no_namespace.join(", ")
                ),
            ),
            true,
        ),
        Some(n) => (
            Check::pass(
                "nvme",
                format!("{} NVMe controller(s) live (BOM {n}): {listed}", live.len()),
            ),
            false,
        ),
    };
    (ctrls, check, settling)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A controller the driver found but that never came up (`resetting`, or `dead`
    /// after a failed initialisation) is not counted: the check fails as the hardware's,
    /// names it with its state, and asks the caller to wait (it may still come up).
    #[test]
    fn a_controller_that_is_not_live_is_named_with_its_state() {
        let d = std::env::temp_dir().join(format!("vld-nvme-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (name, state) in [("nvme0", "live"), ("nvme1", "resetting")] {
            let c = d.join("class/nvme").join(name);
            std::fs::create_dir_all(c.join(format!("{name}n1"))).unwrap();
            for (f, v) in [
                ("state", state),
                ("model", "SAMSUNG MZ1L2960HCJR-00A07   "),
                ("serial", "S665NE0R1"),
                ("firmware_rev", "GDC7302Q"),
            ] {
                std::fs::write(c.join(f), format!("{v}\n")).unwrap();
            }
        }
        let roots = HwRoots {
            sys: d.clone(),
            proc: d.join("proc"),
            root: d.join("root"),
        };
        let hw = Hardware {
            nvme: Some(2),
            ..Hardware::default()
        };
        let (facts, check, settling) = super::check(&roots, &hw);
        assert_eq!(facts.len(), 2);
        assert_eq!(check.fault, Some(Fault::Hardware), "{check:?}");
        assert!(
            check.detail.starts_with("1 of 2 NVMe controller(s) live: ")
                && check
                    .detail
                    .contains("nvme1 \"SAMSUNG MZ1L2960HCJR-00A07\" resetting"),
            "{}",
            check.detail
        );
        assert!(settling, "a controller not yet live may still come up");
        std::fs::write(d.join("class/nvme/nvme1/state"), "dead\n").unwrap();
        let (_, check, _) = super::check(&roots, &hw);
        assert!(
            check
                .detail
                .contains("nvme1 \"SAMSUNG MZ1L2960HCJR-00A07\" dead"),
            "{check:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn namespace_names() {
        for ok in ["nvme0n1", "nvme1c1n1", "nvme12n3", "nvme0c12n1"] {
            assert!(is_namespace(ok), "{ok}");
        }
        for no in [
            "nvme0",
            "nvme",
            "nvmen1",
            "nvme0n",
            "nvme0c1",
            "nvme0x1",
            "ng0n1",
            "nvme0n1p1",
        ] {
            assert!(!is_namespace(no), "{no}");
        }
    }
}

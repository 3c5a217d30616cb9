//! PCIe links and AER counters of the functions the preflight cares about (GPUs,
//! NVSwitches, mlx5 NICs, NVMe controllers).
//!
//! A link is read at the device (`current_link_speed` / `current_link_width` and `max_*`)
//! and at its upstream port's `max_*`: the link can train at most to the lesser of the two
//! ends' capabilities, so it is *downtrained* when it runs below that. Speeds are compared
//! as numbers (`32.0 GT/s PCIe` and `32 GT/s` are equal); `Unknown` and width 0 mean the
//! link is down.
//!
//! `gpu-links` / `nic-links` / `frontend-links` / `nvme-links` (hardware): every GPU
//! (compute fabric NIC, front-end NIC, NVMe) link at or above the BOM's `gpu_link_min_*`
//! (`nic_link_min_*`, `frontend_link_min_*`, `nvme_link_min_*`); without a BOM
//! minimum, a downtrained link is a warning. `nvswitch-links` reports downtrained NVSwitch
//! links as warnings. A link below its upstream port's capability but at the device's own
//! is reported in the facts (`below_port`), not judged.
//! `aer` (hardware): non-fatal or fatal AER errors on any of these functions fail;
//! correctable ones are a warning.
//!
//! Inputs: a function shows all four link files or none (conventional PCI); one present
//! (a dangling symlink or a loop counts as present) means each must read, else the role's
//! check fails naming the file. A function of a role the BOM sets a minimum for is always
//! judged: without link files its check fails, without a link (`Unknown`, 255) it is a
//! link that is down. The three AER files likewise: none is a device without AER (not
//! judged), one present means each must read. The upstream port's `max_link_*` is read
//! when either is present. `docs/FAULTS.md` ("Preflight inputs") lists every input.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::pci::{Inventory, PciDevice, Role};
use super::{parse_value, present, read_value, Check, Issue, PreflightReport};
use crate::config::bom::hardware::{Hardware, MinLinkSpeed};
use crate::formats::sysfs::{self, LinkSpeed};
use crate::stages::Fault;

/// One device's link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LinkFact {
    pub address: String,
    pub role: Role,
    /// Negotiated speed (`None`: unknown, link down).
    pub speed: Option<String>,
    pub width: u32,
    pub max_speed: Option<String>,
    pub max_width: u32,
    /// The upstream port and its capability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_max_speed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_max_width: Option<u32>,
    /// Running below what both ends can do.
    pub downtrained: bool,
    /// Running below what the upstream port can do (the device's own capability may be
    /// the limit: a Gen4 drive in a Gen5 slot, or QEMU's emulated endpoints, which all
    /// advertise 2.5 GT/s x1).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub below_port: bool,
}

/// One device's AER counters (totals of error messages).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AerFact {
    pub address: String,
    pub correctable: u64,
    pub nonfatal: u64,
    pub fatal: u64,
    /// The error bits with non-zero counts (`RxErr 37`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

struct Link {
    fact: LinkFact,
    speed: Option<LinkSpeed>,
}

/// The link files of a PCIe function, in the order they are read.
const LINK_FILES: [&str; 4] = [
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
];

fn speeds(dir: &Path) -> Result<(Option<LinkSpeed>, u32, Option<LinkSpeed>, u32), Issue> {
    Ok((
        parse_value(&dir.join("current_link_speed"), sysfs::link_speed)?,
        parse_value(&dir.join("current_link_width"), sysfs::link_width)?,
        parse_value(&dir.join("max_link_speed"), sysfs::link_speed)?,
        parse_value(&dir.join("max_link_width"), sysfs::link_width)?,
    ))
}

/// Reads a device's link. `bounded`: the BOM sets a minimum for this role, so the device
/// must be judged: a function without link files, or without a link, is then no reason to
/// leave it out (it fails, naming the file, or is judged as a link that is down).
fn read_link(d: &PciDevice, role: Role, bounded: bool) -> Result<Option<Link>, Issue> {
    // Conventional PCI functions have no link files; a PCIe function has all four. One
    // present means the kernel shows a link: each must then read (a missing, dangling or
    // looping one is an issue naming it).
    if !LINK_FILES.iter().any(|f| present(&d.dir.join(f))) {
        return if bounded {
            Err(Issue::new(
                &d.dir.join("current_link_speed"),
                "missing (no PCIe link files), and the BOM sets a minimum for this link",
            ))
        } else {
            Ok(None)
        };
    }
    let (speed, width, max_speed, max_width) = speeds(&d.dir)?;
    // No link at all (a root-complex integrated endpoint: `Unknown` and 255): judged as a
    // link that is down when the BOM bounds it.
    if !bounded && max_speed.is_none() && matches!(max_width, 0 | 255) {
        return Ok(None);
    }
    let mut port = None;
    let mut cap_speed = max_speed;
    let mut cap_width = max_width;
    let (mut port_max_speed, mut port_max_width) = (None, None);
    let mut port_max_speed_v = None;
    if let Some((addr, pdir)) = d.upstream() {
        // The port's capability refines "downtrained"; read when the port shows it.
        if present(&pdir.join("max_link_speed")) || present(&pdir.join("max_link_width")) {
            let ps = parse_value(&pdir.join("max_link_speed"), sysfs::link_speed)?;
            let pw = parse_value(&pdir.join("max_link_width"), sysfs::link_width)?;
            cap_speed = match (cap_speed, ps) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if pw > 0 && pw < 255 {
                cap_width = cap_width.min(pw);
            }
            port_max_speed_v = ps;
            port_max_speed = ps.map(|s| s.to_string());
            port_max_width = Some(pw);
            port = Some(addr);
        }
    }
    let below_port = match (speed, port_max_speed_v, port_max_width) {
        (Some(s), Some(ps), _) if s < ps => true,
        (_, _, Some(pw)) if pw > 0 && pw < 255 && width < pw => true,
        _ => false,
    };
    let down = speed.is_none() || width == 0;
    let slow = matches!((speed, cap_speed), (Some(s), Some(c)) if s < c);
    let narrow = max_width != 255 && width < cap_width;
    Ok(Some(Link {
        fact: LinkFact {
            address: d.address.clone(),
            role,
            speed: speed.map(|s| s.to_string()),
            width,
            max_speed: max_speed.map(|s| s.to_string()),
            max_width,
            port,
            port_max_speed,
            port_max_width,
            downtrained: down || slow || narrow,
            below_port,
        },
        speed,
    }))
}

fn describe(l: &LinkFact) -> String {
    format!(
        "{} at {} x{} (device max {} x{}{})",
        l.address,
        l.speed.as_deref().unwrap_or("unknown speed"),
        l.width,
        l.max_speed.as_deref().unwrap_or("unknown"),
        l.max_width,
        match (&l.port, &l.port_max_speed, l.port_max_width) {
            (Some(p), s, Some(w)) =>
                format!(", port {p} max {} x{w}", s.as_deref().unwrap_or("unknown")),
            _ => String::new(),
        }
    )
}

fn judge(
    name: &str,
    what: &str,
    links: &[&Link],
    min_speed: Option<MinLinkSpeed>,
    min_width: Option<u32>,
) -> Check {
    if links.is_empty() {
        return Check::skip(name, format!("no {what} link"));
    }
    let has_min = min_speed.is_some() || min_width.is_some();
    let below: Vec<String> = links
        .iter()
        .filter(|l| {
            let slow = min_speed.is_some_and(|m| l.speed.is_none_or(|s| s < m.0));
            let narrow = min_width.is_some_and(|m| l.fact.width < m);
            slow || narrow
        })
        .map(|l| describe(&l.fact))
        .collect();
    let downtrained: Vec<String> = links
        .iter()
        .filter(|l| l.fact.downtrained)
        .map(|l| describe(&l.fact))
        .collect();
    let want = format!(
        "{}{}",
        min_speed
            .map(|m| format!(" >= {}", m.0))
            .unwrap_or_default(),
        min_width.map(|w| format!(" x{w}")).unwrap_or_default()
    );
    if !below.is_empty() {
        Check::fail(
            name,
            Fault::Hardware,
            format!("{what} link(s) below the BOM's{want}: {}", below.join("; ")),
        )
    } else if !downtrained.is_empty() {
        Check::warn(
            name,
            format!(
                "{what} link(s) below their capability: {}",
                downtrained.join("; ")
            ),
        )
    } else if has_min {
        Check::pass(name, format!("{} {what} link(s){want}", links.len()))
    } else {
        Check::pass(
            name,
            format!("{} {what} link(s) at their capability", links.len()),
        )
    }
}

fn read_aer(d: &PciDevice) -> Result<Option<AerFact>, Issue> {
    let mut fact = AerFact {
        address: d.address.clone(),
        correctable: 0,
        nonfatal: 0,
        fatal: 0,
        errors: Vec::new(),
    };
    let files = [
        ("aer_dev_correctable", 0),
        ("aer_dev_nonfatal", 1),
        ("aer_dev_fatal", 2),
    ];
    // The kernel shows the three together (when the device has AER); one present means
    // each must read.
    if !files.iter().any(|(f, _)| present(&d.dir.join(f))) {
        return Ok(None);
    }
    for (file, slot) in files {
        let path = d.dir.join(file);
        let text = read_value(&path)?;
        let c = sysfs::aer_counters(&text).map_err(|e| Issue::new(&path, e.0))?;
        match slot {
            0 => fact.correctable = c.total,
            1 => fact.nonfatal = c.total,
            _ => fact.fatal = c.total,
        }
        fact.errors.extend(c.nonzero());
    }
    Ok(Some(fact))
}

/// The link checks, in report order: the check's name, the role whose links it judges
/// and how that role is named in its detail.
const LINK_CHECKS: [(&str, Role, &str); 5] = [
    ("gpu-links", Role::Gpu, "GPU"),
    ("nic-links", Role::Nic, "NIC"),
    ("frontend-links", Role::FrontendNic, "front-end NIC"),
    ("nvme-links", Role::Nvme, "NVMe"),
    ("nvswitch-links", Role::NvSwitch, "NVSwitch"),
];

/// The BOM's minimum link speed and width for a role's links (none for NVSwitches,
/// whose downtrained links are only warnings, and for other functions).
fn link_min(hw: &Hardware, role: Role) -> (Option<MinLinkSpeed>, Option<u32>) {
    match role {
        Role::Gpu => (hw.gpu_link_min_speed, hw.gpu_link_min_width),
        Role::Nic => (hw.nic_link_min_speed, hw.nic_link_min_width),
        Role::FrontendNic => (hw.frontend_link_min_speed, hw.frontend_link_min_width),
        Role::Nvme => (hw.nvme_link_min_speed, hw.nvme_link_min_width),
        Role::NvSwitch | Role::Other => (None, None),
    }
}

/// What was read of the functions the preflight cares about: their links and AER
/// counters, and the issues that kept some from reading (link issues with their role).
struct Readings {
    links: Vec<Link>,
    link_issues: Vec<(Role, String)>,
    aer: Vec<AerFact>,
    aer_issues: Vec<String>,
}

/// Reads the link and the AER counters of every function whose role is not `Other`.
fn read_devices(hw: &Hardware, inv: &Inventory) -> Readings {
    let mut r = Readings {
        links: Vec::new(),
        link_issues: Vec::new(),
        aer: Vec::new(),
        aer_issues: Vec::new(),
    };
    for (d, role) in &inv.devices {
        if *role == Role::Other {
            continue;
        }
        let (min_speed, min_width) = link_min(hw, *role);
        let bounded = min_speed.is_some() || min_width.is_some();
        match read_link(d, *role, bounded) {
            Ok(Some(l)) => r.links.push(l),
            Ok(None) => {}
            Err(e) => r.link_issues.push((*role, e.to_string())),
        }
        match read_aer(d) {
            Ok(Some(a)) => r.aer.push(a),
            Ok(None) => {}
            Err(e) => r.aer_issues.push(e.to_string()),
        }
    }
    r
}

/// Judges one role's links (the check `name`, the role named `what`): a link file that
/// could not be read fails it, otherwise [`judge`] against the minimum given.
fn links_check(
    name: &str,
    role: Role,
    what: &str,
    min_speed: Option<MinLinkSpeed>,
    min_width: Option<u32>,
    r: &Readings,
) -> Check {
    let issues: Vec<&str> = r
        .link_issues
        .iter()
        .filter(|(ir, _)| *ir == role)
        .map(|(_, i)| i.as_str())
        .collect();
    if !issues.is_empty() {
        return Check::fail(name, Fault::Hardware, issues.join("; "));
    }
    let ls: Vec<&Link> = r.links.iter().filter(|l| l.fact.role == role).collect();
    judge(name, what, &ls, min_speed, min_width)
}

/// Judges `aer`: a counter file that could not be read or any non-fatal or fatal error
/// fails it, correctable errors warn.
fn aer_check(aer: &[AerFact], aer_issues: &[String]) -> Check {
    let fatal: Vec<String> = aer
        .iter()
        .filter(|a| a.fatal > 0 || a.nonfatal > 0)
        .map(|a| {
            format!(
                "{}: {} fatal, {} non-fatal, {} correctable ({})",
                a.address,
                a.fatal,
                a.nonfatal,
                a.correctable,
                a.errors.join(", ")
            )
        })
        .collect();
    let corr: Vec<String> = aer
        .iter()
        .filter(|a| a.correctable > 0)
        .map(|a| {
            format!(
                "{}: {} correctable ({})",
                a.address,
                a.correctable,
                a.errors.join(", ")
            )
        })
        .collect();
    if !aer_issues.is_empty() {
        Check::fail("aer", Fault::Hardware, aer_issues.join("; "))
    } else if !fatal.is_empty() {
        Check::fail(
            "aer",
            Fault::Hardware,
            format!("uncorrectable PCIe errors: {}", fatal.join("; ")),
        )
    } else if !corr.is_empty() {
        Check::warn(
            "aer",
            format!("correctable PCIe errors: {}", corr.join("; ")),
        )
    } else if aer.is_empty() {
        Check::skip("aer", "no AER counters (AER not enabled or not supported)")
    } else {
        Check::pass("aer", format!("no errors on {} device(s)", aer.len()))
    }
}

/// Reads and judges links and AER counters. A file that cannot be read fails the check
/// of its device's role (links) or `aer`.
pub fn check(hw: &Hardware, inv: &Inventory, report: &mut PreflightReport) {
    let r = read_devices(hw, inv);
    for (name, role, what) in LINK_CHECKS {
        let (min_speed, min_width) = link_min(hw, role);
        report
            .checks
            .push(links_check(name, role, what, min_speed, min_width, &r));
    }
    report.checks.push(aer_check(&r.aer, &r.aer_issues));
    report.links = r.links.into_iter().map(|l| l.fact).collect();
    report.aer = r.aer;
}

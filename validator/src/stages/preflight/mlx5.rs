//! mlx5 (ConnectX) ports from `/sys/class/infiniband/mlx5_*`: each port's `state`,
//! `phys_state`, `rate` and `link_layer`, the device's `fw_ver`, and the netdev behind the
//! port (found through the PCI function's `net/` directory, or `gid_attrs/ndevs/0` for
//! RoCE; never by name, since the initramfs has no udev) with its `operstate`.
//!
//! Only the compute fabric is judged (the functions the BOM's `mlx5_pci_ids` /
//! `mlx5_pci_addresses` select, every one when neither is set); a front-end device's
//! ports are reported with `frontend` set, never counted, and its firmware is not held
//! to `mlx5_fw_version`.
//!
//! `mlx5-ports` (hardware): at least `hardware.mlx5_ports` ports of the BOM's link layer
//! must be in the BOM's state (`ACTIVE`) and physical state (`LinkUp`) at the BOM's
//! minimum rate. While they are not, the caller waits (the ports train and the subnet
//! manager sweeps after the driver loads); a failure at the deadline is marked transient
//! when every missing port is trained (`LinkUp`) but still `INIT` or `ARMED` (waiting for
//! the subnet manager). A RoCE port mirrors its netdev: one whose netdev is
//! administratively down (reading `carrier` fails, or it is absent) has not been brought
//! up and is reported, not counted as down hardware.
//!
//! `mlx5-firmware` (hardware): every compute fabric mlx5 device's `fw_ver` equals
//! `mlx5_fw_version`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::pci::{Inventory, Role};
use super::{list_dir, parse_value, read_optional, resolve, Check, HwRoots, Issue};
use crate::config::bom::hardware::{Hardware, LinkLayer};
use crate::formats::sysfs;
use crate::stages::Fault;
use crate::util::fs::{read_text_limited, InputError};

/// One port of an mlx5 device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PortFact {
    /// `mlx5_0`.
    pub device: String,
    pub port: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    pub link_layer: String,
    /// `4: ACTIVE`.
    pub state: String,
    /// `5: LinkUp`.
    pub phys_state: String,
    /// `400 Gb/sec (4X NDR)`.
    pub rate: String,
    pub fw_ver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operstate: Option<String>,
    /// The netdev is administratively up (its `carrier` can be read).
    pub admin_up: bool,
    /// On a front-end device (the BOM's `mlx5_pci_*` keys leave it out): reported only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub frontend: bool,
    /// Counted as up against the BOM.
    pub up: bool,
}

struct Port {
    fact: PortFact,
    state: sysfs::IbEnum,
    phys: sysfs::IbEnum,
    rate: sysfs::IbRate,
}

fn netdev_of(pci_dir: &Path, port_dir: &Path, roce: bool) -> Result<Option<String>, Issue> {
    if roce {
        if let Some(t) = read_optional(&port_dir.join("gid_attrs/ndevs/0"))? {
            let name = sysfs::padded(&t, "a netdev name")
                .map_err(|e| Issue::new(&port_dir.join("gid_attrs/ndevs/0"), e.0))?;
            return Ok(Some(name));
        }
    }
    Ok(list_dir(&pci_dir.join("net"))?.and_then(|n| n.into_iter().next()))
}

/// Whether a netdev is administratively up: its `carrier` reads (`0` or `1`); the read
/// fails with `EINVAL` while the interface is down, and a fixture leaves the file out (a
/// dangling symlink there is an issue, not "down").
fn carrier(path: &Path) -> Result<bool, Issue> {
    match read_text_limited(path, super::VALUE_MAX) {
        Ok(t) => match t.as_str() {
            "0\n" | "1\n" => Ok(true),
            _ => Err(Issue::new(
                path,
                format!("{t:?} is not a carrier state (0 or 1)"),
            )),
        },
        Err(InputError::Io { source, .. })
            if (source.kind() == std::io::ErrorKind::NotFound && !super::present(path))
                || source.raw_os_error() == Some(nix::libc::EINVAL) =>
        {
            Ok(false)
        }
        Err(e) => Err(Issue::from_input(e)),
    }
}

fn read_device(sys: &Path, name: &str, hw: &Hardware, inv: &Inventory) -> Result<Vec<Port>, Issue> {
    let dir = resolve(&sys.join("class/infiniband").join(name))?;
    let pci_dir = dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Issue::new(&dir, "not under a PCI function"))?;
    let pci = pci_dir
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| sysfs::is_pci_address(n))
        .map(str::to_string);
    // The inventory's role where PCI lists the function; the BOM's selection otherwise.
    let frontend = match pci.as_deref().and_then(|a| inv.role_of(a)) {
        Some(role) => role != Role::Nic,
        None => !hw.is_fabric_nic(pci.as_deref(), None),
    };
    let fw_ver = parse_value(&dir.join("fw_ver"), |t| {
        sysfs::padded(t, "a firmware version")
    })?;
    let ports_dir = dir.join("ports");
    let mut out = Vec::new();
    for p in list_dir(&ports_dir)?.unwrap_or_default() {
        let pdir = ports_dir.join(&p);
        let port: u32 = p
            .parse()
            .map_err(|_| Issue::new(&pdir, "port directory name is not a number"))?;
        let state = parse_value(&pdir.join("state"), sysfs::ib_enum)?;
        let phys = parse_value(&pdir.join("phys_state"), sysfs::ib_enum)?;
        let rate = parse_value(&pdir.join("rate"), sysfs::ib_rate)?;
        let link_layer = parse_value(&pdir.join("link_layer"), |t| {
            let v = sysfs::padded(t, "a link layer")?;
            match v.as_str() {
                "InfiniBand" | "Ethernet" => Ok(v),
                _ => Err(sysfs::ValueError(format!(
                    "{v:?} is not a link layer (InfiniBand, Ethernet)"
                ))),
            }
        })?;
        let roce = link_layer == "Ethernet";
        let netdev = netdev_of(pci_dir, &pdir, roce)?;
        let (operstate, admin_up) = match &netdev {
            None => (None, false),
            Some(n) => {
                let ndir = pci_dir.join("net").join(n);
                let op = parse_value(&ndir.join("operstate"), |t| {
                    sysfs::padded(t, "an operstate")
                })?;
                (Some(op), carrier(&ndir.join("carrier"))?)
            }
        };
        let counted = !frontend && link_layer == hw.mlx5_link_layer().as_str();
        let rate_ok = hw
            .mlx5_min_rate
            .as_ref()
            .is_none_or(|m| rate.tenth_gbps >= m.0.tenth_gbps);
        let up = counted
            && state.name == hw.mlx5_state()
            && phys.name == hw.mlx5_phys_state()
            && rate_ok;
        out.push(Port {
            fact: PortFact {
                device: name.to_string(),
                port,
                pci: pci.clone(),
                link_layer,
                state: state.to_string(),
                phys_state: phys.to_string(),
                rate: rate.to_string(),
                fw_ver: fw_ver.clone(),
                netdev,
                operstate,
                admin_up,
                frontend,
                up,
            },
            state,
            phys,
            rate,
        });
    }
    Ok(out)
}

/// Reads every mlx5 port and judges them: the facts, the `mlx5-ports` and
/// `mlx5-firmware` checks, and whether waiting could still change the outcome.
pub fn check(roots: &HwRoots, hw: &Hardware, inv: &Inventory) -> (Vec<PortFact>, Vec<Check>, bool) {
    let (ports, issues) = read_ports(&roots.sys, hw, inv);
    let (ports_check, settling) = judge_ports(hw, &ports, &issues);
    let fw_check = judge_firmware(hw, &ports, &issues);
    (
        ports.into_iter().map(|p| p.fact).collect(),
        vec![ports_check, fw_check],
        settling,
    )
}

/// Reads the ports of every `mlx5_*` device under `<sys>/class/infiniband`, with the
/// issues of the devices (or the directory) that cannot be read.
fn read_ports(sys: &Path, hw: &Hardware, inv: &Inventory) -> (Vec<Port>, Vec<String>) {
    let mut ports = Vec::new();
    let mut issues = Vec::new();
    match list_dir(&sys.join("class/infiniband")) {
        Err(e) => issues.push(e.to_string()),
        Ok(names) => {
            for n in names
                .unwrap_or_default()
                .iter()
                .filter(|n| n.starts_with("mlx5_"))
            {
                match read_device(sys, n, hw, inv) {
                    Ok(p) => ports.extend(p),
                    Err(e) => issues.push(e.to_string()),
                }
            }
        }
    }
    (ports, issues)
}

/// A port as `mlx5-ports` names it: device, port, state, physical state and rate.
fn describe_port(p: &Port) -> String {
    format!(
        "{} port {}: {} / {} / {}",
        p.fact.device, p.fact.port, p.state, p.phys, p.rate
    )
}

/// What the BOM wants of a port, as `mlx5-ports` words it: state, physical state and
/// the minimum rate if it sets one.
fn wanted_port(hw: &Hardware) -> String {
    format!(
        "{} / {}{}",
        hw.mlx5_state(),
        hw.mlx5_phys_state(),
        hw.mlx5_min_rate
            .as_ref()
            .map(|m| format!(" at >= {} Gb/sec", m.0.gbps()))
            .unwrap_or_default()
    )
}

/// Judges `mlx5-ports`: enough compute fabric ports of the BOM's link layer up (a RoCE
/// port whose netdev nobody brought up is not judged). The flag is whether waiting
/// could still change the outcome (too few ports up, no issue).
fn judge_ports(hw: &Hardware, ports: &[Port], issues: &[String]) -> (Check, bool) {
    let layer = hw.mlx5_link_layer();
    let judged: Vec<&Port> = ports
        .iter()
        .filter(|p| !p.fact.frontend && p.fact.link_layer == layer.as_str())
        // A RoCE port mirrors its netdev; down because nobody brought it up is no finding.
        .filter(|p| layer != LinkLayer::Ethernet || p.fact.admin_up)
        .collect();
    let up = judged.iter().filter(|p| p.fact.up).count();
    let want = wanted_port(hw);
    if !issues.is_empty() {
        return (
            Check::fail("mlx5-ports", Fault::Hardware, issues.join("; ")),
            false,
        );
    }
    match hw.mlx5_ports {
        None => (
            Check::skip(
                "mlx5-ports",
                format!(
                    "{} mlx5 port(s), {up} {} port(s) {want}; the BOM sets no count",
                    ports.len(),
                    layer.as_str()
                ),
            ),
            false,
        ),
        Some(n) if up >= n as usize => (
            Check::pass(
                "mlx5-ports",
                format!("{up} {} port(s) {want} (BOM {n})", layer.as_str()),
            ),
            false,
        ),
        Some(n) => (too_few_ports(n, up, &judged, layer, &want), true),
    }
}

/// Fails `mlx5-ports` with `up` of the `n` ports the BOM wants (`want`) up, naming the
/// judged ports that are not; transient when each of those is trained (`LinkUp`) and
/// waits for the subnet manager (`INIT` or `ARMED`).
fn too_few_ports(n: u32, up: usize, judged: &[&Port], layer: LinkLayer, want: &str) -> Check {
    let not_up: Vec<&&Port> = judged.iter().filter(|p| !p.fact.up).collect();
    let mut c = Check::fail(
        "mlx5-ports",
        Fault::Hardware,
        format!(
            "{up} of {n} {} port(s) {want}{}{}",
            layer.as_str(),
            if not_up.is_empty() { "" } else { "; not up: " },
            not_up
                .iter()
                .map(|p| describe_port(p))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    c.transient = !not_up.is_empty()
        && not_up
            .iter()
            .all(|p| p.phys.name == "LinkUp" && matches!(p.state.name.as_str(), "INIT" | "ARMED"));
    c
}

/// Judges `mlx5-firmware`: every compute fabric device runs the BOM's
/// `mlx5_fw_version`.
fn judge_firmware(hw: &Hardware, ports: &[Port], issues: &[String]) -> Check {
    let Some(want) = &hw.mlx5_fw_version else {
        return Check::skip("mlx5-firmware", "the BOM names no mlx5 firmware");
    };
    let mut devs: Vec<(&str, &str)> = ports
        .iter()
        .filter(|p| !p.fact.frontend)
        .map(|p| (p.fact.device.as_str(), p.fact.fw_ver.as_str()))
        .collect();
    devs.dedup();
    let wrong: Vec<String> = devs
        .iter()
        .filter(|(_, v)| *v != want.as_str())
        .map(|(d, v)| format!("{d} runs {v}"))
        .collect();
    if !issues.is_empty() {
        Check::fail("mlx5-firmware", Fault::Hardware, issues.join("; "))
    } else if devs.is_empty() {
        Check::fail(
            "mlx5-firmware",
            Fault::Hardware,
            format!("no mlx5 device to run firmware {want}"),
        )
    } else if wrong.is_empty() {
        Check::pass(
            "mlx5-firmware",
            format!("{} device(s) run {want}", devs.len()),
        )
    } else {
        Check::fail(
            "mlx5-firmware",
            Fault::Hardware,
            format!("not the BOM's firmware {want}: {}", wrong.join(", ")),
        )
    }
}

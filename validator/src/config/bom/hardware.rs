//! The BOM's `[hardware]` table: what the preflight holds the node to (GPUs and their PCI
//! ids, NVSwitches, mlx5 ports, NVMe controllers, PCIe links, how long links may take to
//! train, the kernel command line a GPU node needs, Secure Boot).
//!
//! Contract: every key is optional; an absent key is not checked (the preflight reports
//! the fact anyway). Values are parsed with the same parsers the preflight uses on sysfs
//! (`formats::sysfs`), so a BOM's `"32.0 GT/s"` and a kernel's `32 GT/s` mean the same
//! speed. Bad values are refused by [`validate`] with the BOM's line.
//!
//! The mlx5 functions are split in two by `mlx5_pci_ids` / `mlx5_pci_addresses`: the
//! compute fabric (the functions both select; every mlx5 function when neither is set),
//! held to the `mlx5_*` and `nic_link_*` keys, and the front end (every other mlx5
//! function: a BlueField-3 or ConnectX-6 Dx on the node's own network), held only to
//! `frontend_link_*` and AER, its ports and firmware reported.
//!
//! Current limits: one GPU model family per BOM (any of `gpu_pci_ids`), one mlx5 link
//! layer judged per BOM (`mlx5_link_layer`); ports of the other layer are reported only.
//! One firmware version each for GPUs, NVSwitches and the compute fabric's mlx5 devices;
//! the front end's firmware and the BMC's are not judged (the BMC is not visible from the
//! node's kernel).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::checked::checked_string;
use crate::formats::sysfs::{self, LinkSpeed};

/// A PCI `vendor:device` pair, written `"10de:2335"` (hex, either case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciId {
    pub vendor: u16,
    pub device: u16,
}

impl PciId {
    /// Parses `"10de:2335"`.
    pub fn parse(s: &str) -> Option<PciId> {
        let (v, d) = s.split_once(':')?;
        let hex4 = |x: &str| {
            (x.len() == 4 && x.bytes().all(|c| c.is_ascii_hexdigit()))
                .then(|| u16::from_str_radix(x, 16).ok())
                .flatten()
        };
        Some(PciId {
            vendor: hex4(v)?,
            device: hex4(d)?,
        })
    }
}

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:04x}", self.vendor, self.device)
    }
}

impl Serialize for PciId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for PciId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PciId::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid PCI id {s:?} (vendor:device, four hex digits each, e.g. \"10de:2335\")"
            ))
        })
    }
}

/// A minimum PCIe link speed, written as sysfs spells it (`"32.0 GT/s"`, `"32 GT/s"`,
/// `"16.0 GT/s PCIe"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MinLinkSpeed(pub LinkSpeed);

impl Serialize for MinLinkSpeed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.gts())
    }
}

impl<'de> Deserialize<'de> for MinLinkSpeed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match sysfs::link_speed(&s) {
            Ok(Some(v)) => Ok(MinLinkSpeed(v)),
            _ => Err(serde::de::Error::custom(format!(
                "invalid PCIe link speed {s:?} (e.g. \"32.0 GT/s\" or \"8 GT/s\")"
            ))),
        }
    }
}

/// A minimum InfiniBand port rate, written as the port's `rate` file (`"400 Gb/sec (4X
/// NDR)"`) or just `"400 Gb/sec"`; compared by Gb/s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinIbRate(pub sysfs::IbRate);

impl Serialize for MinIbRate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.lanes == 0 {
            s.serialize_str(&format!("{} Gb/sec", self.0.gbps()))
        } else {
            s.serialize_str(&self.0.to_string())
        }
    }
}

impl<'de> Deserialize<'de> for MinIbRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        sysfs::ib_rate(&s).map(MinIbRate).map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid InfiniBand rate {s:?} (e.g. \"400 Gb/sec\" or \"400 Gb/sec (4X NDR)\")"
            ))
        })
    }
}

/// A port's `link_layer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum LinkLayer {
    #[default]
    InfiniBand,
    Ethernet,
}

impl LinkLayer {
    /// As sysfs writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        }
    }
}

checked_string!(
    /// An InfiniBand port state or physical state name as sysfs writes it after the number
    /// (`ACTIVE`, `LinkUp`).
    PortStateName,
    "port state name (letters and digits, e.g. \"ACTIVE\" or \"LinkUp\")",
    |s| !s.is_empty() && s.len() <= 32 && s.bytes().all(|c| c.is_ascii_alphanumeric())
);
checked_string!(
    /// One word the kernel command line must contain (`intel_iommu=on`, `iommu=pt`).
    CmdlineWord,
    "command-line word (printable, no spaces or quotes)",
    |s| !s.is_empty()
        && s.len() <= 256
        && s.bytes().all(|c| c.is_ascii_graphic() && c != b'"')
);
checked_string!(
    /// An NVMe model string as the drive reports it (padding removed).
    NvmeModel,
    "NVMe model (1-40 printable characters)",
    |s| !s.is_empty()
        && s.len() <= 40
        && s.trim() == s
        && s.bytes().all(|c| c.is_ascii_graphic() || c == b' ')
);
checked_string!(
    /// A PCI function's address as sysfs names it (`0000:1b:00.0`, lower-case hex).
    PciAddress,
    "PCI address (dddd:bb:dd.f, lower-case hex, e.g. \"0000:18:00.0\")",
    |s| sysfs::is_pci_address(s)
);
checked_string!(
    /// A firmware version (`28.42.1000`).
    FwVersion,
    "firmware version (letters, digits and .-_ only)",
    |s| !s.is_empty()
        && s.len() <= 64
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || b".-_".contains(&c))
);

/// Default deadline for links to train and controllers to come up, in seconds.
pub const DEFAULT_LINK_WAIT_S: u32 = 60;
/// The longest deadline a BOM may ask for.
pub const LINK_WAIT_S_MAX: u32 = 1800;

/// The hardware the image expects on the node (`[hardware]`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// NVIDIA GPUs (class 0x0300xx/0x0302xx) on PCI, and behind the driver.
    pub gpus: Option<u32>,
    /// Every GPU must be one of these (`"10de:2335"`); empty: any NVIDIA GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_pci_ids: Vec<PciId>,
    /// The video BIOS every GPU must run (`Video BIOS` in the driver's procfs entry, e.g.
    /// `96.00.a5.00.01`; compared without regard to case, as `nvidia-smi` prints it in
    /// upper case).
    pub gpu_vbios: Option<FwVersion>,
    /// Least negotiated PCIe speed of every GPU link.
    pub gpu_link_min_speed: Option<MinLinkSpeed>,
    /// Least negotiated PCIe width of every GPU link.
    pub gpu_link_min_width: Option<u32>,
    /// NVSwitches on PCI (class 0x0680xx, or bridges with one of `nvswitch_pci_ids`), and
    /// behind `nvidia-nvswitch`.
    pub nvswitches: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvswitch_pci_ids: Vec<PciId>,
    /// The BIOS every NVSwitch must run (`BIOS Version` in `nvidia-nvswitch`'s procfs
    /// entry; compared without regard to case).
    pub nvswitch_bios: Option<FwVersion>,
    /// NVMe controllers in state `live`.
    pub nvme: Option<u32>,
    /// Every live controller's model must be one of these; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvme_models: Vec<NvmeModel>,
    /// The compute fabric's mlx5 functions by model (`"15b3:1021"`, ConnectX-7); empty:
    /// every model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mlx5_pci_ids: Vec<PciId>,
    /// The compute fabric's mlx5 functions by PCI address; empty: every address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mlx5_pci_addresses: Vec<PciAddress>,
    /// mlx5 ports of `mlx5_link_layer` on the compute fabric that must be up.
    pub mlx5_ports: Option<u32>,
    /// The link layer of the ports counted (default `InfiniBand`).
    pub mlx5_link_layer: Option<LinkLayer>,
    /// Port state each counted port must reach (default `ACTIVE`).
    pub mlx5_state: Option<PortStateName>,
    /// Physical state each counted port must reach (default `LinkUp`).
    pub mlx5_phys_state: Option<PortStateName>,
    /// Least rate of each counted port.
    pub mlx5_min_rate: Option<MinIbRate>,
    /// The firmware every compute fabric mlx5 device must run (`fw_ver`).
    pub mlx5_fw_version: Option<FwVersion>,
    /// Least negotiated PCIe speed / width of every compute fabric mlx5 function.
    pub nic_link_min_speed: Option<MinLinkSpeed>,
    pub nic_link_min_width: Option<u32>,
    /// Least negotiated PCIe speed / width of every front-end mlx5 function (one the
    /// `mlx5_pci_*` keys leave out).
    pub frontend_link_min_speed: Option<MinLinkSpeed>,
    pub frontend_link_min_width: Option<u32>,
    /// Least negotiated PCIe speed / width of every NVMe controller.
    pub nvme_link_min_speed: Option<MinLinkSpeed>,
    pub nvme_link_min_width: Option<u32>,
    /// How long the preflight waits for ports to become active and NVMe controllers to
    /// come up, in seconds (default 60).
    pub link_wait_s: Option<u32>,
    /// Words the kernel command line must contain on this image (`intel_iommu=on`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cmdline: Vec<CmdlineWord>,
    /// `true`: firmware Secure Boot must be on; `false`: must be off; absent: reported.
    pub secure_boot: Option<bool>,
}

impl Hardware {
    /// The deadline for links and controllers.
    pub fn link_wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(u64::from(self.link_wait_s.unwrap_or(DEFAULT_LINK_WAIT_S)))
    }

    /// The port state counted ports must reach.
    pub fn mlx5_state(&self) -> &str {
        self.mlx5_state.as_ref().map_or("ACTIVE", |s| s.as_str())
    }

    /// The physical state counted ports must reach.
    pub fn mlx5_phys_state(&self) -> &str {
        self.mlx5_phys_state
            .as_ref()
            .map_or("LinkUp", |s| s.as_str())
    }

    /// The link layer of the counted ports.
    pub fn mlx5_link_layer(&self) -> LinkLayer {
        self.mlx5_link_layer.unwrap_or_default()
    }

    /// Whether the mlx5 function at `address` with `id` is on the compute fabric (both
    /// `mlx5_pci_*` keys select it; every function when neither is set); `None`: one
    /// whose id or address is not known, on the fabric only when nothing selects.
    pub fn is_fabric_nic(&self, address: Option<&str>, id: Option<PciId>) -> bool {
        let by_id =
            self.mlx5_pci_ids.is_empty() || id.is_some_and(|i| self.mlx5_pci_ids.contains(&i));
        let by_address = self.mlx5_pci_addresses.is_empty()
            || address.is_some_and(|a| self.mlx5_pci_addresses.iter().any(|x| x.as_str() == a));
        by_id && by_address
    }
}

/// A `[hardware]` value out of range: the key and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub key: &'static str,
    pub message: String,
}

/// Checks what serde cannot: widths are PCIe widths, the deadline is bounded, ids are not
/// repeated.
pub fn validate(h: &Hardware) -> Result<(), Invalid> {
    for (key, w) in [
        ("gpu_link_min_width", h.gpu_link_min_width),
        ("nic_link_min_width", h.nic_link_min_width),
        ("frontend_link_min_width", h.frontend_link_min_width),
        ("nvme_link_min_width", h.nvme_link_min_width),
    ] {
        if let Some(w) = w {
            if !matches!(w, 1 | 2 | 4 | 8 | 12 | 16 | 32) {
                return Err(Invalid {
                    key,
                    message: format!(
                        "hardware.{key} {w} is not a PCIe link width (1, 2, 4, 8, 12, 16, 32)"
                    ),
                });
            }
        }
    }
    if let Some(s) = h.link_wait_s {
        if s > LINK_WAIT_S_MAX {
            return Err(Invalid {
                key: "link_wait_s",
                message: format!("hardware.link_wait_s {s} is above {LINK_WAIT_S_MAX}"),
            });
        }
    }
    for (key, ids) in [
        ("gpu_pci_ids", &h.gpu_pci_ids),
        ("nvswitch_pci_ids", &h.nvswitch_pci_ids),
        ("mlx5_pci_ids", &h.mlx5_pci_ids),
    ] {
        let mut seen = std::collections::BTreeSet::new();
        for id in ids {
            if !seen.insert(id) {
                return Err(Invalid {
                    key,
                    message: format!("hardware.{key} lists {id} twice"),
                });
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for a in &h.mlx5_pci_addresses {
        if !seen.insert(a.as_str()) {
            return Err(Invalid {
                key: "mlx5_pci_addresses",
                message: format!("hardware.mlx5_pci_addresses lists {a} twice"),
            });
        }
    }
    Ok(())
}

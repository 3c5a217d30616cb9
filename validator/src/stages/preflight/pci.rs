//! The PCI inventory from sysfs: every function under `bus/pci/devices`, resolved to its
//! directory under `devices/`, with its ids, class and bound driver, and the role the
//! preflight gives it (GPU, NVSwitch, mlx5 NIC, NVMe controller).
//!
//! Roles follow NVIDIA's and the kernel's classes: NVIDIA (`0x10de`) display controllers
//! `0x0300xx` / 3D controllers `0x0302xx` are GPUs (an NVIDIA audio function `0x0403xx` is
//! not); NVIDIA `0x0680xx` ("bridge, other") are NVSwitches, and so are NVIDIA PCI bridges
//! `0x0604xx` whose id the BOM lists in `nvswitch_pci_ids`; Mellanox (`0x15b3`) network
//! controllers `0x02xxxx` are mlx5 functions, on the compute fabric (`nic`) or the front
//! end (`frontend-nic`) as the BOM's `mlx5_pci_ids` / `mlx5_pci_addresses` select them;
//! `0x010802` are NVMe controllers. Any other
//! vendor's display device (QEMU's VGA `1234:1111`) is not a GPU.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{link_name, list_dir, parse_value, resolve, Issue};
use crate::config::bom::hardware::{Hardware, PciId};
use crate::formats::sysfs;

/// NVIDIA's PCI vendor id.
pub const NVIDIA: u16 = 0x10de;
/// Mellanox's (NVIDIA Networking) PCI vendor id.
pub const MELLANOX: u16 = 0x15b3;

/// What a PCI function is to the preflight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Gpu,
    NvSwitch,
    /// An mlx5 function on the compute fabric.
    Nic,
    /// An mlx5 function the BOM leaves out of the compute fabric.
    #[serde(rename = "frontend-nic")]
    FrontendNic,
    Nvme,
    Other,
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    /// `0000:1b:00.0`.
    pub address: String,
    /// Its directory under `devices/` (links resolved).
    pub dir: PathBuf,
    pub id: PciId,
    pub class: u32,
    /// The bound driver's name (`nvidia`), from the `driver` link.
    pub driver: Option<String>,
}

impl PciDevice {
    /// The role the BOM's hardware section gives this function.
    pub fn role(&self, hw: &Hardware) -> Role {
        let base_sub = self.class >> 8;
        match (self.id.vendor, base_sub) {
            (NVIDIA, 0x0300 | 0x0302) => Role::Gpu,
            (NVIDIA, 0x0680) => Role::NvSwitch,
            (NVIDIA, 0x0604) if hw.nvswitch_pci_ids.contains(&self.id) => Role::NvSwitch,
            (MELLANOX, c) if c >> 8 == 0x02 => {
                if hw.is_fabric_nic(Some(&self.address), Some(self.id)) {
                    Role::Nic
                } else {
                    Role::FrontendNic
                }
            }
            (_, 0x0108) if self.class & 0xff == 0x02 => Role::Nvme,
            _ => Role::Other,
        }
    }

    /// The upstream port's directory (the parent, when it is a PCI function).
    pub fn upstream(&self) -> Option<(String, &Path)> {
        let parent = self.dir.parent()?;
        let name = parent.file_name()?.to_str()?;
        sysfs::is_pci_address(name).then(|| (name.to_string(), parent))
    }
}

/// Reads every function under `<sys>/bus/pci/devices`. A function whose files cannot be
/// read or parsed is left out and named in the issues.
pub fn scan(sys: &Path) -> (Vec<PciDevice>, Vec<Issue>) {
    let bus = sys.join("bus/pci/devices");
    let mut devices = Vec::new();
    let mut issues = Vec::new();
    let names = match list_dir(&bus) {
        Ok(Some(n)) => n,
        Ok(None) => {
            issues.push(Issue::new(&bus, "no such directory (is sysfs mounted?)"));
            return (devices, issues);
        }
        Err(e) => {
            issues.push(e);
            return (devices, issues);
        }
    };
    for name in names {
        match read_device(&bus, &name) {
            Ok(d) => devices.push(d),
            Err(e) => issues.push(e),
        }
    }
    (devices, issues)
}

fn read_device(bus: &Path, name: &str) -> Result<PciDevice, Issue> {
    let link = bus.join(name);
    if !sysfs::is_pci_address(name) {
        return Err(Issue::new(&link, "not a PCI address (dddd:bb:dd.f)"));
    }
    let dir = resolve(&link)?;
    let id = |f: &str| parse_value(&dir.join(f), sysfs::pci_id);
    Ok(PciDevice {
        address: name.to_string(),
        id: PciId {
            vendor: id("vendor")?,
            device: id("device")?,
        },
        class: parse_value(&dir.join("class"), sysfs::pci_class)?,
        driver: link_name(&dir.join("driver"))?,
        dir,
    })
}

/// The scanned functions with their roles.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub devices: Vec<(PciDevice, Role)>,
}

impl Inventory {
    pub fn new(devices: &[PciDevice], hw: &Hardware) -> Inventory {
        Inventory {
            devices: devices.iter().map(|d| (d.clone(), d.role(hw))).collect(),
        }
    }

    /// The functions of one role, in address order.
    pub fn of(&self, role: Role) -> Vec<&PciDevice> {
        self.devices
            .iter()
            .filter(|(_, r)| *r == role)
            .map(|(d, _)| d)
            .collect()
    }

    /// The role of the function at `address`.
    pub fn role_of(&self, address: &str) -> Option<Role> {
        self.devices
            .iter()
            .find(|(d, _)| d.address == address)
            .map(|(_, r)| *r)
    }

    /// The function at `address`.
    pub fn at(&self, address: &str) -> Option<&PciDevice> {
        self.devices
            .iter()
            .map(|(d, _)| d)
            .find(|d| d.address == address)
    }
}

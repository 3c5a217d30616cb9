//! Hardware for the preflight scenarios: the drivers a root carries and the devices QEMU
//! can show (the scenarios themselves are set up in [`crate::preflight`]).
//!
//! [`install_root_modules`] lays out `/lib/modules/<release>` on a test root as a Debian
//! root has it: the in-tree modules a driver set needs, copied from the kernel under test;
//! out-of-tree modules (the real `nvidia.ko` from `scripts/build-nvidia`) under
//! `updates/dkms/`, as DKMS installs them; and the index written by the real `depmod`.
//! [`Device`]s become QEMU arguments: an NVMe controller (`-device nvme`, with its own
//! backing file), optionally behind a `pcie-root-port` whose link speed and width are set
//! (`x-speed`, `x-width`), and the standard VGA (`1234:1111`, a display controller that is
//! not NVIDIA's); an NVMe controller can also be hot-plugged into an empty root port while
//! the node runs ([`Device::HotplugNvme`], [`hotplug_commands`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::paths::{self, Kernel};
use crate::HarnessError;

/// The drivers a test root carries (the BOM's `modules.root` and what they need).
#[derive(Debug, Clone, Default)]
pub struct RootModules {
    /// In-tree modules, by name; their dependencies come along.
    pub in_tree: Vec<String>,
    /// Out-of-tree module files, installed under `updates/dkms/`.
    pub dkms: Vec<PathBuf>,
    /// The root's `/etc/modprobe.d/node.conf`, when given.
    pub modprobe_conf: Option<String>,
}

/// A PCIe link setting of a root port, as QEMU spells it (`x-speed=8`, `x-width=4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// `2_5`, `5`, `8`, `16`, `32`, `64` (GT/s).
    pub speed: String,
    pub width: u32,
}

/// An emulated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// An NVMe controller with a 16 MiB namespace, behind its own root port when `port`
    /// is set.
    Nvme { serial: String, port: Option<Link> },
    /// The standard VGA adapter (PCI `1234:1111`, class `0x030000`).
    Vga,
    /// An empty `pcie-root-port` (hot-plug capable) and the backing file of an NVMe
    /// controller that [`hotplug_commands`] plugs into it while the node runs.
    HotplugNvme { serial: String },
}

/// QEMU monitor commands that plug in the [`Device::HotplugNvme`] controllers of
/// `devices` (with the ids [`qemu_args`] gave their ports and drives).
pub fn hotplug_commands(devices: &[Device]) -> Vec<String> {
    devices
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            Device::HotplugNvme { serial } => Some(format!(
                "device_add nvme,id=hot{i},serial={serial},drive=nvme{i},bus=rp{i}"
            )),
            _ => None,
        })
        .collect()
}

/// The real NVIDIA module `file` (`nvidia.ko`) of `flavour`, signed with the test fleet
/// key, built for `release` by `scripts/build-nvidia`.
pub fn nvidia_module(flavour: &str, release: &str, file: &str) -> Result<PathBuf, HarnessError> {
    let p = paths::workspace()
        .join("target/nvidia")
        .join(flavour)
        .join(release)
        .join("signed")
        .join(file);
    if p.is_file() {
        Ok(p)
    } else {
        Err(HarnessError::Setup(format!(
            "{} missing: run scripts/build-nvidia (docs/NVIDIA.md)",
            p.display()
        )))
    }
}

/// The test fleet's module signing certificate (PEM) and the driver version built.
pub fn nvidia_fleet(flavour: &str, release: &str) -> Result<(PathBuf, String), HarnessError> {
    let nv = paths::workspace().join("target/nvidia");
    let cert = nv.join("fleet-key/fleet.pem");
    let vfile = nv.join(flavour).join(release).join("version");
    let version = std::fs::read_to_string(&vfile).map_err(|e| HarnessError::io(&vfile, e))?;
    if !cert.is_file() {
        return Err(HarnessError::Setup(format!(
            "{} missing: run scripts/build-nvidia",
            cert.display()
        )));
    }
    Ok((cert, version.trim().to_string()))
}

/// Installs `m` into the root at `rootdir` for `kernel` and runs `depmod -b`.
pub fn install_root_modules(
    rootdir: &Path,
    kernel: &Kernel,
    m: &RootModules,
) -> Result<(), HarnessError> {
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let dir = rootdir.join("lib/modules").join(&tree.release);
    let dkms = dir.join("updates/dkms");
    std::fs::create_dir_all(&dkms).map_err(|e| HarnessError::io(&dkms, e))?;
    // The in-tree modules the out-of-tree ones depend on come along too.
    let mut names = m.in_tree.clone();
    for f in &m.dkms {
        let bytes = std::fs::read(f).map_err(|e| HarnessError::io(f, e))?;
        let body = validator::formats::kmod::sig::split(&bytes)
            .map(|s| s.body)
            .unwrap_or(&bytes);
        let elf = validator::formats::kmod::modinfo::parse_elf(body)
            .map_err(|e| HarnessError::Setup(format!("{}: {e}", f.display())))?;
        for d in elf.modinfo.get("depends").unwrap_or("").split(',') {
            if !d.is_empty()
                && tree
                    .files
                    .contains_key(&validator::formats::kmod::normalize_name(d))
            {
                names.push(d.to_string());
            }
        }
        let dst = dkms.join(f.file_name().unwrap_or_default());
        std::fs::copy(f, &dst).map_err(|e| HarnessError::io(&dst, e))?;
    }
    let clo = mkinitramfs::closure::closure(&tree, &names)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    for rel in clo.files.values() {
        let (src, dst) = (tree.moddir.join(rel), dir.join(rel));
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p).map_err(|e| HarnessError::io(p, e))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| HarnessError::io(&src, e))?;
    }
    for f in [
        "modules.builtin",
        "modules.order",
        "modules.builtin.modinfo",
    ] {
        let src = tree.moddir.join(f);
        if src.exists() {
            std::fs::copy(&src, dir.join(f)).map_err(|e| HarnessError::io(&src, e))?;
        }
    }
    crate::disk::run(
        Command::new("depmod")
            .arg("-b")
            .arg(rootdir)
            .arg(&tree.release),
    )?;
    if let Some(conf) = &m.modprobe_conf {
        let d = rootdir.join("etc/modprobe.d");
        std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
        let f = d.join("node.conf");
        std::fs::write(&f, conf).map_err(|e| HarnessError::io(&f, e))?;
    }
    Ok(())
}

/// QEMU arguments for `devices`; NVMe backing files are made in `dir`.
pub fn qemu_args(devices: &[Device], dir: &Path) -> Result<Vec<String>, HarnessError> {
    let mut args = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        match d {
            Device::Vga => args.extend(["-device".to_string(), "VGA".into()]),
            Device::HotplugNvme { .. } => {
                let img = dir.join(format!("nvme{i}.img"));
                let f = std::fs::File::create(&img).map_err(|e| HarnessError::io(&img, e))?;
                f.set_len(16 << 20).map_err(|e| HarnessError::io(&img, e))?;
                args.extend([
                    "-drive".to_string(),
                    format!("file={},format=raw,if=none,id=nvme{i}", img.display()),
                    "-device".into(),
                    format!(
                        "pcie-root-port,id=rp{i},bus=pcie.0,chassis={},slot={}",
                        i + 1,
                        i + 1
                    ),
                ]);
            }
            Device::Nvme { serial, port } => {
                let img = dir.join(format!("nvme{i}.img"));
                let f = std::fs::File::create(&img).map_err(|e| HarnessError::io(&img, e))?;
                f.set_len(16 << 20).map_err(|e| HarnessError::io(&img, e))?;
                args.push("-drive".into());
                args.push(format!(
                    "file={},format=raw,if=none,id=nvme{i}",
                    img.display()
                ));
                let mut dev = format!("nvme,serial={serial},drive=nvme{i}");
                if let Some(l) = port {
                    args.push("-device".into());
                    args.push(format!(
                        "pcie-root-port,id=rp{i},bus=pcie.0,chassis={},slot={},x-speed={},x-width={}",
                        i + 1,
                        i + 1,
                        l.speed,
                        l.width
                    ));
                    dev.push_str(&format!(",bus=rp{i}"));
                }
                args.push("-device".into());
                args.push(dev);
            }
        }
    }
    Ok(args)
}

//! Hardware for the preflight scenarios: the drivers a root carries and the devices QEMU
//! can show.
//!
//! [`install_root_modules`] lays out `/lib/modules/<release>` on a test root as a Debian
//! root has it: the in-tree modules a driver set needs, copied from the kernel under test;
//! out-of-tree modules (the real `nvidia.ko` from `scripts/build-nvidia`) under
//! `updates/dkms/`, as DKMS installs them; and the index written by the real `depmod`.
//! [`Device`]s become QEMU arguments: an NVMe controller (`-device nvme`, with its own
//! backing file), optionally behind a `pcie-root-port` whose link speed and width are set
//! (`x-speed`, `x-width`), and the standard VGA (`1234:1111`, a display controller that is
//! not NVIDIA's).

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
    Ok(())
}

/// QEMU arguments for `devices`; NVMe backing files are made in `dir`.
pub fn qemu_args(devices: &[Device], dir: &Path) -> Result<Vec<String>, HarnessError> {
    let mut args = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        match d {
            Device::Vga => args.extend(["-device".to_string(), "VGA".into()]),
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

/// The preflight scenarios.
///
/// `preflight-pcie`: a plain root carrying `nvme`; an NVMe controller behind a
/// `pcie-root-port` set to `x-speed=8,x-width=4`, and the standard VGA; the BOM expects no
/// GPU, one live NVMe controller and an NVMe link of at least 8 GT/s x4. QEMU 7.2's
/// emulated endpoints advertise 2.5 GT/s x1, so the link trains there, below the port's
/// capability: a hardware fault against the BOM (quarantine), with the link in the facts.
///
/// `preflight-nvidia`: the signed verity root of `verity`, carrying `nvme` and the real
/// proprietary `nvidia.ko` (76 MB, licence "NVIDIA", signed with the fleet key the BOM
/// trusts) under `updates/dkms`; the BOM names the built driver and expects 8 GPUs. The VM
/// has no NVIDIA GPU: the gate passes `nvidia.ko`, the kernel is handed it, and the
/// preflight attributes the outcome. 2 GiB of memory: the gate and the kernel each hold the
/// module image.
pub fn preflight_scenario(
    s: &mut crate::scenario::Scenario,
    name: crate::scenario::Name,
) -> Result<(), HarnessError> {
    use crate::scenario::{Name, Scenario};
    use validator::config::bom::hardware::{MinLinkSpeed, NvmeModel};
    use validator::config::bom::{Flavour, ModuleName, Nvidia, TaintLetters, Version};
    use validator::formats::sysfs::LinkSpeed;
    let hw = |s: &mut Scenario| {
        s.bom.hardware.nvme = Some(1);
        // What QEMU's controller reports as its Identify model.
        s.bom.hardware.nvme_models = vec![NvmeModel("QEMU NVMe Ctrl".into())];
        s.bom.hardware.link_wait_s = Some(30);
    };
    match name {
        Name::PreflightNvidia => {
            *s = Scenario::named(Name::Verity)?;
            s.name = name.as_str().to_string();
            let release = s.kernel.release.clone();
            let (cert, version) = nvidia_fleet("proprietary", &release)?;
            s.root_modules = Some(RootModules {
                in_tree: vec!["nvme".into()],
                dkms: vec![nvidia_module("proprietary", &release, "nvidia.ko")?],
            });
            s.bom.modules.root = vec![ModuleName("nvme".into()), ModuleName("nvidia".into())];
            s.bom.nvidia = Some(Nvidia {
                driver_version: Version(version),
                flavour: Flavour::Proprietary,
                fabric_manager_version: None,
            });
            s.bom.policy.out_of_tree = vec![ModuleName("nvidia".into())];
            s.bom.policy.trust.push(cert.display().to_string());
            // Proprietary licence (P), out of tree (O), and a signer the kernel's own
            // keyring does not know (E): the fleet key is trusted by the gate only.
            s.bom.policy.taint_allowed = TaintLetters("POE".into());
            s.bom.hardware.gpus = Some(8);
            hw(s);
            s.devices = vec![
                Device::Nvme {
                    serial: "FAKESN0000000001".into(),
                    port: None,
                },
                Device::Vga,
            ];
            s.memory_mib = Some(2048);
        }
        Name::PreflightPcie => {
            s.root_modules = Some(RootModules {
                in_tree: vec!["nvme".into()],
                dkms: vec![],
            });
            s.bom.modules.root = vec![ModuleName("nvme".into())];
            s.bom.hardware.gpus = Some(0);
            // The port is set to 8 GT/s x4; the BOM asks that much of the NVMe link.
            s.bom.hardware.nvme_link_min_speed = Some(MinLinkSpeed(LinkSpeed(8000)));
            s.bom.hardware.nvme_link_min_width = Some(4);
            hw(s);
            s.devices = vec![
                Device::Nvme {
                    serial: "FAKESN0000000002".into(),
                    port: Some(Link {
                        speed: "8".into(),
                        width: 4,
                    }),
                },
                Device::Vga,
            ];
        }
        other => {
            return Err(HarnessError::Setup(format!(
                "{other} is not a preflight scenario"
            )))
        }
    }
    Ok(())
}

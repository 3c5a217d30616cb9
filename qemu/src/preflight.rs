//! Set-ups of the preflight scenarios (`preflight-pcie`, `preflight-nvidia`): the drivers
//! the root carries and the devices the VM shows, against what the BOM expects.
//!
//! Contract: [`setup`] turns the good boot into the preflight scenario `name` says; the
//! drivers and devices themselves (installing root modules, QEMU arguments, the built
//! NVIDIA driver and its fleet key) are [`crate::hw`]'s. Only the description changes
//! here; [`crate::prepare`] builds it.
//!
//! Limits: `preflight-nvidia` needs the driver built by `scripts/build-nvidia`.

use validator::config::bom::hardware::{MinLinkSpeed, NvmeModel};
use validator::config::bom::{Flavour, ModuleName, Nvidia, TaintLetters, Version};
use validator::formats::sysfs::LinkSpeed;

use crate::hw::{nvidia_fleet, nvidia_module, Device, Link, RootModules};
use crate::scenario::{Name, Scenario};
use crate::HarnessError;

/// The root's `/etc/modprobe.d/node.conf` in `preflight-nvidia` and `preflight-nvidia-open`:
/// an option the driver knows and one it does not (the kernel names an unknown one as it
/// parses them, so its log shows what it was given).
pub const NVIDIA_MODPROBE_CONF: &str =
    "options nvidia NVreg_EnableGpuFirmware=0 NVreg_FleetRootCanary=1\n";

/// The preflight scenarios.
///
/// `preflight-pcie`: a plain root carrying `nvme`; an NVMe controller behind a
/// `pcie-root-port` set to `x-speed=8,x-width=4`, and the standard VGA; the BOM expects no
/// GPU, one live NVMe controller and an NVMe link of at least 8 GT/s x4. QEMU 7.2's
/// emulated endpoints advertise 2.5 GT/s x1, so the link trains there, below the port's
/// capability: a hardware fault against the BOM (quarantine), with the link in the facts.
///
/// `preflight-nvidia`: the signed verity root of `verity`, carrying `nvme` and the real
/// proprietary `nvidia.ko` (65 MB as DKMS installs it, licence "NVIDIA", signed with the fleet key the BOM
/// trusts) under `updates/dkms`; the BOM names the built driver and expects 8 GPUs. The VM
/// has no NVIDIA GPU: the gate passes `nvidia.ko`, the kernel is handed it, and the
/// preflight attributes the outcome; the root's `modprobe.d` and the command line give
/// `nvidia` options ([`NVIDIA_MODPROBE_CONF`]). 2 GiB of memory: the gate and the kernel
/// each hold the module image.
pub fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    let hw = |s: &mut Scenario| {
        s.bom.hardware.nvme = Some(1);
        // What QEMU's controller reports as its Identify model.
        s.bom.hardware.nvme_models = vec![NvmeModel("QEMU NVMe Ctrl".into())];
        s.bom.hardware.link_wait_s = Some(30);
    };
    match name {
        Name::PreflightNvidia | Name::PreflightNvidiaOpen => {
            *s = crate::basic::named(Name::Verity)?;
            s.name = name.as_str().to_string();
            let release = s.kernel.release.clone();
            let (dir, flavour) = if name == Name::PreflightNvidiaOpen {
                ("open", Flavour::Open)
            } else {
                ("proprietary", Flavour::Proprietary)
            };
            let (cert, version) = nvidia_fleet(dir, &release)?;
            s.root_modules = Some(RootModules {
                in_tree: vec!["nvme".into()],
                dkms: vec![nvidia_module(dir, &release, "nvidia.ko")?],
                // The node's driver options: one the driver knows and one it does not
                // (the kernel names an unknown one as it parses them, so its log shows
                // what it was given), and one more on the command line.
                modprobe_conf: Some(NVIDIA_MODPROBE_CONF.into()),
            });
            s.cmdline.push_str(" nvidia.NVreg_FleetCmdlineCanary=1");
            s.bom.modules.root = vec![ModuleName("nvme".into()), ModuleName("nvidia".into())];
            s.bom.nvidia = Some(Nvidia {
                driver_version: Version(version),
                flavour,
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
                modprobe_conf: None,
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

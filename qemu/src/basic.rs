//! Set-ups of the one-root scenarios booted directly: the good boot's variations of root
//! disk, modules, dm-verity root, kernel, TPM and panic.
//!
//! Contract: [`setup`] turns the good boot ([`Scenario::good`], already named) into the
//! scenario `name` says, for the names listed in it; [`named`] is the good boot set up
//! that way (what `Scenario::named` returns for those names; the set-ups of
//! [`crate::faults`] and [`crate::preflight`] start from it). Only the scenario's
//! description changes here; [`crate::prepare`] builds it.
//!
//! Limits: `k612` needs the 6.12 kernel from `scripts/provision`.

use validator::config::bom::ModuleName;

use crate::paths;
use crate::scenario::{Name, Scenario, FORTY_MODULES};
use crate::HarnessError;

/// The good boot's `/etc/modprobe.d/node.conf` in the initramfs.
pub const GOOD_MODPROBE_CONF: &str = "options virtio_blk queue_depth=77\n";
/// The serial of the NVMe controller `no-root` plugs in while the root is waited for.
pub const NO_ROOT_NVME: &str = "NOROOT-LATE-0001";
/// The console line at which `no-root` plugs it in: the storage stage has begun its wait.
pub const NO_ROOT_PLUG_ON: &str = "validator: stage storage: start";

/// The good boot, named `name` and set up by [`setup`].
pub fn named(name: Name) -> Result<Scenario, HarnessError> {
    let mut s = Scenario::good()?;
    s.name = name.as_str().to_string();
    setup(&mut s, name)?;
    Ok(s)
}

/// Sets up the one-root scenario `name` on `s` (the good boot).
pub fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    match name {
        Name::Good => {
            // The node's module options, as modprobe would give them: one from the
            // initramfs's modprobe.d, one from the command line; the root shows what the
            // kernel took.
            let conf = paths::edited_files_dir()?.join("good-modprobe.conf");
            validator::util::fs::write_atomic(&conf, GOOD_MODPROBE_CONF.as_bytes())
                .map_err(|e| HarnessError::io(&conf, e))?;
            s.extra_initramfs_files
                .push((conf, "etc/modprobe.d/node.conf".into()));
            s.cmdline.push_str(" virtio_blk.num_request_queues=1");
            s.root_extra.push_str(
                "echo VIRTIO-BLK-PARAMS \
                 queue_depth=$(cat /sys/module/virtio_blk/parameters/queue_depth) \
                 num_request_queues=$(cat /sys/module/virtio_blk/parameters/num_request_queues); ",
            );
        }
        Name::NoRoot => {
            // No root disk; while the storage stage waits, an NVMe controller with an
            // empty disk is plugged in: a block device the wait sees at once (its event),
            // which is no root either.
            s.with_root_disk = false;
            s.cmdline =
                "root=PARTLABEL=root validator.on_stop=poweroff validator.root_timeout=3".into();
            s.bom.modules.load.push(ModuleName("nvme".into()));
            s.devices = vec![crate::hw::Device::HotplugNvme {
                serial: NO_ROOT_NVME.into(),
            }];
            s.hotplug_on = Some(NO_ROOT_PLUG_ON.into());
        }
        Name::BadModule => {
            // Under TCG the CPU has no VMX, so kvm_intel's init fails with EOPNOTSUPP:
            // a real module that the kernel refuses.
            s.bom.modules.load.push(ModuleName("kvm_intel".into()));
        }
        Name::Verity
        | Name::VerityCorrupt
        | Name::VerityBadSig
        | Name::VerityUntrusted
        | Name::VerityBadSuperblock
        | Name::VerityKernelSig
        | Name::VerityErofs => {
            use crate::verity::Variant;
            s.verity = Some(match name {
                Name::Verity => Variant::Good,
                Name::VerityKernelSig => Variant::AttrsOutOfOrder,
                Name::VerityCorrupt => Variant::CorruptCritical,
                Name::VerityBadSig => Variant::BadSignature,
                Name::VerityUntrusted => Variant::UntrustedCert,
                Name::VerityErofs => Variant::Erofs,
                _ => Variant::BadSuperblock,
            });
            s.bom.modules.load.push(ModuleName("dm_verity".into()));
            if name == Name::VerityErofs {
                s.bom.modules.load.push(ModuleName("erofs".into()));
            }
            s.bom.verity = Some(validator::config::bom::Verity {
                // The good boot also carries every table option; a corruption must
                // give EIO (the default) so the report can name the file.
                on_corruption: if name == Name::Verity {
                    validator::config::bom::OnCorruption::Restart
                } else {
                    validator::config::bom::OnCorruption::Eio
                },
                ignore_zero_blocks: name == Name::Verity,
                check_at_most_once: name == Name::Verity,
                kernel_signature: name == Name::VerityKernelSig,
                algorithm: Some(validator::config::bom::VerityAlgorithm("sha256".into())),
                data_block_size: Some(4096),
                hash_block_size: Some(4096),
                critical: vec![
                    validator::config::bom::RootPath("/sbin/init".into()),
                    validator::config::bom::RootPath("/bin/busybox".into()),
                ],
                ..Default::default()
            });
            s.bom.policy.trust.push("trusted.pem".into());
            s.cmdline = "validator.on_stop=poweroff validator.root_timeout=30".into();
        }
        Name::K612 => {
            // Debian's 6.12 kernel: ECDSA P-384 module signatures, .ko.xz modules the
            // kernel decompresses itself (MODULE_INIT_COMPRESSED_FILE), virtio_pci
            // built in.
            s.kernel = paths::kernel("k612")?;
            s.bom.kernel.release = validator::config::bom::Version(s.kernel.release.clone());
        }
        Name::Tpm => {
            s.root_tpm_tools = true;
        }
        Name::TpmSha384 => {
            s.root_tpm_tools = true;
            s.tpm_banks = Some(vec!["sha256".into(), "sha384".into()]);
        }
        Name::NoTpm => {
            s.tpm_banks = None;
        }
        Name::TpmKilled => {
            s.kill_tpm_on = Some("stage modules: start".into());
        }
        Name::TamperedModule => {
            s.tampered_modules.push("virtio_blk".into());
        }
        Name::Modules40 => {
            s.bom.modules.load = FORTY_MODULES
                .iter()
                .map(|m| ModuleName((*m).into()))
                .collect();
            // Two workers: modules load in parallel and some are judged ahead of their
            // dependencies (the loader's schedule), as on a node with many CPUs.
            s.cpus = Some(2);
        }
        Name::Sha512Module => {
            s.bom.modules.load.push(ModuleName("crc8".into()));
            s.bom.policy.trust.push("snake.pem".into());
            s.snakeoil_signed.push(("crc8".into(), "sha512".into()));
            s.cmdline.push_str(" module.sig_enforce=1");
            s.root_extra = "echo SIG-ENFORCE $(cat /sys/module/module/parameters/sig_enforce)\n\
                            echo CRC8-STATE $(cat /sys/module/crc8/initstate)"
                .into();
        }
        Name::Panic => {
            s.cmdline
                .push_str(" validator.test_panic=modules validator.on_panic=poweroff");
        }
        other => {
            return Err(HarnessError::Setup(format!(
                "{other} is not a one-root scenario"
            )))
        }
    }
    Ok(())
}

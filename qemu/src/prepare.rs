//! Builds a scenario's run directory and boots it.
//!
//! Contract: [`Scenario::prepare`] writes the BOM, the initramfs (the `mkinitramfs`
//! library) and the root disk (plain ext4 made with `mkfs.ext4 -d`, or a signed dm-verity
//! root, [`crate::verity`]) into a run directory and returns the VM to boot; a scenario
//! whose [`crate::scenario::Boot`] asks for a firmware path or the A/B layout is built by
//! [`crate::ab::prepare`] instead. [`Scenario::run`] boots once in a fresh run directory
//! and removes the disk images; [`Scenario::run_checked`] (for tests) also fails on a
//! harness error, a timeout or a kernel panic and writes the documented example reports
//! when asked; [`Scenario::bed`] keeps an A/B node's disk for several power-ons
//! ([`Bed`]).
//!
//! Limits: one boot per [`Scenario::run`]; `VALIDATOR_KEEP_RUNS=1` keeps the images,
//! `VALIDATOR_WRITE_EXAMPLES=1` rewrites `docs/examples/`.

use std::path::Path;

use crate::ab::Bed;
use crate::disk::{self, PartitionSpec};
use crate::paths;
use crate::scenario::{write_example_report, Scenario, EXAMPLES, TPM_ROOT_SCRIPT};
use crate::vm::{self, Outcome, Run, VmConfig};
use crate::HarnessError;

impl Scenario {
    /// What the scenario adds to or changes in its initramfs.
    pub fn extras(&self) -> crate::initramfs::Extras {
        crate::initramfs::Extras {
            files: self.extra_initramfs_files.clone(),
            module_overrides: self.module_overrides.clone(),
            tampered_modules: self.tampered_modules.clone(),
            snakeoil_signed: self.snakeoil_signed.clone(),
            compression: self.initramfs_compression(),
        }
    }

    /// mkinitramfs' own compression for a VM with less memory than the default (the
    /// kernel unpacks the image with the level's zstd window), else the process's.
    pub fn initramfs_compression(&self) -> Option<crate::initramfs::Compression> {
        self.memory_mib
            .filter(|m| *m < vm::DEFAULT_MEMORY_MIB)
            .map(|_| crate::initramfs::Compression::Product)
    }

    /// Builds the BOM file, initramfs and disk in `dir`; returns the VM to boot.
    pub fn prepare(&self, dir: &Path) -> Result<VmConfig, HarnessError> {
        if self.boot.two_slots() {
            return crate::ab::prepare(self, dir);
        }
        let mut verity_parts = None;
        if let Some(variant) = self.verity {
            let rootdir = dir.join("rootfs");
            crate::rootfs::build(&rootdir, &self.root_extra)?;
            if let Some(m) = &self.root_modules {
                crate::hw::install_root_modules(&rootdir, &self.kernel, m)?;
            }
            let img = crate::verity::build(&rootdir, dir, variant)?;
            // The BOM trusts `trusted.pem` (its path is relative to the BOM).
            if img.cert != dir.join("trusted.pem") {
                std::fs::copy(&img.cert, dir.join("trusted.pem"))
                    .map_err(|e| HarnessError::io(&img.cert, e))?;
            }
            verity_parts = Some((img.disk_parts, img.read_error));
        }
        let bom_path = dir.join("bom.toml");
        std::fs::write(
            &bom_path,
            self.bom
                .to_toml()
                .map_err(|e| HarnessError::Setup(format!("BOM as TOML: {e}")))?,
        )
        .map_err(|e| HarnessError::io(&bom_path, e))?;
        let initrd = dir.join("initrd.img");
        crate::initramfs::build(&self.kernel, &bom_path, &self.extras(), &initrd, dir)?;
        let mut cfg = VmConfig::new(&self.kernel.vmlinuz, &initrd);
        cfg.append = self.cmdline.clone();
        cfg.append_raw = self.cmdline_raw.clone();
        if let Some((parts, read_error)) = verity_parts {
            let img = dir.join("disk.img");
            disk::build_disk(&img, &parts, dir)?;
            if let Some((label, offset)) = read_error {
                let (start, _) = disk::partition_offset(&img, &label)?;
                cfg.read_errors.push((start + offset) / 512);
            }
            cfg.disks.push(img);
        } else if self.with_root_disk {
            let rootdir = dir.join("rootfs");
            let mut extra = self.root_extra.clone();
            if self.root_tpm_tools {
                extra.push('\n');
                extra.push_str(TPM_ROOT_SCRIPT);
            }
            crate::rootfs::build(&rootdir, &extra)?;
            if let Some(m) = &self.root_modules {
                crate::hw::install_root_modules(&rootdir, &self.kernel, m)?;
            }
            if self.root_tpm_tools {
                crate::rootfs::add_tpm_tools(&rootdir)?;
            }
            let size = crate::rootfs::image_size_mib(&rootdir);
            let img = dir.join("disk.img");
            disk::build_disk(&img, &[PartitionSpec::ext4("root", &rootdir, size)], dir)?;
            cfg.disks.push(img);
        }
        cfg.tpm = self.tpm_banks.clone();
        cfg.kill_tpm_on = self.kill_tpm_on.clone();
        cfg.extra_args
            .extend(crate::hw::qemu_args(&self.devices, dir)?);
        if let Some(text) = &self.hotplug_on {
            cfg.monitor_on = Some(crate::vm::MonitorAt {
                text: text.clone(),
                commands: crate::hw::hotplug_commands(&self.devices),
            });
        }
        if let Some(m) = self.memory_mib {
            cfg.memory_mib = m;
        }
        if let Some(c) = self.cpus {
            cfg.cpus = c;
        }
        // SMBIOS serial numbers, so the report's node identity has something to read.
        cfg.extra_args.extend(
            [
                "-smbios",
                "type=1,serial=QEMU-NODE-0001",
                "-smbios",
                "type=2,serial=QEMU-BOARD-0001",
            ]
            .map(String::from),
        );
        if !self.snakeoil_signed.is_empty() {
            // The kernel trusts the snakeoil key through UEFI db (its .platform keyring);
            // the BOM through `snake.pem` (written by the initramfs build into `dir`).
            cfg.extra_args
                .extend(crate::firmware::Ovmf::snakeoil(dir)?.qemu_args());
        }
        self.boot.apply(&mut cfg);
        Ok(cfg)
    }

    /// Prepares and boots the scenario in a fresh run directory.
    /// The disk images are removed afterwards (they are tens of MB each); the console
    /// log, the initramfs and the BOM stay. `VALIDATOR_KEEP_RUNS=1` keeps everything.
    pub fn run(&self) -> Result<Outcome, HarnessError> {
        let dir = paths::run_dir(&self.name)?;
        let cfg = self.prepare(&dir)?;
        crate::progress(&format!(
            "booting {} in QEMU ({:?}; a Debian root with systemd takes about a minute, \
             a busybox root 10-30 s)",
            self.name, cfg.accel
        ));
        let out = vm::run(&cfg, &dir);
        if std::env::var_os("VALIDATOR_KEEP_RUNS").is_none() {
            paths::remove_images(&dir);
        }
        out
    }

    /// Prepares the scenario in a fresh run directory and keeps it for [`Bed::boot`].
    pub fn bed(&self) -> Result<Bed, HarnessError> {
        let dir = paths::run_dir(&self.name)?;
        let cfg = self.prepare(&dir)?;
        Bed::new(self, dir, cfg)
    }

    /// Prepares and powers on once, following reboots as
    /// [`crate::scenario::Boot::follow_reboots`] says; the images are removed afterwards.
    pub fn run_boots(&self) -> Result<Run, HarnessError> {
        self.bed()?.boot()
    }
}

impl Scenario {
    /// For tests: boots the scenario and panics on a harness error, a timeout, a kernel
    /// panic or "Attempted to kill init" - outcomes no scenario expects.
    pub fn run_checked(self) -> Outcome {
        let name = self.name.clone();
        let o = self
            .run()
            .unwrap_or_else(|e| panic!("scenario {name}: {e}"));
        eprintln!("scenario {name}: {}", o.describe());
        assert!(!o.timed_out, "scenario {name} timed out: {}", o.describe());
        assert!(
            !o.console.contains("Attempted to kill init"),
            "{}",
            o.describe()
        );
        assert!(!o.console.contains("Kernel panic"), "{}", o.describe());
        // One kernel boot: the VM runs with `-no-reboot`, so a reboot ends it; a second
        // kernel could only come from a kexec.
        let kernels = o.console.matches(crate::vm::KERNEL_BOOT_MARKER).count();
        assert!(kernels <= 1, "{kernels} kernel boots: {}", o.describe());
        if std::env::var_os("VALIDATOR_WRITE_EXAMPLES").is_some() {
            write_example(&name, &o);
        }
        o
    }
}

/// Writes the report of scenario `name`'s boot as its documented example, when it has one
/// (`VALIDATOR_WRITE_EXAMPLES=1`).
fn write_example(name: &str, o: &Outcome) {
    let Some((_, file)) = EXAMPLES.iter().find(|(n, _)| *n == name) else {
        return;
    };
    let r = o
        .report
        .as_ref()
        .unwrap_or_else(|| panic!("scenario {name}: no report for {file}"));
    write_example_report(file, r);
}

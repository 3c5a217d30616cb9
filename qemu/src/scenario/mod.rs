//! Named test scenarios: everything a boot needs (BOM, initramfs, root disk, command line)
//! assembled in a fresh run directory, then booted. Tests and the CLI only pick a scenario
//! and look at the typed [`Outcome`]; the set-up lives here.

use std::path::{Path, PathBuf};

use validator::config::bom::{Bom, ModuleName};

use crate::disk::{self, PartitionSpec};
use crate::paths::{self, Kernel};
use crate::vm::{self, Outcome, VmConfig};
use crate::HarnessError;

/// The scenarios, by name: the one list the CLI, the tests and the README use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Good,
    NoRoot,
    BadModule,
    Panic,
    TamperedModule,
    Verity,
    VerityCorrupt,
    VerityBadSig,
    VerityUntrusted,
    VerityBadSuperblock,
    VerityKernelSig,
    VerityErofs,
    K612,
    Tpm,
    TpmSha384,
    NoTpm,
    TpmKilled,
    AbGood,
    AbImageFault,
    AbImageFaultReboot,
    AbCorruptRoot,
    AbBothBad,
    AbNoTpm,
    SdbootGood,
    SdbootImageFault,
    Node,
    PreflightNvidia,
    PreflightPcie,
    AbHardwareFault,
    Modules40,
    // The fault matrix (docs/FAULTS.md; set up in crate::faults).
    WrongPartuuid,
    VerityCorruptHash,
    VerityWrongRootHash,
    UnsignedModule,
    WrongVermagic,
    CrcMismatch,
    TruncatedModule,
    BomMissing,
    BomCorrupt,
    GarbageCmdline,
    LowMemory,
    AbNoEsp,
    AbEspFull,
    AbEspReadOnly,
    AbCorruptGrubenv,
}

impl Name {
    /// Every scenario, in the README's order (`node`, the demo's default, is described
    /// there on its own).
    pub const ALL: &'static [Name] = &[
        Name::Good,
        Name::NoRoot,
        Name::BadModule,
        Name::Panic,
        Name::TamperedModule,
        Name::Verity,
        Name::VerityCorrupt,
        Name::VerityBadSig,
        Name::VerityUntrusted,
        Name::VerityBadSuperblock,
        Name::VerityKernelSig,
        Name::VerityErofs,
        Name::K612,
        Name::Tpm,
        Name::TpmSha384,
        Name::NoTpm,
        Name::TpmKilled,
        Name::AbGood,
        Name::AbImageFault,
        Name::AbImageFaultReboot,
        Name::AbCorruptRoot,
        Name::AbBothBad,
        Name::AbNoTpm,
        Name::SdbootGood,
        Name::SdbootImageFault,
        Name::Node,
        Name::PreflightNvidia,
        Name::PreflightPcie,
        Name::AbHardwareFault,
        Name::Modules40,
        Name::WrongPartuuid,
        Name::VerityCorruptHash,
        Name::VerityWrongRootHash,
        Name::UnsignedModule,
        Name::WrongVermagic,
        Name::CrcMismatch,
        Name::TruncatedModule,
        Name::BomMissing,
        Name::BomCorrupt,
        Name::GarbageCmdline,
        Name::LowMemory,
        Name::AbNoEsp,
        Name::AbEspFull,
        Name::AbEspReadOnly,
        Name::AbCorruptGrubenv,
    ];

    /// The name on the command line and in run directories.
    pub fn as_str(self) -> &'static str {
        match self {
            Name::Good => "good",
            Name::NoRoot => "no-root",
            Name::BadModule => "bad-module",
            Name::Panic => "panic",
            Name::TamperedModule => "tampered-module",
            Name::Verity => "verity",
            Name::VerityCorrupt => "verity-corrupt",
            Name::VerityBadSig => "verity-bad-sig",
            Name::VerityUntrusted => "verity-untrusted",
            Name::VerityBadSuperblock => "verity-bad-superblock",
            Name::VerityKernelSig => "verity-kernel-sig",
            Name::VerityErofs => "verity-erofs",
            Name::K612 => "k612",
            Name::Tpm => "tpm",
            Name::TpmSha384 => "tpm-sha384",
            Name::NoTpm => "no-tpm",
            Name::TpmKilled => "tpm-killed",
            Name::AbGood => "ab-good",
            Name::AbImageFault => "ab-image-fault",
            Name::AbImageFaultReboot => "ab-image-fault-reboot",
            Name::AbCorruptRoot => "ab-corrupt-root",
            Name::AbBothBad => "ab-both-bad",
            Name::AbNoTpm => "ab-no-tpm",
            Name::SdbootGood => "sdboot-good",
            Name::SdbootImageFault => "sdboot-image-fault",
            Name::Node => "node",
            Name::AbHardwareFault => "ab-hardware-fault",
            Name::PreflightNvidia => "preflight-nvidia",
            Name::PreflightPcie => "preflight-pcie",
            Name::Modules40 => "modules-40",
            Name::WrongPartuuid => "wrong-partuuid",
            Name::VerityCorruptHash => "verity-corrupt-hash",
            Name::VerityWrongRootHash => "verity-wrong-root-hash",
            Name::UnsignedModule => "unsigned-module",
            Name::WrongVermagic => "wrong-vermagic",
            Name::CrcMismatch => "crc-mismatch",
            Name::TruncatedModule => "truncated-module",
            Name::BomMissing => "bom-missing",
            Name::BomCorrupt => "bom-corrupt",
            Name::GarbageCmdline => "garbage-cmdline",
            Name::LowMemory => "low-memory",
            Name::AbNoEsp => "ab-no-esp",
            Name::AbEspFull => "ab-esp-full",
            Name::AbEspReadOnly => "ab-esp-read-only",
            Name::AbCorruptGrubenv => "ab-corrupt-grubenv",
        }
    }

    /// The scenario called `s`.
    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.iter().copied().find(|n| n.as_str() == s)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A boot to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub kernel: Kernel,
    pub bom: Bom,
    /// Appended to the kernel command line.
    pub cmdline: String,
    /// Bytes appended after `cmdline`, for bytes that are not UTF-8 (direct boots).
    pub cmdline_raw: Vec<u8>,
    /// Shell lines the root's init runs after printing its marker.
    pub root_extra: String,
    /// Whether a root disk is attached at all.
    pub with_root_disk: bool,
    pub extra_initramfs_files: Vec<(PathBuf, String)>,
    /// Module files packed in place of the kernel's (the build-time gate is then off, so
    /// the boot-time gate is what stops them).
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Modules whose file is packed with one byte of its ELF body flipped.
    pub tampered_modules: Vec<String>,
    /// A dm-verity root (DPS layout, signed root hash) instead of a plain one.
    pub verity: Option<crate::verity::Variant>,
    /// The VM's swtpm banks (`None`: no TPM at all).
    pub tpm_banks: Option<Vec<String>>,
    /// Kill the swtpm when the console shows this.
    pub kill_tpm_on: Option<String>,
    /// Put tpm2-tools in the root and have its init print `tpm2_pcrread`, `tpm2_eventlog`
    /// and the binary log (base64) between markers.
    pub root_tpm_tools: bool,
    /// Drivers on the root for the preflight (`modules.root`), indexed by `depmod`.
    pub root_modules: Option<crate::hw::RootModules>,
    /// Emulated devices beyond the disks (NVMe behind a set link, VGA).
    pub devices: Vec<crate::hw::Device>,
    /// VM memory (default: `VmConfig`'s).
    pub memory_mib: Option<u32>,
    /// The boot path (kernel direct, or OVMF with GRUB or systemd-boot), the A/B slots,
    /// reboot following, power cuts and disk throttling ([`crate::ab::Boot`]).
    pub boot: crate::ab::Boot,
}

/// Shell the root's init runs to show the TPM's view and our logs.
pub const TPM_ROOT_SCRIPT: &str = "export TPM2TOOLS_TCTI=device:/dev/tpmrm0\n\
echo TPM-PCRREAD-BEGIN; tpm2_pcrread; echo TPM-PCRREAD-END\n\
echo TPM-EVENTLOG-BEGIN; tpm2_eventlog /run/validator/tpm-eventlog.bin 2>/dev/null; echo \"TPM-EVENTLOG-RC $?\"; echo TPM-EVENTLOG-END\n\
echo TPM-LOG-BEGIN; base64 /run/validator/tpm-eventlog.bin; echo TPM-LOG-END\n\
echo TPM-CEL-BEGIN; base64 /run/log/systemd/tpm2-measure.log; echo TPM-CEL-END";

/// The BOM of scenario `modules-40`: 40 real modules of Debian's 6.1 kernel that load
/// under QEMU/TCG without their hardware (storage, filesystems, device-mapper, block,
/// network and crypto drivers), the root's own three first. With their dependencies the
/// init gates and loads about 70.
pub const FORTY_MODULES: [&str; 40] = [
    "virtio_pci",
    "virtio_blk",
    "ext4",
    "btrfs",
    "xfs",
    "vfat",
    "isofs",
    "udf",
    "nls_utf8",
    "nls_cp437",
    "loop",
    "dm_mod",
    "dm_verity",
    "dm_crypt",
    "raid1",
    "raid0",
    "nbd",
    "brd",
    "zram",
    "overlay",
    "fuse",
    "squashfs",
    "erofs",
    "jfs",
    "nilfs2",
    "virtio_net",
    "virtio_console",
    "virtio_balloon",
    "tun",
    "bridge",
    "veth",
    "dummy",
    "macvlan",
    "tls",
    "8021q",
    "uinput",
    "evdev",
    "crypto_user",
    "sha512_generic",
    "algif_hash",
];

/// The example BOM of the QEMU node, with `kernel.release` set to the provisioned kernel.
pub fn example_bom(kernel: &Kernel) -> Result<Bom, HarnessError> {
    let p = paths::workspace().join("examples/qemu-node.toml");
    let mut b = validator::config::bom::load(&p)
        .map_err(|e| HarnessError::Setup(e.to_string()))?
        .bom;
    b.kernel.release = validator::config::bom::Version(kernel.release.clone());
    Ok(b)
}

impl Scenario {
    /// The good boot: the example BOM, a root found by label.
    pub fn good() -> Result<Scenario, HarnessError> {
        let kernel = paths::kernel("default")?;
        let bom = example_bom(&kernel)?;
        Ok(Scenario {
            name: "good".into(),
            kernel,
            bom,
            cmdline: "root=PARTLABEL=root ro validator.on_stop=poweroff validator.root_timeout=30"
                .into(),
            cmdline_raw: Vec::new(),
            root_extra: String::new(),
            with_root_disk: true,
            extra_initramfs_files: Vec::new(),
            module_overrides: Vec::new(),
            tampered_modules: Vec::new(),
            verity: None,
            tpm_banks: Some(vec!["sha1".into(), "sha256".into()]),
            kill_tpm_on: None,
            root_tpm_tools: false,
            root_modules: None,
            devices: Vec::new(),
            memory_mib: None,
            boot: crate::ab::Boot::default(),
        })
    }

    /// A scenario by name.
    pub fn named(name: Name) -> Result<Scenario, HarnessError> {
        let mut s = Scenario::good()?;
        s.name = name.as_str().to_string();
        match name {
            Name::Good => {}
            Name::NoRoot => {
                s.with_root_disk = false;
                s.cmdline =
                    "root=PARTLABEL=root validator.on_stop=poweroff validator.root_timeout=3"
                        .into();
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
                    Name::Verity | Name::VerityKernelSig => Variant::Good,
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
            Name::AbGood
            | Name::AbImageFault
            | Name::AbImageFaultReboot
            | Name::AbCorruptRoot
            | Name::AbBothBad
            | Name::AbNoTpm
            | Name::AbHardwareFault => {
                use crate::ab::{BootPath, Roots};
                let roots = if name == Name::AbCorruptRoot {
                    Roots::Verity(validator::config::bom::RootHashSource::Bom)
                } else {
                    Roots::Plain
                };
                s = Scenario::ab_gate(BootPath::Grub, roots)?;
                s.name = name.as_str().into();
                s.boot.follow_reboots = Some(3);
                if let Some(two) = s.boot.slots.as_mut() {
                    match name {
                        Name::AbImageFault | Name::AbImageFaultReboot => {
                            two.a.tampered_modules.push("crc16".into());
                        }
                        Name::AbBothBad => {
                            two.a.tampered_modules.push("crc16".into());
                            two.b.tampered_modules.push("crc16".into());
                        }
                        Name::AbCorruptRoot => {
                            two.a.verity = crate::verity::Variant::CorruptCritical;
                        }
                        Name::AbHardwareFault => {
                            // The VM has no NVMe controller; the BOM promises four.
                            two.a.bom.hardware.nvme = Some(4);
                            two.a.bom.hardware.link_wait_s = Some(1);
                        }
                        _ => {}
                    }
                    if name == Name::AbImageFaultReboot {
                        for b in [&mut two.a.bom, &mut two.b.bom] {
                            if let Some(c) = b.slot.as_mut() {
                                c.fallback = validator::config::bom::FallbackVia::Reboot;
                            }
                        }
                    }
                }
                if name == Name::AbNoTpm {
                    s.tpm_banks = None;
                }
                // The slot that takes over by kexec shows its TPM's view and our log.
                s.root_tpm_tools = name == Name::AbImageFault;
            }
            Name::Node => {
                // The real node: OVMF + GRUB, slot A, signed verity roots, the module
                // gate, the TPM with tpm2-tools in the root.
                use crate::ab::{BootPath, Roots};
                s = Scenario::ab_gate(
                    BootPath::Grub,
                    Roots::Verity(validator::config::bom::RootHashSource::Signature),
                )?;
                s.name = name.as_str().into();
                s.root_tpm_tools = true;
            }
            Name::SdbootGood | Name::SdbootImageFault => {
                use crate::ab::{BootPath, Roots};
                s = Scenario::ab_gate(BootPath::SystemdBoot, Roots::Plain)?;
                s.name = name.as_str().into();
                s.boot.follow_reboots = Some(3);
                if name == Name::SdbootImageFault {
                    if let Some(two) = s.boot.slots.as_mut() {
                        two.a.tampered_modules.push("crc16".into());
                    }
                }
            }
            Name::TamperedModule => {
                s.tampered_modules.push("virtio_blk".into());
            }
            Name::Modules40 => {
                s.bom.modules.load = FORTY_MODULES
                    .iter()
                    .map(|m| ModuleName((*m).into()))
                    .collect();
            }
            Name::Panic => {
                s.cmdline
                    .push_str(" validator.test_panic=modules validator.on_panic=poweroff");
            }
            Name::PreflightNvidia | Name::PreflightPcie => {
                crate::hw::preflight_scenario(&mut s, name)?
            }
            Name::WrongPartuuid
            | Name::VerityCorruptHash
            | Name::VerityWrongRootHash
            | Name::UnsignedModule
            | Name::WrongVermagic
            | Name::CrcMismatch
            | Name::TruncatedModule
            | Name::BomMissing
            | Name::BomCorrupt
            | Name::GarbageCmdline
            | Name::LowMemory
            | Name::AbNoEsp
            | Name::AbEspFull
            | Name::AbEspReadOnly
            | Name::AbCorruptGrubenv => crate::faults::setup(&mut s, name)?,
        }
        Ok(s)
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
            verity_parts = Some(img.disk_parts);
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
        let extras = crate::initramfs::Extras {
            files: self.extra_initramfs_files.clone(),
            module_overrides: self.module_overrides.clone(),
            tampered_modules: self.tampered_modules.clone(),
        };
        crate::initramfs::build(&self.kernel, &bom_path, &extras, &initrd, dir)?;
        let mut cfg = VmConfig::new(&self.kernel.vmlinuz, &initrd);
        cfg.append = self.cmdline.clone();
        cfg.append_raw = self.cmdline_raw.clone();
        if let Some(parts) = verity_parts {
            let img = dir.join("disk.img");
            disk::build_disk(&img, &parts, dir)?;
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
                crate::rootfs::add_host_programs(
                    &rootdir,
                    &["/usr/bin/tpm2"],
                    &[("tpm2_pcrread", "tpm2"), ("tpm2_eventlog", "tpm2")],
                    &["/usr/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0"],
                )?;
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
        if let Some(m) = self.memory_mib {
            cfg.memory_mib = m;
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
        self.boot.apply(&mut cfg);
        Ok(cfg)
    }

    /// Prepares and boots the scenario in a fresh run directory.
    /// The disk images are removed afterwards (they are tens of MB each); the console
    /// log, the initramfs and the BOM stay. `VALIDATOR_KEEP_RUNS=1` keeps everything.
    pub fn run(&self) -> Result<Outcome, HarnessError> {
        let dir = paths::run_dir(&self.name)?;
        let cfg = self.prepare(&dir)?;
        let out = vm::run(&cfg, &dir);
        if std::env::var_os("VALIDATOR_KEEP_RUNS").is_none() {
            paths::remove_images(&dir);
        }
        out
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

/// The documented example reports (`docs/examples/`) and the scenarios whose boots
/// produce them.
pub const EXAMPLES: [(&str, &str); 3] = [
    ("good", "report-good.json"),
    ("tampered-module", "report-image-fault.json"),
    ("no-root", "report-hardware-fault.json"),
];

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

/// Writes `r` as the documented example `docs/examples/<file>` when
/// `VALIDATOR_WRITE_EXAMPLES` is set (the A/B tests write the fallback and both-bad
/// examples this way).
pub fn write_example_report(file: &str, r: &validator::report::Report) {
    if std::env::var_os("VALIDATOR_WRITE_EXAMPLES").is_none() {
        return;
    }
    let dir = paths::workspace().join("docs/examples");
    let text = serde_json::to_string_pretty(r).unwrap_or_default() + "\n";
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join(file), text))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
}

/// [`Scenario::named`] then [`Scenario::run_checked`].
pub fn run_named(name: Name) -> Outcome {
    Scenario::named(name)
        .unwrap_or_else(|e| panic!("scenario {name}: {e}"))
        .run_checked()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's scenario list is this enum, in this order.
    #[test]
    fn readme_lists_every_scenario() {
        let readme = std::fs::read_to_string(paths::workspace().join("README.md")).unwrap();
        let start = readme
            .find("`scripts/demo NAME` boots another scenario:")
            .expect("the README's scenario list");
        let para = &readme[start..];
        let para = &para[..para.find("\n\n").unwrap_or(para.len())];
        let listed: Vec<&str> = para
            .split('`')
            .skip(3) // `scripts/demo NAME` itself
            .step_by(2)
            .filter(|w| {
                Name::parse(w).is_some()
                    || w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
            .collect();
        let want: Vec<&str> = Name::ALL
            .iter()
            .filter(|n| **n != Name::Node)
            .map(|n| n.as_str())
            .collect();
        assert_eq!(listed, want, "README scenario list vs qemu::scenario::Name");
        for n in Name::ALL {
            assert_eq!(Name::parse(n.as_str()), Some(*n));
        }
        assert_eq!(Name::parse("nope"), None);
    }
}

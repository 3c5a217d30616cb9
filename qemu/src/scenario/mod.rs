//! Scenario types: what a boot is made of, with no set-up in them.
//!
//! Contract: a [`Scenario`] is everything one boot needs (kernel, BOM, command line, root
//! disk, initramfs extras, TPM, devices, and [`Boot`]: the boot path and the A/B layout of
//! `layout.rs`); [`Name`] is every scenario by name (`name.rs`). [`Scenario::good`] is the
//! good boot every named scenario starts from. This module imports no set-up: the
//! catalogue ([`crate::catalogue`]: `Scenario::named`) maps a name to its set-up (by
//! topic: [`crate::basic`], [`crate::ab`], [`crate::preflight`], [`crate::faults`]), and
//! [`crate::prepare`] builds and boots a scenario (`Scenario::prepare`, `run`,
//! `run_checked`, `bed`), returning a typed [`crate::vm::Outcome`].
//!
//! Limits: x86-64 guests; kernels from `scripts/provision` ([`paths::kernel`]).

use std::path::PathBuf;

use validator::config::bom::Bom;

use crate::paths::{self, Kernel};
use crate::HarnessError;

mod layout;
mod name;

pub use layout::{
    gate_config, slot_bom, Boot, BootPath, EspCondition, KernelSignature, RevokeB, RootSystem,
    Roots, SlotImage, TwoSlots, UkiForm, ESP_DISK, ESP_MODULES,
};
pub use name::Name;

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
    /// Modules packed re-signed by `sign-file <hash>` with OVMF's snakeoil key, as
    /// `(module, hash)`. With any, the kernel is started through OVMF's snakeoil variable
    /// store (the snakeoil certificate in `db`, Secure Boot off), so it trusts that key,
    /// and `snake.pem` is written next to the BOM for its `policy.trust`.
    pub snakeoil_signed: Vec<(String, String)>,
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
    /// Emulated devices beyond the disks (NVMe behind a set link, VGA, an NVMe
    /// controller to hot-plug).
    pub devices: Vec<crate::hw::Device>,
    /// Plug the hot-plug devices ([`crate::hw::Device::HotplugNvme`]) into the running
    /// node when the console shows this (A/B nodes).
    pub hotplug_on: Option<String>,
    /// VM memory (default: `VmConfig`'s).
    pub memory_mib: Option<u32>,
    /// vCPUs (default: `VmConfig`'s, one).
    pub cpus: Option<u32>,
    /// The boot path (kernel direct, or OVMF with GRUB or systemd-boot), the A/B slots,
    /// reboot following, power cuts and disk throttling ([`Boot`]).
    pub boot: Boot,
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
            snakeoil_signed: Vec::new(),
            verity: None,
            tpm_banks: Some(vec!["sha1".into(), "sha256".into()]),
            kill_tpm_on: None,
            root_tpm_tools: false,
            root_modules: None,
            devices: Vec::new(),
            hotplug_on: None,
            memory_mib: None,
            cpus: None,
            boot: Boot::default(),
        })
    }
}

/// The documented example reports (`docs/examples/`) and the scenarios whose boots
/// produce them.
pub const EXAMPLES: [(&str, &str); 3] = [
    ("good", "report-good.json"),
    ("tampered-module", "report-image-fault.json"),
    ("no-root", "report-hardware-fault.json"),
];

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

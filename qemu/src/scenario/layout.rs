//! How a scenario boots: the boot path (kernel direct, OVMF with GRUB or systemd-boot),
//! the A/B layout ([`TwoSlots`]: each slot's kernel, BOM, root and faults, the ESP's
//! condition, the boot loader's initial state), reboot following, power cuts and
//! throttled writes ([`Boot`]).
//!
//! Contract: descriptions only. [`crate::ab::prepare`] builds the A/B node these types
//! describe; [`Boot::apply`] puts the run-time settings into a [`VmConfig`];
//! [`slot_bom`] and [`gate_config`] derive each slot's BOM and the gate's `[slot]`
//! section. Nothing here builds an image or boots a VM.
//!
//! Limits: two slots, A and B; x86-64 only.

use std::path::PathBuf;

use validator::config::bom::{self as vbom, Bom, ModuleName, RootHashSource};

use crate::firmware::{self, Loader, Slot};
use crate::paths::Kernel;
use crate::vm::{KillAt, Throttle, VmConfig};

use super::Scenario;

/// How the VM starts the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BootPath {
    /// QEMU's `-kernel`/`-initrd`/`-append` (SeaBIOS); fastest.
    #[default]
    Direct,
    /// OVMF, then GRUB (`grub-mkstandalone`) with the shipped `grub.cfg` and `grubenv`.
    Grub,
    /// OVMF, then systemd-boot with counted BLS entries.
    SystemdBoot,
    /// OVMF with Secure Boot on and Microsoft's keys ([`crate::firmware::Ovmf::secure_boot`]),
    /// then Debian's signed shim and signed GRUB ([`Loader::ShimGrub`]) with the shipped
    /// `grub.cfg` and `grubenv`; the slots' kernels are Debian's signed ones.
    SecureBoot,
}

/// What each slot's root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Roots {
    /// Plain ext4 labelled `root-A` / `root-B`, named by `root=PARTLABEL=root-<slot>`
    /// where the boot path carries per-slot options (direct, systemd-boot); under GRUB
    /// only a BOM `[slot] root` template names it.
    Plain,
    /// A dm-verity root per slot (DPS partition types, labels `root-A`, `root-A-verity`,
    /// `root-A-sig`); the trusted root hash comes from the signature partition (named by
    /// `validator.verity_sig=PARTLABEL=root-<slot>-sig` where options are per slot) or
    /// from the slot's BOM (which then alone finds the slot's partitions, by the PARTUUIDs
    /// made from the root hash).
    Verity(RootHashSource),
}

impl Roots {
    /// The options that name `slot`'s root on the command line (where the boot path can
    /// carry options per slot).
    pub fn slot_options(self, slot: Slot) -> String {
        match self {
            Roots::Plain => format!("root=PARTLABEL=root-{slot}"),
            Roots::Verity(RootHashSource::Signature) => {
                format!("validator.verity_sig=PARTLABEL=root-{slot}-sig")
            }
            Roots::Verity(RootHashSource::Bom) => String::new(),
        }
    }
}

/// One slot's image: what differs between A and B.
#[derive(Debug, Clone)]
pub struct SlotImage {
    pub kernel: Kernel,
    /// The slot's BOM (its `image_id` ends in `-A` / `-B` by default, so the report
    /// tells which initramfs ran).
    pub bom: Bom,
    /// Packed with one byte of the ELF body flipped.
    pub tampered_modules: Vec<String>,
    /// Module files packed in place of the kernel's.
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Shell the slot root's init runs after its marker (after the scenario's
    /// `root_extra`).
    pub root_extra: String,
    /// What is done to the slot's verity root ([`Roots::Verity`] only).
    pub verity: crate::verity::Variant,
    /// Command-line options of this slot alone (direct and systemd-boot only).
    pub options: String,
    /// What is done to the Authenticode signature of the slot's kernel on the ESP.
    pub kernel_signature: KernelSignature,
    /// Modules packed re-signed by OVMF's snakeoil key, standing for a fleet's own key,
    /// as `(module, hash)` (see [`crate::initramfs::Extras::snakeoil_signed`]).
    pub snakeoil_signed: Vec<(String, String)>,
    /// Modules put re-signed by the snakeoil key under `/fleet-modules/` in the slot's
    /// root (`<name>.ko`), for the root to `insmod` itself: the kernel's own verdict.
    pub root_snakeoil_modules: Vec<String>,
    /// With [`KernelSignature::Fleet`]: a `.sbat` section added to the kernel before it is
    /// signed (as a kernel built with `CONFIG_EFI_SBAT_FILE` carries one), this text.
    pub kernel_sbat: Option<String>,
    /// The slot as a Unified Kernel Image on the ESP (`/<slot>/linux.efi`, which the
    /// shipped grub.cfg chainloads), and what is done to it; `None`: kernel and initramfs.
    pub uki: Option<UkiForm>,
    /// A hardware fixture tree of `validator/tests/fixtures/hw` (by variant name), copied
    /// to `/hw-fixture` in the slot's root, for `validator.test_hw_fixture=/hw-fixture`.
    pub hw_fixture: Option<String>,
}

/// A slot's Unified Kernel Image: made by `mkinitramfs::uki` from the slot's kernel (as
/// on the ESP), initramfs and command line (`validator.slot=<slot>` and the node's), and
/// signed by OVMF's snakeoil key (the fleet's, in these scenarios), then changed or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UkiForm {
    /// As built and signed.
    Signed,
    /// One byte of the `.initrd` section flipped after signing.
    InitrdFlipped,
    /// The end of the `.cmdline` section overwritten with `init=/bin/sh` after signing.
    CmdlineEdited,
    /// Never signed.
    Unsigned,
    /// Signed by a key made for the run, in neither `db` nor the MOK list.
    ForeignKey,
}

/// What runs in the slots' roots after the gate's `switch_root`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RootSystem {
    /// The busybox script of [`crate::rootfs`]: prints what it sees, powers off (fast).
    #[default]
    Busybox,
    /// A Debian 12 system with systemd as PID 1 ([`crate::debroot`]).
    Debian,
}

/// The slot kernel's Authenticode signature on the ESP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelSignature {
    /// Debian's, as shipped.
    #[default]
    AsShipped,
    /// Removed (`sbattach --remove`).
    Stripped,
    /// Removed, then signed with `sbsign` by a key made for the run, which nothing trusts.
    Untrusted,
    /// A fleet build: removed, eight bytes appended (so its Authenticode digest is its
    /// own, not that of the shipped kernel the other slot boots), then signed with
    /// `sbsign` by OVMF's snakeoil key (the fleet's, in these scenarios).
    Fleet,
}

/// What the node's `dbx` revokes of slot B's kernel, beside the firmware's own entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeB {
    /// Its SHA-256 Authenticode digest (`EFI_CERT_SHA256`).
    Digest,
    /// The certificate that signed it (`EFI_CERT_X509`).
    Signer,
}

/// The state of the node's ESP (the fault matrix breaks it in these ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EspCondition {
    /// A partition of the node's disk, as built.
    #[default]
    Present,
    /// No ESP at all (direct boots only: nothing else could start a boot loader).
    Absent,
    /// Filled to its last cluster by one file: nothing can be created on it (files that
    /// exist can still be rewritten in place).
    Full,
    /// On a second disk of its own that QEMU attaches read-only (`readonly=on`: the
    /// guest sees a write-protected device), as an ESP on locked media.
    ReadOnlyDisk,
    /// A grubenv whose signature line is damaged (one byte): GRUB cannot load it.
    CorruptGrubenv,
    /// The grubenv's cluster chain broken after its first cluster (the FAT entry linking
    /// it to the second marked free, in both FATs; `Esp::break_chain`): GRUB's and the
    /// kernel's FAT readers both refuse the file.
    GrubenvBrokenChain,
}

/// The disk image of an ESP on a disk of its own ([`EspCondition::ReadOnlyDisk`]).
pub const ESP_DISK: &str = "esp-disk.img";

/// The A/B layout.
#[derive(Debug, Clone)]
pub struct TwoSlots {
    pub roots: Roots,
    /// What the roots run after the handover.
    pub system: RootSystem,
    pub a: SlotImage,
    pub b: SlotImage,
    /// GRUB's initial `grubenv` variables (default: both good, none tried, A first).
    pub grubenv: Vec<(String, String)>,
    /// systemd-boot's initial tries per entry (`slot-a+3.conf`); `None`: no counting.
    pub tries: Option<u32>,
    /// The slot a direct boot starts.
    pub direct_slot: Slot,
    /// The loader whose files the ESP holds on a direct boot (for code that reads the
    /// boot state; nothing runs it).
    pub direct_esp: Loader,
    /// The ESP as built, or broken ([`EspCondition`]).
    pub esp: EspCondition,
    /// Under Secure Boot: OVMF's snakeoil certificate (the fleet's, in these scenarios)
    /// enrolled in `db` next to Microsoft's.
    pub db_snakeoil: bool,
    /// Under Secure Boot: OVMF's snakeoil certificate enrolled as a machine owner key
    /// (`MokList`, as MokManager leaves it after `mokutil --import`), which shim hands
    /// the kernel as `MokListRT`.
    pub mok_snakeoil: bool,
    /// With [`TwoSlots::mok_snakeoil`]: the `MokListTrusted` variable `mokutil
    /// --untrust-mok` leaves, so shim does not set `MokListTrustedRT` and the kernel keeps
    /// the MOK list in its platform keyring instead of its machine keyring.
    pub mok_untrusted: bool,
    /// Files put in `/<slot>/linux.efi.extra.d/` on the ESP (name, content), where
    /// systemd-stub looks for credentials (`*.cred`) and system extensions (`*.raw`)
    /// that are not part of the signed image.
    pub uki_extra: Vec<(String, Vec<u8>)>,
    /// Words the installed grub.cfg adds after a Unified Kernel Image's path on its
    /// `chainloader` line (the shipped one adds none).
    pub grub_uki_words: Option<String>,
    /// Under Secure Boot: what `dbx` revokes of slot B's kernel as it is on the ESP.
    pub revoke_b: Option<RevokeB>,
    /// Under Secure Boot: shim's `SbatLevel` variable as shim keeps it (non-volatile,
    /// boot services only, a date newer than shim's own), which shim applies and hands
    /// the kernel as `SbatLevelRT`; `None`: shim's own level.
    pub sbat_level: Option<String>,
    /// Under Secure Boot: shim's `SHIM_VERBOSE` variable set, so shim prints its
    /// reasons (an SBAT revocation names the component) on the console.
    pub shim_verbose: bool,
    /// Debian roots ([`RootSystem::Debian`]): the shipped `validator-recheck.timer`
    /// enabled, with a test-bed drop-in that re-checks every this many seconds (the
    /// first run 20 s after boot); `None`: the units are installed, not enabled.
    pub recheck_every_s: Option<u32>,
}

/// The slot's BOM made from `base`: `image_id` suffixed with `-<slot>`, the FAT modules
/// in `modules.load` (so the init can mount the ESP), and for verity roots a `[verity]`
/// section (with `dm_verity` loaded and, for signed roots, `trusted.pem` trusted) unless
/// `base` has one.
pub fn slot_bom(base: &Bom, slot: Slot, roots: Roots) -> Bom {
    let mut b = base.clone();
    b.image_id = vbom::Version(format!("{}-{slot}", base.image_id));
    for m in ESP_MODULES {
        if !b.modules.load.iter().any(|x| x.normalized() == *m) {
            b.modules.load.push(ModuleName((*m).into()));
        }
    }
    if let Roots::Verity(source) = roots {
        if !b.modules.load.iter().any(|x| x.normalized() == "dm_verity") {
            b.modules.load.push(ModuleName("dm_verity".into()));
        }
        if b.verity.is_none() {
            b.verity = Some(vbom::Verity {
                source,
                algorithm: Some(vbom::VerityAlgorithm("sha256".into())),
                data_block_size: Some(4096),
                hash_block_size: Some(4096),
                critical: vec![
                    vbom::RootPath("/sbin/init".into()),
                    vbom::RootPath("/bin/busybox".into()),
                ],
                ..Default::default()
            });
        }
        if source == RootHashSource::Signature && !b.policy.trust.iter().any(|t| t == "trusted.pem")
        {
            b.policy.trust.push("trusted.pem".into());
        }
    }
    b
}

/// The modules the init needs to mount the FAT ESP (Debian's 6.1 has them as modules:
/// `vfat` over `fat`, code page 437 and the `ascii` I/O charset, the kernel's defaults).
pub const ESP_MODULES: &[&str] = &["vfat", "fat", "nls_cp437", "nls_ascii"];

impl TwoSlots {
    /// Both slots from `base`'s kernel and BOM ([`slot_bom`]), nothing altered.
    pub fn new(base: &Scenario, roots: Roots) -> TwoSlots {
        let image = |slot| SlotImage {
            kernel: base.kernel.clone(),
            bom: slot_bom(&base.bom, slot, roots),
            tampered_modules: Vec::new(),
            module_overrides: Vec::new(),
            root_extra: String::new(),
            verity: crate::verity::Variant::Good,
            options: String::new(),
            kernel_signature: KernelSignature::AsShipped,
            snakeoil_signed: Vec::new(),
            root_snakeoil_modules: Vec::new(),
            kernel_sbat: None,
            uki: None,
            hw_fixture: None,
        };
        TwoSlots {
            roots,
            system: RootSystem::Busybox,
            a: image(Slot::A),
            b: image(Slot::B),
            grubenv: firmware::default_grubenv(),
            tries: Some(3),
            direct_slot: Slot::A,
            direct_esp: Loader::Grub,
            esp: EspCondition::Present,
            db_snakeoil: false,
            mok_snakeoil: false,
            mok_untrusted: false,
            uki_extra: Vec::new(),
            grub_uki_words: None,
            revoke_b: None,
            sbat_level: None,
            shim_verbose: false,
            recheck_every_s: None,
        }
    }

    pub fn slot(&self, s: Slot) -> &SlotImage {
        match s {
            Slot::A => &self.a,
            Slot::B => &self.b,
        }
    }

    pub fn slot_mut(&mut self, s: Slot) -> &mut SlotImage {
        match s {
            Slot::A => &mut self.a,
            Slot::B => &mut self.b,
        }
    }
}

/// How a scenario boots (the default: kernel direct, one root, `-no-reboot`).
#[derive(Debug, Clone, Default)]
pub struct Boot {
    pub path: BootPath,
    /// The A/B layout; a firmware path without one gets [`TwoSlots::new`] with plain
    /// roots.
    pub slots: Option<TwoSlots>,
    /// Follow reboots, up to this many boots ([`VmConfig::follow_reboots`]); the VM's
    /// timeout is then per boot.
    pub follow_reboots: Option<u32>,
    pub kill_at: Option<KillAt>,
    pub throttle: Option<Throttle>,
    /// The console text that starts a boot ([`VmConfig::split_at`]).
    pub split_at: Option<String>,
    /// At least this many seconds per boot (a systemd root takes longer than the
    /// default `VALIDATOR_VM_TIMEOUT`).
    pub min_timeout_s: Option<u64>,
}

impl Boot {
    /// Whether [`crate::ab::prepare`] builds the scenario (firmware path or A/B layout).
    pub fn two_slots(&self) -> bool {
        self.path != BootPath::Direct || self.slots.is_some()
    }

    /// Puts reboot following, the power cut and throttling into `cfg`.
    pub fn apply(&self, cfg: &mut VmConfig) {
        if let Some(s) = self.min_timeout_s {
            cfg.timeout = cfg.timeout.max(std::time::Duration::from_secs(s));
        }
        cfg.follow_reboots = self.follow_reboots;
        if let Some(n) = self.follow_reboots {
            cfg.timeout = cfg.timeout.saturating_mul(n.max(1));
        }
        cfg.kill_at = self.kill_at.clone();
        cfg.throttle = self.throttle;
        cfg.split_at = self.split_at.clone();
    }
}

impl TwoSlots {
    /// Puts the gate's `[slot]` section into both slots' BOMs: the init's slot handling is
    /// on.
    pub fn with_gate(&mut self, cfg: &vbom::Slot) {
        self.a.bom.slot = Some(cfg.clone());
        self.b.bom.slot = Some(cfg.clone());
    }
}

/// The gate's `[slot]` section for a node booted by `path` with `roots`: the boot loader,
/// and the slot's root named by template where the boot loader gives both slots one
/// command line (GRUB).
pub fn gate_config(path: BootPath, roots: Roots) -> vbom::Slot {
    let mut toml = String::new();
    if path == BootPath::SystemdBoot {
        toml.push_str("bootloader = \"systemd-boot\"\n");
    }
    match roots {
        Roots::Plain => toml.push_str("root = \"PARTLABEL=root-{slot}\"\n"),
        Roots::Verity(RootHashSource::Signature) => {
            toml.push_str("verity_sig = \"PARTLABEL=root-{slot}-sig\"\n")
        }
        Roots::Verity(RootHashSource::Bom) => {}
    }
    // The test bed's own configuration: a bad value here is a bug of the test bed.
    match vbom::Slot::from_toml(&toml) {
        Ok(c) => c,
        Err(e) => panic!("test bed [slot] section {toml:?}: {e}"),
    }
}

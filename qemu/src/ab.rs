//! The A/B test node: one disk with an ESP and, for each slot, its own root, kernel,
//! initramfs (built from the slot's own BOM) and boot-loader state; booted directly or
//! through OVMF with GRUB or systemd-boot; with reboots followed, power cuts and slow
//! writes on request.
//!
//! Contract: a [`Scenario`] whose [`Boot`] asks for a firmware boot path or carries
//! [`TwoSlots`] is prepared by [`prepare`]: in `<run dir>/slot-A` and `slot-B` each slot
//! gets a root tree (the test root of [`crate::rootfs`] with `/etc/slot` holding `A` or
//! `B`, printed by its init as `ROOT-SLOT A`), a root partition made from it (plain ext4
//! labelled `root-A`, or a signed dm-verity root labelled `root-A`, `root-A-verity`,
//! `root-A-sig`), its BOM (`bom.toml`; the verity root hash filled in when the BOM pins
//! it) and its initramfs; then the ESP ([`crate::firmware::build_esp`]: both slots'
//! kernels and initramfs images, GRUB's `grubenv` or systemd-boot's counted entries) and
//! the GPT disk `disk.img` = ESP + slot A's partitions + slot B's. [`Scenario::bed`]
//! keeps that disk for several power-ons and for reading the ESP back on the host
//! ([`Bed::esp`]); [`Scenario::run`] boots once and removes the images.
//!
//! The kernel command line is the scenario's `cmdline` for both slots, plus
//! `validator.slot=<slot>`; where the boot path carries options per slot (direct boots,
//! systemd-boot entries) each slot also gets the options that name its own root
//! ([`Roots::slot_options`]) and its [`SlotImage::options`]. GRUB's shipped `grub.cfg`
//! gives both slots the same line (from `node.cfg`), so there the slot's root must follow
//! from `validator.slot=` and the BOM's `[slot]` templates (`root =
//! "PARTLABEL=root-{slot}"`, `verity_sig = "PARTLABEL=root-{slot}-sig"`), or from the
//! slot's BOM alone ([`Roots::Verity`] with `RootHashSource::Bom`: the initramfs pins its
//! root hash, which names its partitions).
//!
//! Limits: x86-64 only; both slots use one verity signing key each (made per slot);
//! the ESP always holds both slots; TPM state does not survive a power-off.

use std::path::{Path, PathBuf};

use validator::config::bom::{self as vbom, Bom, ModuleName, RootHashSource};

use crate::disk::{self, Content, PartitionSpec};
use crate::firmware::{self, Esp, EspSlot, EspSpec, Loader, Ovmf};
use crate::paths::{self, Kernel};
use crate::scenario::Scenario;
use crate::vm::{self, KillAt, Outcome, Run, Throttle, VmConfig};
use crate::HarnessError;

pub use crate::firmware::Slot;

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
}

/// The disk image of an ESP on a disk of its own ([`EspCondition::ReadOnlyDisk`]).
pub const ESP_DISK: &str = "esp-disk.img";

/// The A/B layout.
#[derive(Debug, Clone)]
pub struct TwoSlots {
    pub roots: Roots,
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
        };
        TwoSlots {
            roots,
            a: image(Slot::A),
            b: image(Slot::B),
            grubenv: firmware::default_grubenv(),
            tries: Some(3),
            direct_slot: Slot::A,
            direct_esp: Loader::Grub,
            esp: EspCondition::Present,
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
}

impl Boot {
    /// Whether [`prepare`] builds the scenario (firmware path or A/B layout).
    pub fn two_slots(&self) -> bool {
        self.path != BootPath::Direct || self.slots.is_some()
    }

    /// Puts reboot following, the power cut and throttling into `cfg`.
    pub fn apply(&self, cfg: &mut VmConfig) {
        cfg.follow_reboots = self.follow_reboots;
        if let Some(n) = self.follow_reboots {
            cfg.timeout = cfg.timeout.saturating_mul(n.max(1));
        }
        cfg.kill_at = self.kill_at.clone();
        cfg.throttle = self.throttle;
        cfg.split_at = self.split_at.clone();
    }
}

/// Printed by a slot root's init: `ROOT-SLOT A`.
pub const ROOT_SLOT: &str = "ROOT-SLOT ";
/// Printed by the shipped `grub.cfg` when it picks a slot: `boot gate: slot A (...)`.
pub const GRUB_SLOT: &str = "boot gate: slot ";
/// Printed by the shipped `grub.cfg` before it halts.
pub const GRUB_NO_SLOT: &str = "boot gate: no bootable slot";

/// The slot whose root's init ran in this boot.
pub fn root_slot(o: &Outcome) -> Option<Slot> {
    o.console
        .lines()
        .find_map(|l| l.strip_prefix(ROOT_SLOT))
        .and_then(|s| Slot::parse(s.trim()))
}

/// The slot GRUB picked in this boot.
pub fn grub_slot(o: &Outcome) -> Option<Slot> {
    let i = o.console.find(GRUB_SLOT)?;
    Slot::parse(o.console[i + GRUB_SLOT.len()..].get(..1)?)
}

/// The `validator.slot=` the kernel was started with in this boot.
pub fn cmdline_slot(o: &Outcome) -> Option<Slot> {
    let line = o
        .console
        .lines()
        .find(|l| l.contains("Kernel command line:"))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("validator.slot="))
        .and_then(Slot::parse)
}

/// The paths of one slot's built image.
#[derive(Debug, Clone)]
struct BuiltSlot {
    parts: Vec<PartitionSpec>,
    initrd: PathBuf,
}

fn build_slot(
    s: &Scenario,
    two: &TwoSlots,
    slot: Slot,
    dir: &Path,
) -> Result<BuiltSlot, HarnessError> {
    let img = two.slot(slot);
    let sdir = dir.join(format!("slot-{slot}"));
    std::fs::create_dir_all(&sdir).map_err(|e| HarnessError::io(&sdir, e))?;
    let rootdir = sdir.join("rootfs");
    let mut extra = format!("echo \"{ROOT_SLOT}$(cat /etc/slot)\"\n");
    for e in [&s.root_extra, &img.root_extra] {
        if !e.is_empty() {
            extra.push_str(e);
            extra.push('\n');
        }
    }
    if s.root_tpm_tools {
        extra.push_str(crate::scenario::TPM_ROOT_SCRIPT);
        extra.push('\n');
    }
    crate::rootfs::build(&rootdir, &extra)?;
    let slot_file = rootdir.join("etc/slot");
    std::fs::write(&slot_file, format!("{slot}\n")).map_err(|e| HarnessError::io(&slot_file, e))?;
    if s.root_tpm_tools {
        crate::rootfs::add_host_programs(
            &rootdir,
            &["/usr/bin/tpm2"],
            &[("tpm2_pcrread", "tpm2"), ("tpm2_eventlog", "tpm2")],
            &["/usr/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0"],
        )?;
    }
    let mut bom = img.bom.clone();
    let parts = match two.roots {
        Roots::Plain => {
            let size = crate::rootfs::image_size_mib(&rootdir);
            vec![PartitionSpec::ext4(&format!("root-{slot}"), &rootdir, size)]
        }
        Roots::Verity(_) => {
            let v = crate::verity::build(&rootdir, &sdir, img.verity)?;
            if v.cert != sdir.join("trusted.pem") {
                std::fs::copy(&v.cert, sdir.join("trusted.pem"))
                    .map_err(|e| HarnessError::io(&v.cert, e))?;
            }
            if let Some(cfg) = bom.verity.as_mut() {
                if cfg.source == RootHashSource::Bom && cfg.root_hash.is_none() {
                    cfg.root_hash = Some(vbom::HexString(v.root_hash.clone()));
                }
            }
            let mut parts = v.disk_parts;
            for (p, suffix) in parts.iter_mut().zip(["", "-verity", "-sig"]) {
                p.label = format!("root-{slot}{suffix}");
            }
            parts
        }
    };
    let bom_path = sdir.join("bom.toml");
    std::fs::write(
        &bom_path,
        bom.to_toml()
            .map_err(|e| HarnessError::Setup(format!("slot {slot} BOM as TOML: {e}")))?,
    )
    .map_err(|e| HarnessError::io(&bom_path, e))?;
    let initrd = sdir.join("initrd.img");
    let extras = crate::initramfs::Extras {
        files: s.extra_initramfs_files.clone(),
        module_overrides: img.module_overrides.clone(),
        tampered_modules: img.tampered_modules.clone(),
    };
    crate::initramfs::build(&img.kernel, &bom_path, &extras, &initrd, &sdir)?;
    Ok(BuiltSlot { parts, initrd })
}

/// The scenario's A/B layout (the default one for a firmware path without one).
fn layout(s: &Scenario) -> TwoSlots {
    s.boot
        .slots
        .clone()
        .unwrap_or_else(|| TwoSlots::new(s, Roots::Plain))
}

/// The loader whose files the ESP holds for `path`.
fn esp_loader(path: BootPath, two: &TwoSlots) -> Loader {
    match path {
        BootPath::Grub => Loader::Grub,
        BootPath::SystemdBoot => Loader::SystemdBoot,
        BootPath::Direct => two.direct_esp,
    }
}

/// Builds both slots, the ESP and `<dir>/disk.img`; returns the VM to boot.
pub fn prepare(s: &Scenario, dir: &Path) -> Result<VmConfig, HarnessError> {
    let two = layout(s);
    let loader = esp_loader(s.boot.path, &two);
    let per_slot_options = loader != Loader::Grub || s.boot.path == BootPath::Direct;
    let options = |slot: Slot| {
        let mut o = String::new();
        if per_slot_options {
            o = two.roots.slot_options(slot);
        }
        let own = &two.slot(slot).options;
        if !own.is_empty() {
            o = format!("{o} {own}");
        }
        o.trim().to_string()
    };
    let mut parts = Vec::new();
    let mut esp_slots = Vec::new();
    let mut built = Vec::new();
    for slot in Slot::ALL {
        let b = build_slot(s, &two, slot, dir)?;
        esp_slots.push(EspSlot {
            slot,
            vmlinuz: two.slot(slot).kernel.vmlinuz.clone(),
            initrd: b.initrd.clone(),
            options: if loader == Loader::Grub {
                two.slot(slot).options.clone()
            } else {
                options(slot)
            },
        });
        built.push(b);
    }
    let mut spec = EspSpec::new(loader, esp_slots);
    spec.cmdline = s.cmdline.clone();
    spec.grubenv = two.grubenv.clone();
    spec.tries = two.tries;
    let esp_img = dir.join("esp.img");
    if two.esp == EspCondition::Absent && s.boot.path != BootPath::Direct {
        return Err(HarnessError::Setup(
            "an ESP-less node can only be booted directly".into(),
        ));
    }
    let esp_part = PartitionSpec {
        label: firmware::ESP_LABEL.into(),
        type_uuid: firmware::ESP_TYPE.into(),
        uuid: None,
        content: Content::Raw(esp_img.clone()),
    };
    let mut esp_disk = None;
    if two.esp != EspCondition::Absent {
        firmware::build_esp(&spec, &esp_img, &dir.join("esp-files"))?;
        match two.esp {
            EspCondition::Full => {
                crate::firmware::fill_fat(&esp_img)?;
            }
            EspCondition::CorruptGrubenv => {
                let esp = Esp::image(&esp_img);
                let mut env = esp.read(firmware::GRUBENV_PATH)?;
                // "# GRUB Environment Block": the 'G' becomes 'F'.
                if let Some(b) = env.get_mut(2) {
                    *b ^= 0x01;
                }
                esp.overwrite_in_place(firmware::GRUBENV_PATH, &env)?;
            }
            _ => {}
        }
        if two.esp == EspCondition::ReadOnlyDisk {
            let d = dir.join(ESP_DISK);
            disk::build_disk(&d, std::slice::from_ref(&esp_part), dir)?;
            esp_disk = Some(d);
        } else {
            parts.push(esp_part);
        }
    }
    for b in &built {
        parts.extend(b.parts.iter().cloned());
    }
    let disk_img = dir.join("disk.img");
    disk::build_disk(&disk_img, &parts, dir)?;
    let mut cfg = match s.boot.path {
        BootPath::Direct => {
            let slot = two.direct_slot;
            let i = Slot::ALL.iter().position(|x| *x == slot).unwrap_or(0);
            let mut c = VmConfig::new(&two.slot(slot).kernel.vmlinuz, &built[i].initrd);
            c.append = format!("validator.slot={slot} {} {}", s.cmdline, options(slot))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            c
        }
        BootPath::Grub | BootPath::SystemdBoot => VmConfig::uefi(Ovmf::fresh(dir)?),
    };
    cfg.disks.push(disk_img);
    if let Some(d) = esp_disk {
        // After the node's disk (`vdb`), write-protected as the guest sees it.
        cfg.extra_args.extend([
            "-drive".into(),
            format!("file={},format=raw,if=none,id=esp,readonly=on", d.display()),
            "-device".into(),
            "virtio-blk-pci,drive=esp".into(),
        ]);
    }
    cfg.tpm = s.tpm_banks.clone();
    cfg.kill_tpm_on = s.kill_tpm_on.clone();
    s.boot.apply(&mut cfg);
    Ok(cfg)
}

/// A prepared A/B node kept for several power-ons: its run directory, VM and disk. The
/// disk images are removed when it is dropped (`VALIDATOR_KEEP_RUNS=1` keeps them).
#[derive(Debug)]
pub struct Bed {
    pub dir: PathBuf,
    pub cfg: VmConfig,
    pub disk: PathBuf,
    /// The loader whose files the ESP holds.
    pub loader: Loader,
    /// The layout it was built from (its initial boot-loader state included).
    pub slots: TwoSlots,
    power_ons: std::cell::Cell<u32>,
}

impl Bed {
    /// The ESP of the node's disk (or of its own disk, [`EspCondition::ReadOnlyDisk`]),
    /// for reading it on the host.
    pub fn esp(&self) -> Result<Esp, HarnessError> {
        if self.slots.esp == EspCondition::ReadOnlyDisk {
            return Esp::in_disk(&self.dir.join(ESP_DISK));
        }
        Esp::in_disk(&self.disk)
    }

    /// Puts the boot loader's state back as it was built: GRUB's `grubenv` rewritten in
    /// place with the initial variables only, systemd-boot's entries renamed to their
    /// initial tries.
    pub fn reset_boot_state(&self) -> Result<(), HarnessError> {
        let esp = self.esp()?;
        match self.loader {
            Loader::Grub => {
                let fresh = self.dir.join("grubenv.fresh");
                let _ = std::fs::remove_file(&fresh);
                disk::run(
                    std::process::Command::new("grub-editenv")
                        .arg(&fresh)
                        .arg("create"),
                )?;
                let mut c = std::process::Command::new("grub-editenv");
                c.arg(&fresh).arg("set");
                for (k, v) in &self.slots.grubenv {
                    c.arg(format!("{k}={v}"));
                }
                disk::run(&mut c)?;
                let bytes = std::fs::read(&fresh).map_err(|e| HarnessError::io(&fresh, e))?;
                esp.overwrite_in_place(firmware::GRUBENV_PATH, &bytes)
            }
            Loader::SystemdBoot => {
                for name in esp.list(firmware::ENTRIES_DIR)? {
                    for slot in Slot::ALL {
                        let want = firmware::entry_name(slot, self.slots.tries);
                        let prefix = format!("slot-{}", slot.lower());
                        let rest = name.strip_prefix(&prefix).unwrap_or("");
                        if (rest.starts_with('+') || rest == ".conf") && name != want {
                            esp.rename(&format!("{}/{name}", firmware::ENTRIES_DIR), &want)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Copies the disk and the firmware's variable store to `<dir>/saved-<name>/`, so a
    /// series of trials can start each from the same state ([`Bed::restore`]).
    pub fn save(&self, name: &str) -> Result<(), HarnessError> {
        let to = self.dir.join(format!("saved-{name}"));
        std::fs::create_dir_all(&to).map_err(|e| HarnessError::io(&to, e))?;
        for f in self.state_files() {
            let dst = to.join(f.file_name().unwrap_or_default());
            std::fs::copy(&f, &dst).map_err(|e| HarnessError::io(&f, e))?;
        }
        Ok(())
    }

    /// Puts back the disk and variable store [`Bed::save`] copied under `name`.
    pub fn restore(&self, name: &str) -> Result<(), HarnessError> {
        let from = self.dir.join(format!("saved-{name}"));
        for f in self.state_files() {
            let src = from.join(f.file_name().unwrap_or_default());
            std::fs::copy(&src, &f).map_err(|e| HarnessError::io(&src, e))?;
        }
        Ok(())
    }

    fn state_files(&self) -> Vec<PathBuf> {
        let mut v = vec![self.disk.clone()];
        if let Some(fw) = &self.cfg.firmware {
            v.push(fw.vars.clone());
        }
        v
    }

    /// Powers the node on (the disk and the firmware's variables as the last power-on
    /// left them) and returns every boot of the run; logs go to `<dir>/power-<n>/`.
    pub fn boot(&self) -> Result<Run, HarnessError> {
        self.boot_with(|_| {})
    }

    /// [`Bed::boot`] with `cfg` changed for this power-on only (a power cut, say).
    pub fn boot_with(&self, change: impl FnOnce(&mut VmConfig)) -> Result<Run, HarnessError> {
        let mut cfg = self.cfg.clone();
        change(&mut cfg);
        let n = self.power_ons.get() + 1;
        self.power_ons.set(n);
        let d = self.dir.join(format!("power-{n}"));
        std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
        vm::run_boots(&cfg, &d)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if std::env::var_os("VALIDATOR_KEEP_RUNS").is_none() {
            paths::remove_images(&self.dir);
        }
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

impl Scenario {
    /// The A/B node with the gate's slot handling on ([`gate_config`]): plain roots for
    /// speed, the other scenario settings as [`Scenario::two_slots`].
    pub fn ab_gate(path: BootPath, roots: Roots) -> Result<Scenario, HarnessError> {
        let mut s = Scenario::two_slots(path, roots)?;
        let cfg = gate_config(path, roots);
        if let Some(two) = s.boot.slots.as_mut() {
            two.with_gate(&cfg);
        }
        // Kexec'd kernels count as boots too.
        s.boot.split_at = Some("Linux version ".into());
        Ok(s)
    }

    /// The A/B node: both slots from the example BOM ([`TwoSlots::new`]) with `roots`,
    /// booted by `path`; the command line common to both slots stops with a power-off.
    pub fn two_slots(path: BootPath, roots: Roots) -> Result<Scenario, HarnessError> {
        let mut s = Scenario::good()?;
        s.name = match path {
            BootPath::Direct => "ab-direct",
            BootPath::Grub => "ab-grub",
            BootPath::SystemdBoot => "ab-systemd-boot",
        }
        .into();
        s.cmdline = match roots {
            Roots::Plain => "ro validator.on_stop=poweroff validator.root_timeout=30",
            Roots::Verity(_) => "validator.on_stop=poweroff validator.root_timeout=30",
        }
        .into();
        s.boot.path = path;
        s.boot.slots = Some(TwoSlots::new(&s, roots));
        Ok(s)
    }

    /// Prepares the scenario in a fresh run directory and keeps it for [`Bed::boot`].
    pub fn bed(&self) -> Result<Bed, HarnessError> {
        let dir = paths::run_dir(&self.name)?;
        let cfg = self.prepare(&dir)?;
        let slots = layout(self);
        let loader = esp_loader(self.boot.path, &slots);
        let disk = cfg
            .disks
            .first()
            .cloned()
            .ok_or_else(|| HarnessError::Setup(format!("scenario {}: no disk", self.name)))?;
        Ok(Bed {
            dir,
            cfg,
            disk,
            loader,
            slots,
            power_ons: std::cell::Cell::new(0),
        })
    }

    /// Prepares and powers on once, following reboots as [`Boot::follow_reboots`] says;
    /// the images are removed afterwards.
    pub fn run_boots(&self) -> Result<Run, HarnessError> {
        self.bed()?.boot()
    }
}

/// One row of [`bench_boot_paths`]: host seconds from QEMU's start.
#[derive(Debug, Clone, Copy)]
pub struct PathSample {
    pub run_init: f64,
    pub root: f64,
}

/// Boots slot A of the same A/B node (verity roots pinned by each slot's BOM, so every
/// path reaches the root) directly, through OVMF + GRUB and through OVMF + systemd-boot,
/// `runs` times each in turn, and prints the median host time from QEMU's start to the
/// kernel's "Run /init" and to the root's init, with each path's ratio to the direct boot.
pub fn bench_boot_paths(runs: usize) -> Result<Vec<(BootPath, Vec<PathSample>)>, HarnessError> {
    let paths_ = [BootPath::Direct, BootPath::Grub, BootPath::SystemdBoot];
    let mut beds = Vec::new();
    for p in paths_ {
        let s = Scenario::two_slots(p, Roots::Verity(RootHashSource::Bom))?;
        beds.push((p, s.bed()?));
    }
    let mut all: Vec<(BootPath, Vec<PathSample>)> =
        paths_.iter().map(|p| (*p, Vec::new())).collect();
    for i in 0..runs {
        for (k, (p, bed)) in beds.iter().enumerate() {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let first = r.boots.first().ok_or_else(|| {
                HarnessError::Setup(format!("{p:?}: no boot seen: {}", r.describe()))
            })?;
            if first.verdict != vm::Verdict::RootInitReached {
                return Err(HarnessError::Setup(format!(
                    "{p:?} did not reach the root: {}",
                    r.describe()
                )));
            }
            let t = |needle: &str| {
                r.seen_at(0, needle)
                    .map(|d| d.as_secs_f64())
                    .ok_or_else(|| {
                        HarnessError::Setup(format!("{p:?}: no {needle:?}: {}", r.describe()))
                    })
            };
            let sample = PathSample {
                run_init: t("Run /init as init process")?,
                root: t(crate::rootfs::MARKER)?,
            };
            println!(
                "run {}: {p:?}: Run /init at {:.2} s, root at {:.2} s",
                i + 1,
                sample.run_init,
                sample.root
            );
            all[k].1.push(sample);
        }
    }
    let med = |v: &[PathSample], f: fn(&PathSample) -> f64| {
        crate::bench::median(&v.iter().map(f).collect::<Vec<_>>())
    };
    let direct_init = med(&all[0].1, |s| s.run_init);
    let direct_root = med(&all[0].1, |s| s.root);
    println!(
        "QEMU start -> kernel's Run /init and -> root init, host seconds, median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!("path            Run /init   ratio    root       ratio");
    for (p, v) in &all {
        let (a, b) = (med(v, |s| s.run_init), med(v, |s| s.root));
        println!(
            "{:<14}  {a:>7.2} s  {:>6.2}  {b:>7.2} s  {:>6.2}",
            format!("{p:?}"),
            a / direct_init,
            b / direct_root
        );
    }
    Ok(all)
}

/// Time to recover from a bad image: host seconds from the bad slot's kernel start to the
/// good slot's root init, by kexec and by a reboot through OVMF and GRUB.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    pub kexec: Vec<f64>,
    pub reboot: Vec<f64>,
}

/// Boots the A/B node whose slot A has an image fault `runs` times each way (kexec, and
/// reboot through OVMF + GRUB), in turn, from the same boot-loader state; prints each run
/// and the medians with their ratio.
pub fn bench_recover(runs: usize) -> Result<Recovery, HarnessError> {
    use crate::scenario::Name;
    let beds = [
        ("kexec", Scenario::named(Name::AbImageFault)?.bed()?),
        ("reboot", Scenario::named(Name::AbImageFaultReboot)?.bed()?),
    ];
    let mut out = Recovery::default();
    for i in 0..runs.max(1) {
        for (how, bed) in &beds {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let fail = |why: &str| HarnessError::Setup(format!("{how}: {why}: {}", r.describe()));
            if r.boots.len() != 2 {
                return Err(fail("not two kernel boots"));
            }
            if root_slot(r.boots.last().ok_or_else(|| fail("no boot"))?) != Some(Slot::B) {
                return Err(fail("slot B's root was not reached"));
            }
            let start = r
                .seen_at(0, vm::KERNEL_BOOT_MARKER)
                .ok_or_else(|| fail("no kernel start"))?;
            let root = r
                .seen_at(1, crate::rootfs::MARKER)
                .ok_or_else(|| fail("no root marker"))?;
            let secs = root.saturating_sub(start).as_secs_f64();
            let why = r
                .boots
                .first()
                .and_then(|o| o.report.as_ref())
                .and_then(|rep| rep.reason.clone())
                .unwrap_or_default();
            println!(
                "run {}: {how}: {secs:.2} s from slot A's kernel to slot B's root",
                i + 1
            );
            println!("  slot A: {why}");
            match *how {
                "kexec" => out.kexec.push(secs),
                _ => out.reboot.push(secs),
            }
        }
    }
    let (k, b) = (
        crate::bench::median(&out.kexec),
        crate::bench::median(&out.reboot),
    );
    println!(
        "time to recover (bad slot's kernel start -> good slot's root init), host seconds, median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!("by kexec                 {k:>7.2} s   1.00");
    println!("by reboot (OVMF + GRUB)  {b:>7.2} s  {:>5.2}", b / k);
    Ok(out)
}

//! The A/B test node: one disk with an ESP and, for each slot, its own root, kernel,
//! initramfs (built from the slot's own BOM) and boot-loader state; booted directly or
//! through OVMF with GRUB or systemd-boot; with reboots followed, power cuts and slow
//! writes on request.
//!
//! Contract: a [`Scenario`] whose [`crate::scenario::Boot`] (described there, with
//! [`TwoSlots`] and the rest of the A/B layout) asks for a firmware boot path or carries
//! [`TwoSlots`] is prepared by [`prepare`] (called by `Scenario::prepare`): in
//! `<run dir>/slot-A` and `slot-B` each slot gets a root tree (the test root of
//! [`crate::rootfs`] with `/etc/slot` holding `A` or `B`, printed by its init as
//! `ROOT-SLOT A`), a root partition made from it (plain ext4 labelled `root-A`, or a
//! signed dm-verity root labelled `root-A`, `root-A-verity`, `root-A-sig`), its BOM
//! (`bom.toml`; the verity root hash filled in when the BOM pins it) and its initramfs;
//! then the ESP ([`crate::firmware::build_esp`]: both slots' kernels and initramfs
//! images, GRUB's `grubenv` or systemd-boot's counted entries) and the GPT disk
//! `disk.img` = ESP + slot A's partitions + slot B's. The Debian node's disk
//! ([`RootSystem::Debian`], `real-node`) is instead installed as an operator installs a
//! blank one, by `mkinitramfs install` from the slot directories `mkinitramfs slot` made
//! ([`crate::debroot::install_disk`]: the same layout at docs/INSTALL.md's sizes). `Scenario::bed` ([`crate::prepare`])
//! keeps that disk for several power-ons and for reading the ESP back on the host
//! ([`Bed::esp`]); `Scenario::run` boots once and removes the images.
//!
//! The A/B set-ups live here too: [`Scenario::two_slots`], [`Scenario::ab_gate`],
//! [`Scenario::node`] and [`setup`] (the catalogue's A/B scenarios; the Secure Boot ones,
//! their firmware and their slots' kernels are [`crate::secureboot`]'s); the slot readers ([`root_slot`],
//! [`grub_slot`], [`cmdline_slot`]) tell from a boot's console which slot ran. The A/B
//! benchmarks are in [`crate::bench`].
//!
//! The kernel command line is the scenario's `cmdline` for both slots, plus
//! `validator.slot=<slot>`; where the boot path carries options per slot (direct boots,
//! systemd-boot entries) each slot also gets the options that name its own root
//! ([`Roots::slot_options`]) and its [`crate::scenario::SlotImage::options`]. GRUB's
//! shipped `grub.cfg` gives both slots the same line (from `node.cfg`), so there the
//! slot's root must follow from `validator.slot=` and the BOM's `[slot]` templates
//! (`root = "PARTLABEL=root-{slot}"`, `verity_sig = "PARTLABEL=root-{slot}-sig"`), or from the
//! slot's BOM alone ([`Roots::Verity`] with `RootHashSource::Bom`: the initramfs pins its
//! root hash, which names its partitions).
//!
//! Limits: x86-64 only; both slots use one verity signing key each (made per slot);
//! the ESP always holds both slots; TPM state does not survive a power-off.

use std::path::{Path, PathBuf};

use crate::disk;
use crate::firmware::{self, Esp, EspSlot, Loader, Ovmf};
use crate::paths;
use crate::scenario::{
    gate_config, BootPath, EspCondition, Name, RootSystem, Roots, Scenario, TwoSlots, ESP_DISK,
};
use crate::vm::{self, Outcome, Run, VmConfig};
use crate::HarnessError;

pub use crate::firmware::Slot;

pub mod gpu;
mod layout;
use layout::{build_disk, build_slot, install_cmdline, install_debian, slot_dirs};

/// Printed by a slot root's init: `ROOT-SLOT A`.
pub const ROOT_SLOT: &str = "ROOT-SLOT ";
/// Printed by the shipped `grub.cfg` when it picks a slot: `boot gate: slot A (...)`.
pub const GRUB_SLOT: &str = "boot gate: slot ";
/// Printed by the shipped `grub.cfg` before it halts.
pub const GRUB_NO_SLOT: &str = "boot gate: no bootable slot";
/// Printed by the shipped `grub.cfg` when the slot's kernel does not load (then it halts).
pub const GRUB_KERNEL_REFUSED: &str = "its kernel did not load; halting";

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
        BootPath::SecureBoot => Loader::ShimGrub,
        BootPath::SystemdBoot => Loader::SystemdBoot,
        BootPath::Direct => two.direct_esp,
    }
}

/// Builds both slots, the ESP and `<dir>/disk.img`; returns the VM to boot.
pub fn prepare(s: &Scenario, dir: &Path) -> Result<VmConfig, HarnessError> {
    let two = layout(s);
    let loader = esp_loader(s.boot.path, &two);
    let per_slot_options = !loader.is_grub() || s.boot.path == BootPath::Direct;
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
    let mut esp_slots = Vec::new();
    let mut built = Vec::new();
    for slot in Slot::ALL {
        crate::progress(&format!(
            "slot {slot}: root filesystem{}, BOM and initramfs (seconds)",
            if matches!(two.roots, Roots::Verity(_)) {
                ", verity tree and signed root hash"
            } else {
                ""
            }
        ));
        let b = build_slot(s, &two, slot, dir)?;
        let vmlinuz = crate::secureboot::slot_kernel(two.slot(slot), slot, dir)?;
        // As the shipped grub.cfg's line for the slot, without GRUB's BOOT_IMAGE=.
        let uki_line = format!("validator.slot={slot} {}", install_cmdline(s));
        let uki = crate::secureboot::slot_uki(
            two.slot(slot),
            slot,
            &vmlinuz,
            &b.initrd,
            uki_line.trim(),
            dir,
        )?;
        esp_slots.push(EspSlot {
            slot,
            uki_extra: if uki.is_some() {
                two.uki_extra.clone()
            } else {
                Vec::new()
            },
            uki,
            vmlinuz,
            initrd: b.initrd.clone(),
            options: if loader.is_grub() {
                two.slot(slot).options.clone()
            } else {
                options(slot)
            },
        });
        built.push(b);
    }
    let disk_img = dir.join("disk.img");
    let esp_disk = if two.system == RootSystem::Debian {
        install_debian(s, &two, loader, &built, &disk_img)?;
        None
    } else {
        build_disk(s, &two, loader, esp_slots, &built, dir)?
    };
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
        BootPath::SecureBoot => VmConfig::uefi(crate::secureboot::node_firmware(&two, dir)?),
    };
    for (label, offset) in built.iter().filter_map(|b| b.read_error.as_ref()) {
        let (start, _) = disk::partition_offset(&disk_img, label)?;
        cfg.read_errors.push((start + offset) / 512);
    }
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
    cfg.extra_args
        .extend(crate::hw::qemu_args(&s.devices, dir)?);
    if let Some(text) = &s.hotplug_on {
        cfg.monitor_on = Some(vm::MonitorAt {
            text: text.clone(),
            commands: crate::hw::hotplug_commands(&s.devices),
        });
    }
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
    /// A Debian node: the slot directories and command line it was installed from.
    installed_from: Option<(Vec<PathBuf>, String)>,
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

    /// The recovery of a node with both slots bad by reinstalling it (docs/INSTALL.md,
    /// "Recovery: both slots bad"): `mkinitramfs install --force` of the Debian node's
    /// slot directories onto its disk, as from a rescue system; the boot-loader state is
    /// RAUC's initial one and our record starts anew.
    pub fn reinstall(&self) -> Result<mkinitramfs::install::Installed, HarnessError> {
        let Some((dirs, cmdline)) = &self.installed_from else {
            return Err(HarnessError::Setup(
                "only a node installed by mkinitramfs install (Debian) is reinstalled".into(),
            ));
        };
        crate::debroot::install_disk(&self.disk, dirs.clone(), cmdline, None, true)
    }

    /// The command line of the node's Unified Kernel Images (after `validator.slot=`), when
    /// its slots are such images: what an update's image must carry too.
    pub fn uki_cmdline(&self) -> Option<String> {
        let (_, line) = self.installed_from.as_ref()?;
        (self.slots.a.uki.is_some()).then(|| line.clone())
    }

    /// [`Bed::set_cmdline_word`] for `slot`'s Unified Kernel Image, when the ESP has one:
    /// its sections as they are, its `.cmdline` with `word` in or out, signed by the
    /// fleet's key (OVMF's snakeoil key).
    fn set_uki_word(&self, slot: Slot, word: &str, on: bool) -> Result<(), HarnessError> {
        let esp = self.esp()?;
        let path = format!("/{slot}/linux.efi");
        if !esp
            .list(&format!("/{slot}"))?
            .iter()
            .any(|n| n == "linux.efi")
        {
            return Ok(());
        }
        let image = esp.read(&path)?;
        let bad = |e: String| HarnessError::Setup(format!("ESP {path}: {e}"));
        let layout = validator::formats::pe::layout(&image).map_err(|e| bad(e.to_string()))?;
        let section = |n: &str| -> Result<Vec<u8>, HarnessError> {
            layout
                .section_bytes(&image, n)
                .map_err(|e| bad(e.to_string()))?
                .ok_or_else(|| bad(format!("no {n}")))
        };
        let line = String::from_utf8_lossy(&section(".cmdline")?).into_owned();
        let mut words: Vec<&str> = line.split(' ').filter(|w| *w != word).collect();
        if on {
            words.push(word);
        }
        let work = self.dir.join(format!("uki-{slot}"));
        std::fs::create_dir_all(&work).map_err(|e| HarnessError::io(&work, e))?;
        let new = mkinitramfs::uki::build(
            &work,
            &mkinitramfs::uki::UkiInputs {
                stub: Path::new(mkinitramfs::uki::DEBIAN_STUB),
                linux: &section(".linux")?,
                initrd: &section(".initrd")?,
                cmdline: &words.join(" "),
                osrel: &String::from_utf8_lossy(&section(".osrel")?),
                epoch: 0,
            },
            &crate::secureboot::fleet_signing(&self.dir),
        )
        .map_err(|e| bad(e.to_string()))?;
        let f = work.join("linux.efi");
        std::fs::write(&f, new).map_err(|e| HarnessError::io(&f, e))?;
        esp.write_new(&path, &f)
    }

    /// Puts a new Unified Kernel Image of `slot` on the ESP, made as `form` says from the
    /// slot's kernel and initramfs with the command line of the image it replaces
    /// (`secureboot::slot_uki`).
    pub fn replace_uki(
        &self,
        slot: Slot,
        form: crate::scenario::UkiForm,
    ) -> Result<(), HarnessError> {
        let mut img = self.slots.slot(slot).clone();
        img.uki = Some(form);
        let old = self.dir.join(format!("slot-{slot}/linux.efi"));
        let bytes = std::fs::read(&old).map_err(|e| HarnessError::io(&old, e))?;
        let line = validator::formats::uki::cmdline(&bytes)
            .ok()
            .flatten()
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .ok_or_else(|| HarnessError::Setup(format!("{}: no .cmdline", old.display())))?;
        let vmlinuz = crate::secureboot::slot_kernel(&img, slot, &self.dir)?;
        let initrd = self.dir.join(format!("slot-{slot}/initrd.img"));
        let new = crate::secureboot::slot_uki(&img, slot, &vmlinuz, &initrd, &line, &self.dir)?
            .ok_or_else(|| HarnessError::Setup(format!("slot {slot}: no image made")))?;
        self.esp()?.write_new(&format!("/{slot}/linux.efi"), &new)
    }

    /// Puts the boot loader's state back as it was built: GRUB's `grubenv` rewritten in
    /// place with the initial variables only, systemd-boot's entries renamed to their
    /// initial tries.
    pub fn reset_boot_state(&self) -> Result<(), HarnessError> {
        let esp = self.esp()?;
        match self.loader {
            Loader::Grub | Loader::ShimGrub => {
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

    /// Adds `word` to the command line GRUB gives both slots (`node.cfg` on the ESP) for
    /// the power-ons that follow, or takes it away (`on` false); a slot that is a Unified
    /// Kernel Image on the ESP gets its image made again with the word in (or out of) its
    /// `.cmdline` and signed by the fleet's key, as an operator changing the line would.
    pub fn set_cmdline_word(&self, word: &str, on: bool) -> Result<(), HarnessError> {
        for slot in Slot::ALL {
            self.set_uki_word(slot, word, on)?;
        }
        let esp = self.esp()?;
        let path = crate::firmware::NODE_CFG_PATH;
        let text = String::from_utf8(esp.read(path)?)
            .map_err(|e| HarnessError::Setup(format!("ESP {path}: {e}")))?;
        let mut out = String::new();
        for line in text.lines() {
            let line = match line
                .strip_prefix("set CMDLINE=\"")
                .and_then(|l| l.strip_suffix('"'))
            {
                Some(words) => {
                    let mut w: Vec<&str> = words.split(' ').filter(|x| *x != word).collect();
                    if on {
                        w.push(word);
                    }
                    format!("set CMDLINE=\"{}\"", w.join(" "))
                }
                None => line.to_string(),
            };
            out.push_str(&line);
            out.push('\n');
        }
        let tmp = self.dir.join("node.cfg.new");
        std::fs::write(&tmp, out).map_err(|e| HarnessError::io(&tmp, e))?;
        esp.write_new(path, &tmp)
    }

    /// Powers the node on (the disk and the firmware's variables as the last power-on
    /// left them) and returns every boot of the run; logs go to `<dir>/power-<n>/`.
    pub fn boot(&self) -> Result<Run, HarnessError> {
        self.boot_with(|_| {})
    }

    /// [`Bed::boot`] with `disk` attached as a second, read-only virtio disk (`/dev/vdb`)
    /// for this power-on only.
    pub fn boot_with_disk(&self, disk: &Path) -> Result<Run, HarnessError> {
        self.boot_with(|cfg| {
            cfg.extra_args.extend([
                "-drive".into(),
                format!("file={},format=raw,if=virtio,readonly=on", disk.display()),
            ])
        })
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

impl Bed {
    /// The bed of scenario `s`, prepared in `dir` as `cfg` (`Scenario::bed`).
    pub(crate) fn new(s: &Scenario, dir: PathBuf, cfg: VmConfig) -> Result<Bed, HarnessError> {
        let slots = layout(s);
        let loader = esp_loader(s.boot.path, &slots);
        let installed_from =
            (slots.system == RootSystem::Debian).then(|| (slot_dirs(&dir), install_cmdline(s)));
        let disk = cfg
            .disks
            .first()
            .cloned()
            .ok_or_else(|| HarnessError::Setup(format!("scenario {}: no disk", s.name)))?;
        Ok(Bed {
            dir,
            cfg,
            disk,
            loader,
            slots,
            power_ons: std::cell::Cell::new(0),
            installed_from,
        })
    }
}

impl Scenario {
    /// The real node booted by `path`: the gate's A/B node ([`Scenario::ab_gate`]) with
    /// signed verity roots, and the TPM's view and our log shown by slot A's root.
    pub fn node(path: BootPath) -> Result<Scenario, HarnessError> {
        let mut s = Scenario::ab_gate(
            path,
            Roots::Verity(validator::config::bom::RootHashSource::Signature),
        )?;
        s.root_tpm_tools = true;
        Ok(s)
    }

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
            BootPath::SecureBoot => "ab-secure-boot",
            BootPath::SystemdBoot => "ab-systemd-boot",
        }
        .into();
        // A module option on the command line, as a node configures one: every A/B boot's
        // virtio_blk event carries it, and the attestation's prediction must too.
        s.cmdline = match roots {
            Roots::Plain => {
                "ro validator.on_stop=poweroff validator.root_timeout=30 \
                 virtio_blk.num_request_queues=1"
            }
            Roots::Verity(_) => {
                "validator.on_stop=poweroff validator.root_timeout=30 \
                 virtio_blk.num_request_queues=1"
            }
        }
        .into();
        s.boot.path = path;
        s.boot.slots = Some(TwoSlots::new(&s, roots));
        Ok(s)
    }
}

/// Sets up the A/B scenario `name` on `s` (the good boot): the gate's A/B node booted
/// through OVMF and GRUB or systemd-boot, with the slot faults the name says.
pub fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    match name {
        Name::AbGood
        | Name::AbImageFault
        | Name::AbImageFaultReboot
        | Name::AbCorruptRoot
        | Name::AbBothBad
        | Name::AbNoTpm
        | Name::AbHardwareFault
        | Name::AbGpuBothSlots
        | Name::AbGpuSlotA
        | Name::AbDiskError => {
            let roots = if matches!(name, Name::AbCorruptRoot | Name::AbDiskError) {
                Roots::Verity(validator::config::bom::RootHashSource::Bom)
            } else {
                Roots::Plain
            };
            *s = Scenario::ab_gate(BootPath::Grub, roots)?;
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
                    Name::AbDiskError => {
                        two.a.verity = crate::verity::Variant::EioData;
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
            if matches!(name, Name::AbGpuBothSlots | Name::AbGpuSlotA) {
                gpu::setup(s, name)?;
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
            *s = Scenario::node(BootPath::Grub)?;
            s.name = name.as_str().into();
        }
        Name::SdbootGood | Name::SdbootImageFault => {
            *s = Scenario::ab_gate(BootPath::SystemdBoot, Roots::Plain)?;
            s.name = name.as_str().into();
            s.boot.follow_reboots = Some(3);
            if name == Name::SdbootImageFault {
                if let Some(two) = s.boot.slots.as_mut() {
                    two.a.tampered_modules.push("crc16".into());
                }
            }
        }
        other => {
            return Err(HarnessError::Setup(format!(
                "{other} is not an A/B scenario"
            )))
        }
    }
    Ok(())
}

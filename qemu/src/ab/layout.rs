//! The A/B node's disk: each slot's root, BOM and initramfs ([`build_slot`]), then the
//! disk that holds them - laid out by `mkinitramfs install` for the Debian node
//! ([`install_debian`]), by the test bed itself for every other node ([`build_disk`]).

use std::path::{Path, PathBuf};

use validator::config::bom::{self as vbom, RootHashSource};

use super::{Slot, ROOT_SLOT};
use crate::disk::{self, Content, PartitionSpec};
use crate::firmware::{self, Esp, EspSlot, EspSpec, Loader};
use crate::scenario::{BootPath, EspCondition, RootSystem, Roots, Scenario, TwoSlots, ESP_DISK};
use crate::HarnessError;

/// The paths of one slot's built image.
#[derive(Debug, Clone)]
pub(super) struct BuiltSlot {
    pub(super) parts: Vec<PartitionSpec>,
    pub(super) initrd: PathBuf,
    /// The slot directory `mkinitramfs slot` made (the Debian slots).
    pub(super) image: Option<PathBuf>,
    /// Where the disk fails reads of this slot ([`crate::verity::Image::read_error`]): the
    /// partition's label on the node's disk and the offset inside it.
    pub(super) read_error: Option<(String, u64)>,
}

pub(super) fn build_slot(
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
    let debian = two.system == RootSystem::Debian;
    if debian {
        let (_, ring) = crate::debroot::rauc_key(dir)?;
        crate::debroot::build(&rootdir, &extra, &ring, two.recheck_every_s)?;
    } else {
        crate::rootfs::build(&rootdir, &extra)?;
    }
    if !img.root_snakeoil_modules.is_empty() {
        let key = sigcases::keys::snakeoil(&sdir.join("root-keys"));
        let to = rootdir.join("fleet-modules");
        std::fs::create_dir_all(&to).map_err(|e| HarnessError::io(&to, e))?;
        for m in &img.root_snakeoil_modules {
            let out = to.join(format!("{m}.ko"));
            crate::initramfs::resign_module(&img.kernel, m, &key, "sha256", &out)?;
        }
    }
    let slot_file = rootdir.join("etc/slot");
    std::fs::write(&slot_file, format!("{slot}\n")).map_err(|e| HarnessError::io(&slot_file, e))?;
    if s.root_tpm_tools && !debian {
        crate::rootfs::add_tpm_tools(&rootdir)?;
    }
    if let Some(variant) = &img.hw_fixture {
        let from = crate::paths::workspace()
            .join("validator/tests/fixtures/hw")
            .join(variant);
        // The fixture's sysfs is made of symlinks: copied as they are.
        disk::run(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(&from)
                .arg(rootdir.join("hw-fixture")),
        )?;
    }
    let mut bom = img.bom.clone();
    let bom_path = sdir.join("bom.toml");
    let write_bom = |bom: &vbom::Bom| {
        let text = bom
            .to_toml()
            .map_err(|e| HarnessError::Setup(format!("slot {slot} BOM as TOML: {e}")))?;
        std::fs::write(&bom_path, text).map_err(|e| HarnessError::io(&bom_path, e))
    };
    if debian && matches!(two.roots, Roots::Verity(_)) {
        // As an operator builds a slot: `mkinitramfs slot` from an ext4 image of the root.
        write_bom(&bom)?;
        // A slot built as a Unified Kernel Image: `mkinitramfs slot --uki-cmdline` with
        // the node's command line, signed by the fleet's key (OVMF's snakeoil key).
        let uki = match img.uki {
            None => None,
            Some(crate::scenario::UkiForm::Signed) => Some(crate::secureboot::fleet_uki_slot(
                dir,
                install_cmdline(s),
            )),
            Some(other) => {
                return Err(HarnessError::Setup(format!(
                    "slot {slot}: a Debian slot's image is made by mkinitramfs slot, which signs it ({other:?} is not made here)"
                )))
            }
        };
        let (parts, initrd) =
            crate::debroot::slot_image(&img.kernel, &rootdir, &bom_path, slot, &sdir, uki)?;
        return Ok(BuiltSlot {
            parts,
            initrd,
            image: Some(slot_dir(dir, slot)),
            read_error: None,
        });
    }
    let mut read_error = None;
    let parts = match two.roots {
        Roots::Plain => {
            let size = crate::rootfs::image_size_mib(&rootdir);
            vec![PartitionSpec::ext4(&format!("root-{slot}"), &rootdir, size)]
        }
        Roots::Verity(_) => {
            let v = crate::verity::build(&rootdir, &sdir, img.verity)?;
            read_error.clone_from(&v.read_error);
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
                if let Some((label, _)) = read_error.as_mut().filter(|(l, _)| *l == p.label) {
                    *label = format!("root-{slot}{suffix}");
                }
                p.label = format!("root-{slot}{suffix}");
            }
            parts
        }
    };
    write_bom(&bom)?;
    let initrd = sdir.join("initrd.img");
    let extras = crate::initramfs::Extras {
        files: s.extra_initramfs_files.clone(),
        module_overrides: img.module_overrides.clone(),
        tampered_modules: img.tampered_modules.clone(),
        snakeoil_signed: img.snakeoil_signed.clone(),
        compression: s.initramfs_compression(),
    };
    crate::initramfs::build(&img.kernel, &bom_path, &extras, &initrd, &sdir)?;
    Ok(BuiltSlot {
        parts,
        initrd,
        image: None,
        read_error,
    })
}

/// The Debian node's disk, laid out by `mkinitramfs install` from the slot directories
/// `mkinitramfs slot` made, as an operator installs a blank disk
/// ([`crate::debroot::install_disk`]); what install cannot lay out is refused.
pub(super) fn install_debian(
    s: &Scenario,
    two: &TwoSlots,
    loader: Loader,
    built: &[BuiltSlot],
    disk_img: &Path,
) -> Result<(), HarnessError> {
    let refuse = |why: &str| {
        Err(HarnessError::Setup(format!(
            "scenario {}: a Debian node's disk is made by mkinitramfs install, which {why}",
            s.name
        )))
    };
    if loader != Loader::ShimGrub {
        return refuse("lays out Debian's signed shim and GRUB only");
    }
    if two.esp != EspCondition::Present {
        return refuse("makes a whole ESP on the node's disk");
    }
    let kernels_as_shipped = Slot::ALL.iter().all(|&slot| {
        two.slot(slot).kernel_signature == crate::scenario::KernelSignature::AsShipped
            && two.slot(slot).options.trim().is_empty()
    });
    if !kernels_as_shipped {
        return refuse("puts each slot's kernel on the ESP as its slot directory holds it, with one command line");
    }
    let Some(dirs) = built
        .iter()
        .map(|b| b.image.clone())
        .collect::<Option<Vec<_>>>()
    else {
        return refuse("installs slot directories made by mkinitramfs slot");
    };
    crate::progress("the node's disk: mkinitramfs install of both slot directories");
    crate::debroot::install_disk(
        disk_img,
        dirs,
        &install_cmdline(s),
        Some(&two.grubenv),
        false,
    )?;
    Ok(())
}

/// The command line a Debian node is installed with (`node.cfg`).
pub(super) fn install_cmdline(s: &Scenario) -> String {
    format!("{} {}", firmware::BASE_CMDLINE, s.cmdline)
}

/// The slot directories `mkinitramfs slot` made for a Debian node in run directory `dir`.
pub(super) fn slot_dirs(dir: &Path) -> Vec<PathBuf> {
    Slot::ALL.iter().map(|&s| slot_dir(dir, s)).collect()
}

/// The directory `mkinitramfs slot` made for `slot` of a Debian node in run directory `dir`.
fn slot_dir(dir: &Path, slot: Slot) -> PathBuf {
    dir.join(format!("slot-{slot}/image"))
}

/// The disk the test bed lays out itself (every node but the Debian one): the ESP
/// ([`firmware::build_esp`]) and both slots' partitions at `<dir>/disk.img`; returns the
/// ESP's own disk when it has one ([`EspCondition::ReadOnlyDisk`]).
pub(super) fn build_disk(
    s: &Scenario,
    two: &TwoSlots,
    loader: Loader,
    esp_slots: Vec<EspSlot>,
    built: &[BuiltSlot],
    dir: &Path,
) -> Result<Option<PathBuf>, HarnessError> {
    let mut parts = Vec::new();
    let mut spec = EspSpec::new(loader, esp_slots);
    spec.cmdline = s.cmdline.clone();
    if let Some(words) = &two.grub_uki_words {
        // The shipped grub.cfg with words after the image's path on its chainloader line.
        let shipped = std::fs::read_to_string(&spec.grub_cfg)
            .map_err(|e| HarnessError::io(&spec.grub_cfg, e))?;
        let from = "chainloader /$SLOT/linux.efi;";
        if !shipped.contains(from) {
            return Err(HarnessError::Setup(format!(
                "{}: no {from:?} line to add words to",
                spec.grub_cfg.display()
            )));
        }
        let cfg = dir.join("grub-uki-words.cfg");
        std::fs::write(
            &cfg,
            shipped.replace(from, &format!("chainloader /$SLOT/linux.efi {words};")),
        )
        .map_err(|e| HarnessError::io(&cfg, e))?;
        spec.grub_cfg = cfg;
    }
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
            EspCondition::GrubenvBrokenChain => {
                Esp::image(&esp_img).break_chain(firmware::GRUBENV_PATH)?;
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
    for b in built {
        parts.extend(b.parts.iter().cloned());
    }
    crate::progress(
        "the node's disk: ESP with both slots' kernels and the boot loader, then the slots",
    );
    disk::build_disk(&dir.join("disk.img"), &parts, dir)?;
    Ok(esp_disk)
}

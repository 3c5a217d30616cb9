//! How GRUB starts a slot image: its Unified Kernel Image when `--uki-cmdline` asks for
//! one ([`uki`]: the slot's own, and for a RAUC bundle the other slot's too, as each
//! names its slot), and the reference of a good boot of it ([`reference`]).

use super::{SlotError, SlotSpec, UKI_NAME};

/// The slot's Unified Kernel Image, as made.
pub(super) struct Uki {
    /// Its `.cmdline`.
    pub line: String,
    pub image: Vec<u8>,
    /// Signed by the tool (its bytes are final).
    pub signed: bool,
    /// For a RAUC bundle: the image naming the other slot (its name, its `.cmdline`, its
    /// bytes).
    pub other: Option<(&'static str, String, Vec<u8>)>,
}

/// The slot's Unified Kernel Image (`None` without `spec.uki`), built in `tmp` from the
/// kernel and initramfs just made.
pub(super) fn uki(
    spec: &SlotSpec,
    tmp: &std::path::Path,
    kernel: &[u8],
    initrd: &[u8],
    image_id: &str,
) -> Result<Option<Uki>, SlotError> {
    let Some(u) = &spec.uki else {
        return Ok(None);
    };
    // The image naming `name` (its `.cmdline` and `.osrel`), and its line.
    let make = |name: &str| -> Result<(String, Vec<u8>), SlotError> {
        let line = u.line(name).map_err(|why| SlotError::Input {
            path: spec.out.clone(),
            why: format!("--uki-cmdline: {why}"),
        })?;
        let image = crate::uki::build(
            tmp,
            &crate::uki::UkiInputs {
                stub: &u.stub,
                linux: kernel,
                initrd,
                cmdline: &line,
                osrel: &crate::uki::osrel(image_id, name),
                epoch: spec.epoch,
            },
            &u.signing,
        )?;
        Ok((line, image))
    };
    let (line, image) = make(&spec.slot)?;
    // RAUC writes a bundle into whichever slot is not booted: its image for the other
    // slot too (bundle only).
    let other = match spec.rauc {
        Some(_) => {
            let name = if spec.slot == "A" { "B" } else { "A" };
            let (line, image) = make(name)?;
            Some((name, line, image))
        }
        None => None,
    };
    Ok(Some(Uki {
        line,
        image,
        signed: u.signing != crate::uki::Signing::Unsigned,
        other,
    }))
}

/// How GRUB starts the slot whose reference is made.
pub(super) enum Boot<'a> {
    /// `linux` and `initrd` with this command line (as `/proc/cmdline` shows it).
    Plain(&'a str),
    /// `chainloader` of the slot's Unified Kernel Image with its `.cmdline`; `signed`:
    /// the image's bytes are final (GRUB measures them into PCR 9).
    Uki {
        line: &'a str,
        image: &'a [u8],
        signed: bool,
    },
}

/// The reference measurements (`validator.reference/v1`) of the image booted by GRUB from
/// each slot of `boots` as its `Boot` says (the boot-loader entry, and the kexec entry a
/// fallback from the other slot gives it), as `validator attest predict` makes them: from
/// the BOM, the initramfs and the root hash just built, the files GRUB measures into PCR 9
/// (the kernel and initramfs, or the signed image), and what systemd-stub measures into
/// PCR 11. A RAUC bundle's image may be installed in either slot: it has one per slot.
pub(super) fn reference(
    spec: &SlotSpec,
    boots: &[(&str, Boot<'_>)],
    bom: &[u8],
    root_hex: &str,
    kernel: &[u8],
    initrd: &[u8],
) -> Result<String, SlotError> {
    use validator::attest::predict;
    let entries = crate::unpack::unpack(initrd, crate::limits::UNPACKED_MAX).map_err(|e| {
        SlotError::Tool {
            tool: "mkinitramfs".into(),
            why: format!("reading back the initramfs: {e}"),
        }
    })?;
    let tree = predict::MemTree::from_listing("initrd.img", entries);
    let file_pcr = validator::formats::tpm::measurement::BOOT_LOADER_FILE_PCR;
    let dir = spec
        .root
        .is_dir()
        .then(|| predict::DirTree(spec.root.clone()));
    let mut slots = Vec::new();
    for (slot, boot) in boots {
        let name =
            validator::config::bom::SlotName::parse(slot).ok_or_else(|| SlotError::Input {
                path: spec.bom.clone(),
                why: format!("slot {slot:?}: A or B"),
            })?;
        let (line, files, uki) = match boot {
            Boot::Plain(line) => (
                *line,
                vec![
                    (file_pcr, format!("/{slot}/vmlinuz"), Some(kernel.to_vec())),
                    (
                        file_pcr,
                        format!("/{slot}/initrd.img"),
                        Some(initrd.to_vec()),
                    ),
                ],
                None,
            ),
            Boot::Uki {
                line,
                image,
                signed,
            } => (
                *line,
                // An image still to be signed elsewhere: its final bytes are not known here.
                signed
                    .then(|| {
                        (
                            file_pcr,
                            format!("/{slot}/{UKI_NAME}"),
                            Some(image.to_vec()),
                        )
                    })
                    .into_iter()
                    .collect(),
                Some(image.to_vec()),
            ),
        };
        slots.push(predict::SlotInput {
            slot: name,
            cmdline: line.into(),
            kexec_cmdline: Some(predict::kexec_cmdline_grub(line, name)),
            files,
            // The ESP's configuration is the install's, not the slot's.
            files_complete: false,
            uki,
        });
    }
    let r = predict::predict(&predict::Inputs {
        bom,
        initramfs: &tree,
        root: dir.as_ref().map(|t| t as &dyn predict::Tree),
        root_hash: Some(root_hex.to_string()),
        uefi: true,
        slots,
    })
    .map_err(|e| SlotError::Input {
        path: spec.bom.clone(),
        why: format!("predicting the slot's measurements: {e}"),
    })?;
    Ok(r.to_text())
}

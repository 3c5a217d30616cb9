//! The production chain under Secure Boot in the test bed: the `sb-*` scenarios
//! ([`setup`]: the A/B node through [`BootPath::SecureBoot`], the BOM requiring Secure
//! Boot), the node's firmware ([`node_firmware`]: Microsoft's store, with the fleet's
//! certificate in `db` or as a MOK when the layout asks), the slots' kernels as they go on
//! the ESP (`slot_kernel`: Debian's signed one, stripped or re-signed), and the firmware
//! as the judge of a signed boot chain: OVMF with Secure Boot on and a `db` of our choosing
//! starts, or refuses, Debian's signed shim from an ESP (shim then starts Debian's signed
//! GRUB, which finds no bootable slot and halts).
//!
//! Contract: [`firmware_starts_shim`] builds the ESP of [`crate::firmware::Loader::ShimGrub`]
//! with no slots, a variable store made from [`crate::firmware::OVMF_VARS_MS`] (Microsoft's
//! PK and KEK, Secure Boot on) whose `db` is replaced by the given certificates when
//! some are given, boots it once, and says whether shim ran (GRUB's banner on the console)
//! or the firmware refused it (EDK2's "Access Denied" for the boot option). The VM is cut
//! a few seconds after the refusal (the firmware would wait in its boot manager).
//! [`firmware_starts_chain`] does the same with shim or GRUB replaced by a changed copy,
//! such as [`change_cert_table`] makes: a signed image whose attribute certificate table
//! has bytes appended inside it or ends with an unpadded entry (the Authenticode digest
//! unchanged, the table is not hashed), to judge the firmware's walk of that table
//! (EDK2's, for shim) and shim's (for GRUB).
//!
//! Revocation ([`node_firmware`]): `dbx` entries for slot B's kernel and an `SbatLevel`
//! are written into the variable store before the first power-on, as a firmware or shim
//! update would leave them; B's fleet kernel can carry a `.sbat` ([`add_section`]).
//!
//! Limits: only the removable-media path is offered; a level or list is never changed
//! between boots of one scenario.

use std::path::{Path, PathBuf};

use validator::config::bom as vbom;

use crate::disk;
use crate::firmware::{Ovmf, Slot};
use crate::scenario::{
    BootPath, KernelSignature, Name, RevokeB, Roots, Scenario, SlotImage, TwoSlots, UkiForm,
};
use crate::HarnessError;

mod judge;
pub use judge::{
    change_cert_table, firmware_starts_chain, firmware_starts_shim, shim_starts_grub_at_sbat_level,
    FirmwareVerdict, TableChange, ACCESS_DENIED, GRUB_BANNER, SHIM_REFUSED,
};

/// The word `sb-uki`'s grub.cfg adds after the image's path: it must not reach the
/// kernel.
pub const GRUB_UKI_WORD: &str = "validator.grub_added=1";

/// Sets up the Secure Boot scenario `name` on `s`: the A/B node through Debian's signed
/// chain with Secure Boot on (`sb-required-off`: through the GRUB node with it off), both
/// slots' BOMs requiring Secure Boot, and what the name says.
pub fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    *s = match name {
        Name::SbNode | Name::SbUki => Scenario::node(BootPath::SecureBoot)?,
        Name::SbRequiredOff => Scenario::ab_gate(BootPath::Grub, Roots::Plain)?,
        _ => Scenario::ab_gate(BootPath::SecureBoot, Roots::Plain)?,
    };
    s.name = name.as_str().into();
    if !matches!(name, Name::SbNode | Name::SbUki) {
        s.boot.follow_reboots = Some(3);
    }
    let two = s
        .boot
        .slots
        .as_mut()
        .ok_or_else(|| HarnessError::Setup(format!("{name}: no A/B layout")))?;
    // The production BOM: Secure Boot required.
    two.a.bom.hardware.secure_boot = Some(true);
    two.b.bom.hardware.secure_boot = Some(true);
    match name {
        Name::SbNode | Name::SbRequiredOff => {}
        Name::SbUkiFallback | Name::SbUkiTamperedB => {
            // sb-fallback with both slots Unified Kernel Images: A's image is bad (a
            // module the gate refuses); the gate checks B's image and loads its .linux,
            // .initrd and .cmdline from it for the kexec, or, with B's image changed after
            // signing, stops instead. The fleet's certificate is in db here (sb-uki: a
            // MOK), the other way a fleet enrolls it.
            two.db_snakeoil = true;
            two.a.tampered_modules.push("crc16".into());
            two.a.uki = Some(UkiForm::Signed);
            two.b.uki = Some(if name == Name::SbUkiFallback {
                UkiForm::Signed
            } else {
                UkiForm::InitrdFlipped
            });
        }
        Name::SbUki | Name::SbUkiRefused => {
            // Each slot a Unified Kernel Image signed by the fleet's key, enrolled as a
            // MOK, which the shipped grub.cfg chainloads through shim.
            two.mok_snakeoil = true;
            // sb-uki-refused: each image changed after signing (its test then puts an
            // unsigned one and one signed by a stranger in their place: `Bed::replace_uki`).
            let (a, b) = match name {
                Name::SbUki => (UkiForm::Signed, UkiForm::Signed),
                _ => (UkiForm::InitrdFlipped, UkiForm::CmdlineEdited),
            };
            two.a.uki = Some(a);
            two.b.uki = Some(b);
            if name == Name::SbUki {
                // A credential beside A's image, which the stub packs into the
                // initramfs's /.extra/ (the gate ignores it and names it), and words
                // after the image's path in grub.cfg (the stub ignores them under
                // Secure Boot: they do not reach the kernel).
                two.uki_extra = vec![("fleet.cred".into(), b"not signed\n".to_vec())];
                two.grub_uki_words = Some(format!("init=/bin/sh {GRUB_UKI_WORD}"));
            }
        }
        Name::SbFallback => {
            two.a.tampered_modules.push("crc16".into());
        }
        Name::SbFleetDb
        | Name::SbFleetMok
        | Name::SbFleetMokUntrusted
        | Name::SbFleetUnenrolled => {
            // Slot A loads crc8 signed by the fleet's key (OVMF's snakeoil
            // key stands for it), which its BOM trusts; the firmware's db
            // holds that certificate (sb-fleet-db) or not.
            two.db_snakeoil = name == Name::SbFleetDb;
            two.mok_snakeoil = matches!(name, Name::SbFleetMok | Name::SbFleetMokUntrusted);
            two.mok_untrusted = name == Name::SbFleetMokUntrusted;
            two.a.bom.modules.load.push(vbom::ModuleName("crc8".into()));
            two.a.bom.policy.trust.push("snake.pem".into());
            two.a.snakeoil_signed.push(("crc8".into(), "sha256".into()));
            two.a.root_extra = "echo CRC8-STATE $(cat /sys/module/crc8/initstate); \
                         echo MOK-TRUSTED-RT $(ls /sys/firmware/efi/mok-variables | \
                         grep -c MokListTrustedRT)"
                .into();
            // The kernel's own verdict on the same module, from B's root.
            two.b.root_snakeoil_modules.push("crc8".into());
            two.b.root_extra = "insmod /fleet-modules/crc8.ko; \
                         echo FLEET-INSMOD-RC $?; \
                         echo CRC8-STATE $(cat /sys/module/crc8/initstate 2>/dev/null)"
                .into();
        }
        Name::SbDbxB | Name::SbDbxSignerB => {
            // Slot B carries a fleet build of the kernel, signed by the fleet's key in
            // db; dbx revokes that build (its digest) or the key that signed it.
            two.a.tampered_modules.push("crc16".into());
            two.b.kernel_signature = KernelSignature::Fleet;
            two.db_snakeoil = true;
            two.revoke_b = Some(if name == Name::SbDbxB {
                RevokeB::Digest
            } else {
                RevokeB::Signer
            });
        }
        Name::SbSbatB => {
            // Slot B carries a fleet build of the kernel with a `.sbat` at the fleet
            // component's generation 1, signed by the fleet's key in db; the node's SBAT
            // level revokes that generation (shim applies it to what GRUB loads through
            // its protocol).
            two.a.tampered_modules.push("crc16".into());
            two.b.kernel_signature = KernelSignature::Fleet;
            two.b.kernel_sbat = Some(FLEET_KERNEL_SBAT.into());
            two.db_snakeoil = true;
            two.sbat_level = Some(FLEET_SBAT_LEVEL.into());
            two.shim_verbose = true;
        }
        Name::SbUnsignedB | Name::SbUntrustedB | Name::SbUnsignedBUnchecked => {
            two.a.tampered_modules.push("crc16".into());
            two.b.kernel_signature = if name != Name::SbUntrustedB {
                KernelSignature::Stripped
            } else {
                KernelSignature::Untrusted
            };
        }
        other => {
            return Err(HarnessError::Setup(format!(
                "{other} is not a Secure Boot scenario"
            )))
        }
    }
    if name == Name::SbUnsignedBUnchecked {
        // What the kernel and the boot chain do without the gate's check.
        s.cmdline.push_str(" validator.test_skip_kernel_check");
    }
    // The slot that takes over by kexec shows its TPM's view and our log.
    if matches!(name, Name::SbFallback | Name::SbUkiFallback) {
        s.root_tpm_tools = true;
    }
    Ok(())
}

/// The `.sbat` of slot B's fleet kernel in `sb-sbat-b`: the SBAT record, the upstream
/// kernel's component, and the fleet's own at generation 1.
pub const FLEET_KERNEL_SBAT: &str =
    "sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md\n\
     linux,1,The Linux Developers,linux,6.1,https://linux.org\n\
     linux.fleet,1,GPU fleet,linux,6.1,https://fleet.invalid/\n";

/// The SBAT level of `sb-sbat-b`: Debian's shim and GRUB at their generations (both start),
/// the fleet's kernel component at generation 2, dated after shim's own level so shim
/// keeps it.
pub const FLEET_SBAT_LEVEL: &str = "sbat,1,2099010100\nshim,4\ngrub,5\nlinux.fleet,2\n";

/// The Secure Boot node's firmware in `dir`: [`Ovmf::secure_boot`], with OVMF's snakeoil
/// certificate (the fleet's, in these scenarios) added to `db`, or enrolled as a MOK
/// (`MokList`, as MokManager leaves it; with `MokListTrusted` as `mokutil --untrust-mok`
/// leaves it), as `two` says.
pub fn node_firmware(two: &TwoSlots, dir: &Path) -> Result<Ovmf, HarnessError> {
    let extra = if two.db_snakeoil {
        vec![sigcases::keys::snakeoil(&dir.join("db-keys")).cert_der()]
    } else {
        Vec::new()
    };
    let ovmf = Ovmf::secure_boot_with_db(dir, &extra)?;
    if let Some(revoke) = two.revoke_b {
        let entry = match revoke {
            RevokeB::Digest => {
                let k = dir.join("slot-B/vmlinuz");
                let image = std::fs::read(&k).map_err(|e| HarnessError::io(&k, e))?;
                let pe = validator::formats::pe::parse(&image)
                    .map_err(|e| HarnessError::Setup(format!("{}: {e}", k.display())))?;
                let d = pe.digest(
                    &image,
                    validator::formats::pkcs7::HashAlg::Sha256,
                    validator::formats::pe::SectionOrder::Firmware,
                );
                crate::efivars::signature_list(crate::efivars::CERT_SHA256, &[d])
            }
            RevokeB::Signer => {
                let der = sigcases::keys::snakeoil(&dir.join("db-keys")).cert_der();
                crate::efivars::signature_list(crate::efivars::CERT_X509, &[der])
            }
        };
        let mut store = crate::efivars::VarStore::open(&ovmf.vars)?;
        let vendor = crate::efivars::IMAGE_SECURITY_DATABASE;
        let mut dbx = store
            .get("dbx", vendor)
            .and_then(|v| store.bytes.get(v.data).map(<[u8]>::to_vec))
            .unwrap_or_default();
        dbx.extend_from_slice(&entry);
        if store.get("dbx", vendor).is_some() {
            store.replace("dbx", vendor, &dbx)?;
        } else {
            store.add("dbx", vendor, crate::efivars::NV_BS | 0x4 | 0x20, &dbx)?;
        }
        store.write(&ovmf.vars)?;
    }
    // Shim's own variables (non-volatile, boot services only), as MokManager, mokutil
    // and shim's SBAT update leave them.
    let mut shim_vars: Vec<(&str, Vec<u8>)> = Vec::new();
    if let Some(level) = &two.sbat_level {
        shim_vars.push(("SbatLevel", level.as_bytes().to_vec()));
    }
    if two.shim_verbose {
        shim_vars.push(("SHIM_VERBOSE", vec![1]));
    }
    if two.mok_snakeoil {
        let der = sigcases::keys::snakeoil(&dir.join("mok-keys")).cert_der();
        shim_vars.push(("MokList", crate::efivars::db(&[der])));
        if two.mok_untrusted {
            shim_vars.push(("MokListTrusted", vec![1]));
        }
    }
    if !shim_vars.is_empty() {
        let mut store = crate::efivars::VarStore::open(&ovmf.vars)?;
        for (name, data) in &shim_vars {
            store.add(name, crate::efivars::SHIM_LOCK, crate::efivars::NV_BS, data)?;
        }
        store.write(&ovmf.vars)?;
    }
    Ok(ovmf)
}

/// How the test bed's images are signed by the fleet's key: OVMF's snakeoil key, made in
/// `<dir>/mok-keys`, whose certificate [`node_firmware`] enrolls in `db` or as a MOK.
pub(crate) fn fleet_signing(dir: &Path) -> mkinitramfs::uki::Signing {
    let k = sigcases::keys::snakeoil(&dir.join("mok-keys"));
    mkinitramfs::uki::Signing::Key {
        key: k.key,
        cert: k.cert,
    }
}

/// A Debian slot's image as `mkinitramfs slot --uki-cmdline` makes it in run directory
/// `dir`: Debian's stub, `cmdline` after `validator.slot=`, [`fleet_signing`].
pub(crate) fn fleet_uki_slot(dir: &Path, cmdline: String) -> mkinitramfs::slot::UkiSlot {
    mkinitramfs::slot::UkiSlot {
        stub: mkinitramfs::uki::DEBIAN_STUB.into(),
        cmdline,
        signing: fleet_signing(dir),
    }
}

/// The slot's Unified Kernel Image as it goes on the ESP ([`UkiForm`]), made in
/// `<dir>/slot-<slot>/` from its kernel as on the ESP, its initramfs and `cmdline` (the
/// image's `.cmdline`), by `mkinitramfs::uki` as `mkinitramfs slot` makes one; `None`
/// when the slot is no such image.
pub(crate) fn slot_uki(
    img: &SlotImage,
    slot: Slot,
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    dir: &Path,
) -> Result<Option<PathBuf>, HarnessError> {
    let Some(form) = img.uki else {
        return Ok(None);
    };
    let d = dir.join(format!("slot-{slot}"));
    std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
    let read = |p: &Path| std::fs::read(p).map_err(|e| HarnessError::io(p, e));
    let (linux, initrd_bytes) = (read(kernel)?, read(initrd)?);
    let signing = match form {
        UkiForm::Unsigned => mkinitramfs::uki::Signing::Unsigned,
        UkiForm::ForeignKey => {
            let (key, cert) = crate::verity::make_key(&d, "uki-stranger")?;
            mkinitramfs::uki::Signing::Key { key, cert }
        }
        _ => fleet_signing(dir),
    };
    let mut image = mkinitramfs::uki::build(
        &d,
        &mkinitramfs::uki::UkiInputs {
            stub: Path::new(mkinitramfs::uki::DEBIAN_STUB),
            linux: &linux,
            initrd: &initrd_bytes,
            cmdline,
            osrel: &mkinitramfs::uki::osrel(&img.bom.image_id.to_string(), slot.as_str()),
            epoch: 0,
        },
        &signing,
    )
    .map_err(|e| HarnessError::Setup(format!("slot {slot}'s Unified Kernel Image: {e}")))?;
    let section = |name: &str| -> Result<std::ops::Range<usize>, HarnessError> {
        let l = validator::formats::pe::layout(&image)
            .map_err(|e| HarnessError::Setup(format!("slot {slot}'s image: {e}")))?;
        l.sections
            .iter()
            .find(|s| s.name.starts_with(name.as_bytes()))
            .map(|s| s.raw.start..s.raw.start + s.virtual_size as usize)
            .ok_or_else(|| HarnessError::Setup(format!("slot {slot}'s image: no {name}")))
    };
    match form {
        UkiForm::InitrdFlipped => {
            let r = section(".initrd")?;
            if let Some(b) = image.get_mut(r.start + r.len() / 2) {
                *b ^= 0x01;
            }
        }
        UkiForm::CmdlineEdited => {
            let r = section(".cmdline")?;
            let edit = b"init=/bin/sh";
            let at = r.end.saturating_sub(edit.len()).max(r.start);
            if let Some(t) = image.get_mut(at..r.end) {
                t.copy_from_slice(edit.get(..t.len()).unwrap_or_default());
            }
        }
        _ => {}
    }
    let out = d.join("linux.efi");
    std::fs::write(&out, &image).map_err(|e| HarnessError::io(&out, e))?;
    Ok(Some(out))
}

/// The slot's kernel as it goes on the ESP: Debian's signed `vmlinuz`, or a copy whose
/// signature is removed (`sbattach --remove`) or replaced by one of a key made for the run
/// (`sbsign`), which nothing trusts, or by the fleet's key after its digest was made its
/// own (eight bytes appended, or a `.sbat` section added when the image says).
pub(crate) fn slot_kernel(
    img: &SlotImage,
    slot: Slot,
    dir: &Path,
) -> Result<PathBuf, HarnessError> {
    let shipped = img.kernel.vmlinuz.clone();
    if img.kernel_signature == KernelSignature::AsShipped {
        return Ok(shipped);
    }
    let out = dir.join(format!("slot-{slot}/vmlinuz"));
    std::fs::copy(&shipped, &out).map_err(|e| HarnessError::io(&shipped, e))?;
    disk::run(
        std::process::Command::new("sbattach")
            .arg("--remove")
            .arg(&out),
    )?;
    if let (KernelSignature::Fleet, Some(sbat)) = (img.kernel_signature, &img.kernel_sbat) {
        let image = std::fs::read(&out).map_err(|e| HarnessError::io(&out, e))?;
        let with = add_section(&image, b".sbat\0\0\0", sbat.as_bytes())
            .map_err(|m| HarnessError::Setup(format!("{}: adding .sbat: {m}", out.display())))?;
        std::fs::write(&out, with).map_err(|e| HarnessError::io(&out, e))?;
    } else if img.kernel_signature == KernelSignature::Fleet {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&out)
            .map_err(|e| HarnessError::io(&out, e))?;
        std::io::Write::write_all(&mut f, b"fleet-b\n").map_err(|e| HarnessError::io(&out, e))?;
    }
    if matches!(
        img.kernel_signature,
        KernelSignature::Untrusted | KernelSignature::Fleet
    ) {
        let signer = if img.kernel_signature == KernelSignature::Fleet {
            sigcases::keys::snakeoil(&dir.join("db-keys"))
        } else {
            sigcases::keys::self_signed(
                &dir.join(format!("slot-{slot}")),
                "untrusted-pe",
                &["rsa:2048"],
                &[],
            )
        };
        let (key, cert) = (signer.key, signer.cert);
        let signed = dir.join(format!("slot-{slot}/vmlinuz.signed"));
        disk::run(
            std::process::Command::new("sbsign")
                .arg("--key")
                .arg(&key)
                .arg("--cert")
                .arg(&cert)
                .arg("--output")
                .arg(&signed)
                .arg(&out),
        )?;
        std::fs::rename(&signed, &out).map_err(|e| HarnessError::io(&signed, e))?;
    }
    Ok(out)
}

/// `image` (a PE image without a certificate table) with a section `name` of `data`
/// added: its header in the room left before the first section's data, its data at the
/// end of the file (padded to the file alignment), its address after the last section's
/// (the image size grown to cover it). Read-only initialised data, no relocations, as
/// shim wants a `.sbat`.
pub fn add_section(image: &[u8], name: &[u8; 8], data: &[u8]) -> Result<Vec<u8>, String> {
    use validator::util::le::{u16_le, u32_le};
    let word = |at: usize| u32_le(image, at).ok_or(format!("no 32-bit word at {at:#x}"));
    let half = |at: usize| u16_le(image, at).ok_or(format!("no 16-bit word at {at:#x}"));
    let size = |v: u32| usize::try_from(v).map_err(|_| format!("{v:#x} too large"));
    let align = |v: usize, a: usize| v.div_ceil(a.max(1)) * a.max(1);
    let pe = size(word(0x3c)?)?;
    let count = usize::from(half(pe + 6)?);
    let opt = pe + 24;
    let table = opt + usize::from(half(pe + 20)?);
    let (section_align, file_align) = (size(word(opt + 32)?)?, size(word(opt + 36)?)?);
    if half(opt)? != 0x20b {
        return Err("not a PE32+ image".into());
    }
    if word(opt + 112 + 4 * 8)? != 0 || word(opt + 112 + 4 * 8 + 4)? != 0 {
        return Err("signed (a certificate table is present)".into());
    }
    let mut first_data = usize::MAX;
    let mut end_va = 0usize;
    for i in 0..count {
        let h = table + i * 40;
        let raw = size(word(h + 20)?)?;
        if raw != 0 {
            first_data = first_data.min(raw);
        }
        end_va = end_va.max(size(word(h + 12)?)? + size(word(h + 8)?)?);
    }
    let new = table + count * 40;
    if new + 40 > first_data.min(size(word(opt + 60)?)?) {
        return Err(format!(
            "no room for another section header at {new:#x} (the headers end at {:#x})",
            first_data.min(size(word(opt + 60)?)?)
        ));
    }
    let at = align(image.len(), file_align);
    let raw_len = align(data.len(), file_align);
    let va = align(end_va, section_align);
    let u32_of = |v: usize| u32::try_from(v).map_err(|_| format!("{v:#x} too large"));
    let mut out = image.to_vec();
    out.resize(at, 0);
    out.extend_from_slice(data);
    out.resize(at + raw_len, 0);
    let mut header = Vec::with_capacity(40);
    header.extend_from_slice(name);
    for v in [data.len(), va, raw_len, at, 0, 0] {
        header.extend_from_slice(&u32_of(v)?.to_le_bytes());
    }
    header.extend_from_slice(&[0; 4]);
    header.extend_from_slice(&0x4000_0040u32.to_le_bytes());
    out[new..new + 40].copy_from_slice(&header);
    let count16 = u16::try_from(count + 1).map_err(|_| "too many sections".to_string())?;
    out[pe + 6..pe + 8].copy_from_slice(&count16.to_le_bytes());
    let image_size = u32_of(align(va + data.len(), section_align))?;
    out[opt + 56..opt + 60].copy_from_slice(&image_size.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A section added to Debian's kernel (its signature removed) is where the PE parser
    /// finds it, the other sections keep their data, and a signed image is refused.
    #[test]
    fn add_section_to_the_kernel() {
        let k = crate::paths::kernel("default").unwrap().vmlinuz;
        let signed = std::fs::read(&k).unwrap();
        let err = add_section(&signed, b".sbat\0\0\0", b"x").unwrap_err();
        assert!(err.contains("certificate table"), "{err}");
        let dir = crate::paths::run_dir("add-section").unwrap();
        let bare = dir.join("vmlinuz");
        std::fs::copy(&k, &bare).unwrap();
        disk::run(
            std::process::Command::new("sbattach")
                .arg("--remove")
                .arg(&bare),
        )
        .unwrap();
        let image = std::fs::read(&bare).unwrap();
        let out = add_section(&image, b".sbat\0\0\0", FLEET_KERNEL_SBAT.as_bytes()).unwrap();
        // The parser reads signed images: Debian's, and the new one signed.
        let unsigned = dir.join("vmlinuz.sbat");
        std::fs::write(&unsigned, &out).unwrap();
        let keys = sigcases::keys::snakeoil(&dir.join("keys"));
        let signed_out = dir.join("vmlinuz.sbat.signed");
        disk::run(
            std::process::Command::new("sbsign")
                .arg("--key")
                .arg(&keys.key)
                .arg("--cert")
                .arg(&keys.cert)
                .arg("--output")
                .arg(&signed_out)
                .arg(&unsigned),
        )
        .unwrap();
        let out = std::fs::read(&signed_out).unwrap();
        let before = validator::formats::pe::parse(&signed).unwrap();
        let after = validator::formats::pe::parse(&out).unwrap();
        assert_eq!(after.sections.len(), before.sections.len() + 1);
        let sbat = after.section(&out, ".sbat").unwrap();
        assert!(sbat.starts_with(FLEET_KERNEL_SBAT.as_bytes()));
        assert!(sbat[FLEET_KERNEL_SBAT.len()..].iter().all(|&b| b == 0));
        for s in &before.sections {
            assert_eq!(signed[s.raw.clone()], out[s.raw.clone()]);
        }
    }
}

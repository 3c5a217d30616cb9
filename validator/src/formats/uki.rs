//! Unified Kernel Images as systemd-stub 252 (Debian 12) measures them: which PE sections
//! it extends into PCR 11, in which order, and how each event looks in the firmware's
//! event log. Pure over bytes; shared by the image build (`mkinitramfs slot`), the
//! prediction (`attest predict`) and the verifier (`attest verify`).
//!
//! Contract (systemd 252 `src/boot/efi/stub.c`, `src/fundamental/tpm-pcr.c`,
//! `src/boot/efi/measure.c`):
//! - the stub looks for [`SECTIONS`] by name and measures those present, in that
//!   canonical order whatever their order in the image, skipping `.pcrsig` (the signature
//!   of the expected PCR values cannot be input to them);
//! - each measured section gives two events on [`KERNEL_IMAGE_PCR`], both of type
//!   `EV_IPL` with the section's name as the event data, in UTF-16LE with its NUL
//!   ([`event_data`]): first the digest of the name in ASCII with its NUL, then the
//!   digest of the section's content as loaded (its first `VirtualSize` bytes,
//!   [`crate::formats::pe::Layout::section_bytes`], which refuses a section whose
//!   `VirtualSize` runs past its raw data);
//! - [`events`] lists them for an image, [`section_of`] reads a log record's data back
//!   to its section name (anything else is not the stub's).
//!
//! `systemd-measure calculate` of the same sections gives the PCR 11 value after the last
//! of these events (a test holds us to it).
//!
//! An image in which two sections could be taken for one of [`SECTIONS`] (stub 252 finds
//! a section by the prefix of its name and keeps the last it finds, where this reader
//! takes a name exactly) is refused: what the stub would measure and boot is then not
//! what a reader of the image sees.
//!
//! Limits: systemd 252's vocabulary (254 and later also measure `.uname` and `.sbat`,
//! and tag their events differently); a section without raw data is taken as absent.

use crate::formats::pe::{self, PeError};

/// The PCR the stub measures the image's sections into (`TPM_PCR_INDEX_KERNEL_IMAGE`).
pub const KERNEL_IMAGE_PCR: u32 = 11;

/// The sections systemd-stub 252 knows, in the order it measures them.
pub const SECTIONS: [&str; 8] = [
    ".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrsig", ".pcrpkey",
];

/// The section the stub finds but never measures.
pub const UNMEASURED: &str = ".pcrsig";

/// One event the stub logs: the section and the bytes whose digests it extends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubEvent {
    pub section: &'static str,
    /// `true`: the section's name with its NUL; `false`: its content.
    pub name: bool,
    pub digested: Vec<u8>,
}

/// The event data of a section's events: its name in UTF-16LE with the NUL.
pub fn event_data(section: &str) -> Vec<u8> {
    section
        .encode_utf16()
        .chain([0])
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// The section a record's event data names, when it is one of the stub's (the exact
/// bytes [`event_data`] makes for a measured section).
pub fn section_of(data: &[u8]) -> Option<&'static str> {
    SECTIONS
        .into_iter()
        .filter(|s| *s != UNMEASURED)
        .find(|s| event_data(s) == data)
}

/// What the stub would measure of `image`, in order; an image without `.linux` is
/// refused, as the stub refuses it ("Unable to locate embedded .linux section").
pub fn events(image: &[u8]) -> Result<Vec<StubEvent>, PeError> {
    let layout = pe::layout(image)?;
    unambiguous(&layout)?;
    let mut out = Vec::new();
    for section in SECTIONS {
        let Some(content) = layout.section_bytes(image, section)? else {
            continue;
        };
        if section == ".linux" && content.is_empty() {
            break;
        }
        if section == UNMEASURED || content.is_empty() {
            continue;
        }
        let mut name = section.as_bytes().to_vec();
        name.push(0);
        out.push(StubEvent {
            section,
            name: true,
            digested: name,
        });
        out.push(StubEvent {
            section,
            name: false,
            digested: content,
        });
    }
    if out.first().is_none_or(|e| e.section != ".linux") {
        return Err(PeError::Malformed(
            "no .linux section: not a Unified Kernel Image (systemd-stub refuses it)".into(),
        ));
    }
    Ok(out)
}

/// Refuses an image with two sections the stub could take for one of [`SECTIONS`]
/// (their names start with it).
pub fn unambiguous(layout: &pe::Layout) -> Result<(), PeError> {
    let names = layout.names();
    for s in SECTIONS {
        let n = names.iter().filter(|n| n.starts_with(s)).count();
        if n > 1 {
            return Err(PeError::Malformed(format!(
                "{n} sections systemd-stub would take for {s}: which one it boots is not the one read here"
            )));
        }
    }
    Ok(())
}

/// The `.cmdline` of an image, as the stub hands it to the kernel (its `VirtualSize`
/// bytes; `None` when it has none).
pub fn cmdline(image: &[u8]) -> Result<Option<Vec<u8>>, PeError> {
    pe::layout(image)?.section_bytes(image, ".cmdline")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_data_is_utf16_with_its_nul() {
        assert_eq!(event_data(".linux"), b".\0l\0i\0n\0u\0x\0\0\0".to_vec());
        for s in SECTIONS {
            assert_eq!(section_of(&event_data(s)), (s != UNMEASURED).then_some(s));
        }
        for bad in [
            b".linux\0".to_vec(),
            event_data(".linu"),
            event_data(".text"),
            Vec::new(),
            event_data(".linux")[..12].to_vec(),
        ] {
            assert_eq!(section_of(&bad), None, "{bad:?}");
        }
    }

    /// Two sections the stub could take for one name: refused.
    #[test]
    fn ambiguous_section_names_are_refused() {
        let section = |n: &[u8]| {
            let mut name = [0u8; 8];
            name[..n.len()].copy_from_slice(n);
            pe::Section {
                name,
                virtual_size: 1,
                virtual_address: 0x1000,
                raw: 0..1,
            }
        };
        let layout = |names: &[&[u8]]| pe::Layout {
            image_base: 0,
            section_alignment: 0x1000,
            size_of_image: 0x2000,
            sections: names.iter().map(|n| section(n)).collect(),
            memory_end: 0x1001,
        };
        assert!(unambiguous(&layout(&[b".linux", b".initrd", b".text"])).is_ok());
        for bad in [
            &[b".linux".as_slice(), b".linuxx"][..],
            &[b".initrd", b".initrd"],
        ] {
            let e = unambiguous(&layout(bad)).unwrap_err().to_string();
            assert!(e.contains("2 sections systemd-stub would take"), "{e}");
        }
    }

    #[test]
    fn not_a_pe_image_is_refused() {
        assert!(events(b"MZ").is_err());
        assert!(cmdline(&[0; 10]).is_err());
    }
}

//! The checks of what was loaded: the boot loader's files of the slot the first boot
//! followed (a complete, ordered list, or each file once by digest), and the kernel and
//! initramfs a fallback by kexec measured for the boot it started (steps 6 and 7 of
//! [`super`]).

use std::collections::BTreeSet;

use super::{Boot, BootLoaderError, FileError, KexecError, VerifyError};
use crate::attest::reference::{Digests, ExpectedFile, Reference, SlotReference, StubPart};
use crate::formats::tpm::eventlog::{Event, EV_NO_ACTION};
use crate::formats::tpm::measurement::Measurement;
use crate::formats::tpm::HashAlg;

/// Whether every digest the record holds (in a bank we know) is the predicted one.
pub(super) fn same_digests(a: &Event, want: &Digests) -> bool {
    !a.digests.is_empty()
        && a.digests.iter().all(|(id, d)| {
            HashAlg::from_alg_id(*id).is_some_and(|h| {
                want.get(h.name())
                    .is_some_and(|w| w.eq_ignore_ascii_case(&crate::util::hex(d)))
            })
        })
}

/// Step 6 for a boot started by kexec: the boot before it measured what it loaded, for
/// this boot's slot, and the kernel and initramfs are files the accepted image has for
/// that slot (its boot-loader entry's, by SHA-256: the files GRUB reads, or the `.linux`
/// and `.initrd` of its Unified Kernel Image).
pub(super) fn check_kexec(
    number: usize,
    b: &Boot,
    loaded: Option<Measurement>,
    references: &[Reference],
) -> Result<(), VerifyError> {
    let err = |why: KexecError| VerifyError::Kexec { boot: number, why };
    let Some(Measurement::Kexec {
        slot,
        kernel_sha256,
        initrd_sha256,
    }) = loaded
    else {
        return Err(err(KexecError::NotMeasured));
    };
    if slot != b.slot.as_str() {
        return Err(err(KexecError::OtherSlot {
            loaded: slot,
            slot: b.slot,
        }));
    }
    let entries: Vec<&SlotReference> = references
        .iter()
        .filter(|r| r.image_id == b.image_id)
        .filter_map(|r| r.slot(b.slot))
        .collect();
    // The files GRUB reads for the slot, and for a slot that is a Unified Kernel Image
    // its `.linux` and `.initrd` (the init loads them from the image), by the digests of
    // their contents that systemd-stub's events carry.
    let files: Vec<&str> = entries
        .iter()
        .flat_map(|s| s.files.iter())
        .filter_map(|f| f.digests.get(HashAlg::Sha256.name()).map(String::as_str))
        .collect();
    // An image's section, for the part a kexec loads from it: `.linux` for the kernel,
    // `.initrd` for the initramfs, never the other.
    let section = |name: &str| -> Vec<&str> {
        entries
            .iter()
            .filter_map(|s| s.stub.as_ref())
            .flat_map(|st| st.events.iter())
            .filter(|e| e.part == StubPart::Content && e.section == name)
            .filter_map(|e| e.digests.get(HashAlg::Sha256.name()).map(String::as_str))
            .collect()
    };
    for (what, d, from_image) in [
        ("kernel", kernel_sha256, section(".linux")),
        ("initramfs", initrd_sha256, section(".initrd")),
    ] {
        if !files
            .iter()
            .chain(from_image.iter())
            .any(|f| f.eq_ignore_ascii_case(&d))
        {
            return Err(err(KexecError::UnknownFile {
                what,
                digest: d,
                image: b.image_id.clone(),
                slot: b.slot,
            }));
        }
    }
    Ok(())
}

/// Step 7: the boot loader's files of the entry the first boot followed: a complete list
/// is every record in its PCRs, in order (the order within one PCR is bound by the hash
/// chain); otherwise each file with digests appears exactly once.
pub(super) fn check_files(records: &[Event], s: &SlotReference) -> Result<usize, VerifyError> {
    if !s.files_complete {
        return check_predicted_files(records, s);
    }
    let pcrs: BTreeSet<u32> = s.files.iter().map(|f| f.pcr).collect();
    let mut checked = 0;
    for pcr in pcrs {
        let want: Vec<&ExpectedFile> = s.files.iter().filter(|f| f.pcr == pcr).collect();
        let got: Vec<&Event> = records
            .iter()
            .filter(|e| e.pcr == pcr && e.event_type != EV_NO_ACTION)
            .collect();
        let text = |e: &Event| format!("{:?}", String::from_utf8_lossy(&e.data));
        if got.len() != want.len() {
            return Err(VerifyError::BootLoader {
                pcr,
                why: BootLoaderError::Count {
                    got: got.len(),
                    records: got.iter().map(|e| text(e)).collect::<Vec<_>>().join(", "),
                    want: want.len(),
                    files: want
                        .iter()
                        .map(|f| f.path.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                },
            });
        }
        for (k, (e, f)) in got.iter().zip(&want).enumerate() {
            if f.digests.is_empty() {
                continue;
            }
            if !same_digests(e, &f.digests) {
                return Err(VerifyError::BootLoader {
                    pcr,
                    why: BootLoaderError::Record {
                        index: k + 1,
                        record: text(e),
                        path: f.path.clone(),
                    },
                });
            }
            checked += 1;
        }
    }
    Ok(checked)
}

/// Each predicted boot-loader file of the slot, exactly once, by PCR and digest.
fn check_predicted_files(records: &[Event], slot: &SlotReference) -> Result<usize, VerifyError> {
    let mut checked = 0;
    for f in slot.files.iter().filter(|f| !f.digests.is_empty()) {
        let err = |why: FileError| VerifyError::File {
            path: f.path.clone(),
            pcr: f.pcr,
            why,
        };
        let sha256 = f
            .digests
            .get(HashAlg::Sha256.name())
            .or_else(|| f.digests.values().next())
            .ok_or_else(|| err(FileError::NoDigest))?;
        let mut found = 0;
        for e in records
            .iter()
            .filter(|e| e.pcr == f.pcr && e.event_type != EV_NO_ACTION)
        {
            let matches_one = e
                .digests
                .iter()
                .any(|(_, d)| sha256.eq_ignore_ascii_case(&crate::util::hex(d)))
                || same_digests(e, &f.digests);
            if !matches_one {
                continue;
            }
            if !same_digests(e, &f.digests) {
                return Err(err(FileError::MixedBanks {
                    record: String::from_utf8_lossy(&e.data).into_owned(),
                }));
            }
            found += 1;
        }
        match found {
            1 => checked += 1,
            0 => return Err(err(FileError::NotRead)),
            count => return Err(err(FileError::Repeated { count })),
        }
    }
    Ok(checked)
}

//! Authenticode over PE/COFF images (UEFI applications: shim, GRUB, the kernel's EFI
//! stub): which bytes the image digest covers, the attribute certificate table's
//! signatures, and the digest a signature's `SpcIndirectDataContent` carries. Pure
//! parsing over bytes; whether a signature is trusted is [`crate::trust::authenticode`]'s.
//!
//! Contract: [`parse`] reads the headers with goblin and applies the rules of the
//! kernel's `verify_pefile.c`, which `kexec_file_load` uses under lockdown
//! (`pefile_parse_binary`, `pefile_strip_sig_wrapper`), and EDK2's
//! DxeImageVerificationLib shares for the digest:
//! - the optional header is PE32 or PE32+, `SizeOfHeaders` lies after the data
//!   directories and inside the file, and the data directories and the section table
//!   (which follows them) fit inside the headers;
//! - a certificate table entry that is zero in address or size means unsigned
//!   ([`PeError::Unsigned`], the kernel's ENODATA); otherwise the table lies after the
//!   headers and inside the file;
//! - each `WIN_CERTIFICATE` (8-byte aligned, one after the other) has revision 2.0 and
//!   type `PKCS_SIGNED_DATA` and a length inside the table; its body is trimmed to the
//!   DER length of its outer SEQUENCE (sbsign and pesign pad it).
//!
//! [`Pe::table_end`] walks the table as the firmware does (EDK2's
//! `DxeImageVerificationHandler` in `SecurityPkg/Library/DxeImageVerificationLib`), and
//! says why when the walk does not end exactly at the table's end (EDK2 then leaves the
//! image unverified, whatever its signatures): from the table's start, while short of its
//! end, more than 8 bytes must be left, the entry's length rounded up to 8 must fit in
//! what is left, and the length must exceed 8 for `PKCS_SIGNED_DATA`, 24 for
//! `EFI_GUID` and be at least 8 for any other type; the next entry starts at the rounded
//! length. Trailing bytes after the last entry (unless they happen to form entries) and a
//! last entry not padded to 8 inside the table therefore fail it. The kernel reads only
//! the first entry and requires only that it fit in the table (`pefile_strip_sig_wrapper`
//! since "verify_pefile: relax wrapper length check", Linux 6.3 and its stable
//! backports; before it the entry's length rounded up to 8 had to be the table's), so
//! [`parse`] refuses neither.
//!
//! [`Pe::digest`] hashes as the kernel's `pefile_digest_pe` and EDK2's `HashPeImage`:
//! the headers without the checksum and the certificate table entry, the sections with
//! raw data in file order, then whatever follows the last section except the
//! certificate table; no padding.
//!
//! Why not goblin's `authenticode_ranges`: it slices without bounds checks (a crafted
//! image panics it) and pads the trailing data to 8 bytes, which neither the kernel nor
//! EDK2 does. Every range here is checked against the file ([`PeError::Malformed`]
//! names the field); a section outside the file, which the kernel would hash past the
//! end of its buffer, is refused.
//!
//! Limits: the kernel looks only at the first signature; [`Pe::signatures`] holds all of
//! them (the firmware and shim accept any that verifies), and the caller chooses. Only
//! revision 2.0 `PKCS_SIGNED_DATA` entries are signatures here; EDK2 also takes that type
//! at any revision, and an `EFI_GUID` entry of type `EFI_CERT_TYPE_PKCS7_GUID`.
//! [`indirect_digest`] reads the `SpcIndirectDataContent` as the kernel's `mscode.asn1`:
//! the data type must be `SpcPeImageData` (or `msIndividualSPKeyPurpose`, which the kernel
//! also takes), the digest algorithm one of SHA-1/224/256/384/512 (MD4/MD5 are refused).

use std::ops::Range;

use crate::formats::pkcs7::HashAlg;
use crate::util::le::{u16_le as le16, u32_le as le32};

mod layout;
pub use layout::{layout, Layout};

/// A PE image the kernel or the firmware would not take, or one not signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeError {
    #[error("not a PE image: {0}")]
    Malformed(String),
    /// No certificate table: the image carries no signature (the kernel's ENODATA).
    #[error("the image is not signed (no certificate table)")]
    Unsigned,
    #[error("certificate table: {0}")]
    CertTable(String),
    #[error("SpcIndirectDataContent: {0}")]
    IndirectData(String),
}

/// Why the firmware's walk of the attribute certificate table (EDK2's
/// `DxeImageVerificationHandler`) does not end exactly at the table's end, where `at` is
/// the file offset it stopped at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableEnd {
    /// 8 bytes or fewer left: no room for an entry with data.
    #[error("{left} bytes at {at:#x} before the table's end, too few for a WIN_CERTIFICATE (more than 8 needed)")]
    Trailing { at: usize, left: usize },
    /// An entry longer than what is left of the table.
    #[error("the entry at {at:#x} (length {len}) runs past the table's end ({left} bytes left)")]
    PastEnd { at: usize, len: usize, left: usize },
    /// An entry that fits but whose padding to 8 bytes does not: the table ends inside it.
    #[error(
        "the entry at {at:#x} (length {len}) is not padded to 8 bytes inside the table: \
         {left} bytes left, {padded} needed"
    )]
    Unpadded {
        at: usize,
        len: usize,
        left: usize,
        padded: usize,
    },
    /// An entry too short for its type (trailing zeros read as an entry land here).
    #[error(
        "the entry at {at:#x} (type {kind:#06x}, length {len}) is shorter than its type \
         needs ({min} bytes)"
    )]
    TooShort {
        at: usize,
        kind: u16,
        len: usize,
        min: usize,
    },
}

pub(super) fn malformed(what: impl Into<String>) -> PeError {
    PeError::Malformed(what.into())
}

/// One `WIN_CERTIFICATE` of the attribute certificate table holding a PKCS#7 signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Its place in the table (0: the first, the only one the kernel reads).
    pub index: usize,
    /// The file range of its PKCS#7 SignedData (DER, padding trimmed).
    pub der: Range<usize>,
}

/// One section's raw data, with what the kernel sorts ties by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub name: [u8; 8],
    pub virtual_size: u32,
    pub virtual_address: u32,
    pub raw: Range<usize>,
}

/// In which order sections with the same file offset are hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionOrder {
    /// The kernel's `pefile_compare_shdrs`: file offset, then virtual address, name,
    /// virtual size, raw size.
    Kernel,
    /// EDK2's and sbsigntool's: file offset, ties in table order.
    Firmware,
}

/// A parsed, signed PE image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pe {
    /// The header ranges the image digest covers.
    pub headers: Vec<Range<usize>>,
    /// The sections with raw data, in table order.
    pub sections: Vec<Section>,
    /// What follows the sections up to the certificate table, hashed last (empty: none).
    pub tail: Range<usize>,
    /// The attribute certificate table.
    pub cert_table: Range<usize>,
    /// The PKCS#7 signatures of the table, in file order: entries of other types are
    /// skipped and a truncated entry ends the table, as EDK2 reads it.
    pub signatures: Vec<Signature>,
    /// Why the table's first entry is not a signature the kernel reads (its
    /// `pefile_strip_sig_wrapper`), when it is not.
    pub first_unusable: Option<String>,
    /// Why the firmware's walk of the table does not end exactly at its end, when it does
    /// not (see the module's docs): EDK2 then leaves the image unverified.
    pub table_end: Option<TableEnd>,
    /// The file offset of the certificate table's data directory entry (its address,
    /// then its size, 32 bits each).
    pub cert_entry: usize,
}

/// `WIN_CERT_REVISION_2_0`, `WIN_CERT_TYPE_PKCS_SIGNED_DATA`.
const WIN_CERT_REVISION_2_0: u16 = 0x0200;
const WIN_CERT_TYPE_PKCS_SIGNED_DATA: u16 = 0x0002;
/// `WIN_CERT_TYPE_EFI_GUID`, and the size of its header with the GUID (EDK2's
/// `OFFSET_OF (WIN_CERTIFICATE_UEFI_GUID, CertData)`).
const WIN_CERT_TYPE_EFI_GUID: u16 = 0x0ef1;
const WIN_CERT_UEFI_GUID_HEADER: usize = 24;
const WIN_CERT_HEADER: usize = 8;
/// The optional header magics.
const PE32: u16 = 0x10b;
const PE32_PLUS: u16 = 0x20b;
const CERT_TABLE_INDEX: usize = 4;
const DATA_DIR_LEN: usize = 8;
const SECTION_HEADER_LEN: usize = 40;
/// The DOS header's size: the PE header may not start inside it (the kernel's
/// `chkaddr(sizeof(struct mz_hdr), ...)`).
const DOS_HEADER_LEN: usize = 64;
/// The PE signature and the COFF header.
const PE_HEADER_LEN: usize = 24;

pub(super) fn usize_of(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A section name for messages.
pub(super) fn section_name(name: &[u8; 8]) -> String {
    String::from_utf8_lossy(name)
        .trim_end_matches('\0')
        .to_string()
}

/// Parses `image`'s headers and certificate table.
pub fn parse(image: &[u8]) -> Result<Pe, PeError> {
    let (coff, opt_at) = coff_header(image)?;
    let opt = optional_header(image, opt_at)?;
    let cert_entry_at = opt.dirs_at + CERT_TABLE_INDEX * DATA_DIR_LEN;
    let cert_table = cert_table(image, cert_entry_at, opt.header_size)?;
    let sections = sections(image, &coff, &opt)?;
    let headers = vec![
        0..opt.checksum_at,
        opt.checksum_at + 4..cert_entry_at,
        cert_entry_at + DATA_DIR_LEN..opt.header_size,
    ];
    let tail = tail(image, opt.header_size, &sections, cert_table.len())?;
    let table_end = firmware_walk(image, &cert_table).err();
    let (signatures, first_unusable) = signatures(image, &cert_table);
    if signatures.is_empty() {
        return Err(PeError::CertTable(first_unusable.unwrap_or_else(|| {
            "no WIN_CERTIFICATE holds a PKCS#7 signature".into()
        })));
    }
    Ok(Pe {
        headers,
        sections,
        tail,
        cert_table,
        signatures,
        first_unusable,
        table_end,
        cert_entry: cert_entry_at,
    })
}

/// The COFF header after the DOS header and the PE signature it points at, and the file
/// offset of the optional header that follows it.
pub(super) fn coff_header(
    image: &[u8],
) -> Result<(goblin::pe::header::CoffHeader, usize), PeError> {
    if image.len() < DOS_HEADER_LEN {
        return Err(malformed(format!(
            "{} bytes, shorter than a DOS header ({DOS_HEADER_LEN})",
            image.len()
        )));
    }
    // goblin's DOS header (with the PE signature it points at) and COFF header; its
    // whole-header parser refuses the kernel's EFI stub, whose PE header sits right after
    // the DOS header (offset 0x40).
    let dos = goblin::pe::header::DosHeader::parse(image).map_err(|e| malformed(e.to_string()))?;
    let pe_at = usize_of(dos.pe_pointer);
    if pe_at < DOS_HEADER_LEN {
        return Err(malformed(format!(
            "the PE header at {pe_at:#x} starts inside the DOS header"
        )));
    }
    if pe_at.saturating_add(PE_HEADER_LEN) > image.len() {
        return Err(malformed(format!(
            "the PE and COFF headers at {pe_at:#x} run past the end of the file ({:#x} bytes)",
            image.len()
        )));
    }
    let mut coff_at = pe_at + 4;
    let coff = goblin::pe::header::CoffHeader::parse(image, &mut coff_at)
        .map_err(|e| malformed(format!("COFF header at {:#x}: {e}", pe_at + 4)))?;
    Ok((coff, coff_at))
}

/// Where the parts of a checked optional header lie.
pub(super) struct OptionalHeader {
    /// The file offsets of the optional header, its CheckSum and its data directories.
    at: usize,
    checksum_at: usize,
    dirs_at: usize,
    /// `SizeOfHeaders`: after the data directories and inside the file.
    header_size: usize,
    /// `NumberOfRvaAndSizes`: the data directories, which fit in the headers and include
    /// the certificate table's.
    n_dirs: usize,
    /// PE32+ (else PE32).
    pub(super) plus: bool,
}

/// Reads and checks the optional header at `opt_at`.
pub(super) fn optional_header(image: &[u8], opt_at: usize) -> Result<OptionalHeader, PeError> {
    let magic = le16(image, opt_at).ok_or_else(|| {
        malformed(format!(
            "the optional header at {opt_at:#x} is past the end of the file"
        ))
    })?;
    // The fixed part of the optional header before the data directories, and where in it
    // NumberOfRvaAndSizes is.
    let (fixed, n_dirs_at) = match magic {
        PE32 => (96, 92),
        PE32_PLUS => (112, 108),
        m => return Err(malformed(format!("unknown optional header magic {m:#06x}"))),
    };
    let size_of_headers = optional_field(image, opt_at, 60, "SizeOfHeaders")?;
    let number_of_rva_and_sizes = optional_field(image, opt_at, n_dirs_at, "NumberOfRvaAndSizes")?;
    let checksum_at = opt_at + 64;
    let dirs_at = opt_at + fixed;
    let header_size = usize_of(size_of_headers);
    if dirs_at >= header_size || header_size >= image.len() {
        return Err(malformed(format!(
            "SizeOfHeaders {header_size:#x} is not between the data directories ({dirs_at:#x}) \
             and the end of the file ({:#x})",
            image.len()
        )));
    }
    let n_dirs = usize_of(number_of_rva_and_sizes);
    if n_dirs > (header_size - dirs_at) / DATA_DIR_LEN {
        return Err(malformed(format!(
            "{n_dirs} data directories do not fit in the headers"
        )));
    }
    if n_dirs <= CERT_TABLE_INDEX {
        return Err(malformed(format!(
            "{n_dirs} data directories: none for the certificate table"
        )));
    }
    Ok(OptionalHeader {
        at: opt_at,
        checksum_at,
        dirs_at,
        header_size,
        n_dirs,
        plus: magic == PE32_PLUS,
    })
}

/// The 32-bit field `what` at `at` in the optional header at `opt_at`.
pub(super) fn optional_field(
    image: &[u8],
    opt_at: usize,
    at: usize,
    what: &str,
) -> Result<u32, PeError> {
    le32(image, opt_at + at).ok_or_else(|| {
        malformed(format!(
            "{what} (at {:#x}) is past the end of the file",
            opt_at + at
        ))
    })
}

/// The certificate table the data directory entry at `cert_entry_at` names, checked to
/// lie after the headers (`header_size` bytes) and inside the file.
fn cert_table(
    image: &[u8],
    cert_entry_at: usize,
    header_size: usize,
) -> Result<Range<usize>, PeError> {
    let cert_addr =
        usize_of(le32(image, cert_entry_at).ok_or_else(|| malformed("data directories"))?);
    let cert_size =
        usize_of(le32(image, cert_entry_at + 4).ok_or_else(|| malformed("data directories"))?);
    if cert_addr == 0 || cert_size == 0 {
        return Err(PeError::Unsigned);
    }
    if cert_addr < header_size || cert_size >= image.len() || cert_addr > image.len() - cert_size {
        return Err(PeError::CertTable(format!(
            "{cert_size:#x} bytes at {cert_addr:#x} are not after the headers and inside the file"
        )));
    }
    Ok(cert_addr..cert_addr + cert_size)
}

/// The sections with raw data, in table order, from the section table after the data
/// directories (checked to fit in the headers).
pub(super) fn sections(
    image: &[u8],
    coff: &goblin::pe::header::CoffHeader,
    opt: &OptionalHeader,
) -> Result<Vec<Section>, PeError> {
    // The section table follows the data directories (the kernel reads it there).
    let secs_at = opt.dirs_at + opt.n_dirs * DATA_DIR_LEN;
    if usize::from(coff.size_of_optional_header) != secs_at - opt.at {
        return Err(malformed(format!(
            "SizeOfOptionalHeader {} does not end at the data directories ({})",
            coff.size_of_optional_header,
            secs_at - opt.at
        )));
    }
    let n_secs = usize::from(coff.number_of_sections);
    if n_secs > (opt.header_size - secs_at) / SECTION_HEADER_LEN {
        return Err(malformed(format!(
            "{n_secs} section headers do not fit in the headers"
        )));
    }
    // The section headers, read here: goblin's reader resolves long names (`/N`) from the
    // COFF string table and fails where that table is absent, and the digest does not
    // depend on names (the kernel reads them only to break ties).
    let mut sections = Vec::new();
    for i in 0..n_secs {
        if let Some(s) = section(image, secs_at, i)? {
            sections.push(s);
        }
    }
    Ok(sections)
}

/// Section header `i` of the table at `secs_at`: its raw data, checked to lie inside the
/// file, or `None` when it has none.
fn section(image: &[u8], secs_at: usize, i: usize) -> Result<Option<Section>, PeError> {
    let at = secs_at + i * SECTION_HEADER_LEN;
    let h = image
        .get(at..at + SECTION_HEADER_LEN)
        .ok_or_else(|| malformed(format!("section header {i} at {at:#x}")))?;
    let mut name = [0u8; 8];
    name.copy_from_slice(h.get(..8).unwrap_or(&[0; 8]));
    let word = |o: usize| le32(h, o).unwrap_or(0);
    let (vsize, va, raw_size, raw_ptr) = (word(8), word(12), word(16), word(20));
    if raw_size == 0 {
        return Ok(None);
    }
    let start = usize_of(raw_ptr);
    let end = start
        .checked_add(usize_of(raw_size))
        .filter(|e| *e <= image.len())
        .ok_or_else(|| {
            malformed(format!(
                "section {}: {raw_size:#x} bytes at {start:#x} are outside the file",
                section_name(&name)
            ))
        })?;
    Ok(Some(Section {
        name,
        virtual_size: vsize,
        virtual_address: va,
        raw: start..end,
    }))
}

/// What follows the headers (`header_size` bytes) and `sections` up to the certificate
/// table (`cert_size` bytes at the end of the file), hashed last.
fn tail(
    image: &[u8],
    header_size: usize,
    sections: &[Section],
    cert_size: usize,
) -> Result<Range<usize>, PeError> {
    let mut sum = header_size;
    for s in sections {
        sum = sum
            .checked_add(s.raw.len())
            .ok_or_else(|| malformed("section sizes overflow"))?;
    }
    let mut tail = sum..sum;
    if image.len() > sum {
        let tail_end = image
            .len()
            .checked_sub(cert_size)
            .filter(|e| *e >= sum)
            .ok_or_else(|| {
                malformed(format!(
                    "the sections ({sum:#x} bytes with the headers) overlap the certificate table"
                ))
            })?;
        tail = sum..tail_end;
    }
    Ok(tail)
}

/// Walks the certificate table at `table` as EDK2's `DxeImageVerificationHandler` does;
/// `Ok` when the walk ends exactly at the table's end.
fn firmware_walk(image: &[u8], table: &Range<usize>) -> Result<(), TableEnd> {
    let mut at = table.start;
    while at < table.end {
        let left = table.end - at;
        if left <= WIN_CERT_HEADER {
            return Err(TableEnd::Trailing { at, left });
        }
        // More than 8 bytes are left inside the table, which lies inside the file.
        let (Some(len), Some(kind)) = (le32(image, at), le16(image, at + 6)) else {
            return Err(TableEnd::Trailing { at, left });
        };
        let len = usize_of(len);
        if len > left {
            return Err(TableEnd::PastEnd { at, len, left });
        }
        let padded = len.div_ceil(8) * 8;
        if padded > left {
            return Err(TableEnd::Unpadded {
                at,
                len,
                left,
                padded,
            });
        }
        let min = match kind {
            WIN_CERT_TYPE_PKCS_SIGNED_DATA => WIN_CERT_HEADER + 1,
            WIN_CERT_TYPE_EFI_GUID => WIN_CERT_UEFI_GUID_HEADER + 1,
            _ => WIN_CERT_HEADER,
        };
        if len < min {
            return Err(TableEnd::TooShort { at, kind, len, min });
        }
        at += padded;
    }
    Ok(())
}

/// The PKCS#7 `WIN_CERTIFICATE`s of the table at `table`, and why the first entry is
/// not one when it is not.
fn signatures(image: &[u8], table: &Range<usize>) -> (Vec<Signature>, Option<String>) {
    let mut out = Vec::new();
    let mut first = None;
    let mut at = table.start;
    let mut index = 0;
    while at < table.end {
        let left = table.end - at;
        let (Some(len), Some(revision), Some(kind)) =
            (le32(image, at), le16(image, at + 4), le16(image, at + 6))
        else {
            break;
        };
        let len = usize_of(len);
        let problem = if left < 8 {
            Some(format!(
                "{left} bytes at {at:#x}, shorter than a WIN_CERTIFICATE header"
            ))
        } else if len < 8 || len > left {
            Some(format!(
                "WIN_CERTIFICATE at {at:#x}: length {len} is not within the table ({left} bytes left)"
            ))
        } else if revision != WIN_CERT_REVISION_2_0 {
            Some(format!(
                "WIN_CERTIFICATE at {at:#x}: revision {revision:#06x}, not 2.0"
            ))
        } else if kind != WIN_CERT_TYPE_PKCS_SIGNED_DATA {
            Some(format!(
                "WIN_CERTIFICATE at {at:#x}: type {kind:#06x}, not PKCS_SIGNED_DATA"
            ))
        } else {
            let body = at + 8..at + len;
            match der_len(image.get(body.clone()).unwrap_or_default()) {
                Some(n) => {
                    out.push(Signature {
                        index,
                        der: body.start..body.start + n,
                    });
                    None
                }
                None => Some(format!(
                    "WIN_CERTIFICATE at {at:#x}: its body is not a DER SEQUENCE that fits in it"
                )),
            }
        };
        if index == 0 {
            first = problem;
        }
        // A truncated entry ends the table; one of another kind is skipped.
        if left < 8 || len < 8 || len > left {
            break;
        }
        let Some(next) = at.checked_add(len.div_ceil(8) * 8) else {
            break;
        };
        at = next;
        index += 1;
    }
    (out, first)
}

/// The length of the DER SEQUENCE at the start of `b` (header included), when it fits in
/// `b`: the kernel's check in `pefile_strip_sig_wrapper` (definite lengths up to two
/// length bytes).
fn der_len(b: &[u8]) -> Option<usize> {
    if *b.first()? != 0x30 {
        return None;
    }
    let len = match *b.get(1)? {
        n @ 0..=0x7f => usize::from(n) + 2,
        0x81 => usize::from(*b.get(2)?) + 3,
        0x82 => ((usize::from(*b.get(2)?) << 8) | usize::from(*b.get(3)?)) + 4,
        _ => return None,
    };
    (len <= b.len()).then_some(len)
}

impl Pe {
    /// The raw data of the first section named `name` (`.sbat`): the bytes its header
    /// points at, up to its raw size (the parsers of what it holds stop at a NUL).
    pub fn section<'a>(&self, image: &'a [u8], name: &str) -> Option<&'a [u8]> {
        self.sections
            .iter()
            .find(|s| section_name(&s.name) == name)
            .and_then(|s| image.get(s.raw.clone()))
    }

    /// The file ranges the digest covers, in order, with sections ordered by `order`.
    pub fn hashed(&self, order: SectionOrder) -> Vec<Range<usize>> {
        let mut secs: Vec<&Section> = self.sections.iter().collect();
        match order {
            // A stable sort: ties stay in table order.
            SectionOrder::Firmware => secs.sort_by_key(|s| s.raw.start),
            SectionOrder::Kernel => secs.sort_by(|a, b| {
                a.raw
                    .start
                    .cmp(&b.raw.start)
                    .then(a.virtual_address.cmp(&b.virtual_address))
                    .then(a.name.cmp(&b.name))
                    .then(a.virtual_size.cmp(&b.virtual_size))
                    .then(a.raw.len().cmp(&b.raw.len()))
            }),
        }
        let mut v = self.headers.clone();
        v.extend(secs.iter().map(|s| s.raw.clone()));
        if !self.tail.is_empty() {
            v.push(self.tail.clone());
        }
        v
    }

    /// The Authenticode digest of `image` (the bytes [`parse`] read) with `alg`, sections
    /// in `order`.
    pub fn digest(&self, image: &[u8], alg: HashAlg, order: SectionOrder) -> Vec<u8> {
        use sha2::Digest;
        fn run<D: sha2::Digest>(mut d: D, image: &[u8], ranges: &[Range<usize>]) -> Vec<u8> {
            for r in ranges {
                d.update(image.get(r.clone()).unwrap_or_default());
            }
            d.finalize().to_vec()
        }
        let ranges = self.hashed(order);
        match alg {
            HashAlg::Sha1 => run(sha1::Sha1::new(), image, &ranges),
            HashAlg::Sha224 => run(sha2::Sha224::new(), image, &ranges),
            HashAlg::Sha256 => run(sha2::Sha256::new(), image, &ranges),
            HashAlg::Sha384 => run(sha2::Sha384::new(), image, &ranges),
            HashAlg::Sha512 => run(sha2::Sha512::new(), image, &ranges),
        }
    }
}

/// `SpcPeImageData` and `msIndividualSPKeyPurpose`, the data types the kernel's
/// `mscode_note_content_type` accepts.
const SPC_PE_IMAGE_DATA: &str = "1.3.6.1.4.1.311.2.1.15";
const MS_INDIVIDUAL_SP_KEY_PURPOSE: &str = "1.3.6.1.4.1.311.2.1.21";

/// The digest algorithm and digest of an `SpcIndirectDataContent` whose value (the bytes
/// inside its SEQUENCE header, as [`crate::formats::pkcs7::parse_authenticode`] returns
/// them) is `content`.
pub fn indirect_digest(content: &[u8]) -> Result<(HashAlg, Vec<u8>), PeError> {
    use der::{Decode, Reader};
    let bad = |m: String| PeError::IndirectData(m);
    let mut r = der::SliceReader::new(content).map_err(|e| bad(e.to_string()))?;
    // data: SEQUENCE { type OID, value ANY OPTIONAL }
    let data = der::asn1::AnyRef::decode(&mut r).map_err(|e| bad(format!("data: {e}")))?;
    let mut dr = der::SliceReader::new(data.value()).map_err(|e| bad(e.to_string()))?;
    let kind = der::asn1::ObjectIdentifier::decode(&mut dr)
        .map_err(|e| bad(format!("data type: {e}")))?
        .to_string();
    if kind != SPC_PE_IMAGE_DATA && kind != MS_INDIVIDUAL_SP_KEY_PURPOSE {
        return Err(bad(format!(
            "data type {kind} is not SpcPeImageData ({SPC_PE_IMAGE_DATA})"
        )));
    }
    // messageDigest: DigestInfo SEQUENCE { AlgorithmIdentifier, OCTET STRING }
    let di = der::asn1::AnyRef::decode(&mut r).map_err(|e| bad(format!("messageDigest: {e}")))?;
    if !r.is_finished() {
        return Err(bad("trailing bytes".into()));
    }
    let mut dr = der::SliceReader::new(di.value()).map_err(|e| bad(e.to_string()))?;
    let alg = spki::AlgorithmIdentifierOwned::decode(&mut dr)
        .map_err(|e| bad(format!("digest algorithm: {e}")))?;
    let digest =
        der::asn1::OctetString::decode(&mut dr).map_err(|e| bad(format!("digest: {e}")))?;
    let oid = alg.oid.to_string();
    let alg = HashAlg::from_oid(&oid)
        .ok_or_else(|| bad(format!("unsupported digest algorithm {oid}")))?;
    let digest = digest.as_bytes().to_vec();
    if digest.len() != alg.output_len() {
        return Err(bad(format!(
            "a {}-byte digest for {}",
            digest.len(),
            alg.name()
        )));
    }
    Ok((alg, digest))
}

#[cfg(test)]
mod tests;

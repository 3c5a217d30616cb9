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
//! them (the firmware and shim accept any that verifies), and the caller chooses.
//! [`indirect_digest`] reads the `SpcIndirectDataContent` as the kernel's `mscode.asn1`:
//! the data type must be `SpcPeImageData` (or `msIndividualSPKeyPurpose`, which the kernel
//! also takes), the digest algorithm one of SHA-1/224/256/384/512 (MD4/MD5 are refused).

use std::ops::Range;

use crate::formats::pkcs7::HashAlg;

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

fn malformed(what: impl Into<String>) -> PeError {
    PeError::Malformed(what.into())
}

/// One `WIN_CERTIFICATE` of the attribute certificate table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The file range of its PKCS#7 SignedData (DER, padding trimmed).
    pub der: Range<usize>,
}

/// A parsed, signed PE image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pe {
    /// The file ranges the image digest covers, in order.
    pub hashed: Vec<Range<usize>>,
    /// The attribute certificate table.
    pub cert_table: Range<usize>,
    /// Its signatures, in file order (the kernel uses the first).
    pub signatures: Vec<Signature>,
}

/// `WIN_CERT_REVISION_2_0`, `WIN_CERT_TYPE_PKCS_SIGNED_DATA`.
const WIN_CERT_REVISION_2_0: u16 = 0x0200;
const WIN_CERT_TYPE_PKCS_SIGNED_DATA: u16 = 0x0002;
/// The optional header magics.
const PE32: u16 = 0x10b;
const PE32_PLUS: u16 = 0x20b;
const CERT_TABLE_INDEX: usize = 4;
const DATA_DIR_LEN: usize = 8;
const SECTION_HEADER_LEN: usize = 40;

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn usize_of(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// Parses `image`'s headers and certificate table.
pub fn parse(image: &[u8]) -> Result<Pe, PeError> {
    // goblin's DOS header (with the PE signature it points at) and COFF header; its
    // whole-header parser refuses the kernel's EFI stub, whose PE header sits right after
    // the DOS header (offset 0x40).
    let dos = goblin::pe::header::DosHeader::parse(image).map_err(|e| malformed(e.to_string()))?;
    let pe_at = usize_of(dos.pe_pointer);
    let mut coff_at = pe_at
        .checked_add(4)
        .ok_or_else(|| malformed("PE header offset"))?;
    let coff = goblin::pe::header::CoffHeader::parse(image, &mut coff_at)
        .map_err(|e| malformed(format!("COFF header: {e}")))?;
    // Then the optional header.
    let opt_at = coff_at;
    let magic = le16(image, opt_at).ok_or_else(|| malformed("optional header outside the file"))?;
    // The fixed part of the optional header before the data directories, and where in it
    // NumberOfRvaAndSizes is.
    let (fixed, n_dirs_at) = match magic {
        PE32 => (96, 92),
        PE32_PLUS => (112, 108),
        m => return Err(malformed(format!("unknown optional header magic {m:#06x}"))),
    };
    let field = |at: usize, what: &str| {
        le32(image, opt_at + at).ok_or_else(|| malformed(format!("{what} outside the file")))
    };
    let size_of_headers = field(60, "SizeOfHeaders")?;
    let number_of_rva_and_sizes = field(n_dirs_at, "NumberOfRvaAndSizes")?;
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
    let cert_entry_at = dirs_at + CERT_TABLE_INDEX * DATA_DIR_LEN;
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
    let cert_table = cert_addr..cert_addr + cert_size;
    // The section table follows the data directories (the kernel reads it there).
    let secs_at = dirs_at + n_dirs * DATA_DIR_LEN;
    if usize::from(coff.size_of_optional_header) != secs_at - opt_at {
        return Err(malformed(format!(
            "SizeOfOptionalHeader {} does not end at the data directories ({})",
            coff.size_of_optional_header,
            secs_at - opt_at
        )));
    }
    let n_secs = usize::from(coff.number_of_sections);
    if n_secs > (header_size - secs_at) / SECTION_HEADER_LEN {
        return Err(malformed(format!(
            "{n_secs} section headers do not fit in the headers"
        )));
    }
    let mut offset = secs_at;
    let sections = coff
        .sections(image, &mut offset)
        .map_err(|e| malformed(format!("section table: {e}")))?;
    let mut raw: Vec<Range<usize>> = Vec::new();
    for s in &sections {
        if s.size_of_raw_data == 0 {
            continue;
        }
        let start = usize_of(s.pointer_to_raw_data);
        let end = start
            .checked_add(usize_of(s.size_of_raw_data))
            .filter(|e| *e <= image.len())
            .ok_or_else(|| {
                malformed(format!(
                    "section {}: {:#x} bytes at {start:#x} are outside the file",
                    String::from_utf8_lossy(&s.name).trim_end_matches('\0'),
                    s.size_of_raw_data
                ))
            })?;
        raw.push(start..end);
    }
    // In file order (a stable sort, as the kernel's insertion sort).
    raw.sort_by_key(|r| r.start);
    let mut hashed = vec![
        0..checksum_at,
        checksum_at + 4..cert_entry_at,
        cert_entry_at + DATA_DIR_LEN..header_size,
    ];
    let mut sum = header_size;
    for r in raw {
        sum = sum
            .checked_add(r.len())
            .ok_or_else(|| malformed("section sizes overflow"))?;
        hashed.push(r);
    }
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
        if tail_end > sum {
            hashed.push(sum..tail_end);
        }
    }
    let signatures = signatures(image, &cert_table)?;
    Ok(Pe {
        hashed,
        cert_table,
        signatures,
    })
}

/// The `WIN_CERTIFICATE`s of the table at `table`.
fn signatures(image: &[u8], table: &Range<usize>) -> Result<Vec<Signature>, PeError> {
    let bad = |m: String| PeError::CertTable(m);
    let mut out = Vec::new();
    let mut at = table.start;
    while at < table.end {
        let left = table.end - at;
        if left < 8 {
            // Trailing padding shorter than a header ends the table.
            if image
                .get(at..table.end)
                .is_some_and(|p| p.iter().all(|b| *b == 0))
            {
                break;
            }
            return Err(bad(format!("{left} stray bytes at {at:#x}")));
        }
        let len = usize_of(le32(image, at).ok_or_else(|| bad("truncated".into()))?);
        let revision = le16(image, at + 4).ok_or_else(|| bad("truncated".into()))?;
        let kind = le16(image, at + 6).ok_or_else(|| bad("truncated".into()))?;
        if len < 8 || len > left {
            return Err(bad(format!(
                "WIN_CERTIFICATE at {at:#x}: length {len} is not within the table ({left} bytes left)"
            )));
        }
        if revision != WIN_CERT_REVISION_2_0 {
            return Err(bad(format!(
                "WIN_CERTIFICATE at {at:#x}: revision {revision:#06x}, not 2.0"
            )));
        }
        if kind != WIN_CERT_TYPE_PKCS_SIGNED_DATA {
            return Err(bad(format!(
                "WIN_CERTIFICATE at {at:#x}: type {kind:#06x}, not PKCS_SIGNED_DATA"
            )));
        }
        let body = at + 8..at + len;
        let der_len = der_len(image.get(body.clone()).unwrap_or_default()).ok_or_else(|| {
            bad(format!(
                "WIN_CERTIFICATE at {at:#x}: its body is not a DER SEQUENCE that fits in it"
            ))
        })?;
        out.push(Signature {
            der: body.start..body.start + der_len,
        });
        // The next one starts 8-byte aligned.
        at = at
            .checked_add(len.div_ceil(8) * 8)
            .ok_or_else(|| bad("length overflow".into()))?;
    }
    if out.is_empty() {
        return Err(bad("no WIN_CERTIFICATE".into()));
    }
    Ok(out)
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
    /// The Authenticode digest of `image` (the bytes [`parse`] read) with `alg`.
    pub fn digest(&self, image: &[u8], alg: HashAlg) -> Vec<u8> {
        use sha2::Digest;
        fn run<D: sha2::Digest>(mut d: D, image: &[u8], ranges: &[Range<usize>]) -> Vec<u8> {
            for r in ranges {
                d.update(image.get(r.clone()).unwrap_or_default());
            }
            d.finalize().to_vec()
        }
        match alg {
            HashAlg::Sha1 => run(sha1::Sha1::new(), image, &self.hashed),
            HashAlg::Sha224 => run(sha2::Sha224::new(), image, &self.hashed),
            HashAlg::Sha256 => run(sha2::Sha256::new(), image, &self.hashed),
            HashAlg::Sha384 => run(sha2::Sha384::new(), image, &self.hashed),
            HashAlg::Sha512 => run(sha2::Sha512::new(), image, &self.hashed),
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
mod tests {
    use super::*;

    /// A minimal PE32+ image: headers of 0x200 bytes, one section of 0x200 bytes, then a
    /// certificate table of `table` bytes.
    fn image(table: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x400];
        b[0] = b'M';
        b[1] = b'Z';
        b[0x3c] = 0x80; // e_lfanew
        b[0x80..0x84].copy_from_slice(b"PE\0\0");
        b[0x84..0x86].copy_from_slice(&0x8664u16.to_le_bytes()); // machine
        b[0x86..0x88].copy_from_slice(&1u16.to_le_bytes()); // sections
        let opt = 0x98;
        b[0x94..0x96].copy_from_slice(&(112u16 + 16 * 8).to_le_bytes());
        b[opt..opt + 2].copy_from_slice(&PE32_PLUS.to_le_bytes());
        b[opt + 60..opt + 64].copy_from_slice(&0x200u32.to_le_bytes()); // SizeOfHeaders
        b[opt + 108..opt + 112].copy_from_slice(&16u32.to_le_bytes()); // NumberOfRvaAndSizes
        let cert = opt + 112 + 4 * 8;
        if !table.is_empty() {
            b[cert..cert + 4].copy_from_slice(&0x400u32.to_le_bytes());
            b[cert + 4..cert + 8]
                .copy_from_slice(&u32::try_from(table.len()).unwrap().to_le_bytes());
        }
        let sec = opt + 112 + 16 * 8;
        b[sec..sec + 5].copy_from_slice(b".text");
        b[sec + 8..sec + 12].copy_from_slice(&0x200u32.to_le_bytes()); // VirtualSize
        b[sec + 16..sec + 20].copy_from_slice(&0x200u32.to_le_bytes()); // SizeOfRawData
        b[sec + 20..sec + 24].copy_from_slice(&0x200u32.to_le_bytes()); // PointerToRawData
        b.extend_from_slice(table);
        b
    }

    fn wincert(body: &[u8]) -> Vec<u8> {
        let len = 8 + body.len();
        let mut v = u32::try_from(len).unwrap().to_le_bytes().to_vec();
        v.extend_from_slice(&WIN_CERT_REVISION_2_0.to_le_bytes());
        v.extend_from_slice(&WIN_CERT_TYPE_PKCS_SIGNED_DATA.to_le_bytes());
        v.extend_from_slice(body);
        while !v.len().is_multiple_of(8) {
            v.push(0);
        }
        v
    }

    #[test]
    fn ranges_skip_the_checksum_the_cert_entry_and_the_table() {
        let table = wincert(&[0x30, 0x03, 1, 2, 3, 0, 0]);
        let img = image(&table);
        let pe = parse(&img).unwrap();
        let opt = 0x98;
        assert_eq!(
            pe.hashed,
            vec![
                0..opt + 64,
                opt + 68..opt + 144,
                opt + 152..0x200,
                0x200..0x400
            ]
        );
        assert_eq!(pe.cert_table, 0x400..0x400 + table.len());
        assert_eq!(pe.signatures, vec![Signature { der: 0x408..0x40d }]);
    }

    #[test]
    fn unsigned_and_broken_tables_are_refused_by_name() {
        assert_eq!(parse(&image(&[])), Err(PeError::Unsigned));
        let mut t = wincert(&[0x30, 0x03, 1, 2, 3]);
        t[4] = 0; // revision 0x0200 -> 0x0000
        t[5] = 0;
        assert!(matches!(parse(&image(&t)), Err(PeError::CertTable(m)) if m.contains("revision")));
        let t = wincert(&[0x30, 0x7f, 1]);
        assert!(matches!(parse(&image(&t)), Err(PeError::CertTable(m)) if m.contains("DER")));
        // A table running past the end of the file.
        let mut img = image(&wincert(&[0x30, 0x00]));
        img.truncate(img.len() - 4);
        assert!(matches!(parse(&img), Err(PeError::CertTable(_))));
        assert!(matches!(parse(b"MZ"), Err(PeError::Malformed(_))));
        assert!(matches!(parse(b""), Err(PeError::Malformed(_))));
    }

    #[test]
    fn a_section_outside_the_file_is_refused() {
        let mut img = image(&wincert(&[0x30, 0x00]));
        let sec = 0x98 + 112 + 16 * 8;
        img[sec + 16..sec + 20].copy_from_slice(&0x10_0000u32.to_le_bytes());
        assert!(matches!(parse(&img), Err(PeError::Malformed(m)) if m.contains(".text")));
    }

    #[test]
    fn truncations_never_panic() {
        let img = image(&wincert(&[0x30, 0x03, 1, 2, 3]));
        for n in 0..img.len() {
            let _ = parse(&img[..n]);
        }
        for i in 0..img.len() {
            let mut m = img.clone();
            m[i] ^= 0xff;
            if let Ok(pe) = parse(&m) {
                let _ = pe.digest(&m, HashAlg::Sha256);
            }
        }
    }
}

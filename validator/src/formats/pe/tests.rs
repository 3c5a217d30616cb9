//! Unit tests of the PE/COFF parser: crafted images, the digest ranges and the
//! firmware's walk of the certificate table.
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
        b[cert + 4..cert + 8].copy_from_slice(&u32::try_from(table.len()).unwrap().to_le_bytes());
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
        pe.hashed(SectionOrder::Firmware),
        vec![
            0..opt + 64,
            opt + 68..opt + 144,
            opt + 152..0x200,
            0x200..0x400
        ]
    );
    assert_eq!(pe.cert_table, 0x400..0x400 + table.len());
    assert_eq!(
        pe.signatures,
        vec![Signature {
            index: 0,
            der: 0x408..0x40d
        }]
    );
    assert_eq!(pe.first_unusable, None);
}

/// A second entry of another type or truncated is skipped or ends the table (EDK2);
/// a first entry that is not PKCS#7 is kept as the reason the kernel refuses.
#[test]
fn entries_after_the_first_are_read_as_the_firmware_reads_them() {
    let mut t = wincert(&[0x30, 0x03, 1, 2, 3]);
    let mut other = wincert(b"garbage!");
    other[6] = 0xf1; // type 0x0ef1
    other[7] = 0x0e;
    t.extend_from_slice(&other);
    t.extend_from_slice(&16u32.to_le_bytes()); // a truncated third header
    let pe = parse(&image(&t)).unwrap();
    assert_eq!(pe.signatures.len(), 1);
    assert_eq!(pe.first_unusable, None);
    // EDK2's walk stops at the second: an EFI_GUID entry (0x0ef1) too short for its GUID.
    assert!(matches!(
        pe.table_end,
        Some(TableEnd::TooShort {
            kind: WIN_CERT_TYPE_EFI_GUID,
            len: 16,
            ..
        })
    ));
    let mut t = other.clone();
    t.extend_from_slice(&wincert(&[0x30, 0x03, 1, 2, 3]));
    let pe = parse(&image(&t)).unwrap();
    assert_eq!(pe.signatures.len(), 1);
    assert_eq!(pe.signatures[0].index, 1);
    assert!(pe.first_unusable.unwrap().contains("type 0x0ef1"));
}

/// Sections at the same file offset: the kernel orders them by virtual address (then
/// name, sizes), the firmware keeps table order; names are never resolved (`/4`).
#[test]
fn ties_follow_each_judge_and_names_are_not_resolved() {
    let mut img = image(&wincert(&[0x30, 0x00]));
    let opt = 0x98;
    // Two sections: /4 at VA 0x3000 (raw 0x200@0x200), .b at VA 0x1000 (raw 0x100@0x200).
    img[0x86..0x88].copy_from_slice(&2u16.to_le_bytes());
    let sec = opt + 112 + 16 * 8;
    img[sec..sec + 8].copy_from_slice(b"/4\0\0\0\0\0\0");
    img[sec + 12..sec + 16].copy_from_slice(&0x3000u32.to_le_bytes());
    let s2 = sec + 40;
    img[s2..s2 + 2].copy_from_slice(b".b");
    img[s2 + 12..s2 + 16].copy_from_slice(&0x1000u32.to_le_bytes());
    img[s2 + 16..s2 + 20].copy_from_slice(&0x100u32.to_le_bytes());
    img[s2 + 20..s2 + 24].copy_from_slice(&0x200u32.to_le_bytes());
    let pe = parse(&img).unwrap();
    let firmware = pe.hashed(SectionOrder::Firmware);
    let kernel = pe.hashed(SectionOrder::Kernel);
    assert_eq!(firmware[3..5], [0x200..0x400, 0x200..0x300]);
    assert_eq!(kernel[3..5], [0x200..0x300, 0x200..0x400]);
}

#[test]
fn a_pe_header_inside_the_dos_header_is_refused() {
    let mut img = image(&wincert(&[0x30, 0x00]));
    img.copy_within(0x80..0x300, 0x10);
    img[0x3c..0x40].copy_from_slice(&0x10u32.to_le_bytes());
    assert!(
        matches!(parse(&img), Err(PeError::Malformed(m)) if m.contains("inside the DOS header"))
    );
    assert!(
        matches!(parse(&img[..40]), Err(PeError::Malformed(m)) if m.contains("shorter than a DOS header"))
    );
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

/// EDK2's walk: a table of padded entries ends at its end; trailing bytes (64 zeros,
/// 5 bytes), an unpadded last entry, an entry too short for its type each stop it,
/// named with the offset, while the signature is still found (the kernel's rule reads
/// the first entry alone and takes them).
#[test]
fn the_firmware_walk_must_end_at_the_table_end() {
    let sig = wincert(&[0x30, 0x03, 1, 2, 3]);
    let pe = parse(&image(&sig)).unwrap();
    assert_eq!(pe.table_end, None);
    assert_eq!(pe.cert_entry, 0x98 + 112 + 4 * 8);
    // Two entries, the second of another type: still exactly the table.
    let mut two = sig.clone();
    let mut other = wincert(b"garbage!");
    other[6] = 0x34; // type 0x1234
    other[7] = 0x12;
    two.extend_from_slice(&other);
    assert_eq!(parse(&image(&two)).unwrap().table_end, None);
    let end = 0x400 + sig.len();
    // 64 zero bytes after the entry: read as an entry of length 0.
    let mut t = sig.clone();
    t.extend_from_slice(&[0; 64]);
    let pe = parse(&image(&t)).unwrap();
    assert_eq!(pe.signatures.len(), 1);
    assert_eq!(pe.first_unusable, None);
    let e = pe.table_end.unwrap();
    assert_eq!(
        e,
        TableEnd::TooShort {
            at: end,
            kind: 0,
            len: 0,
            min: 8
        }
    );
    assert!(e.to_string().contains(&format!("{end:#x}")), "{e}");
    // 5 bytes after it: too few for an entry.
    let mut t = sig.clone();
    t.extend_from_slice(&[0xaa; 5]);
    let pe = parse(&image(&t)).unwrap();
    assert_eq!(pe.signatures.len(), 1);
    assert_eq!(pe.table_end, Some(TableEnd::Trailing { at: end, left: 5 }));
    // 8 bytes after it: EDK2 needs more than a header.
    let mut t = sig.clone();
    t.extend_from_slice(&wincert(&[]));
    assert_eq!(
        parse(&image(&t)).unwrap().table_end,
        Some(TableEnd::Trailing { at: end, left: 8 })
    );
    // The last entry unpadded: length 13, the table ends with it.
    let mut t = sig.clone();
    t.truncate(13);
    let pe = parse(&image(&t)).unwrap();
    assert_eq!(pe.signatures.len(), 1);
    let e = pe.table_end.unwrap();
    assert_eq!(
        e,
        TableEnd::Unpadded {
            at: 0x400,
            len: 13,
            left: 13,
            padded: 16
        }
    );
    assert!(e.to_string().contains("not padded to 8 bytes"), "{e}");
    // An unpadded second entry after a padded first: named at its own offset.
    let mut t = sig.clone();
    t.extend_from_slice(&sig[..13]);
    assert!(matches!(
        parse(&image(&t)).unwrap().table_end,
        Some(TableEnd::Unpadded { at, .. }) if at == end
    ));
    // An entry claiming more than is left.
    let mut t = sig.clone();
    t.extend_from_slice(&wincert(&[0x30, 0x03, 1, 2, 3]));
    t[sig.len()..sig.len() + 4].copy_from_slice(&64u32.to_le_bytes());
    assert_eq!(
        parse(&image(&t)).unwrap().table_end,
        Some(TableEnd::PastEnd {
            at: end,
            len: 64,
            left: 16
        })
    );
    // A PKCS_SIGNED_DATA entry with no data, an EFI_GUID one with no certificate.
    let mut t = sig.clone();
    let mut empty = wincert(&[0; 8]);
    empty[..4].copy_from_slice(&8u32.to_le_bytes());
    t.extend_from_slice(&empty);
    assert!(matches!(
        parse(&image(&t)).unwrap().table_end,
        Some(TableEnd::TooShort { len: 8, min: 9, .. })
    ));
    let mut t = sig.clone();
    let mut guid = wincert(&[0; 16]);
    guid[6..8].copy_from_slice(&WIN_CERT_TYPE_EFI_GUID.to_le_bytes());
    t.extend_from_slice(&guid);
    assert!(matches!(
        parse(&image(&t)).unwrap().table_end,
        Some(TableEnd::TooShort {
            kind: WIN_CERT_TYPE_EFI_GUID,
            len: 24,
            min: 25,
            ..
        })
    ));
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
            let _ = pe.digest(&m, HashAlg::Sha256, SectionOrder::Kernel);
        }
    }
}

//! UEFI signature databases: the value of `db`, `dbx`, `MokListRT` and `MokListXRT`, a
//! sequence of `EFI_SIGNATURE_LIST`s (UEFI 2.x, 32.4.1), as efivarfs gives it after its
//! four attribute bytes. Pure parsing.
//!
//! Contract: [`parse`] follows the kernel's `parse_efi_signature_list`: each list's
//! header (type GUID, list size, header size, entry size) must be consistent (the list
//! inside the value, at least its header, a whole number of entries, each at least its
//! owner GUID); an inconsistent list is an error naming its offset, never skipped. The
//! entries of the types the boot chain uses are returned by kind ([`Entry`]): X.509
//! certificates, SHA-256 image digests, SHA-256 digests of a certificate's TBS; other
//! types are counted in [`Database::other`].

/// `EFI_CERT_X509_GUID`, `EFI_CERT_SHA256_GUID`, `EFI_CERT_X509_SHA256_GUID` as they are
/// stored (the first three fields little-endian).
const CERT_X509: [u8; 16] = guid(
    0xa5c0_59a1,
    0x94e4,
    0x4aa7,
    [0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72],
);
const CERT_SHA256: [u8; 16] = guid(
    0xc1c4_1626,
    0x504c,
    0x4092,
    [0xac, 0xa9, 0x41, 0xf9, 0x36, 0x93, 0x43, 0x28],
);
const CERT_X509_SHA256: [u8; 16] = guid(
    0x3bd2_a492,
    0x96c0,
    0x4079,
    [0xb4, 0x20, 0xfc, 0xf9, 0x8e, 0xf1, 0x03, 0xed],
);

const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// A malformed signature database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("EFI signature list at byte {offset}: {what}")]
pub struct SigListError {
    pub offset: usize,
    pub what: String,
}

/// One entry of a kind the boot chain judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A DER certificate.
    X509(Vec<u8>),
    /// The SHA-256 Authenticode digest of an image.
    Sha256([u8; 32]),
    /// The SHA-256 of a certificate's TBSCertificate (revoked certificates in dbx).
    X509Sha256([u8; 32]),
}

/// A parsed database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Database {
    pub entries: Vec<Entry>,
    /// Entries of other types (RSA-2048 keys, SHA-1 digests, ...), not judged.
    pub other: usize,
}

impl Database {
    /// The certificates.
    pub fn certs(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().filter_map(|e| match e {
            Entry::X509(c) => Some(c.as_slice()),
            _ => None,
        })
    }

    /// The image digests.
    pub fn sha256s(&self) -> impl Iterator<Item = &[u8; 32]> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Sha256(h) => Some(h),
            _ => None,
        })
    }
}

fn le32(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(crate::util::le::u32_le(b, at)?).ok()
}

/// Parses a database value (without efivarfs' attribute bytes).
pub fn parse(value: &[u8]) -> Result<Database, SigListError> {
    const LIST_HEADER: usize = 28;
    let mut db = Database::default();
    let mut at = 0;
    while at < value.len() {
        let err = |what: String| SigListError { offset: at, what };
        let rest = value.get(at..).unwrap_or_default();
        if rest.len() < LIST_HEADER {
            return Err(err(format!(
                "{} bytes, shorter than a list header",
                rest.len()
            )));
        }
        let kind: [u8; 16] = rest
            .get(..16)
            .and_then(|g| g.try_into().ok())
            .ok_or_else(|| err("truncated".into()))?;
        let (Some(lsize), Some(hsize), Some(esize)) =
            (le32(rest, 16), le32(rest, 20), le32(rest, 24))
        else {
            return Err(err("truncated".into()));
        };
        if lsize > rest.len() {
            return Err(err(format!(
                "list size {lsize} runs past the value ({} bytes left)",
                rest.len()
            )));
        }
        let body = lsize
            .checked_sub(LIST_HEADER)
            .and_then(|b| b.checked_sub(hsize))
            .ok_or_else(|| err(format!("list size {lsize} is smaller than its headers")))?;
        if esize < 16 {
            return Err(err(format!(
                "entry size {esize} is smaller than an owner GUID"
            )));
        }
        if body % esize != 0 {
            return Err(err(format!(
                "{body} bytes of entries are not a whole number of {esize}-byte entries"
            )));
        }
        let entries = rest
            .get(LIST_HEADER + hsize..lsize)
            .ok_or_else(|| err("truncated".into()))?;
        for e in entries.chunks_exact(esize) {
            let data = e.get(16..).unwrap_or_default();
            let h32 = || <[u8; 32]>::try_from(data.get(..32).unwrap_or_default()).ok();
            let entry = match kind {
                CERT_X509 => Some(Entry::X509(data.to_vec())),
                CERT_SHA256 if data.len() == 32 => h32().map(Entry::Sha256),
                // The digest, then the time of revocation (16 bytes).
                CERT_X509_SHA256 if data.len() == 48 => h32().map(Entry::X509Sha256),
                CERT_SHA256 | CERT_X509_SHA256 => {
                    return Err(err(format!("a {}-byte digest entry", data.len())))
                }
                _ => None,
            };
            match entry {
                Some(x) => db.entries.push(x),
                None => db.other += 1,
            }
        }
        at += lsize;
    }
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(kind: [u8; 16], entries: &[&[u8]]) -> Vec<u8> {
        let esize = 16 + entries.first().map_or(0, |e| e.len());
        let mut v = kind.to_vec();
        v.extend_from_slice(
            &u32::try_from(28 + esize * entries.len())
                .unwrap()
                .to_le_bytes(),
        );
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&u32::try_from(esize).unwrap().to_le_bytes());
        for e in entries {
            v.extend_from_slice(&[7u8; 16]);
            v.extend_from_slice(e);
        }
        v
    }

    #[test]
    fn certificates_and_digests_by_kind() {
        let mut v = list(CERT_X509, &[b"cert-one"]);
        v.extend(list(CERT_SHA256, &[&[1u8; 32], &[2u8; 32]]));
        v.extend(list(CERT_X509_SHA256, &[&[3u8; 48]]));
        v.extend(list([9u8; 16], &[b"other"]));
        let db = parse(&v).unwrap();
        assert_eq!(db.certs().collect::<Vec<_>>(), vec![b"cert-one".as_slice()]);
        assert_eq!(db.sha256s().count(), 2);
        assert!(db.entries.contains(&Entry::X509Sha256([3u8; 32])));
        assert_eq!(db.other, 1);
        assert_eq!(parse(&[]).unwrap(), Database::default());
    }

    #[test]
    fn inconsistent_lists_are_refused_with_their_offset() {
        let good = list(CERT_X509, &[b"cert-one"]);
        let mut v = good.clone();
        v.extend_from_slice(&good[..20]);
        let e = parse(&v).unwrap_err();
        assert_eq!(e.offset, good.len());
        let mut bad = good.clone();
        bad[24] = 5; // entry size 5
        assert!(parse(&bad).unwrap_err().what.contains("owner GUID"));
        let mut bad = good.clone();
        bad[16] = bad[16].wrapping_add(1); // list size one more than the value
        assert!(parse(&bad).unwrap_err().what.contains("past the value"));
        for n in 0..good.len() {
            let _ = parse(&good[..n]);
        }
    }
}

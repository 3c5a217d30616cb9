//! OVMF's variable store (`OVMF_VARS*.fd`) edited on the host: the authenticated-variable
//! store inside its firmware volume, read as the firmware lays it out (a 60-byte
//! `AUTHENTICATED_VARIABLE_HEADER`, the UTF-16 name, the data, each variable 4-aligned),
//! so a test can put its own certificates into `db`, hashes into `dbx`, and turn Secure
//! Boot off without removing the keys (`SecureBootEnable` 0).
//!
//! A replaced variable is marked deleted where it stands and written anew into the free
//! space at the end of the store, with its header (attributes, time stamp, key index)
//! copied, which is what the firmware itself does on `SetVariable`. The firmware trusts its
//! store's contents, so no signature over `db` is needed.
//!
//! Limits: the store must have room after its last variable; the EFI signature lists
//! written are X.509 (`db`), SHA-256 and X.509-TBS SHA-256 (`dbx`).

use std::path::Path;

use crate::HarnessError;

/// `EFI_IMAGE_SECURITY_DATABASE_GUID` (`db`, `dbx`).
pub const IMAGE_SECURITY_DATABASE: &str = "d719b2cb-3d3a-4596-a3bc-dad00e67656f";
/// `EFI_SECURE_BOOT_ENABLE_DISABLE` (OVMF's `SecureBootEnable`).
pub const SECURE_BOOT_ENABLE_GUID: &str = "f0a30bc7-af08-4556-99c4-001009c93a44";
pub const CERT_X509: &str = "a5c059a1-94e4-4aa7-87b5-ab155c2bf072";
pub const CERT_SHA256: &str = "c1c41626-504c-4092-aca9-41f936934328";
pub const CERT_X509_SHA256: &str = "3bd2a492-96c0-4079-b420-fcf98ef103ed";
/// The owner GUID written into the signature lists.
/// shim's vendor GUID (`SHIM_LOCK_GUID`), of `MokList` and its mirrors.
pub const SHIM_LOCK: &str = "605dab50-e046-4300-abb6-3dd810dd8b23";
/// `EFI_VARIABLE_NON_VOLATILE | EFI_VARIABLE_BOOTSERVICE_ACCESS`, as MokManager writes
/// `MokList`.
pub const NV_BS: u32 = 0x3;
pub const OWNER: &str = "5d2a5a1b-7f4e-4a3c-9e0b-5167636173e5";

const HEADER: usize = 60;
const VAR_ADDED: u8 = 0x3f;
const VAR_DELETED_MASK: u8 = 0xfd;

/// A GUID's bytes as EFI stores them (first three fields little-endian).
pub fn guid(s: &str) -> [u8; 16] {
    let h: String = s.chars().filter(|c| *c != '-').collect();
    assert_eq!(h.len(), 32, "GUID {s}");
    let b: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&[b[3], b[2], b[1], b[0]]);
    g[4..6].copy_from_slice(&[b[5], b[4]]);
    g[6..8].copy_from_slice(&[b[7], b[6]]);
    g[8..].copy_from_slice(&b[8..]);
    g
}

/// One `EFI_SIGNATURE_LIST` holding `entries` (each `SignatureData` without its owner).
pub fn signature_list(kind: &str, entries: &[Vec<u8>]) -> Vec<u8> {
    assert!(!entries.is_empty());
    let size = 16 + entries[0].len();
    assert!(entries.iter().all(|e| 16 + e.len() == size));
    let mut v = guid(kind).to_vec();
    v.extend_from_slice(
        &u32::try_from(28 + size * entries.len())
            .expect("a signature list under 4 GiB")
            .to_le_bytes(),
    );
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(
        &u32::try_from(size)
            .expect("an entry under 4 GiB")
            .to_le_bytes(),
    );
    for e in entries {
        v.extend_from_slice(&guid(OWNER));
        v.extend_from_slice(e);
    }
    v
}

/// A `db` value: one X.509 list per certificate (DER).
pub fn db(certs: &[Vec<u8>]) -> Vec<u8> {
    certs
        .iter()
        .flat_map(|c| signature_list(CERT_X509, std::slice::from_ref(c)))
        .collect()
}

/// A `dbx` value: SHA-256 hashes of files, and TBS SHA-256 hashes of certificates.
pub fn dbx(file_hashes: &[[u8; 32]], tbs_hashes: &[[u8; 32]]) -> Vec<u8> {
    let mut v = Vec::new();
    if !file_hashes.is_empty() {
        let e: Vec<Vec<u8>> = file_hashes.iter().map(|h| h.to_vec()).collect();
        v.extend(signature_list(CERT_SHA256, &e));
    }
    if !tbs_hashes.is_empty() {
        // ToBeSignedHash then TimeOfRevocation (an EFI_TIME of zeros: always revoked).
        let e: Vec<Vec<u8>> = tbs_hashes
            .iter()
            .map(|h| {
                let mut x = h.to_vec();
                x.extend_from_slice(&[0u8; 16]);
                x
            })
            .collect();
        v.extend(signature_list(CERT_X509_SHA256, &e));
    }
    v
}

/// One variable as stored.
#[derive(Debug, Clone)]
pub struct Var {
    pub offset: usize,
    pub state: u8,
    pub name: String,
    pub guid: [u8; 16],
    pub data: std::ops::Range<usize>,
}

/// An OVMF variable store file in memory.
#[derive(Debug, Clone)]
pub struct VarStore {
    pub bytes: Vec<u8>,
    start: usize,
    end: usize,
}

fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().unwrap())
}

impl VarStore {
    pub fn open(path: &Path) -> Result<VarStore, HarnessError> {
        let bytes = std::fs::read(path).map_err(|e| HarnessError::io(path, e))?;
        if bytes.len() < 0x100 || &bytes[0x28..0x2c] != b"_FVH" {
            return Err(HarnessError::Setup(format!(
                "{}: not a firmware volume",
                path.display()
            )));
        }
        let hdr = u16::from_le_bytes([bytes[0x30], bytes[0x31]]) as usize;
        let size = u32_at(&bytes, hdr + 16) as usize;
        Ok(VarStore {
            start: hdr + 28,
            end: hdr + size,
            bytes,
        })
    }

    /// Every variable record, deleted ones included, and the offset after the last.
    pub fn records(&self) -> (Vec<Var>, usize) {
        let d = &self.bytes;
        let mut off = self.start;
        let mut out = Vec::new();
        loop {
            off = (off + 3) & !3;
            if off + HEADER > self.end || d[off..off + 2] != [0xaa, 0x55] {
                return (out, off);
            }
            let name_size = u32_at(d, off + 36) as usize;
            let data_size = u32_at(d, off + 40) as usize;
            let name_at = off + HEADER;
            let name: String = char::decode_utf16(
                d[name_at..name_at + name_size]
                    .chunks(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]])),
            )
            .map(|c| c.unwrap_or('?'))
            .collect::<String>()
            .trim_end_matches('\0')
            .to_string();
            let data_at = name_at + name_size;
            out.push(Var {
                offset: off,
                state: d[off + 2],
                name,
                guid: d[off + 44..off + 60].try_into().unwrap(),
                data: data_at..data_at + data_size,
            });
            off = data_at + data_size;
        }
    }

    /// The live variable `name` of vendor `vendor`.
    pub fn get(&self, name: &str, vendor: &str) -> Option<Var> {
        let g = guid(vendor);
        self.records()
            .0
            .into_iter()
            .find(|v| v.state == VAR_ADDED && v.name == name && v.guid == g)
    }

    /// Replaces the data of live variable `name`: the old record is marked deleted and a
    /// copy of its header with the new data is appended.
    pub fn replace(&mut self, name: &str, vendor: &str, data: &[u8]) -> Result<(), HarnessError> {
        let old = self
            .get(name, vendor)
            .ok_or_else(|| HarnessError::Setup(format!("no variable {name} in the store")))?;
        let (_, free) = self.records();
        let header_and_name = self.bytes[old.offset..old.data.start].to_vec();
        let total = header_and_name.len() + data.len();
        if free + total > self.end || self.bytes[free..free + total].iter().any(|b| *b != 0xff) {
            return Err(HarnessError::Setup(format!(
                "no room for {name} ({total} bytes) in the variable store"
            )));
        }
        self.bytes[old.offset + 2] &= VAR_DELETED_MASK;
        let at = free;
        self.bytes[at..at + header_and_name.len()].copy_from_slice(&header_and_name);
        self.bytes[at + 40..at + 44].copy_from_slice(
            &u32::try_from(data.len())
                .expect("a variable under 4 GiB")
                .to_le_bytes(),
        );
        let d = at + header_and_name.len();
        self.bytes[d..d + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Adds a new variable `name` of `vendor` with `attributes` (`EFI_VARIABLE_*` bits;
    /// not an authenticated one: its count, time and key index are zero) after the last
    /// record.
    pub fn add(
        &mut self,
        name: &str,
        vendor: &str,
        attributes: u32,
        data: &[u8],
    ) -> Result<(), HarnessError> {
        if self.get(name, vendor).is_some() {
            return Err(HarnessError::Setup(format!(
                "{name} is already in the store"
            )));
        }
        let mut utf16: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
        utf16.extend_from_slice(&[0, 0]);
        let (_, free) = self.records();
        let total = HEADER + utf16.len() + data.len();
        if free + total > self.end || self.bytes[free..free + total].iter().any(|b| *b != 0xff) {
            return Err(HarnessError::Setup(format!(
                "no room for {name} ({total} bytes) in the variable store"
            )));
        }
        let size = |n: usize| {
            u32::try_from(n)
                .map_err(|_| HarnessError::Setup(format!("{name}: {n} bytes")))
                .map(u32::to_le_bytes)
        };
        let mut h = vec![0u8; HEADER];
        h[0..2].copy_from_slice(&[0xaa, 0x55]);
        h[2] = VAR_ADDED;
        h[4..8].copy_from_slice(&attributes.to_le_bytes());
        h[36..40].copy_from_slice(&size(utf16.len())?);
        h[40..44].copy_from_slice(&size(data.len())?);
        h[44..60].copy_from_slice(&guid(vendor));
        h.extend_from_slice(&utf16);
        h.extend_from_slice(data);
        self.bytes[free..free + total].copy_from_slice(&h);
        Ok(())
    }

    /// Sets a one-byte variable in place.
    pub fn set_byte(&mut self, name: &str, vendor: &str, value: u8) -> Result<(), HarnessError> {
        let v = self
            .get(name, vendor)
            .ok_or_else(|| HarnessError::Setup(format!("no variable {name} in the store")))?;
        if v.data.len() != 1 {
            return Err(HarnessError::Setup(format!("{name} is not one byte")));
        }
        self.bytes[v.data.start] = value;
        Ok(())
    }

    pub fn write(&self, path: &Path) -> Result<(), HarnessError> {
        std::fs::write(path, &self.bytes).map_err(|e| HarnessError::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_bytes_and_lists() {
        // EFI_CERT_X509_GUID as OVMF stores it (the start of the snakeoil db's data).
        assert_eq!(
            guid(CERT_X509)[..8],
            [0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a]
        );
        let l = signature_list(CERT_SHA256, &[vec![1; 32], vec![2; 32]]);
        assert_eq!(l.len(), 28 + 2 * 48);
        assert_eq!(u32_at(&l, 16) as usize, l.len());
        assert_eq!(u32_at(&l, 24), 48);
    }

    #[test]
    fn snakeoil_store_is_read_and_rewritten() {
        let src = Path::new("/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd");
        let mut s = VarStore::open(src).unwrap();
        let db0 = s.get("db", IMAGE_SECURITY_DATABASE).unwrap();
        assert_eq!(
            s.bytes[db0.data.start..db0.data.start + 8],
            guid(CERT_X509)[..8]
        );
        assert!(s
            .get("PK", "8be4df61-93ca-11d2-aa0d-00e098032b8c")
            .is_some());
        let new = db(&[vec![0x30, 0x03, 0x02, 0x01, 0x07]]);
        s.replace("db", IMAGE_SECURITY_DATABASE, &new).unwrap();
        s.set_byte("SecureBootEnable", SECURE_BOOT_ENABLE_GUID, 0)
            .unwrap();
        let db1 = s.get("db", IMAGE_SECURITY_DATABASE).unwrap();
        assert_ne!(db1.offset, db0.offset);
        assert_eq!(&s.bytes[db1.data.clone()], new.as_slice());
        let en = s.get("SecureBootEnable", SECURE_BOOT_ENABLE_GUID).unwrap();
        assert_eq!(s.bytes[en.data.start], 0);
        // The old db record is still there, marked deleted.
        let (all, _) = s.records();
        assert_eq!(all.iter().filter(|v| v.name == "db").count(), 2);
    }
}

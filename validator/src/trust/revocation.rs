//! Revocation lists as the boot chain applies them: UEFI `dbx` (the firmware, shim and
//! the kernel) and shim's `MokListX` (`MokListXRT` as shim hands it on). One
//! [`Revocations`] holds one list's entries of the kinds that revoke: SHA-256 image
//! digests, X.509 certificates, and SHA-256 digests of a certificate's `TBSCertificate`.
//!
//! Contract: [`Revocations::from_database`] takes a parsed signature database
//! ([`crate::formats::efisiglist`]); a certificate entry that does not parse is left out
//! and named in [`Revocations::notes`] (it cannot be a trust anchor, so no signature
//! reaches it: EDK2's `Pkcs7Verify` against it fails the same way). The rules that use a
//! list are where the judge applies it: PE images in [`crate::trust::authenticode`]
//! (EDK2's `IsForbiddenByDbx`: a signature that verifies up to a revoked certificate, or
//! whose signer's certificate has its TBS digest listed, refuses the image whatever its
//! other signatures; an image digest listed refuses it; shim reads no TBS digests:
//! [`Revocations::as_shim_reads_it`]), modules in the gate (the kernel's `bin:` hashes:
//! [`Revocations::image_sha256`] of dbx and, under Secure Boot, `MokListXRT`).
//!
//! Limits: an `EFI_CERT_X509_SHA256` entry's time of revocation is not read (EDK2 lets
//! a signature time-stamped before it pass; our images carry no time stamps, and without
//! one EDK2 refuses, as we do); SHA-1, SHA-384 and SHA-512 image digests and RSA-2048 key
//! entries are counted in the database's `other` and not judged.

use crate::formats::efisiglist::{Database, Entry};
use crate::trust::{Cert, TrustStore};

/// One revocation list.
#[derive(Debug, Clone, Default)]
pub struct Revocations {
    /// Its name as the reports give it (`dbx`, `MokListXRT`, a file).
    pub name: String,
    /// SHA-256 image digests (Authenticode for PE images; the whole file for modules).
    pub image_sha256: Vec<[u8; 32]>,
    /// Revoked certificates.
    pub certs: TrustStore,
    /// SHA-256 digests of revoked certificates' `TBSCertificate`.
    pub tbs_sha256: Vec<[u8; 32]>,
    /// Entries left out, and why.
    pub notes: Vec<String>,
}

impl Revocations {
    /// The revoking entries of `db`, under `name`.
    pub fn from_database(name: &str, db: &Database) -> Revocations {
        let mut r = Revocations {
            name: name.to_string(),
            ..Revocations::default()
        };
        for e in &db.entries {
            match e {
                Entry::Sha256(h) => r.image_sha256.push(*h),
                Entry::X509Sha256(h) => r.tbs_sha256.push(*h),
                Entry::X509(der) => match Cert::from_der(der, name) {
                    Ok(c) => r.certs.add(c),
                    Err(e) => r.notes.push(e.to_string()),
                },
            }
        }
        r
    }

    /// Nothing listed.
    pub fn is_empty(&self) -> bool {
        self.image_sha256.is_empty() && self.certs.certs.is_empty() && self.tbs_sha256.is_empty()
    }

    /// Whether the SHA-256 digest `d` is listed.
    pub fn lists_digest(&self, d: &[u8]) -> bool {
        self.image_sha256.iter().any(|h| h.as_slice() == d)
    }

    /// Whether `c`'s `TBSCertificate` digest is listed.
    pub fn lists_tbs(&self, c: &Cert) -> bool {
        use sha2::Digest;
        if self.tbs_sha256.is_empty() {
            return false;
        }
        let tbs: [u8; 32] = sha2::Sha256::digest(&c.tbs).into();
        self.tbs_sha256.contains(&tbs)
    }

    /// The list as shim applies it: image digests and certificates
    /// (`check_denylist`; shim reads no `EFI_CERT_X509_SHA256` entry).
    pub fn as_shim_reads_it(&self) -> Revocations {
        Revocations {
            tbs_sha256: Vec::new(),
            ..self.clone()
        }
    }

    /// `N image digests, M certificates, K certificate digests` (and what was left out).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{}: {} image digests, {} certificates, {} certificate digests",
            self.name,
            self.image_sha256.len(),
            self.certs.certs.len(),
            self.tbs_sha256.len()
        );
        if !self.notes.is_empty() {
            s.push_str(&format!(" (left out: {})", self.notes.join("; ")));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Digests go by kind; an entry that is no certificate is named, not dropped silently.
    #[test]
    fn entries_by_kind_and_bad_certificates_named() {
        let db = Database {
            entries: vec![
                Entry::Sha256([1; 32]),
                Entry::X509Sha256([2; 32]),
                Entry::X509(b"not a certificate".to_vec()),
            ],
            other: 3,
        };
        let r = Revocations::from_database("dbx", &db);
        assert!(r.lists_digest(&[1; 32]));
        assert!(!r.lists_digest(&[2; 32]));
        assert_eq!(r.tbs_sha256, vec![[2; 32]]);
        assert!(r.certs.certs.is_empty());
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(
            r.notes[0].starts_with("dbx: not a certificate"),
            "{:?}",
            r.notes
        );
        assert!(!r.is_empty());
        assert!(Revocations::default().is_empty());
    }
}

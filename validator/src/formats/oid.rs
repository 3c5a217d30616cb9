//! Object identifiers as the parsers compare them, and the digest algorithms they name.
//!
//! Contract: [`oid_is`] compares a decoded OID with a dotted one (parsed by `const-oid`),
//! without formatting it or allocating (the path every module signature takes);
//! [`HashAlg`] is a digest the PKCS#7 and PE parsers know, by its OID, with its name and
//! length as the kernel and `modinfo` print them. Pure: no system call, no policy.
//!
//! Current limits: the five digests the kernel's parsers know (SHA-1, SHA-224, SHA-256,
//! SHA-384, SHA-512).

use sha2::Digest;

/// A digest algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlg {
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    /// The name `modinfo` prints (`sig_hashalgo`).
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Sha1 => "sha1",
            HashAlg::Sha224 => "sha224",
            HashAlg::Sha256 => "sha256",
            HashAlg::Sha384 => "sha384",
            HashAlg::Sha512 => "sha512",
        }
    }

    /// The digest's length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            HashAlg::Sha1 => 20,
            HashAlg::Sha224 => 28,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }

    /// From a digest algorithm OID.
    pub fn from_oid(oid: &str) -> Option<HashAlg> {
        HashAlg::ALL.into_iter().find(|a| a.oid() == oid)
    }

    /// [`HashAlg::from_oid`] of a decoded OID, compared without formatting it.
    pub fn from_object_id(oid: &der::asn1::ObjectIdentifier) -> Option<HashAlg> {
        HashAlg::ALL.into_iter().find(|a| oid_is(oid, a.oid()))
    }

    /// Every digest, in [`HashAlg::oid`]'s table order.
    const ALL: [HashAlg; 5] = [
        HashAlg::Sha1,
        HashAlg::Sha224,
        HashAlg::Sha256,
        HashAlg::Sha384,
        HashAlg::Sha512,
    ];

    /// The digest's OID, dotted.
    pub fn oid(self) -> &'static str {
        match self {
            HashAlg::Sha1 => "1.3.14.3.2.26",
            HashAlg::Sha224 => "2.16.840.1.101.3.4.2.4",
            HashAlg::Sha256 => "2.16.840.1.101.3.4.2.1",
            HashAlg::Sha384 => "2.16.840.1.101.3.4.2.2",
            HashAlg::Sha512 => "2.16.840.1.101.3.4.2.3",
        }
    }

    /// Digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha1 => sha1::Sha1::digest(data).to_vec(),
            HashAlg::Sha224 => sha2::Sha224::digest(data).to_vec(),
            HashAlg::Sha256 => sha2::Sha256::digest(data).to_vec(),
            HashAlg::Sha384 => sha2::Sha384::digest(data).to_vec(),
            HashAlg::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }
}

/// Whether `oid` is the dotted OID `dotted` (which `const-oid` parses, without
/// allocating): no formatting on the path every module signature takes.
pub fn oid_is(oid: &der::asn1::ObjectIdentifier, dotted: &str) -> bool {
    der::asn1::ObjectIdentifier::new(dotted).is_ok_and(|d| d == *oid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_are_compared_arc_by_arc() {
        let oid = |s: &str| der::asn1::ObjectIdentifier::new(s).unwrap();
        assert!(oid_is(&oid("2.5.4.3"), "2.5.4.3"));
        for other in [
            "2.5.4",
            "2.5.4.3.1",
            "2.5.4.30",
            "2.5.4.03x",
            "",
            "2.5.4.3.",
        ] {
            assert!(!oid_is(&oid("2.5.4.3"), other), "{other}");
        }
        for a in HashAlg::ALL {
            assert_eq!(HashAlg::from_object_id(&oid(a.oid())), Some(a));
            assert_eq!(HashAlg::from_oid(a.oid()), Some(a));
        }
        assert_eq!(HashAlg::from_object_id(&oid("1.2.840.113549.1.1.1")), None);
    }
}

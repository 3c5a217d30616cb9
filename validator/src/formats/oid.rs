//! Object identifiers as the parsers compare them, and the digest algorithms they name.
//!
//! Contract: [`oid_is`] compares a decoded OID with a dotted one, encoding the dotted
//! arcs as it compares, without formatting or allocating (the path every module signature
//! takes);
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

/// Whether `oid` is the dotted OID `dotted`: the dotted arcs are encoded as DER's
/// subidentifiers (the first two as one, then base 128, high bit on all but the last
/// byte) and compared with the OID's bytes as they go, so nothing is formatted, parsed
/// into an OID or allocated on the path every module signature takes (`const-oid`'s
/// parser and encoder, called for each comparison, took about 0.6% of the module gate's
/// time). A dotted text that is not an OID (an empty arc, a sign, a leading zero, a first
/// arc above 2, a second above 39 under 0 or 1) is no OID's.
pub fn oid_is(oid: &der::asn1::ObjectIdentifier, dotted: &str) -> bool {
    // An arc: decimal digits only (`str::parse` alone would take a `+`), no leading zero.
    let arc = |part: &str| {
        let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        (digits && (part == "0" || !part.starts_with('0')))
            .then(|| part.parse::<u64>().ok())
            .flatten()
    };
    let mut arcs = dotted.split('.').map(arc);
    let (Some(Some(first)), Some(Some(second))) = (arcs.next(), arcs.next()) else {
        return false;
    };
    if first > 2 || (first < 2 && second > 39) {
        return false;
    }
    let mut bytes = oid.as_bytes().iter().copied();
    let subidentifiers = std::iter::once(first.checked_mul(40).and_then(|f| f.checked_add(second)));
    for value in subidentifiers.chain(arcs) {
        let Some(value) = value else {
            return false;
        };
        // Base 128, most significant group first: `groups` of 7 bits (at least one).
        let groups = (u64::BITS - value.leading_zeros()).div_ceil(7).max(1);
        for g in (0..groups).rev() {
            let more = if g > 0 { 0x80 } else { 0 };
            // Seven bits always fit a byte.
            let byte = u8::try_from((value >> (7 * g)) & 0x7f).unwrap_or(0x7f) | more;
            if bytes.next() != Some(byte) {
                return false;
            }
        }
    }
    bytes.next().is_none()
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
            "2.5.4.+3",
            "2.5.4.-3",
            "2.5.4.03",
            "2..4.3",
            "3.5.4.3",
            "2.5.4.3.99999999999999999999999",
        ] {
            assert!(!oid_is(&oid("2.5.4.3"), other), "{other}");
        }
        for a in HashAlg::ALL {
            assert_eq!(HashAlg::from_object_id(&oid(a.oid())), Some(a));
            assert_eq!(HashAlg::from_oid(a.oid()), Some(a));
        }
        assert_eq!(HashAlg::from_object_id(&oid("1.2.840.113549.1.1.1")), None);
        // Arcs of one to five bytes, from DER as a certificate holds them (`const-oid`
        // 0.9's own encoder drops the top bit of an arc of 2^14 or 2^28, so it does not make
        // this one): each text is equal to its own OID only.
        let edges = der::asn1::ObjectIdentifier::from_bytes(&[
            0x27, 0x7f, 0x81, 0x00, 0xff, 0x7f, 0x81, 0x80, 0x00, 0x81, 0x80, 0x80, 0x80, 0x00,
        ])
        .unwrap();
        let texts = [
            "0.39.127.128.16383.16384.268435456",
            "1.2.840.113549.1.7.2",
            "2.39.0",
            "1.3.6.1.4.1.311.2.1.4",
            "2.16.840.1.101.3.4.2.1",
        ];
        for a in texts {
            let o = if a == texts[0] { edges } else { oid(a) };
            for b in texts {
                assert_eq!(oid_is(&o, b), a == b, "{a} against {b}");
            }
            assert!(!oid_is(&o, &format!("{a}.0")), "{a}");
            assert!(!oid_is(&o, &format!("{a}0")), "{a}");
        }
    }
}

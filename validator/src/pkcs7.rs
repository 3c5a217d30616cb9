//! Detached PKCS#7 / CMS SignedData, as the kernel's module signatures and the
//! Discoverable Partitions `root-verity-sig` use it: parse the signer infos, find each
//! signer in the trust store (issuer and serial, or subject key identifier), and verify
//! the signature over the content's digest, or over the signed attributes when there are
//! any (then their message digest must match the content).

use der::{Decode, Encode};

use crate::trust::{colon_hex, Cert, HashAlg, TrustError, TrustStore};

/// A PKCS#7 problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Pkcs7Error {
    #[error("malformed PKCS#7: {0}")]
    Malformed(String),
    #[error("PKCS#7 content type {0} is not signedData")]
    NotSignedData(String),
    #[error("PKCS#7 has no signer")]
    NoSigner,
    #[error("unsupported digest algorithm {0}")]
    UnsupportedDigest(String),
    #[error("signer {signer} (serial {serial}) is not in the trust store")]
    UntrustedSigner { signer: String, serial: String },
    #[error("signed attributes' message digest does not match the content")]
    DigestMismatch,
    #[error("{0}")]
    Signature(#[from] TrustError),
}

/// What a signer info says about its signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerView {
    /// Issuer common name (what `modinfo` prints as `signer`).
    pub issuer_cn: String,
    pub issuer_der: Vec<u8>,
    pub serial: Vec<u8>,
    pub skid: Option<Vec<u8>>,
    pub digest: HashAlg,
    /// OID of the signature algorithm; must fit the signer's key and digest.
    pub sig_alg: String,
    pub signature: Vec<u8>,
    /// DER of the signed attributes as a SET, and their messageDigest, when present.
    pub signed_attrs: Option<(Vec<u8>, Vec<u8>)>,
}

impl SignerView {
    /// `sig_key` as modinfo prints it.
    pub fn key_id(&self) -> String {
        match &self.skid {
            Some(k) => colon_hex(k),
            None => colon_hex(&self.serial),
        }
    }
}

fn malformed(e: impl std::fmt::Display) -> Pkcs7Error {
    Pkcs7Error::Malformed(e.to_string())
}

/// Parses a DER ContentInfo holding SignedData; returns its signers.
pub fn parse(der_bytes: &[u8]) -> Result<Vec<SignerView>, Pkcs7Error> {
    let ci = cms::content_info::ContentInfo::from_der(der_bytes).map_err(malformed)?;
    let ct = ci.content_type.to_string();
    if ct != "1.2.840.113549.1.7.2" {
        return Err(Pkcs7Error::NotSignedData(ct));
    }
    let sd: cms::signed_data::SignedData = ci.content.decode_as().map_err(malformed)?;
    // As the kernel's pkcs7_parser: SignedData v1 (PKCS#7) or v3 (CMS) only.
    let v = sd.version as u8;
    if v != 1 && v != 3 {
        return Err(malformed(format!("unsupported SignedData version {v}")));
    }
    // Detached: the encapsulated content is id-data with no content.
    let ect = sd.encap_content_info.econtent_type.to_string();
    if ect != "1.2.840.113549.1.7.1" || sd.encap_content_info.econtent.is_some() {
        return Err(malformed(format!(
            "encapsulated content must be detached id-data, not {ect}"
        )));
    }
    // Algorithm parameters must be absent or NULL for every algorithm we accept.
    let params_ok = |a: &spki::AlgorithmIdentifierOwned| {
        a.parameters
            .as_ref()
            .is_none_or(|p| der::Tagged::tag(p) == der::Tag::Null && p.value().is_empty())
    };
    if !sd.digest_algorithms.iter().all(params_ok) {
        return Err(malformed("digest algorithm with parameters"));
    }
    let listed: Vec<String> = sd
        .digest_algorithms
        .iter()
        .map(|a| a.oid.to_string())
        .collect();
    for d in &listed {
        if HashAlg::from_oid(d).is_none() {
            return Err(Pkcs7Error::UnsupportedDigest(d.clone()));
        }
    }
    let mut out = Vec::new();
    for si in sd.signer_infos.0.iter() {
        // SignerInfo v1 names the signer by issuer and serial, v3 by key identifier.
        let sv = si.version as u8;
        let by_serial = matches!(
            si.sid,
            cms::signed_data::SignerIdentifier::IssuerAndSerialNumber(_)
        );
        if !((sv == 1 && by_serial) || (sv == 3 && !by_serial)) {
            return Err(malformed(format!(
                "SignerInfo version {sv} does not match its signer identifier"
            )));
        }
        if !params_ok(&si.digest_alg) || !params_ok(&si.signature_algorithm) {
            return Err(malformed("signer algorithm with parameters"));
        }
        let oid = si.digest_alg.oid.to_string();
        if !listed.contains(&oid) {
            return Err(malformed(format!(
                "signer digest {oid} is not among the SignedData's digest algorithms"
            )));
        }
        let digest = HashAlg::from_oid(&oid).ok_or(Pkcs7Error::UnsupportedDigest(oid))?;
        let (issuer_der, issuer_cn, serial, skid) = match &si.sid {
            cms::signed_data::SignerIdentifier::IssuerAndSerialNumber(is) => (
                is.issuer.to_der().map_err(malformed)?,
                crate::trust::common_name(&is.issuer),
                is.serial_number.as_bytes().to_vec(),
                None,
            ),
            cms::signed_data::SignerIdentifier::SubjectKeyIdentifier(k) => (
                Vec::new(),
                String::new(),
                Vec::new(),
                Some(k.0.as_bytes().to_vec()),
            ),
        };
        let signed_attrs = match &si.signed_attrs {
            None => None,
            Some(attrs) => {
                let md = attrs
                    .iter()
                    .find(|a| a.oid.to_string() == "1.2.840.113549.1.9.4")
                    .and_then(|a| a.values.iter().next())
                    .and_then(|v| v.decode_as::<der::asn1::OctetString>().ok())
                    .ok_or_else(|| malformed("signed attributes without messageDigest"))?;
                Some((attrs.to_der().map_err(malformed)?, md.as_bytes().to_vec()))
            }
        };
        out.push(SignerView {
            sig_alg: si.signature_algorithm.oid.to_string(),
            issuer_cn,
            issuer_der,
            serial,
            skid,
            digest,
            signature: si.signature.as_bytes().to_vec(),
            signed_attrs,
        });
    }
    if out.is_empty() {
        return Err(Pkcs7Error::NoSigner);
    }
    Ok(out)
}

/// The result of a successful verification.
#[derive(Debug, Clone)]
pub struct Verified<'a> {
    pub signer: SignerView,
    pub cert: &'a Cert,
}

/// Finds the signer's certificate in `store`.
pub fn find_signer<'a>(s: &SignerView, store: &'a TrustStore) -> Result<&'a Cert, Pkcs7Error> {
    let found = match &s.skid {
        Some(k) => store.by_skid(k),
        None => store.by_issuer_serial(&s.issuer_der, &s.serial),
    };
    found.ok_or_else(|| Pkcs7Error::UntrustedSigner {
        signer: if s.issuer_cn.is_empty() {
            "(by key id)".into()
        } else {
            s.issuer_cn.clone()
        },
        serial: s.key_id(),
    })
}

/// Verifies one signer over `content` whose digest (with the signer's algorithm) is
/// `content_digest`.
pub fn verify_signer<'a>(
    s: &SignerView,
    content_digest: &[u8],
    store: &'a TrustStore,
) -> Result<&'a Cert, Pkcs7Error> {
    let cert = find_signer(s, store)?;
    check_sig_alg(&s.sig_alg, s.digest, &cert.key)?;
    match &s.signed_attrs {
        None => cert.verify_digest(s.digest, content_digest, &s.signature)?,
        Some((attrs, md)) => {
            if md.as_slice() != content_digest {
                return Err(Pkcs7Error::DigestMismatch);
            }
            let d = s.digest.digest(attrs);
            cert.verify_digest(s.digest, &d, &s.signature)?;
        }
    }
    Ok(cert)
}

/// The signature algorithm OID must name the signer's key type (and, when it names a
/// digest, the signer's digest).
fn check_sig_alg(
    oid: &str,
    digest: HashAlg,
    key: &crate::trust::PublicKey,
) -> Result<(), Pkcs7Error> {
    use crate::trust::PublicKey;
    let (rsa, named): (bool, Option<HashAlg>) = match oid {
        "1.2.840.113549.1.1.1" => (true, None),
        "1.2.840.113549.1.1.5" => (true, Some(HashAlg::Sha1)),
        "1.2.840.113549.1.1.14" => (true, Some(HashAlg::Sha224)),
        "1.2.840.113549.1.1.11" => (true, Some(HashAlg::Sha256)),
        "1.2.840.113549.1.1.12" => (true, Some(HashAlg::Sha384)),
        "1.2.840.113549.1.1.13" => (true, Some(HashAlg::Sha512)),
        "1.2.840.10045.2.1" => (false, None),
        "1.2.840.10045.4.1" => (false, Some(HashAlg::Sha1)),
        "1.2.840.10045.4.3.1" => (false, Some(HashAlg::Sha224)),
        "1.2.840.10045.4.3.2" => (false, Some(HashAlg::Sha256)),
        "1.2.840.10045.4.3.3" => (false, Some(HashAlg::Sha384)),
        "1.2.840.10045.4.3.4" => (false, Some(HashAlg::Sha512)),
        other => {
            return Err(malformed(format!(
                "unsupported signature algorithm {other}"
            )))
        }
    };
    let key_is_rsa = matches!(key, PublicKey::Rsa(_));
    if rsa != key_is_rsa {
        return Err(malformed(format!(
            "signature algorithm {oid} does not fit a {} key",
            key.describe()
        )));
    }
    if named.is_some_and(|d| d != digest) {
        return Err(malformed(format!(
            "signature algorithm {oid} names another digest than {}",
            digest.name()
        )));
    }
    Ok(())
}

/// Verifies a detached signature over `content`: the first signer must verify.
pub fn verify_detached<'a>(
    der_bytes: &[u8],
    content: &[u8],
    store: &'a TrustStore,
) -> Result<Verified<'a>, Pkcs7Error> {
    let signers = parse(der_bytes)?;
    let s = signers.into_iter().next().ok_or(Pkcs7Error::NoSigner)?;
    let digest = s.digest.digest(content);
    let cert = verify_signer(&s, &digest, store)?;
    Ok(Verified { signer: s, cert })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(parse(b""), Err(Pkcs7Error::Malformed(_))));
        assert!(matches!(
            parse(&[0x30, 0x03, 0x06, 0x01, 0x00]),
            Err(Pkcs7Error::Malformed(_))
        ));
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = parse(&junk);
        }
    }
}

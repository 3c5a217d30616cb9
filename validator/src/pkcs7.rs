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
    let mut out = Vec::new();
    for si in sd.signer_infos.0.iter() {
        let oid = si.digest_alg.oid.to_string();
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

//! PKCS#7 verification against the trust store: find each signer (issuer and serial, or
//! subject key identifier, as the kernel's `pkcs7_verify.c` does), check that the
//! signature algorithm fits the signer's key and digest, and verify the signature over
//! the content's digest, or over the signed attributes when there are any (then their
//! message digest must match the content).

use crate::formats::pkcs7::{parse, HashAlg, Pkcs7Error, SignerView};
use crate::trust::{Cert, PublicKey, TrustError, TrustStore};

/// Why a signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(transparent)]
    Parse(#[from] Pkcs7Error),
    #[error("signer {signer} (serial {serial}) is not in the trust store")]
    UntrustedSigner { signer: String, serial: String },
    #[error("signed attributes' message digest does not match the content")]
    DigestMismatch,
    #[error("malformed PKCS#7: {0}")]
    Algorithm(String),
    #[error("{0}")]
    Signature(#[from] TrustError),
}

/// The result of a successful verification.
#[derive(Debug, Clone)]
pub struct Verified<'a> {
    pub signer: SignerView,
    pub cert: &'a Cert,
}

/// Finds the signer's certificate in `store`.
pub fn find_signer<'a>(s: &SignerView, store: &'a TrustStore) -> Result<&'a Cert, VerifyError> {
    let found = match &s.skid {
        Some(k) => store.by_skid(k),
        None => store.by_issuer_serial(&s.issuer_der, &s.serial),
    };
    found.ok_or_else(|| VerifyError::UntrustedSigner {
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
) -> Result<&'a Cert, VerifyError> {
    let cert = find_signer(s, store)?;
    check_sig_alg(&s.sig_alg, s.digest, &cert.key)?;
    match &s.signed_attrs {
        None => cert.verify_digest(s.digest, content_digest, &s.signature)?,
        Some((attrs, md)) => {
            if md.as_slice() != content_digest {
                return Err(VerifyError::DigestMismatch);
            }
            let d = s.digest.digest(attrs);
            cert.verify_digest(s.digest, &d, &s.signature)?;
        }
    }
    Ok(cert)
}

/// The signature algorithm OID must name the signer's key type (and, when it names a
/// digest, the signer's digest).
fn check_sig_alg(oid: &str, digest: HashAlg, key: &PublicKey) -> Result<(), VerifyError> {
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
            return Err(VerifyError::Algorithm(format!(
                "unsupported signature algorithm {other}"
            )))
        }
    };
    let key_is_rsa = matches!(key, PublicKey::Rsa(_));
    if rsa != key_is_rsa {
        return Err(VerifyError::Algorithm(format!(
            "signature algorithm {oid} does not fit a {} key",
            key.describe()
        )));
    }
    if named.is_some_and(|d| d != digest) {
        return Err(VerifyError::Algorithm(format!(
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
) -> Result<Verified<'a>, VerifyError> {
    let signers = parse(der_bytes)?;
    let s = signers.into_iter().next().ok_or(Pkcs7Error::NoSigner)?;
    let digest = s.digest.digest(content);
    let cert = verify_signer(&s, &digest, store)?;
    Ok(Verified { signer: s, cert })
}

//! The signature of a TPM quote, checked with the attestation key's public area.
//!
//! Contract: [`verify_signature`] accepts a signature only when the key is a TPM-bound
//! restricted signing key (an AK: `fixedTPM`, `fixedParent`, `restricted`, `sign`, not
//! `decrypt`), the signature uses the key's own scheme and hash (a restricted key signs
//! with nothing else), and AWS-LC ([`super::keys`]) verifies it over the digest of the
//! exact `TPMS_ATTEST` bytes. Whether the quote says the right thing (magic, qualifying
//! data, PCRs) is the caller's check, on the parsed [`Attest`](crate::formats::tpm::attest::Attest).
//!
//! Current limits: ECDSA on P-256, P-384 and P-521 and RSASSA-PKCS1-v1_5 keys of 1024 to
//! 16384 bits, digests SHA-1 to SHA-512, as [`super::keys`] supports them.

use crate::formats::tpm::attest::{alg, curve, Public, PublicKey, Signature};
use crate::formats::tpm::HashAlg as TpmHash;

use super::keys::{Curve, EcKey, RsaKey};
use super::HashAlg;

/// Why a quote's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuoteSigError {
    #[error("the key is not an attestation key (a TPM-bound restricted signing key): attributes {0:#010x}")]
    NotAnAk(u32),
    #[error("the signature ({got}) is not made with the key's scheme ({want})")]
    Scheme { got: String, want: String },
    #[error("the key cannot be used: {0}")]
    Key(String),
    #[error("the signature does not verify with the key")]
    Mismatch,
}

fn hash(h: TpmHash) -> HashAlg {
    match h {
        TpmHash::Sha1 => HashAlg::Sha1,
        TpmHash::Sha256 => HashAlg::Sha256,
        TpmHash::Sha384 => HashAlg::Sha384,
        TpmHash::Sha512 => HashAlg::Sha512,
    }
}

fn scheme_name(scheme: u16, hash: u16) -> String {
    let s = match scheme {
        alg::ECDSA => "ecdsa".to_string(),
        alg::RSASSA => "rsassa".to_string(),
        alg::NULL => "none".to_string(),
        other => format!("{other:#06x}"),
    };
    match TpmHash::from_alg_id(hash) {
        Some(h) => format!("{s}-{h}"),
        None if hash == alg::NULL => s,
        None => format!("{s}-{hash:#06x}"),
    }
}

/// Verifies `sig` over `message` (a `TPMS_ATTEST`) with the attestation key `ak`.
pub fn verify_signature(ak: &Public, message: &[u8], sig: &Signature) -> Result<(), QuoteSigError> {
    if !ak.is_attestation_key() {
        return Err(QuoteSigError::NotAnAk(ak.attributes));
    }
    let (got_scheme, h) = match sig {
        Signature::Ecdsa { hash, .. } => (alg::ECDSA, *hash),
        Signature::RsaSsa { hash, .. } => (alg::RSASSA, *hash),
    };
    if ak.scheme.scheme != got_scheme || ak.scheme.hash != h.alg_id() {
        return Err(QuoteSigError::Scheme {
            got: scheme_name(got_scheme, h.alg_id()),
            want: scheme_name(ak.scheme.scheme, ak.scheme.hash),
        });
    }
    let digest = h.digest(message);
    match (&ak.key, sig) {
        (PublicKey::Ecc { curve: c, x, y }, Signature::Ecdsa { r, s, .. }) => {
            let (cv, len) = match *c {
                curve::NIST_P256 => (Curve::P256, 32),
                curve::NIST_P384 => (Curve::P384, 48),
                curve::NIST_P521 => (Curve::P521, 66),
                other => {
                    return Err(QuoteSigError::Key(format!(
                        "curve {other:#06x} is not supported"
                    )))
                }
            };
            if x.len() > len || y.len() > len {
                return Err(QuoteSigError::Key(format!(
                    "point coordinates of {} and {} bytes on a {len}-byte curve",
                    x.len(),
                    y.len()
                )));
            }
            let mut point = vec![4u8];
            for c in [x, y] {
                point.resize(point.len() + len - c.len(), 0);
                point.extend_from_slice(c);
            }
            let key =
                EcKey::from_sec1(cv, &point).map_err(|e| QuoteSigError::Key(e.to_string()))?;
            key.verify_rs(&digest, r, s)
                .map_err(|_| QuoteSigError::Mismatch)
        }
        (PublicKey::Rsa { modulus, exponent }, Signature::RsaSsa { sig, .. }) => {
            let e = if *exponent == 0 { 65537 } else { *exponent };
            let key = RsaKey::from_components(modulus, &e.to_be_bytes())
                .map_err(|e| QuoteSigError::Key(e.to_string()))?;
            if key.verify(hash(h), &digest, sig) {
                Ok(())
            } else {
                Err(QuoteSigError::Mismatch)
            }
        }
        // The scheme check above ties ECDSA to ECC keys' schemes; a key whose scheme
        // disagrees with its type is not one a TPM makes.
        _ => Err(QuoteSigError::Scheme {
            got: scheme_name(got_scheme, h.alg_id()),
            want: "a scheme of the key's type".into(),
        }),
    }
}

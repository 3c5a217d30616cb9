//! The Discoverable Partitions `root-verity-sig` check: the certificate the fingerprint
//! names must be in the trust store and must be the one whose PKCS#7 signature covers the
//! hex root hash.

use crate::formats::verity::sig::RootHashSig;
use crate::trust::pkcs7::{self, VerifyError};
use crate::trust::TrustStore;

/// Why a root-hash signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootSigError {
    #[error("root-verity-sig: certificateFingerprint {0} names no certificate in the trust store")]
    UntrustedCert(String),
    #[error("root-verity-sig: {0}")]
    Signature(VerifyError),
    #[error("root-verity-sig: signed by {signer}, not by the certificate {fingerprint} it names")]
    WrongSigner { signer: String, fingerprint: String },
}

/// Verifies the signature against the trust store: the certificate the fingerprint names
/// must be trusted and must be the one that signed the hex root hash. Returns the
/// signer's label.
pub fn verify(sig: &RootHashSig, store: &TrustStore) -> Result<String, RootSigError> {
    let cert = store
        .by_fingerprint(&sig.fingerprint)
        .ok_or_else(|| RootSigError::UntrustedCert(sig.fingerprint.clone()))?;
    let v = pkcs7::verify_detached(&sig.pkcs7, sig.root_hash_hex.as_bytes(), store)
        .map_err(RootSigError::Signature)?;
    if v.cert.sha256 != cert.sha256 {
        return Err(RootSigError::WrongSigner {
            signer: v.cert.label(),
            fingerprint: sig.fingerprint.clone(),
        });
    }
    Ok(cert.label())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fingerprint_is_untrusted() {
        let s = RootHashSig {
            root_hash: vec![0xab],
            root_hash_hex: "ab".into(),
            fingerprint: "00".into(),
            pkcs7: vec![0],
        };
        let e = verify(&s, &TrustStore::new()).unwrap_err();
        assert!(matches!(e, RootSigError::UntrustedCert(_)), "{e}");
    }
}

//! The Discoverable Partitions `root-verity-sig` partition: a JSON object
//! `{"rootHash": "<hex>", "certificateFingerprint": "<sha256 hex of the signer's DER
//! certificate>", "signature": "<base64 DER PKCS#7, detached, over the hex root hash>"}`,
//! NUL padded to the partition size, as systemd-repart writes it.

use base64::Engine;

use crate::pkcs7;
use crate::trust::TrustStore;

/// Why a root-hash signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("root-verity-sig: not JSON: {0}")]
    Json(String),
    #[error("root-verity-sig: rootHash {0:?} is not hex")]
    RootHash(String),
    #[error("root-verity-sig: signature is not base64: {0}")]
    Base64(String),
    #[error("root-verity-sig: certificateFingerprint {0} names no certificate in the trust store")]
    UntrustedCert(String),
    #[error("root-verity-sig: {0}")]
    Signature(pkcs7::Pkcs7Error),
    #[error("root-verity-sig: signed by {signer}, not by the certificate {fingerprint} it names")]
    WrongSigner { signer: String, fingerprint: String },
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    root_hash: String,
    certificate_fingerprint: String,
    signature: String,
}

/// A parsed (not yet verified) root-hash signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootHashSig {
    pub root_hash: Vec<u8>,
    /// The hex text that was signed.
    pub root_hash_hex: String,
    pub fingerprint: String,
    pub pkcs7: Vec<u8>,
}

pub use crate::bom::unhex;

/// Parses the partition's bytes (trailing NULs and whitespace ignored).
pub fn parse(bytes: &[u8]) -> Result<RootHashSig, SigError> {
    let end = bytes
        .iter()
        .rposition(|&b| b != 0 && !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let raw: Raw =
        serde_json::from_slice(&bytes[..end]).map_err(|e| SigError::Json(e.to_string()))?;
    let root_hash = unhex(&raw.root_hash)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| SigError::RootHash(raw.root_hash.clone()))?;
    let pkcs7 = base64::engine::general_purpose::STANDARD
        .decode(raw.signature.trim())
        .map_err(|e| SigError::Base64(e.to_string()))?;
    Ok(RootHashSig {
        root_hash,
        root_hash_hex: raw.root_hash,
        fingerprint: raw
            .certificate_fingerprint
            .to_ascii_lowercase()
            .replace(':', ""),
        pkcs7,
    })
}

/// Verifies the signature against the trust store: the certificate the fingerprint names
/// must be trusted and must be the one that signed the hex root hash. Returns the
/// signer's label.
pub fn verify(sig: &RootHashSig, store: &TrustStore) -> Result<String, SigError> {
    let cert = store
        .by_fingerprint(&sig.fingerprint)
        .ok_or_else(|| SigError::UntrustedCert(sig.fingerprint.clone()))?;
    let v = pkcs7::verify_detached(&sig.pkcs7, sig.root_hash_hex.as_bytes(), store)
        .map_err(SigError::Signature)?;
    if v.cert.sha256 != cert.sha256 {
        return Err(SigError::WrongSigner {
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
    fn malformed_inputs() {
        assert!(matches!(parse(b""), Err(SigError::Json(_))));
        assert!(matches!(parse(b"{\"rootHash\":1}"), Err(SigError::Json(_))));
        let j = |rh: &str, sig: &str| {
            format!("{{\"rootHash\":\"{rh}\",\"certificateFingerprint\":\"ab\",\"signature\":\"{sig}\"}}\0\0\0")
        };
        assert!(matches!(
            parse(j("xyz", "AAAA").as_bytes()),
            Err(SigError::RootHash(_))
        ));
        assert!(matches!(
            parse(j("abcd", "!!!").as_bytes()),
            Err(SigError::Base64(_))
        ));
        let ok = parse(j("ABcd", "AAAA").as_bytes()).unwrap();
        assert_eq!(ok.root_hash, vec![0xab, 0xcd]);
        assert_eq!(ok.pkcs7, vec![0, 0, 0]);
        let e = verify(&ok, &TrustStore::new()).unwrap_err();
        assert!(matches!(e, SigError::UntrustedCert(_)), "{e}");
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}

//! The Discoverable Partitions `root-verity-sig` partition: a JSON object
//! `{"rootHash": "<hex>", "certificateFingerprint": "<sha256 hex of the signer's DER
//! certificate>", "signature": "<base64 DER PKCS#7, detached, over the hex root hash>"}`,
//! NUL padded to the partition size, as systemd-repart writes it. The parser; the check
//! against the trust store is [`crate::trust::rootsig`].

use base64::Engine;

use crate::util::unhex;

/// Why a root-hash signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("root-verity-sig: not JSON: {0}")]
    Json(String),
    #[error("root-verity-sig: rootHash {0:?} is not hex")]
    RootHash(String),
    #[error("root-verity-sig: signature is not base64: {0}")]
    Base64(String),
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

/// Parses the partition's bytes (trailing NULs and whitespace ignored).
pub fn parse(bytes: &[u8]) -> Result<RootHashSig, SigError> {
    let end = bytes
        .iter()
        .rposition(|&b| b != 0 && !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let raw: Raw = serde_json::from_slice(bytes.get(..end).unwrap_or_default())
        .map_err(|e| SigError::Json(e.to_string()))?;
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
    }
}

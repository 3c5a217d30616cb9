//! Enrolling an attestation key through the TPM's endorsement key: the verifier's half.
//!
//! - [`check_ek_cert`]: the EK certificate (read from the TPM's NV index) was issued by
//!   one of the TPM vendor's CA certificates given (its signature verified,
//!   [`super::pkcs7::verify_cert`]) and holds the key the TPM's EK template makes.
//! - [`make_credential`]: `TPM2_MakeCredential` in software (TPM 2.0 Part 1, 24 "Credential
//!   Protection"; Part 3, 12.6): a secret only the TPM holding that EK can recover, and
//!   only for a key of the given name in the same TPM (`TPM2_ActivateCredential` checks
//!   both): a random seed encrypted to the EK (RSAES-OAEP-SHA256, label `IDENTITY`), the
//!   secret as a `TPM2B_DIGEST` encrypted with AES-128-CFB under `KDFa(seed, "STORAGE",
//!   name)`, and an HMAC-SHA-256 under `KDFa(seed, "INTEGRITY")` over the ciphertext and
//!   the name. The node's half is `TPM2_ActivateCredential` (`crate::sys::tpm`).
//!
//! Hand-written here: only the composition the specification defines (KDFa, SP 800-108
//! counter mode over HMAC, and the layout of the blob); the RSA, OAEP, AES, HMAC and
//! random number generation are AWS-LC's ([`super::keys`]).
//!
//! Current limits: RSA 2048 EKs with SHA-256 and AES-128-CFB (the TCG template L-1, what
//! every TPM 2.0 certifies); ECC EKs (ECDH seeds) are refused by name. Certificate
//! validity dates are not checked (EK certificates are valid for the TPM's life, and a
//! node's clock is not a verifier's).

use super::keys::{aes128_cfb_encrypt, hmac_sha256, random_bytes};
use super::pkcs7::verify_cert;
use super::{Cert, PublicKey as CertKey};
use crate::formats::tpm::attest::{alg, Public, PublicKey};
use crate::formats::tpm::HashAlg;

/// Why a credential could not be made or an EK certificate is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("the EK is not an RSA 2048 key with SHA-256 and AES-128-CFB (template L-1): {0}")]
    UnsupportedEk(String),
    #[error("the secret has {0} bytes; at most 32 (a SHA-256 digest)")]
    SecretSize(usize),
    #[error("{0}")]
    Crypto(String),
    #[error("EK certificate: {0}")]
    Cert(String),
}

/// `KDFa` with HMAC-SHA-256 (TPM 2.0 Part 1, 11.4.10.2): `bits` of
/// `HMAC(key, [i] || label || 0 || context_u || context_v || [bits])`, i = 1, 2, ...
pub fn kdfa_sha256(
    key: &[u8],
    label: &str,
    context_u: &[u8],
    context_v: &[u8],
    bits: u32,
) -> Vec<u8> {
    let want = (bits as usize).div_ceil(8);
    let mut out = Vec::with_capacity(want + 32);
    let mut i: u32 = 1;
    while out.len() < want {
        let mut msg = i.to_be_bytes().to_vec();
        msg.extend_from_slice(label.as_bytes());
        msg.push(0);
        msg.extend_from_slice(context_u);
        msg.extend_from_slice(context_v);
        msg.extend_from_slice(&bits.to_be_bytes());
        out.extend_from_slice(&hmac_sha256(key, &msg));
        i += 1;
    }
    out.truncate(want);
    out
}

/// A credential for the TPM that holds `ek`: the `TPM2B_ID_OBJECT` and
/// `TPM2B_ENCRYPTED_SECRET` contents (`TPM2_ActivateCredential`'s `credentialBlob` and
/// `secret`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub id_object: Vec<u8>,
    pub encrypted_secret: Vec<u8>,
}

/// `TPM2_MakeCredential` in software: `secret` (at most 32 bytes) for the key named
/// `name` (`nameAlg || H(public area)`) in the TPM holding `ek`.
pub fn make_credential(
    ek: &Public,
    name: &[u8],
    secret: &[u8],
) -> Result<Credential, CredentialError> {
    let PublicKey::Rsa { modulus, exponent } = &ek.key else {
        return Err(CredentialError::UnsupportedEk("an ECC key".into()));
    };
    if ek.name_alg != HashAlg::Sha256
        || ek.symmetric != (alg::AES, 128, alg::CFB)
        || ek.rsa_bits != 2048
    {
        return Err(CredentialError::UnsupportedEk(format!(
            "nameAlg {}, symmetric {:04x}/{}/{:04x}, {} bits",
            ek.name_alg, ek.symmetric.0, ek.symmetric.1, ek.symmetric.2, ek.rsa_bits
        )));
    }
    if secret.len() > 32 {
        return Err(CredentialError::SecretSize(secret.len()));
    }
    let crypto = |e: super::KeyError| CredentialError::Crypto(e.to_string());
    let e = if *exponent == 0 { 65537 } else { *exponent };
    let key = super::keys::RsaKey::from_components(modulus, &e.to_be_bytes()).map_err(crypto)?;
    let seed = random_bytes(32).map_err(crypto)?;
    let encrypted_secret = key
        .encrypt_oaep_sha256(b"IDENTITY\0", &seed)
        .map_err(crypto)?;
    let sym: [u8; 16] = kdfa_sha256(&seed, "STORAGE", name, &[], 128)
        .try_into()
        .map_err(|_| CredentialError::Crypto("KDFa gave the wrong length".into()))?;
    // The secret as a TPM2B_DIGEST; its length is at most 32 (checked above).
    let mut enc_identity = u16::try_from(secret.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes()
        .to_vec();
    enc_identity.extend_from_slice(secret);
    aes128_cfb_encrypt(&sym, &mut enc_identity).map_err(crypto)?;
    let hmac_key = kdfa_sha256(&seed, "INTEGRITY", &[], &[], 256);
    let mut signed = enc_identity.clone();
    signed.extend_from_slice(name);
    let integrity = hmac_sha256(&hmac_key, &signed);
    let mut id_object = 32u16.to_be_bytes().to_vec();
    id_object.extend_from_slice(&integrity);
    id_object.extend_from_slice(&enc_identity);
    Ok(Credential {
        id_object,
        encrypted_secret,
    })
}

/// Checks an EK certificate: it holds `ek`'s key and was issued by one of `cas` (its
/// signature verified with that CA's key). Returns the leaf's and the issuer's labels.
pub fn check_ek_cert(
    der: &[u8],
    ek: &Public,
    cas: &[Cert],
) -> Result<Vec<String>, CredentialError> {
    let bad = |why: String| CredentialError::Cert(why);
    let leaf = Cert::from_der(der, "EK certificate").map_err(|e| bad(e.to_string()))?;
    let PublicKey::Rsa { modulus, .. } = &ek.key else {
        return Err(CredentialError::UnsupportedEk("an ECC key".into()));
    };
    if !matches!(leaf.key, CertKey::Rsa(_)) {
        return Err(bad(format!("{} holds no RSA key", leaf.label())));
    }
    let modulus_of_cert = {
        use der::Decode;
        let c = x509_cert::Certificate::from_der(der).map_err(|e| bad(e.to_string()))?;
        let spki = c.tbs_certificate.subject_public_key_info.subject_public_key;
        let k = pkcs1::RsaPublicKey::from_der(spki.raw_bytes()).map_err(|e| bad(e.to_string()))?;
        k.modulus.as_bytes().to_vec()
    };
    let strip = |v: &[u8]| -> Vec<u8> { v.iter().copied().skip_while(|b| *b == 0).collect() };
    if strip(&modulus_of_cert) != strip(modulus) {
        return Err(bad(format!(
            "{} holds another key than the TPM's EK",
            leaf.label()
        )));
    }
    // Its issuer must be one of the CAs given (the vendor's root or intermediate): a CA
    // the verifier was given is trusted as given.
    let issuer = cas
        .iter()
        .find(|c| c.subject_der == leaf.issuer_der)
        .ok_or_else(|| bad(format!("none of the CAs given issued {}", leaf.label())))?;
    verify_cert(&leaf, issuer, |_| true).map_err(|e| bad(e.to_string()))?;
    Ok(vec![leaf.label(), issuer.label()])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KDFa as TPM 2.0 Part 1 defines it, against a value computed independently (Python:
    /// hmac.new(key, b"\0\0\0\1" + b"STORAGE\0" + b"name" + b"\0\0\0\x80", sha256)[:16]).
    #[test]
    fn kdfa_is_sp800_108_counter_mode_over_hmac() {
        let k = kdfa_sha256(b"seed", "STORAGE", b"name", b"", 128);
        assert_eq!(crate::util::hex(&k), "79f9abeb5a577bee60b4a69ad068a71a");
        // Two HMAC blocks, cut to 300 bits (38 bytes).
        let k = kdfa_sha256(b"seed", "INTEGRITY", b"", b"", 300);
        assert_eq!(
            crate::util::hex(&k),
            "0507848f89ae09739f307952e8b77090682c1abce646f74eeb598bb8ae96af52dbbd0380fa38"
        );
    }
}

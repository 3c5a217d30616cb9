//! Authenticode verification of PE images (UEFI applications, the kernel's EFI stub)
//! against a trust store: would this kernel boot, or be accepted by `kexec_file_load`?
//!
//! Contract: [`verify`] parses the image ([`crate::formats::pe`]), and for each
//! signature it considers ([`Rule::Kernel`]: the first only, as the kernel's
//! `verify_pefile_signature`; [`Rule::Firmware`]: every one, the image passing when any
//! does, as EDK2 and shim): parses the PKCS#7 SignedData as Authenticode
//! ([`crate::formats::pkcs7::parse_authenticode`]), reads the digest its
//! `SpcIndirectDataContent` carries ([`crate::formats::pe::indirect_digest`]), applies
//! the kernel's PKCS#7 rules and trust search ([`crate::trust::pkcs7::verify_message`]:
//! the embedded chain, then the store by issuer and serial, by the last certificate's
//! issuer, or by the signer itself), and compares the image's digest with the signed one.
//! An image whose SHA-256 Authenticode digest is in `forbidden` (UEFI `dbx`) is refused
//! whatever its signatures.
//!
//! Limits: no time checks (neither the firmware nor the kernel makes any); `dbx`
//! certificate entries (`EFI_CERT_X509_SHA256`) and SBAT are not judged; the trust store
//! is the caller's union of what the judge trusts (db, MOK, the kernel's keys), so a key
//! the kernel holds only in its platform keyring and one in its secondary keyring are
//! treated alike, as `kexec_file_load` (which tries both) does.

use crate::formats::pe::{self, PeError};
use crate::formats::pkcs7::{parse_authenticode, HashAlg, Pkcs7Error};
use crate::trust::pkcs7::{verify_message, MessageError};
use crate::trust::TrustStore;

/// Which signatures count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first signature only (`kexec_file_load` under lockdown).
    Kernel,
    /// Any signature (UEFI firmware, shim).
    Firmware,
}

/// A signature that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Its place in the certificate table (0: the first).
    pub index: usize,
    /// The trusted certificate it reached (its label: common name and serial).
    pub anchor: String,
    pub digest: HashAlg,
}

/// Why an image is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthenticodeError {
    #[error(transparent)]
    Pe(#[from] PeError),
    #[error("signature {index}: {source}")]
    Pkcs7 { index: usize, source: Pkcs7Error },
    #[error("signature {index}: {source}")]
    Content { index: usize, source: PeError },
    #[error("signature {index}: the image's {} digest does not match the signed one", alg.name())]
    DigestMismatch { index: usize, alg: HashAlg },
    #[error("signature {index}: {source}")]
    Untrusted { index: usize, source: MessageError },
    #[error("the image's SHA-256 digest {sha256} is forbidden (dbx)")]
    Forbidden { sha256: String },
}

/// Verifies `image`'s Authenticode signatures under `rule` against `store`, refusing an
/// image whose SHA-256 Authenticode digest is in `forbidden`.
pub fn verify(
    image: &[u8],
    store: &TrustStore,
    forbidden: &[[u8; 32]],
    rule: Rule,
) -> Result<Checked, AuthenticodeError> {
    let parsed = pe::parse(image)?;
    let sha256 = parsed.digest(image, HashAlg::Sha256);
    if forbidden.iter().any(|f| f.as_slice() == sha256.as_slice()) {
        return Err(AuthenticodeError::Forbidden {
            sha256: crate::util::hex(&sha256),
        });
    }
    let take = match rule {
        Rule::Kernel => 1,
        Rule::Firmware => parsed.signatures.len(),
    };
    let mut first_err = None;
    for (index, sig) in parsed.signatures.iter().enumerate().take(take) {
        match verify_one(image, &parsed, index, sig, store) {
            Ok(c) => return Ok(c),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or(AuthenticodeError::Pe(PeError::Unsigned)))
}

fn verify_one(
    image: &[u8],
    parsed: &pe::Pe,
    index: usize,
    sig: &pe::Signature,
    store: &TrustStore,
) -> Result<Checked, AuthenticodeError> {
    let der = image.get(sig.der.clone()).unwrap_or_default();
    let (msg, content) =
        parse_authenticode(der).map_err(|source| AuthenticodeError::Pkcs7 { index, source })?;
    let (alg, signed) = pe::indirect_digest(&content)
        .map_err(|source| AuthenticodeError::Content { index, source })?;
    let anchor = verify_message(&msg, &content, None, store, |_| true, |_| None)
        .map_err(|source| AuthenticodeError::Untrusted { index, source })?;
    // The kernel compares the image digest last (pefile_digest_pe after the PKCS#7).
    if parsed.digest(image, alg) != signed {
        return Err(AuthenticodeError::DigestMismatch { index, alg });
    }
    Ok(Checked {
        index,
        anchor: anchor.label(),
        digest: alg,
    })
}

//! The parts of PKCS#7 verification against the trust store, as the kernel's
//! `pkcs7_verify.c` and `pkcs7_trust.c` make them: find a signer (issuer and serial, or
//! subject key identifier), check that the signature algorithm fits the signer's key and
//! digest, and verify the signature over the content's digest, or over the signed
//! attributes when there are any (then their message digest must match the content);
//! the embedded certificates that issued the signer's ([`embedded_chain`],
//! `pkcs7_verify_sig_chain`) and the trust store lookups of `pkcs7_validate_trust_one`
//! ([`validate_trust`]). A whole message is judged by [`super::message::verify_message`],
//! which puts these together in the kernel's order.
//!
//! Current limits: [`verify_detached`] looks at the first signer only (the fuzz harnesses
//! use it); rules a caller adds for its kind of message are the caller's.

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
    /// A certificate of the message (its self-signature, its issuer link) is refused.
    #[error("{0}")]
    Certificate(String),
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
        signer: s.name(),
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
    cert.verify_digest(s.digest, &signed_digest(s, content_digest)?, &s.signature)?;
    Ok(cert)
}

/// The digest `s`'s signature is over: the content's, or, when the signer has signed
/// attributes, theirs (after their message digest is checked against the content's), as
/// the kernel's `pkcs7_digest`.
pub(super) fn signed_digest(s: &SignerView, content_digest: &[u8]) -> Result<Vec<u8>, VerifyError> {
    match &s.signed_attrs {
        None => Ok(content_digest.to_vec()),
        Some((attrs, md)) => {
            if md.as_slice() != content_digest {
                return Err(VerifyError::DigestMismatch);
            }
            Ok(s.digest.digest(attrs))
        }
    }
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

/// Verifies a detached signature over `content`: the first signer must verify (the
/// others are not looked at; [`super::message::verify_message`] judges a message as the
/// kernel does).
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

/// Whether `c` is self-signed, as the kernel's X.509 parser decides
/// (`x509_check_for_self_signed`): subject and issuer equal, an authority key identifier,
/// when there is one, naming the certificate itself (both parts when it has both: one
/// naming it and the other not is a rejection), and the signature verified with the
/// certificate's own key (a failure is a rejection: the kernel refuses the certificate,
/// and with it the message that carries it). A digest the kernel lacks makes it "not
/// self-signed" rather than an error, as there; a key it cannot take (`unusable` says
/// why) is a rejection.
pub fn self_signed(
    c: &Cert,
    has_digest: impl Fn(HashAlg) -> bool,
    unusable: impl Fn(&Cert) -> Option<String>,
) -> Result<bool, VerifyError> {
    if c.subject_der != c.issuer_der {
        return Ok(false);
    }
    if !c.akid.is_empty() {
        let by_key = c.akid.keyid.is_some() && c.akid.keyid == c.skid;
        let by_id = c
            .akid
            .issuer_serial
            .as_ref()
            .is_some_and(|(i, s)| *i == c.issuer_der && *s == c.serial);
        if !by_key && !by_id {
            return Ok(false);
        }
        if by_key != by_id && c.akid.keyid.is_some() && c.akid.issuer_serial.is_some() {
            return Err(VerifyError::Certificate(format!(
                "certificate {}: its authority key identifier names it by one part and not by \
                 the other",
                c.label()
            )));
        }
    }
    match cert_sig_digest(&c.sig_alg) {
        Some(d) if has_digest(d) => {}
        _ => return Ok(false),
    }
    // public_key_verify_signature: a key the kernel's crypto cannot take (an RSA size
    // rsa_check_key_length refuses, an ECDSA it is built without) fails the check.
    if let Some(why) = unusable(c) {
        return Err(VerifyError::Certificate(format!(
            "certificate {}: its self-signature cannot be checked: {why}",
            c.label()
        )));
    }
    verify_cert(c, c, has_digest).map_err(|e| match e {
        VerifyError::Signature(TrustError::BadSignature { .. }) => {
            VerifyError::Certificate(format!(
                "certificate {}: its self-signature does not verify",
                c.label()
            ))
        }
        other => other,
    })?;
    Ok(true)
}

/// The certificate in `store` that `child`'s authority key identifier names, as the
/// kernel's `find_asymmetric_key(keyring, auth_ids[0], auth_ids[1])`: by issuer and
/// serial when the identifier has them (then a key identifier that disagrees is a
/// rejection), else by key identifier. `Ok(None)`: none.
pub fn find_issuer<'a>(
    child: &Cert,
    store: &'a TrustStore,
) -> Result<Option<&'a Cert>, VerifyError> {
    match (&child.akid.issuer_serial, &child.akid.keyid) {
        (Some((issuer, serial)), keyid) => {
            let Some(c) = store.by_issuer_serial(issuer, serial) else {
                return Ok(None);
            };
            if keyid.is_some() && c.skid != *keyid {
                return Err(VerifyError::Certificate(format!(
                    "certificate {}: its authority's issuer and serial name {} but the key \
                     identifier does not match it",
                    child.label(),
                    c.label()
                )));
            }
            Ok(Some(c))
        }
        (None, Some(k)) => Ok(store.by_skid(k)),
        (None, None) => Ok(None),
    }
}

/// Verifies that `issuer`'s key signed `child` (its TBSCertificate under its signature
/// algorithm). `has_digest` says whether the kernel can hash with the algorithm.
pub fn verify_cert(
    child: &Cert,
    issuer: &Cert,
    has_digest: impl Fn(HashAlg) -> bool,
) -> Result<(), VerifyError> {
    let digest = cert_sig_digest(&child.sig_alg).ok_or_else(|| {
        VerifyError::Certificate(format!(
            "certificate {}: unsupported signature algorithm {}",
            child.label(),
            child.sig_alg
        ))
    })?;
    if !has_digest(digest) {
        return Err(VerifyError::Certificate(format!(
            "certificate {}: digest {} is not available in this kernel",
            child.label(),
            digest.name()
        )));
    }
    check_sig_alg(&child.sig_alg, digest, &issuer.key).map_err(|e| match e {
        VerifyError::Algorithm(m) => {
            VerifyError::Certificate(format!("certificate {}: {m}", child.label()))
        }
        other => other,
    })?;
    let d = digest.digest(&child.tbs);
    issuer
        .verify_digest(digest, &d, &child.signature)
        .map_err(|e| match e {
            TrustError::BadSignature { cert, algo } => TrustError::BadSignature {
                cert: format!("{cert}, over certificate {}", child.label()),
                algo,
            },
            other => other,
        })?;
    Ok(())
}

/// The digest a certificate's signature algorithm names (a certificate's algorithm
/// always names one).
fn cert_sig_digest(oid: &str) -> Option<HashAlg> {
    Some(match oid {
        "1.2.840.113549.1.1.5" | "1.2.840.10045.4.1" => HashAlg::Sha1,
        "1.2.840.113549.1.1.14" | "1.2.840.10045.4.3.1" => HashAlg::Sha224,
        "1.2.840.113549.1.1.11" | "1.2.840.10045.4.3.2" => HashAlg::Sha256,
        "1.2.840.113549.1.1.12" | "1.2.840.10045.4.3.3" => HashAlg::Sha384,
        "1.2.840.113549.1.1.13" | "1.2.840.10045.4.3.4" => HashAlg::Sha512,
        _ => return None,
    })
}

/// The chain of certificates a message carries for one signer, as the kernel's
/// `pkcs7_verify_sig_chain` builds it: the signer's own certificate (found by the
/// signer's identifier in `embedded`), then each certificate's issuer among the embedded
/// ones (by the authority key identifier), every link's signature verified with the
/// issuer's key. It ends at a certificate `is_self_signed` says is self-signed (the
/// caller decided that once per certificate with [`self_signed`], as the kernel's parser
/// does; the returned flag is then true) or at one
/// whose issuer the message does not carry; a loop ends it too. Empty when the signer's
/// certificate is not embedded. A link that does not verify, an issuer found by name
/// whose key identifier disagrees, or an issuer whose key the kernel's crypto cannot take
/// (`unusable` says why; `public_key_verify_signature` fails, EINVAL for an RSA size it
/// refuses) is an error (the kernel refuses the message).
pub fn embedded_chain<'m>(
    s: &SignerView,
    embedded: &'m TrustStore,
    is_self_signed: impl Fn(&Cert) -> bool,
    has_digest: impl Fn(HashAlg) -> bool + Copy,
    unusable: impl Fn(&Cert) -> Option<String>,
) -> Result<(Vec<&'m Cert>, bool), VerifyError> {
    let Ok(mut x) = find_signer(s, embedded) else {
        return Ok((Vec::new(), false));
    };
    let mut chain = vec![x];
    loop {
        if is_self_signed(x) {
            return Ok((chain, true));
        }
        let Some(p) = find_issuer(x, embedded)? else {
            return Ok((chain, false));
        };
        if chain.iter().any(|c| std::ptr::eq(*c, p)) {
            return Ok((chain, false));
        }
        if let Some(why) = unusable(p) {
            return Err(VerifyError::Certificate(format!(
                "certificate {}: its issuer {} cannot check it: {why}",
                x.label(),
                p.label()
            )));
        }
        verify_cert(x, p, has_digest)?;
        chain.push(p);
        x = p;
    }
}

/// How a signer reached the trust store.
#[derive(Debug)]
pub enum Anchored<'a> {
    /// A trusted key verified the signature, or the last embedded certificate.
    Trusted(&'a Cert),
    /// No trusted key found (the kernel's ENOKEY); `unusable` names a trusted
    /// certificate that would have matched but whose key this kernel cannot hold.
    NoKey { unusable: Option<String> },
}

/// The kernel's `pkcs7_validate_trust_one` for one signer whose content digest is
/// `digest` and whose embedded chain is `chain` ([`embedded_chain`]):
/// 1. each certificate of the chain, in order, looked up in `store` by its issuer and
///    serial (a key identifier that disagrees is a rejection): the first found verifies
///    the signer's signature (for the signer's own certificate) or the signature of the
///    certificate before it; an unknown self-signed certificate ends the search;
/// 2. else the last certificate's issuer, by its authority key identifier, verifies
///    that certificate's signature;
/// 3. else the signer's own identifier, looked up directly, verifies the signature.
///
/// `unusable` says why a trusted certificate's key cannot be used by this kernel (it
/// never entered a keyring there); such a certificate is skipped. A signature that does
/// not verify with the key found is an error, as in the kernel (EKEYREJECTED).
pub fn validate_trust<'a>(
    s: &SignerView,
    digest: &[u8],
    chain: (&[&Cert], bool),
    store: &'a TrustStore,
    has_digest: impl Fn(HashAlg) -> bool + Copy,
    unusable: impl Fn(&Cert) -> Option<String>,
) -> Result<Anchored<'a>, VerifyError> {
    let mut skipped = None;
    let usable = |c: &'a Cert, skipped: &mut Option<String>| match unusable(c) {
        Some(why) => {
            skipped
                .get_or_insert_with(|| format!("signer {} is trusted here but {why}", c.label()));
            None
        }
        None => Some(c),
    };
    let (chain, ends_self_signed) = chain;
    for (i, x) in chain.iter().enumerate() {
        if let Some(k) = store
            .by_issuer_serial(&x.issuer_der, &x.serial)
            .and_then(|c| usable(c, &mut skipped))
        {
            if x.skid.is_some() && k.skid != x.skid {
                return Err(VerifyError::Certificate(format!(
                    "certificate {} is in the trust store by issuer and serial as {}, but \
                     the key identifiers differ",
                    x.label(),
                    k.label()
                )));
            }
            match i.checked_sub(1).and_then(|j| chain.get(j)) {
                None => {
                    check_sig_alg(&s.sig_alg, s.digest, &k.key)?;
                    k.verify_digest(s.digest, &signed_digest(s, digest)?, &s.signature)?;
                }
                Some(child) => verify_cert(child, k, has_digest)?,
            }
            return Ok(Anchored::Trusted(k));
        }
        if ends_self_signed && i + 1 == chain.len() {
            return Ok(Anchored::NoKey { unusable: skipped });
        }
    }
    if let Some(last) = chain.last() {
        if let Some(k) = find_issuer(last, store)?.and_then(|c| usable(c, &mut skipped)) {
            verify_cert(last, k, has_digest)?;
            return Ok(Anchored::Trusted(k));
        }
    }
    match find_signer(s, store) {
        Ok(k) => match usable(k, &mut skipped) {
            Some(k) => {
                verify_signer(s, digest, store)?;
                Ok(Anchored::Trusted(k))
            }
            None => Ok(Anchored::NoKey { unusable: skipped }),
        },
        Err(VerifyError::UntrustedSigner { .. }) => Ok(Anchored::NoKey { unusable: skipped }),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signer may keep its signed attributes out of DER's sorted order: the kernel
    /// hashes them as they lie (`pkcs7_digest`), and so do we. The same attributes put
    /// back in sorted order without signing again are refused.
    #[test]
    fn signed_attributes_are_verified_as_they_lie() {
        let d = test_support::tmpdir("pkcs7-attr-order");
        let content = d.join("content");
        std::fs::write(&content, b"0123456789abcdef").unwrap();
        let key = sigcases::keys::self_signed(&d, "attribute-order", &["rsa:2048"], &[]);
        let sorted = key.cms(&content, "sha256", &["-nosmimecap", "-nocerts"]);
        let mut store = TrustStore::new();
        store.add_bytes(&key.cert_der(), "attribute-order").unwrap();
        let data = std::fs::read(&content).unwrap();
        verify_detached(&sorted, &data, &store).unwrap();

        let unsorted = sigcases::keys::attrs_out_of_order(&sorted, &key.key, &d);
        let v = verify_detached(&unsorted, &data, &store).unwrap();
        let attrs = &v.signer.signed_attrs.as_ref().unwrap().0;
        let raw = sigcases::der::Pkcs7::parse(&unsorted).signer(0).kids()[3].encode();
        assert_eq!(attrs[1..], raw[1..], "the attributes as they lie");
        assert_eq!((attrs[0], raw[0]), (0x31, 0xa0), "with the SET's tag");

        // The attributes back in sorted order, the signature over the unsorted ones kept.
        let mut back = sigcases::der::Pkcs7::parse(&unsorted);
        back.signer(0).kids_mut()[3].kids_mut().reverse();
        let e = verify_detached(&back.encode(), &data, &store).unwrap_err();
        assert!(matches!(e, VerifyError::Signature(_)), "{e:?}");
    }
}

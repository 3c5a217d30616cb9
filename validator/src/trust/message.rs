//! A whole PKCS#7 message judged as the kernel judges it: `pkcs7_verify` (the embedded
//! certificates, then each signer against its own embedded certificate and chain) and
//! then `pkcs7_validate_trust` (each signer against the trust store), over the parts of
//! [`super::pkcs7`]. One trusted signer with a valid signature is enough; any signer that
//! fails a check the kernel makes before the trust search refuses the message. The
//! refusal is typed ([`MessageError`]) for each caller (the module gate, `root-verity-sig`,
//! Authenticode) to map to its own reasons.
//!
//! Current limits: the rules a caller adds for its kind of message (a module signature's
//! signed attributes, the algorithms and key sizes a kernel supports, whether a signing
//! time is asked) are the caller's, given here as `has_digest`, `unusable` and
//! [`SigningTime`].

use super::pkcs7::{
    embedded_chain, find_signer, self_signed, signed_digest, validate_trust, verify_signer,
    Anchored, VerifyError,
};
use crate::formats::pkcs7::{HashAlg, Message, SignerView};
use crate::trust::{Cert, TrustError, TrustStore};

/// Whether a signer's signing time is held against the validity of its embedded
/// certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigningTime {
    /// As the kernel's `pkcs7_verify_one` does (modules, dm-verity, `kexec_file_load`).
    Checked,
    /// As UEFI firmware and shim do (their PKCS#7 verification asks no time).
    Ignored,
}

/// Why [`verify_message`] refuses a message: the kernel's `pkcs7_verify` (the embedded
/// certificates, each signer against them) or `pkcs7_validate_trust` (no signer reached
/// the trust store with a valid signature).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The message has no signer.
    #[error("no signer")]
    NoSigner,
    /// An embedded certificate the X.509 parser refuses; the whole message fails.
    #[error("embedded certificate: {0}")]
    CertParse(TrustError),
    /// An embedded certificate that names itself its issuer but whose self-signature
    /// does not verify (or whose authority key identifier contradicts itself); the
    /// whole message fails, as in the kernel's X.509 parser.
    #[error("embedded certificate: {0}")]
    SelfSigned(VerifyError),
    /// A signer's signature does not verify with its own embedded certificate.
    #[error("against the embedded certificate: {0}")]
    EmbeddedSignature(VerifyError),
    /// A signer's signing time (a signed attribute) lies outside the validity of its own
    /// embedded certificate (the kernel's `pkcs7_verify_one`, EKEYREJECTED: "Message
    /// signed outside of X.509 validity window"). The clock is not consulted, as there.
    #[error(
        "signed at {at}, outside the validity of its embedded certificate {cert} ({from} to \
         {to})"
    )]
    SignedOutsideValidity {
        cert: String,
        at: String,
        from: String,
        to: String,
    },
    /// A link of a signer's embedded chain does not verify, or an embedded issuer found
    /// by name has another key identifier.
    #[error("embedded certificate chain: {0}")]
    EmbeddedChain(VerifyError),
    /// A signer reached a trusted key that rejects it (the kernel's EKEYREJECTED), or
    /// a trusted certificate contradicts the chain.
    #[error("{0}")]
    Rejected(VerifyError),
    /// No signer is trusted, and (the first) one could not be checked because the
    /// kernel lacks its digest (ENOPKG); this wins over the two below.
    #[error("digest {} is not available", digest.name())]
    UnsupportedDigest { digest: HashAlg },
    /// No signer is trusted, and (the first) one matched a trusted certificate whose
    /// key the kernel cannot hold; this wins over [`MessageError::Untrusted`].
    #[error("{why}")]
    UnusableKey { why: String },
    /// No signer is in the trust store (the kernel's ENOKEY); for the first such signer:
    /// its issuer's common name (or `(by key id)`), its key id, and whether it had an
    /// embedded certificate whose issuers were looked up too.
    #[error(
        "signer {signer} (key {key_id}) is not in the trust store{}",
        if *chain { ", nor is an issuer of its certificate" } else { "" }
    )]
    Untrusted {
        signer: String,
        key_id: String,
        chain: bool,
    },
}

/// The trust decision over a parsed message `msg` whose content is `content` (with its
/// SHA-256 in `content_sha256` when the caller has it already), as the kernel's
/// `pkcs7_verify` then `pkcs7_validate_trust` make it:
/// 1. every embedded certificate is parsed and, when self-signed, its self-signature
///    verified once ([`self_signed`]); a failure refuses the message;
/// 2. every signer whose digest the kernel has (`has_digest`; the others are skipped):
///    when the message carries its own certificate, its signed attributes' message
///    digest, its signing time against that certificate's validity (when `signing_time`
///    is [`SigningTime::Checked`]) and its signature with that certificate's key
///    (`check_own`); then its embedded chain ([`embedded_chain`]); a failure refuses
///    the message;
/// 3. every signer so checked, against `store` ([`validate_trust`], with `unusable`
///    saying why a trusted certificate's key cannot be used): a trusted key that rejects
///    it refuses the message; otherwise one trusted, valid signer is enough.
///
/// Returns the trusted certificate of the first trusted signer.
pub fn verify_message<'a>(
    msg: &Message,
    content: &[u8],
    content_sha256: Option<&[u8]>,
    store: &'a TrustStore,
    has_digest: impl Fn(HashAlg) -> bool + Copy,
    unusable: impl Fn(&Cert) -> Option<String> + Copy,
    signing_time: SigningTime,
) -> Result<&'a Cert, MessageError> {
    if msg.signers.is_empty() {
        return Err(MessageError::NoSigner);
    }
    let mut embedded = TrustStore::new();
    // The self-signed certificates (by fingerprint), decided once here with their
    // signatures verified, for every signer's chain below.
    let mut self_signed_certs = std::collections::BTreeSet::new();
    for c in &msg.certs {
        // x509_cert_parse: a self-signed certificate whose self-signature fails is
        // refused, and the whole message with it.
        let cert = Cert::from_der(&c.der, "the signature").map_err(MessageError::CertParse)?;
        if self_signed(&cert, has_digest, unusable).map_err(MessageError::SelfSigned)? {
            self_signed_certs.insert(cert.sha256);
        }
        embedded.add(cert);
    }
    // pkcs7_verify_one, every signer: the digest (ENOPKG marks the signer unsupported),
    // then the signature against the signer's own certificate when the message embeds
    // it; a failure there is fatal whatever the trust.
    let mut digests = Vec::with_capacity(msg.signers.len());
    for s in &msg.signers {
        if !has_digest(s.digest) {
            digests.push(None);
            continue;
        }
        let digest = match (s.digest, content_sha256) {
            (HashAlg::Sha256, Some(d)) => d.to_vec(),
            (alg, _) => alg.digest(content),
        };
        // pkcs7_find_key matches the embedded certificates by issuer and serial only: a
        // signer named by key identifier never finds its own, so it is neither checked
        // against it nor chained; the trust store is asked for its key directly.
        let chain = if embedded.certs.is_empty() || s.skid.is_some() {
            (Vec::new(), false)
        } else {
            if let Ok(own) = find_signer(s, &embedded) {
                check_own(s, &digest, own, &embedded, unusable, signing_time)?;
            }
            // pkcs7_verify_sig_chain: the embedded certificates that issued the
            // signer's, each link verified.
            embedded_chain(
                s,
                &embedded,
                |c| self_signed_certs.contains(&c.sha256),
                has_digest,
                unusable,
            )
            .map_err(MessageError::EmbeddedChain)?
        };
        digests.push(Some((digest, chain)));
    }
    // pkcs7_validate_trust, every signer: the chain's certificates, the last one's
    // issuer, then the signer directly, against the trust store.
    let mut trusted = None;
    let mut unsupported = None;
    let mut untrusted = None;
    let mut unusable_key = None;
    for (s, digest) in msg.signers.iter().zip(&digests) {
        let Some((digest, (chain, ends_self_signed))) = digest else {
            unsupported.get_or_insert(s.digest);
            continue;
        };
        match validate_trust(
            s,
            digest,
            (chain, *ends_self_signed),
            store,
            has_digest,
            unusable,
        )
        .map_err(MessageError::Rejected)?
        {
            Anchored::Trusted(k) => {
                trusted.get_or_insert(k);
            }
            Anchored::NoKey {
                unusable: Some(why),
            } => {
                unusable_key.get_or_insert(why);
            }
            Anchored::NoKey { unusable: None } => {
                untrusted.get_or_insert_with(|| MessageError::Untrusted {
                    signer: s.name(),
                    key_id: s.key_id(),
                    chain: !chain.is_empty(),
                });
            }
        }
    }
    if let Some(k) = trusted {
        return Ok(k);
    }
    if let Some(digest) = unsupported {
        return Err(MessageError::UnsupportedDigest { digest });
    }
    if let Some(why) = unusable_key {
        return Err(MessageError::UnusableKey { why });
    }
    Err(untrusted.unwrap_or(MessageError::NoSigner))
}

/// `pkcs7_verify_one` for a signer whose own certificate `own` the message embeds (in
/// `embedded`): the signed attributes' message digest (`pkcs7_digest`), then the signing
/// time against the certificate's validity (when `signing_time` asks), then the
/// signature with its key (a key the
/// kernel cannot take, `unusable`, fails it too). A failure is fatal whatever the trust.
fn check_own(
    s: &SignerView,
    digest: &[u8],
    own: &Cert,
    embedded: &TrustStore,
    unusable: impl Fn(&Cert) -> Option<String>,
    signing_time: SigningTime,
) -> Result<(), MessageError> {
    signed_digest(s, digest).map_err(MessageError::EmbeddedSignature)?;
    if let (Some(at), SigningTime::Checked) = (s.signing_time, signing_time) {
        if at < own.valid_from || at > own.valid_to {
            return Err(MessageError::SignedOutsideValidity {
                cert: own.label(),
                at: utc(at),
                from: utc(own.valid_from),
                to: utc(own.valid_to),
            });
        }
    }
    if let Some(why) = unusable(own) {
        return Err(MessageError::EmbeddedSignature(VerifyError::Certificate(
            format!("certificate {}: {why}", own.label()),
        )));
    }
    verify_signer(s, digest, embedded).map_err(MessageError::EmbeddedSignature)?;
    Ok(())
}

/// Seconds since the epoch as an RFC 3339 UTC time (the seconds themselves where `der`'s
/// calendar ends).
fn utc(secs: u64) -> String {
    der::DateTime::from_unix_duration(std::time::Duration::from_secs(secs))
        .map_or_else(|_| format!("{secs} s after the epoch"), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message without signers is refused as such, never trusted by default.
    #[test]
    fn a_message_without_signers_is_refused() {
        let msg = Message {
            signers: Vec::new(),
            certs: Vec::new(),
        };
        let e = verify_message(
            &msg,
            b"",
            None,
            &TrustStore::new(),
            |_| true,
            |_| None,
            SigningTime::Checked,
        )
        .unwrap_err();
        assert_eq!(e, MessageError::NoSigner);
    }

    /// The texts the gate reports (`docs/SIGNATURE-RULES.md` quotes them).
    #[test]
    fn refusals_read_as_the_gate_reports_them() {
        let e = MessageError::Untrusted {
            signer: "(by key id)".into(),
            key_id: "ab:cd".into(),
            chain: true,
        };
        assert_eq!(
            e.to_string(),
            "signer (by key id) (key ab:cd) is not in the trust store, nor is an issuer of \
             its certificate"
        );
        let e = MessageError::EmbeddedChain(VerifyError::Certificate("x".into()));
        assert_eq!(e.to_string(), "embedded certificate chain: x");
    }

    /// A signing time outside the validity of the signer's embedded certificate refuses
    /// the message, as the kernel's `pkcs7_verify_one` ("Message signed outside of X.509
    /// validity window", EKEYREJECTED), the bounds taken as inside; the clock is not
    /// asked. Without the certificate embedded the kernel has nothing to hold the time
    /// against, and neither have we.
    #[test]
    fn a_signing_time_outside_the_embedded_certificate_is_refused() {
        let d = test_support::tmpdir("pkcs7-signing-time");
        let content = d.join("content");
        std::fs::write(&content, b"0123456789abcdef").unwrap();
        let data = std::fs::read(&content).unwrap();
        let key = sigcases::keys::self_signed(&d, "signing-time", &["rsa:2048"], &[]);
        let mut store = TrustStore::new();
        store.add_bytes(&key.cert_der(), "signing-time").unwrap();
        let cert = Cert::from_der(&key.cert_der(), "signing-time").unwrap();
        let check = |p7: &[u8]| {
            let msg = crate::formats::pkcs7::parse_message(p7).unwrap();
            verify_message(
                &msg,
                &data,
                None,
                &store,
                |_| true,
                |_| None,
                SigningTime::Checked,
            )
        };
        // UTCTime for 1950 to 2049, GeneralizedTime otherwise, as the kernel takes them;
        // `generalized` forces the latter.
        let time = |secs: u64, generalized: bool| {
            let t =
                der::DateTime::from_unix_duration(std::time::Duration::from_secs(secs)).unwrap();
            let year = if generalized || !(1950..=2049).contains(&t.year()) {
                format!("{:04}", t.year())
            } else {
                format!("{:02}", t.year() % 100)
            };
            format!(
                "{year}{:02}{:02}{:02}{:02}{:02}Z",
                t.month(),
                t.day(),
                t.hour(),
                t.minutes(),
                t.seconds()
            )
        };
        let at = |secs| time(secs, false);
        // `openssl cms` puts the signing time (now) in; the certificate is embedded.
        let embedded = key.cms(&content, "sha256", &["-nosmimecap"]);
        let msg = crate::formats::pkcs7::parse_message(&embedded).unwrap();
        assert!(msg.signers[0].signing_time.is_some() && !msg.certs.is_empty());
        check(&embedded).unwrap();
        for (secs, inside) in [
            (cert.valid_from - 1, false),
            (cert.valid_from, true),
            (cert.valid_to, true),
            (cert.valid_to + 1, false),
        ] {
            let p7 = sigcases::keys::with_signing_time(&embedded, &key.key, &d, &at(secs));
            let got = check(&p7);
            assert_eq!(got.is_ok(), inside, "signed at {}: {got:?}", at(secs));
            if let Err(e) = got {
                assert!(
                    matches!(e, MessageError::SignedOutsideValidity { .. }),
                    "{e:?}"
                );
                let text = e.to_string();
                assert!(text.contains("outside the validity"), "{text}");
                assert!(!text.contains("  "), "{text}");
            }
        }
        // Inside the validity but a GeneralizedTime for a year UTCTime holds: the parser
        // refuses it (x509_decode_time, EBADMSG).
        let now = cert.valid_from + 60;
        let p7 = sigcases::keys::with_signing_time(&embedded, &key.key, &d, &time(now, true));
        let e = crate::formats::pkcs7::parse_message(&p7).unwrap_err();
        assert!(e.to_string().contains("x509_decode_time"), "{e}");
        let alone = key.cms(&content, "sha256", &["-nosmimecap", "-nocerts"]);
        let p7 = sigcases::keys::with_signing_time(&alone, &key.key, &d, &at(cert.valid_to + 1));
        check(&p7).unwrap();
    }
}

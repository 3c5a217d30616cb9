//! The gate's signature check: a module's appended PKCS#7 as the kernel's
//! `verify_pkcs7_signature` judges it.

use std::collections::BTreeSet;

use crate::formats::pkcs7;
use crate::trust::pkcs7::{verify_signer, Anchored};

use super::rules::{cert_key_supported, unusable, KERNEL_SIG_ALGS};
use super::{Gate, KernelRules, ReasonCode, Verdict};

impl Gate {
    /// The signature as the kernel's `verify_pkcs7_signature` judges a module's: the
    /// parser's rules (size, versions, algorithms, embedded certificates), no signed
    /// attributes, each signer's digest available, then the trust pass over **every**
    /// signer (`pkcs7_validate_trust`): a signer not in the store (or whose key this
    /// kernel cannot hold) is skipped, a trusted signer whose signature fails refuses the
    /// module at once, and one trusted valid signer is enough.
    pub(super) fn check_signature(
        &self,
        pkcs7_der: &[u8],
        body: &[u8],
        body_sha256: Option<&[u8]>,
        v: &mut Verdict,
    ) {
        let kc = self.policy.release.as_deref().and_then(KernelRules::debian);
        let msg = match pkcs7::parse_message(pkcs7_der) {
            Ok(m) => m,
            Err(e) => {
                v.reason(ReasonCode::BadPkcs7, e.to_string());
                return;
            }
        };
        let Some(first) = msg.signers.first() else {
            v.reason(ReasonCode::BadPkcs7, "no signer");
            return;
        };
        v.signer = Some(first.issuer_cn.clone());
        v.sig_key = Some(first.key_id());
        v.sig_hashalgo = Some(first.digest.name().to_string());
        // pkcs7_parser.c: the whole message fails on an algorithm or a certificate the
        // kernel does not support (ENOPKG: "module with unsupported crypto").
        if let Some(s) = msg
            .signers
            .iter()
            .find(|s| !KERNEL_SIG_ALGS.contains(&s.sig_alg.as_str()))
        {
            v.reason(
                ReasonCode::UnsupportedCrypto,
                format!(
                    "signature algorithm {} is not one the kernel takes for a module \
                     (rsaEncryption or ecdsa-with-SHA*)",
                    s.sig_alg
                ),
            );
            return;
        }
        if let Some(c) = msg.certs.iter().find(|c| !cert_key_supported(c, kc)) {
            let what = match &c.curve {
                Some(curve) => crate::trust::key_oid_name(curve).unwrap_or(curve),
                None => crate::trust::key_oid_name(&c.key_alg).unwrap_or(&c.key_alg),
            };
            v.reason(
                ReasonCode::UnsupportedCrypto,
                format!(
                    "embedded certificate {} has a {what} key the kernel's X.509 parser \
                     refuses",
                    c.subject
                ),
            );
            return;
        }
        // pkcs7_verify: module signatures must not carry signed attributes.
        if first.signed_attrs.is_some() {
            v.reason(
                ReasonCode::SignedAttributes,
                "signed attributes in a module signature (the kernel: Invalid module sig \
                 (has authattrs))",
            );
            return;
        }
        // pkcs7_verify_one, every signer: the digest (ENOPKG marks the signer
        // unsupported), then the signature against the signer's own certificate when the
        // message embeds it; a failure there is fatal whatever the trust.
        let has_digest = |a: crate::trust::HashAlg| kc.is_none_or(|k| k.has_digest(a));
        let mut embedded = crate::trust::TrustStore::new();
        // The self-signed certificates (by fingerprint), decided once here with their
        // signatures verified, for every signer's chain below.
        let mut self_signed = BTreeSet::new();
        for c in &msg.certs {
            match crate::trust::Cert::from_der(&c.der, "the signature") {
                // x509_cert_parse: a self-signed certificate whose self-signature fails
                // is refused, and the whole message with it.
                Ok(cert) => match crate::trust::pkcs7::self_signed(&cert, has_digest) {
                    Ok(yes) => {
                        if yes {
                            self_signed.insert(cert.sha256);
                        }
                        embedded.add(cert)
                    }
                    Err(e) => {
                        v.reason(
                            ReasonCode::BadSignature,
                            format!("embedded certificate: {e}"),
                        );
                        return;
                    }
                },
                Err(e) => {
                    v.reason(
                        ReasonCode::BadSignature,
                        format!("embedded certificate: {e}"),
                    );
                    return;
                }
            }
        }
        let mut digests = Vec::with_capacity(msg.signers.len());
        for s in &msg.signers {
            if !has_digest(s.digest) {
                digests.push(None);
                continue;
            }
            let digest = match (s.digest, body_sha256) {
                (crate::trust::HashAlg::Sha256, Some(d)) => d.to_vec(),
                (alg, _) => alg.digest(body),
            };
            let chain = if embedded.certs.is_empty() {
                (Vec::new(), false)
            } else {
                if crate::trust::pkcs7::find_signer(s, &embedded).is_ok() {
                    if let Err(e) = verify_signer(s, &digest, &embedded) {
                        v.reason(
                            ReasonCode::BadSignature,
                            format!("against the embedded certificate: {e}"),
                        );
                        return;
                    }
                }
                // pkcs7_verify_sig_chain: the embedded certificates that issued the
                // signer's, each link verified.
                match crate::trust::pkcs7::embedded_chain(
                    s,
                    &embedded,
                    |c| self_signed.contains(&c.sha256),
                    has_digest,
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        v.reason(
                            ReasonCode::BadSignature,
                            format!("embedded certificate chain: {e}"),
                        );
                        return;
                    }
                }
            };
            digests.push(Some((digest, chain)));
        }
        // pkcs7_validate_trust, every signer: the chain's certificates, the last one's
        // issuer, then the signer directly, against the trust store.
        let mut trusted = false;
        let mut unsupported = None;
        let mut untrusted = None;
        let mut unusable_key = None;
        for (s, digest) in msg.signers.iter().zip(&digests) {
            let Some((digest, (chain, self_signed))) = digest else {
                unsupported.get_or_insert_with(|| {
                    format!(
                        "digest {} is not built into kernel {} (a module there)",
                        s.digest.name(),
                        self.policy.release.as_deref().unwrap_or_default()
                    )
                });
                continue;
            };
            match crate::trust::pkcs7::validate_trust(
                s,
                digest,
                (chain, *self_signed),
                &self.trust,
                has_digest,
                |c| unusable(&c.key, kc),
            ) {
                Ok(Anchored::Trusted(_)) => trusted = true,
                Ok(Anchored::NoKey { unusable: why }) => match why {
                    Some(m) => {
                        unusable_key.get_or_insert(m);
                    }
                    None => {
                        untrusted.get_or_insert_with(|| {
                            format!(
                                "signer {} (key {}) is not in the trust store{}",
                                if s.issuer_cn.is_empty() {
                                    "(by key id)"
                                } else {
                                    &s.issuer_cn
                                },
                                s.key_id(),
                                if chain.is_empty() {
                                    ""
                                } else {
                                    ", nor is an issuer of its certificate"
                                }
                            )
                        });
                    }
                },
                Err(e) => {
                    v.reason(ReasonCode::BadSignature, e.to_string());
                    return;
                }
            }
        }
        if trusted {
            return;
        }
        if let Some(m) = unsupported {
            v.reason(ReasonCode::UnsupportedCrypto, m);
        } else if let Some(m) = unusable_key {
            v.reason(ReasonCode::UnusableKey, m);
        } else if let Some(m) = untrusted {
            v.reason(ReasonCode::UntrustedSigner, m);
        }
    }
}

//! The gate's signature check: a module's appended PKCS#7 as the kernel's
//! `verify_pkcs7_signature` judges it. The module-specific rules are here (the
//! signature algorithms and certificate keys the running kernel takes, no signed
//! attributes, the digests it has: [`KernelRules`]); the trust decision (embedded
//! certificates and chains, then the trust store) is one call,
//! [`crate::trust::message::verify_message`], whose typed error this maps to the gate's
//! reason codes and messages.

use crate::formats::pkcs7;
use crate::trust::message::{verify_message, MessageError, SigningTime};

use super::rules::{cert_key_supported, unusable};
use super::{Gate, KernelRules, ReasonCode, Verdict};

impl Gate {
    /// The signature as the kernel's `verify_pkcs7_signature` judges a module's: the
    /// parser's rules (size, versions, algorithms, embedded certificates), no signed
    /// attributes, each signer's digest available, then the trust pass over **every**
    /// signer (`pkcs7_validate_trust`): a signer not in the store (or whose key this
    /// kernel cannot hold) is skipped, a trusted signer whose signature fails refuses the
    /// module at once, and one trusted valid signer is enough. Returns whether it
    /// verified (`false`: a reason was added).
    pub(super) fn check_signature(
        &self,
        pkcs7_der: &[u8],
        body: &[u8],
        body_sha256: Option<&[u8]>,
        v: &mut Verdict,
    ) -> bool {
        let kc = self.policy.release.as_deref().and_then(KernelRules::debian);
        let msg = match pkcs7::parse_message(pkcs7_der) {
            Ok(m) => m,
            Err(e) => {
                v.reason(ReasonCode::BadPkcs7, e.to_string());
                return false;
            }
        };
        let Some(first) = msg.signers.first() else {
            v.reason(ReasonCode::BadPkcs7, "no signer");
            return false;
        };
        v.signer = Some(first.issuer_cn.clone());
        v.sig_key = Some(first.key_id());
        v.sig_hashalgo = Some(first.digest.name().to_string());
        // pkcs7_parser.c: the whole message fails on an algorithm or a certificate the
        // kernel does not support (ENOPKG: "module with unsupported crypto").
        if let Some(s) = msg.signer_with_refused_algorithm() {
            v.reason(
                ReasonCode::UnsupportedCrypto,
                format!(
                    "signature algorithm {} is not one the kernel takes for a module \
                     (rsaEncryption or ecdsa-with-SHA*)",
                    s.sig_alg
                ),
            );
            return false;
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
            return false;
        }
        // pkcs7_verify: module signatures must not carry signed attributes.
        if first.signed_attrs.is_some() {
            v.reason(
                ReasonCode::SignedAttributes,
                "signed attributes in a module signature (the kernel: Invalid module sig \
                 (has authattrs))",
            );
            return false;
        }
        // pkcs7_verify and pkcs7_validate_trust: the embedded certificates, each signer
        // against them, then every signer against the trust store.
        let has_digest = |a: crate::trust::HashAlg| {
            kc.is_none_or(|k| k.has_digest(a)) || self.policy.module_digests.has(a)
        };
        let refused = match verify_message(
            &msg,
            body,
            body_sha256,
            &self.trust,
            has_digest,
            |c| unusable(&c.key, kc),
            SigningTime::Checked,
        ) {
            Ok(_) => return true,
            Err(e) => e,
        };
        let code = match &refused {
            MessageError::NoSigner => ReasonCode::BadPkcs7,
            MessageError::CertParse(_)
            | MessageError::SelfSigned(_)
            | MessageError::EmbeddedSignature(_)
            | MessageError::SignedOutsideValidity { .. }
            | MessageError::EmbeddedChain(_)
            | MessageError::Rejected(_) => ReasonCode::BadSignature,
            MessageError::UnsupportedDigest { digest } => {
                v.reason(
                    ReasonCode::UnsupportedCrypto,
                    format!(
                        "digest {} is not built into kernel {} and no module providing it \
                         (crypto-{}) was loaded before this one",
                        digest.name(),
                        self.policy.release.as_deref().unwrap_or_default(),
                        digest.name()
                    ),
                );
                return false;
            }
            MessageError::UnusableKey { .. } => ReasonCode::UnusableKey,
            MessageError::Untrusted { .. } => ReasonCode::UntrustedSigner,
        };
        v.reason(code, refused.to_string());
        false
    }
}

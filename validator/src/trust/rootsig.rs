//! The Discoverable Partitions `root-verity-sig` check: the certificate the fingerprint
//! names must be in the trust store and must be the trusted signer of the PKCS#7
//! signature over the hex root hash. The message is judged as the kernel's
//! `verify_pkcs7_signature` judges it for dm-verity's `root_hash_sig_key_desc`
//! ([`message::verify_message`]): every signer is checked (against its embedded certificate
//! and chain when the message carries them), and one trusted signer with a valid
//! signature is enough, whichever place it has among the signers.
//!
//! A signer whose signature algorithm the kernel's parser refuses
//! ([`crate::formats::pkcs7::KERNEL_SIG_ALGS`]) refuses the message, as there.
//!
//! Current limits: the kernel's crypto limits that depend on its release and build (the
//! digests and key kinds and sizes it has) are the module gate's only; every digest and
//! key the trust store takes is taken here.

use crate::formats::pkcs7::{parse_message, Pkcs7Error};
use crate::formats::verity::sig::RootHashSig;
use crate::trust::message::{self, MessageError};
use crate::trust::TrustStore;

/// Why a root-hash signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RootSigError {
    #[error("root-verity-sig: certificateFingerprint {0} names no certificate in the trust store")]
    UntrustedCert(String),
    #[error("root-verity-sig: {0}")]
    Parse(Pkcs7Error),
    #[error("root-verity-sig: {0}")]
    Signature(MessageError),
    /// A signer's signature algorithm the kernel's PKCS#7 parser refuses (ENOPKG).
    #[error(
        "root-verity-sig: signature algorithm {0} is not one the kernel takes \
         (rsaEncryption or ecdsa-with-SHA*)"
    )]
    Algorithm(String),
    #[error("root-verity-sig: signed by {signer}, not by the certificate {fingerprint} it names")]
    WrongSigner { signer: String, fingerprint: String },
}

/// Verifies the signature against the trust store: the certificate the fingerprint names
/// must be trusted and must be the (first) trusted signer of the hex root hash. Returns
/// the signer's label.
pub fn verify(sig: &RootHashSig, store: &TrustStore) -> Result<String, RootSigError> {
    let cert = store
        .by_fingerprint(&sig.fingerprint)
        .ok_or_else(|| RootSigError::UntrustedCert(sig.fingerprint.clone()))?;
    let msg = parse_message(&sig.pkcs7).map_err(RootSigError::Parse)?;
    if let Some(s) = msg.signer_with_refused_algorithm() {
        return Err(RootSigError::Algorithm(s.sig_alg.clone()));
    }
    let signer = message::verify_message(
        &msg,
        sig.root_hash_hex.as_bytes(),
        None,
        store,
        |_| true,
        |_| None,
        message::SigningTime::Checked,
    )
    .map_err(RootSigError::Signature)?;
    if signer.sha256 != cert.sha256 {
        return Err(RootSigError::WrongSigner {
            signer: signer.label(),
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

    /// The root hash signed by two signers, the trusted one (named by the fingerprint)
    /// first or second: taken either way, as the kernel takes a message one trusted
    /// signer of which verifies (a key rotation signs with the old and the new key).
    /// A second signer whose signature fails against its own embedded certificate
    /// refuses the message, as the kernel's `pkcs7_verify`, and so does a signature
    /// algorithm its parser refuses.
    #[test]
    fn any_trusted_signer_is_enough_and_every_signer_is_checked() {
        use sha2::Digest;
        use sigcases::der::Pkcs7;
        let d = test_support::tmpdir("rootsig-two-signers");
        let hex = "ab".repeat(32);
        let content = d.join("roothash.txt");
        std::fs::write(&content, &hex).unwrap();
        let (old, new) = (
            sigcases::keys::self_signed(&d, "old", &["rsa:2048"], &[]),
            sigcases::keys::self_signed(&d, "new", &["rsa:2048"], &[]),
        );
        let mut store = TrustStore::new();
        store.add_bytes(&new.cert_der(), "new").unwrap();
        let fingerprint = crate::util::hex(&sha2::Sha256::digest(new.cert_der()));
        let signed = |k: &sigcases::keys::Key, extra: &[&str]| {
            Pkcs7::parse(&k.cms(&content, "sha256", &[&["-noattr"], extra].concat()))
        };
        let (by_old, by_new) = (signed(&old, &["-nocerts"]), signed(&new, &["-nocerts"]));
        let (so, sn) = (
            by_old.clone().signer(0).clone(),
            by_new.clone().signer(0).clone(),
        );
        let sig = |signers: Vec<sigcases::der::Node>| {
            let mut t = by_old.clone();
            *t.signer_infos() = signers;
            RootHashSig {
                root_hash: vec![0xab; 32],
                root_hash_hex: hex.clone(),
                fingerprint: fingerprint.clone(),
                pkcs7: t.encode(),
            }
        };
        for order in [vec![so.clone(), sn.clone()], vec![sn.clone(), so.clone()]] {
            let label = verify(&sig(order), &store).unwrap();
            assert!(label.contains("sigcases new"), "{label}");
        }

        // The old signer's certificate embedded, its signature broken: refused although
        // the new signer is trusted and valid.
        let mut with_cert = signed(&old, &[]);
        let mut broken = with_cert.signer(0).clone();
        broken.kids_mut().last_mut().unwrap().bytes_mut()[7] ^= 1;
        *with_cert.signer_infos() = vec![sn.clone(), broken];
        let s = RootHashSig {
            pkcs7: with_cert.encode(),
            ..sig(vec![sn.clone()])
        };
        let e = verify(&s, &store).unwrap_err();
        assert!(
            matches!(
                e,
                RootSigError::Signature(MessageError::EmbeddedSignature(_))
            ),
            "{e}"
        );

        // The trusted signer's algorithm named sha256WithRSAEncryption (the signature
        // still valid): the kernel's parser refuses the message (ENOPKG), so do we.
        let mut t = by_new.clone();
        let at = sigcases::der::signer_sig_alg_index(t.signer(0));
        *t.signer(0).kids_mut()[at].kids_mut()[0].bytes_mut() =
            sigcases::der::oid("1.2.840.113549.1.1.11");
        let s = RootHashSig {
            pkcs7: t.encode(),
            ..sig(vec![sn.clone()])
        };
        let e = verify(&s, &store).unwrap_err();
        assert_eq!(e, RootSigError::Algorithm("1.2.840.113549.1.1.11".into()));
    }
}

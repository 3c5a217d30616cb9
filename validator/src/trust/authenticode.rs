//! Authenticode verification of PE images (UEFI applications, the kernel's EFI stub)
//! against a trust store: would this kernel boot, or be accepted by `kexec_file_load`?
//!
//! Contract: [`verify`] parses the image ([`crate::formats::pe`]), and for each
//! signature it considers ([`Rule::Kernel`]: the first table entry, which must be a
//! PKCS#7 signature, as the kernel's `verify_pefile_signature`, with sections hashed in
//! the kernel's order; [`Rule::Firmware`]: every PKCS#7 entry, the image passing when any
//! does, as EDK2 and shim, sections in EDK2's order; each digest computed once): parses
//! the PKCS#7 SignedData as Authenticode
//! ([`crate::formats::pkcs7::parse_authenticode`]), reads the digest its
//! `SpcIndirectDataContent` carries ([`crate::formats::pe::indirect_digest`]), applies
//! the kernel's PKCS#7 rules and trust search ([`crate::trust::message::verify_message`]:
//! the embedded chain, then the store by issuer and serial, by the last certificate's
//! issuer, or by the signer itself), and compares the image's digest with the signed one.
//! Revocation ([`crate::trust::revocation`], UEFI `dbx` and shim's `MokListXRT`, as EDK2's
//! `IsForbiddenByDbx` and shim's `check_denylist` apply it) refuses an image whatever its
//! other signatures: its SHA-256 Authenticode digest listed; a considered signature that
//! verifies up to a listed certificate (the signature checked against the list as its
//! trust store), or whose signer's certificate has its `TBSCertificate` digest listed;
//! the trusted certificate a signature reached, its digest listed. So, under
//! [`Rule::Firmware`], is an image whose certificate table
//! EDK2's walk does not end exactly at its end ([`crate::formats::pe::Pe::table_end`]:
//! trailing bytes, an unpadded last entry), which EDK2 leaves unverified. The kernel's
//! rule reads only the first entry and takes such a table, as the kernel does. Shim
//! walks the table its own way (it refuses trailing bytes that do not form an entry but
//! takes an unpadded last entry, `verify_buffer_authenticode`); the firmware rule is
//! EDK2's, the stricter, for every image.
//!
//! Time: under [`Rule::Kernel`] a signing time (a signed attribute) must lie within the
//! validity of the signer's embedded certificate, as the kernel's `pkcs7_verify_one`
//! checks for `kexec_file_load`; under [`Rule::Firmware`] no time is asked, as EDK2 and
//! shim ask none (so an image signed at a `SOURCE_DATE_EPOCH` earlier than its key's
//! certificate passes the firmware rule and not the kernel's).
//!
//! Limits: no clock is asked; the time of
//! revocation of an `EFI_CERT_X509_SHA256` entry is not read: see
//! [`crate::trust::revocation`]); SBAT is judged apart ([`crate::formats::sbat`]); the
//! kernel's rule applies the same revocation (`kexec_file_load` itself ignores dbx
//! certificates and image digests in Debian's configuration, but shim applies them when
//! the image boots after a reboot, which is what callers ask); the trust store
//! is the caller's union of what the judge trusts (db, MOK, the kernel's keys), so a key
//! the kernel holds only in its platform keyring and one in its secondary keyring are
//! treated alike, as `kexec_file_load` (which tries both) does.

use crate::formats::pe::{self, PeError, SectionOrder, TableEnd};
use crate::formats::pkcs7::{parse_authenticode, HashAlg, Message, Pkcs7Error};
use crate::trust::message::{verify_message, MessageError, SigningTime};
use crate::trust::revocation::Revocations;
use crate::trust::{Cert, TrustStore};

/// Which signatures count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first signature only (`kexec_file_load` under lockdown).
    Kernel,
    /// Any signature (UEFI firmware, shim), in a certificate table EDK2's walk takes.
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
    /// The certificate table's first entry is not a signature the kernel reads.
    #[error("the first certificate table entry is not a signature the kernel reads: {0}")]
    FirstEntry(String),
    #[error("signature {index}: {source}")]
    Pkcs7 { index: usize, source: Pkcs7Error },
    #[error("signature {index}: {source}")]
    Content { index: usize, source: PeError },
    #[error("signature {index}: the image's {} digest does not match the signed one", alg.name())]
    DigestMismatch { index: usize, alg: HashAlg },
    /// No trusted key: the signer as its embedded certificate names it.
    #[error(
        "signature {index}: its signer {signer} (issued by {issuer}, serial {serial}) is not \
         in the trust store, nor is an issuer of its certificate"
    )]
    UntrustedSigner {
        index: usize,
        signer: String,
        issuer: String,
        serial: String,
    },
    #[error("signature {index}: {source}")]
    Untrusted { index: usize, source: MessageError },
    /// Every signature refused (firmware rule, more than one): each one's reason.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    All(Vec<AuthenticodeError>),
    #[error("the image's SHA-256 digest {sha256} is revoked ({list})")]
    Forbidden { sha256: String, list: String },
    /// A signature reaches, or embeds, a revoked certificate.
    #[error("signature {index}: its certificate {cert} is revoked ({list})")]
    RevokedCert {
        index: usize,
        cert: String,
        list: String,
    },
    /// The firmware rule: EDK2's walk of the certificate table (`size` bytes at `at`)
    /// does not end exactly at its end, so the firmware leaves the image unverified.
    #[error(
        "certificate table ({size} bytes at {at:#x}): the firmware's walk of its entries \
         does not end at its end (EDK2 refuses the image): {source}"
    )]
    TableEnd {
        at: usize,
        size: usize,
        source: TableEnd,
    },
}

/// Verifies `image`'s Authenticode signatures under `rule` against `store`, refusing an
/// image that `revoked` revokes.
pub fn verify(
    image: &[u8],
    store: &TrustStore,
    revoked: &[Revocations],
    rule: Rule,
) -> Result<Checked, AuthenticodeError> {
    let parsed = pe::parse(image)?;
    let order = match rule {
        Rule::Kernel => SectionOrder::Kernel,
        Rule::Firmware => SectionOrder::Firmware,
    };
    // Each digest once, however many signatures ask for it.
    let mut digests: Vec<(HashAlg, Vec<u8>)> = Vec::new();
    let mut digest = |alg: HashAlg| -> Vec<u8> {
        if let Some((_, d)) = digests.iter().find(|(a, _)| *a == alg) {
            return d.clone();
        }
        let d = parsed.digest(image, alg, order);
        digests.push((alg, d.clone()));
        d
    };
    if revoked.iter().any(|l| !l.image_sha256.is_empty()) {
        let sha256 = digest(HashAlg::Sha256);
        if let Some(l) = revoked.iter().find(|l| l.lists_digest(&sha256)) {
            return Err(AuthenticodeError::Forbidden {
                sha256: crate::util::hex(&sha256),
                list: l.name.clone(),
            });
        }
    }
    if rule == Rule::Firmware {
        if let Some(why) = &parsed.table_end {
            return Err(AuthenticodeError::TableEnd {
                at: parsed.cert_table.start,
                size: parsed.cert_table.len(),
                source: why.clone(),
            });
        }
    }
    let considered: Vec<&pe::Signature> = match rule {
        Rule::Kernel => {
            if let Some(why) = &parsed.first_unusable {
                return Err(AuthenticodeError::FirstEntry(why.clone()));
            }
            parsed.signatures.iter().take(1).collect()
        }
        Rule::Firmware => parsed.signatures.iter().collect(),
    };
    // EDK2 checks every signature against dbx before any against db, and a revoked one
    // refuses the image.
    for sig in &considered {
        revoked_signature(image, sig, revoked)?;
    }
    let mut errors = Vec::new();
    for sig in considered {
        match verify_one(image, sig, store, revoked, rule, &mut digest) {
            Ok(c) => return Ok(c),
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Err(AuthenticodeError::Pe(PeError::Unsigned)),
        1 => Err(errors.remove(0)),
        _ => Err(AuthenticodeError::All(errors)),
    }
}

/// Refuses a signature that verifies up to a certificate a list revokes (EDK2's
/// `AuthenticodeVerify` with the revoked certificate as the trusted one, which a chain
/// reaches at any link), or whose signer's certificate has its `TBSCertificate` digest
/// listed (`Pkcs7GetSigners`: the signers' own certificates). A signature that does not
/// parse is left to [`verify_one`].
fn revoked_signature(
    image: &[u8],
    sig: &pe::Signature,
    revoked: &[Revocations],
) -> Result<(), AuthenticodeError> {
    if revoked
        .iter()
        .all(|l| l.certs.certs.is_empty() && l.tbs_sha256.is_empty())
    {
        return Ok(());
    }
    let index = sig.index;
    let der = image.get(sig.der.clone()).unwrap_or_default();
    let Ok((msg, content)) = parse_authenticode(der) else {
        return Ok(());
    };
    let embedded = embedded_certs(&msg);
    let revoked_cert = |c: &Cert, l: &Revocations| AuthenticodeError::RevokedCert {
        index,
        cert: c.label(),
        list: l.name.clone(),
    };
    for l in revoked {
        for s in &msg.signers {
            if let Ok(c) = crate::trust::pkcs7::find_signer(s, &embedded) {
                if l.lists_tbs(c) {
                    return Err(revoked_cert(c, l));
                }
            }
        }
        if l.certs.certs.is_empty() {
            continue;
        }
        let ignored = SigningTime::Ignored;
        if let Ok(c) = verify_message(&msg, &content, None, &l.certs, |_| true, |_| None, ignored) {
            return Err(revoked_cert(c, l));
        }
    }
    Ok(())
}

fn verify_one(
    image: &[u8],
    sig: &pe::Signature,
    store: &TrustStore,
    revoked: &[Revocations],
    rule: Rule,
    digest: &mut dyn FnMut(HashAlg) -> Vec<u8>,
) -> Result<Checked, AuthenticodeError> {
    let index = sig.index;
    let der = image.get(sig.der.clone()).unwrap_or_default();
    let (msg, content) =
        parse_authenticode(der).map_err(|source| AuthenticodeError::Pkcs7 { index, source })?;
    let (alg, signed) = pe::indirect_digest(&content)
        .map_err(|source| AuthenticodeError::Content { index, source })?;
    // The kernel's pkcs7_verify_one holds a signing time against the signer's embedded
    // certificate; EDK2 and shim ask no time.
    let signing_time = match rule {
        Rule::Kernel => SigningTime::Checked,
        Rule::Firmware => SigningTime::Ignored,
    };
    let anchor = verify_message(
        &msg,
        &content,
        None,
        store,
        |_| true,
        |_| None,
        signing_time,
    )
    .map_err(|source| match (&source, untrusted_signer(&msg)) {
        (MessageError::Untrusted { .. }, Some((signer, issuer, serial))) => {
            AuthenticodeError::UntrustedSigner {
                index,
                signer,
                issuer,
                serial,
            }
        }
        _ => AuthenticodeError::Untrusted { index, source },
    })?;
    // The kernel compares the image digest last (pefile_digest_pe after the PKCS#7).
    if digest(alg) != signed {
        return Err(AuthenticodeError::DigestMismatch { index, alg });
    }
    // EDK2's IsAllowedByDb: the db certificate reached must not be revoked by its digest.
    if let Some(l) = revoked.iter().find(|l| l.lists_tbs(anchor)) {
        return Err(AuthenticodeError::RevokedCert {
            index,
            cert: anchor.label(),
            list: l.name.clone(),
        });
    }
    Ok(Checked {
        index,
        anchor: anchor.label(),
        digest: alg,
    })
}

/// The first signer's own certificate among the embedded ones: its subject and issuer
/// common names and serial.
fn untrusted_signer(msg: &Message) -> Option<(String, String, String)> {
    let s = msg.signers.first()?;
    let embedded = embedded_certs(msg);
    let c = crate::trust::pkcs7::find_signer(s, &embedded).ok()?;
    Some((
        c.subject_cn.clone(),
        c.issuer_cn.clone(),
        crate::util::colon_hex(&c.serial),
    ))
}

/// The certificates a signature embeds that parse, as a store to find signers in.
fn embedded_certs(msg: &Message) -> TrustStore {
    let mut embedded = TrustStore::new();
    for c in &msg.certs {
        if let Ok(c) = Cert::from_der(&c.der, "the signature") {
            embedded.add(c);
        }
    }
    embedded
}

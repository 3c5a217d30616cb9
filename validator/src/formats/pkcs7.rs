//! Detached PKCS#7 / CMS SignedData, as the kernel's module signatures and the
//! Discoverable Partitions `root-verity-sig` use it: the parser. It checks the structure
//! the kernel's `pkcs7_parser.c` and ASN.1 decoder insist on (at most 65535 bytes,
//! SignedData v1 or v3 with SignerInfos of the same version, detached id-data, a
//! non-empty digestAlgorithms set whose members are otherwise ignored, signature
//! algorithm parameters absent or NULL, SignerInfo version matching its identifier,
//! signed attributes on every signer or none, and those attributes by the parser's rules,
//! `check_attrs`) and returns each signer's view and the embedded certificates' keys. The
//! signers come in the message's order and their signed attributes as they lie in it
//! (the decoder sorts every SET OF it reads, the kernel takes both as given). Limits:
//! DER only but for the order of a SET OF (the kernel also takes BER and trailing
//! bytes), and no two equal members of a SET OF (the decoder refuses them; so does the
//! kernel for the attributes it knows, not for the rest). Finding the signer in a trust
//! store and checking the signature is [`crate::trust::pkcs7`]'s job.

use der::{Decode, Encode};

use crate::util::colon_hex;

use super::oid::oid_is;
pub use super::oid::HashAlg;

/// A PKCS#7 problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Pkcs7Error {
    #[error("malformed PKCS#7: {0}")]
    Malformed(String),
    #[error("PKCS#7 content type {0} is not signedData")]
    NotSignedData(String),
    #[error("PKCS#7 has no signer")]
    NoSigner,
    #[error("unsupported digest algorithm {0}")]
    UnsupportedDigest(String),
    /// The kernel's ASN.1 decoder refuses more than 65535 bytes (EMSGSIZE).
    #[error("PKCS#7 message of {0} bytes is larger than the kernel's limit of 65535 (EMSGSIZE)")]
    TooLarge(usize),
}

/// The largest message the kernel's `asn1_ber_decoder` takes.
pub const DER_LEN_MAX: usize = 65535;

/// A parsed message: its signers and the key algorithm of each embedded certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub signers: Vec<SignerView>,
    pub certs: Vec<EmbeddedCert>,
}

/// What the kernel's X.509 parser looks at first in an embedded certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedCert {
    pub subject: String,
    /// Public-key algorithm OID.
    pub key_alg: String,
    /// Named curve OID of an EC key.
    pub curve: Option<String>,
    pub der: Vec<u8>,
}

/// What a signer info says about its signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignerView {
    /// Issuer common name (what `modinfo` prints as `signer`).
    pub issuer_cn: String,
    pub issuer_der: Vec<u8>,
    pub serial: Vec<u8>,
    pub skid: Option<Vec<u8>>,
    pub digest: HashAlg,
    /// OID of the signature algorithm; must fit the signer's key and digest.
    pub sig_alg: String,
    pub signature: Vec<u8>,
    /// The signed attributes as their signature covers them (as they lie in the message,
    /// under a SET tag), and their messageDigest, when present.
    pub signed_attrs: Option<(Vec<u8>, Vec<u8>)>,
    /// The signed attributes' signing time, in seconds since the epoch, when present.
    pub signing_time: Option<u64>,
}

impl Message {
    /// The first signer whose signature algorithm the kernel's parser refuses
    /// ([`KERNEL_SIG_ALGS`]: the whole message fails with ENOPKG).
    pub fn signer_with_refused_algorithm(&self) -> Option<&SignerView> {
        self.signers
            .iter()
            .find(|s| !KERNEL_SIG_ALGS.contains(&s.sig_alg.as_str()))
    }
}

impl SignerView {
    /// `sig_key` as modinfo prints it.
    pub fn key_id(&self) -> String {
        match &self.skid {
            Some(k) => colon_hex(k),
            None => colon_hex(&self.serial),
        }
    }

    /// The signer as a refusal names it: its issuer's common name, or `(by key id)`.
    pub fn name(&self) -> String {
        if self.issuer_cn.is_empty() {
            "(by key id)".into()
        } else {
            self.issuer_cn.clone()
        }
    }
}

fn malformed(e: impl std::fmt::Display) -> Pkcs7Error {
    Pkcs7Error::Malformed(e.to_string())
}

/// Parses a DER ContentInfo holding SignedData; returns its signers.
pub fn parse(der_bytes: &[u8]) -> Result<Vec<SignerView>, Pkcs7Error> {
    parse_message(der_bytes).map(|m| m.signers)
}

/// Parses a DER ContentInfo holding SignedData; returns its signers and embedded
/// certificates.
pub fn parse_message(der_bytes: &[u8]) -> Result<Message, Pkcs7Error> {
    parse_with(der_bytes, Content::Detached).map(|(m, _)| m)
}

/// The OID of Authenticode's `SpcIndirectDataContent` (the kernel's `OID_msIndirectData`).
pub const MS_INDIRECT_DATA: &str = "1.3.6.1.4.1.311.2.1.4";

/// The signature algorithms the kernel's `pkcs7_sig_note_pkey_algo` takes (6.1 and
/// 6.12): rsaEncryption and ecdsa-with-SHA1/224/256/384/512; any other (the
/// `sha*WithRSAEncryption`, RSASSA-PSS and id-ecPublicKey OIDs among them) fails the
/// whole message with ENOPKG.
pub const KERNEL_SIG_ALGS: [&str; 6] = [
    "1.2.840.113549.1.1.1",
    "1.2.840.10045.4.1",
    "1.2.840.10045.4.3.1",
    "1.2.840.10045.4.3.2",
    "1.2.840.10045.4.3.3",
    "1.2.840.10045.4.3.4",
];

/// The OID of id-data, the content type of a detached signature.
const ID_DATA: &str = "1.2.840.113549.1.7.1";

/// Parses an Authenticode signature (a PE image's attribute certificate): SignedData
/// whose encapsulated content is `SpcIndirectDataContent`, as the kernel's parser takes
/// it for `VERIFYING_KEXEC_PE_SIGNATURE`: the content must be there, every signer must
/// have signed attributes ("Authenticode requires AuthAttrs") whose content type, when
/// given, is the same. Returns the message and the content's value (the bytes inside its
/// outer SEQUENCE header, which the signers' message digest covers).
pub fn parse_authenticode(der_bytes: &[u8]) -> Result<(Message, Vec<u8>), Pkcs7Error> {
    let (m, content) = parse_with(der_bytes, Content::IndirectData)?;
    let content = content.ok_or_else(|| malformed("Authenticode signature without content"))?;
    Ok((m, content))
}

/// What the encapsulated content must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// Detached id-data (module signatures, `root-verity-sig`).
    Detached,
    /// Authenticode's `SpcIndirectDataContent`, present.
    IndirectData,
}

/// Parses `der_bytes` as SignedData whose encapsulated content is `want`: the message
/// and, for [`Content::IndirectData`], the content's value.
fn parse_with(der_bytes: &[u8], want: Content) -> Result<(Message, Option<Vec<u8>>), Pkcs7Error> {
    let (sd, v) = signed_data(der_bytes)?;
    let content = encapsulated_content(&sd, want)?;
    // The kernel's grammar gives the digestAlgorithms SET no action: its members, their
    // parameters and whether they list the signers' digests are ignored. Its decoder
    // refuses an empty one (EBADMSG).
    if sd.digest_algorithms.is_empty() {
        return Err(malformed("empty SignedData digestAlgorithms"));
    }
    let mut out = Vec::new();
    match sd.signer_infos.0.as_slice() {
        // A lone signer without signed attributes reads the same decoded or as it lies
        // (every module signature).
        [si] if si.signed_attrs.is_none() => out.push(signer_view(si, None, v, want)?),
        _ => {
            for raw in raw_signer_infos(der_bytes).map_err(malformed)? {
                let si = cms::signed_data::SignerInfo::from_der(raw).map_err(malformed)?;
                out.push(signer_view(&si, Some(raw), v, want)?);
            }
        }
    }
    check_signers(&out)?;
    let certs = embedded_certs(&sd)?;
    Ok((
        Message {
            signers: out,
            certs,
        },
        content,
    ))
}

/// Each SignerInfo of the ContentInfo `der_bytes` (already decoded whole) as it lies in
/// it, in its order. The decoder sorts a SET OF as it reads it; the kernel takes the
/// signers in the order given and hashes their signed attributes as they lie.
fn raw_signer_infos(der_bytes: &[u8]) -> der::Result<Vec<&[u8]>> {
    use der::{Header, Reader, SliceReader};
    let mut r = SliceReader::new(der_bytes)?;
    Header::decode(&mut r)?; // ContentInfo
    r.tlv_bytes()?; // contentType
    Header::decode(&mut r)?; // [0] EXPLICIT content
    Header::decode(&mut r)?; // SignedData
    r.tlv_bytes()?; // version
    r.tlv_bytes()?; // digestAlgorithms
    r.tlv_bytes()?; // encapContentInfo
    while r.peek_tag()?.is_context_specific() {
        r.tlv_bytes()?; // certificates [0], crls [1]
    }
    let set = Header::decode(&mut r)?; // signerInfos
    r.read_nested(set.length, |r| {
        let mut out = Vec::new();
        while !r.is_finished() {
            out.push(r.tlv_bytes()?);
        }
        Ok(out)
    })
}

/// The signed attributes of the SignerInfo `raw` as the signature covers them (RFC 5652
/// 5.4, the kernel's `pkcs7_digest`): its `[0] IMPLICIT` field as it lies, the tag made
/// the SET's.
fn raw_signed_attrs(raw: &[u8]) -> der::Result<Option<Vec<u8>>> {
    use der::{Header, Reader, SliceReader, Tag, TagNumber};
    let mut r = SliceReader::new(raw)?;
    Header::decode(&mut r)?; // SignerInfo
    r.tlv_bytes()?; // version
    r.tlv_bytes()?; // sid
    r.tlv_bytes()?; // digestAlgorithm
    let attrs = Tag::ContextSpecific {
        constructed: true,
        number: TagNumber::N0,
    };
    if r.is_finished() || r.peek_tag()? != attrs {
        return Ok(None);
    }
    let Some((_, after_tag)) = r.tlv_bytes()?.split_first() else {
        return Ok(None);
    };
    let mut set = vec![u8::from(Tag::Set)];
    set.extend_from_slice(after_tag);
    Ok(Some(set))
}

/// The SignedData of the DER ContentInfo `der_bytes`, and its version (1 or 3).
fn signed_data(der_bytes: &[u8]) -> Result<(cms::signed_data::SignedData, u8), Pkcs7Error> {
    if der_bytes.len() > DER_LEN_MAX {
        return Err(Pkcs7Error::TooLarge(der_bytes.len()));
    }
    let ci = cms::content_info::ContentInfo::from_der(der_bytes).map_err(malformed)?;
    if !oid_is(&ci.content_type, "1.2.840.113549.1.7.2") {
        return Err(Pkcs7Error::NotSignedData(ci.content_type.to_string()));
    }
    let sd: cms::signed_data::SignedData = ci.content.decode_as().map_err(malformed)?;
    // As the kernel's pkcs7_parser: SignedData v1 (PKCS#7) or v3 (CMS) only.
    let v = sd.version as u8;
    if v != 1 && v != 3 {
        return Err(malformed(format!("unsupported SignedData version {v}")));
    }
    Ok((sd, v))
}

/// Checks that `sd`'s encapsulated content is what `want` says; returns the content's
/// value for [`Content::IndirectData`].
fn encapsulated_content(
    sd: &cms::signed_data::SignedData,
    want: Content,
) -> Result<Option<Vec<u8>>, Pkcs7Error> {
    let ect = &sd.encap_content_info.econtent_type;
    match want {
        // Detached: the encapsulated content is id-data with no content.
        Content::Detached => {
            if !oid_is(ect, ID_DATA) || sd.encap_content_info.econtent.is_some() {
                return Err(malformed(format!(
                    "encapsulated content must be detached id-data, not {ect}"
                )));
            }
            Ok(None)
        }
        Content::IndirectData => {
            if !oid_is(ect, MS_INDIRECT_DATA) {
                return Err(malformed(format!(
                    "encapsulated content must be SpcIndirectDataContent ({MS_INDIRECT_DATA}), not {ect}"
                )));
            }
            let c = sd
                .encap_content_info
                .econtent
                .as_ref()
                .ok_or_else(|| malformed("SpcIndirectDataContent is absent"))?;
            Ok(Some(c.value().to_vec()))
        }
    }
}

/// Whether `a`'s parameters are absent or NULL, as they must be for every algorithm we
/// accept.
fn params_ok(a: &spki::AlgorithmIdentifierOwned) -> bool {
    a.parameters
        .as_ref()
        .is_none_or(|p| der::Tagged::tag(p) == der::Tag::Null && p.value().is_empty())
}

/// Checks one SignerInfo of a SignedData of version `v` and returns what it says; `raw`
/// is its encoding as it lies in the message (needed when it has signed attributes).
fn signer_view(
    si: &cms::signed_data::SignerInfo,
    raw: Option<&[u8]>,
    v: u8,
    want: Content,
) -> Result<SignerView, Pkcs7Error> {
    check_signer_version(si, v)?;
    // The signer's digest parameters are ignored, as by the kernel; a signature
    // algorithm with parameters (RSASSA-PSS) is refused.
    if !params_ok(&si.signature_algorithm) {
        return Err(malformed("signer algorithm with parameters"));
    }
    let digest = HashAlg::from_object_id(&si.digest_alg.oid)
        .ok_or_else(|| Pkcs7Error::UnsupportedDigest(si.digest_alg.oid.to_string()))?;
    let (issuer_der, issuer_cn, serial, skid) = match &si.sid {
        cms::signed_data::SignerIdentifier::IssuerAndSerialNumber(is) => (
            is.issuer.to_der().map_err(malformed)?,
            common_name(&is.issuer),
            is.serial_number.as_bytes().to_vec(),
            None,
        ),
        cms::signed_data::SignerIdentifier::SubjectKeyIdentifier(k) => (
            Vec::new(),
            String::new(),
            Vec::new(),
            Some(k.0.as_bytes().to_vec()),
        ),
    };
    let (signed_attrs, signing_time) = match signed_attributes(si, raw, want)? {
        Some((attrs, time)) => (Some(attrs), time),
        None => (None, None),
    };
    Ok(SignerView {
        sig_alg: oid_text(&si.signature_algorithm.oid),
        issuer_cn,
        issuer_der,
        serial,
        skid,
        digest,
        signature: si.signature.as_bytes().to_vec(),
        signed_attrs,
        signing_time,
    })
}

/// Checks a SignerInfo's version against its SignedData's (`v`) and its signer
/// identifier.
fn check_signer_version(si: &cms::signed_data::SignerInfo, v: u8) -> Result<(), Pkcs7Error> {
    // SignerInfo v1 names the signer by issuer and serial, v3 by key identifier.
    let sv = si.version as u8;
    // pkcs7_note_signerinfo_version: v1 only inside SignedData v1, v3 only inside v3.
    if (sv == 1 && v != 1) || (sv == 3 && v == 1) {
        return Err(malformed(format!(
            "SignedData-SignerInfo version mismatch (SignedData v{v}, SignerInfo v{sv})"
        )));
    }
    let by_serial = matches!(
        si.sid,
        cms::signed_data::SignerIdentifier::IssuerAndSerialNumber(_)
    );
    if !((sv == 1 && by_serial) || (sv == 3 && !by_serial)) {
        return Err(malformed(format!(
            "SignerInfo version {sv} does not match its signer identifier"
        )));
    }
    Ok(())
}

/// Signed attributes as [`SignerView::signed_attrs`] holds them: the SET as the
/// signature covers it, and their messageDigest.
type SignedAttrs = (Vec<u8>, Vec<u8>);

/// A SignerInfo's signed attributes (the SET as signed, from `raw`, its encoding) and
/// their messageDigest, with their signing time when there is one, when it has them;
/// Authenticode (`want`) requires them.
fn signed_attributes(
    si: &cms::signed_data::SignerInfo,
    raw: Option<&[u8]>,
    want: Content,
) -> Result<Option<(SignedAttrs, Option<u64>)>, Pkcs7Error> {
    let attrs = match &si.signed_attrs {
        None if want == Content::IndirectData => {
            return Err(malformed("Authenticode requires signed attributes"))
        }
        None => return Ok(None),
        Some(attrs) => attrs,
    };
    let signing_time = check_attrs(attrs, want)?;
    let md = attrs
        .iter()
        .find(|a| oid_is(&a.oid, MESSAGE_DIGEST))
        .and_then(|a| a.values.iter().next())
        .and_then(|v| v.decode_as::<der::asn1::OctetString>().ok())
        .ok_or_else(|| malformed("signed attributes without messageDigest"))?;
    let signed = raw
        .map(raw_signed_attrs)
        .transpose()
        .map_err(malformed)?
        .flatten()
        .ok_or_else(|| malformed("signed attributes not found in the SignerInfo's encoding"))?;
    Ok(Some(((signed, md.as_bytes().to_vec()), signing_time)))
}

/// The signed attributes the kernel's parser knows (`pkcs7_sig_note_authenticated_attr`):
/// each may appear once, with one value.
const CONTENT_TYPE: &str = "1.2.840.113549.1.9.3";
const MESSAGE_DIGEST: &str = "1.2.840.113549.1.9.4";
const SIGNING_TIME: &str = "1.2.840.113549.1.9.5";
const SMIME_CAPABILITIES: &str = "1.2.840.113549.1.9.15";
const MS_STATEMENT_TYPE: &str = "1.3.6.1.4.1.311.2.1.11";
const MS_SP_OPUS_INFO: &str = "1.3.6.1.4.1.311.2.1.12";
const KNOWN_ATTRS: [&str; 6] = [
    CONTENT_TYPE,
    MESSAGE_DIGEST,
    SIGNING_TIME,
    SMIME_CAPABILITIES,
    MS_STATEMENT_TYPE,
    MS_SP_OPUS_INFO,
];

/// The kernel's rules for one signer's signed attributes (`pkcs7_sig_note_authenticated_attr`
/// and `pkcs7_sig_note_set_of_authattrs`), for a message whose content is `want`: a known
/// attribute at most once and with one value ("Repeated/multivalue AuthAttrs not
/// permitted", EKEYREJECTED); the content type naming the message's (EBADMSG); the
/// signing time a time the kernel takes ([`super::x509time`]) and the message digest an
/// OCTET STRING
/// (EBADMSG); S/MIME capabilities and Microsoft's statement type and SpOpusInfo only in
/// Authenticode (EKEYREJECTED); content type and message digest both present ("Missing
/// required AuthAttr", EBADMSG). Others are ignored, as there. Returns the signing time
/// (seconds since the epoch), when there is one.
fn check_attrs(
    attrs: &cms::signed_data::SignedAttributes,
    want: Content,
) -> Result<Option<u64>, Pkcs7Error> {
    let authenticode = want == Content::IndirectData;
    let data_type = if authenticode {
        MS_INDIRECT_DATA
    } else {
        ID_DATA
    };
    let mut seen = Vec::new();
    let mut signing_time = None;
    for a in attrs.iter() {
        let oid = a.oid.to_string();
        let Some(&name) = KNOWN_ATTRS.iter().find(|k| **k == oid) else {
            continue;
        };
        let value = match a.values.as_slice() {
            [v] if !seen.contains(&name) => v,
            _ => {
                return Err(malformed(format!(
                    "signed attribute {oid} repeated or with more than one value (the kernel's \
                     \"Repeated/multivalue AuthAttrs not permitted\")"
                )))
            }
        };
        seen.push(name);
        match name {
            CONTENT_TYPE => {
                let ct = value.decode_as::<der::asn1::ObjectIdentifier>().ok();
                if ct.map(|o| o.to_string()).as_deref() != Some(data_type) {
                    return Err(malformed(format!(
                        "signed attribute content type is not the message's ({data_type})"
                    )));
                }
            }
            SIGNING_TIME => {
                let t = value
                    .to_der()
                    .and_then(|d| x509_cert::time::Time::from_der(&d))
                    .map_err(|e| malformed(format!("signed attribute signing time: {e}")))?;
                signing_time = Some(
                    super::x509time::kernel_time(&t)
                        .map_err(|e| malformed(format!("signed attribute signing time: {e}")))?,
                );
            }
            MESSAGE_DIGEST if der::Tagged::tag(value) != der::Tag::OctetString => {
                return Err(malformed(
                    "signed attribute message digest is not an OCTET STRING",
                ));
            }
            SMIME_CAPABILITIES if !authenticode => {
                return Err(malformed(
                    "signed attribute S/MIME capabilities outside Authenticode (the kernel's \
                     \"S/MIME Caps only allowed with Authenticode\")",
                ))
            }
            MS_STATEMENT_TYPE | MS_SP_OPUS_INFO if !authenticode => {
                return Err(malformed(format!(
                    "signed attribute {oid} is Authenticode's, outside Authenticode"
                )))
            }
            _ => {}
        }
    }
    if !(seen.contains(&CONTENT_TYPE) && seen.contains(&MESSAGE_DIGEST)) {
        return Err(malformed(
            "signed attributes without a content type or a message digest (the kernel's \
             \"Missing required AuthAttr\")",
        ));
    }
    Ok(signing_time)
}

/// Refuses a message without signers or with signed attributes on some signers only.
fn check_signers(out: &[SignerView]) -> Result<(), Pkcs7Error> {
    if out.is_empty() {
        return Err(Pkcs7Error::NoSigner);
    }
    // pkcs7_check_authattrs: either every signer has signed attributes or none has.
    let with = out.iter().filter(|s| s.signed_attrs.is_some()).count();
    if with != 0 && with != out.len() {
        return Err(malformed("Inconsistently supplied authAttrs"));
    }
    Ok(())
}

/// The X.509 certificates embedded in `sd` (any other kind is refused).
fn embedded_certs(sd: &cms::signed_data::SignedData) -> Result<Vec<EmbeddedCert>, Pkcs7Error> {
    let mut certs = Vec::new();
    for c in sd.certificates.iter().flat_map(|s| s.0.iter()) {
        let cms::cert::CertificateChoices::Certificate(c) = c else {
            return Err(malformed(
                "embedded certificate is not an X.509 certificate",
            ));
        };
        let validity = &c.tbs_certificate.validity;
        for (field, t) in [
            ("notBefore", &validity.not_before),
            ("notAfter", &validity.not_after),
        ] {
            super::x509time::kernel_time(t).map_err(|e| {
                malformed(format!(
                    "embedded certificate {}: {field} is {e}",
                    c.tbs_certificate.subject
                ))
            })?;
        }
        let spki = &c.tbs_certificate.subject_public_key_info;
        certs.push(EmbeddedCert {
            subject: c.tbs_certificate.subject.to_string(),
            key_alg: spki.algorithm.oid.to_string(),
            curve: spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<der::asn1::ObjectIdentifier>().ok())
                .map(|o| o.to_string()),
            der: c.to_der().map_err(malformed)?,
        });
    }
    Ok(certs)
}

/// `oid` dotted: the text of a signature algorithm the kernel takes without formatting
/// it, any other formatted.
fn oid_text(oid: &der::asn1::ObjectIdentifier) -> String {
    KERNEL_SIG_ALGS
        .iter()
        .find(|k| oid_is(oid, k))
        .map_or_else(|| oid.to_string(), |k| (*k).to_string())
}

/// The common name in an X.509 name, or the whole name when it has none.
pub fn common_name(name: &x509_cert::name::Name) -> String {
    for rdn in name.0.iter() {
        for atv in rdn.0.iter() {
            if oid_is(&atv.oid, "2.5.4.3") {
                if let Ok(s) = atv.value.decode_as::<der::asn1::Utf8StringRef<'_>>() {
                    return s.as_str().to_string();
                }
                if let Ok(s) = atv.value.decode_as::<der::asn1::PrintableStringRef<'_>>() {
                    return s.as_str().to_string();
                }
                if let Ok(s) = atv.value.decode_as::<der::asn1::Ia5StringRef<'_>>() {
                    return s.as_str().to_string();
                }
            }
        }
    }
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_algorithms_the_kernel_takes_read_as_their_oid() {
        let oid = |s: &str| der::asn1::ObjectIdentifier::new(s).unwrap();
        for k in KERNEL_SIG_ALGS {
            assert_eq!(oid_text(&oid(k)), k);
        }
        assert_eq!(
            oid_text(&oid("1.2.840.113549.1.1.11")),
            "1.2.840.113549.1.1.11"
        );
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(parse(b""), Err(Pkcs7Error::Malformed(_))));
        assert!(matches!(
            parse(&[0x30, 0x03, 0x06, 0x01, 0x00]),
            Err(Pkcs7Error::Malformed(_))
        ));
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = parse(&junk);
        }
    }

    /// The signers come in the message's order (the decoder would sort them), with their
    /// signed attributes, whichever order the two are given in.
    #[test]
    fn signers_come_in_the_messages_order() {
        let d = test_support::tmpdir("pkcs7-signer-order");
        let content = d.join("content");
        std::fs::write(&content, b"root hash").unwrap();
        let signed_by = |name| {
            let key = sigcases::keys::self_signed(&d, name, &["rsa:2048"], &[]);
            sigcases::der::Pkcs7::parse(&key.cms(&content, "sha256", &["-nosmimecap", "-nocerts"]))
        };
        let (mut a, mut b) = (signed_by("signer-a"), signed_by("signer-b"));
        let (sa, sb) = (a.signer(0).clone(), b.signer(0).clone());
        let (ca, cb) = ("sigcases signer-a", "sigcases signer-b");
        for order in [[(&sa, ca), (&sb, cb)], [(&sb, cb), (&sa, ca)]] {
            *a.signer_infos() = order.iter().map(|(n, _)| (*n).clone()).collect();
            let signers = parse(&a.encode()).unwrap();
            let names: Vec<&str> = signers.iter().map(|s| s.issuer_cn.as_str()).collect();
            assert_eq!(names, order.map(|(_, cn)| cn));
            for (s, (n, _)) in signers.iter().zip(order) {
                let raw = n.kids()[3].encode();
                assert_eq!(s.signed_attrs.as_ref().unwrap().0[1..], raw[1..]);
            }
        }
    }

    /// A root-hash signature made by `openssl cms` (or `smime`) without `-noattr` carries
    /// S/MIME capabilities by default, which the kernel's parser refuses outside
    /// Authenticode; without them it is taken. (The module cases S21b to S21d show the
    /// kernel's answers to this and the other attribute rules.)
    #[test]
    fn signed_attributes_follow_the_kernels_rules() {
        let d = test_support::tmpdir("pkcs7-attr-rules");
        let content = d.join("content");
        std::fs::write(&content, b"root hash").unwrap();
        let key = sigcases::keys::self_signed(&d, "attribute-rules", &["rsa:2048"], &[]);
        let e = parse(&key.cms(&content, "sha256", &["-nocerts"])).unwrap_err();
        assert!(e.to_string().contains("S/MIME Caps only allowed"), "{e}");
        let signers = parse(&key.cms(&content, "sha256", &["-nosmimecap", "-nocerts"])).unwrap();
        assert!(signers[0].signed_attrs.is_some());
    }
}

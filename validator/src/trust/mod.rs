//! Layer 3: the trust store: X.509 certificates (DER or PEM) whose keys may sign what we load -
//! kernel modules and root hashes - and the signature checks made with them.
//!
//! Keys: RSA (PKCS#1 v1.5) and ECDSA on P-256, P-384 and P-521; digests SHA-1, SHA-224,
//! SHA-256, SHA-384 and SHA-512. A signer is found by issuer and serial number or by
//! subject key identifier, as the kernel's PKCS#7 code does. The public-key operations
//! are AWS-LC's ([`keys`], which says why that library); certificates and PKCS#7 are
//! parsed by the RustCrypto crates.

use std::path::{Path, PathBuf};

use der::{Decode, Encode};
use sha2::Digest;
use x509_cert::Certificate;

pub use crate::formats::pkcs7::{common_name, HashAlg};
pub use crate::util::colon_hex;

pub mod authenticode;
pub mod credential;
pub mod keys;
pub mod message;
pub mod pkcs7;
pub mod quote;
pub mod revocation;
pub mod rootsig;

pub use keys::{Curve, EcKey, RsaKey};

/// The largest certificate file read (a PEM bundle of many certificates fits).
pub const CERT_FILE_MAX: u64 = 1 << 20;

/// A trust-store or signature problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    #[error("{source_name}: not a certificate: {why}")]
    BadCert { source_name: String, why: String },
    #[error("{0}: no certificate in this file")]
    Empty(String),
    #[error("{path}: {why}")]
    Read { path: PathBuf, why: String },
    #[error("{origin}: unsupported public key in {cert}: {what}")]
    UnsupportedKey {
        origin: String,
        cert: String,
        what: String,
    },
    #[error("signature does not verify with {cert} ({algo})")]
    BadSignature { cert: String, algo: String },
    #[error("malformed signature value: {0}")]
    MalformedSignature(String),
}

/// What is wrong inside one certificate or PEM file: its RSA key, its authority key
/// identifier, a PEM block. The caller adds the origin and certificate (a
/// [`TrustError`] carries this error's text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Pkcs1(der::Error),
    #[error("RSA modulus of {bits} bits is not supported")]
    RsaBits { bits: u32 },
    #[error("RSA public exponent must be odd, over 1 and at most 64 bits")]
    RsaExponent,
    #[error("EC public key is not a point on its curve")]
    EcPoint,
    #[error("{0}")]
    Backend(&'static str),
    #[error("RSA modulus is even")]
    RsaEven,
    #[error("authority key identifier: {0}")]
    Akid(der::Error),
    #[error("unterminated PEM certificate")]
    PemUnterminated,
    #[error("bad base64 in PEM certificate: {0}")]
    PemBase64(base64::DecodeError),
}

/// A public key we can verify with.
#[derive(Debug, Clone)]
pub enum PublicKey {
    Rsa(Box<RsaKey>),
    Ec(EcKey),
}

/// The name of a public-key algorithm or EC curve OID, for messages.
pub fn key_oid_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "1.2.840.10045.3.1.1" => "P-192 (secp192r1)",
        "1.3.132.0.33" => "P-224 (secp224r1)",
        "1.2.840.10045.3.1.7" => "P-256 (secp256r1)",
        "1.3.132.0.34" => "P-384 (secp384r1)",
        "1.3.132.0.35" => "P-521 (secp521r1)",
        "1.3.132.0.10" => "secp256k1",
        "1.3.36.3.3.2.8.1.1.7" => "brainpoolP256r1",
        "1.3.36.3.3.2.8.1.1.11" => "brainpoolP384r1",
        "1.3.36.3.3.2.8.1.1.13" => "brainpoolP512r1",
        "1.2.156.10197.1.301" => "SM2",
        "1.3.101.112" => "Ed25519",
        "1.3.101.113" => "Ed448",
        "1.2.840.113549.1.1.10" => "RSASSA-PSS",
        "1.2.840.10040.4.1" => "DSA",
        _ => return None,
    })
}

/// `name (oid)` or the OID alone.
fn named_oid(oid: &str) -> String {
    key_oid_name(oid).map_or_else(|| oid.to_string(), |n| format!("{n}, OID {oid}"))
}

impl PublicKey {
    /// `rsa-4096`, `ecdsa-p384`...
    pub fn describe(&self) -> String {
        match self {
            PublicKey::Rsa(k) => format!("rsa-{}", k.bits),
            PublicKey::Ec(k) => format!("ecdsa-{}", k.curve.short()),
        }
    }
}

/// One trusted certificate.
#[derive(Debug, Clone)]
pub struct Cert {
    pub der: Vec<u8>,
    /// Where it came from (file name, "vmlinuz").
    pub origin: String,
    pub subject: String,
    pub subject_cn: String,
    pub issuer_der: Vec<u8>,
    pub issuer_cn: String,
    /// Serial number, big-endian bytes as encoded.
    pub serial: Vec<u8>,
    pub skid: Option<Vec<u8>>,
    pub key: PublicKey,
    /// SHA-256 of the DER: the certificate fingerprint.
    pub sha256: [u8; 32],
    /// The subject name, DER (compared with the issuer to find self-signed certificates).
    pub subject_der: Vec<u8>,
    /// The authority key identifier: who issued this certificate, as the kernel's X.509
    /// parser reads it (`auth_ids`).
    pub akid: Akid,
    /// The signed part (`TBSCertificate`, its bytes as in the certificate), its signature
    /// algorithm OID and the signature: what an issuer's key verifies when this
    /// certificate is a chain link.
    pub tbs: Vec<u8>,
    pub sig_alg: String,
    pub signature: Vec<u8>,
    /// The validity period (`notBefore`, `notAfter`), in seconds since the epoch: what
    /// the kernel's `pkcs7_verify_one` holds a signing time against.
    pub valid_from: u64,
    pub valid_to: u64,
}

/// A certificate's authority key identifier extension, as the kernel keeps it: the key
/// identifier (`auth_ids[1]`), and the issuer name and serial (`auth_ids[0]`, only when
/// both are there and the name is a directory name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Akid {
    pub keyid: Option<Vec<u8>>,
    /// (issuer name DER, serial bytes as encoded).
    pub issuer_serial: Option<(Vec<u8>, Vec<u8>)>,
}

impl Akid {
    /// Neither part is there: the certificate names no issuer key.
    pub fn is_empty(&self) -> bool {
        self.keyid.is_none() && self.issuer_serial.is_none()
    }
}

/// The bytes of a certificate's `tbsCertificate` (RFC 5280 4.1) as they lie in `der`:
/// what the issuer signed, and what the kernel's X.509 parser hashes to check it, not a
/// re-encoding (`der` sorts a SET OF it reads, so a name whose multi-valued RDN is out of
/// DER order would re-encode to other bytes). Walked with `der`'s reader after
/// `Certificate::from_der` accepted the same bytes.
///
/// The names stay re-encoded: the PKCS#7 signer's issuer they are compared with is read
/// through the same decoder (`formats::pkcs7`), so both sides are normalised alike.
fn signed_part(der: &[u8]) -> der::Result<&[u8]> {
    use der::{Header, Reader, SliceReader};
    let mut cert = SliceReader::new(der)?;
    Header::decode(&mut cert)?;
    cert.tlv_bytes()
}

impl Cert {
    /// Parses one DER certificate.
    pub fn from_der(der: &[u8], origin: &str) -> Result<Cert, TrustError> {
        let bad = |why: String| TrustError::BadCert {
            source_name: origin.to_string(),
            why,
        };
        let c = Certificate::from_der(der).map_err(|e| bad(e.to_string()))?;
        let tbs_der = signed_part(der).map_err(|e| bad(e.to_string()))?;
        let tbs = &c.tbs_certificate;
        // x509_decode_time: the kernel's X.509 parser refuses a time it cannot take.
        let time = |field: &str, t| {
            crate::formats::x509time::kernel_time(t).map_err(|e| bad(format!("{field} is {e}")))
        };
        let valid_from = time("notBefore", &tbs.validity.not_before)?;
        let valid_to = time("notAfter", &tbs.validity.not_after)?;
        let spki = &tbs.subject_public_key_info;
        let subject = tbs.subject.to_string();
        let key = match spki.algorithm.oid.to_string().as_str() {
            "1.2.840.113549.1.1.1" => {
                let k =
                    RsaKey::from_pkcs1(spki.subject_public_key.raw_bytes()).map_err(|what| {
                        TrustError::UnsupportedKey {
                            origin: origin.to_string(),
                            cert: subject.clone(),
                            what: what.to_string(),
                        }
                    })?;
                PublicKey::Rsa(Box::new(k))
            }
            "1.2.840.10045.2.1" => {
                let curve = spki
                    .algorithm
                    .parameters
                    .as_ref()
                    .and_then(|p| p.decode_as::<der::asn1::ObjectIdentifier>().ok())
                    .map(|o| o.to_string())
                    .unwrap_or_default();
                let point = spki.subject_public_key.raw_bytes();
                let unsupported = |what: String| TrustError::UnsupportedKey {
                    origin: origin.to_string(),
                    cert: subject.clone(),
                    what,
                };
                let curve = match curve.as_str() {
                    "1.2.840.10045.3.1.7" => Curve::P256,
                    "1.3.132.0.34" => Curve::P384,
                    "1.3.132.0.35" => Curve::P521,
                    "" => return Err(unsupported("EC key without a named curve".into())),
                    other => return Err(unsupported(format!("EC curve {}", named_oid(other)))),
                };
                PublicKey::Ec(
                    EcKey::from_sec1(curve, point).map_err(|e| unsupported(e.to_string()))?,
                )
            }
            other => {
                return Err(TrustError::UnsupportedKey {
                    origin: origin.to_string(),
                    cert: subject,
                    what: format!("key algorithm {}", named_oid(other)),
                })
            }
        };
        let skid = tbs.extensions.as_ref().and_then(|exts| {
            exts.iter()
                .find(|e| e.extn_id.to_string() == "2.5.29.14")
                .and_then(|e| der::asn1::OctetString::from_der(e.extn_value.as_bytes()).ok())
                .map(|o| o.as_bytes().to_vec())
        });
        let akid = match tbs
            .extensions
            .as_ref()
            .and_then(|exts| exts.iter().find(|e| e.extn_id.to_string() == "2.5.29.35"))
        {
            Some(e) => akid_of(e.extn_value.as_bytes()).map_err(|e| bad(e.to_string()))?,
            None => Akid::default(),
        };
        Ok(Cert {
            der: der.to_vec(),
            origin: origin.to_string(),
            subject_cn: common_name(&tbs.subject),
            subject_der: tbs.subject.to_der().map_err(|e| bad(e.to_string()))?,
            subject,
            issuer_der: tbs.issuer.to_der().map_err(|e| bad(e.to_string()))?,
            issuer_cn: common_name(&tbs.issuer),
            serial: tbs.serial_number.as_bytes().to_vec(),
            skid,
            key,
            sha256: sha2::Sha256::digest(der).into(),
            akid,
            tbs: tbs_der.to_vec(),
            sig_alg: c.signature_algorithm.oid.to_string(),
            signature: c.signature.raw_bytes().to_vec(),
            valid_from,
            valid_to,
        })
    }

    /// A short name for reports: `CN (serial AA:BB..)`.
    pub fn label(&self) -> String {
        format!("{} (serial {})", self.subject_cn, colon_hex(&self.serial))
    }

    /// Verifies `sig` over a message whose `alg` digest is `digest`. `ecdsa` says the
    /// signature is ECDSA (DER `r,s`); otherwise RSA PKCS#1 v1.5.
    pub fn verify_digest(&self, alg: HashAlg, digest: &[u8], sig: &[u8]) -> Result<(), TrustError> {
        let bad = || TrustError::BadSignature {
            cert: self.label(),
            algo: format!("{} with {}", self.key.describe(), alg.name()),
        };
        match &self.key {
            PublicKey::Rsa(k) => {
                if k.verify(alg, digest, sig) {
                    Ok(())
                } else {
                    Err(bad())
                }
            }
            PublicKey::Ec(k) => match k.verify(digest, sig) {
                Ok(()) => Ok(()),
                Err(keys::EcdsaRefusal::Malformed) => Err(TrustError::MalformedSignature(
                    "not a DER ECDSA-Sig-Value".into(),
                )),
                Err(keys::EcdsaRefusal::Mismatch) => Err(bad()),
            },
        }
    }
}

/// Reads an authority key identifier extension's value (RFC 5280 4.2.1.1). The issuer
/// and serial count only together and only for a directory name, as in the kernel's
/// `x509_akid_note_serial`.
fn akid_of(value: &[u8]) -> Result<Akid, KeyError> {
    use x509_cert::ext::pkix::name::GeneralName;
    let a =
        x509_cert::ext::pkix::AuthorityKeyIdentifier::from_der(value).map_err(KeyError::Akid)?;
    let name = a.authority_cert_issuer.as_ref().and_then(|names| {
        names.iter().find_map(|n| match n {
            GeneralName::DirectoryName(d) => d.to_der().ok(),
            _ => None,
        })
    });
    Ok(Akid {
        keyid: a.key_identifier.as_ref().map(|k| k.as_bytes().to_vec()),
        issuer_serial: match (name, a.authority_cert_serial_number.as_ref()) {
            (Some(n), Some(s)) => Some((n, s.as_bytes().to_vec())),
            _ => None,
        },
    })
}

/// Splits PEM text into the DER of each `CERTIFICATE` block.
pub fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, KeyError> {
    use base64::Engine;
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let body = &rest[start + 27..];
        let end = body
            .find("-----END CERTIFICATE-----")
            .ok_or(KeyError::PemUnterminated)?;
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(KeyError::PemBase64)?;
        out.push(der);
        rest = &body[end + 25..];
    }
    Ok(out)
}

/// A set of trusted certificates.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    pub certs: Vec<Cert>,
}

impl TrustStore {
    pub fn new() -> TrustStore {
        TrustStore::default()
    }

    /// Adds a certificate unless the same one is already there.
    pub fn add(&mut self, c: Cert) {
        if !self.certs.iter().any(|x| x.sha256 == c.sha256) {
            self.certs.push(c);
        }
    }

    /// Adds every certificate of a DER or PEM file's bytes.
    pub fn add_bytes(&mut self, bytes: &[u8], origin: &str) -> Result<usize, TrustError> {
        let ders = if bytes.starts_with(b"-----") || bytes.windows(11).any(|w| w == b"-----BEGIN ")
        {
            let text = String::from_utf8_lossy(bytes);
            pem_certificates(&text).map_err(|why| TrustError::BadCert {
                source_name: origin.into(),
                why: why.to_string(),
            })?
        } else {
            vec![bytes.to_vec()]
        };
        if ders.is_empty() {
            return Err(TrustError::Empty(origin.into()));
        }
        for d in &ders {
            self.add(Cert::from_der(d, origin)?);
        }
        Ok(ders.len())
    }

    /// Adds the certificates of a file, or of every `*.der`, `*.pem`, `*.crt`, `*.x509`
    /// file of a directory. A file is read only if it is a regular file of at most
    /// [`CERT_FILE_MAX`] bytes. A directory, or an entry of it, that cannot be listed is
    /// an error naming the directory.
    pub fn add_path(&mut self, path: &Path) -> Result<usize, TrustError> {
        let rd = |e: std::io::Error| TrustError::Read {
            path: path.to_path_buf(),
            why: e.to_string(),
        };
        if path.is_dir() {
            // An entry the directory could not list is an error, not a certificate left
            // out of the store.
            let mut files = Vec::new();
            for e in std::fs::read_dir(path).map_err(rd)? {
                let p = e.map_err(rd)?.path();
                if matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("der" | "pem" | "crt" | "x509")
                ) {
                    files.push(p);
                }
            }
            files.sort();
            let mut n = 0;
            for f in files {
                n += self.add_path(&f)?;
            }
            Ok(n)
        } else {
            let bytes = crate::util::fs::read_limited(path, CERT_FILE_MAX).map_err(|e| {
                TrustError::Read {
                    path: path.to_path_buf(),
                    why: match e {
                        crate::util::fs::InputError::Io { source, .. } => source.to_string(),
                        crate::util::fs::InputError::NotAFile { kind, .. } => {
                            format!("is a {kind}, not a certificate file")
                        }
                        crate::util::fs::InputError::TooLarge { limit, .. } => {
                            format!("larger than the limit of {limit} bytes for a certificate file")
                        }
                    },
                }
            })?;
            self.add_bytes(&bytes, &path.display().to_string())
        }
    }

    /// The certificate with this issuer (DER) and serial.
    pub fn by_issuer_serial(&self, issuer_der: &[u8], serial: &[u8]) -> Option<&Cert> {
        fn strip(s: &[u8]) -> &[u8] {
            let mut v = s;
            while let [0, rest @ ..] = v {
                if rest.is_empty() {
                    break;
                }
                v = rest;
            }
            v
        }
        self.certs
            .iter()
            .find(|c| c.issuer_der == issuer_der && strip(&c.serial) == strip(serial))
    }

    /// The certificate with this subject key identifier.
    pub fn by_skid(&self, skid: &[u8]) -> Option<&Cert> {
        self.certs.iter().find(|c| c.skid.as_deref() == Some(skid))
    }

    /// The certificate with this SHA-256 fingerprint (hex, case-insensitive, `:` allowed).
    pub fn by_fingerprint(&self, hex: &str) -> Option<&Cert> {
        let want: String = hex
            .chars()
            .filter(|c| *c != ':')
            .collect::<String>()
            .to_ascii_lowercase();
        self.certs
            .iter()
            .find(|c| crate::util::hex(&c.sha256) == want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signed part is the certificate's own bytes, equal to what `x509-cert`
    /// re-encodes from its parse for these DER certificates: a v3 RSA and EC certificate
    /// (from the fuzzing regressions) and a v1 certificate (no version field) made by
    /// `openssl`.
    #[test]
    fn signed_part_is_the_certificates_own_bytes() {
        let d = test_support::tmpdir("trust-signed-parts");
        let (key, csr, v1) = (d.join("v1.key"), d.join("v1.csr"), d.join("v1.der"));
        let run = |args: &[&str]| {
            let o = std::process::Command::new("openssl")
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
        let (key, csr, out) = (path(&key), path(&csr), path(&v1));
        run(&[
            "req",
            "-new",
            "-nodes",
            "-newkey",
            "rsa:2048",
            "-subj",
            "/CN=v1 test/O=Org",
            "-keyout",
            &key,
            "-out",
            &csr,
        ]);
        run(&[
            "x509", "-req", "-in", &csr, "-signkey", &key, "-outform", "DER", "-out", &out,
        ]);
        let rsa = pem_certificates(include_str!("../../../fuzz/regressions/x509/rsa-2048.pem"))
            .unwrap()
            .remove(0);
        let ec = include_bytes!("../../../fuzz/regressions/x509/ec-p256.der").to_vec();
        let v1 = std::fs::read(&v1).unwrap();
        let version = Certificate::from_der(&v1).unwrap().tbs_certificate.version;
        assert_eq!(version, x509_cert::Version::V1);
        for der in [rsa, ec, v1] {
            let parsed = Certificate::from_der(&der).unwrap();
            let t = &parsed.tbs_certificate;
            let tbs = signed_part(&der).unwrap();
            assert_eq!(tbs, t.to_der().unwrap());
            assert_eq!(Cert::from_der(&der, "test").unwrap().tbs, tbs);
            // The bytes lie inside the certificate.
            assert!(der.windows(tbs.len()).any(|w| w == tbs));
        }
    }

    /// A certificate file over [`CERT_FILE_MAX`] (sparse) is refused before it is read,
    /// naming the file and the limit.
    #[test]
    fn certificate_file_over_the_limit_is_named() {
        let d = std::env::temp_dir().join(format!("vld-trust-limit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("big.pem");
        std::fs::File::create(&f)
            .unwrap()
            .set_len(CERT_FILE_MAX + 1)
            .unwrap();
        let e = TrustStore::new().add_path(&f).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: larger than the limit of {CERT_FILE_MAX} bytes for a certificate file",
                f.display()
            )
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn colon_hex_like_modinfo() {
        assert_eq!(colon_hex(&[0x5e, 0xe1, 0x03]), "5E:E1:03");
        assert_eq!(colon_hex(&[0x00, 0x9e, 0x01]), "9E:01");
        assert_eq!(colon_hex(&[0x00]), "00");
    }

    #[test]
    fn pem_parsing_errors() {
        assert!(pem_certificates("-----BEGIN CERTIFICATE-----\nAAAA").is_err());
        assert!(
            pem_certificates("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----")
                .is_err()
        );
        assert_eq!(pem_certificates("nothing").unwrap().len(), 0);
        let mut t = TrustStore::new();
        assert!(matches!(
            t.add_bytes(b"garbage", "g"),
            Err(TrustError::BadCert { .. })
        ));
        assert!(matches!(
            t.add_bytes(b"-----BEGIN X-----", "g"),
            Err(TrustError::Empty(_))
        ));
    }

    #[test]
    fn hash_names_and_oids() {
        assert_eq!(
            HashAlg::from_oid("2.16.840.1.101.3.4.2.1"),
            Some(HashAlg::Sha256)
        );
        assert_eq!(HashAlg::Sha384.digest(b"").len(), 48);
        assert_eq!(HashAlg::from_oid("1.2.3"), None);
    }
}

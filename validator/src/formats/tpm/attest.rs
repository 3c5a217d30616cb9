//! The TPM 2.0 structures of attestation (TPM 2.0 Part 2): public areas (`TPMT_PUBLIC`,
//! with the object's name), quotes (`TPMS_ATTEST` of type `TPM_ST_ATTEST_QUOTE`),
//! signatures (`TPMT_SIGNATURE`), PCR selections and the quote's PCR digest, and the key
//! templates the node creates its keys from.
//!
//! Contract: parsers are pure functions over bytes, read every byte (trailing bytes are
//! an error), and name the structure, field and byte offset of what is wrong; they keep
//! the bytes they parsed ([`Public::bytes`], [`Attest::bytes`]) because names and
//! signatures are over exactly those bytes. The files the CLI reads and writes are the
//! ones tpm2-tools uses: a public key is a `TPM2B_PUBLIC` (`tpm2_readpublic -o`), a quote
//! message the `TPMS_ATTEST` (`tpm2_quote -m`), a signature the `TPMT_SIGNATURE`
//! (`tpm2_quote -s`, format `tss`).
//!
//! Templates (`TPMT_PUBLIC` as given to `TPM2_CreatePrimary`): the attestation key (AK)
//! is a restricted signing key made under the endorsement hierarchy from a fixed
//! template, so the TPM derives the same key from its endorsement primary seed on every
//! boot and nothing is stored; ECC P-256 with ECDSA-SHA256 by default ([`ak_template`]),
//! RSA-2048 with RSASSA-SHA256 on request. The endorsement keys follow the TCG EK
//! Credential Profile 2.0 templates L-1 (RSA 2048) and L-2 (ECC P-256) ([`ek_template`]),
//! so they equal the key in the TPM vendor's EK certificate.
//!
//! Current limits: RSA and ECC public areas only (no keyed-hash or symmetric objects);
//! signatures RSASSA and ECDSA only (no RSAPSS, ECDAA, SM2, Schnorr); attestation
//! structures of type quote only. PCR banks outside [`HashAlg`] are refused.

use super::wire::{CommandBuf, Reader};
use super::{HashAlg, TpmError};

/// `TPM_GENERATED_VALUE`: the magic of every structure the TPM signs.
pub const TPM_GENERATED: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_QUOTE`.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;

/// `TPM_ALG_*` identifiers used here.
pub mod alg {
    pub const RSA: u16 = 0x0001;
    pub const AES: u16 = 0x0006;
    pub const NULL: u16 = 0x0010;
    pub const RSASSA: u16 = 0x0014;
    pub const RSAPSS: u16 = 0x0016;
    pub const ECDSA: u16 = 0x0018;
    pub const ECDAA: u16 = 0x001A;
    pub const ECC: u16 = 0x0023;
    pub const CFB: u16 = 0x0043;
}

/// `TPM_ECC_CURVE` identifiers.
pub mod curve {
    pub const NIST_P256: u16 = 0x0003;
    pub const NIST_P384: u16 = 0x0004;
    pub const NIST_P521: u16 = 0x0005;
}

/// `TPMA_OBJECT` bits.
pub mod attr {
    pub const FIXED_TPM: u32 = 1 << 1;
    pub const FIXED_PARENT: u32 = 1 << 4;
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    pub const NO_DA: u32 = 1 << 10;
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    pub const RESTRICTED: u32 = 1 << 16;
    pub const DECRYPT: u32 = 1 << 17;
    pub const SIGN: u32 = 1 << 18;
}

/// The attestation key's attributes: a TPM-bound restricted signing key (it signs only
/// what the TPM itself produced, such as quotes), exempt from dictionary-attack lockout
/// (`noDA`: its authorisation is empty, so a guess at it means nothing, and a TPM in
/// lockout after someone else's failed guesses still quotes the boot).
pub const AK_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::USER_WITH_AUTH
    | attr::NO_DA
    | attr::RESTRICTED
    | attr::SIGN;

/// The EK templates' attributes (TCG EK Credential Profile 2.0, templates L-1 and L-2).
pub const EK_ATTRIBUTES: u32 = attr::FIXED_TPM
    | attr::FIXED_PARENT
    | attr::SENSITIVE_DATA_ORIGIN
    | attr::ADMIN_WITH_POLICY
    | attr::RESTRICTED
    | attr::DECRYPT;

/// The EK templates' authPolicy: `TPM2_PolicySecret(TPM_RH_ENDORSEMENT)`.
pub const EK_POLICY: [u8; 32] = [
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xB3, 0xF8, 0x1A, 0x90, 0xCC, 0x8D, 0x46, 0xA5, 0xD7, 0x24,
    0xFD, 0x52, 0xD7, 0x6E, 0x06, 0x52, 0x0B, 0x64, 0xF2, 0xA1, 0xDA, 0x1B, 0x33, 0x14, 0x69, 0xAA,
];

/// NV index of the RSA 2048 EK certificate (TCG EK Credential Profile).
pub const EK_CERT_NV_RSA: u32 = 0x01C0_0002;
/// NV index of the ECC P-256 EK certificate.
pub const EK_CERT_NV_ECC: u32 = 0x01C0_000A;

/// The kind of asymmetric key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// ECC P-256 (the default AK: key generation is fast on every TPM).
    EccP256,
    /// RSA 2048 (key generation takes seconds on discrete TPMs).
    Rsa2048,
}

impl KeyKind {
    /// `ecc` or `rsa`, as tpm2-tools spells them.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::EccP256 => "ecc",
            KeyKind::Rsa2048 => "rsa",
        }
    }

    /// From [`KeyKind::name`].
    pub fn from_name(s: &str) -> Option<KeyKind> {
        [KeyKind::EccP256, KeyKind::Rsa2048]
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
    }
}

/// The AK template (`TPMT_PUBLIC`), signing with SHA-256.
pub fn ak_template(kind: KeyKind) -> Vec<u8> {
    let mut c = CommandBuf::structure();
    match kind {
        KeyKind::EccP256 => {
            c.u16(alg::ECC)
                .u16(HashAlg::Sha256.alg_id())
                .u32(AK_ATTRIBUTES)
                .tpm2b(&[])
                .u16(alg::NULL)
                .u16(alg::ECDSA)
                .u16(HashAlg::Sha256.alg_id())
                .u16(curve::NIST_P256)
                .u16(alg::NULL)
                .tpm2b(&[])
                .tpm2b(&[]);
        }
        KeyKind::Rsa2048 => {
            c.u16(alg::RSA)
                .u16(HashAlg::Sha256.alg_id())
                .u32(AK_ATTRIBUTES)
                .tpm2b(&[])
                .u16(alg::NULL)
                .u16(alg::RSASSA)
                .u16(HashAlg::Sha256.alg_id())
                .u16(2048)
                .u32(0)
                .tpm2b(&[]);
        }
    }
    c.into_bytes()
}

/// The EK template (`TPMT_PUBLIC`): TCG EK Credential Profile L-1 (RSA 2048) or L-2
/// (ECC P-256).
pub fn ek_template(kind: KeyKind) -> Vec<u8> {
    let mut c = CommandBuf::structure();
    match kind {
        KeyKind::EccP256 => {
            c.u16(alg::ECC)
                .u16(HashAlg::Sha256.alg_id())
                .u32(EK_ATTRIBUTES)
                .tpm2b(&EK_POLICY)
                .u16(alg::AES)
                .u16(128)
                .u16(alg::CFB)
                .u16(alg::NULL)
                .u16(curve::NIST_P256)
                .u16(alg::NULL)
                .tpm2b(&[0; 32])
                .tpm2b(&[0; 32]);
        }
        KeyKind::Rsa2048 => {
            c.u16(alg::RSA)
                .u16(HashAlg::Sha256.alg_id())
                .u32(EK_ATTRIBUTES)
                .tpm2b(&EK_POLICY)
                .u16(alg::AES)
                .u16(128)
                .u16(alg::CFB)
                .u16(alg::NULL)
                .u16(2048)
                .u32(0)
                .tpm2b(&[0; 256]);
        }
    }
    c.into_bytes()
}

/// The public key of a TPM object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// RSA: modulus (big-endian) and the public exponent (0 in the area means 65537).
    Rsa { modulus: Vec<u8>, exponent: u32 },
    /// ECC: the curve (`TPM_ECC_CURVE`) and the point's coordinates (big-endian).
    Ecc { curve: u16, x: Vec<u8>, y: Vec<u8> },
}

/// A signing or decryption scheme: the scheme's algorithm and its hash (`TPM_ALG_NULL`
/// for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    pub scheme: u16,
    pub hash: u16,
}

/// A parsed `TPMT_PUBLIC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Public {
    /// The marshalled `TPMT_PUBLIC` (what the name is a digest of).
    pub bytes: Vec<u8>,
    pub name_alg: HashAlg,
    pub attributes: u32,
    pub auth_policy: Vec<u8>,
    /// The symmetric algorithm of a storage or EK parent (`TPM_ALG_NULL` otherwise),
    /// its key bits and mode.
    pub symmetric: (u16, u16, u16),
    pub scheme: Scheme,
    /// RSA key bits (0 for ECC).
    pub rsa_bits: u16,
    /// The ECC KDF scheme (`TPM_ALG_NULL` for RSA).
    pub kdf: Scheme,
    pub key: PublicKey,
}

const PUBLIC: &str = "TPMT_PUBLIC";

impl Public {
    /// Parses a `TPMT_PUBLIC` (every byte).
    pub fn parse(bytes: &[u8]) -> Result<Public, TpmError> {
        let mut r = Reader::structure(PUBLIC, bytes);
        let p = Public::read(&mut r)?;
        r.finish()?;
        Ok(p)
    }

    /// Parses a `TPM2B_PUBLIC` (`tpm2_readpublic -o`, `tpm2_createak -u`): the size, then
    /// the `TPMT_PUBLIC`.
    pub fn parse_2b(bytes: &[u8]) -> Result<Public, TpmError> {
        let mut r = Reader::structure("TPM2B_PUBLIC", bytes);
        let inner = r.tpm2b("TPM2B_PUBLIC.size")?;
        r.finish()?;
        Public::parse(inner)
    }

    /// Reads a `TPMT_PUBLIC` from `r` (inside a response or structure).
    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Public, TpmError> {
        let start = r.consumed().len();
        let all = r.rest();
        let ty = r.u16("type")?;
        let at = r.offset();
        let name_id = r.u16("nameAlg")?;
        let name_alg = HashAlg::from_alg_id(name_id).ok_or_else(|| {
            r.error(format!(
                "nameAlg {name_id:#06x} at byte {at} is not supported"
            ))
        })?;
        let attributes = r.u32("objectAttributes")?;
        let auth_policy = r.tpm2b("authPolicy")?.to_vec();
        let sym_alg = r.u16("symmetric.algorithm")?;
        let symmetric = if sym_alg == alg::NULL {
            (sym_alg, 0, 0)
        } else {
            (
                sym_alg,
                r.u16("symmetric.keyBits")?,
                r.u16("symmetric.mode")?,
            )
        };
        let (scheme, rsa_bits, kdf, key);
        match ty {
            alg::RSA => {
                scheme = read_scheme(r, "scheme")?;
                rsa_bits = r.u16("keyBits")?;
                let exponent = r.u32("exponent")?;
                let modulus = r.tpm2b("unique.rsa")?.to_vec();
                kdf = Scheme {
                    scheme: alg::NULL,
                    hash: alg::NULL,
                };
                key = PublicKey::Rsa { modulus, exponent };
            }
            alg::ECC => {
                scheme = read_scheme(r, "scheme")?;
                rsa_bits = 0;
                let curve = r.u16("curveID")?;
                kdf = read_scheme(r, "kdf")?;
                let x = r.tpm2b("unique.ecc.x")?.to_vec();
                let y = r.tpm2b("unique.ecc.y")?.to_vec();
                key = PublicKey::Ecc { curve, x, y };
            }
            other => {
                return Err(r.error(format!(
                    "type {other:#06x} is not an RSA or ECC key (only those are supported)"
                )))
            }
        }
        let len = r.consumed().len() - start;
        let bytes = all.get(..len).unwrap_or_default().to_vec();
        Ok(Public {
            bytes,
            name_alg,
            attributes,
            auth_policy,
            symmetric,
            scheme,
            rsa_bits,
            kdf,
            key,
        })
    }

    /// The object's name: `nameAlg || H_nameAlg(TPMT_PUBLIC)`.
    pub fn name(&self) -> Vec<u8> {
        let mut n = self.name_alg.alg_id().to_be_bytes().to_vec();
        n.extend_from_slice(&self.name_alg.digest(&self.bytes));
        n
    }

    /// The `TPM2B_PUBLIC` of this area, as tpm2-tools writes it.
    pub fn to_2b(&self) -> Vec<u8> {
        let mut c = CommandBuf::structure();
        c.tpm2b(&self.bytes);
        c.into_bytes()
    }

    /// The key's kind, when it is one of the two we create.
    pub fn kind(&self) -> Option<KeyKind> {
        match &self.key {
            PublicKey::Ecc { curve, .. } if *curve == curve::NIST_P256 => Some(KeyKind::EccP256),
            PublicKey::Rsa { .. } if self.rsa_bits == 2048 => Some(KeyKind::Rsa2048),
            _ => None,
        }
    }

    /// Whether this is a restricted signing key that never leaves its TPM: the only kind
    /// whose quotes prove anything.
    pub fn is_attestation_key(&self) -> bool {
        let want = attr::FIXED_TPM | attr::FIXED_PARENT | attr::RESTRICTED | attr::SIGN;
        self.attributes & want == want && self.attributes & attr::DECRYPT == 0
    }
}

/// A `TPMT_RSA_SCHEME`, `TPMT_ECC_SCHEME` or `TPMT_KDF_SCHEME`: the algorithm, then (when
/// not NULL) its hash, and for ECDAA a count.
fn read_scheme(r: &mut Reader<'_>, what: &'static str) -> Result<Scheme, TpmError> {
    let scheme = r.u16(what)?;
    if scheme == alg::NULL {
        return Ok(Scheme {
            scheme,
            hash: alg::NULL,
        });
    }
    let hash = r.u16(what)?;
    if scheme == alg::ECDAA {
        r.u16(what)?;
    }
    Ok(Scheme { scheme, hash })
}

/// `TPMS_CLOCK_INFO`: the TPM's clock (ms, not reset by a reboot), how often it was reset
/// (`TPM2_Startup(CLEAR)`, every boot) and restarted, and whether the clock is safe.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct ClockInfo {
    pub clock: u64,
    pub reset_count: u32,
    pub restart_count: u32,
    pub safe: bool,
}

/// The PCRs a quote covers: banks in order, PCRs ascending in each.
pub type PcrSelection = Vec<(HashAlg, Vec<u32>)>;

/// A parsed `TPMS_ATTEST` of type quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attest {
    /// The marshalled `TPMS_ATTEST` (what the signature is over).
    pub bytes: Vec<u8>,
    /// The signing key's qualified name.
    pub qualified_signer: Vec<u8>,
    /// The qualifying data the caller gave (a nonce, or a digest of what it binds).
    pub extra_data: Vec<u8>,
    pub clock: ClockInfo,
    pub firmware_version: u64,
    pub pcr_select: PcrSelection,
    pub pcr_digest: Vec<u8>,
}

const ATTEST: &str = "TPMS_ATTEST";

impl Attest {
    /// Parses a `TPMS_ATTEST` (every byte); the magic must be `TPM_GENERATED_VALUE` and
    /// the type a quote.
    pub fn parse(bytes: &[u8]) -> Result<Attest, TpmError> {
        let mut r = Reader::structure(ATTEST, bytes);
        let magic = r.u32("magic")?;
        if magic != TPM_GENERATED {
            return Err(r.error(format!(
                "magic {magic:#010x} is not TPM_GENERATED_VALUE ({TPM_GENERATED:#010x}): not made by a TPM"
            )));
        }
        let ty = r.u16("type")?;
        if ty != ST_ATTEST_QUOTE {
            return Err(r.error(format!(
                "type {ty:#06x} is not TPM_ST_ATTEST_QUOTE ({ST_ATTEST_QUOTE:#06x})"
            )));
        }
        let qualified_signer = r.tpm2b("qualifiedSigner")?.to_vec();
        let extra_data = r.tpm2b("extraData")?.to_vec();
        let clock = ClockInfo {
            clock: r.u64("clockInfo.clock")?,
            reset_count: r.u32("clockInfo.resetCount")?,
            restart_count: r.u32("clockInfo.restartCount")?,
            safe: match r.u8("clockInfo.safe")? {
                0 => false,
                1 => true,
                v => return Err(r.error(format!("clockInfo.safe {v} is not a TPMI_YES_NO"))),
            },
        };
        let firmware_version = r.u64("firmwareVersion")?;
        let pcr_select = read_selection(&mut r)?;
        let pcr_digest = r.tpm2b("pcrDigest")?.to_vec();
        r.finish()?;
        Ok(Attest {
            bytes: bytes.to_vec(),
            qualified_signer,
            extra_data,
            clock,
            firmware_version,
            pcr_select,
            pcr_digest,
        })
    }
}

/// Reads a `TPML_PCR_SELECTION` (at most 16 banks, each bank once).
pub(crate) fn read_selection(r: &mut Reader<'_>) -> Result<PcrSelection, TpmError> {
    let at = r.offset();
    let count = r.u32("TPML_PCR_SELECTION.count")?;
    if count > 16 {
        return Err(r.error(format!(
            "TPML_PCR_SELECTION.count {count} at byte {at} exceeds 16"
        )));
    }
    let mut sel = PcrSelection::new();
    for _ in 0..count {
        let at = r.offset();
        let id = r.u16("TPMS_PCR_SELECTION.hash")?;
        let n = r.u8("TPMS_PCR_SELECTION.sizeofSelect")?;
        let bits = r.bytes(usize::from(n), "TPMS_PCR_SELECTION.pcrSelect")?;
        let bank = HashAlg::from_alg_id(id)
            .ok_or_else(|| r.error(format!("PCR bank {id:#06x} at byte {at} is not supported")))?;
        if sel.iter().any(|(b, _)| *b == bank) {
            return Err(r.error(format!("PCR bank {bank} at byte {at} selected twice")));
        }
        let mut pcrs = Vec::new();
        for (byte, b) in (0u32..).zip(bits) {
            for bit in 0..8 {
                if b & (1 << bit) != 0 {
                    pcrs.push(byte * 8 + bit);
                }
            }
        }
        sel.push((bank, pcrs));
    }
    Ok(sel)
}

/// Writes a `TPML_PCR_SELECTION` (at least 3 select bytes, as PC Client TPMs want).
pub(crate) fn write_selection(c: &mut CommandBuf, sel: &[(HashAlg, Vec<u32>)]) {
    // A handful of banks: the count never saturates.
    c.u32(u32::try_from(sel.len()).unwrap_or(u32::MAX));
    for (bank, pcrs) in sel {
        let max = pcrs.iter().copied().max().unwrap_or(0);
        let size = (max / 8 + 1).max(3) as usize;
        let mut bits = vec![0u8; size];
        for p in pcrs {
            if let Some(b) = bits.get_mut((p / 8) as usize) {
                *b |= 1 << (p % 8);
            }
        }
        c.u16(bank.alg_id())
            .u8(u8::try_from(size).unwrap_or(u8::MAX))
            .bytes(&bits);
    }
}

/// The magic of tpm2-tools' credential file (`tpm2_makecredential -o`).
pub const CREDENTIAL_MAGIC: u32 = 0xBADC_C0DE;

/// A credential as `tpm2_makecredential -o` writes it and `tpm2_activatecredential -i`
/// reads it: magic, version 1, the `TPM2B_ID_OBJECT`, the `TPM2B_ENCRYPTED_SECRET`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialFile {
    /// The `TPM2B_ID_OBJECT`'s contents (integrity HMAC and encrypted identity).
    pub id_object: Vec<u8>,
    /// The `TPM2B_ENCRYPTED_SECRET`'s contents (the seed, encrypted to the EK).
    pub encrypted_secret: Vec<u8>,
}

impl CredentialFile {
    /// Parses the file (every byte).
    pub fn parse(bytes: &[u8]) -> Result<CredentialFile, TpmError> {
        let mut r = Reader::structure("credential file", bytes);
        let magic = r.u32("magic")?;
        if magic != CREDENTIAL_MAGIC {
            return Err(r.error(format!(
                "magic {magic:#010x} is not {CREDENTIAL_MAGIC:#010x}: not a tpm2-tools credential file"
            )));
        }
        let version = r.u32("version")?;
        if version != 1 {
            return Err(r.error(format!("version {version}, only 1 is known")));
        }
        let id_object = r.tpm2b("TPM2B_ID_OBJECT")?.to_vec();
        let encrypted_secret = r.tpm2b("TPM2B_ENCRYPTED_SECRET")?.to_vec();
        r.finish()?;
        Ok(CredentialFile {
            id_object,
            encrypted_secret,
        })
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut c = CommandBuf::structure();
        c.u32(CREDENTIAL_MAGIC)
            .u32(1)
            .tpm2b(&self.id_object)
            .tpm2b(&self.encrypted_secret);
        c.into_bytes()
    }
}

/// A parsed `TPMT_SIGNATURE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signature {
    /// ECDSA: the digest's algorithm and the signature's `r` and `s` (big-endian).
    Ecdsa {
        hash: HashAlg,
        r: Vec<u8>,
        s: Vec<u8>,
    },
    /// RSASSA-PKCS1-v1_5: the digest's algorithm and the signature.
    RsaSsa { hash: HashAlg, sig: Vec<u8> },
}

const SIGNATURE: &str = "TPMT_SIGNATURE";

impl Signature {
    /// Parses a `TPMT_SIGNATURE` (every byte).
    pub fn parse(bytes: &[u8]) -> Result<Signature, TpmError> {
        let mut r = Reader::structure(SIGNATURE, bytes);
        let s = Signature::read(&mut r)?;
        r.finish()?;
        Ok(s)
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Signature, TpmError> {
        let sig_alg = r.u16("sigAlg")?;
        let hash = |r: &mut Reader<'_>| {
            let at = r.offset();
            let id = r.u16("hash")?;
            HashAlg::from_alg_id(id)
                .ok_or_else(|| r.error(format!("hash {id:#06x} at byte {at} is not supported")))
        };
        match sig_alg {
            alg::ECDSA => {
                let hash = hash(r)?;
                let rr = r.tpm2b("signatureR")?.to_vec();
                let s = r.tpm2b("signatureS")?.to_vec();
                Ok(Signature::Ecdsa { hash, r: rr, s })
            }
            alg::RSASSA => {
                let hash = hash(r)?;
                let sig = r.tpm2b("sig")?.to_vec();
                Ok(Signature::RsaSsa { hash, sig })
            }
            other => Err(r.error(format!(
                "signature algorithm {other:#06x} is not RSASSA or ECDSA (only those are supported)"
            ))),
        }
    }

    /// The digest algorithm.
    pub fn hash(&self) -> HashAlg {
        match self {
            Signature::Ecdsa { hash, .. } | Signature::RsaSsa { hash, .. } => *hash,
        }
    }

    /// The marshalled `TPMT_SIGNATURE` (`tpm2_quote -s`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut c = CommandBuf::structure();
        match self {
            Signature::Ecdsa { hash, r, s } => {
                c.u16(alg::ECDSA).u16(hash.alg_id()).tpm2b(r).tpm2b(s);
            }
            Signature::RsaSsa { hash, sig } => {
                c.u16(alg::RSASSA).u16(hash.alg_id()).tpm2b(sig);
            }
        }
        c.into_bytes()
    }
}

mod selection;
pub use selection::{
    format_selection, parse_selection, pcr_digest, selected_values, MissingPcr, SelectionError,
};

#[cfg(test)]
mod tests;

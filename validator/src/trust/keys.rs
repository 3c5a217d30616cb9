//! Public keys and their signature checks, done by AWS-LC: RSASSA-PKCS1-v1_5 ([`RsaKey`],
//! `RSA_verify`) and ECDSA on P-256, P-384 and P-521 ([`EcKey`], `ECDSA_do_verify`).
//!
//! Why AWS-LC, through `aws-lc-sys`: it is a reviewed library (Amazon's maintained fork of
//! BoringSSL, FIPS-validated) with assembly for the public-key operations, and the fastest
//! measured for what dominates checking a kernel's modules, RSA-4096 verification
//! (`docs/PERFORMANCE.md`, this project's 2-core machine: AWS-LC 47.8 us, OpenSSL 52.0 us,
//! the former `crypto-bigint` code about 88 us; `ring` was no faster than that code when
//! the choice was made). The raw functions, not `aws-lc-rs`'s safe
//! API, because that API offers PKCS#1 v1.5 only for some digest and key-size pairs
//! (no SHA-224, no SHA-384 under 2048 bits, no ECDSA with SHA-224) while the kernel takes
//! every pair, and our verdict must be the kernel's. No arithmetic, padding or encoding
//! check is written here: `RSA_verify` rebuilds and compares the whole encoded message
//! (RFC 8017 8.2.2), `ECDSA_SIG_from_bytes` takes strict DER only, `ECDSA_do_verify`
//! truncates the digest to the curve's order as the kernel does.
//!
//! Contract: a key is parsed once (from the certificate) and verifies many signatures,
//! from many threads at once (AWS-LC's keys are safe for concurrent use by its verify
//! functions: the lazily built Montgomery context is behind the key's own lock). Every
//! `unsafe` block is a call into AWS-LC on pointers this module owns.
//!
//! Current limits: RSA moduli of 1024 to 16384 bits and public exponents of at most 64
//! bits (odd, over 1) are accepted; EC keys on P-256, P-384 and P-521 only.

use std::ptr::NonNull;

use aws_lc_sys as lc;
use der::Decode;

use super::{HashAlg, KeyError};

/// The AWS-LC NID of a digest.
fn nid(alg: HashAlg) -> std::os::raw::c_int {
    match alg {
        HashAlg::Sha1 => lc::NID_sha1,
        HashAlg::Sha224 => lc::NID_sha224,
        HashAlg::Sha256 => lc::NID_sha256,
        HashAlg::Sha384 => lc::NID_sha384,
        HashAlg::Sha512 => lc::NID_sha512,
    }
}

/// Drops what AWS-LC queued on this thread's error stack for a failed call (a failed
/// verification is an answer, not an error to report later).
fn clear_errors() {
    // SAFETY: no arguments; clears the calling thread's own error queue.
    unsafe { lc::ERR_clear_error() };
}

/// SHA-256 of `data` by AWS-LC (SHA-NI where the CPU has it).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    // SAFETY: `data` is valid for its length and `out` has the 32 bytes SHA256 writes.
    unsafe { lc::SHA256(data.as_ptr(), data.len(), out.as_mut_ptr()) };
    out
}

/// A big-endian unsigned integer as an AWS-LC `BIGNUM`, freed on drop.
struct Bn(NonNull<lc::BIGNUM>);

impl Bn {
    fn from_be(bytes: &[u8]) -> Option<Bn> {
        // SAFETY: `bytes` is a valid slice for its length; a null `ret` asks for a new
        // BIGNUM, which we own (freed in `drop`).
        NonNull::new(unsafe { lc::BN_bin2bn(bytes.as_ptr(), bytes.len(), std::ptr::null_mut()) })
            .map(Bn)
    }
}

impl Drop for Bn {
    fn drop(&mut self) {
        // SAFETY: we own this BIGNUM (from `BN_bin2bn`) and free it once.
        unsafe { lc::BN_free(self.0.as_ptr()) };
    }
}

/// An RSA public key.
pub struct RsaKey {
    /// Modulus length in bytes (`k` in RFC 8017): the length of every signature.
    pub k: usize,
    pub bits: u32,
    rsa: NonNull<lc::RSA>,
}

// SAFETY: an AWS-LC `RSA` holding a public key may be used from several threads at once
// by `RSA_verify` (its lazily made Montgomery context is guarded by the key's own lock),
// and it is freed once, by the last owner (reference counted, see `Clone`).
unsafe impl Send for RsaKey {}
// SAFETY: as for `Send`: shared use is only `RSA_verify`, which AWS-LC makes safe.
unsafe impl Sync for RsaKey {}

impl Clone for RsaKey {
    fn clone(&self) -> RsaKey {
        // SAFETY: `self.rsa` is a live key we hold a reference to; one more reference is
        // taken for the clone, dropped by its `drop`.
        unsafe { lc::RSA_up_ref(self.rsa.as_ptr()) };
        RsaKey {
            k: self.k,
            bits: self.bits,
            rsa: self.rsa,
        }
    }
}

impl Drop for RsaKey {
    fn drop(&mut self) {
        // SAFETY: releases the one reference this value holds.
        unsafe { lc::RSA_free(self.rsa.as_ptr()) };
    }
}

impl std::fmt::Debug for RsaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RsaKey({} bits)", self.bits)
    }
}

impl RsaKey {
    /// From a PKCS#1 `RSAPublicKey` (the SPKI's bit string).
    pub fn from_pkcs1(der_bytes: &[u8]) -> Result<RsaKey, KeyError> {
        let key = pkcs1::RsaPublicKey::from_der(der_bytes).map_err(KeyError::Pkcs1)?;
        RsaKey::from_components(key.modulus.as_bytes(), key.public_exponent.as_bytes())
    }

    /// From the modulus and public exponent as big-endian bytes (leading zeros allowed),
    /// as a TPM's public area holds them.
    pub fn from_components(modulus: &[u8], exponent: &[u8]) -> Result<RsaKey, KeyError> {
        let n = strip_zeros(modulus);
        let e = strip_zeros(exponent);
        // Saturates for a modulus beyond 4 Gbit, which the range check below refuses.
        let n_bits = u32::try_from(n.len())
            .ok()
            .and_then(|len| len.checked_mul(8))
            .unwrap_or(u32::MAX);
        let bits = n_bits.saturating_sub(n.first().map_or(8, |b| b.leading_zeros()));
        if !(1024..=16384).contains(&bits) {
            return Err(KeyError::RsaBits { bits });
        }
        if n.last().is_some_and(|b| b & 1 == 0) {
            return Err(KeyError::RsaEven);
        }
        if e.is_empty() || e.len() > 8 || e == [1] || e.last().is_some_and(|b| b & 1 == 0) {
            return Err(KeyError::RsaExponent);
        }
        let (Some(nb), Some(eb)) = (Bn::from_be(n), Bn::from_be(e)) else {
            clear_errors();
            return Err(KeyError::Backend("cannot allocate the RSA key's numbers"));
        };
        // `_large_e`: the kernel takes any odd exponent, AWS-LC's default only up to 33
        // bits.
        // SAFETY: both BIGNUMs are live for the call; AWS-LC copies them into a new key,
        // which we own (freed in `drop`).
        let rsa =
            NonNull::new(unsafe { lc::RSA_new_public_key_large_e(nb.0.as_ptr(), eb.0.as_ptr()) })
                .ok_or_else(|| {
                clear_errors();
                KeyError::Backend("the RSA key was refused by AWS-LC")
            })?;
        Ok(RsaKey {
            k: usize::try_from(bits.div_ceil(8)).unwrap_or(usize::MAX),
            bits,
            rsa,
        })
    }

    /// RSASSA-PKCS1-v1_5 verification of a signature over a message with digest `digest`
    /// (computed with `alg`).
    pub fn verify(&self, alg: HashAlg, digest: &[u8], sig: &[u8]) -> bool {
        if sig.len() != self.k || digest.len() != alg.output_len() {
            return false;
        }
        // SAFETY: the slices are valid for their lengths; `self.rsa` is a live public key,
        // which `RSA_verify` only reads (its cache is behind the key's lock).
        let ok = unsafe {
            lc::RSA_verify(
                nid(alg),
                digest.as_ptr(),
                digest.len(),
                sig.as_ptr(),
                sig.len(),
                self.rsa.as_ptr(),
            )
        } == 1;
        if !ok {
            clear_errors();
        }
        ok
    }
}

impl RsaKey {
    /// RSAES-OAEP encryption of `msg` with SHA-256 (and MGF1-SHA-256) and `label`, as a
    /// TPM's `TPM2_ActivateCredential` expects a credential's seed (label `IDENTITY\0`):
    /// AWS-LC pads (`RSA_padding_add_PKCS1_OAEP_mgf1`) and encrypts.
    pub fn encrypt_oaep_sha256(&self, label: &[u8], msg: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut padded = vec![0u8; self.k];
        // SAFETY: `padded` is writable for its length, `msg` and `label` readable for
        // theirs; the digests are AWS-LC's static method tables.
        let ok = unsafe {
            lc::RSA_padding_add_PKCS1_OAEP_mgf1(
                padded.as_mut_ptr(),
                padded.len(),
                msg.as_ptr(),
                msg.len(),
                label.as_ptr(),
                label.len(),
                lc::EVP_sha256(),
                lc::EVP_sha256(),
            )
        };
        if ok != 1 {
            clear_errors();
            return Err(KeyError::Backend("OAEP padding refused the message"));
        }
        let mut out = vec![0u8; self.k];
        // SAFETY: `padded` holds exactly the key's size in bytes, `out` has room for it,
        // `self.rsa` is a live public key; the call only reads the key.
        let n = unsafe {
            lc::RSA_public_encrypt(
                padded.len(),
                padded.as_ptr(),
                out.as_mut_ptr(),
                self.rsa.as_ptr(),
                lc::RSA_NO_PADDING,
            )
        };
        if usize::try_from(n).ok() != Some(self.k) {
            clear_errors();
            return Err(KeyError::Backend("RSA encryption failed"));
        }
        Ok(out)
    }
}

/// HMAC-SHA-256 of `data` under `key` (AWS-LC).
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut len: std::os::raw::c_uint = 0;
    // SAFETY: every pointer is valid for the length given with it; `out` has room for a
    // SHA-256 output, which is all HMAC-SHA-256 writes.
    unsafe {
        lc::HMAC(
            lc::EVP_sha256(),
            key.as_ptr().cast(),
            key.len(),
            data.as_ptr(),
            data.len(),
            out.as_mut_ptr(),
            &mut len,
        )
    };
    out
}

/// AES-128 in CFB mode with a zero IV, encrypting `data` in place (AWS-LC): the TPM's
/// parameter and credential encryption (TPM 2.0 Part 1, 11.4.6.3).
pub fn aes128_cfb_encrypt(key: &[u8; 16], data: &mut [u8]) -> Result<(), KeyError> {
    let mut k = lc::AES_KEY {
        rd_key: [0; 60],
        rounds: 0,
    };
    // SAFETY: `key` is 16 bytes (128 bits), `k` is ours to fill.
    if unsafe { lc::AES_set_encrypt_key(key.as_ptr(), 128, &mut k) } != 0 {
        clear_errors();
        return Err(KeyError::Backend("AES key setup failed"));
    }
    let mut iv = [0u8; 16];
    let mut num: std::os::raw::c_int = 0;
    let len = data.len();
    let p = data.as_mut_ptr();
    // SAFETY: in and out are the same buffer of `len` bytes (AES-CFB works in place),
    // `k` was set up above, `iv` is the 16-byte IV and `num` the block offset.
    unsafe { lc::AES_cfb128_encrypt(p, p, len, &k, iv.as_mut_ptr(), &mut num, lc::AES_ENCRYPT) };
    Ok(())
}

/// `n` random bytes from AWS-LC's generator.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, KeyError> {
    let mut v = vec![0u8; n];
    // SAFETY: `v` is writable for `n` bytes.
    if unsafe { lc::RAND_bytes(v.as_mut_ptr(), v.len()) } != 1 {
        clear_errors();
        return Err(KeyError::Backend("no random bytes"));
    }
    Ok(v)
}

/// Leading zero bytes removed (a DER INTEGER's sign byte).
fn strip_zeros(mut v: &[u8]) -> &[u8] {
    while let [0, rest @ ..] = v {
        v = rest;
    }
    v
}

/// The curves we verify on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
    P521,
}

impl Curve {
    fn nid(self) -> std::os::raw::c_int {
        match self {
            Curve::P256 => lc::NID_X9_62_prime256v1,
            Curve::P384 => lc::NID_secp384r1,
            Curve::P521 => lc::NID_secp521r1,
        }
    }

    /// `p256`, `p384`, `p521`.
    pub fn short(self) -> &'static str {
        match self {
            Curve::P256 => "p256",
            Curve::P384 => "p384",
            Curve::P521 => "p521",
        }
    }
}

/// Why an ECDSA signature was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcdsaRefusal {
    /// Not a DER `ECDSA-Sig-Value`.
    Malformed,
    /// Well formed, but not a signature of this digest by this key.
    Mismatch,
}

/// An EC public key on one of [`Curve`].
pub struct EcKey {
    pub curve: Curve,
    key: NonNull<lc::EC_KEY>,
}

// SAFETY: an AWS-LC `EC_KEY` holding a public key is only read by `ECDSA_do_verify`,
// which is safe from several threads at once; it is freed once, by the last owner
// (reference counted, see `Clone`).
unsafe impl Send for EcKey {}
// SAFETY: as for `Send`.
unsafe impl Sync for EcKey {}

impl Clone for EcKey {
    fn clone(&self) -> EcKey {
        // SAFETY: `self.key` is live; the clone takes its own reference.
        unsafe { lc::EC_KEY_up_ref(self.key.as_ptr()) };
        EcKey {
            curve: self.curve,
            key: self.key,
        }
    }
}

impl Drop for EcKey {
    fn drop(&mut self) {
        // SAFETY: releases the one reference this value holds.
        unsafe { lc::EC_KEY_free(self.key.as_ptr()) };
    }
}

impl std::fmt::Debug for EcKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EcKey({:?})", self.curve)
    }
}

impl EcKey {
    /// From a SEC1 point (the SPKI's bit string: `04 || x || y`, or compressed) on
    /// `curve`; the point must be on the curve.
    pub fn from_sec1(curve: Curve, point: &[u8]) -> Result<EcKey, KeyError> {
        // SAFETY: a new key for a built-in curve, owned by `owned` below.
        let key = NonNull::new(unsafe { lc::EC_KEY_new_by_curve_name(curve.nid()) })
            .ok_or(KeyError::Backend("cannot make an EC key"))?;
        let owned = EcKey { curve, key };
        let Ok(len) = std::os::raw::c_long::try_from(point.len()) else {
            return Err(KeyError::EcPoint);
        };
        let mut key_ptr = owned.key.as_ptr();
        let mut p = point.as_ptr();
        // SAFETY: `key_ptr` points at our key, which `o2i_ECPublicKey` fills in place
        // (its group already set); `p` and `len` describe the point's bytes. The key
        // stays owned by `owned` whatever the outcome.
        let filled = unsafe { lc::o2i_ECPublicKey(&mut key_ptr, &mut p, len) };
        // SAFETY: `owned.key` is live; the check only reads it (the point is on the curve
        // and not the point at infinity).
        if filled.is_null() || unsafe { lc::EC_KEY_check_key(owned.key.as_ptr()) } != 1 {
            clear_errors();
            return Err(KeyError::EcPoint);
        }
        Ok(owned)
    }

    /// ECDSA verification of a DER signature over `digest`.
    pub fn verify(&self, digest: &[u8], sig_der: &[u8]) -> Result<(), EcdsaRefusal> {
        // SAFETY: `sig_der` is valid for its length; the result is ours and freed below.
        let sig = unsafe { lc::ECDSA_SIG_from_bytes(sig_der.as_ptr(), sig_der.len()) };
        self.verify_sig(digest, sig)
    }

    /// ECDSA verification of a signature given as its two numbers `r` and `s`
    /// (big-endian, as a TPM's `TPMS_SIGNATURE_ECDSA` holds them) over `digest`.
    pub fn verify_rs(&self, digest: &[u8], r: &[u8], s: &[u8]) -> Result<(), EcdsaRefusal> {
        let (Some(rb), Some(sb)) = (Bn::from_be(r), Bn::from_be(s)) else {
            clear_errors();
            return Err(EcdsaRefusal::Malformed);
        };
        // SAFETY: a new, empty signature, ours (freed by `verify_sig`, or below).
        let sig = unsafe { lc::ECDSA_SIG_new() };
        if sig.is_null() {
            clear_errors();
            return Err(EcdsaRefusal::Malformed);
        }
        // SAFETY: `sig` is live; `ECDSA_SIG_set0` takes ownership of both numbers on
        // success, so they are released from their guards only then.
        if unsafe { lc::ECDSA_SIG_set0(sig, rb.0.as_ptr(), sb.0.as_ptr()) } != 1 {
            clear_errors();
            // SAFETY: frees the signature made above, once; the numbers stay ours.
            unsafe { lc::ECDSA_SIG_free(sig) };
            return Err(EcdsaRefusal::Malformed);
        }
        std::mem::forget(rb);
        std::mem::forget(sb);
        self.verify_sig(digest, sig)
    }

    /// Verifies and frees `sig` (null: malformed).
    fn verify_sig(&self, digest: &[u8], sig: *mut lc::ECDSA_SIG) -> Result<(), EcdsaRefusal> {
        if sig.is_null() {
            clear_errors();
            return Err(EcdsaRefusal::Malformed);
        }
        // SAFETY: `digest` is valid for its length, `sig` was just parsed and `self.key`
        // is a live public key; the call only reads them.
        let ok =
            unsafe { lc::ECDSA_do_verify(digest.as_ptr(), digest.len(), sig, self.key.as_ptr()) }
                == 1;
        // SAFETY: frees the signature parsed above, once.
        unsafe { lc::ECDSA_SIG_free(sig) };
        if ok {
            Ok(())
        } else {
            clear_errors();
            Err(EcdsaRefusal::Mismatch)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that are not keys are refused, naming why.
    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(
            RsaKey::from_pkcs1(b"\x30\x00"),
            Err(KeyError::Pkcs1(_))
        ));
        assert!(matches!(
            EcKey::from_sec1(Curve::P256, &[4; 65]),
            Err(KeyError::EcPoint)
        ));
        assert!(matches!(
            EcKey::from_sec1(Curve::P384, &[]),
            Err(KeyError::EcPoint)
        ));
    }
}

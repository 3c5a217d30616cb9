//! The running kernel's rules where they depend on its configuration or its crypto:
//! [`KernelRules`] (Debian's configuration by release), the RSA key sizes, signature
//! algorithms and certificate keys the kernel takes. Tables only; the checks that read
//! them are in `elf` and `signature`.

use crate::formats::pkcs7;

/// What the running kernel's crypto can do for module signatures: Debian's kernel
/// configuration by release, since neither Debian kernel embeds its configuration
/// (CONFIG_IKCONFIG is off). Debian 6.1 builds `CONFIG_CRYPTO_SHA512=m` (sha384 and
/// sha512 are missing until a module provides them, and the init has no modprobe) and
/// leaves `CONFIG_CRYPTO_ECDSA` unset (no ECDSA key enters a keyring); Debian 6.12 builds
/// both in. Both accept RSA moduli of 512, 1024, 1536, 2048, 3072 and 4096 bits only
/// (`crypto/rsa.c:rsa_check_key_length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRules {
    pub sha512: bool,
    pub ecdsa: bool,
    /// 6.12's `elf_validity_cache_*`: exactly one `.modinfo` and exactly one allocated,
    /// non-NOBITS `.gnu.linkonce.this_module` (6.1 takes the first `.modinfo` and only
    /// needs a `.gnu.linkonce.this_module`).
    pub elf_exactly_one: bool,
}

impl KernelRules {
    /// Debian's configuration for a release (`6.1.0-57-amd64`, `6.12.117+deb12-amd64`):
    /// 6.1 up to 6.11 as Debian 6.1, 6.12 and later as Debian 6.12; `None` for a release
    /// that does not start with `major.minor`.
    pub fn debian(release: &str) -> Option<KernelRules> {
        let mut it = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = it.next()?.parse().ok()?;
        let minor: u32 = it.next()?.parse().ok()?;
        let new = (major, minor) >= (6, 12);
        Some(KernelRules {
            sha512: new,
            ecdsa: new,
            elf_exactly_one: new,
        })
    }

    /// Whether the kernel can hash with `alg` (`pkcs7_digest`: missing is ENOPKG).
    pub fn has_digest(self, alg: crate::trust::HashAlg) -> bool {
        use crate::trust::HashAlg;
        match alg {
            HashAlg::Sha384 | HashAlg::Sha512 => self.sha512,
            HashAlg::Sha1 | HashAlg::Sha224 | HashAlg::Sha256 => true,
        }
    }
}

/// RSA moduli the kernel's `rsa_check_key_length` takes (both kernels).
pub const KERNEL_RSA_BITS: [u32; 6] = [512, 1024, 1536, 2048, 3072, 4096];

/// Why the kernel could not hold `key` in a keyring, or `None` when it can.
pub(super) fn unusable(key: &crate::trust::PublicKey, kc: Option<KernelRules>) -> Option<String> {
    use crate::trust::PublicKey;
    match key {
        PublicKey::Rsa(k) if !KERNEL_RSA_BITS.contains(&k.bits) => Some(format!(
            "the kernel takes RSA keys of {KERNEL_RSA_BITS:?} bits only, not {}",
            k.bits
        )),
        PublicKey::Rsa(_) => None,
        _ if kc.is_some_and(|c| !c.ecdsa) => {
            Some("this kernel is built without ECDSA (CONFIG_CRYPTO_ECDSA)".into())
        }
        _ => None,
    }
}

/// The module signature algorithms the kernel's `pkcs7_sig_note_pkey_algo` takes:
/// rsaEncryption and ecdsa-with-SHA1/224/256/384/512 (the `sha*WithRSAEncryption`,
/// RSASSA-PSS and id-ecPublicKey OIDs are ENOPKG).
pub(super) const KERNEL_SIG_ALGS: [&str; 6] = [
    "1.2.840.113549.1.1.1",
    "1.2.840.10045.4.1",
    "1.2.840.10045.4.3.1",
    "1.2.840.10045.4.3.2",
    "1.2.840.10045.4.3.3",
    "1.2.840.10045.4.3.4",
];

/// Whether the kernel's X.509 parser takes an embedded certificate's key
/// (`x509_extract_key_data`): RSA, or EC on P-192, P-256, P-384 (and P-521 from 6.12).
pub(super) fn cert_key_supported(c: &pkcs7::EmbeddedCert, kc: Option<KernelRules>) -> bool {
    match c.key_alg.as_str() {
        "1.2.840.113549.1.1.1" => true,
        "1.2.840.10045.2.1" => match c.curve.as_deref() {
            Some("1.2.840.10045.3.1.1" | "1.2.840.10045.3.1.7" | "1.3.132.0.34") => true,
            Some("1.3.132.0.35") => kc.is_some_and(|k| k.ecdsa),
            _ => false,
        },
        _ => false,
    }
}

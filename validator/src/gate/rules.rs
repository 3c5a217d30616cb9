//! The running kernel's rules where they depend on its configuration or its crypto:
//! [`KernelRules`] (Debian's configuration by release), the digests crypto modules added
//! since boot ([`ModuleDigests`], [`provided_digests`]), the RSA key sizes, signature
//! algorithms and certificate keys the kernel takes. Tables only; the checks that read
//! them are in `elf` and `signature`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::formats::pkcs7;
use crate::trust::HashAlg;

/// What the running kernel's crypto can do for module signatures: Debian's kernel
/// configuration by release, since neither Debian kernel embeds its configuration
/// (CONFIG_IKCONFIG is off). Debian 6.1 builds `CONFIG_CRYPTO_SHA512=m` (sha384 and
/// sha512 are missing until a module provides them, and the init has no modprobe: the
/// initramfs packs that module and loads it first, [`ModuleDigests`]) and
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

    /// Whether the kernel has `alg` built in (`pkcs7_digest`: missing is ENOPKG unless a
    /// module that provides it was loaded first, [`ModuleDigests`]).
    pub fn has_digest(self, alg: HashAlg) -> bool {
        match alg {
            HashAlg::Sha384 | HashAlg::Sha512 => self.sha512,
            HashAlg::Sha1 | HashAlg::Sha224 | HashAlg::Sha256 => true,
        }
    }
}

/// The digests crypto modules loaded since boot gave the running kernel beyond what
/// [`KernelRules`] says it has built in: on Debian 6.1, `sha512_generic` adds sha384 and
/// sha512, which a module signed with them needs before the kernel can check it. Clones
/// share one set, so the loader that saw such a module load tells every copy of the gate.
/// Empty by default (the kernel as booted).
#[derive(Debug, Clone, Default)]
pub struct ModuleDigests(Arc<AtomicU8>);

impl ModuleDigests {
    fn bit(alg: HashAlg) -> u8 {
        match alg {
            HashAlg::Sha1 => 1,
            HashAlg::Sha224 => 2,
            HashAlg::Sha256 => 4,
            HashAlg::Sha384 => 8,
            HashAlg::Sha512 => 16,
        }
    }

    /// Records that the kernel now has `alg`.
    pub fn add(&self, alg: HashAlg) {
        self.0.fetch_or(Self::bit(alg), Ordering::SeqCst);
    }

    /// Whether a loaded module gave the kernel `alg`.
    pub fn has(&self, alg: HashAlg) -> bool {
        self.0.load(Ordering::SeqCst) & Self::bit(alg) != 0
    }
}

/// Every digest the module signature code knows.
pub const DIGESTS: [HashAlg; 5] = [
    HashAlg::Sha1,
    HashAlg::Sha224,
    HashAlg::Sha256,
    HashAlg::Sha384,
    HashAlg::Sha512,
];

/// The digests a module registers with the crypto API, by the aliases its `.modinfo`
/// declares (`alias=crypto-sha512`: what `request_module("crypto-sha512")` would load).
pub fn provided_digests<'a>(aliases: impl IntoIterator<Item = &'a str>) -> Vec<HashAlg> {
    let aliases: Vec<&str> = aliases.into_iter().collect();
    DIGESTS
        .into_iter()
        .filter(|d| {
            aliases
                .iter()
                .any(|a| a.strip_prefix("crypto-") == Some(d.name()))
        })
        .collect()
}

/// RSA moduli the kernel's `rsa_check_key_length` takes (both kernels).
pub const KERNEL_RSA_BITS: [u32; 6] = [512, 1024, 1536, 2048, 3072, 4096];

/// The size the kernel's `rsa_check_key_length` is given for a modulus of `bits` bits:
/// `mpi_get_size(n) << 3`, the modulus in whole 64-bit words (a 2047-bit key counts as
/// 2048).
fn kernel_rsa_bits(bits: u32) -> u32 {
    bits.div_ceil(64).saturating_mul(64)
}

/// Why the kernel could not hold `key` in a keyring, or `None` when it can.
pub(super) fn unusable(key: &crate::trust::PublicKey, kc: Option<KernelRules>) -> Option<String> {
    use crate::trust::PublicKey;
    match key {
        PublicKey::Rsa(k) if !KERNEL_RSA_BITS.contains(&kernel_rsa_bits(k.bits)) => Some(format!(
            "the kernel takes RSA keys of {KERNEL_RSA_BITS:?} bits only (counted in 64-bit \
             words), not {} ({})",
            k.bits,
            kernel_rsa_bits(k.bits)
        )),
        PublicKey::Rsa(_) => None,
        _ if kc.is_some_and(|c| !c.ecdsa) => {
            Some("this kernel is built without ECDSA (CONFIG_CRYPTO_ECDSA)".into())
        }
        _ => None,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// As `mpi_get_size(n) << 3`: whole 64-bit words.
    #[test]
    fn rsa_sizes_count_in_64_bit_words() {
        let counted: Vec<u32> = [512, 2047, 2048, 2049, 2112, 2560, 4095, 4096]
            .into_iter()
            .map(kernel_rsa_bits)
            .collect();
        assert_eq!(counted, [512, 2048, 2048, 2112, 2112, 2560, 4096, 4096]);
    }

    #[test]
    fn digests_by_alias_and_shared_by_clones() {
        // sha512_generic's aliases on Debian 6.1.
        let aliases = [
            "crypto-sha384-generic",
            "sha384-generic",
            "crypto-sha384",
            "sha384",
            "crypto-sha512-generic",
            "sha512-generic",
            "crypto-sha512",
            "sha512",
        ];
        assert_eq!(
            provided_digests(aliases),
            [HashAlg::Sha384, HashAlg::Sha512]
        );
        assert!(provided_digests(["sha512", "pci:v*"]).is_empty());
        let d = ModuleDigests::default();
        let copy = d.clone();
        assert!(!copy.has(HashAlg::Sha512));
        d.add(HashAlg::Sha512);
        assert!(copy.has(HashAlg::Sha512) && !copy.has(HashAlg::Sha384));
        let k = KernelRules::debian("6.1.0-57-amd64");
        assert_eq!(k.map(|k| k.has_digest(HashAlg::Sha512)), Some(false));
        let k = KernelRules::debian("6.12.117+deb12-amd64");
        assert_eq!(k.map(|k| k.has_digest(HashAlg::Sha512)), Some(true));
    }
}

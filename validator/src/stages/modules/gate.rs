//! The module gate: no module reaches the kernel unless its vermagic, symbol CRCs,
//! signature and flavour match what the image promises.
//!
//! For each module file the gate decompresses it (as the kernel would), splits off the
//! appended signature, reads `.modinfo` and `__versions`, and checks, collecting every
//! reason rather than stopping at the first:
//! - **vermagic**: the kernel's own rule (`same_magic`: with `__versions` the release word
//!   is skipped) against the kernel's vermagic string, and in strict mode (the default)
//!   the release word must equal the expected kernel release exactly;
//! - **CRCs**: as the kernel's `check_modstruct_version` and `check_version` (Debian's
//!   6.1 and 6.12): `module_layout` and every undefined symbol of the module that the
//!   symbol table (`Module.symvers` from the kernel image and the modules) resolves must
//!   have a `__versions` record ("no symbol version for ...") whose CRC, read as the
//!   kernel reads it (64 bits, not truncated), equals the export's ("disagrees about
//!   version of symbol ..."); with a complete table an undefined, non-weak symbol that
//!   nothing exports is an unknown symbol. Records for symbols the module does not use
//!   are ignored, as by the kernel;
//! - **ELF**: the kernel's checks the parser leaves (x86-64 `e_machine`,
//!   `.gnu.linkonce.this_module`, one `.modinfo` on 6.12);
//! - **signature**: PKCS#7 over the module body as `verify_pkcs7_signature` judges a
//!   module's: the parser's rules (65535 bytes, versions, signature algorithms, embedded
//!   certificates the X.509 parser takes, a self-signed one only with a valid
//!   self-signature), no signed attributes, each signer against its
//!   embedded certificate and that certificate's chain through the other embedded ones
//!   (`pkcs7_verify_sig_chain`), then every signer in the trust store as
//!   `pkcs7_validate_trust_one` looks: a certificate of the chain, the issuer of its last
//!   certificate, or the signer directly (one trusted, valid signer is enough; a trusted
//!   one that fails refuses), with the digests and keys the running kernel supports
//!   ([`KernelRules`]: Debian's configuration by release);
//! - **GPL-only symbols**: a module whose licence is not GPL-compatible may not import
//!   `_GPL` exports;
//! - **policy**: out-of-tree modules only when the BOM lists them, the NVIDIA flavour by
//!   the `nvidia` module's licence, an optional SHA-256 allowlist.
//!
//! - **namespaces**: a symbol exported in a namespace (the kernel image's exports carry
//!   theirs) must be in the module's `import_ns=`.
//!
//! - **`module_blacklist=`**: a module the command line names is refused.
//!
//! Limits (`docs/SIGNATURE-RULES.md` lists them as GAP or STRICTER): duplicate exports
//! and dbx module hashes are not checked, nor the namespaces of symbols other modules
//! export (their `__crc_` exports carry none).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::config::bom::{Flavour, VermagicMode};
use crate::config::layout;
use crate::formats::kmod::modinfo::{self, Compression};
use crate::formats::kmod::sig::{self, SigError};
use crate::formats::kmod::symvers::Symvers;
use crate::formats::pkcs7;
use crate::trust::pkcs7::{verify_signer, Anchored};
use crate::trust::TrustStore;

/// What the gate holds modules to.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The kernel release modules must be built for (strict mode).
    pub release: Option<String>,
    /// The kernel's full vermagic string, when known (from its image).
    pub kernel_vermagic: Option<String>,
    pub mode: VermagicMode,
    /// Unsigned modules are refused (default true).
    pub require_signature: bool,
    /// Modules allowed without `intree=Y`; `None`: no restriction (no BOM policy).
    pub out_of_tree: Option<BTreeSet<String>>,
    pub flavour: Option<Flavour>,
    /// Module name to required lower-case hex SHA-256 of its file.
    pub sha256: BTreeMap<String, String>,
    /// An undefined symbol missing from the table is a failure (the table is complete).
    pub unknown_symbols_fatal: bool,
    /// The kernel command line's `module_blacklist=` names
    /// ([`crate::config::cmdline::module_blacklist`]).
    pub module_blacklist: Vec<String>,
}

/// Why the gate refuses a module: a stable code, one per rule (the README and
/// `docs/SIGNATURE-RULES.md` list them).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReasonCode {
    Unreadable,
    Unsigned,
    BadSignatureTrailer,
    BadPkcs7,
    UntrustedSigner,
    BadSignature,
    Vermagic,
    VermagicRelease,
    Crc,
    NoSymbolVersion,
    UnknownSymbol,
    NoVersions,
    Name,
    OutOfTree,
    Flavour,
    Sha256,
    SignedAttributes,
    UnsupportedCrypto,
    UnusableKey,
    GplOnlySymbol,
    NamespaceNotImported,
    Blacklisted,
}

impl ReasonCode {
    /// The code as the report and the CLI print it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Unreadable => "unreadable",
            ReasonCode::Unsigned => "unsigned",
            ReasonCode::BadSignatureTrailer => "bad-signature-trailer",
            ReasonCode::BadPkcs7 => "bad-pkcs7",
            ReasonCode::UntrustedSigner => "untrusted-signer",
            ReasonCode::BadSignature => "bad-signature",
            ReasonCode::Vermagic => "vermagic",
            ReasonCode::VermagicRelease => "vermagic-release",
            ReasonCode::Crc => "crc",
            ReasonCode::NoSymbolVersion => "no-symbol-version",
            ReasonCode::UnknownSymbol => "unknown-symbol",
            ReasonCode::NoVersions => "no-versions",
            ReasonCode::Name => "name",
            ReasonCode::OutOfTree => "out-of-tree",
            ReasonCode::Flavour => "flavour",
            ReasonCode::Sha256 => "sha256",
            ReasonCode::SignedAttributes => "signed-attributes",
            ReasonCode::UnsupportedCrypto => "unsupported-crypto",
            ReasonCode::UnusableKey => "unusable-key",
            ReasonCode::GplOnlySymbol => "gpl-only-symbol",
            ReasonCode::NamespaceNotImported => "namespace-not-imported",
            ReasonCode::Blacklisted => "blacklisted",
        }
    }
}

impl PartialEq<&str> for ReasonCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason a module is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reason {
    pub code: ReasonCode,
    pub message: String,
}

/// The gate's verdict on one module, with what `modinfo` would show about its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub pass: bool,
    pub reasons: Vec<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sig_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sig_hashalgo: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vermagic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// SHA-256 of the module file as stored (computed when the policy pins it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// SHA-256 of the module image the kernel gets (decompressed, signature included):
    /// the module's digest in measurements.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_sha256: Option<String>,
}

impl Verdict {
    fn reason(&mut self, code: ReasonCode, message: impl Into<String>) {
        self.reasons.push(Reason {
            code,
            message: message.into(),
        });
    }

    /// `reason; reason` for one-line reports.
    pub fn summary(&self) -> String {
        self.reasons
            .iter()
            .map(|r| r.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn has(&self, code: &str) -> bool {
        self.reasons.iter().any(|r| r.code.as_str() == code)
    }
}

/// The gate: a trust store, a symbol table and a policy.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    pub trust: TrustStore,
    pub symvers: Option<Symvers>,
    pub policy: Policy,
}

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
fn unusable(key: &crate::trust::PublicKey, kc: Option<KernelRules>) -> Option<String> {
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
const KERNEL_SIG_ALGS: [&str; 6] = [
    "1.2.840.113549.1.1.1",
    "1.2.840.10045.4.1",
    "1.2.840.10045.4.3.1",
    "1.2.840.10045.4.3.2",
    "1.2.840.10045.4.3.3",
    "1.2.840.10045.4.3.4",
];

/// Whether the kernel's X.509 parser takes an embedded certificate's key
/// (`x509_extract_key_data`): RSA, or EC on P-192, P-256, P-384 (and P-521 from 6.12).
fn cert_key_supported(c: &pkcs7::EmbeddedCert, kc: Option<KernelRules>) -> bool {
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

/// The licences the kernel's `license_is_gpl_compatible` accepts.
pub const GPL_COMPATIBLE: [&str; 6] = [
    "GPL",
    "GPL v2",
    "GPL and additional rights",
    "Dual BSD/GPL",
    "Dual MIT/GPL",
    "Dual MPL/GPL",
];

/// `e_machine` of the modules the gate judges: the kernels it reads are x86-64 bzImages.
pub const EM_X86_64: u16 = 62;

/// The symbol whose CRC stands for `struct module`'s layout; the kernel checks its
/// `__versions` record for every module (`check_modstruct_version`).
pub const MODULE_LAYOUT: &str = "module_layout";

/// The kernel's `same_magic()`: with CRCs the release word is not compared.
pub fn same_magic(module: &str, kernel: &str, has_crcs: bool) -> bool {
    if has_crcs {
        let rest = |s: &str| {
            s.split_once(' ')
                .map(|(_, r)| r.to_string())
                .unwrap_or_default()
        };
        rest(module) == rest(kernel)
    } else {
        module == kernel
    }
}

impl Gate {
    /// Checks one module file. `name` is the module name the file should hold; `file_name`
    /// decides the decompression. Returns the verdict and, when readable, the decompressed
    /// image (what `init_module` would take).
    pub fn check<'a>(
        &self,
        name: &str,
        file_name: &str,
        raw: &'a [u8],
    ) -> (Verdict, Option<std::borrow::Cow<'a, [u8]>>) {
        let (mut v, elf, image) = self.inspect(name, file_name, raw);
        if let Some(elf) = &elf {
            self.check_crcs(elf, &mut v);
        }
        v.pass = v.reasons.is_empty();
        (v, image)
    }

    /// Everything but the CRC check (which may need the exports of other modules first):
    /// the verdict so far, the parsed ELF and the decompressed image.
    pub fn inspect<'a>(
        &self,
        name: &str,
        file_name: &str,
        raw: &'a [u8],
    ) -> (
        Verdict,
        Option<modinfo::ModuleElf>,
        Option<std::borrow::Cow<'a, [u8]>>,
    ) {
        let mut v = Verdict {
            module: name.to_string(),
            file: None,
            pass: false,
            reasons: Vec::new(),
            signer: None,
            sig_key: None,
            sig_hashalgo: None,
            vermagic: None,
            license: None,
            sha256: None,
            image_sha256: None,
        };
        let image: std::borrow::Cow<'_, [u8]> = match Compression::from_name(file_name) {
            Compression::None => std::borrow::Cow::Borrowed(raw),
            c => match modinfo::decompress(raw, c) {
                Ok(i) => std::borrow::Cow::Owned(i),
                Err(e) => {
                    v.reason(ReasonCode::Unreadable, e.to_string());
                    return (v, None, None);
                }
            },
        };
        let split = sig::split(&image);
        let body: &[u8] = match &split {
            Ok(s) => s.body,
            Err(SigError::Unsigned) => &image,
            Err(_) => {
                // A damaged trailer: the ELF ends somewhere before it; let the ELF parser
                // decide from its own headers.
                &image
            }
        };
        let elf = match modinfo::parse_elf(body) {
            Ok(e) => Some(e),
            Err(e) => {
                v.reason(ReasonCode::Unreadable, e.to_string());
                None
            }
        };
        if let Some(elf) = &elf {
            self.check_elf(name, elf, &mut v);
        }
        if self.policy.module_blacklist.iter().any(|b| b == name) {
            v.reason(
                ReasonCode::Blacklisted,
                format!("Module {name} is blacklisted (module_blacklist= on the command line)"),
            );
        }
        match split {
            Ok(s) => {
                // One pass over the image: the body's SHA-256 (what a sha256 signature
                // covers) and then the whole image's (the module's digest).
                let mut h = sha2::Sha256::new();
                h.update(s.body);
                let body_sha256 = h.clone().finalize().to_vec();
                h.update(image.get(s.body.len()..).unwrap_or_default());
                v.image_sha256 = Some(crate::util::hex(&h.finalize()));
                self.check_signature(s.pkcs7, s.body, Some(&body_sha256), &mut v)
            }
            Err(SigError::Unsigned) => {
                v.image_sha256 = Some(crate::util::hex(&sha2::Sha256::digest(&image[..])));
                if self.policy.require_signature {
                    v.reason(ReasonCode::Unsigned, "module is not signed");
                }
            }
            Err(e) => v.reason(ReasonCode::BadSignatureTrailer, e.to_string()),
        }
        if let Some(want) = self.policy.sha256.get(name) {
            let got = crate::util::hex(&sha2::Sha256::digest(raw));
            if !want.eq_ignore_ascii_case(&got) {
                v.reason(
                    ReasonCode::Sha256,
                    format!("sha256 {got} is not the allowed {want}"),
                );
            }
            v.sha256 = Some(got);
        }
        v.pass = v.reasons.is_empty();
        (v, elf, Some(image))
    }

    /// The kernel's ELF rules past the parser's (`elf_validity_check` on 6.1,
    /// `elf_validity_cache_copy` on 6.12, `setup_load_info`): ENOEXEC in the kernel.
    fn check_elf_rules(&self, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        let strict = self
            .policy
            .release
            .as_deref()
            .and_then(KernelRules::debian)
            .is_some_and(|k| k.elf_exactly_one);
        if elf.machine != EM_X86_64 {
            v.reason(
                ReasonCode::Unreadable,
                format!(
                    "Invalid architecture in ELF header: {} (the kernel is x86-64, {EM_X86_64})",
                    elf.machine
                ),
            );
        }
        if elf.this_module.is_empty() {
            v.reason(
                ReasonCode::Unreadable,
                "No module found in object (no .gnu.linkonce.this_module section)",
            );
        } else if strict && elf.this_module.len() != 1 {
            v.reason(
                ReasonCode::Unreadable,
                "Exactly one .gnu.linkonce.this_module section must exist.",
            );
        } else if strict {
            let (ty, flags, _) = elf.this_module.first().copied().unwrap_or_default();
            if ty == goblin::elf::section_header::SHT_NOBITS
                || flags & u64::from(goblin::elf::section_header::SHF_ALLOC) == 0
            {
                v.reason(
                    ReasonCode::Unreadable,
                    ".gnu.linkonce.this_module must be allocated and have a size set",
                );
            }
        }
        if strict && elf.modinfo_sections > 1 {
            v.reason(
                ReasonCode::Unreadable,
                "Only one .modinfo section must exist.",
            );
        }
    }

    fn check_elf(&self, name: &str, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        self.check_elf_rules(elf, v);
        let mi = &elf.modinfo;
        v.license = mi.get("license").map(str::to_string);
        if let Some(n) = mi.get("name") {
            if crate::formats::kmod::normalize_name(n) != name {
                v.reason(
                    ReasonCode::Name,
                    format!("the file holds module {n}, not {name}"),
                );
            }
        }
        match mi.get("vermagic") {
            None => v.reason(ReasonCode::Vermagic, "no vermagic in .modinfo"),
            Some(vm) => {
                v.vermagic = Some(vm.to_string());
                if let Some(kv) = &self.policy.kernel_vermagic {
                    if !same_magic(vm, kv, elf.has_versions) {
                        v.reason(
                            ReasonCode::Vermagic,
                            format!("version magic '{vm}' should be '{kv}'"),
                        );
                    }
                }
                if self.policy.mode == VermagicMode::Strict {
                    if let Some(rel) = &self.policy.release {
                        let word = vm.split(' ').next().unwrap_or("");
                        if word != rel {
                            v.reason(
                                ReasonCode::VermagicRelease,
                                format!("built for kernel {word}, the image's kernel is {rel}"),
                            );
                        }
                    }
                }
            }
        }
        self.check_policy(name, elf, v);
    }

    /// Checks the module's imports against the symbol table as the kernel does at load
    /// time (the caller settles `pass`).
    pub fn check_crcs(&self, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        let Some(table) = &self.symvers else {
            return;
        };
        if !elf.has_versions {
            v.reason(
                ReasonCode::NoVersions,
                "no __versions section (built without CONFIG_MODVERSIONS)",
            );
            return;
        }
        let mut bad = Vec::new();
        let mut missing = Vec::new();
        let mut unknown = Vec::new();
        let mut gpl_only = Vec::new();
        let mut namespaces = Vec::new();
        let gplok = elf
            .modinfo
            .get("license")
            .is_some_and(|l| GPL_COMPATIBLE.contains(&l));
        let mut seen = BTreeSet::new();
        // The kernel's check_version takes the first `__versions` record of a name; one
        // map instead of a scan per import (modules import hundreds of symbols).
        let mut versions = std::collections::HashMap::with_capacity(elf.versions.len());
        for r in &elf.versions {
            versions.entry(r.symbol.as_str()).or_insert(r);
        }
        // check_modstruct_version first, then simplify_symbols in symbol-table order.
        let layout = (table.map.contains_key(MODULE_LAYOUT)).then_some((MODULE_LAYOUT, false));
        let undefined = elf.undefined.iter().map(|u| (u.name.as_str(), u.weak));
        for (name, weak) in layout.into_iter().chain(undefined) {
            if !seen.insert(name) {
                continue;
            }
            let Some(x) = table.map.get(name) else {
                // The kernel: an unresolved weak symbol is fine, and x86 ignores an
                // unreferenced _GLOBAL_OFFSET_TABLE_ (ignore_undef_symbol).
                if !weak && name != "_GLOBAL_OFFSET_TABLE_" {
                    unknown.push(name.to_string());
                }
                continue;
            };
            // find_symbol with gplok false skips GPL-only exports: "Unknown symbol".
            if x.gpl && !gplok {
                gpl_only.push(name.to_string());
                continue;
            }
            // verify_namespace_is_imported (CONFIG_MODULE_ALLOW_MISSING_NAMESPACE_IMPORTS
            // is unset in both Debian kernels).
            if !x.namespace.is_empty() && !elf.modinfo.all("import_ns").any(|n| n == x.namespace) {
                namespaces.push(format!(
                    "module uses symbol ({name}) from namespace {}, but does not import it",
                    x.namespace
                ));
            }
            match versions.get(name) {
                None => missing.push(name.to_string()),
                Some(e) if e.crc != u64::from(x.crc) => bad.push(format!(
                    "disagrees about version of symbol {name} (module {:#010x}, {} {:#010x})",
                    e.crc, x.module, x.crc
                )),
                Some(_) => {}
            }
        }
        for b in bad {
            v.reason(ReasonCode::Crc, b);
        }
        for m in missing {
            v.reason(
                ReasonCode::NoSymbolVersion,
                format!("no symbol version for {m}"),
            );
        }
        for n in namespaces {
            v.reason(ReasonCode::NamespaceNotImported, n);
        }
        if !gpl_only.is_empty() {
            v.reason(
                ReasonCode::GplOnlySymbol,
                format!(
                    "licence '{}' is not GPL-compatible, and the module uses GPL-only \
                     symbol(s) {} (the kernel: Unknown symbol)",
                    elf.modinfo.get("license").unwrap_or("(none)"),
                    gpl_only.join(", ")
                ),
            );
        }
        if self.policy.unknown_symbols_fatal && !unknown.is_empty() {
            v.reason(
                ReasonCode::UnknownSymbol,
                format!("unknown symbol(s) {}", unknown.join(", ")),
            );
        }
    }

    fn check_policy(&self, name: &str, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        let mi = &elf.modinfo;
        let intree = mi.get("intree") == Some("Y");
        if !intree
            && !self
                .policy
                .out_of_tree
                .as_ref()
                .is_none_or(|allowed| allowed.contains(name))
        {
            v.reason(
                ReasonCode::OutOfTree,
                "out-of-tree module not listed in the BOM's policy.out_of_tree",
            );
        }
        if name == "nvidia" {
            if let Some(f) = self.policy.flavour {
                let lic = v.license.clone().unwrap_or_default();
                let ok = match f {
                    Flavour::Open => lic == "Dual MIT/GPL",
                    Flavour::Proprietary => lic == "NVIDIA",
                };
                if !ok {
                    v.reason(
                        ReasonCode::Flavour,
                        format!("licence '{lic}' is not the {f:?} flavour the BOM names"),
                    );
                }
            }
        }
    }

    /// The signature as the kernel's `verify_pkcs7_signature` judges a module's: the
    /// parser's rules (size, versions, algorithms, embedded certificates), no signed
    /// attributes, each signer's digest available, then the trust pass over **every**
    /// signer (`pkcs7_validate_trust`): a signer not in the store (or whose key this
    /// kernel cannot hold) is skipped, a trusted signer whose signature fails refuses the
    /// module at once, and one trusted valid signer is enough.
    fn check_signature(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_magic_follows_the_kernel() {
        let k = "6.1.0-57-amd64 SMP preempt mod_unload modversions ";
        assert!(same_magic(
            "6.1.0-99-amd64 SMP preempt mod_unload modversions ",
            k,
            true
        ));
        assert!(!same_magic(
            "6.1.0-99-amd64 SMP preempt mod_unload modversions ",
            k,
            false
        ));
        assert!(!same_magic(
            "6.1.0-57-cloud-amd64 SMP mod_unload modversions ",
            k,
            true
        ));
        assert!(same_magic(k, k, false));
    }

    fn elf_with(license: &str, intree: bool) -> modinfo::ModuleElf {
        let mut pairs = vec![
            ("license".to_string(), license.to_string()),
            (
                "vermagic".to_string(),
                "6.1.0-57-amd64 SMP preempt mod_unload modversions ".to_string(),
            ),
        ];
        if intree {
            pairs.push(("intree".into(), "Y".into()));
        }
        modinfo::ModuleElf {
            modinfo: modinfo::ModInfo { pairs },
            versions: vec![],
            has_versions: true,
            undefined: vec![],
            machine: EM_X86_64,
            modinfo_sections: 1,
            this_module: vec![(1, 3, 1344)],
        }
    }

    #[test]
    fn nvidia_flavour_follows_the_bom() {
        let mut g = Gate::default();
        g.policy.out_of_tree = Some(["nvidia".to_string()].into_iter().collect());
        let codes = |g: &Gate, name: &str, lic: &str| {
            let mut v = Verdict {
                module: name.into(),
                file: None,
                pass: false,
                reasons: vec![],
                signer: None,
                sig_key: None,
                sig_hashalgo: None,
                vermagic: None,
                license: None,
                sha256: None,
                image_sha256: None,
            };
            g.check_elf(name, &elf_with(lic, false), &mut v);
            v.reasons.iter().map(|r| r.code).collect::<Vec<_>>()
        };
        g.policy.flavour = Some(Flavour::Open);
        assert!(codes(&g, "nvidia", "Dual MIT/GPL").is_empty());
        assert_eq!(codes(&g, "nvidia", "NVIDIA"), ["flavour"]);
        g.policy.flavour = Some(Flavour::Proprietary);
        assert!(codes(&g, "nvidia", "NVIDIA").is_empty());
        assert_eq!(codes(&g, "nvidia", "Dual MIT/GPL"), ["flavour"]);
        // Another out-of-tree module not in the BOM's list.
        assert_eq!(codes(&g, "nvidia_fs", "GPL"), ["out-of-tree"]);
        g.policy.release = Some("6.1.0-58-amd64".into());
        assert_eq!(codes(&g, "nvidia", "NVIDIA"), ["vermagic-release"]);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let g = Gate {
            policy: Policy {
                require_signature: true,
                ..Policy::default()
            },
            ..Gate::default()
        };
        for (name, bytes) in [
            ("empty.ko", &b""[..]),
            ("junk.ko", &b"junk junk junk"[..]),
            ("bad.ko.xz", &b"\xfd7zXZ\0\0"[..]),
            ("tiny.ko", &b"\x7fELF"[..]),
            ("trailer.ko", sig::MAGIC),
        ] {
            let (v, _) = g.check("m", name, bytes);
            assert!(!v.pass, "{name}");
            assert!(v.has("unreadable"), "{name}: {:?}", v.reasons);
        }
    }

    /// The gate's own inputs in the initramfs are read with limits: an oversized
    /// `kernel.vermagic` is refused naming the limit, a FIFO in place of `Module.symvers`
    /// is refused without blocking, and good inputs still load.
    #[test]
    fn initramfs_inputs_are_read_with_limits() {
        use std::path::Path;
        let d = std::env::temp_dir().join(format!("vld-gate-inputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join(layout::TRUST_DIR)).unwrap();
        let bom = crate::config::bom::parse(
            b"schema = 1\nimage_id = \"img-1\"\n[kernel]\nrelease = \"6.1.0-57-amd64\"\n",
            Path::new("bom.toml"),
        )
        .unwrap()
        .bom;
        let vermagic = d.join(layout::VERMAGIC);
        let symvers = d.join(layout::SYMVERS);
        std::fs::write(&symvers, "0x12345678\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n").unwrap();
        std::fs::write(&vermagic, vec![b'x'; VERMAGIC_MAX as usize + 1]).unwrap();
        let e = Gate::from_initramfs(&d, &bom).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: larger than the limit of {VERMAGIC_MAX} bytes",
                vermagic.display()
            )
        );
        std::fs::write(
            &vermagic,
            "6.1.0-57-amd64 SMP preempt mod_unload modversions \n",
        )
        .unwrap();
        let g = Gate::from_initramfs(&d, &bom).unwrap();
        assert_eq!(
            g.policy.kernel_vermagic.as_deref(),
            Some("6.1.0-57-amd64 SMP preempt mod_unload modversions ")
        );
        std::fs::remove_file(&symvers).unwrap();
        nix::unistd::mkfifo(&symvers, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = Gate::from_initramfs(&d, &bom).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// A problem loading the gate's inputs.
#[derive(Debug, thiserror::Error)]
pub enum GateSetupError {
    #[error("{path}: {why}")]
    Read {
        path: std::path::PathBuf,
        why: String,
    },
    #[error(transparent)]
    Input(#[from] crate::util::fs::InputError),
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
}

impl Policy {
    /// The policy a BOM asks for (signatures always required).
    pub fn from_bom(bom: &crate::config::bom::Bom) -> Policy {
        Policy {
            release: Some(bom.kernel.release.to_string()),
            kernel_vermagic: None,
            mode: bom.policy.vermagic,
            require_signature: true,
            out_of_tree: Some(
                bom.policy
                    .out_of_tree
                    .iter()
                    .map(|m| m.normalized())
                    .collect(),
            ),
            flavour: bom.nvidia.as_ref().map(|n| n.flavour),
            sha256: bom
                .policy
                .module_sha256
                .iter()
                .map(|(k, v)| {
                    (
                        crate::formats::kmod::normalize_name(k),
                        v.0.to_ascii_lowercase(),
                    )
                })
                .collect(),
            unknown_symbols_fatal: true,
            module_blacklist: Vec::new(),
        }
    }
}

/// Most bytes read from the initramfs's `kernel.vermagic` (the kernel's string is a few
/// dozen bytes).
pub const VERMAGIC_MAX: u64 = 4096;

/// Most bytes read from the initramfs's `Module.symvers` (the whole of Debian's 6.1 kernel
/// and its modules export about 30,000 symbols, 2.5 MB; the initramfs carries only the
/// symbols its modules import).
pub const SYMVERS_MAX: u64 = 16 << 20;

impl Gate {
    /// The gate as the init builds it: inputs from the initramfs rooted at `root` (each read
    /// with its limit, [`VERMAGIC_MAX`] and [`SYMVERS_MAX`]), policy from the BOM.
    pub fn from_initramfs(
        root: &std::path::Path,
        bom: &crate::config::bom::Bom,
    ) -> Result<Gate, GateSetupError> {
        let read = |rel: &str, limit: u64| -> Result<String, GateSetupError> {
            Ok(crate::util::fs::read_text_limited(&root.join(rel), limit)?)
        };
        let mut policy = Policy::from_bom(bom);
        policy.kernel_vermagic = Some(
            read(layout::VERMAGIC, VERMAGIC_MAX)?
                .trim_end_matches('\n')
                .to_string(),
        );
        let symvers = Symvers::parse(&read(layout::SYMVERS, SYMVERS_MAX)?).map_err(|why| {
            GateSetupError::Read {
                path: root.join(layout::SYMVERS),
                why: why.to_string(),
            }
        })?;
        let mut trust = TrustStore::new();
        trust.add_path(&root.join(layout::TRUST_DIR))?;
        Ok(Gate {
            trust,
            symvers: Some(symvers),
            policy,
        })
    }
}

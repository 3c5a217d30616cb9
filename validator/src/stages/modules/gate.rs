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
//! - **signature**: PKCS#7 over the module body, signer by issuer and serial in the trust
//!   store, RSA or ECDSA;
//! - **policy**: out-of-tree modules only when the BOM lists them, the NVIDIA flavour by
//!   the `nvidia` module's licence, an optional SHA-256 allowlist.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::config::bom::{Flavour, VermagicMode};
use crate::config::layout;
use crate::formats::kmod::modinfo::{self, Compression};
use crate::formats::kmod::sig::{self, SigError};
use crate::formats::kmod::symvers::Symvers;
use crate::formats::pkcs7;
use crate::trust::pkcs7::{verify_signer, VerifyError};
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

    fn check_elf(&self, name: &str, elf: &modinfo::ModuleElf, v: &mut Verdict) {
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
        let mut seen = BTreeSet::new();
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
            match elf.version_of(name) {
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

    fn check_signature(
        &self,
        pkcs7_der: &[u8],
        body: &[u8],
        body_sha256: Option<&[u8]>,
        v: &mut Verdict,
    ) {
        let signers = match pkcs7::parse(pkcs7_der) {
            Ok(s) => s,
            Err(e) => {
                v.reason(ReasonCode::BadPkcs7, e.to_string());
                return;
            }
        };
        let Some(s) = signers.first() else {
            v.reason(ReasonCode::BadPkcs7, "no signer");
            return;
        };
        v.signer = Some(s.issuer_cn.clone());
        v.sig_key = Some(s.key_id());
        v.sig_hashalgo = Some(s.digest.name().to_string());
        let digest = match (s.digest, body_sha256) {
            (crate::trust::HashAlg::Sha256, Some(d)) => d.to_vec(),
            (alg, _) => alg.digest(body),
        };
        match verify_signer(s, &digest, &self.trust) {
            Ok(_) => {}
            Err(VerifyError::UntrustedSigner { signer, serial }) => v.reason(
                ReasonCode::UntrustedSigner,
                format!("signer {signer} (key {serial}) is not in the trust store"),
            ),
            Err(e) => v.reason(ReasonCode::BadSignature, e.to_string()),
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
                why,
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

//! Layer 6: the module gate: no module reaches the kernel unless its vermagic, symbol CRCs,
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
//! - **hash blacklist**: a module whose image digest (decompressed, signature included)
//!   is in the kernel's `bin:` blacklist (UEFI `dbx`, `MokListXRT`) is refused once its
//!   signature verified, as Debian's `mod_is_hash_blacklisted`.
//!
//! Limits (`docs/SIGNATURE-RULES.md` lists them as GAP or STRICTER): duplicate exports
//! are not checked, nor the namespaces of symbols other modules
//! export (their `__crc_` exports carry none).
//!
//! Layout: a layer of its own between `config` and `stages` (it uses nothing of the
//! stages, the report or the boot): [`Gate`] and its pass over one file here; the policy
//! (`policy`), the verdict and reason codes (`reason`), the kernel's configuration-
//! dependent tables (`rules`, [`KernelRules`]), the ELF, vermagic and symbol checks
//! (`elf`), the signature (`signature`, the trust decision being one call into
//! [`crate::trust::message::verify_message`]), a module's digests computed in steps
//! (`digest`: [`Gate::begin`] makes the checks before the digest, [`Gate::end`] those
//! after it, so that [`batch`] can feed two modules' digests in turn), the set-up from the
//! initramfs (`setup`), and many files at once ([`batch`]). The public names are
//! re-exported here.

pub mod batch;
mod digest;
mod elf;
mod policy;
mod reason;
mod rules;
mod setup;
mod signature;

pub use elf::{same_magic, Overlay, EM_X86_64, GPL_COMPATIBLE, MODULE_LAYOUT};
pub use policy::Policy;
pub use reason::{Reason, ReasonCode, Verdict};
pub use rules::{provided_digests, KernelRules, ModuleDigests, DIGESTS, KERNEL_RSA_BITS};
pub use setup::{GateSetupError, SYMVERS_MAX, VERMAGIC_MAX};

use sha2::Digest;

use crate::formats::kmod::modinfo::{self, Compression};
use crate::formats::kmod::sig::{self, SigError};
use crate::formats::kmod::symvers::Symvers;
use crate::trust::TrustStore;

/// What [`Gate::inspect`] gives: the verdict so far (all but the CRC check), the parsed
/// ELF when it could be read, and the (decompressed) image when the file could be read.
pub type Inspected<'a> = (
    Verdict,
    Option<modinfo::ModuleElf>,
    Option<std::borrow::Cow<'a, [u8]>>,
);

/// The gate: a trust store, a symbol table and a policy.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    pub trust: TrustStore,
    pub symvers: Option<Symvers>,
    pub policy: Policy,
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
        self.check_releasing(name, file_name, raw, &|_| {})
    }

    /// [`Gate::check`], calling `release` with each part of `raw` once it has been hashed
    /// and is not read again (at most [`HASH_CHUNK`] bytes at a time), so a caller that
    /// maps the file can drop those pages from memory as the check goes.
    pub fn check_releasing<'a>(
        &self,
        name: &str,
        file_name: &str,
        raw: &'a [u8],
        release: &dyn Fn(&[u8]),
    ) -> (Verdict, Option<std::borrow::Cow<'a, [u8]>>) {
        let (mut v, elf, image) = self.inspect_releasing(name, file_name, raw, release);
        if let Some(elf) = &elf {
            self.check_crcs(elf, &mut v);
        }
        v.pass = v.reasons.is_empty();
        (v, image)
    }

    /// Everything but the CRC check (which may need the exports of other modules first):
    /// the verdict so far, the parsed ELF and the decompressed image.
    pub fn inspect<'a>(&self, name: &str, file_name: &str, raw: &'a [u8]) -> Inspected<'a> {
        self.inspect_releasing(name, file_name, raw, &|_| {})
    }

    /// [`Gate::inspect`] with [`Gate::check_releasing`]'s `release`.
    pub fn inspect_releasing<'a>(
        &self,
        name: &str,
        file_name: &str,
        raw: &'a [u8],
        release: &dyn Fn(&[u8]),
    ) -> Inspected<'a> {
        let b = self.begin(name, file_name, raw);
        self.end(b, raw, release)
    }

    /// The checks of [`Gate::inspect`] before the module's digest: decompression, the
    /// signature trailer's split, the ELF's checks, `module_blacklist=`. The digest is
    /// then fed in steps ([`Begun::hash_step`], as `batch` does for two modules at once)
    /// or whole by [`Gate::end`], which makes the checks that need it.
    pub fn begin(&self, name: &str, file_name: &str, raw: &[u8]) -> Begun {
        let mut v = Verdict::new(name);
        let decompressed = match Compression::from_name(file_name) {
            Compression::None => None,
            c => match modinfo::decompress(raw, c) {
                Ok(i) => Some(i),
                Err(e) => {
                    v.reason(ReasonCode::Unreadable, e.to_string());
                    return Begun {
                        v,
                        elf: None,
                        decompressed: None,
                        trailer: Trailer::Unreadable,
                    };
                }
            },
        };
        let image = decompressed.as_deref().unwrap_or(raw);
        let split = sig::split(image);
        // A damaged trailer: the ELF ends somewhere before it; let the ELF parser decide
        // from its own headers.
        let body = split.as_ref().map_or(image, |s| s.body);
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
        let trailer = match split {
            Ok(s) => Trailer::Signed {
                pkcs7: s.body.len()..s.body.len() + s.pkcs7.len(),
                stream: digest::Stream::new(image.len(), Some(s.body.len())),
            },
            Err(SigError::Unsigned) => Trailer::Unsigned(digest::Stream::new(image.len(), None)),
            Err(e) => Trailer::Damaged(e),
        };
        Begun {
            v,
            elf,
            decompressed,
            trailer,
        }
    }

    /// The checks of [`Gate::inspect`] that need the module's digest, after
    /// [`Gate::begin`] over the same `raw`: what is left of the digest is fed (each part
    /// of the body, or of an unsigned image, handed to `release`), then the signature, the
    /// hash blacklist, `Policy::sha256`.
    pub fn end<'a>(&self, b: Begun, raw: &'a [u8], release: &dyn Fn(&[u8])) -> Inspected<'a> {
        let Begun {
            mut v,
            elf,
            decompressed,
            trailer,
        } = b;
        let image: std::borrow::Cow<'a, [u8]> =
            decompressed.map_or(std::borrow::Cow::Borrowed(raw), std::borrow::Cow::Owned);
        // How much of the image the digest's pass hands to `release`.
        let released = match &trailer {
            Trailer::Signed { pkcs7, .. } => pkcs7.start,
            Trailer::Unsigned(_) => image.len(),
            Trailer::Damaged(_) | Trailer::Unreadable => 0,
        };
        match trailer {
            Trailer::Unreadable => return (v, None, None),
            Trailer::Signed { pkcs7, stream } => {
                let d = stream.finish(&image, HASH_CHUNK, release);
                let body = image.get(..pkcs7.start).unwrap_or_default();
                let pkcs7 = image.get(pkcs7).unwrap_or_default();
                let hex = crate::util::hex(&d.image);
                // Debian's mod_is_hash_blacklisted: after a signature that verified.
                if self.check_signature(pkcs7, body, d.body.as_ref().map(|b| &b[..]), &mut v)
                    && self
                        .policy
                        .hash_blacklist
                        .iter()
                        .any(|b| b.as_slice() == d.image.as_slice())
                {
                    v.reason(
                        ReasonCode::HashBlacklisted,
                        format!("Module hash {hex} is blacklisted (UEFI dbx or MokListXRT)"),
                    );
                }
                v.image_sha256 = Some(hex);
            }
            Trailer::Unsigned(stream) => {
                let d = stream.finish(&image, HASH_CHUNK, release);
                v.image_sha256 = Some(crate::util::hex(&d.image));
                if self.policy.require_signature {
                    v.reason(ReasonCode::Unsigned, "module is not signed");
                }
            }
            Trailer::Damaged(e) => v.reason(ReasonCode::BadSignatureTrailer, e.to_string()),
        }
        if let Some(want) = self.policy.sha256.get(v.module.as_str()) {
            let got = match (&image, &v.image_sha256) {
                // An uncompressed file is the image: its digest is the one just taken,
                // and only what that pass did not release is left to release.
                (std::borrow::Cow::Borrowed(_), Some(hex)) => {
                    let rest = raw.get(released..).unwrap_or_default();
                    rest.chunks(HASH_CHUNK).for_each(release);
                    hex.clone()
                }
                _ => {
                    let mut h = sha2::Sha256::new();
                    hash_releasing(&mut h, raw, release);
                    crate::util::hex(&h.finalize())
                }
            };
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
}

/// A module between [`Gate::begin`] and [`Gate::end`].
#[derive(Debug)]
pub struct Begun {
    v: Verdict,
    elf: Option<modinfo::ModuleElf>,
    /// The image, when the file was compressed (else the file is the image).
    decompressed: Option<Vec<u8>>,
    trailer: Trailer,
}

/// What `begin` found at the image's end, with the digest's pass it plans.
#[derive(Debug)]
enum Trailer {
    /// Signed: where the PKCS#7 lies (the body is what precedes it).
    Signed {
        pkcs7: std::ops::Range<usize>,
        stream: digest::Stream,
    },
    Unsigned(digest::Stream),
    /// A trailer the kernel would refuse: nothing is hashed.
    Damaged(SigError),
    /// The file could not be decompressed: nothing more is checked.
    Unreadable,
}

impl Begun {
    /// Feeds up to `n` more bytes of the image to the digest (`raw`: the file `begin`
    /// was given); true once nothing is left to feed.
    pub fn hash_step(&mut self, raw: &[u8], n: usize) -> bool {
        let image = self.decompressed.as_deref().unwrap_or(raw);
        if let Trailer::Signed { stream, .. } | Trailer::Unsigned(stream) = &mut self.trailer {
            stream.step(image, n);
        }
        self.hashed()
    }

    /// Whether nothing is left to feed to the digest.
    pub fn hashed(&self) -> bool {
        match &self.trailer {
            Trailer::Signed { stream, .. } | Trailer::Unsigned(stream) => stream.done(),
            Trailer::Damaged(_) | Trailer::Unreadable => true,
        }
    }
}

/// The most bytes hashed before [`Gate::check_releasing`]'s `release` is called.
pub const HASH_CHUNK: usize = 8 << 20;

/// Feeds `data` to `h` in [`HASH_CHUNK`] parts, handing each to `release` once hashed.
fn hash_releasing(h: &mut sha2::Sha256, data: &[u8], release: &dyn Fn(&[u8])) {
    for part in data.chunks(HASH_CHUNK) {
        h.update(part);
        release(part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // A trailer whose length does not fit: refused for it, and nothing is hashed.
        let mut bad = sig::signed(b"body", b"pk");
        let at = bad.len() - sig::MAGIC.len() - 4;
        bad[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        let (v, _) = g.check("m", "bad.ko", &bad);
        assert!(v.has("bad-signature-trailer"), "{:?}", v.reasons);
        assert_eq!(v.image_sha256, None);
    }
}

//! The gate's answer: a [`Verdict`] per module, and the [`Reason`]s it was refused for,
//! each with a stable [`ReasonCode`] (the report, the CLI and `docs/SIGNATURE-RULES.md`
//! name them). Pure data; the checks that fill it live in the sibling modules.

use serde::{Deserialize, Serialize};

/// Why the gate refuses a module: a stable code, one per rule (`docs/PREFLIGHT.md` and
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
    HashBlacklisted,
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
            ReasonCode::HashBlacklisted => "hash-blacklisted",
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
    /// A verdict on `module` with nothing judged yet: not passed, no reasons, no facts.
    pub fn new(module: &str) -> Verdict {
        Verdict {
            module: module.to_string(),
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
        }
    }

    pub(super) fn reason(&mut self, code: ReasonCode, message: impl Into<String>) {
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

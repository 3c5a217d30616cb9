//! The BOM's `[measure]` table: whether the boot needs a TPM, the PCR it extends, the
//! deadline of each TPM command, and the quote at the end of the boot.
//!
//! Contract: defaults when absent (TPM required, PCR 13, 2000 ms, a quote by an ECC
//! P-256 attestation key); the PCR and the
//! deadline are range-checked by the BOM's cross-checks (`checks.rs`).

use serde::{Deserialize, Serialize};

/// Whether the boot needs a working TPM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TpmPolicy {
    /// No TPM, or a TPM failing, stops the boot (a platform fault).
    #[default]
    Required,
    /// Measured when there is a TPM; its absence or failure is reported only.
    Optional,
}

/// The attestation key's type (`[measure] ak`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AkKind {
    /// ECC NIST P-256, ECDSA-SHA256: made in milliseconds on every TPM.
    #[default]
    Ecc,
    /// RSA 2048, RSASSA-SHA256: key generation takes seconds on discrete TPMs.
    Rsa,
}

fn default_true() -> bool {
    true
}

fn default_pcr() -> u32 {
    crate::formats::tpm::measurement::DEFAULT_PCR
}

fn default_tpm_timeout() -> u64 {
    2000
}

/// Measured boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    #[serde(default)]
    pub tpm: TpmPolicy,
    /// The PCR for the BOM, command line, modules, root hash and decision (PCR 11 gets
    /// the systemd phase strings).
    #[serde(default = "default_pcr")]
    pub pcr: u32,
    /// Deadline of each TPM command, in milliseconds.
    #[serde(default = "default_tpm_timeout")]
    pub timeout_ms: u64,
    /// Quote the PCRs at the end of every boot, bound to the report (when a TPM works).
    #[serde(default = "default_true")]
    pub quote: bool,
    /// The attestation key's type.
    #[serde(default)]
    pub ak: AkKind,
}

impl Default for Measure {
    fn default() -> Measure {
        Measure {
            tpm: TpmPolicy::Required,
            pcr: default_pcr(),
            timeout_ms: default_tpm_timeout(),
            quote: true,
            ak: AkKind::Ecc,
        }
    }
}

//! The quote at the end of a boot: the TPM signs the PCRs this boot extended (and the
//! firmware's and boot loader's, 0-9, and shim's, 14) together with a digest of the boot's report, with
//! an attestation key (AK) the TPM derives from its endorsement seed.
//!
//! Contract: [`quote`] sends three commands over the measurer's TPM -
//! `TPM2_CreatePrimary` of the AK template under the endorsement hierarchy
//! ([`crate::formats::tpm::attest::ak_template`]: the same key every boot, nothing
//! stored), `TPM2_Quote` with the caller's qualifying data over the pinned PCRs of the
//! PCR plan ([`PINNED_PCRS`]: 0-9 and shim's 14) and the PCRs the measurer touched, in
//! every active bank its event log records (a legacy SHA-1 firmware log: the SHA-1 bank
//! alone, the only one a verifier can replay), `TPM2_FlushContext` of the AK (also when
//! the quote fails) - and returns what the report carries ([`Quote`]): the AK's public area
//! and name, the `TPMS_ATTEST` and `TPMT_SIGNATURE` as tpm2-tools writes them (base64),
//! the selection, the TPM's clock and reset counters. A TPM that failed before, or a
//! boot already sealed ([`super::measure::Measurer::seal`]), is not asked. Failures are returned as text for the report; they never change the decision
//! (it is measured before the quote).
//!
//! Current limits: the endorsement hierarchy must have no password (the TPM's default);
//! the AK is ECC P-256 or RSA 2048 with SHA-256.

use std::time::Instant;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::measure::Measurer;
use crate::formats::tpm::attest::{ak_template, format_selection, ClockInfo, KeyKind};
use crate::sys::tpm::RH_ENDORSEMENT;

use crate::formats::tpm::measurement::PINNED_PCRS;

/// What the report says about the quote of this boot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Attestation {
    /// The quote, when one was made.
    pub quote: Option<Quote>,
    /// Why there is no quote.
    pub failure: Option<String>,
    /// TPM commands the quote took and the time spent waiting for the TPM.
    pub commands: u64,
    pub time_us: u64,
}

/// A TPM quote bound to the report: its qualifying data is the SHA-256 of the report's
/// canonical JSON without `attestation` (`report::json::quoted_digest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Quote {
    /// The AK's type: `ecc` (P-256) or `rsa` (2048).
    pub ak: String,
    /// The AK's name, hex: `nameAlg || H(TPMT_PUBLIC)`.
    pub ak_name: String,
    /// The AK's `TPM2B_PUBLIC`, base64 (`tpm2_checkquote -u`).
    pub ak_public: String,
    /// The PCRs quoted, as tpm2-tools writes a selection (`sha256:0,1,...+sha1:...`).
    pub pcrs: String,
    /// The `TPMS_ATTEST` the TPM signed, base64 (`tpm2_checkquote -m`).
    pub attest: String,
    /// The `TPMT_SIGNATURE`, base64 (`tpm2_checkquote -s`).
    pub signature: String,
    /// The TPM's clock (ms) and counters at the quote, as the quote holds them.
    pub clock: ClockInfo,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

impl Quote {
    /// The `TPMS_ATTEST` bytes (`None` when `attest` is not base64).
    pub fn attest_bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.attest)
            .ok()
    }
}

/// Quotes with `qualifying` data (at most 64 bytes) by the AK of `kind`.
pub fn quote(m: &mut Measurer, kind: KeyKind, qualifying: &[u8]) -> Attestation {
    let mut out = Attestation::default();
    let Some((tpm, banks, touched)) = m.client() else {
        out.failure = Some(match &m.report.failure {
            Some(f) => format!("the TPM failed earlier: {f}"),
            None if m.is_sealed() => "the boot was sealed after its quote".into(),
            None => "no TPM".into(),
        });
        return out;
    };
    let before = tpm.stats();
    let t0 = Instant::now();
    let mut pcrs: Vec<u32> = PINNED_PCRS.iter().chain(touched.iter()).copied().collect();
    pcrs.sort_unstable();
    pcrs.dedup();
    let sel: Vec<_> = banks.iter().map(|b| (*b, pcrs.clone())).collect();
    let result = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(kind))
        .and_then(|ak| {
            let q = tpm.quote(ak.handle, qualifying, &sel);
            let flushed = tpm.flush_context(ak.handle);
            let (attest, sig) = q?;
            flushed?;
            Ok((ak.public, attest, sig))
        });
    let after = tpm.stats();
    out.commands = u64::from(after.commands.saturating_sub(before.commands));
    out.time_us =
        u64::try_from(after.time.saturating_sub(before.time).as_micros()).unwrap_or(u64::MAX);
    match result {
        Ok((public, attest, sig)) => {
            out.quote = Some(Quote {
                ak: kind.name().into(),
                ak_name: crate::util::hex(&public.name()),
                ak_public: b64(&public.to_2b()),
                pcrs: format_selection(&attest.pcr_select),
                attest: b64(&attest.bytes),
                signature: b64(&sig.to_bytes()),
                clock: attest.clock,
            });
            log::info!(
                "quoted {} in {} ms",
                format_selection(&sel),
                t0.elapsed().as_millis()
            );
        }
        Err(e) => out.failure = Some(e.to_string()),
    }
    out
}

//! TPM 2.0 formats, in pure Rust (no TSS, no C): the command and response wire format
//! ([`wire`]), the measurement logs ([`eventlog`], [`cel`]), the PCR banks' hash
//! algorithms ([`HashAlg`]) and PCR replay. The client that talks to a TPM is
//! [`crate::sys::tpm`].
//!
//! Contract:
//! - [`wire`] builds commands (TCG TPM 2.0 Part 2/3, big-endian) and reads responses with
//!   checked access: tag, size field against the bytes received, response code (decoded
//!   by [`ResponseCode`], always with its hex value), exact parameter lengths.
//! - [`eventlog`] parses, builds, extends and replays the TCG PC Client binary log,
//!   crypto-agile or legacy SHA-1 (little-endian, as in `/sys/kernel/security/tpm0/binary_bios_measurements`);
//!   our records are `EV_IPL` events. [`cel`] writes, parses and replays systemd's CEL-JSON
//!   measurement log (`/run/log/systemd/tpm2-measure.log`). Parsers are pure functions
//!   over bytes; malformed input gives an error naming the byte offset, never a panic.
//! - PCR values are compared as [`PcrValues`]: bank, then PCR index, then the digest.
//! - [`TpmError`] is the one error type of the TPM code, transport errors included.
//!
//! Current limits: banks other than SHA-1, SHA-256, SHA-384 and SHA-512 are ignored. The
//! replay starts every PCR from zeros (as `tpm2_eventlog` does), so it does not model the
//! DRTM PCRs 17-22.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use sha2::Digest;

pub mod attest;
pub mod cel;
pub mod eventlog;
pub mod measurement;
pub mod wire;

pub use wire::ResponseCode;

/// Expected or read PCR values: bank, then PCR index, then the value.
pub type PcrValues = BTreeMap<HashAlg, BTreeMap<u32, Vec<u8>>>;

/// A TPM, transport or TPM-response problem. Errors of a command name it (`TPM2_PCR_Read`),
/// transport errors name the device or address, response codes are shown by name and hex.
#[derive(Debug, thiserror::Error)]
pub enum TpmError {
    /// Neither device node exists under the /dev root.
    #[error("no TPM: neither {} nor {} exists", .rm.display(), .raw.display())]
    NoDevice { rm: PathBuf, raw: PathBuf },
    /// A system call on the device or socket failed.
    #[error("{endpoint}: {what}: {source}")]
    Io {
        endpoint: String,
        what: &'static str,
        source: io::Error,
    },
    /// No (complete) response arrived before the deadline.
    #[error("{endpoint}: no response within {} ms", .after.as_millis())]
    Timeout { endpoint: String, after: Duration },
    /// The transport saw a broken exchange: short read, size field disagreeing with the
    /// bytes received, peer closed, or a previous failure left the channel unusable.
    #[error("{endpoint}: {why}")]
    Channel { endpoint: String, why: String },
    /// A transport error while running a command.
    #[error("{command}: {source}")]
    Command {
        command: &'static str,
        source: Box<TpmError>,
    },
    /// The response is not a well-formed answer to the command.
    #[error("{command}: malformed response: {why}")]
    BadResponse { command: &'static str, why: String },
    /// A TPM structure read from a file or another party (a quote, a signature, a public
    /// area) is not well formed.
    #[error("{what}: malformed: {why}")]
    Malformed { what: &'static str, why: String },
    /// The TPM refused the command.
    #[error("{command} failed: {rc}")]
    Rc {
        command: &'static str,
        rc: ResponseCode,
    },
    /// The TPM kept answering "retry later" (`TPM_RC_RETRY`, `YIELDED`, `TESTING`).
    #[error("{command}: TPM still busy after {tries} tries: {rc}")]
    Busy {
        command: &'static str,
        rc: ResponseCode,
        tries: u32,
    },
    /// The caller's arguments cannot make a valid command.
    #[error("{command}: {why}")]
    Invalid { command: &'static str, why: String },
}

impl TpmError {
    /// The TPM response code behind this error, if the TPM answered with one.
    pub fn response_code(&self) -> Option<ResponseCode> {
        match self {
            TpmError::Rc { rc, .. } | TpmError::Busy { rc, .. } => Some(*rc),
            TpmError::Command { source, .. } => source.response_code(),
            _ => None,
        }
    }

    /// Whether this error is (or wraps) a transport timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            TpmError::Timeout { .. } => true,
            TpmError::Command { source, .. } => source.is_timeout(),
            _ => false,
        }
    }
}

/// A PCR bank's hash algorithm, as the TPM and the event logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HashAlg {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlg {
    /// Every supported algorithm.
    pub const ALL: [HashAlg; 4] = [
        HashAlg::Sha1,
        HashAlg::Sha256,
        HashAlg::Sha384,
        HashAlg::Sha512,
    ];

    /// The `TPM_ALG_ID`.
    pub fn alg_id(self) -> u16 {
        match self {
            HashAlg::Sha1 => 0x0004,
            HashAlg::Sha256 => 0x000B,
            HashAlg::Sha384 => 0x000C,
            HashAlg::Sha512 => 0x000D,
        }
    }

    /// From a `TPM_ALG_ID`; `None` for algorithms we do not support.
    pub fn from_alg_id(id: u16) -> Option<HashAlg> {
        HashAlg::ALL.into_iter().find(|a| a.alg_id() == id)
    }

    /// Digest size in bytes.
    pub fn size(self) -> usize {
        match self {
            HashAlg::Sha1 => 20,
            HashAlg::Sha256 => 32,
            HashAlg::Sha384 => 48,
            HashAlg::Sha512 => 64,
        }
    }

    /// The name tpm2-tools and systemd use: `sha1`, `sha256`, `sha384`, `sha512`.
    pub fn name(self) -> &'static str {
        match self {
            HashAlg::Sha1 => "sha1",
            HashAlg::Sha256 => "sha256",
            HashAlg::Sha384 => "sha384",
            HashAlg::Sha512 => "sha512",
        }
    }

    /// From [`HashAlg::name`] (any case).
    pub fn from_name(name: &str) -> Option<HashAlg> {
        HashAlg::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }

    /// Digest of `data`.
    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            HashAlg::Sha1 => sha1::Sha1::digest(data).to_vec(),
            HashAlg::Sha256 => sha2::Sha256::digest(data).to_vec(),
            HashAlg::Sha384 => sha2::Sha384::digest(data).to_vec(),
            HashAlg::Sha512 => sha2::Sha512::digest(data).to_vec(),
        }
    }

    /// A PCR extend: `H(old || digest)`.
    pub fn extend(self, old: &[u8], digest: &[u8]) -> Vec<u8> {
        let mut cat = Vec::with_capacity(old.len() + digest.len());
        cat.extend_from_slice(old);
        cat.extend_from_slice(digest);
        self.digest(&cat)
    }
}

impl std::fmt::Display for HashAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The PCR's current value in a replay, starting from zeros.
/// PCRs of a PC Client TPM 2.0 (0-23): a log record for any other index is malformed.
pub const PCR_COUNT: u32 = 24;

pub(crate) fn pcr_slot(values: &mut PcrValues, alg: HashAlg, pcr: u32) -> &mut Vec<u8> {
    values
        .entry(alg)
        .or_default()
        .entry(pcr)
        .or_insert_with(|| vec![0; alg.size()])
}

/// Replays one extend into `values`.
pub(crate) fn replay_extend(values: &mut PcrValues, alg: HashAlg, pcr: u32, digest: &[u8]) {
    let slot = pcr_slot(values, alg, pcr);
    *slot = alg.extend(slot, digest);
}

/// Hex, as everywhere in the crate ([`crate::util::hex`], [`crate::util::unhex`]).
pub use crate::util::{hex as to_hex, unhex as from_hex};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_alg_table() {
        for a in HashAlg::ALL {
            assert_eq!(HashAlg::from_alg_id(a.alg_id()), Some(a));
            assert_eq!(HashAlg::from_name(a.name()), Some(a));
            assert_eq!(a.digest(b"abc").len(), a.size());
        }
        assert_eq!(HashAlg::from_alg_id(0x0012), None); // sm3_256
        assert_eq!(HashAlg::from_name("SHA256"), Some(HashAlg::Sha256));
        assert_eq!(
            to_hex(&HashAlg::Sha256.digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            to_hex(&HashAlg::Sha1.digest(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn extend_is_hash_of_concatenation() {
        let zero = [0u8; 32];
        let d = HashAlg::Sha256.digest(b"x");
        let mut cat = zero.to_vec();
        cat.extend_from_slice(&d);
        assert_eq!(
            HashAlg::Sha256.extend(&zero, &d),
            HashAlg::Sha256.digest(&cat)
        );
    }

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0x7f, 0x80, 0xff];
        assert_eq!(to_hex(&b), "00017f80ff");
        assert_eq!(from_hex("00017F80ff"), Some(b.to_vec()));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(from_hex(""), Some(vec![]));
    }

    #[test]
    fn error_helpers_see_through_command_wrapper() {
        let e = TpmError::Command {
            command: "TPM2_PCR_Read",
            source: Box::new(TpmError::Timeout {
                endpoint: "127.0.0.1:1".into(),
                after: Duration::from_millis(5),
            }),
        };
        assert!(e.is_timeout());
        assert_eq!(
            e.to_string(),
            "TPM2_PCR_Read: 127.0.0.1:1: no response within 5 ms"
        );
        let e = TpmError::Rc {
            command: "TPM2_PCR_Extend",
            rc: ResponseCode(0x907),
        };
        assert_eq!(e.response_code(), Some(ResponseCode(0x907)));
        assert!(!e.is_timeout());
    }
}

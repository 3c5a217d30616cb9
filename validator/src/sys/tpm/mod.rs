//! The TPM 2.0 client: one command to the TPM, one checked response back, with a
//! deadline. Pure Rust over the device node or a socket; the wire format lives in
//! [`crate::formats::tpm`].
//!
//! Contract:
//! - [`Transport`] moves one command and one response: [`DeviceTransport`] talks to
//!   `/dev/tpmrm0` (falling back to `/dev/tpm0`) under a /dev root given as a parameter,
//!   and waits with `poll(2)`; [`TcpTransport`] speaks the raw command stream of `swtpm
//!   socket --server type=tcp` (tests, CLI option). A transport that timed out or saw a
//!   broken response refuses further commands: reopen it.
//! - [`Tpm`] sends the commands and checks every response. `TPM_RC_RETRY`,
//!   `TPM_RC_YIELDED` and `TPM_RC_TESTING` are retried with a bounded backoff (5 tries,
//!   waits doubling from 10 ms, at most 200 ms), and every command has a timeout (2 s
//!   unless set with [`Tpm::with_timeout`]), so a call returns within 5 timeouts plus
//!   150 ms at worst. [`Tpm::stats`] counts the commands sent (retries included) and the
//!   time spent waiting for the TPM. Costs: `get_pcr_banks`, `pcr_extend` (all banks at
//!   once) and `startup_clear` are one command each; `pcr_read` is one command unless the
//!   TPM returns fewer banks than asked for.
//!
//! - Attestation: CreatePrimary (the AK and EK from templates under the
//!   endorsement hierarchy), ReadPublic, Quote, FlushContext, NV_ReadPublic and NV_Read
//!   (the EK certificate), one command each (NV_Read one per 512 bytes).
//!
//! Current limits: only the commands the gate and attestation need (Startup,
//! GetCapability for the PCR banks, PCR_Extend and the others with the empty password
//! session, PCR_Read, the attestation commands above); no HMAC or policy sessions, no
//! locality control (commands go out at the locality the kernel or swtpm uses, normally
//! 0, which can extend PCRs 0-16 and 23). PCRs are numbered 0..32. On
//! kernels without non-blocking TPM I/O (before 4.20) the write itself waits for the
//! TPM, so the timeout only bounds the wait after it.

mod attest;
mod client;
mod transport;

pub use attest::{LoadedKey, NvPublic, RH_ENDORSEMENT, RH_OWNER};
pub use client::{Tpm, TpmStats, DEFAULT_TIMEOUT};
pub use transport::{DeviceTransport, TcpTransport, Transport};

//! Layer 10 (below `boot`, which does not use it): attestation for a verifier - what a good boot of an image
//! measures, predicted at build time ([`predict`], written as a [`reference`](mod@reference) file), and
//! the check of a node's report, quote and event log against it ([`verify`]). The node's
//! side (the quote at the end of every boot) is [`crate::runtime::attest`].
//!
//! Contract: pure functions over bytes and files given as parameters; nothing here runs
//! in PID 1. A fleet service calls [`verify::verify_report`] as `validator attest verify`
//! does.
//!
//! Current limits: see each module (the firmware's PCRs are not predicted).

pub mod predict;
pub mod reference;
pub mod verify;

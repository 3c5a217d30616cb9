//! Layer 7: what the boot stages share at run time, so that no stage uses another: the
//! TPM measurer ([`measure`]) and the quote at the end of a boot ([`attest`]), finding and waiting for block devices ([`devices`]) and the
//! verity root's partitions ([`verity_parts`]), reading critical files in full
//! ([`critical`]), loading gated modules ([`modload`]) and reading the kernel's taint
//! ([`taint`]), resolving a path inside the new root ([`rootpath`]), the node's
//! identity ([`node`]), how a boot that does not hand over ends ([`power`]), and the A/B
//! state ([`slot`]: the boot loaders, our record, whether a slot's kernel would start),
//! which the `slot` stage, the operator's `validator slot` and `attest predict` share,
//! and what systemd-stub said of a boot through a Unified Kernel Image ([`uki`]).
//!
//! Contract: each module takes its roots (`/sys`, `/dev`, `/proc`, `/run`, the new root)
//! and its policy as parameters; nothing here knows the stages' `Context` or the report
//! (both are built on top). Errors are typed per module and carry what they are about;
//! their fault class is given by the stages that return them.
//!
//! Current limits: x86-64 partition types; one TPM.

pub mod attest;
pub mod critical;
pub mod devices;
pub mod measure;
pub mod modload;
pub mod node;
pub mod power;
pub mod read_fault;
pub mod rootpath;
pub mod slot;
pub mod taint;
pub mod uefi_keys;
pub mod uki;
pub mod verity_parts;

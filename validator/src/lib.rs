//! The boot gate of a GPU node: the checks and the boot flow that the PID-1 init runs in
//! the initramfs, as a library, plus the `validator` CLI for hosts and live nodes.
//!
//! Contract: one module per boot stage ([`cmdline`], [`bom`], [`measure`], [`modules`]
//! with its gate, [`storage`], [`verity`], [`report`], with [`boot`] running them in order
//! and [`pid1`] doing what only PID 1 does), parsers that are pure functions over bytes
//! ([`cmdline::split`], [`bom::parse`], [`gpt`], [`modules::index`], [`modules::modinfo`],
//! [`modules::sig`], [`pkcs7`], [`vmlinuz`], [`verity::superblock`], [`verity::sig`],
//! [`tpm`]'s responses and event logs), the trust store ([`trust`]), a pure-Rust TPM 2.0
//! client ([`tpm`]), and one small [`sys`] layer where the system calls and ioctls live
//! ([`sys::dm`] for device-mapper). Every
//! check takes its roots (`/sys`, `/proc`, `/dev`, the new root) as parameters, so it runs
//! against fixture trees as well as on a live node. Errors carry the path, device or
//! module they are about.
//!
//! Current limits: no A/B slot handling and no GPU/NIC preflight yet, so every failed
//! stage stops the boot with the report on the console (image, hardware and platform
//! faults are told apart in the report already). The gate checks the modules the
//! initramfs loads; modules on the real root are not gated yet. x86-64 only (DPS types,
//! bzImage, 64-bit module layout).

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod bom;
pub mod boot;
pub mod cmdline;
pub mod compress;
pub mod gpt;
pub mod kmsg;
pub mod measure;
pub mod modules;
pub mod pid1;
pub mod pkcs7;
pub mod report;
pub mod storage;
pub mod sys;
pub mod tpm;
pub mod trust;
pub mod verity;
pub mod vmlinuz;

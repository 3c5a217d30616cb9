//! The boot gate of a GPU node: the checks and the boot flow that the PID-1 init runs in
//! the initramfs, as a library (the operator's CLI is the `validator-cli` crate).
//!
//! Contract: the crate is layered, each layer using only those before it (a test,
//! `tests/layers.rs`, fails on an import that points up):
//!
//! 1. [`util`]: hex, atomic writes, bounded reads of input files, integer readers;
//! 2. [`formats`]: pure parsers over bytes (GPT, compression, vmlinuz, kernel modules and
//!    their index, PKCS#7, verity, TPM wire format and event logs);
//! 3. [`trust`]: the certificate store and signature verification (RSA, ECDSA, PKCS#7,
//!    the root-hash signature);
//! 4. [`sys`]: every system call and ioctl (device-mapper, module loading, mounts, the TPM
//!    device, `/dev/kmsg`, clocks);
//! 5. [`config`]: the BOM and the kernel command line, every policy enum and constant;
//! 6. [`gate`]: the module gate (policy, the kernel's rules, the ELF, CRC, vermagic and
//!    signature checks of a module file, batch checking), shared by the `modules` stage,
//!    the preflight's root drivers, the CLI and `mkinitramfs`;
//! 7. [`runtime`]: what the stages share at run time (the TPM measurer, device discovery,
//!    the final action, the node's identity), so that no stage uses another;
//! 8. [`stages`]: one module per boot stage, named as the report names it, in run order;
//!    each stage's error carries its fault class (image, hardware, platform) in its type;
//!    no stage uses another;
//! 9. [`report`]: the health report's schema and its renderings;
//! 10. [`attest`]: for a verifier, not PID 1 - the measurements of a good boot predicted
//!     from an image (the reference file) and the check of a node's report, quote and
//!     event log against them;
//! 11. [`boot`]: the order of the stages and the decision, nothing else.
//!
//! Every check takes its roots (`/sys`, `/proc`, `/dev`, the new root) as parameters, so it
//! runs against fixture trees as well as on a live node. Errors carry the path, device or
//! module they are about.
//!
//! Current limits: x86-64 only (DPS types, bzImage, 64-bit module layout); one TPM; the
//! boot loaders are GRUB (its environment block) and systemd-boot (BLS boot counting).
//! The gate checks the modules the initramfs loads and, in the preflight, the BOM's
//! `modules.root` on the verified root; what a failed boot does (pass, quarantine,
//! fallback to the other A/B slot by kexec or reboot, stop) is decided in [`boot`].

pub mod util;

pub mod formats;

pub mod trust;

pub mod sys;

pub mod config;

pub mod gate;

pub mod runtime;

pub mod stages;

pub mod report;

pub mod attest;

pub mod boot;

//! Layer 2: pure parsers over bytes, for every format the boot reads from an untrusted
//! place (disk, initramfs, firmware, kernel image, TPM).
//!
//! Contract: a parser takes bytes (or a `FileExt` reader for the block-level formats) and
//! returns a value or an error naming the field and offset; it never panics on any input,
//! does no system call of its own and knows no policy. Each parser has unit tests (most
//! also a mutation test in `validator/tests/parsers_no_panic.rs`) and is driven by a fuzz
//! target (`PARSERS` in
//! `test-support/src/fuzz/mod.rs` says which), or is listed with the reason under "Parsers without a
//! fuzz target" in `docs/FUZZING.md`; `validator/tests/fuzzing_doc.rs` keeps this true.
//! [`newc`] also holds the one writer of its format (used by `mkinitramfs` and the kexec).
//!
//! Current limits: x86-64 only where the format is architecture-specific (bzImage, the
//! 64-bit module layout, DPS partition types).
//!
//! [`sysfs`] parses the values the preflight reads from sysfs, procfs and the root's
//! dpkg database (PCI ids, link speeds, InfiniBand ports, NVIDIA procfs).

pub mod bls;
pub mod compress;
pub mod efisiglist;
pub mod fsimage;
pub mod gpt;
pub mod grubenv;
pub mod kmod;
pub mod newc;
pub mod nfd;
pub mod oid;
pub mod pe;
pub mod pkcs7;
pub mod proccrypto;
pub mod procstatus;
pub mod sbat;
pub mod slotstate;
pub mod sysfs;
pub mod tpm;
pub mod uki;
pub mod verity;
pub mod vmlinuz;
pub mod x509time;

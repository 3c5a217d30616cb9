//! The fuzz targets' entry points: one function per parser of untrusted input, each taking
//! the fuzzer's bytes, running the parser and, where the format has one, its round trip
//! (grubenv set/delete, slot state encode/decode, newc writer against the cpio reader,
//! `Module.symvers` text, event logs, CEL-JSON, verity superblocks and hash trees, BOM
//! TOML, BLS names, NFD feature files, the report's JSON and its renderings).
//!
//! Contract: a function returns normally for every input; a panic is a finding, either
//! the parser's own or a broken invariant asserted here (a round trip that does not give
//! back what went in, a verdict that passes what it must refuse). The same functions run
//! under libFuzzer (`fuzz/fuzz_targets/<name>.rs`, built with `cargo +nightly fuzz`) and,
//! without libFuzzer, over the committed inputs under `fuzz/regressions/<name>/` in the
//! stable test suite (`validator/tests/fuzz_regressions.rs`), so a fixed finding stays
//! fixed in CI. [`TARGETS`] is the one list of names; [`PARSERS`] maps each parser of
//! `validator::formats` to its target (`validator/tests/fuzzing_doc.rs` checks it).
//!
//! The targets live by what they parse: `boot` (command line, BOM, GPT, verity, the
//! root image, grubenv, BLS, the slot record), `kmod` (modules and the initramfs),
//! `trust` (signatures and certificates), `tpm` and `report` (sysfs and the
//! report's renderings); this file holds the lists and the framing they share.
//!
//! Inputs that need more than one part (a certificate and a signature, a grubenv block
//! and the edits to make) are framed as described at each function, so a seed is still a
//! real file with a small prefix or suffix.
//!
//! Current limits: decompression and kernel-image targets use small output limits
//! ([`OUTPUT_LIMIT`]) so a decompression bomb is a refusal, not an out-of-memory; the TPM
//! target withholds the "busy" response codes the client retries after a sleep (they
//! would stall the fuzzer), so the retry loop itself is not fuzzed.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;
use validator::formats;
use validator::trust::{Cert, TrustStore};

mod boot;
mod kmod;
mod report;
mod tpm;
mod trust;

pub use boot::*;
pub use kmod::*;
pub use report::*;
pub use tpm::*;
pub use trust::*;

/// Output limit of the decompressors and the kernel-image target: small enough that a
/// bomb stops early, large enough for a real module or a cut kernel payload.
pub const OUTPUT_LIMIT: usize = 16 << 20;

/// A target's entry point.
pub type Entry = fn(&[u8]);

/// Every target: its name (the fuzz target's, the corpus and regression directory's) and
/// its entry point.
pub const TARGETS: &[(&str, Entry)] = &[
    ("cmdline", cmdline),
    ("bom", bom),
    ("cpio", cpio),
    ("modinfo", modinfo),
    ("modsig", modsig),
    ("pkcs7", pkcs7),
    ("authenticode", authenticode),
    ("efisiglist", efisiglist),
    ("sbat", sbat),
    ("modprobe", modprobe),
    ("x509", x509),
    ("vmlinuz", vmlinuz),
    ("verity_superblock", verity_superblock),
    ("verity_sig", verity_sig),
    ("gpt", gpt),
    ("tpm_response", tpm_response),
    ("tpm_attest", tpm_attest),
    ("eventlog", eventlog),
    ("cel", cel),
    ("grubenv", grubenv),
    ("bls", bls),
    ("slotstate", slotstate),
    ("compress", compress),
    ("kmod_index", kmod_index),
    ("symvers", symvers),
    ("sysfs", sysfs),
    ("report", report),
    ("nfd", nfd),
    ("verity_tree", verity_tree),
    ("fsimage", fsimage),
];

/// Every parser module of `validator::formats` (its path under `formats`) and the target
/// that drives it; `validator/tests/fuzzing_doc.rs` fails when a module under
/// `validator/src/formats/` is neither here nor in `docs/FUZZING.md`'s table "Parsers
/// without a fuzz target", or when an entry here names no module or no target.
pub const PARSERS: &[(&str, &str)] = &[
    ("bls", "bls"),
    ("compress", "compress"),
    ("gpt", "gpt"),
    ("grubenv", "grubenv"),
    ("kmod", "kmod_index"),
    ("kmod::index", "kmod_index"),
    ("kmod::modinfo", "modinfo"),
    ("kmod::modprobe", "modprobe"),
    ("kmod::sig", "modsig"),
    ("kmod::symvers", "symvers"),
    ("newc", "cpio"),
    ("efisiglist", "efisiglist"),
    ("fsimage", "fsimage"),
    ("sbat", "sbat"),
    ("nfd", "nfd"),
    ("pe", "authenticode"),
    ("pe::layout", "authenticode"),
    ("uki", "authenticode"),
    ("pkcs7", "pkcs7"),
    ("x509time", "pkcs7"),
    ("oid", "pkcs7"),
    ("proccrypto", "sysfs"),
    ("procstatus", "sysfs"),
    ("slotstate", "slotstate"),
    ("sysfs", "sysfs"),
    ("tpm", "tpm_response"),
    ("tpm::attest", "tpm_attest"),
    ("tpm::attest::selection", "tpm_attest"),
    ("tpm::cel", "cel"),
    ("tpm::eventlog", "eventlog"),
    ("tpm::measurement", "eventlog"),
    ("tpm::wire", "tpm_response"),
    ("verity::sig", "verity_sig"),
    ("verity::superblock", "verity_superblock"),
    ("verity::tree", "verity_tree"),
    ("vmlinuz", "vmlinuz"),
];

/// The entry point of `name`.
pub fn target(name: &str) -> Option<Entry> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// `[u16 little-endian length][certificate DER][rest]`: a trust store holding that
/// certificate when it parses (else an empty store), and the rest. Without a full prefix
/// the store is empty and the rest is everything.
fn framed_store(data: &[u8]) -> (TrustStore, &[u8]) {
    let mut store = TrustStore::new();
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return (store, data);
    };
    let len = usize::from(u16::from_le_bytes(*len));
    let Some((der, rest)) = rest.split_at_checked(len) else {
        return (store, data);
    };
    if let Ok(c) = Cert::from_der(der, "fuzz") {
        store.add(c);
    }
    (store, rest)
}

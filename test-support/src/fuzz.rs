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
    ("pkcs7", "pkcs7"),
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

/// A root filesystem image's first bytes (`formats::fsimage`): the filesystem and the
/// size its superblock claims. A size comes only with a filesystem; more bytes after the
/// superblock never change either answer.
pub fn fsimage(data: &[u8]) {
    use formats::fsimage::{detect, size};
    let (fs, n) = (detect(data), size(data));
    assert!(n.is_none() || fs.is_some(), "a size without a filesystem");
    if data.len() >= 4096 {
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"trailing bytes");
        assert_eq!(
            (detect(&longer), size(&longer)),
            (fs, n),
            "trailing bytes changed it"
        );
    }
}

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

/// Kernel command line: the kernel's splitting and our keys.
pub fn cmdline(data: &[u8]) {
    let line = String::from_utf8_lossy(data);
    let split = validator::config::cmdline::split(&line);
    let args = validator::config::cmdline::BootArgs::parse(&line);
    // The arguments after `--` are the same whichever way the line is read.
    assert_eq!(args.init_args, split.init_args);
}

/// BOM: parse, and a parsed BOM written back as TOML parses to the same BOM.
pub fn bom(data: &[u8]) {
    let Ok(loaded) = validator::config::bom::parse(data, Path::new("fuzz.toml")) else {
        return;
    };
    let text = loaded
        .bom
        .to_toml()
        .unwrap_or_else(|e| panic!("a parsed BOM does not serialise: {e}"));
    match validator::config::bom::parse(text.as_bytes(), Path::new("again.toml")) {
        Ok(again) => assert_eq!(again.bom, loaded.bom, "BOM changed through TOML:\n{text}"),
        Err(e) => panic!("a parsed BOM written back does not parse: {e}\n{text}"),
    }
}

/// The initramfs readers: `mkinitramfs list`'s unpack (plain and compressed parts, as the
/// kernel's `unpack_to_rootfs`, output limited to [`OUTPUT_LIMIT`]) and the plain newc
/// reader, which agree where both read; then what was read, written again through both
/// front ends of the one newc writer (`formats::newc`: mkinitramfs' sorted [`Archive`] and
/// the kexec stage's streaming `Writer`) and read back.
///
/// [`Archive`]: mkinitramfs::cpio::Archive
pub fn cpio(data: &[u8]) {
    let unpacked = mkinitramfs::unpack::unpack(data, OUTPUT_LIMIT);
    let read = mkinitramfs::cpio::read(data);
    if let (Ok(u), Ok(r)) = (&unpacked, &read) {
        assert_eq!(u, r, "unpack and read disagree");
    }
    let entries = match (unpacked, read) {
        (Ok(e), _) | (_, Ok(e)) => e,
        _ => return,
    };
    // mkinitramfs' writer: every entry with a clean path and a kind it writes.
    let mut archive = mkinitramfs::cpio::Archive::new();
    let mut newc = formats::newc::Writer::new();
    let mut files = std::collections::BTreeMap::new();
    for e in &entries {
        use mkinitramfs::cpio::{Entry, Kind};
        let kind = match e.mode & 0o170000 {
            0o040000 => Kind::Dir,
            0o100000 => Kind::File(e.data.clone()),
            0o120000 => match String::from_utf8(e.data.clone()) {
                Ok(t) => Kind::Symlink(t),
                Err(_) => continue,
            },
            0o020000 => Kind::CharDev {
                major: e.rdev.0,
                minor: e.rdev.1,
            },
            0o060000 => Kind::BlockDev {
                major: e.rdev.0,
                minor: e.rdev.1,
            },
            _ => continue,
        };
        let regular = matches!(kind, Kind::File(_));
        if archive
            .add(
                &e.path,
                Entry {
                    kind,
                    perm: e.mode & 0o7777,
                },
            )
            .is_ok()
            && regular
        {
            files.insert(e.path.trim_start_matches('/').to_string(), e.data.clone());
        }
    }
    let written = archive.write(0);
    let back = mkinitramfs::cpio::read(&written)
        .unwrap_or_else(|e| panic!("mkinitramfs' own archive does not read back: {e}"));
    let mut got = std::collections::BTreeMap::new();
    for e in &back {
        if e.mode & 0o170000 == 0o100000 {
            got.insert(e.path.clone(), e.data.clone());
        }
    }
    assert_eq!(
        got, files,
        "regular files changed through mkinitramfs' writer"
    );
    // The validator's writer: the same regular files.
    for (path, data) in &files {
        newc.file(path, data);
    }
    let back = mkinitramfs::cpio::read(&newc.finish())
        .unwrap_or_else(|e| panic!("the kexec newc archive does not read back: {e}"));
    let got: std::collections::BTreeMap<String, Vec<u8>> =
        back.into_iter().map(|e| (e.path, e.data)).collect();
    assert_eq!(got, files, "regular files changed through the kexec writer");
}

/// A module's ELF: `.modinfo`, `__versions`, the exports, and the gate's whole check with
/// an empty trust store, which must never pass a module when signatures are required.
pub fn modinfo(data: &[u8]) {
    use validator::gate::{Gate, Policy};
    let _ = formats::kmod::modinfo::parse_elf(data);
    let _ = formats::kmod::modinfo::exports(data);
    let gate = Gate {
        policy: Policy {
            require_signature: true,
            ..Policy::default()
        },
        symvers: Some(formats::kmod::symvers::Symvers::default()),
        ..Gate::default()
    };
    let (v, _) = gate.check("fuzz", "fuzz.ko", data);
    assert!(!v.pass, "a module passed with an empty trust store: {v:?}");
}

/// A signed module with `[u16 len][certificate DER]` in front: the trailer, the PKCS#7,
/// the detached verification against a store holding that certificate, and the gate's
/// check with that store. What the gate passes must rest on the trust and on the body:
/// with an empty store it fails, and with one body byte changed it fails.
pub fn modsig(data: &[u8]) {
    use validator::gate::{Gate, Policy};
    let (store, module) = framed_store(data);
    let body_len = match formats::kmod::sig::split(module) {
        Ok(s) => {
            let _ = formats::pkcs7::parse(s.pkcs7);
            let _ = validator::trust::pkcs7::verify_detached(s.pkcs7, s.body, &store);
            Some(s.body.len())
        }
        Err(_) => None,
    };
    let policy = Policy {
        require_signature: true,
        ..Policy::default()
    };
    let gate = Gate {
        trust: store,
        policy: policy.clone(),
        ..Gate::default()
    };
    let (v, _) = gate.check("fuzz", "fuzz.ko", module);
    if !v.pass {
        return;
    }
    let untrusting = Gate {
        policy,
        ..Gate::default()
    };
    let (u, _) = untrusting.check("fuzz", "fuzz.ko", module);
    assert!(
        !u.pass,
        "the gate passed a module with no trusted key: {u:?}"
    );
    let body_len = body_len.unwrap_or_else(|| panic!("the gate passed an unsigned module: {v:?}"));
    let mut changed = module.to_vec();
    if let Some(b) = changed.get_mut(body_len / 2) {
        *b ^= 0x01;
    }
    let (c, _) = gate.check("fuzz", "fuzz.ko", &changed);
    assert!(
        !c.pass,
        "the gate passed a module after a body byte changed: {c:?}"
    );
}

/// A PKCS#7 signature on its own: parse, and verify it over empty content with no trust.
pub fn pkcs7(data: &[u8]) {
    if let Ok(signers) = formats::pkcs7::parse(data) {
        for s in &signers {
            let _ = s.key_id();
        }
    }
    assert!(
        validator::trust::pkcs7::verify_detached(data, b"", &TrustStore::new()).is_err(),
        "a signature verified against an empty trust store"
    );
}

/// A PE image and its Authenticode signatures, framed `[u16 LE length][certificate
/// DER][image]`: the image's hashed ranges and digest, each signature as Authenticode
/// PKCS#7 and its `SpcIndirectDataContent`, and the verdict against a store holding that
/// certificate, which must refuse when the store is empty.
pub fn authenticode(data: &[u8]) {
    use validator::trust::authenticode::{verify, Rule};
    let (store, image) = framed_store(data);
    if let Ok(pe) = formats::pe::parse(image) {
        for order in [
            formats::pe::SectionOrder::Kernel,
            formats::pe::SectionOrder::Firmware,
        ] {
            for r in pe.hashed(order) {
                assert!(r.end <= image.len(), "a hashed range past the end: {r:?}");
            }
            let _ = pe.digest(image, formats::pkcs7::HashAlg::Sha256, order);
        }
        for s in &pe.signatures {
            if let Some(der) = image.get(s.der.clone()) {
                if let Ok((_, content)) = formats::pkcs7::parse_authenticode(der) {
                    let _ = formats::pe::indirect_digest(&content);
                }
            }
        }
    }
    let _ = verify(image, &store, &[], Rule::Firmware);
    assert!(
        verify(image, &TrustStore::new(), &[], Rule::Kernel).is_err(),
        "an image verified against an empty trust store"
    );
}

/// UEFI signature databases (`db`, `dbx`, MOK lists).
pub fn efisiglist(data: &[u8]) {
    if let Ok(db) = formats::efisiglist::parse(data) {
        let n = db.entries.len() + db.other;
        assert!(n * 16 <= data.len(), "more entries than the bytes hold");
        let _ = db.certs().count();
        let _ = db.sha256s().count();
    }
}

/// SBAT: the bytes as an image's `.sbat` section and as a level, and the one judged
/// against the other both ways shim meets an image.
pub fn sbat(data: &[u8]) {
    use formats::sbat::{components, judge, Level, Loaded};
    let parsed = components(data);
    if let Ok(level) = Level::parse(data) {
        let _ = level.to_string();
        for loaded in [Loaded::ByShim, Loaded::ThroughProtocol] {
            let verdict = judge(Some(data), &level, loaded);
            // A section that does not parse is refused, whatever the level.
            if parsed.is_err() {
                assert!(verdict.is_err(), "an unparsed section passed");
            }
        }
    }
}

/// `modprobe.d` text and a kernel command line, split at the first NUL: the directives
/// and the command line's options and blacklist as kmod reads them. Module names are
/// kept in the kernel's spelling (respelling one changes nothing).
pub fn modprobe(data: &[u8]) {
    use formats::kmod::modprobe::{underscores, Config};
    let (conf, cmdline) = match data.iter().position(|&b| b == 0) {
        Some(i) => (
            data.get(..i).unwrap_or_default(),
            data.get(i + 1..).unwrap_or_default(),
        ),
        None => (data, &[][..]),
    };
    let mut c = Config::default();
    c.add_file("fuzz.conf", conf);
    c.add_cmdline(cmdline);
    for e in &c.options {
        assert_eq!(
            underscores(&e.module).as_deref(),
            Some(e.module.as_str()),
            "a module name not in the kernel's spelling"
        );
        let _ = c.options(&e.module);
    }
    for (m, _) in &c.blacklist {
        let _ = c.blacklisted(m);
    }
}

/// X.509: a DER certificate, PEM text, and a trust store's reading of either.
pub fn x509(data: &[u8]) {
    if let Ok(c) = Cert::from_der(data, "fuzz") {
        let _ = c.label();
        // The kernel parser's self-signed check, and a certificate as its own issuer.
        if validator::trust::pkcs7::self_signed(&c, |_| true).unwrap_or(false) {
            assert!(
                validator::trust::pkcs7::verify_cert(&c, &c, |_| true).is_ok(),
                "a self-signed certificate whose self-signature does not verify"
            );
        }
    }
    let _ = validator::trust::pem_certificates(&String::from_utf8_lossy(data));
    let mut store = TrustStore::new();
    let _ = store.add_bytes(data, "fuzz");
}

/// A kernel image: bzImage or vmlinux, payload decompressed up to [`OUTPUT_LIMIT`], then
/// release, vermagic, exported CRCs and built-in certificates.
pub fn vmlinuz(data: &[u8]) {
    let Ok(elf) = formats::vmlinuz::vmlinux_limited(data, OUTPUT_LIMIT) else {
        return;
    };
    assert!(elf.len() <= OUTPUT_LIMIT.max(data.len()));
    // `from_image` of an ELF does not decompress: the same reads the gate makes.
    let _ = formats::vmlinuz::KernelFacts::from_image(&elf);
    let _ = formats::vmlinuz::builtin_certs(&elf);
}

/// A dm-verity superblock: parse, encode back (same parameters), the tree geometry, and a
/// verification of the input as both data and hash device when small enough.
pub fn verity_superblock(data: &[u8]) {
    use formats::verity::{superblock, tree};
    let Ok(p) = superblock::parse(data) else {
        return;
    };
    let again = superblock::parse(&superblock::encode(&p))
        .unwrap_or_else(|e| panic!("an encoded superblock does not parse: {e}"));
    assert_eq!(again, p, "superblock changed through encode");
    for (offset, with_sb) in [(0, true), (4096, false)] {
        let Ok(g) = tree::Geometry::new(&p, offset, with_sb) else {
            continue;
        };
        if g.hash_end() <= data.len() as u64 && g.data_end() <= 1 << 20 {
            let dev = Mem(data);
            let root = vec![0u8; p.algorithm.digest_size()];
            let _ = tree::verify(
                &dev,
                data.len() as u64,
                &dev,
                data.len() as u64,
                &g,
                &root,
                1,
            );
            let _ = tree::top_matches(&dev, &g, &root);
        }
    }
}

/// `root-verity-sig` JSON with `[u16 len][certificate DER]` in front: parse, and verify
/// against a store holding that certificate.
pub fn verity_sig(data: &[u8]) {
    let (store, json) = framed_store(data);
    if let Ok(sig) = formats::verity::sig::parse(json) {
        let _ = validator::trust::rootsig::verify(&sig, &store);
    }
}

/// Bytes read at offsets, as a disk image in memory.
struct Mem<'a>(&'a [u8]);

impl FileExt for Mem<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let start = usize::try_from(offset)
            .ok()
            .filter(|o| *o <= self.0.len())
            .unwrap_or(self.0.len());
        let rest = self.0.get(start..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> std::io::Result<usize> {
        Err(std::io::Error::other("read-only"))
    }
}

/// GPT: a header from the first two sectors, its entries, and the whole table read from
/// the input as a disk of 512- and 4096-byte sectors.
pub fn gpt(data: &[u8]) {
    for sector in [512usize, 4096] {
        if let Some(s) = data.get(sector..) {
            if let Ok(h) = formats::gpt::parse_header(s.get(..sector).unwrap_or(s)) {
                let _ = formats::gpt::parse_entries(&h, data);
            }
        }
        let size = data.len() as u64;
        if let Ok(t) = formats::gpt::read_table(&Mem(data), size, sector as u64, Path::new("fuzz"))
        {
            // Every partition the table gives lies on the disk (the kernel's is_pte_valid).
            let last = size / sector as u64 - 1;
            for p in &t.partitions {
                assert!(
                    p.first_lba <= p.last_lba && p.last_lba <= last,
                    "partition {} ({}..{}) on a disk of LBAs 0..={last}",
                    p.number,
                    p.first_lba,
                    p.last_lba
                );
            }
        }
    }
}

/// `[selector][rest]`: the attestation structures a verifier reads from a node: 0 a
/// `TPMT_PUBLIC`, 1 a `TPM2B_PUBLIC`, 2 a `TPMS_ATTEST`, 3 a `TPMT_SIGNATURE`; 4 a
/// `[u16 big-endian length][TPM2B_PUBLIC][TPMT_SIGNATURE][TPMS_ATTEST]` checked as a
/// quote; 5 a reference file (`validator.reference/v1`); 6 a credential file
/// (`tpm2_makecredential -o`, written back the same). A public area written back
/// parses to the same; a signature too; a quote keeps exactly its bytes; a quote's
/// signature never verifies under a key that is no AK; a reference written back reads
/// the same.
pub fn tpm_attest(data: &[u8]) {
    use formats::tpm::attest::{Attest, Public, Signature};
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel % 7 == 6 {
        use formats::tpm::attest::CredentialFile;
        if let Ok(c) = CredentialFile::parse(rest) {
            assert_eq!(c.to_bytes(), rest, "a credential file writes back the same");
        }
        return;
    }
    if sel % 7 == 5 {
        // A PCR list (`sha256:0,7+sha1:11`) written back reads as the same selection.
        use formats::tpm::attest::{format_selection, parse_selection};
        if let Ok(p) = parse_selection(&String::from_utf8_lossy(rest)) {
            assert_eq!(
                parse_selection(&format_selection(&p)).ok().as_ref(),
                Some(&p),
                "a PCR list reads back the same"
            );
        }
        if let Ok(r) =
            validator::attest::reference::Reference::parse(&String::from_utf8_lossy(rest))
        {
            let again = validator::attest::reference::Reference::parse(&r.to_text());
            assert_eq!(
                again.ok().as_ref(),
                Some(&r),
                "a reference reads back the same"
            );
        }
        return;
    }
    match sel % 7 {
        0 => {
            if let Ok(p) = Public::parse(rest) {
                assert_eq!(p.bytes, rest, "a public area keeps its bytes");
                assert_eq!(Public::parse_2b(&p.to_2b()).ok(), Some(p.clone()));
                let _ = p.name();
            }
        }
        1 => {
            if let Ok(p) = Public::parse_2b(rest) {
                assert_eq!(p.to_2b(), rest, "a TPM2B_PUBLIC writes back the same");
            }
        }
        2 => {
            if let Ok(a) = Attest::parse(rest) {
                assert_eq!(a.bytes, rest, "a quote keeps its bytes");
            }
        }
        3 => {
            if let Ok(s) = Signature::parse(rest) {
                assert_eq!(s.to_bytes(), rest, "a signature writes back the same");
            }
        }
        _ => {
            let Some((len, rest)) = rest.split_first_chunk::<2>() else {
                return;
            };
            let n = usize::from(u16::from_be_bytes(*len)).min(rest.len());
            let (public, rest) = rest.split_at(n);
            let Ok(ak) = Public::parse_2b(public) else {
                return;
            };
            for cut in 0..rest.len().min(600) {
                let (sig, msg) = rest.split_at(cut);
                if let Ok(sig) = Signature::parse(sig) {
                    let r = validator::trust::quote::verify_signature(&ak, msg, &sig);
                    if !ak.is_attestation_key() {
                        assert!(r.is_err(), "only an AK's signature verifies");
                    }
                    let _ = Attest::parse(msg);
                }
            }
        }
    }
}

/// TPM responses: the input is the TPM's answers back to back (each as long as its
/// header's size field says), handed to our client for the commands the boot sends.
pub fn tpm_response(data: &[u8]) {
    use formats::tpm::{HashAlg, ResponseCode, TpmError};
    use validator::sys::tpm::{Tpm, Transport};

    struct Script<'a>(&'a [u8]);
    impl Transport for Script<'_> {
        fn transact(&mut self, _cmd: &[u8], _timeout: Duration) -> Result<Vec<u8>, TpmError> {
            let channel = |why: &str| TpmError::Channel {
                endpoint: "fuzz".into(),
                why: why.into(),
            };
            if self.0.is_empty() {
                return Err(channel("no more responses"));
            }
            let size = self
                .0
                .get(2..6)
                .map_or(self.0.len(), |b| {
                    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
                })
                .clamp(1, self.0.len());
            let (resp, rest) = self.0.split_at(size);
            self.0 = rest;
            let rc = resp
                .get(6..10)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            if ResponseCode(rc).is_retryable() {
                // The client would sleep before retrying: keep the fuzzer fast.
                return Err(channel("busy code withheld"));
            }
            Ok(resp.to_vec())
        }
    }

    let mut tpm = Tpm::new(Script(data));
    let _ = tpm.startup_clear();
    let banks = match tpm.get_pcr_banks() {
        Ok(b) => {
            for (i, x) in b.iter().enumerate() {
                assert!(!b[..i].contains(x), "bank {x} listed twice: {b:?}");
            }
            b
        }
        Err(_) => vec![HashAlg::Sha256],
    };
    let check = |r: Result<Vec<(HashAlg, Vec<u8>)>, TpmError>, banks: &[HashAlg]| {
        if let Ok(values) = r {
            assert_eq!(values.len(), banks.len());
            for ((alg, v), want) in values.iter().zip(banks) {
                assert_eq!(alg, want);
                assert_eq!(v.len(), alg.size(), "{alg} value of {} bytes", v.len());
            }
        }
    };
    check(tpm.pcr_read(0, &banks), &banks);
    let digests: Vec<(HashAlg, Vec<u8>)> = banks.iter().map(|b| (*b, b.digest(b"fuzz"))).collect();
    let _ = tpm.pcr_extend(11, &digests);
    check(tpm.pcr_read(11, &banks), &banks);
}

/// The TCG crypto-agile binary event log: parse, replay, and the log written back parses
/// to the same log and replays to the same values; every record read as one of our events
/// (`formats::tpm::measurement`) renders back to its bytes.
pub fn eventlog(data: &[u8]) {
    use formats::tpm::eventlog::EventLog;
    let Ok(log) = EventLog::parse(data) else {
        return;
    };
    let values = log.replay();
    let again = EventLog::parse(&log.to_bytes())
        .unwrap_or_else(|e| panic!("a parsed event log written back does not parse: {e}"));
    assert_eq!(again, log, "event log changed through to_bytes");
    assert_eq!(again.replay(), values);
    // Every record read as one of our events, as the verifier reads them: what reads
    // renders back to the same bytes and belongs on the PCR it was on.
    for e in log.events() {
        if let Ok(m) = formats::tpm::measurement::Measurement::parse(e.pcr, &e.data, 13) {
            assert_eq!(m.text().as_bytes(), &e.data[..], "{m:?}");
            assert_eq!(m.pcr(13), e.pcr, "{m:?}");
        }
    }
}

/// systemd's CEL-JSON log: parse, replay, and the records written back parse the same.
pub fn cel(data: &[u8]) {
    use formats::tpm::cel;
    let Ok(records) = cel::parse(data) else {
        return;
    };
    let values = cel::replay(&records);
    let bytes: Vec<u8> = records.iter().flat_map(|r| r.to_bytes()).collect();
    let again = cel::parse(&bytes)
        .unwrap_or_else(|e| panic!("parsed CEL records written back do not parse: {e}"));
    assert_eq!(again, records, "CEL records changed through to_bytes");
    assert_eq!(cel::replay(&again), values);
}

/// The GRUB environment block, then edits: the input is the block, a NUL byte, and edit
/// lines (`sNAME=VALUE` sets, `dNAME` deletes). After each edit the block keeps its size
/// and parses again; an edit that succeeds reads back as it says (the first line of that
/// name changed, appended or removed, every other variable as it was; `get` returns the
/// value set), a refused one leaves the variables as they were.
pub fn grubenv(data: &[u8]) {
    use formats::grubenv::GrubEnv;
    let (block, edits) = match data.iter().rposition(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(mut env) = GrubEnv::parse(block) else {
        return;
    };
    let size = env.as_bytes().len();
    assert_eq!(env.as_bytes(), block);
    for line in String::from_utf8_lossy(edits).split('\n') {
        let before = env.vars();
        let mut expect = before.clone();
        let result = if let Some(set) = line.strip_prefix('s') {
            let (name, value) = set.split_once('=').unwrap_or((set, ""));
            match expect.iter_mut().find(|(n, _)| n == name) {
                Some(v) => v.1 = value.to_string(),
                None => expect.push((name.to_string(), value.to_string())),
            }
            env.set(name, value).map(|()| Some((name, value)))
        } else if let Some(name) = line.strip_prefix('d') {
            if let Some(i) = expect.iter().position(|(n, _)| n == name) {
                expect.remove(i);
            }
            env.delete(name).map(|()| None)
        } else {
            continue;
        };
        assert_eq!(env.as_bytes().len(), size, "the block changed size");
        let again = GrubEnv::parse(env.as_bytes())
            .unwrap_or_else(|e| panic!("an edited block does not parse: {e}"));
        assert_eq!(again, env);
        // A name that is not UTF-8 reads (lossily) like U+FFFD: the model by text cannot
        // tell such names apart, the block's bytes can.
        let lossy = before.iter().any(|(n, _)| n.contains('\u{fffd}'));
        match result {
            Ok(set) => {
                if !lossy {
                    assert_eq!(env.vars(), expect, "edit {line:?}");
                }
                if let Some((name, value)) = set {
                    assert_eq!(env.get(name).as_deref(), Some(value), "edit {line:?}");
                }
            }
            // A refused edit leaves the block as it was.
            Err(_) => assert_eq!(
                env.vars(),
                before,
                "refused edit {line:?} changed the block"
            ),
        }
    }
}

/// Boot Loader Specification entries: the file name with its boot counters (the input's
/// first line), the entry file, and the EFI variable holding the booted entry's path.
pub fn bls(data: &[u8]) {
    use formats::bls::{efivar_utf16, Entry, EntryName};
    let _ = efivar_utf16(data, "fuzz");
    let _ = Entry::parse(data, "fuzz.conf");
    let text = String::from_utf8_lossy(data);
    let first = text.split('\n').next().unwrap_or("");
    let Ok(name) = EntryName::parse(first) else {
        return;
    };
    let again = EntryName::parse(&name.file_name())
        .unwrap_or_else(|e| panic!("{:?} does not parse again: {e}", name.file_name()));
    assert_eq!(again, name, "entry name changed through file_name");
    let bad = EntryName::parse(&name.marked_bad().file_name())
        .unwrap_or_else(|e| panic!("the bad mark of {first:?} does not parse: {e}"));
    assert!(bad.bad() && bad.id == name.id && bad.done == name.done);
    // Marking good drops the counters and keeps the id.
    let good = EntryName::parse(&name.marked_good().file_name())
        .unwrap_or_else(|e| panic!("the good mark of {first:?} does not parse: {e}"));
    assert!(
        !good.counting() && good.id == name.id,
        "{first:?} marked good: {good:?}"
    );
}

/// Our A/B state record: decode, encode back, decode again to the same record; the
/// choice between two copies.
pub fn slotstate(data: &[u8]) {
    use formats::slotstate::{decode, encode, newest, next_copy, FILE_SIZE};
    let r = decode(data);
    if let Ok(rec) = &r {
        let bytes = encode(rec, FILE_SIZE)
            .unwrap_or_else(|e| panic!("a decoded record does not encode: {e}"));
        let again =
            decode(&bytes).unwrap_or_else(|e| panic!("an encoded record does not decode: {e}"));
        assert_eq!(&again, rec, "state record changed through encode");
    }
    let copies = [r, decode(data.get(data.len() / 2..).unwrap_or_default())];
    let n = next_copy(&copies);
    if let Some((i, _)) = newest(&copies) {
        assert_ne!(i, n, "the next write would overwrite the newest copy");
    }
}

/// Decompression: the first byte picks the decoder (xz, zstd, gzip, legacy LZ4, then one
/// xz stream, zstd frame or gzip member, then the module file formats), the rest is the
/// input; output is limited to [`OUTPUT_LIMIT`].
pub fn compress(data: &[u8]) {
    use formats::compress as c;
    use formats::kmod::modinfo::Compression;
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    let out = match which % 7 {
        0 => c::xz(input, OUTPUT_LIMIT),
        1 => c::zstd(input, OUTPUT_LIMIT),
        2 => c::gzip(input, OUTPUT_LIMIT),
        3 => c::lz4_legacy(input, OUTPUT_LIMIT),
        // One stream, frame or member and where it ends (the initramfs and vmlinuz
        // readers continue after it).
        n => {
            let one = match n {
                4 => c::xz_stream(input, OUTPUT_LIMIT),
                5 => c::zstd_frame(input, OUTPUT_LIMIT),
                _ => c::gzip_member(input, OUTPUT_LIMIT),
            };
            if let Ok(d) = &one {
                assert!(
                    d.consumed <= input.len(),
                    "consumed {} of {}",
                    d.consumed,
                    input.len()
                );
            }
            one.map(|d| d.data)
        }
    };
    if let Ok(o) = out {
        assert!(o.len() <= OUTPUT_LIMIT, "{} bytes out", o.len());
    }
    // What a module file's name selects (the gate's path for .ko.xz/.zst/.gz), only for
    // inputs too small to expand past the limit.
    if input.len() < 4096 {
        let comp = [Compression::Xz, Compression::Zstd, Compression::Gzip][usize::from(which) % 3];
        let _ = formats::kmod::modinfo::decompress(input, comp);
    }
}

/// The module index (`modules.dep`, `modules.softdep`, `modules.builtin`, a `softdep=`
/// value), and the texts we write back read as the index they came from.
pub fn kmod_index(data: &[u8]) {
    use formats::kmod::index::{self, Index};
    let text = String::from_utf8_lossy(data);
    let _ = index::parse_builtin(&text);
    let _ = index::parse_softdep_value(&text);
    for line in text.lines() {
        let _ = index::name_of_path(line);
    }
    if let Ok(entries) = index::parse_dep(&text, Path::new("modules.dep")) {
        let ix = Index {
            entries: entries.clone(),
            ..Index::default()
        };
        let again = index::parse_dep(&ix.dep_text(), Path::new("again.dep"))
            .unwrap_or_else(|e| panic!("written modules.dep does not parse: {e}"));
        assert_eq!(again.len(), entries.len());
        for (name, e) in &entries {
            let a = again
                .get(name)
                .unwrap_or_else(|| panic!("{name} lost through dep_text"));
            assert_eq!(a.path, e.path);
            let known: Vec<&String> = e.deps.iter().filter(|d| entries.contains_key(*d)).collect();
            assert_eq!(a.deps.iter().collect::<Vec<_>>(), known, "deps of {name}");
        }
    }
    if let Ok(soft) = index::parse_softdep(&text, Path::new("modules.softdep")) {
        let ix = Index {
            softdeps: soft.clone(),
            ..Index::default()
        };
        let again = index::parse_softdep(&ix.softdep_text(), Path::new("again.softdep"))
            .unwrap_or_else(|e| panic!("written modules.softdep does not parse: {e}"));
        let kept: std::collections::BTreeMap<_, _> = soft
            .into_iter()
            .filter(|(_, s)| !s.pre.is_empty() || !s.post.is_empty())
            .collect();
        assert_eq!(again, kept);
    }
}

/// `Module.symvers`: parse, and the table written back parses to the same table.
pub fn symvers(data: &[u8]) {
    use formats::kmod::symvers::Symvers;
    let Ok(table) = Symvers::parse(&String::from_utf8_lossy(data)) else {
        return;
    };
    let text = table.to_text();
    let again = Symvers::parse(&text)
        .unwrap_or_else(|e| panic!("written Module.symvers does not parse: {e}"));
    assert_eq!(again, table, "symbol table changed through to_text");
}

/// The sysfs and procfs values the preflight and the report read, every parser over the same text; the
/// values with a canonical spelling (link speed, InfiniBand state and rate) parse back
/// from it to the same value.
pub fn sysfs(data: &[u8]) {
    use formats::sysfs as f;
    let text = String::from_utf8_lossy(data);
    let t = text.as_ref();
    let _ = f::one_line(t, "fuzz");
    let _ = f::pci_id(t);
    let _ = f::pci_class(t);
    let _ = f::decimal(t);
    let _ = f::link_width(t);
    if let Ok(Some(s)) = f::link_speed(t) {
        assert_eq!(f::link_speed(&format!("{s} PCIe\n")), Ok(Some(s)), "{t:?}");
        assert_eq!(f::link_speed(&s.gts()), Ok(Some(s)), "{t:?}");
    }
    if let Ok(a) = f::aer_counters(t) {
        let _ = a.nonzero();
    }
    if let Ok(e) = f::ib_enum(t) {
        assert_eq!(f::ib_enum(&format!("{e}\n")), Ok(e), "{t:?}");
    }
    if let Ok(r) = f::ib_rate(t) {
        assert_eq!(f::ib_rate(&format!("{r}\n")), Ok(r), "{t:?}");
    }
    for a in formats::proccrypto::parse(t) {
        assert!(!a.name.is_empty(), "{t:?}: a block without a name");
        let _ = formats::proccrypto::has_shash(t, &a.name);
    }
    if let Some(n) = formats::procstatus::memory_bytes(t, "VmHWM") {
        assert_eq!(n % 1024, 0, "{t:?}: {n} bytes is not a kB figure");
    }
    let _ = f::padded(t, "fuzz");
    let _ = f::is_driver_version(t);
    let _ = f::nvidia_version(t);
    let _ = f::gpu_information(t);
    let _ = f::nvswitch_information(t);
    let _ = f::is_pci_address(t);
    let _ = f::lockdown(t);
    let _ = f::efi_bool(data);
    let _ = f::module_taint(t);
    if let Ok(pkgs) = f::dpkg_status(t) {
        for p in &pkgs {
            let _ = (p.installed(), p.upstream_version());
        }
    }
}

/// The report's readers and renderers: a report file (v1 or v2, as `validator report FILE`
/// and a carried previous report read it), the console line and the full-report line in
/// captured console text, an NFD features file. A report that parses reads back the same
/// through its JSON; every rendering of it keeps its format whatever its strings hold:
/// the console line is one line of at most `LINE_MAX` bytes that reads back to the
/// report's fields, the NFD file parses as nfd-worker reads it, every line of the
/// Prometheus file is a comment or a sample, the SVG timeline's text has no raw markup.
pub fn report(data: &[u8]) {
    use validator::report::{checks, console, json, nfd, prometheus, timeline};
    let text = String::from_utf8_lossy(data);
    let _ = console::find(&text);
    let _ = console::find_full(&text);
    let _ = formats::nfd::parse(&text);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut r) = json::parse(text) else {
        return;
    };
    let again = json::parse(&json::to_line(&r))
        .unwrap_or_else(|e| panic!("a parsed report written back does not parse: {e}"));
    assert!(
        same_json(&to_value(&again), &to_value(&r)),
        "report changed through its JSON"
    );
    if r.checks.is_empty() {
        r.checks = checks::derive(&r);
    }
    let _ = r.previous_report();

    let sha = json::digest(&json::file_bytes(&r));
    let line = console::line(&r, &sha);
    assert!(
        line.len() <= console::LINE_MAX,
        "{} bytes: {line}",
        line.len()
    );
    assert_eq!(
        line.find('\n'),
        Some(line.len() - 1),
        "not one line: {line:?}"
    );
    let back = console::find(&format!("[    1.0] {line}"))
        .unwrap_or_else(|| panic!("the console line does not read back: {line:?}"));
    assert_eq!(back.decision, r.decision.as_str(), "{line:?}");
    assert_eq!(
        back.fault,
        r.fault.map_or("none", |f| f.as_str()),
        "{line:?}"
    );
    assert_eq!(back.slot, r.booted_slot().unwrap_or("-"), "{line:?}");
    assert_eq!(back.sha256, sha, "{line:?}");
    let image = r.image_id.as_deref().unwrap_or("-");
    assert!(
        back.image == image
            || (back.image.ends_with("...")
                && image.starts_with(back.image.trim_end_matches("..."))),
        "image {image:?} read back as {:?}",
        back.image
    );
    let reason = r.reason.as_deref().unwrap_or("-");
    assert!(
        back.reason == reason
            || (back.reason.ends_with("...")
                && reason.starts_with(back.reason.trim_end_matches("..."))),
        "reason {reason:?} read back as {:?}",
        back.reason
    );

    let ns = "feature.node.kubernetes.io";
    let features = nfd::render(&r, ns);
    let parsed = formats::nfd::parse(&features)
        .unwrap_or_else(|e| panic!("the NFD file does not parse: {e}\n{features}"));
    assert!(parsed.iter().all(|f| f.namespace == ns), "{features}");

    let metrics = prometheus::render(&r);
    for l in metrics.lines() {
        assert!(
            l.starts_with("# HELP validator_")
                || l.starts_with("# TYPE validator_")
                || prometheus_sample(l),
            "not a Prometheus line: {l:?}"
        );
    }

    let svg = timeline::svg(&r);
    assert!(
        !svg.chars().any(|c| c.is_control() && c != '\n'),
        "control character in the SVG"
    );
    // Outside a tag, `<` only opens the next tag: every text was escaped.
    for piece in svg.split('<').skip(1) {
        assert!(
            piece.starts_with(|c: char| c.is_ascii_alphabetic() || "/?!".contains(c)),
            "raw '<' in the SVG before {:?}",
            piece.chars().take(40).collect::<String>()
        );
    }
}

fn to_value(r: &validator::report::Report) -> serde_json::Value {
    serde_json::to_value(r).unwrap_or_else(|e| panic!("a report does not serialise: {e}"))
}

/// JSON values equal, numbers within a rounding of each other (a float read back from
/// its shortest decimal form may differ in the last bit).
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            x == y
                || matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y))
                    if (x - y).abs() <= f64::EPSILON * x.abs().max(y.abs()))
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// A Prometheus text-format sample line: `name[{label="value",...}] value`, label values
/// escaped (`\\`, `\"`, `\n`).
fn prometheus_sample(l: &str) -> bool {
    let name_end = l
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(l.len());
    let (name, mut rest) = l.split_at(name_end);
    if !name.starts_with("validator_") {
        return false;
    }
    if let Some(labels) = rest.strip_prefix('{') {
        rest = labels;
        loop {
            let Some((key, after)) = rest.split_once("=\"") else {
                return false;
            };
            if key.is_empty()
                || !key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return false;
            }
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\' | '"' | 'n')) => {}
                        _ => return false,
                    },
                    Some((i, '"')) => break i,
                    Some((_, '\n')) | None => return false,
                    Some(_) => {}
                }
            };
            rest = &after[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            } else {
                return false;
            }
        }
    }
    rest.strip_prefix(' ')
        .is_some_and(|v| v.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&v))
}

/// An NFD feature file as nfd-worker reads it (`formats::nfd::parse`): the features of a
/// file that parses, written back one `namespace/name=value` line each, parse to the same
/// features.
pub fn nfd(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(features) = formats::nfd::parse(&text) else {
        return;
    };
    let written: String = features
        .iter()
        .map(|f| format!("{}/{}={}\n", f.namespace, f.name, f.value))
        .collect();
    let again = formats::nfd::parse(&written)
        .unwrap_or_else(|e| panic!("written features do not parse: {e}\n{written}"));
    assert_eq!(again, features, "features changed through their text");
}

/// The dm-verity hash tree (`formats::verity::tree`) over data of the fuzzer's choosing:
/// `[algorithm][hash type][data block size][hash block size][salt length][salt][data]`
/// (each size byte picks 512 << (b % 4); the algorithm b % 3 of SHA-1, SHA-256, SHA-512;
/// the salt at most 64 bytes; the data cut to whole blocks, at most 1 MiB). A tree built
/// over the data verifies and matches its root; with one data byte changed it does not.
pub fn verity_tree(data: &[u8]) {
    use formats::verity::superblock::{Algorithm, Params};
    use formats::verity::tree;
    let Some(([alg, hash_type, dbs, hbs, salt_len], rest)) = data.split_first_chunk::<5>() else {
        return;
    };
    let Some((salt, rest)) = rest.split_at_checked(usize::from(*salt_len % 65)) else {
        return;
    };
    let dbs = 512u32 << (dbs % 4);
    let blocks = rest.len().min(1 << 20) / dbs as usize;
    if blocks == 0 {
        return;
    }
    let Some(body) = rest.get(..blocks * dbs as usize) else {
        return;
    };
    let p = Params {
        hash_type: u32::from(hash_type & 1),
        algorithm: match alg % 3 {
            0 => Algorithm::Sha1,
            1 => Algorithm::Sha256,
            _ => Algorithm::Sha512,
        },
        data_block_size: dbs,
        hash_block_size: 512u32 << (hbs % 4),
        data_blocks: blocks as u64,
        salt: salt.to_vec(),
        uuid: [0; 16],
    };
    let Ok(g) = tree::Geometry::new(&p, 0, false) else {
        return;
    };
    let (area, root) = tree::build(&p, body);
    let check = |d: &[u8]| {
        tree::verify(
            &Mem(d),
            d.len() as u64,
            &Mem(&area),
            area.len() as u64,
            &g,
            &root,
            1,
        )
        .unwrap_or_else(|e| panic!("a built tree does not read: {e}"))
    };
    let v = check(body);
    assert!(v.ok, "a built tree does not verify: {:?}", v.finding);
    assert_eq!(v.computed_root.as_deref(), Some(root.as_slice()));
    assert!(
        tree::top_matches(&Mem(&area), &g, &root).unwrap_or(false),
        "a built tree's top block does not match its root"
    );
    let mut changed = body.to_vec();
    let at = usize::from(*alg) * 257 % changed.len();
    if let Some(b) = changed.get_mut(at) {
        *b ^= 1;
    }
    assert!(!check(&changed).ok, "a changed data byte {at} verifies");
}

//! The gate's time split into its phases: the same library calls the gate makes for each
//! module, made one after another over every module and timed phase by phase, beside the
//! whole gate (`batch::check_files`, one thread) in the same sitting. What the phases do
//! not account for is the gate's own glue (verdicts, reasons, allocation between the
//! calls) and is printed as such.

use std::path::PathBuf;
use std::time::Instant;

use sha2::Digest;
use validator::formats::kmod::{modinfo, sig};
use validator::formats::pkcs7;
use validator::gate::{self, batch};
use validator::util::as_f64;

/// The phases, in the gate's order.
pub const NAMES: [&str; 9] = [
    "read (open, read into memory)",
    "decompress",
    "ELF: .modinfo, __versions, symbols, exports",
    "the batch's symbol table (exports added)",
    "digest (SHA-256 of body and image)",
    "PKCS#7 parse",
    "certificate lookup and checks",
    "signature (public-key operation)",
    "CRC, namespace and GPL checks",
];

/// Seconds per phase (in [`NAMES`]' order) over every file, and how many signatures.
pub struct Split {
    pub secs: [f64; 9],
    pub signed: usize,
}

/// Times each phase over `files` with `g`'s trust store, policy and symbol table.
pub fn measure(g: &gate::Gate, files: &[PathBuf]) -> Split {
    let mut secs = [0.0f64; 9];
    let mut signed = 0usize;
    let mut elfs = Vec::with_capacity(files.len());
    let mut extra = validator::formats::kmod::symvers::Symvers::default();
    let mut t;
    let mut lap = |i: usize, t: &mut Instant| {
        let now = Instant::now();
        if let Some(s) = secs.get_mut(i) {
            *s += (now - *t).as_secs_f64();
        }
        *t = now;
    };
    for f in files {
        t = Instant::now();
        let raw = batch::read_file(f).unwrap();
        lap(0, &mut t);
        let c = modinfo::Compression::from_name(&f.to_string_lossy());
        let image = match c {
            modinfo::Compression::None => std::borrow::Cow::Borrowed(raw.as_slice()),
            c => std::borrow::Cow::Owned(modinfo::decompress(&raw, c).unwrap()),
        };
        lap(1, &mut t);
        let split = sig::split(&image).ok();
        let body = split.as_ref().map_or(&image[..], |s| s.body);
        let elf = modinfo::parse_elf(body).unwrap();
        lap(2, &mut t);
        let mut h = sha2::Sha256::new();
        h.update(body);
        let body_sha256 = h.clone().finalize();
        h.update(image.get(body.len()..).unwrap_or_default());
        std::hint::black_box(h.finalize());
        lap(4, &mut t);
        if let Some(s) = &split {
            let msg = pkcs7::parse_message(s.pkcs7).unwrap();
            lap(5, &mut t);
            let first = msg.signers.first().unwrap();
            let digest = if first.digest == pkcs7::HashAlg::Sha256 {
                body_sha256.to_vec()
            } else {
                first.digest.digest(body)
            };
            let cert = validator::trust::pkcs7::find_signer(first, &g.trust).unwrap();
            std::hint::black_box(cert.label());
            lap(6, &mut t);
            cert.verify_digest(first.digest, &digest, &first.signature)
                .unwrap();
            lap(7, &mut t);
            signed += 1;
        }
        t = Instant::now();
        let name = validator::formats::kmod::index::name_of_path(&f.to_string_lossy());
        for (symbol, crc) in elf.exports() {
            extra.insert(symbol, crc, &name, false);
        }
        lap(3, &mut t);
        elfs.push((f, elf));
    }
    t = Instant::now();
    let over = g.overlay(&extra);
    lap(3, &mut t);
    for (f, elf) in &elfs {
        let mut v = gate::Verdict::new(&f.to_string_lossy());
        t = Instant::now();
        g.check_crcs_over(&over, elf, &mut v);
        lap(8, &mut t);
        assert!(v.reasons.is_empty(), "{}: {:?}", f.display(), v.reasons);
    }
    Split { secs, signed }
}

/// Prints the split beside the gate's own time `gate_s` and the floor's verification
/// time per signature `floor_verify_s`.
pub fn print(s: &Split, files: usize, gate_s: f64, floor_verify_s: f64) {
    let per = |x: f64| x * 1e6 / as_f64(files as u64);
    println!("  the gate's phases, 1 thread ({files} modules):");
    for (name, x) in NAMES.iter().zip(s.secs) {
        println!("    {name:<40} {x:>7.3} s  {:>7.1} us/module", per(x));
    }
    let sum: f64 = s.secs.iter().sum();
    println!(
        "    {:<40} {:>7.3} s  {:>7.1} us/module",
        "glue (the gate less its phases)",
        gate_s - sum,
        per(gate_s - sum)
    );
    println!(
        "    {:<40} {gate_s:>7.3} s",
        "the gate (batch::check_files)"
    );
    if s.signed > 0 {
        let ours = s.secs[7] / as_f64(s.signed as u64);
        println!(
            "  signature rate: ours {:.1} us, openssl speed {:.1} us per verification ({:.2})",
            ours * 1e6,
            floor_verify_s * 1e6,
            floor_verify_s / ours
        );
    }
}

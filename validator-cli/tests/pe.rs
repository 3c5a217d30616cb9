//! `validator pe verify` against Debian's signed boot chain, judged side by side with
//! `sbverify --cert`: Debian's signed kernel and GRUB against the Debian Secure Boot CA
//! (taken from shim's `.vendor_cert` section, where shim carries it), a copy with the
//! signature removed (`sbattach --remove`), a copy with one byte changed, a copy re-signed
//! by `sbsign` with a key nothing trusts (refused against the CA, accepted against its own
//! certificate), and the one case where `sbverify` is wrong: Microsoft-signed shim "verifies"
//! for it against an unrelated self-signed certificate; we refuse it, and OVMF with only
//! that certificate in `db` refuses to start it (`qemu/tests/secure_boot.rs`). And EDK2's
//! walk of the certificate table under `--rule firmware`: the signed kernel with bytes
//! appended inside its table, or its entry left unpadded, is refused by the firmware rule
//! and still verified by the kernel's.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn signed(rel: &str) -> PathBuf {
    let p = workspace().join("target/secureboot").join(rel);
    assert!(
        p.is_file(),
        "{}: missing (run scripts/provision)",
        p.display()
    );
    p
}

fn shim() -> PathBuf {
    signed("usr/lib/shim/shimx64.efi.signed")
}

fn grub() -> PathBuf {
    signed("usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed")
}

fn run(cmd: &mut Command) -> std::process::Output {
    cmd.output().unwrap()
}

fn ok(cmd: &mut Command) {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Debian Secure Boot CA, as shim carries it: `.vendor_cert` holds four 32-bit
/// sizes and offsets (authorized, deauthorized), then the certificate (DER). Written as
/// DER and PEM (sbverify reads PEM).
fn debian_ca(dir: &Path) -> (PathBuf, PathBuf) {
    let section = dir.join("vendor_cert.bin");
    ok(Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.vendor_cert"])
        .arg(shim())
        .arg(&section));
    let b = std::fs::read(&section).unwrap();
    let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let (size, offset) = (u32at(0), u32at(8));
    let der = dir.join("debian-ca.der");
    std::fs::write(&der, &b[offset..offset + size]).unwrap();
    let pem = dir.join("debian-ca.pem");
    ok(Command::new("openssl")
        .args(["x509", "-inform", "der", "-in"])
        .arg(&der)
        .arg("-out")
        .arg(&pem));
    (der, pem)
}

/// A self-signed certificate and key nothing trusts.
fn untrusted(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.pem"));
    common::keys::rsa(&key, &cert, name);
    (cert, key)
}

/// Our verdict (`true`: exit 0, verified) and its line.
fn ours(cert: &Path, image: &Path, rule: &str) -> (bool, String) {
    let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(["pe", "verify", "--rule", rule, "--cert"])
        .arg(cert)
        .arg(image));
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "{}: exit {code:?}: {}",
        image.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        code == Some(0),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn sbverify(cert_pem: &Path, image: &Path) -> bool {
    run(Command::new("sbverify")
        .arg("--cert")
        .arg(cert_pem)
        .arg(image))
    .status
    .success()
}

#[test]
fn verdicts_equal_sbverify_on_debians_signed_chain() {
    let dir = common::tmpdir("pe-verify");
    let (ca_der, ca_pem) = debian_ca(&dir);
    let kernel = common::vmlinuz("default");
    let stripped = dir.join("vmlinuz.stripped");
    std::fs::copy(&kernel, &stripped).unwrap();
    ok(Command::new("sbattach").arg("--remove").arg(&stripped));
    let flipped = dir.join("vmlinuz.flipped");
    let mut b = std::fs::read(&kernel).unwrap();
    b[0x10000] ^= 0x01;
    std::fs::write(&flipped, &b).unwrap();
    let (other_cert, other_key) = untrusted(&dir, "untrusted-signer");
    let resigned = dir.join("vmlinuz.resigned");
    ok(Command::new("sbsign")
        .arg("--key")
        .arg(&other_key)
        .arg("--cert")
        .arg(&other_cert)
        .arg("--output")
        .arg(&resigned)
        .arg(&stripped));
    // (image, certificate (DER for us, PEM for sbverify), verified, what our line says)
    type Case<'a> = (&'a str, PathBuf, (&'a Path, &'a Path), bool, &'a str);
    let cases: Vec<Case> = vec![
        (
            "kernel",
            kernel.clone(),
            (&ca_der, &ca_pem),
            true,
            "trusted through Debian Secure Boot CA",
        ),
        (
            "grub",
            grub(),
            (&ca_der, &ca_pem),
            true,
            "trusted through Debian Secure Boot CA",
        ),
        (
            "stripped",
            stripped.clone(),
            (&ca_der, &ca_pem),
            false,
            "not signed",
        ),
        (
            "flipped",
            flipped.clone(),
            (&ca_der, &ca_pem),
            false,
            "digest does not match",
        ),
        (
            "resigned vs CA",
            resigned.clone(),
            (&ca_der, &ca_pem),
            false,
            "is not in the trust store",
        ),
        (
            "resigned vs own",
            resigned.clone(),
            (&other_cert, &other_cert),
            true,
            "trusted through untrusted-signer",
        ),
        (
            "kernel vs other",
            kernel.clone(),
            (&other_cert, &other_cert),
            false,
            "is not in the trust store",
        ),
    ];
    for (name, image, (der, pem), want, says) in &cases {
        for rule in ["kernel", "firmware"] {
            let (v, line) = ours(der, image, rule);
            assert_eq!(v, *want, "{name} ({rule}): {line}");
            assert!(line.contains(says), "{name} ({rule}): {line}");
        }
        assert_eq!(sbverify(pem, image), *want, "sbverify on {name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Where sbverify is wrong: shim (signed by Microsoft's UEFI CA, two signatures)
/// "verifies" for it against an unrelated self-signed certificate. We refuse it; the
/// firmware, the judge here, refuses to start it too (`qemu/tests/secure_boot.rs`).
#[test]
fn shim_against_an_unrelated_certificate_is_refused_where_sbverify_accepts_it() {
    let dir = common::tmpdir("pe-verify-shim");
    let (cert, _) = untrusted(&dir, "unrelated");
    assert!(sbverify(&cert, &shim()), "sbverify's known false positive");
    for rule in ["kernel", "firmware"] {
        let (v, line) = ours(&cert, &shim(), rule);
        assert!(!v, "{line}");
        assert!(
            line.contains("Microsoft Corporation UEFI CA 2011")
                && line.contains("is not in the trust store"),
            "{line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn u32at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// Where `image`'s certificate table directory entry is, and the table's address and size.
fn cert_dir(image: &[u8]) -> (usize, usize, usize) {
    let opt = u32at(image, 0x3c) as usize + 24;
    let dirs = opt
        + match u16::from_le_bytes([image[opt], image[opt + 1]]) {
            0x20b => 112,
            0x10b => 96,
            m => panic!("optional header magic {m:#x}"),
        };
    let entry = dirs + 4 * 8;
    (
        entry,
        u32at(image, entry) as usize,
        u32at(image, entry + 4) as usize,
    )
}

/// `image` (a signed PE image whose certificate table ends the file) with `extra`
/// appended inside its table: the security directory's size grows by `extra.len()`, and
/// so does the last entry's length when `in_last_entry`. Read here by hand (PE32+ or
/// PE32), not with the parser under test.
fn grow_table(image: &[u8], extra: &[u8], in_last_entry: bool) -> Vec<u8> {
    let (entry, va, size) = cert_dir(image);
    assert_eq!(
        va + size,
        image.len(),
        "the certificate table does not end the file"
    );
    let mut last = va;
    while last + (u32at(image, last) as usize).div_ceil(8) * 8 < va + size {
        last += (u32at(image, last) as usize).div_ceil(8) * 8;
    }
    let mut b = image.to_vec();
    b.extend_from_slice(extra);
    let grow = u32::try_from(extra.len()).unwrap();
    b[entry + 4..entry + 8].copy_from_slice(&(u32at(image, entry + 4) + grow).to_le_bytes());
    if in_last_entry {
        b[last..last + 4].copy_from_slice(&(u32at(image, last) + grow).to_le_bytes());
    }
    b
}

/// EDK2's walk of the certificate table (`--rule firmware`, DxeImageVerificationLib's
/// `DxeImageVerificationHandler`): Debian's signed kernel verifies; with 64 zero bytes or
/// 5 bytes appended inside its table (the directory's size grown: the Authenticode digest
/// is unchanged, the table is not hashed), or its one entry grown by a byte so the table
/// ends with it unpadded, the firmware rule refuses it (exit 1) naming what and where,
/// while the kernel rule (`verify_pefile.c`: the first entry must fit in the table) still
/// verifies it.
#[test]
fn the_firmware_rule_refuses_a_table_its_walk_does_not_end_exactly() {
    let dir = common::tmpdir("pe-verify-table-end");
    let (ca_der, _) = debian_ca(&dir);
    let kernel = common::vmlinuz("default");
    let b = std::fs::read(&kernel).unwrap();
    let end = b.len();
    for rule in ["kernel", "firmware"] {
        let (v, line) = ours(&ca_der, &kernel, rule);
        assert!(v, "as shipped ({rule}): {line}");
    }
    // One entry (Debian signs with one signature), its length a multiple of 8.
    let (_, table_at, size) = cert_dir(&b);
    assert_eq!(u32at(&b, table_at) as usize, size);
    let grown = size + 1;
    let cases: [(&str, Vec<u8>, String); 3] = [
        (
            "64 zero bytes",
            grow_table(&b, &[0; 64], false),
            format!("the entry at {end:#x} (type 0x0000, length 0) is shorter than its type"),
        ),
        (
            "5 bytes",
            grow_table(&b, &[0xaa; 5], false),
            format!("5 bytes at {end:#x} before the table's end"),
        ),
        (
            "unpadded last entry",
            grow_table(&b, &[0], true),
            format!("the entry at {table_at:#x} (length {grown}) is not padded to 8 bytes"),
        ),
    ];
    for (name, bytes, says) in &cases {
        let p = dir.join(format!("vmlinuz.{}", name.replace(' ', "-")));
        std::fs::write(&p, bytes).unwrap();
        let (v, line) = ours(&ca_der, &p, "firmware");
        assert!(!v, "{name} (firmware): {line}");
        assert!(
            line.contains("refused: certificate table")
                && line.contains("the firmware's walk of its entries does not end at its end")
                && line.contains(says.as_str()),
            "{name} (firmware): {line}"
        );
        let (v, line) = ours(&ca_der, &p, "kernel");
        assert!(v, "{name} (kernel): {line}");
        assert!(
            line.contains("trusted through Debian Secure Boot CA"),
            "{name} (kernel): {line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Hostile inputs: not a PE image, a truncated one, an empty file, a directory and a
/// FIFO are unusable input (exit 2, named); a --forbid digest refuses the kernel (exit 1).
#[test]
fn bad_images_are_unusable_input_and_forbidden_digests_refused() {
    let dir = common::tmpdir("pe-verify-bad");
    let (ca_der, _) = debian_ca(&dir);
    let kernel = std::fs::read(common::vmlinuz("default")).unwrap();
    let truncated = dir.join("truncated.efi");
    std::fs::write(&truncated, &kernel[..kernel.len() / 2]).unwrap();
    let text = dir.join("text.efi");
    std::fs::write(&text, b"not a PE image\n").unwrap();
    let empty = dir.join("empty.efi");
    std::fs::write(&empty, b"").unwrap();
    let fifo = dir.join("fifo.efi");
    ok(Command::new("mkfifo").arg(&fifo));
    for (p, says) in [
        (&truncated, "certificate table"),
        (&text, "not a PE image"),
        (&empty, "not a PE image"),
        (&dir, "directory"),
        (&fifo, "FIFO"),
    ] {
        let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
            .args(["pe", "verify", "--cert"])
            .arg(&ca_der)
            .arg(p));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", p.display());
        assert!(err.contains(says), "{}: {err}", p.display());
    }
    // The kernel's SHA-256 Authenticode digest, as sbverify computes it.
    let digest = authenticode_sha256(&common::vmlinuz("default"));
    let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(["pe", "verify", "--cert"])
        .arg(&ca_der)
        .args(["--forbid", &digest])
        .arg(common::vmlinuz("default")));
    let line = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert!(
        line.contains(&format!("digest {digest} is revoked (--forbid)")),
        "{line}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The image's SHA-256 Authenticode digest as `sbverify` computes it (not ours, which
/// would make the test circular): when a detached signature names another digest,
/// `sbverify` prints the signature's ("got:") and the image's ("expecting:"), so the image
/// is checked against a detached signature of a copy with one byte changed.
fn authenticode_sha256(image: &Path) -> String {
    // One directory per call: tests run in parallel threads of one process.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = common::tmpdir(&format!("pe-digest-{n}"));
    let (cert, key) = untrusted(&dir, "digest-probe");
    let other = dir.join("other.efi");
    let mut b = std::fs::read(image).unwrap();
    b[0x10000] ^= 0x01;
    std::fs::write(&other, &b).unwrap();
    let stripped_other = dir.join("other-stripped.efi");
    std::fs::copy(&other, &stripped_other).unwrap();
    ok(Command::new("sbattach")
        .arg("--remove")
        .arg(&stripped_other));
    let sig = dir.join("other.sig");
    ok(Command::new("sbsign")
        .arg("--key")
        .arg(&key)
        .arg("--cert")
        .arg(&cert)
        .arg("--detached")
        .arg("--output")
        .arg(&sig)
        .arg(&stripped_other));
    let out = run(Command::new("sbverify")
        .arg("--cert")
        .arg(&cert)
        .arg("--detached")
        .arg(&sig)
        .arg(image));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let got = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("expecting:"))
        .unwrap_or_else(|| panic!("sbverify printed no digest: {text}"))
        .trim()
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    got
}

/// An EFI signature list of type `kind` (the GUID as stored) with `entries`, each behind
/// an owner GUID of zeros.
fn esl(kind: [u8; 16], entries: &[Vec<u8>]) -> Vec<u8> {
    let esize = 16 + entries.first().map_or(0, Vec::len);
    let mut v = kind.to_vec();
    v.extend_from_slice(
        &u32::try_from(28 + esize * entries.len())
            .unwrap()
            .to_le_bytes(),
    );
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&u32::try_from(esize).unwrap().to_le_bytes());
    for e in entries {
        v.extend_from_slice(&[0; 16]);
        v.extend_from_slice(e);
    }
    v
}

/// EFI_CERT_X509_GUID, EFI_CERT_SHA256_GUID, EFI_CERT_X509_SHA256_GUID as stored.
const X509: [u8; 16] = [
    0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72,
];
const SHA256: [u8; 16] = [
    0x26, 0x16, 0xc4, 0xc1, 0x4c, 0x50, 0x92, 0x40, 0xac, 0xa9, 0x41, 0xf9, 0x36, 0x93, 0x43, 0x28,
];
const X509_SHA256: [u8; 16] = [
    0x92, 0xa4, 0xd2, 0x3b, 0xc0, 0x96, 0x79, 0x40, 0xb4, 0x20, 0xfc, 0xf9, 0x8e, 0xf1, 0x03, 0xed,
];

/// The certificate that signed `image` (the first its signature embeds), as DER, taken
/// out with `sbattach --detach` and `openssl pkcs7`; and the SHA-256 of its
/// `TBSCertificate` (`openssl asn1parse -strparse 4`: the certificate's first element).
fn signer_of(dir: &Path, image: &Path) -> (Vec<u8>, Vec<u8>) {
    let sig = dir.join("signature.p7");
    ok(Command::new("sbattach")
        .arg("--detach")
        .arg(&sig)
        .arg(image));
    let pem = dir.join("signer.pem");
    ok(Command::new("openssl")
        .args(["pkcs7", "-inform", "der", "-print_certs", "-in"])
        .arg(&sig)
        .arg("-out")
        .arg(&pem));
    let der = dir.join("signer.der");
    ok(Command::new("openssl")
        .args(["x509", "-outform", "der", "-in"])
        .arg(&pem)
        .arg("-out")
        .arg(&der));
    let tbs = dir.join("signer.tbs");
    ok(Command::new("openssl")
        .args([
            "asn1parse",
            "-inform",
            "der",
            "-strparse",
            "4",
            "-noout",
            "-in",
        ])
        .arg(&der)
        .arg("-out")
        .arg(&tbs));
    let out = run(Command::new("sha256sum").arg(&tbs));
    let hex = String::from_utf8_lossy(&out.stdout)[..64].to_string();
    let tbs_sha256 = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    (std::fs::read(&der).unwrap(), tbs_sha256)
}

/// `validator pe verify` with revocation lists, on Debian's signed kernel trusted through
/// the Debian CA: the kernel's Authenticode digest in `--dbx`, the certificate that signed
/// it (or the CA above it) as an X.509 entry of `--dbx` or `--mokx`, and (firmware rule)
/// the signer's TBS digest refuse it, each naming the list; an unrelated certificate and
/// digest in the list do not, and an efivarfs file (attribute bytes first) reads as the
/// list. A list that does not parse, a directory or a FIFO is unusable input (exit 2).
#[test]
fn revocation_lists_refuse_as_dbx_and_mokx_say() {
    let dir = common::tmpdir("pe-verify-dbx");
    let (ca_der, _) = debian_ca(&dir);
    let kernel = common::vmlinuz("default");
    let digest = authenticode_sha256(&kernel);
    let digest_bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let (signer, tbs) = signer_of(&dir, &kernel);
    let (unrelated_pem, _) = untrusted(&dir, "unrelated");
    let unrelated_der = dir.join("unrelated.der");
    ok(Command::new("openssl")
        .args(["x509", "-outform", "der", "-in"])
        .arg(&unrelated_pem)
        .arg("-out")
        .arg(&unrelated_der));
    let unrelated = std::fs::read(&unrelated_der).unwrap();
    let ca = std::fs::read(&ca_der).unwrap();
    let mut tbs_entry = tbs.clone();
    tbs_entry.extend_from_slice(&[0; 16]);
    let verify = |flag: &str, list: &[u8], rule: &str| {
        let f = dir.join("list.esl");
        std::fs::write(&f, list).unwrap();
        let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
            .args(["pe", "verify", "--rule", rule, "--cert"])
            .arg(&ca_der)
            .arg(flag)
            .arg(&f)
            .arg(&kernel));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for rule in ["kernel", "firmware"] {
        for (flag, list, says) in [
            (
                "--dbx",
                esl(SHA256, std::slice::from_ref(&digest_bytes)),
                format!("digest {digest} is revoked (--dbx"),
            ),
            (
                "--dbx",
                esl(X509, std::slice::from_ref(&signer)),
                "is revoked (--dbx".to_string(),
            ),
            (
                "--mokx",
                esl(X509, std::slice::from_ref(&signer)),
                "is revoked (--mokx".to_string(),
            ),
            (
                "--dbx",
                esl(X509, std::slice::from_ref(&ca)),
                "Debian Secure Boot CA".to_string(),
            ),
        ] {
            let (code, line, err) = verify(flag, &list, rule);
            assert_eq!(code, Some(1), "{rule} {flag}: {line}{err}");
            assert!(line.contains(&says), "{rule} {flag}: {line}");
            // The efivarfs form: four attribute bytes, then the lists.
            let mut var = vec![0x27, 0, 0, 0];
            var.extend_from_slice(&list);
            assert_eq!(
                verify(flag, &var, rule).0,
                Some(1),
                "{rule} {flag} as efivarfs"
            );
        }
        let (code, line, _) = verify(
            "--dbx",
            &[
                esl(X509, std::slice::from_ref(&unrelated)),
                esl(SHA256, &[vec![7; 32]]),
            ]
            .concat(),
            rule,
        );
        assert_eq!(code, Some(0), "{rule}: {line}");
    }
    let (code, line, _) = verify("--dbx", &esl(X509_SHA256, &[tbs_entry]), "firmware");
    assert_eq!(code, Some(1), "{line}");
    assert!(line.contains("is revoked (--dbx"), "{line}");
    // Hostile lists.
    let fifo = dir.join("fifo.esl");
    ok(Command::new("mkfifo").arg(&fifo));
    let list = esl(SHA256, &[vec![7; 32]]);
    for (p, bytes, says) in [
        (
            dir.join("short.esl"),
            Some(list[..list.len() - 5].to_vec()),
            "runs past the value",
        ),
        (
            dir.join("empty-entry.esl"),
            Some(esl(SHA256, &[vec![1; 7]])),
            "7-byte digest entry",
        ),
        (dir.clone(), None, "directory"),
        (fifo.clone(), None, "FIFO"),
    ] {
        if let Some(b) = bytes {
            std::fs::write(&p, b).unwrap();
        }
        let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
            .args(["pe", "verify", "--cert"])
            .arg(&ca_der)
            .arg("--dbx")
            .arg(&p)
            .arg(&kernel));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", p.display());
        assert!(err.contains(says), "{}: {err}", p.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--sbat-level` on Debian's signed GRUB, by shim's rule: at the level Debian's shim
/// ships it passes; one generation above its `grub` or `grub.debian` component refuses it
/// naming the component and both generations; the kernel, which has no `.sbat`, passes
/// through shim's protocol (`--rule kernel`) and is refused when shim would load it itself
/// (`--rule firmware`). A level that does not parse is unusable input.
#[test]
fn sbat_levels_judge_grub_as_shim_does() {
    let dir = common::tmpdir("pe-verify-sbat");
    let (ca_der, _) = debian_ca(&dir);
    let section = dir.join("sbatlevel.bin");
    ok(Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.sbatlevel"])
        .arg(shim())
        .arg(&section));
    let shipped = "sbat,1,2025021800\nshim,4\ngrub,5\n";
    let b = std::fs::read(&section).unwrap();
    assert!(
        b.windows(shipped.len()).any(|w| w == shipped.as_bytes()),
        "shim's .sbatlevel no longer holds {shipped:?}"
    );
    let judge = |level: &str, image: &Path, rule: &str| {
        let f = dir.join("level");
        std::fs::write(&f, level).unwrap();
        let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
            .args(["pe", "verify", "--rule", rule, "--cert"])
            .arg(&ca_der)
            .arg("--sbat-level")
            .arg(&f)
            .arg(image));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, line) = judge(shipped, &grub(), "firmware");
    assert_eq!(code, Some(0), "{line}");
    assert!(
        line.contains("SBAT passes the level sbat,1 shim,4 grub,5"),
        "{line}"
    );
    for (level, says) in [
        (
            "sbat,1,2099010100\ngrub,6\n",
            "component grub is at generation 5, below the node's level 6",
        ),
        (
            "sbat,1,2099010100\ngrub.debian,6\n",
            "component grub.debian is at generation 5, below the node's level 6",
        ),
    ] {
        let (code, line) = judge(level, &grub(), "firmware");
        assert_eq!(code, Some(1), "{line}");
        assert!(line.contains(says), "{line}");
    }
    let kernel = common::vmlinuz("default");
    assert_eq!(judge(shipped, &kernel, "kernel").0, Some(0));
    let (code, line) = judge(shipped, &kernel, "firmware");
    assert_eq!(code, Some(1), "{line}");
    assert!(line.contains("no .sbat section"), "{line}");
    // The efivarfs form of SbatLevelRT.
    let mut var = vec![0x06, 0, 0, 0];
    var.extend_from_slice(b"sbat,1,2099010100\ngrub,6\n");
    let f = dir.join("SbatLevelRT");
    std::fs::write(&f, &var).unwrap();
    let out = run(Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(["pe", "verify", "--cert"])
        .arg(&ca_der)
        .arg("--sbat-level")
        .arg(&f)
        .arg(grub()));
    assert_eq!(out.status.code(), Some(1));
    let (code, line) = judge("sbat,1\ngrub,x\n", &grub(), "firmware");
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("--sbat-level") && line.contains("does not parse"),
        "{line}"
    );
    let (code, line) = judge("", &grub(), "firmware");
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("holds no SBAT record"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

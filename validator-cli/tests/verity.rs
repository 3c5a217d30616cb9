//! `validator verity verify` against images made by the real `veritysetup format`, judged
//! side by side with `veritysetup verify`.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{tmpdir, Rng};

struct Case {
    name: &'static str,
    args: Vec<&'static str>,
    /// Hash tree inside the data file after the data (hash offset = data size).
    same_file: bool,
    hash_offset: u64,
}

fn format(dir: &Path, c: &Case, data_len: usize, seed: u64) -> (PathBuf, PathBuf, String) {
    let data = dir.join(format!("{}.data", c.name));
    let mut rng = Rng(seed);
    let bytes: Vec<u8> = (0..data_len).map(|_| rng.next().to_le_bytes()[0]).collect();
    std::fs::write(&data, &bytes).unwrap();
    let hash = if c.same_file {
        data.clone()
    } else {
        dir.join(format!("{}.hash", c.name))
    };
    let mut cmd = Command::new("veritysetup");
    cmd.arg("format").args(&c.args);
    if c.same_file {
        cmd.arg(format!("--hash-offset={data_len}"))
            .arg(format!("--data-blocks={}", data_len / block_size(c)));
    } else if c.hash_offset > 0 {
        cmd.arg(format!("--hash-offset={}", c.hash_offset));
        // The hash file must hold the offset area.
        std::fs::write(&hash, vec![0xee; usize::try_from(c.hash_offset).unwrap()]).unwrap();
    }
    let out = cmd
        .arg(&data)
        .arg(&hash)
        .output()
        .expect("veritysetup (install cryptsetup-bin: scripts/provision)");
    assert!(
        out.status.success(),
        "{}: {}",
        c.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let root = text
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .unwrap()
        .trim()
        .to_string();
    (data, hash, root)
}

fn block_size(c: &Case) -> usize {
    c.args
        .iter()
        .find_map(|a| a.strip_prefix("--data-block-size="))
        .map_or(4096, |s| s.parse().unwrap())
}

fn offset_of(c: &Case, data_len: usize) -> u64 {
    if c.same_file {
        data_len as u64
    } else {
        c.hash_offset
    }
}

fn veritysetup_ok(c: &Case, data: &Path, hash: &Path, root: &str, data_len: usize) -> bool {
    let mut cmd = Command::new("veritysetup");
    cmd.arg("verify");
    let off = offset_of(c, data_len);
    if off > 0 {
        cmd.arg(format!("--hash-offset={off}"));
    }
    cmd.arg(data)
        .arg(hash)
        .arg(root)
        .output()
        .unwrap()
        .status
        .success()
}

fn ours(
    c: &Case,
    data: &Path,
    hash: &Path,
    root: &str,
    data_len: usize,
    threads: &str,
) -> (bool, String) {
    let off = offset_of(c, data_len).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_validator"))
        .args([
            "verity",
            "verify",
            "--data",
            data.to_str().unwrap(),
            "--hash",
            hash.to_str().unwrap(),
            "--root-hash",
            root,
            "--hash-offset",
            &off,
            "--threads",
            threads,
        ])
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(code == 0 || code == 1 || code == 2, "{code}");
    (
        code == 0,
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sha256-4k",
            args: vec![
                "--hash=sha256",
                "--data-block-size=4096",
                "--hash-block-size=4096",
            ],
            same_file: false,
            hash_offset: 0,
        },
        Case {
            name: "sha1-512-nosalt",
            args: vec![
                "--hash=sha1",
                "--data-block-size=512",
                "--hash-block-size=512",
                "--salt=-",
            ],
            same_file: false,
            hash_offset: 0,
        },
        Case {
            name: "sha512-1k-4k-offset",
            args: vec![
                "--hash=sha512",
                "--data-block-size=1024",
                "--hash-block-size=4096",
            ],
            same_file: false,
            hash_offset: 8192,
        },
        Case {
            name: "sha256-2k-samefile",
            args: vec![
                "--hash=sha256",
                "--data-block-size=2048",
                "--hash-block-size=1024",
                "--salt=00112233",
            ],
            same_file: true,
            hash_offset: 0,
        },
    ]
}

/// Clean images of every parameter combination verify, and the root hash we rebuild is
/// veritysetup's.
#[test]
fn clean_images_verify_with_veritysetups_root_hash() {
    let dir = tmpdir("verity-clean");
    for c in cases() {
        let len = 1 << 20;
        let (data, hash, root) = format(&dir, &c, len, 7);
        assert!(veritysetup_ok(&c, &data, &hash, &root, len));
        for t in ["1", "3"] {
            let (ok, out) = ours(&c, &data, &hash, &root, len, t);
            assert!(ok, "{}: {out}", c.name);
            assert!(
                out.contains(&format!("verified: root hash {root}")),
                "{}: {out}",
                c.name
            );
        }
        // The wrong root hash fails.
        let mut wrong = root.clone().into_bytes();
        wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
        let wrong = String::from_utf8(wrong).unwrap();
        assert!(!veritysetup_ok(&c, &data, &hash, &wrong, len));
        let (ok, out) = ours(&c, &data, &hash, &wrong, len, "2");
        assert!(!ok && out.contains("root hash"), "{out}");
    }
}

/// Random single-byte corruptions in the data and hash areas (superblock included), each
/// judged the same way by both; at least 50 in all.
#[test]
fn random_corruptions_are_judged_like_veritysetup() {
    let dir = tmpdir("verity-random");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut judged = 0;
    let mut failed_both = 0;
    for c in cases() {
        let len = 512 << 10;
        let (data, hash, root) = format(&dir, &c, len, u64::try_from(judged).unwrap() + 1);
        let off = offset_of(&c, len);
        let hash_len = std::fs::metadata(&hash).unwrap().len();
        for i in 0..16 {
            // Half in the data area, half in the hash area (superblock, tree, padding).
            let (file, pos) = if i % 2 == 0 {
                (&data, rng.below(len as u64))
            } else {
                (&hash, off + rng.below(hash_len - off))
            };
            let mut b = std::fs::read(file).unwrap();
            let pos = usize::try_from(pos).unwrap();
            let orig = b[pos];
            b[pos] ^= 1 << rng.below(8);
            std::fs::write(file, &b).unwrap();
            let theirs = veritysetup_ok(&c, &data, &hash, &root, len);
            let (mine, out) = ours(&c, &data, &hash, &root, len, "2");
            assert_eq!(
                mine,
                theirs,
                "{} byte {pos} of {}: veritysetup says {theirs}, we say {mine}: {out}",
                c.name,
                file.display()
            );
            if !mine {
                failed_both += 1;
                assert!(
                    out.contains("CORRUPTED") || out.contains("validator:"),
                    "{out}"
                );
            }
            b[pos] = orig;
            std::fs::write(file, &b).unwrap();
            judged += 1;
        }
    }
    assert!(judged >= 50, "{judged}");
    assert!(
        failed_both > judged / 2,
        "most corruptions must be caught: {failed_both} of {judged}"
    );
}

/// The first corrupted data block is named.
#[test]
fn names_the_first_corrupted_block() {
    let dir = tmpdir("verity-first");
    let c = &cases()[0];
    let len = 4 << 20;
    let (data, hash, root) = format(&dir, c, len, 3);
    let mut b = std::fs::read(&data).unwrap();
    b[4096 * 700 + 5] ^= 0x10;
    b[4096 * 300 + 9] ^= 0x10;
    std::fs::write(&data, &b).unwrap();
    let (ok, out) = ours(c, &data, &hash, &root, len, "4");
    assert!(!ok);
    assert!(
        out.contains("CORRUPTED: data block 300 does not match its hash"),
        "{out}"
    );
}

/// A signed root hash (DPS JSON, PKCS#7 by openssl) is accepted from a trusted cert only.
#[test]
fn signed_root_hash_needs_a_trusted_cert() {
    let dir = tmpdir("verity-sig");
    let c = &cases()[0];
    let len = 1 << 20;
    let (data, hash, root) = format(&dir, c, len, 5);
    let mk = |name: &str| {
        let key = dir.join(format!("{name}.key"));
        let cert = dir.join(format!("{name}.pem"));
        common::keys::self_signed(
            &key,
            &cert,
            name,
            "ec",
            1,
            &["-pkeyopt", "ec_paramgen_curve:prime256v1"],
        );
        (key, cert)
    };
    let (key, cert) = mk("image-key");
    let (_, other) = mk("other-key");
    let rh = dir.join("rh.txt");
    std::fs::write(&rh, &root).unwrap();
    let p7 = dir.join("rh.p7s");
    let st = Command::new("openssl")
        .args([
            "smime", "-sign", "-binary", "-noattr", "-nocerts", "-outform", "DER", "-in",
        ])
        .arg(&rh)
        .arg("-signer")
        .arg(&cert)
        .arg("-inkey")
        .arg(&key)
        .arg("-out")
        .arg(&p7)
        .output()
        .unwrap();
    assert!(st.status.success());
    let der = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(&cert)
        .output()
        .unwrap()
        .stdout;
    use base64::Engine;
    use sha2::Digest;
    let json = serde_json::json!({
        "rootHash": root,
        "certificateFingerprint": validator::util::hex(&sha2::Sha256::digest(&der)),
        "signature": base64::engine::general_purpose::STANDARD.encode(std::fs::read(&p7).unwrap()),
    });
    let sigf = dir.join("root.sig");
    let mut bytes = json.to_string().into_bytes();
    bytes.resize(4096, 0);
    std::fs::write(&sigf, &bytes).unwrap();
    let run = |trust: &Path| {
        Command::new(env!("CARGO_BIN_EXE_validator"))
            .args([
                "verity",
                "verify",
                "--data",
                data.to_str().unwrap(),
                "--hash",
                hash.to_str().unwrap(),
                "--sig",
                sigf.to_str().unwrap(),
                "--trust",
                trust.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let out = run(&cert);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&other);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("names no certificate in the trust store"),
        "{err}"
    );
    // Malformed JSON and base64 are clear errors.
    std::fs::write(&sigf, b"{\"rootHash\": 12").unwrap();
    let err = String::from_utf8_lossy(&run(&cert).stderr).into_owned();
    assert!(err.contains("root-verity-sig: not JSON"), "{err}");
    std::fs::write(
        &sigf,
        format!(
            "{{\"rootHash\":\"{root}\",\"certificateFingerprint\":\"00\",\"signature\":\"@@@\"}}"
        ),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&run(&cert).stderr).into_owned();
    assert!(err.contains("not base64"), "{err}");
}

/// A superblock with `data_blocks` 0 means "the whole data device" to `veritysetup
/// verify`; ours reads it the same way, judged side by side on clean and corrupted data.
#[test]
fn zero_data_blocks_is_the_whole_data_device_as_for_veritysetup() {
    let dir = tmpdir("verity-zero-blocks");
    for (c, len) in [
        (
            Case {
                name: "zero-4k",
                args: vec![],
                same_file: false,
                hash_offset: 0,
            },
            1 << 20,
        ),
        (
            Case {
                name: "zero-1k",
                args: vec!["--data-block-size=1024", "--hash-block-size=512"],
                same_file: false,
                hash_offset: 0,
            },
            300 * 1024 + 100,
        ),
    ] {
        let (data, hash, root) = format(&dir, &c, len, 7);
        let mut h = std::fs::read(&hash).unwrap();
        h[72..80].copy_from_slice(&0u64.to_le_bytes());
        std::fs::write(&hash, &h).unwrap();
        assert!(veritysetup_ok(&c, &data, &hash, &root, len), "{}", c.name);
        let (ok, text) = ours(&c, &data, &hash, &root, len, "2");
        assert!(ok, "{}: {text}", c.name);
        let blocks = len / block_size(&c);
        assert!(
            text.contains(&format!("({blocks} data blocks of")),
            "{}: {text}",
            c.name
        );
        // Corrupt the last whole block: both refuse.
        let mut d = std::fs::read(&data).unwrap();
        d[(blocks - 1) * block_size(&c)] ^= 1;
        std::fs::write(&data, &d).unwrap();
        assert!(!veritysetup_ok(&c, &data, &hash, &root, len), "{}", c.name);
        let (ok, text) = ours(&c, &data, &hash, &root, len, "2");
        assert!(!ok && text.contains("CORRUPTED"), "{}: {text}", c.name);
    }
    // A data device smaller than one block: nothing to verify, a clear error.
    let tiny = dir.join("tiny.data");
    std::fs::write(&tiny, [1u8; 100]).unwrap();
    let c = Case {
        name: "zero-4k",
        args: vec![],
        same_file: false,
        hash_offset: 0,
    };
    let out = Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(["verity", "verify", "--data"])
        .arg(&tiny)
        .arg("--hash")
        .arg(dir.join(format!("{}.hash", c.name)))
        .args(["--root-hash", &"00".repeat(32)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no whole data block"), "{err}");
}

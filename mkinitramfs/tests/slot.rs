//! `mkinitramfs slot`: a slot image from a root directory and from an ext4 image, judged by
//! `veritysetup verify` (and refused by it after one flipped byte), built twice to the same
//! bytes, its signature read back by the gate's own code; hostile inputs refused by name
//! with nothing left behind. (The boot of such an image is QEMU scenario `real-node`,
//! whose slots this command builds.)
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch(tag: &str) -> PathBuf {
    let d = workspace().join(format!("target/test-tmp/slot-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sh(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A root directory, an RSA key and certificate, a BOM with `[verity]` and an init.
fn inputs(d: &Path) {
    std::fs::create_dir_all(d.join("root/etc")).unwrap();
    std::fs::create_dir_all(d.join("root/sbin")).unwrap();
    std::fs::write(d.join("root/etc/hostname"), "node\n").unwrap();
    std::fs::write(d.join("root/sbin/init"), "#!/bin/sh\n").unwrap();
    for (key, cert, cn) in [
        ("key.pem", "cert.pem", "fleet"),
        ("other.pem", "other-cert.pem", "x"),
    ] {
        test_support::keys::rsa(&d.join(key), &d.join(cert), cn);
    }
    let tree = mkinitramfs::closure::KernelTree::open(&workspace().join("target/kernels/default"))
        .unwrap();
    let bom = format!(
        "schema = 1\nimage_id = \"slot-test\"\n\n[kernel]\nrelease = \"{}\"\n\n[modules]\n\
         load = [\"virtio_blk\", \"dm_verity\", \"erofs\"]\n\n[verity]\nsource = \"bom\"\n\
         critical = [\"/sbin/init\"]\n\n[policy]\ntrust = [\"cert.pem\"]\n",
        tree.release
    );
    std::fs::write(d.join("bom.toml"), bom).unwrap();
    std::fs::write(d.join("init"), b"\x7fELF stand-in").unwrap();
}

/// Slot B's line under the shipped grub.cfg.
const CMDLINE: &str = "BOOT_IMAGE=/B/vmlinuz validator.slot=B console=ttyS0,115200 panic=-1 ro";

fn slot(d: &Path, root: &str, bom: &str, key: &str, out: &str) -> (bool, String) {
    slot_with(d, root, bom, key, out, &[])
}

fn slot_with(
    d: &Path,
    root: &str,
    bom: &str,
    key: &str,
    out: &str,
    more: &[&str],
) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"))
        .current_dir(d)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .args([
            "slot", "--root", root, "--bom", bom, "--init", "init", "--key", key,
        ])
        .args([
            "--cert",
            "cert.pem",
            "--slot",
            "B",
            "--options",
            "ro",
            "-o",
            out,
        ])
        // A slot with a Unified Kernel Image is predicted from its own command line.
        .args(if more.contains(&"--uki-cmdline") {
            &[][..]
        } else {
            &["--cmdline", CMDLINE][..]
        })
        .arg("--kernel")
        .arg(workspace().join("target/kernels/default"))
        .args(more)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let e = e.unwrap().path();
            if e.is_dir() {
                stack.push(e);
            } else {
                let rel = e.strip_prefix(dir).unwrap().display().to_string();
                v.push((rel, std::fs::read(&e).unwrap()));
            }
        }
    }
    v.sort();
    v
}

fn veritysetup_verify(out: &Path) -> bool {
    let hash = std::fs::read_to_string(out.join("root.roothash")).unwrap();
    Command::new("veritysetup")
        .arg("verify")
        .arg(out.join("root.img"))
        .arg(out.join("root.verity"))
        .arg(hash.trim())
        .status()
        .unwrap()
        .success()
}

#[test]
fn slot_image_verifies_reproduces_and_carries_its_signed_root_hash() {
    let d = scratch("good");
    inputs(&d);
    // From a directory (erofs), twice, and from an ext4 image the operator made.
    let (ok, err) = slot(&d, "root", "bom.toml", "key.pem", "one");
    assert!(ok, "{err}");
    let (ok, err) = slot(&d, "root", "bom.toml", "key.pem", "two");
    assert!(ok, "{err}");
    let one = files(&d.join("one"));
    assert_eq!(
        one,
        files(&d.join("two")),
        "two builds from the same inputs"
    );
    let names: Vec<&str> = one.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "SHA256SUMS",
        "bom.toml",
        "esp/B/initrd.img",
        "esp/B/vmlinuz",
        "esp/loader/entries/slot-b.conf",
        "reference.json",
        "root.img",
        "root.roothash",
        "root.verity",
        "root.verity-sig",
    ] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    sh(Command::new("sha256sum")
        .arg("-c")
        .arg("--quiet")
        .arg("SHA256SUMS")
        .current_dir(d.join("one")));
    assert!(veritysetup_verify(&d.join("one")));
    // The gate's reading: the signature verifies against the certificate, and the BOM
    // pins the same root hash.
    let out = d.join("one");
    let hash = std::fs::read_to_string(out.join("root.roothash")).unwrap();
    let sig = validator::formats::verity::sig::parse(
        &std::fs::read(out.join("root.verity-sig")).unwrap(),
    )
    .unwrap();
    assert_eq!(sig.root_hash_hex, hash);
    let mut store = validator::trust::TrustStore::new();
    store.add_path(&d.join("cert.pem")).unwrap();
    validator::trust::rootsig::verify(&sig, &store).unwrap();
    let bom = validator::config::bom::load(&out.join("bom.toml")).unwrap();
    let pinned = bom.bom.verity.unwrap().root_hash.unwrap();
    assert_eq!(pinned.0, hash);
    // The reference: slot B by GRUB and by a kexec, the line given, the root hash built
    // here among the events, GRUB's PCR 9 files the ones written.
    let r = validator::attest::reference::Reference::parse(
        &std::fs::read_to_string(out.join("reference.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(r.image_id, "slot-test");
    let entries: Vec<(&str, &str)> = r
        .slots
        .iter()
        .map(|s| (s.slot.as_str(), s.entry.as_str()))
        .collect();
    assert_eq!(entries, [("B", "boot-loader"), ("B", "kexec")]);
    let boot = &r.slots[0];
    assert_eq!(boot.cmdline, CMDLINE);
    assert!(
        boot.events.iter().any(|e| e.data.contains(hash.trim())),
        "{:?}",
        boot.events
    );
    assert_eq!(boot.files.len(), 2);
    for f in &boot.files {
        use sha2::Digest;
        let bytes = std::fs::read(out.join(format!("esp{}", f.path))).unwrap();
        let want = validator::util::hex(&sha2::Sha256::digest(&bytes));
        assert_eq!(f.digests.get("sha256"), Some(&want), "{}", f.path);
    }
    let entry = std::fs::read_to_string(out.join("esp/loader/entries/slot-b.conf")).unwrap();
    assert!(entry.contains("options validator.slot=B ro\n"), "{entry}");
    // One flipped byte of the root: veritysetup refuses it.
    let img = out.join("root.img");
    let mut b = std::fs::read(&img).unwrap();
    b[1024] ^= 1;
    std::fs::write(&img, b).unwrap();
    assert!(!veritysetup_verify(&out));
    // An ext4 image made by mkfs.ext4.
    sh(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-E", "root_owner=0:0", "-d"])
        .arg(d.join("root"))
        .arg(d.join("root.ext4"))
        .arg("8M"));
    let (ok, err) = slot(&d, "root.ext4", "bom.toml", "key.pem", "ext4");
    assert!(ok, "{err}");
    assert!(veritysetup_verify(&d.join("ext4")));
    let _ = std::fs::remove_dir_all(&d);
}

/// `--rauc-bundle`: RAUC itself (with the example system.conf) verifies the bundle's
/// signature against the certificate and lists the three images with the checksums of
/// SHA256SUMS; against another keyring it refuses the bundle.
#[test]
fn rauc_bundle_is_verified_by_rauc_with_the_images_of_the_slot() {
    let d = scratch("rauc");
    inputs(&d);
    let (ok, err) = slot_with(&d, "root", "bom.toml", "key.pem", "bundled", RAUC_ARGS);
    assert!(ok, "{err}");
    let out = d.join("bundled");
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    let conf = workspace().join("examples/rauc/system.conf");
    let info = |keyring: &str| {
        Command::new("rauc")
            .arg("-c")
            .arg(&conf)
            .arg("info")
            .arg(format!("--keyring={}", d.join(keyring).display()))
            .arg(out.join("bundle.raucb"))
            .output()
            .unwrap()
    };
    let o = info("cert.pem");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("Compatible: \t'gpu-node'"), "{text}");
    for (class, file) in [
        ("rootfs", "root.img"),
        ("rootfs-verity", "root.verity"),
        ("rootfs-sig", "root.verity-sig"),
    ] {
        let sum = sums
            .lines()
            .find_map(|l| l.strip_suffix(&format!("  {file}")))
            .unwrap();
        let at = text.find(&format!("[{class}]")).unwrap();
        let rest = &text[at..];
        assert!(
            rest.lines()
                .take(4)
                .any(|l| l.contains(&format!("Checksum:  {sum}"))),
            "{class}: {rest}"
        );
    }
    assert!(!info("other-cert.pem").status.success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn hostile_inputs_are_refused_by_name_and_leave_nothing() {
    let d = scratch("hostile");
    inputs(&d);
    std::fs::write(d.join("garbage.img"), vec![0x5a; 100_000]).unwrap();
    std::fs::write(d.join("empty.img"), b"").unwrap();
    sh(Command::new("mkfifo").arg(d.join("fifo")));
    let bom = std::fs::read_to_string(d.join("bom.toml")).unwrap();
    std::fs::write(
        d.join("missing-module.toml"),
        bom.replace("\"erofs\"]", "\"erofs\", \"no_such_module\"]"),
    )
    .unwrap();
    let plain: String = bom
        .lines()
        .filter(|l| {
            !l.starts_with("[verity]") && !l.starts_with("source") && !l.starts_with("critical")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(d.join("no-verity.toml"), plain).unwrap();
    std::fs::create_dir(d.join("exists")).unwrap();
    sh(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-d"])
        .arg(d.join("root"))
        .arg(d.join("cut.ext4"))
        .arg("8M"));
    let whole = std::fs::read(d.join("cut.ext4")).unwrap();
    std::fs::write(d.join("cut.ext4"), &whole[..whole.len() / 2]).unwrap();
    for (root, bom, key, out, says) in [
        (
            "garbage.img",
            "bom.toml",
            "key.pem",
            "o1",
            "garbage.img: no filesystem image",
        ),
        (
            "empty.img",
            "bom.toml",
            "key.pem",
            "o2",
            "empty.img: no filesystem image",
        ),
        (
            "fifo",
            "bom.toml",
            "key.pem",
            "o3",
            "fifo: not a file or a directory",
        ),
        (
            "cut.ext4",
            "bom.toml",
            "key.pem",
            "o9",
            "cut.ext4: truncated: its ext4 superblock says 8388608 bytes",
        ),
        ("nope", "bom.toml", "key.pem", "o4", "nope: No such file"),
        (
            "root",
            "bom.toml",
            "other.pem",
            "o5",
            "other.pem: not the key of the certificate cert.pem",
        ),
        (
            "root",
            "missing-module.toml",
            "key.pem",
            "o6",
            "no_such_module is neither in the kernel tree",
        ),
        (
            "root",
            "no-verity.toml",
            "key.pem",
            "o7",
            "no-verity.toml: no [verity] section",
        ),
        ("root", "bom.toml", "key.pem", "exists", "exists: exists"),
        (
            "root",
            "bom.toml",
            "key.pem",
            "no/such/dir/o8",
            "its directory no/such/dir does not exist",
        ),
    ] {
        let (ok, err) = slot(&d, root, bom, key, out);
        assert!(!ok, "{root} {bom} {key} {out}");
        assert!(err.contains(says), "{out}: {err}");
    }
    let left: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with('o') && n != "other.pem" && n != "other-cert.pem" || n.contains("partial")
        })
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(std::fs::read_dir(d.join("exists")).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

/// A section of a PE image as objcopy extracts it (an independent reader).
fn section(image: &Path, name: &str, out: &Path) -> Vec<u8> {
    sh(Command::new("objcopy")
        .args(["-O", "binary", "--only-section", name])
        .arg(image)
        .arg(out));
    std::fs::read(out).unwrap()
}

const UKI_LINE: &str = "console=ttyS0,115200 panic=-1 ro";

/// A RAUC bundle signed by the test key, for the example system.conf's `compatible`.
const RAUC_ARGS: &[&str] = &[
    "--rauc-bundle",
    "gpu-node",
    "--rauc-key",
    "key.pem",
    "--rauc-cert",
    "cert.pem",
];

/// The slot's Unified Kernel Image: signed by the fleet key as sbverify judges it (and not
/// by another), the kernel and initramfs inside byte for byte as objcopy extracts them,
/// the command line naming the slot; the same bytes twice; unsigned and then signed by
/// sbsign outside the tool, the same image; and what the reference predicts of PCR 11
/// after the stub is what `systemd-measure calculate` gives for those sections.
#[test]
fn uki_is_signed_reproducible_and_predicted_as_systemd_measure_does() {
    let d = scratch("uki");
    inputs(&d);
    let uki = ["--uki-cmdline", UKI_LINE];
    let signed = [
        &uki[..],
        &["--uki-key", "key.pem", "--uki-cert", "cert.pem"],
    ]
    .concat();
    for out in ["u1", "u2"] {
        let (ok, err) = slot_with(&d, "root", "bom.toml", "key.pem", out, &signed);
        assert!(ok, "{err}");
    }
    assert_eq!(files(&d.join("u1")), files(&d.join("u2")));
    let out = d.join("u1");
    let image = out.join("esp/B/linux.efi");
    let verify = |cert: &str| {
        Command::new("sbverify")
            .arg("--cert")
            .arg(d.join(cert))
            .arg(&image)
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(
        verify("cert.pem"),
        "sbverify refuses the fleet-signed image"
    );
    assert!(
        !verify("other-cert.pem"),
        "sbverify took another key's certificate"
    );
    // Signed at SOURCE_DATE_EPOCH (2023), before the test certificate was made: the
    // firmware's rule asks no time and takes it (as sbverify does); the kernel's rule
    // (`kexec_file_load`'s pkcs7_verify_one) holds the signing time against the embedded
    // certificate and refuses it.
    {
        use validator::trust::authenticode::{verify, AuthenticodeError, Rule};
        use validator::trust::message::MessageError;
        let mut store = validator::trust::TrustStore::new();
        store.add_path(&d.join("cert.pem")).unwrap();
        let bytes = std::fs::read(&image).unwrap();
        verify(&bytes, &store, &[], Rule::Firmware).unwrap();
        let e = verify(&bytes, &store, &[], Rule::Kernel).unwrap_err();
        assert!(
            matches!(
                e,
                AuthenticodeError::Untrusted {
                    source: MessageError::SignedOutsideValidity { .. },
                    ..
                }
            ),
            "{e}"
        );
    }
    let line = section(&image, ".cmdline", &d.join("cmdline"));
    assert_eq!(line, format!("validator.slot=B {UKI_LINE}").as_bytes());
    let linux = section(&image, ".linux", &d.join("linux"));
    assert_eq!(linux, std::fs::read(out.join("esp/B/vmlinuz")).unwrap());
    let initrd = section(&image, ".initrd", &d.join("initrd"));
    assert_eq!(initrd, std::fs::read(out.join("esp/B/initrd.img")).unwrap());
    let osrel = String::from_utf8(section(&image, ".osrel", &d.join("osrel"))).unwrap();
    assert!(osrel.contains("IMAGE_ID=\"slot-test\""), "{osrel}");
    // The reference: the image's entry, GRUB's read of it, the stub's events.
    let r = validator::attest::reference::Reference::parse(
        &std::fs::read_to_string(out.join("reference.json")).unwrap(),
    )
    .unwrap();
    let b = r.slot(validator::config::bom::SlotName::B).unwrap();
    assert_eq!(b.cmdline, format!("validator.slot=B {UKI_LINE}"));
    let sha = |b: &[u8]| validator::util::hex(&<sha2::Sha256 as sha2::Digest>::digest(b));
    assert_eq!(b.files.len(), 1);
    assert_eq!(b.files[0].path, "/B/linux.efi");
    assert_eq!(
        b.files[0].digests["sha256"],
        sha(&std::fs::read(&image).unwrap())
    );
    let stub = b.stub.as_ref().unwrap();
    let sections: Vec<&str> = stub.events.iter().map(|e| e.section.as_str()).collect();
    assert_eq!(
        sections,
        [".linux", ".linux", ".osrel", ".osrel", ".cmdline", ".cmdline", ".initrd", ".initrd"]
    );
    let measure = Command::new("/lib/systemd/systemd-measure")
        .arg("calculate")
        .arg(format!("--linux={}", d.join("linux").display()))
        .arg(format!("--osrel={}", d.join("osrel").display()))
        .arg(format!("--cmdline={}", d.join("cmdline").display()))
        .arg(format!("--initrd={}", d.join("initrd").display()))
        .args(["--bank=sha256", "--phase=", "--json=short"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&measure.stdout)
        .unwrap_or_else(|e| panic!("systemd-measure: {e}: {measure:?}"));
    assert_eq!(
        json["sha256"][0]["hash"].as_str(),
        Some(stub.pcr11["sha256"].as_str()),
        "{json}"
    );
    // The kexec entry (a fallback from A) starts no stub.
    assert!(r
        .slots
        .iter()
        .filter(|s| s.entry == validator::attest::reference::Entry::Kexec)
        .all(|s| s.stub.is_none()));
    // A RAUC bundle's image goes into whichever slot is not booted: its reference
    // predicts both, B's entries as above, A's its own image (its own line, its own
    // bytes) read from /A/.
    let rauc = [&signed[..], RAUC_ARGS].concat();
    let (ok, err) = slot_with(&d, "root", "bom.toml", "key.pem", "bundled", &rauc);
    assert!(ok, "{err}");
    let both = validator::attest::reference::Reference::parse(
        &std::fs::read_to_string(d.join("bundled/reference.json")).unwrap(),
    )
    .unwrap();
    let entries = |r: &validator::attest::reference::Reference| {
        r.slots
            .iter()
            .map(|s| (s.slot.as_str(), s.entry.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        entries(&both),
        [
            ("B", "boot-loader"),
            ("B", "kexec"),
            ("A", "boot-loader"),
            ("A", "kexec")
        ]
    );
    assert_eq!(&both.slots[..2], &r.slots[..]);
    let a = both.slot(validator::config::bom::SlotName::A).unwrap();
    assert_eq!(a.cmdline, format!("validator.slot=A {UKI_LINE}"));
    assert_eq!(a.files.len(), 1);
    assert_eq!(a.files[0].path, "/A/linux.efi");
    assert_ne!(a.files[0].digests["sha256"], b.files[0].digests["sha256"]);
    assert_ne!(a.stub, b.stub);
    // Unsigned, then signed outside the tool: the same image.
    let unsigned = [&uki[..], &["--uki-unsigned"]].concat();
    let (ok, err) = slot_with(&d, "root", "bom.toml", "key.pem", "u3", &unsigned);
    assert!(ok, "{err}");
    let list = Command::new("sbverify")
        .arg("--list")
        .arg(d.join("u3/esp/B/linux.efi"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&list.stderr).contains("No signature table present"),
        "{list:?}"
    );
    // The signing time the tool gives its own signature: SOURCE_DATE_EPOCH's.
    sh(Command::new("faketime")
        .args(["-f", "2023-11-14 22:13:20"])
        .env("TZ", "UTC")
        .arg("sbsign")
        .arg("--key")
        .arg(d.join("key.pem"))
        .arg("--cert")
        .arg(d.join("cert.pem"))
        .arg("--output")
        .arg(d.join("hsm.efi"))
        .arg(d.join("u3/esp/B/linux.efi")));
    assert_eq!(
        std::fs::read(d.join("hsm.efi")).unwrap(),
        std::fs::read(&image).unwrap()
    );
}

/// A stub that is no stub, a command line that names another slot, a key that is not
/// the certificate's: refused by name, nothing left behind.
#[test]
fn uki_hostile_inputs_are_refused_by_name_and_leave_nothing() {
    let d = scratch("uki-hostile");
    inputs(&d);
    std::fs::write(d.join("garbage.efi"), vec![0x4d; 5000]).unwrap();
    let (ok, err) = slot_with(
        &d,
        "root",
        "bom.toml",
        "key.pem",
        "good",
        &["--uki-cmdline", "ro", "--uki-unsigned"],
    );
    assert!(ok, "{err}");
    let built = d.join("good/esp/B/linux.efi");
    let signed = ["--uki-key", "key.pem", "--uki-cert", "cert.pem"];
    for (more, says) in [
        (
            vec!["--uki-cmdline", "validator.slot=A ro"],
            "names validator.slot= or BOOT_IMAGE= itself",
        ),
        (
            vec!["--uki-cmdline", "ro", "--uki-stub", built.to_str().unwrap()],
            "already has a .osrel section",
        ),
        (
            vec!["--uki-cmdline", "ro", "--uki-stub", "garbage.efi"],
            "garbage.efi: not a PE image",
        ),
        (
            vec!["--uki-cmdline", "ro", "--uki-stub", "."],
            ".: is a directory",
        ),
        (
            vec!["--uki-cmdline", "ro", "--uki-stub", "missing.efi"],
            "missing.efi",
        ),
    ] {
        let args = [&more[..], &signed[..]].concat();
        let (ok, err) = slot_with(&d, "root", "bom.toml", "key.pem", "bad", &args);
        assert!(!ok, "{more:?} was accepted");
        assert!(err.contains(says), "{more:?}: {err}");
        assert!(!d.join("bad").exists(), "{more:?} left its output");
    }
    // A key that does not belong to the certificate: sbsign or the check after it.
    let (ok, err) = slot_with(
        &d,
        "root",
        "bom.toml",
        "key.pem",
        "bad",
        &[
            "--uki-cmdline",
            "ro",
            "--uki-key",
            "other.pem",
            "--uki-cert",
            "cert.pem",
        ],
    );
    assert!(!ok && !d.join("bad").exists(), "{err}");
    assert!(
        err.contains("other.pem: not the key of the certificate cert.pem"),
        "{err}"
    );
}

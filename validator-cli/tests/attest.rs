//! `validator attest` as an operator and a fleet service run it: `verify` on the evidence
//! of a real boot (`validator/tests/fixtures/attest/`) exits 0, 1 (refused, with the
//! reason, also as JSON) or 2 (unusable input, named); `ak` and `quote` against a swtpm
//! write what `tpm2_checkquote` accepts and `verify --nonce` accepts; `predict` refuses
//! what is not an initramfs and outputs it must not write, leaving nothing behind.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::swtpm::{have_tools, setup_state, Swtpm};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../validator/tests/fixtures/attest")
        .join(name)
}

fn validator(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(args)
        .output()
        .unwrap()
}

fn verify(report: &Path, extra: &[&str]) -> Output {
    let mut a: Vec<&std::ffi::OsStr> = vec!["attest".as_ref(), "verify".as_ref(), "--ak".as_ref()];
    let ak = fixture("ak.pub");
    let reference = fixture("reference.json");
    let log = fixture("tpm-eventlog.bin");
    a.push(ak.as_os_str());
    a.push("--reference".as_ref());
    a.push(reference.as_os_str());
    a.push("--eventlog".as_ref());
    a.push(log.as_os_str());
    a.push("--report".as_ref());
    a.push(report.as_os_str());
    for e in extra {
        a.push(e.as_ref());
    }
    validator(&a)
}

#[test]
fn verify_exits_0_1_or_2_and_says_why() {
    let dir = common::tmpdir("attest-cli-verify");
    let out = verify(&fixture("report.json"), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("verified: "), "{text}");
    // Edited after the boot: refused (1), in JSON too.
    let edited = dir.join("edited.json");
    let r = std::fs::read_to_string(fixture("report.json")).unwrap();
    std::fs::write(&edited, r.replace("\"pool\":null", "\"pool\":\"gpu\"")).unwrap();
    let out = verify(&edited, &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verified"], false);
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("report was changed after the boot"),
        "{v}"
    );
    // A policy that does not accept the decision: refused.
    let out = verify(&fixture("report.json"), &["--accept", "quarantine"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("which the policy does not accept"));
    // A replay after this quote was accepted (reset count 3, later clock): refused.
    let out = verify(&fixture("report.json"), &["--after", "3:99999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("stale quote"));
    // Unusable inputs: exit 2, named.
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let empty = dir.join("empty.json");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.join("missing.json");
    for (p, says) in [
        (&dir, "directory"),
        (&fifo, "FIFO"),
        (&missing, "missing.json"),
        (&empty, "not JSON"),
    ] {
        let out = verify(p, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", p.display());
        assert!(err.contains(says), "{}: {err}", p.display());
    }
    let out = verify(&fixture("report.json"), &["--after", "x"]);
    assert_eq!(out.status.code(), Some(2));
    // The same exit status with --json, the answer on stdout too.
    let out = verify(&empty, &["--json"]);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["verified"].as_bool(), v["unusable"].as_bool()),
        (Some(false), Some(true))
    );
    assert!(v["reason"].as_str().unwrap().contains("empty.json"), "{v}");
    // A key given twice ("stop" first): not a report, in either mode, named.
    let twice = dir.join("twice.json");
    std::fs::write(&twice, r.replacen('{', "{\"decision\":\"stop\",", 1)).unwrap();
    for extra in [&[][..], &["--json"]] {
        let out = verify(&twice, extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            all.contains("twice.json") && all.contains("given twice"),
            "{all}"
        );
    }
    // A truncated log: unusable (2), naming the log, in the report and challenge forms.
    let log = std::fs::read(fixture("tpm-eventlog.bin")).unwrap();
    let cut = dir.join("cut.bin");
    std::fs::write(&cut, &log[..log.len() - 3]).unwrap();
    let report = fixture("report.json");
    let ak = fixture("ak.pub");
    let reference = fixture("reference.json");
    let os = |p: &Path| p.as_os_str().to_owned();
    let base = |form: &[&std::ffi::OsStr]| {
        let mut a: Vec<std::ffi::OsString> =
            vec!["attest".into(), "verify".into(), "--ak".into(), os(&ak)];
        a.extend(form.iter().map(|s| s.to_os_string()));
        let a: Vec<&std::ffi::OsStr> = a.iter().map(|s| s.as_os_str()).collect();
        validator(&a)
    };
    let out = base(&[
        "--reference".as_ref(),
        reference.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
        "--eventlog".as_ref(),
        cut.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut.bin"));
    let out = base(&[
        "--message".as_ref(),
        report.as_os_str(),
        "--signature".as_ref(),
        report.as_os_str(),
        "--nonce".as_ref(),
        "00".as_ref(),
        "--eventlog".as_ref(),
        cut.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut.bin"));
    // The challenge form with an option of the report form: refused, not ignored.
    for (opt, val) in [
        ("--reference", reference.as_os_str()),
        ("--accept", "quarantine".as_ref()),
        ("--after", "1:2".as_ref()),
    ] {
        let out = base(&[
            "--message".as_ref(),
            report.as_os_str(),
            "--signature".as_ref(),
            report.as_os_str(),
            "--nonce".as_ref(),
            "00".as_ref(),
            opt.as_ref(),
            val,
        ]);
        assert_eq!(out.status.code(), Some(2), "{opt}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("cannot be used with"),
            "{opt}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn predict_refuses_bad_inputs_and_outputs_and_leaves_nothing() {
    let dir = common::tmpdir("attest-cli-predict");
    let not_initramfs = dir.join("not.img");
    std::fs::write(&not_initramfs, b"hello, not a cpio archive\n").unwrap();
    let out_file = dir.join("ref.json");
    let run = |initramfs: &Path, out: &Path| {
        validator(&[
            "attest".as_ref(),
            "predict".as_ref(),
            "--initramfs".as_ref(),
            initramfs.as_os_str(),
            "--slot".as_ref(),
            "A=validator.slot=A".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ])
    };
    let out = run(&not_initramfs, &out_file);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not.img"));
    assert!(!out_file.exists(), "nothing written");
    // A directory where the output should go: refused and left as it is.
    let taken = dir.join("taken");
    std::fs::create_dir(&taken).unwrap();
    let out = run(&not_initramfs, &taken);
    assert_eq!(out.status.code(), Some(2));
    assert!(taken.is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `validator attest ak` and `quote --nonce` against a swtpm: `tpm2_checkquote` accepts
/// the files, `verify --message --signature --nonce` accepts them and refuses another
/// nonce.
#[test]
fn a_challenge_quote_is_accepted_by_tpm2_checkquote_and_by_verify() {
    if !have_tools(&["tpm2_checkquote", "tpm2_pcrread"]) {
        return;
    }
    let dir = common::tmpdir("attest-cli-quote");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    setup_state(&state, "sha256");
    let swtpm = Swtpm::start(&state, "not-need-init,startup-clear");
    let addr = swtpm.addr().to_string();
    let q = dir.join("q");
    let nonce = "00112233445566778899aabbccddeeff";
    let out = validator(&[
        "attest".as_ref(),
        "quote".as_ref(),
        "--tcp".as_ref(),
        addr.as_ref(),
        "--nonce".as_ref(),
        nonce.as_ref(),
        "--out-dir".as_ref(),
        q.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The PCR values as tpm2-tools serialises them (its checkquote misreads a plain
    // values file with `-l` for such selections: tpm2-tools 5.4), from the same TPM.
    let sel = "sha256:0,1,2,3,4,5,6,7,8,9,11,13,14";
    let read = Command::new("tpm2_pcrread")
        .current_dir(&q)
        .env("TPM2TOOLS_TCTI", swtpm.tcti())
        .args([sel, "-F", "serialized", "-o", "pcrs.serialized"])
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let check = Command::new("tpm2_checkquote")
        .current_dir(&q)
        .args([
            "-u",
            "ak.pub",
            "-m",
            "quote.msg",
            "-s",
            "quote.sig",
            "-f",
            "pcrs.serialized",
            "-g",
            "sha256",
            "-q",
            nonce,
        ])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Our values file holds the same values, in quote order.
    let values = std::fs::read(q.join("quote.pcrs")).unwrap();
    assert_eq!(values.len(), 13 * 32);
    let ours = |n: &str| {
        validator(&[
            "attest".as_ref(),
            "verify".as_ref(),
            "--ak".as_ref(),
            q.join("ak.pub").as_os_str(),
            "--message".as_ref(),
            q.join("quote.msg").as_os_str(),
            "--signature".as_ref(),
            q.join("quote.sig").as_os_str(),
            "--nonce".as_ref(),
            n.as_ref(),
        ])
    };
    assert_eq!(ours(nonce).status.code(), Some(0));
    let other = ours("ff");
    assert_eq!(other.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&other.stdout).contains("the nonce"));
    // `ak` writes the same key the quote used.
    let ak = dir.join("ak.pub");
    let out = validator(&[
        "attest".as_ref(),
        "ak".as_ref(),
        "--tcp".as_ref(),
        addr.as_ref(),
        "--out".as_ref(),
        ak.as_os_str(),
    ]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(&ak).unwrap(),
        std::fs::read(q.join("ak.pub")).unwrap()
    );
    drop(swtpm);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Enrollment as an operator runs it: `attest ek` on the node, `make-credential` on the
/// verifier against swtpm's local CA, `activate` on the node gives back the verifier's
/// secret; against another CA the EK certificate is refused (exit 1) and nothing is
/// written.
#[test]
fn enrollment_through_the_ek_gives_the_verifier_its_secret_back() {
    if !have_tools(&["tpm2_startup"]) {
        return;
    }
    let dir = common::tmpdir("attest-cli-enroll");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    common::swtpm::setup_state_with_ek_cert(&state);
    let swtpm = Swtpm::start(&state, "not-need-init,startup-clear");
    let addr = swtpm.addr().to_string();
    let node = dir.join("node");
    let out = validator(&[
        "attest".as_ref(),
        "ek".as_ref(),
        "--tcp".as_ref(),
        addr.as_ref(),
        "--out-dir".as_ref(),
        node.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let make = |ca: &str, cred: &Path, secret: &Path| {
        validator(&[
            "attest".as_ref(),
            "make-credential".as_ref(),
            "--ek".as_ref(),
            node.join("ek.pub").as_os_str(),
            "--ek-cert".as_ref(),
            node.join("ek.der").as_os_str(),
            "--ca".as_ref(),
            ca.as_ref(),
            "--ak".as_ref(),
            node.join("ak.pub").as_os_str(),
            "--out".as_ref(),
            cred.as_os_str(),
            "--secret-out".as_ref(),
            secret.as_os_str(),
        ])
    };
    let (cred, secret) = (dir.join("cred.bin"), dir.join("secret.bin"));
    let out = make("/var/lib/swtpm-localca/issuercert.pem", &cred, &secret);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let got = dir.join("activated.bin");
    let out = validator(&[
        "attest".as_ref(),
        "activate".as_ref(),
        "--tcp".as_ref(),
        addr.as_ref(),
        "--in".as_ref(),
        cred.as_os_str(),
        "--out".as_ref(),
        got.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&got).unwrap(),
        std::fs::read(&secret).unwrap()
    );
    assert_eq!(std::fs::read(&secret).unwrap().len(), 32);
    // Another CA: refused, nothing written.
    let (cred2, secret2) = (dir.join("cred2.bin"), dir.join("secret2.bin"));
    let out = make(
        "/var/lib/swtpm-localca/swtpm-localca-rootca-cert.pem",
        &cred2,
        &secret2,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("none of the CAs given issued"));
    assert!(!cred2.exists() && !secret2.exists());
    // Issue 34 item 1: a failed make-credential destroyed the secret file it was given
    // (`--out` a directory, `--secret-out` an existing file), and the same file as both
    // outputs was overwritten by the credential (exit 0). Now every file stays as it was.
    let ca = "/var/lib/swtpm-localca/issuercert.pem";
    let old = dir.join("old-secret.bin");
    std::fs::write(&old, "OLD").unwrap();
    let out_dir = dir.join("a-directory");
    std::fs::create_dir(&out_dir).unwrap();
    let out = make(ca, &out_dir, &old);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a-directory"), "{err}");
    assert_eq!(std::fs::read(&old).unwrap(), b"OLD");
    for same in [old.clone(), dir.join(".").join("old-secret.bin")] {
        let out = make(ca, &old, &same);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("the same file named twice"), "{err}");
        assert_eq!(std::fs::read(&old).unwrap(), b"OLD");
    }
    // A second target in a missing directory: the first (existing) one is untouched.
    let out = make(ca, &old, &dir.join("missing/secret.bin"));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&old).unwrap(), b"OLD");
    drop(swtpm);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `predict --uki` of a slot built as a Unified Kernel Image by `mkinitramfs slot` (the
/// library): its boot-loader entry is the one `mkinitramfs slot` wrote into the slot's
/// `reference.json` - our events under the image's command line, GRUB's read of the
/// image, systemd-stub's events and PCR 11 after them (which `mkinitramfs/tests/slot.rs`
/// holds to `systemd-measure calculate`), the PCR values. A `--uki` naming no `--slot`,
/// given twice, or a missing file is refused (exit 2), nothing written.
#[test]
fn predict_of_a_unified_kernel_image_is_what_mkinitramfs_slot_predicted() {
    let d = common::tmpdir("attest-cli-uki");
    std::fs::create_dir_all(d.join("root/sbin")).unwrap();
    std::fs::write(d.join("root/sbin/init"), "#!/bin/sh\n").unwrap();
    common::keys::rsa(&d.join("key.pem"), &d.join("cert.pem"), "fleet");
    let kernel = common::workspace().join("target/kernels/default");
    let tree = mkinitramfs::closure::KernelTree::open(&kernel).unwrap();
    std::fs::write(
        d.join("bom.toml"),
        format!(
            "schema = 1\nimage_id = \"uki-cli\"\n\n[kernel]\nrelease = \"{}\"\n\n[modules]\n\
             load = [\"virtio_blk\", \"dm_verity\", \"erofs\"]\n\n[verity]\nsource = \"bom\"\n\
             critical = [\"/sbin/init\"]\n\n[policy]\ntrust = [\"cert.pem\"]\n",
            tree.release
        ),
    )
    .unwrap();
    std::fs::write(d.join("init"), b"\x7fELF stand-in").unwrap();
    let out = d.join("slot");
    mkinitramfs::slot::build(&mkinitramfs::slot::SlotSpec {
        root: d.join("root"),
        kernel,
        bom: d.join("bom.toml"),
        init: d.join("init"),
        key: d.join("key.pem"),
        cert: d.join("cert.pem"),
        slot: "B".into(),
        options: String::new(),
        out: out.clone(),
        epoch: 0,
        rauc: None,
        cmdline: None,
        uki: Some(mkinitramfs::slot::UkiSlot {
            stub: mkinitramfs::uki::DEBIAN_STUB.into(),
            cmdline: "console=ttyS0 ro".into(),
            signing: mkinitramfs::uki::Signing::Key {
                key: d.join("key.pem"),
                cert: d.join("cert.pem"),
            },
        }),
    })
    .unwrap();
    let image = out.join("esp/B/linux.efi");
    let initrd = out.join("esp/B/initrd.img");
    let reference = d.join("ref.json");
    let predict = |more: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "attest".as_ref(),
            "predict".as_ref(),
            "--initramfs".as_ref(),
            initrd.as_os_str(),
            "--slot".as_ref(),
            "B=validator.slot=B console=ttyS0 ro".as_ref(),
            "--out".as_ref(),
            reference.as_os_str(),
        ];
        args.extend_from_slice(more);
        validator(&args)
    };
    let file = format!("B:9:/B/linux.efi={}", image.display());
    let uki = format!("B={}", image.display());
    let o = predict(&[
        "--uki".as_ref(),
        uki.as_ref(),
        "--file".as_ref(),
        file.as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |p: &Path| {
        validator::attest::reference::Reference::parse(&std::fs::read_to_string(p).unwrap())
            .unwrap()
    };
    let (cli, built) = (read(&reference), read(&out.join("reference.json")));
    let b = validator::config::bom::SlotName::B;
    assert!(cli.slot(b).unwrap().stub.is_some());
    assert_eq!(cli.slot(b), built.slot(b));
    std::fs::remove_file(&reference).unwrap();
    let missing = d.join("missing.efi");
    for (more, says) in [
        (
            vec!["--uki".to_string(), format!("A={}", image.display())],
            "no --slot A",
        ),
        (
            vec![
                "--uki".to_string(),
                uki.clone(),
                "--uki".to_string(),
                uki.clone(),
            ],
            "--uki B given twice",
        ),
        (
            vec!["--uki".to_string(), format!("B={}", missing.display())],
            "missing.efi",
        ),
        (
            vec![
                "--uki".to_string(),
                uki.clone(),
                "--slot".to_string(),
                "A=validator.slot=A console=ttyS0 ro".to_string(),
                "--uki".to_string(),
                format!("A={}", image.display()),
            ],
            "the image's .cmdline is \"validator.slot=B console=ttyS0 ro\", --slot A gives",
        ),
    ] {
        let args: Vec<&std::ffi::OsStr> = more.iter().map(|s| s.as_ref()).collect();
        let o = predict(&args);
        assert_eq!(o.status.code(), Some(2), "{more:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{more:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!reference.exists(), "{more:?}: nothing written");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

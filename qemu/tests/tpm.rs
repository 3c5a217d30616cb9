//! End-to-end measured boot with swtpm: the TPM's PCRs, `tpm2_eventlog`'s replay of our
//! binary log and `validator tpm replay` of it must agree, in every active bank.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::collections::BTreeMap;
use std::process::Command;

use qemu::scenario::Scenario;
use qemu::tpmcheck::{self, Listing};
use validator::report::{Decision, Fault};

fn run_scenario(s: Scenario) -> qemu::vm::Outcome {
    s.run_checked()
}

use qemu::scenario::Name;

fn run(name: Name) -> qemu::vm::Outcome {
    qemu::catalogue::run_named(name)
}

fn validator_replay(log: &[u8], dir: &std::path::Path, name: &str) -> Listing {
    let f = dir.join(name);
    std::fs::write(&f, log).unwrap();
    // The workspace's `validator` binary sits next to ours in the target directory.
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_qemu-harness")).with_file_name("validator");
    let out = Command::new(bin).args(["tpm", "replay"]).arg(&f).output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        _ => {
            // The validator binary of this workspace, built next to the harness.
            let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "run",
                    "-q",
                    "-p",
                    "validator-cli",
                    "--bin",
                    "validator",
                    "--",
                    "tpm",
                    "replay",
                ])
                .arg(&f)
                .output()
                .unwrap();
            assert!(
                st.status.success(),
                "{}",
                String::from_utf8_lossy(&st.stderr)
            );
            st
        }
    };
    tpmcheck::parse_listing(&String::from_utf8_lossy(&out.stdout))
}

fn check_agreement(name: Name, banks: &[&str]) -> qemu::vm::Outcome {
    let o = run(name);
    let r = o.reached_root();
    let tpm = r.tpm.as_ref().unwrap();
    assert!(tpm.present, "{tpm:?}");
    assert_eq!(tpm.banks, banks);
    assert!(tpm.firmware_log, "the firmware's log was continued");
    // One extend per event, plus the bank query and one read per touched PCR (11 and 13).
    let events = u64::from(tpm.events);
    assert_eq!(tpm.commands, events + 1 + 2, "{tpm:?}");
    let tpm_view = tpmcheck::parse_listing(&tpmcheck::section(&o.console, "TPM-PCRREAD").unwrap());
    let el = tpmcheck::section(&o.console, "TPM-EVENTLOG").unwrap();
    assert!(
        el.contains("TPM-EVENTLOG-RC 0"),
        "tpm2_eventlog failed: {el}"
    );
    let el_view = tpmcheck::eventlog_pcrs(&el);
    let dir = qemu::paths::run_dir(&format!("{name}-check")).unwrap();
    let log = tpmcheck::base64_section(&o.console, "TPM-LOG").unwrap();
    let ours = validator_replay(&log, &dir, "eventlog.bin");
    let cel = tpmcheck::base64_section(&o.console, "TPM-CEL").unwrap();
    let ours_cel = validator_replay(&cel, &dir, "cel.log");
    // The report read its PCRs back before the quote, so before the seal, the log's last
    // record, which the TPM holds as well.
    let at_quote = tpmcheck::pcrs_before_seal(&o.console).expect("the log ends with the seal");
    for bank in banks {
        let touched = &el_view[*bank];
        assert!(
            touched.contains_key(&11) && touched.contains_key(&13),
            "{bank}: {touched:?}"
        );
        for (pcr, v) in touched {
            assert_eq!(
                tpm_view[*bank].get(pcr),
                Some(v),
                "{bank} PCR {pcr}: TPM vs tpm2_eventlog"
            );
            assert_eq!(
                ours[*bank].get(pcr),
                Some(v),
                "{bank} PCR {pcr}: validator tpm replay vs tpm2_eventlog"
            );
        }
        assert_eq!(ours[*bank].len(), touched.len(), "{bank}: the same PCRs");
        // The CEL log holds our events only: it predicts PCRs 11 and 13 exactly, but for
        // PCR 11 after systemd-stub's events (in the firmware's log) when a Unified
        // Kernel Image was booted.
        let cel_pcrs: Vec<u32> = ours_cel[*bank].keys().copied().collect();
        assert_eq!(cel_pcrs, [11, 13]);
        let stub = r
            .boot_image
            .as_ref()
            .is_some_and(|b| b.kernel_image_pcr == Some(11));
        for pcr in [11, 13] {
            if !(stub && pcr == 11) {
                assert_eq!(
                    ours_cel[*bank][&pcr], tpm_view[*bank][&pcr],
                    "{bank} PCR {pcr}: CEL replay vs TPM"
                );
            }
            assert_eq!(
                tpm.pcrs[*bank][&pcr], at_quote[*bank][&pcr],
                "{bank} PCR {pcr}: report vs the log's replay before the seal"
            );
        }
    }
    o
}

#[test]
fn log_replays_to_the_tpm_values_sha1_sha256() {
    let o = check_agreement(Name::Tpm, &["sha1", "sha256"]);
    measured_bom_is_the_bom_in_the_initramfs(&o);
}

/// The BOM event in the log carries the SHA-256 of the very bytes that were parsed: equal
/// to the report's `bom_sha256` and to `sha256sum` of the BOM inside the initramfs.
fn measured_bom_is_the_bom_in_the_initramfs(o: &qemu::vm::Outcome) {
    use validator::formats::tpm::{eventlog::EventLog, HashAlg};
    let r = o.reached_root();
    let log = EventLog::parse(&tpmcheck::base64_section(&o.console, "TPM-LOG").unwrap()).unwrap();
    let bom_events: Vec<_> = log
        .events()
        .iter()
        .filter(|e| e.data.starts_with(b"bom:"))
        .collect();
    assert_eq!(bom_events.len(), 1, "one BOM measurement");
    let e = bom_events[0];
    assert_eq!(e.pcr, 13);
    let measured = e
        .digests
        .iter()
        .find(|(alg, _)| *alg == HashAlg::Sha256.alg_id())
        .map(|(_, d)| validator::util::hex(d))
        .unwrap();
    assert_eq!(Some(&measured), r.bom_sha256.as_ref(), "log vs report");
    let text = String::from_utf8_lossy(&e.data).into_owned();
    assert!(text.ends_with(&format!("sha256:{measured}")), "{text}");
    // The BOM as packed: extract it from the run's initramfs and hash it with sha256sum.
    let run_dir = o.log_path.parent().unwrap();
    let initrd = std::fs::read(run_dir.join("initrd.img")).unwrap();
    let entries = mkinitramfs::unpack::unpack(&initrd, mkinitramfs::limits::UNPACKED_MAX).unwrap();
    let bom = entries
        .iter()
        .find(|e| e.path == "etc/validator/bom.toml")
        .expect("the BOM in the initramfs");
    let f = run_dir.join("bom-from-initramfs.toml");
    std::fs::write(&f, &bom.data).unwrap();
    let out = Command::new("sha256sum").arg(&f).output().unwrap();
    let sum = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        sum.split_whitespace().next(),
        Some(measured.as_str()),
        "sha256sum"
    );
}

/// The production chain (`sb-node`: OVMF with Microsoft's keys and Secure Boot on,
/// Debian's signed shim, GRUB and kernel, the BOM requiring Secure Boot): the gate passes
/// with Secure Boot on and lockdown `integrity`, shim's and GRUB's measurements come
/// before ours in the log, and the whole log replays to the TPM (`check_agreement`).
#[test]
fn secure_boot_chain_passes_its_log_replays_with_shim_and_grub_events_and_it_attests() {
    use validator::formats::tpm::{eventlog::EventLog, HashAlg};
    let o = check_agreement(Name::SbNode, &["sha1", "sha256"]);
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Pass, "{}", o.describe());
    let p = r.preflight.as_ref().unwrap();
    assert_eq!(p.platform.secure_boot, Some(true));
    assert_eq!(p.platform.lockdown.as_deref(), Some("integrity"));
    assert!(o.console.contains("EFI stub: UEFI Secure Boot is enabled"));
    let el = tpmcheck::section(&o.console, "TPM-EVENTLOG").unwrap();
    let view = tpmcheck::eventlog_pcrs(&el);
    for pcr in [4, 7, 8, 9, 14] {
        assert!(view["sha256"].contains_key(&pcr), "PCR {pcr} in the log");
    }
    // shim's MOK lists (PCR 14), GRUB's commands (PCR 8) and files (PCR 9).
    for text in [
        "MokList",
        "grub_cmd: save_env --file /EFI/BOOT/grubenv A_TRY B_TRY",
        "kernel_cmdline: /A/vmlinuz validator.slot=A",
    ] {
        assert!(el.contains(text), "{text} in the log");
    }
    // GRUB's PCR 9 event of the slot's kernel is the SHA-256 of Debian's signed vmlinuz.
    let log = EventLog::parse(&tpmcheck::base64_section(&o.console, "TPM-LOG").unwrap()).unwrap();
    let kernel = log
        .events()
        .iter()
        .find(|e| e.pcr == 9 && e.data == b"/A/vmlinuz\0")
        .expect("GRUB measured /A/vmlinuz");
    let measured = kernel
        .digests
        .iter()
        .find(|(alg, _)| *alg == HashAlg::Sha256.alg_id())
        .map(|(_, d)| validator::util::hex(d))
        .unwrap();
    let vmlinuz = std::fs::read(qemu::paths::kernel("default").unwrap().vmlinuz).unwrap();
    assert_eq!(
        measured,
        validator::util::hex(&validator::trust::keys::sha256(&vmlinuz))
    );
    // Our events follow GRUB's.
    let first_ours = log.events().iter().position(|e| e.pcr == 13).unwrap();
    assert!(first_ours > log.events().iter().rposition(|e| e.pcr == 9).unwrap());
    attestation_verifies_and_each_change_is_named(&o);
}

/// The boot's attestation (issue: attestation), on the production chain: the prediction
/// made from the image equals the boot event for event in both banks (the PCR values
/// too), the report verifies against the AK enrolled from the node's TPM, and each
/// change is refused, naming why: the report edited, an AK of another TPM, a BOM, a
/// module or a command line other than the accepted image's, an image not accepted, the
/// same quote again, a decision the policy refuses. `tpm2_checkquote` accepts the quote.
fn attestation_verifies_and_each_change_is_named(o: &qemu::vm::Outcome) {
    use qemu::attestation::{self, Evidence};
    use validator::attest::verify::{verify_report, Policy, VerifyError};
    use validator::formats::tpm::attest::KeyKind;
    let (tpm_dir, dir) = attestation::dirs(o);
    let ev = Evidence::of(o).unwrap();
    let kernel = qemu::paths::kernel("default").unwrap().vmlinuz;
    let image = attestation::image_inputs(&dir, "A", &kernel).unwrap();
    let reference = image.predict().unwrap();
    let ak = attestation::enrolled_ak(&tpm_dir, KeyKind::EccP256).unwrap();
    // `VALIDATOR_WRITE_ATTEST_FIXTURE=1` keeps this boot's evidence as the verifier's
    // fixture (validator/tests/fixtures/attest/).
    if std::env::var_os("VALIDATOR_WRITE_ATTEST_FIXTURE").is_some() {
        let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../validator/tests/fixtures/attest");
        std::fs::write(d.join("ak.pub"), ak.to_2b()).unwrap();
        std::fs::write(d.join("report.json"), &ev.report).unwrap();
        std::fs::write(d.join("tpm-eventlog.bin"), &ev.log).unwrap();
        std::fs::write(d.join("reference.json"), reference.to_text()).unwrap();
    }
    let policy = Policy::default();
    let v = verify_report(
        &ak,
        std::slice::from_ref(&reference),
        &ev.report,
        &ev.log,
        &policy,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.boots.len(), 1);
    assert_eq!(
        (v.boots[0].slot.as_str(), v.boots[0].decision.as_str()),
        ("A", "pass")
    );
    assert_eq!(
        v.files_checked, 4,
        "GRUB's PCR 9 events of grub.cfg, node.cfg, /A/vmlinuz and /A/initrd.img (its one other record: grubenv)"
    );
    // The predicted PCR values of a pass are the TPM's (the report read them back).
    let r = o.reached_root();
    let tpm = r.tpm.as_ref().unwrap();
    let predicted = &reference
        .slot(validator::config::bom::SlotName::A)
        .unwrap()
        .pcrs[&validator::formats::tpm::measurement::Decision::Pass];
    for bank in ["sha1", "sha256"] {
        for pcr in [11, 13] {
            assert_eq!(
                predicted[bank][&pcr], tpm.pcrs[bank][&pcr],
                "{bank} PCR {pcr}"
            );
        }
    }
    // tpm2_checkquote accepts the quote, its qualifying data the report's digest.
    let q = r.attestation.as_ref().unwrap().quote.as_ref().unwrap();
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(s).unwrap()
    };
    let check = qemu::paths::run_dir("attest-checkquote").unwrap();
    std::fs::write(check.join("ak.pub"), ak.to_2b()).unwrap();
    std::fs::write(check.join("q.msg"), b64(&q.attest)).unwrap();
    std::fs::write(check.join("q.sig"), b64(&q.signature)).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&ev.report).unwrap();
    let qual = validator::util::hex(&validator::report::json::quoted_digest_of(&json));
    let out = Command::new("tpm2_checkquote")
        .current_dir(&check)
        .args([
            "-u", "ak.pub", "-m", "q.msg", "-s", "q.sig", "-g", "sha256", "-q", &qual,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refuse =
        |ak: &validator::formats::tpm::attest::Public,
         refs: &[validator::attest::reference::Reference],
         report: &[u8],
         policy: &Policy| { verify_report(ak, refs, report, &ev.log, policy).unwrap_err() };
    // The report edited after the boot.
    let edited = String::from_utf8(ev.report.clone())
        .unwrap()
        .replace("\"decision\":\"pass\"", "\"decision\":\"quarantine\"");
    let e = refuse(
        &ak,
        std::slice::from_ref(&reference),
        edited.as_bytes(),
        &policy,
    );
    assert!(matches!(e, VerifyError::Qualifying { .. }), "{e}");
    // An AK of another TPM.
    let other = attestation::other_tpm_ak(&dir.join("other-tpm"), KeyKind::EccP256).unwrap();
    let e = refuse(
        &other,
        std::slice::from_ref(&reference),
        &ev.report,
        &policy,
    );
    assert!(matches!(e, VerifyError::AkMismatch { .. }), "{e}");
    // The accepted image has another BOM: this boot's image is not accepted.
    let mut changed = image.clone();
    changed.bom.extend_from_slice(b"# another build\n");
    let e = refuse(&ak, &[changed.predict().unwrap()], &ev.report, &policy);
    assert!(matches!(e, VerifyError::NotAccepted(_)), "{e}");
    // The accepted image has crc16 re-signed by another trusted key (the fleet's).
    let key = sigcases::keys::snakeoil(&dir.join("keys"));
    let module = dir.join("crc16.ko");
    let k = qemu::paths::kernel("default").unwrap();
    qemu::initramfs::resign_module(&k, "crc16", &key, "sha256", &module).unwrap();
    let mut changed = image.clone();
    let rel = changed
        .initramfs
        .files
        .keys()
        .find(|p| p.ends_with("/crc16.ko"))
        .unwrap()
        .clone();
    changed
        .initramfs
        .files
        .insert(rel, std::fs::read(&module).unwrap());
    match refuse(&ak, &[changed.predict().unwrap()], &ev.report, &policy) {
        VerifyError::Event {
            expected, actual, ..
        } => {
            assert!(expected.starts_with("module:crc16 sha256:"), "{expected}");
            assert!(actual.starts_with("module:crc16 sha256:"), "{actual}");
            assert_ne!(expected, actual);
        }
        e => panic!("{e}"),
    }
    // The accepted image's boot entry has another command line.
    let mut changed = image.clone();
    changed.slots[0].cmdline.push_str(" init=/bin/sh");
    match refuse(&ak, &[changed.predict().unwrap()], &ev.report, &policy) {
        VerifyError::Event {
            expected, index, ..
        } => {
            assert!(expected.ends_with(" init=/bin/sh"), "{expected}");
            assert_eq!(index, 3, "enter-initrd, the BOM, then the command line");
        }
        e => panic!("{e}"),
    }
    // Only slot B's image is accepted.
    let b_image = attestation::image_inputs(&dir, "B", &kernel).unwrap();
    let e = refuse(&ak, &[b_image.predict().unwrap()], &ev.report, &policy);
    assert!(matches!(e, VerifyError::NotAccepted(_)), "{e}");
    // The same quote again, after the verifier accepted it once.
    let again = Policy {
        last: Some(v.clock),
        ..Policy::default()
    };
    let e = refuse(&ak, std::slice::from_ref(&reference), &ev.report, &again);
    assert!(matches!(e, VerifyError::Stale { .. }), "{e}");
    // A policy that accepts only quarantined boots.
    let strict = Policy {
        accept: vec![validator::formats::tpm::measurement::Decision::Quarantine],
        ..Policy::default()
    };
    let e = refuse(&ak, &[reference], &ev.report, &strict);
    assert!(matches!(e, VerifyError::Decision { .. }), "{e}");
}

#[test]
fn log_replays_to_the_tpm_values_sha256_sha384() {
    check_agreement(Name::TpmSha384, &["sha256", "sha384"]);
}

fn pcr13(o: &qemu::vm::Outcome) -> String {
    let r = o.report.as_ref().unwrap();
    assert_eq!(r.decision, Decision::Pass, "{}", o.describe());
    r.tpm.as_ref().unwrap().pcrs["sha256"][&13].clone()
}

/// Two RSA keys of our own (the 6.1 kernel verifies RSA only, and the gate follows it)
/// and one module signed once with each: two different files, both trusted by the BOM;
/// the BOM stays the same, one module differs.
fn two_signings(
    dir: &std::path::Path,
) -> (
    Vec<std::path::PathBuf>,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let ok = |c: &mut Command| assert!(c.output().unwrap().status.success(), "{c:?}");
    let kernel = qemu::paths::kernel("default").unwrap();
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root).unwrap();
    let orig = std::fs::read(tree.moddir.join(&tree.files["crc16"])).unwrap();
    let body = validator::formats::kmod::sig::split(&orig)
        .unwrap()
        .body
        .to_vec();
    let (mut certs, mut out) = (Vec::new(), Vec::new());
    for i in 0..2 {
        let key = dir.join(format!("fleet-{i}.key"));
        let cert = dir.join(format!("fleet-{i}.pem"));
        let der = dir.join(format!("fleet-{i}.der"));
        test_support::keys::self_signed(
            &key,
            &cert,
            &format!("fleet modules {i}"),
            "rsa:2048",
            2,
            &[],
        );
        ok(Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&cert)
            .arg("-out")
            .arg(&der));
        let m = dir.join(format!("crc16-{i}.ko"));
        std::fs::write(&m, &body).unwrap();
        ok(Command::new("/usr/lib/linux-kbuild-6.1/scripts/sign-file")
            .arg("sha256")
            .arg(&key)
            .arg(&der)
            .arg(&m));
        certs.push(cert);
        out.push(m);
    }
    assert_ne!(
        std::fs::read(&out[0]).unwrap(),
        std::fs::read(&out[1]).unwrap()
    );
    (certs, out[0].clone(), out[1].clone())
}

#[test]
fn same_inputs_same_pcr_different_bom_or_module_different_pcr() {
    let dir = qemu::paths::run_dir("tpm-determinism").unwrap();
    let (certs, m0, m1) = two_signings(&dir);
    let with = |module: &std::path::Path, image: &str| {
        let mut s = Scenario::good().unwrap();
        s.name = format!("tpm-det-{image}");
        s.bom.image_id = validator::config::bom::Version(image.into());
        s.bom.policy.trust = certs.iter().map(|c| c.display().to_string()).collect();
        // Our key is trusted by the gate, not by the kernel's keyring: the kernel taints
        // with E, which this BOM allows.
        s.bom.policy.taint_allowed = validator::config::bom::TaintLetters("E".into());
        s.module_overrides = vec![("crc16".into(), module.to_path_buf())];
        run_scenario(s)
    };
    let a = pcr13(&with(&m0, "img-1"));
    let b = pcr13(&with(&m0, "img-1"));
    assert_eq!(a, b, "the same boot twice must give the same PCR 13");
    let c = pcr13(&with(&m0, "img-2"));
    assert_ne!(a, c, "a different BOM must change PCR 13");
    let d = pcr13(&with(&m1, "img-1"));
    assert_ne!(a, d, "one different module must change PCR 13");
    let mut seen = BTreeMap::new();
    for (k, v) in [("a", &a), ("c", &c), ("d", &d)] {
        assert!(seen.insert(v.clone(), k).is_none());
    }
}

#[test]
fn no_tpm_when_required_stops_with_a_platform_fault() {
    let o = run(Name::NoTpm);
    let r = o.stopped();
    assert_eq!(r.fault, Some(Fault::Platform));
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with(
            "measure: TPM required by the BOM: no TPM: neither /dev/tpmrm0 nor /dev/tpm0 exists"
        ),
        "{reason}"
    );
    assert!(!r.tpm.as_ref().unwrap().present);
}

#[test]
fn tpm_dying_mid_boot_is_a_bounded_wait_then_the_policy() {
    let o = run(Name::TpmKilled);
    let r = o.stopped();
    assert_eq!(r.fault, Some(Fault::Platform), "{r:?}");
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.contains("TPM required by the BOM: measuring module:"),
        "{reason}"
    );
    assert!(
        reason.contains("TPM2_PCR_Extend"),
        "the failing command is named: {reason}"
    );
    let failure = r.tpm.as_ref().unwrap().failure.as_deref().unwrap();
    // QEMU answers for the dead swtpm with a fatal response code; a silent TPM would hit
    // the per-command deadline instead.
    assert!(
        failure.contains("TPM2_PCR_Extend failed") && failure.contains("(0x")
            || failure.contains("no response within"),
        "a response code or the deadline: {failure}"
    );
    // Bounded: the stop comes within seconds of the TPM dying, not after a hang.
    let (stop, start) = (r.boottime_report_us, r.boottime_start_us);
    assert!(stop - start < 20_000_000, "took {} us", stop - start);
}

/// A section of a PE image as objcopy extracts it (an independent reader), into `dir`.
fn pe_section(image: &std::path::Path, name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let out = dir.join(name.trim_start_matches('.'));
    let st = Command::new("objcopy")
        .args(["-O", "binary", "--only-section", name])
        .arg(image)
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "objcopy {name}");
    out
}

/// The gate itself under Secure Boot (`sb-uki`, issue 31): GRUB chainloads slot A's
/// Unified Kernel Image through shim (signed by the fleet's key, enrolled as a MOK),
/// systemd-stub starts Debian's kernel with the command line inside the image (the words
/// grub.cfg adds after the path do not reach the kernel), the gate passes, ignores and
/// names the credential the stub packed from beside the image, and says the stub started
/// the kernel. The log replays to the TPM (`check_agreement`, `tpm2_eventlog`); the
/// stub's PCR 11 events are the ones predicted from the image, and PCR 11 after them is
/// what `systemd-measure calculate` gives for the image's sections as objcopy extracts
/// them; the boot verifies against the image's reference, and not against the reference
/// of the same image booted as a plain kernel and initramfs.
#[test]
fn uki_boot_runs_the_signed_image_predicted_by_systemd_measure_and_verifies() {
    use qemu::attestation::{self, Evidence};
    use validator::attest::verify::{verify_report, Policy, VerifyError};
    use validator::formats::tpm::attest::KeyKind;
    use validator::formats::tpm::eventlog::EventLog;
    let o = check_agreement(Name::SbUki, &["sha1", "sha256"]);
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Pass, "{}", o.describe());
    assert_eq!(
        r.preflight.as_ref().unwrap().platform.secure_boot,
        Some(true)
    );
    let line = qemu::reportcheck::kernel_cmdline(&o.console).unwrap();
    assert!(line.starts_with("validator.slot=A "), "{line}");
    for absent in [
        qemu::secureboot::GRUB_UKI_WORD,
        "init=/bin/sh",
        "BOOT_IMAGE=",
    ] {
        assert!(
            !line.contains(absent),
            "{absent} reached the kernel: {line}"
        );
    }
    let el = tpmcheck::section(&o.console, "TPM-EVENTLOG").unwrap();
    assert!(
        el.contains(&format!(
            "grub_cmd: chainloader /A/linux.efi init=/bin/sh {}",
            qemu::secureboot::GRUB_UKI_WORD
        )),
        "GRUB gave the words: {el}"
    );
    let bi = qemu::reportcheck::stub_booted(r)
        .unwrap_or_else(|| panic!("no systemd-stub 252 boot: {:?}", r.boot_image));
    assert_eq!(bi.ignored_extra, ["/.extra/credentials/fleet.cred"]);
    assert!(r.warnings.iter().any(|w| w.contains("fleet.cred")));
    // The prediction from the image, and the boot against it.
    let (tpm_dir, dir) = attestation::dirs(&o);
    let kernel = qemu::paths::kernel("default").unwrap().vmlinuz;
    let reference = attestation::uki_image_inputs(&dir, "A", &kernel)
        .unwrap()
        .predict()
        .unwrap();
    let a = reference.slot(validator::config::bom::SlotName::A).unwrap();
    let stub = a.stub.as_ref().unwrap();
    let log = EventLog::parse(&tpmcheck::base64_section(&o.console, "TPM-LOG").unwrap()).unwrap();
    let seen: Vec<String> = log
        .events()
        .iter()
        .filter_map(|e| {
            (e.pcr == 11)
                .then(|| validator::formats::uki::section_of(&e.data))
                .flatten()
                .map(str::to_string)
        })
        .collect();
    let want: Vec<String> = stub.events.iter().map(|e| e.section.clone()).collect();
    assert_eq!(seen, want, "systemd-stub's PCR 11 events");
    // systemd-measure, on the sections as objcopy extracts them.
    let image = dir.join("slot-A/linux.efi");
    let scratch = qemu::paths::run_dir("sb-uki-measure").unwrap();
    let mut measure = Command::new("/lib/systemd/systemd-measure");
    measure.arg("calculate");
    for s in [".linux", ".osrel", ".cmdline", ".initrd"] {
        let f = pe_section(&image, s, &scratch);
        measure.arg(format!("--{}={}", s.trim_start_matches('.'), f.display()));
    }
    let out = measure
        .args(["--bank=sha256", "--bank=sha1", "--phase=", "--json=short"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("systemd-measure: {e}: {out:?}"));
    for bank in ["sha1", "sha256"] {
        assert_eq!(
            json[bank][0]["hash"].as_str(),
            Some(stub.pcr11[bank].as_str()),
            "{bank}: {json}"
        );
    }
    // The predicted PCR values of a pass are the TPM's.
    let tpm = r.tpm.as_ref().unwrap();
    for bank in ["sha1", "sha256"] {
        for pcr in [11, 13] {
            assert_eq!(
                a.pcrs[&Decision::Pass][bank][&pcr],
                tpm.pcrs[bank][&pcr],
                "{bank} PCR {pcr}"
            );
        }
    }
    let ev = Evidence::of(&o).unwrap();
    let ak = attestation::enrolled_ak(&tpm_dir, KeyKind::EccP256).unwrap();
    let v = verify_report(
        &ak,
        std::slice::from_ref(&reference),
        &ev.report,
        &ev.log,
        &Policy::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (v.boots.len(), v.boots[0].slot.as_str(), v.files_checked),
        (1, "A", 1),
        "one boot of A, GRUB's read of /A/linux.efi checked"
    );
    // The same image as a plain kernel and initramfs predicts no stub: refused.
    let plain = attestation::image_inputs(&dir, "A", &kernel)
        .unwrap()
        .predict()
        .unwrap();
    let e = verify_report(&ak, &[plain], &ev.report, &ev.log, &Policy::default()).unwrap_err();
    assert!(matches!(&e, VerifyError::Stub { .. }), "{e}");
}

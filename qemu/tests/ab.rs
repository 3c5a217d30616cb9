//! A/B slots end to end: OVMF, an unmodified GRUB (or systemd-boot) on a FAT ESP, two
//! slots each with its own kernel, initramfs and root, and the gate deciding: mark good,
//! demote and fall back by kexec or reboot, stop when both slots are bad, keep the slot on
//! a platform fault, and survive power cuts during its writes; the same fallback on the
//! Secure Boot chain (Debian's signed shim, GRUB and kernels, lockdown `integrity`).
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::time::Duration;

use qemu::ab::{self, Slot};
use qemu::scenario::{BootPath, Name, Roots, Scenario};
use qemu::vm::{KillAt, Outcome, Run, Throttle, Verdict};
use validator::formats::grubenv::GrubEnv;
use validator::formats::slotstate;
use validator::report::{Decision, Fault, Report};

fn bed(name: Name) -> ab::Bed {
    Scenario::named(name).unwrap().bed().unwrap()
}

fn grubenv(bed: &ab::Bed) -> String {
    let vars = bed.esp().unwrap().grubenv(&bed.dir).unwrap();
    let want = ["A_OK", "A_TRY", "B_OK", "B_TRY"];
    want.iter()
        .map(|k| {
            let v = vars
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("?");
            format!("{k}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Our record as the ESP holds it: the newest valid copy.
fn record(bed: &ab::Bed) -> slotstate::State {
    let esp = bed.esp().unwrap();
    let copies = [0, 1].map(|i| {
        esp.read(&format!("/validator/state.{i}"))
            .map_err(|e| slotstate::StateError::Invalid(e.to_string()))
            .and_then(|b| slotstate::decode(&b))
    });
    slotstate::newest(&copies)
        .map(|(_, r)| r.state.clone())
        .expect("a valid copy of the state record")
}

fn report(o: &Outcome) -> &Report {
    o.report
        .as_ref()
        .unwrap_or_else(|| panic!("no report: {}", o.describe()))
}

fn no_kernel_panic(run: &Run) {
    assert!(
        !run.console.contains("Attempted to kill init"),
        "{}",
        run.describe()
    );
    assert!(!run.console.contains("Kernel panic"), "{}", run.describe());
    assert!(!run.timed_out, "{}", run.describe());
}

#[test]
fn both_good_slot_a_is_marked_good_in_grubenv() {
    let bed = bed(Name::AbGood);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    assert_eq!(ab::root_slot(o), Some(Slot::A));
    let r = report(o);
    assert_eq!(r.decision, Decision::Pass);
    let s = r.slot.as_ref().unwrap();
    assert_eq!(s.booted.map(|b| b.as_str()), Some("A"));
    assert_eq!(
        s.before.get("A_TRY").map(String::as_str),
        Some("1"),
        "GRUB used a try"
    );
    assert!(
        s.action.as_deref().unwrap().contains("marked A good"),
        "{s:?}"
    );
    // On a GRUB node too the preflight reads Secure Boot (efivarfs is mounted with the API
    // filesystems, not only for systemd-boot): off here, not "unknown".
    let sb = r
        .preflight
        .as_ref()
        .and_then(|p| p.checks.iter().find(|c| c.name == "secure-boot"))
        .map(|c| c.detail.clone())
        .unwrap_or_default();
    assert!(sb.starts_with("Secure Boot off"), "{sb}");
    // What GRUB's own grub-editenv reads back.
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
    let rec = record(&bed);
    assert_eq!(rec.slots["A"].good, Some(true));
    assert_eq!(rec.consecutive_failures, 0);
    // A second power-on: GRUB boots A again (still good), the gate counts it afresh.
    let again = bed.boot().unwrap();
    assert_eq!(ab::root_slot(&again.boots[0]), Some(Slot::A));
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
}

/// Slot A's image fault (a module the gate refuses) demotes A and enters B by kexec: no
/// firmware, no boot loader in between; B's report names A's failure, and B's event log,
/// which continues the one A carried over, still replays to the TPM's PCRs.
#[test]
fn image_fault_falls_back_to_the_other_slot_by_kexec() {
    kexec_fallback(Name::AbImageFault);
}

/// B's report after the fallback (issue: attestation): its quote covers the carried log,
/// in which A's boot (started by GRUB, stopped short at the module gate: a part of its
/// image's events, then `decision:fallback`) precedes B's (started by kexec, with the
/// line the init gave it). With both images accepted and fallbacks allowed it verifies;
/// a policy without fallbacks, or one that accepts only B's image, refuses it, naming
/// boot 1.
fn fallback_attests_as_the_policy_says(b: &Outcome) {
    use qemu::attestation::{self, Evidence};
    use validator::attest::verify::{verify_report, Boot, Policy, VerifyError};
    use validator::formats::tpm::attest::KeyKind;
    let (tpm_dir, dir) = attestation::dirs(b);
    let ev = Evidence::of(b).unwrap();
    let kernel = qemu::paths::kernel("default").unwrap().vmlinuz;
    // The images' references as their slots boot: Unified Kernel Images when the run
    // made them.
    let inputs = |i: &str| {
        if dir.join(format!("slot-{i}/linux.efi")).is_file() {
            attestation::uki_image_inputs(&dir, i, &kernel)
        } else {
            attestation::image_inputs(&dir, i, &kernel)
        }
    };
    let a_ref = inputs("A").unwrap().predict().unwrap();
    let b_ref = inputs("B").unwrap().predict().unwrap();
    let ak = attestation::enrolled_ak(&tpm_dir, KeyKind::EccP256).unwrap();
    let both = [a_ref, b_ref.clone()];
    let v = verify_report(&ak, &both, &ev.report, &ev.log, &Policy::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let boot = |image: &str, slot: &str, decision: &str| Boot {
        image_id: image.into(),
        slot: validator::config::bom::SlotName::parse(slot).unwrap(),
        decision: decision.parse().unwrap(),
    };
    assert_eq!(
        v.boots,
        [
            boot(&both[0].image_id, "A", "fallback"),
            boot(&both[1].image_id, "B", "pass")
        ]
    );
    let no_fallback = Policy {
        allow_fallback: false,
        ..Policy::default()
    };
    match verify_report(&ak, &both, &ev.report, &ev.log, &no_fallback) {
        Err(VerifyError::Decision {
            boot: 1,
            decision,
            last: false,
            ..
        }) => {
            assert_eq!(decision.as_str(), "fallback");
        }
        r => panic!("{r:?}"),
    }
    let e = verify_report(&ak, &[b_ref], &ev.report, &ev.log, &Policy::default()).unwrap_err();
    assert!(matches!(e, VerifyError::NotAccepted(_)), "{e}");
    // A's report came along, with A's own quote (same AK, an earlier clock).
    let prev = report(b).slot.as_ref().unwrap().previous.clone().unwrap();
    let a_report = prev.report.unwrap();
    let a_quote = &a_report["attestation"]["quote"];
    assert_eq!(
        a_quote["ak_name"].as_str(),
        Some(validator::util::hex(&ak.name()).as_str())
    );
    assert!(a_quote["clock"]["clock"].as_u64().unwrap() <= v.clock.clock);
}

/// Under Secure Boot, slot B's kernel without a signature (`sb-unsigned-b`), signed by a
/// key nothing trusts (`sb-untrusted-b`), or revoked by `dbx` (issue 36: a fleet build of
/// the kernel signed by the fleet's key in `db`, whose digest, `sb-dbx-b`, or whose
/// signer's certificate, `sb-dbx-signer-b`, the node's `dbx` lists) would not start: the
/// gate checks it (with the `dbx` it reads from efivarfs) before it falls back and stops
/// instead (A demoted, B untouched), with a reason naming B's kernel, rather than a kexec
/// or a reboot into a slot shim refuses. The next power-on is the real chain's answer:
/// GRUB picks B, shim refuses its kernel ("bad shim signature"), the shipped `grub.cfg`
/// halts; the one after finds no bootable slot and halts. Two power-ons, no loop.
/// (One test per scenario, so the two test threads share the boots.)
#[test]
fn secure_boot_b_kernel_that_would_not_start_is_no_fallback() {
    no_fallback(Name::SbUnsignedB, "the image is not signed");
}

#[test]
fn secure_boot_b_kernel_that_would_not_start_is_no_fallback_untrusted() {
    no_fallback(Name::SbUntrustedB, "is not in the trust store");
}

#[test]
fn secure_boot_b_kernel_that_would_not_start_is_no_fallback_dbx_digest() {
    no_fallback(Name::SbDbxB, "is revoked (dbx)");
}

#[test]
fn secure_boot_b_kernel_that_would_not_start_is_no_fallback_dbx_signer() {
    no_fallback(Name::SbDbxSignerB, "is revoked (dbx)");
}

#[test]
fn secure_boot_b_kernel_that_would_not_start_is_no_fallback_sbat() {
    no_fallback(
        Name::SbSbatB,
        "its SBAT component linux.fleet is at generation 1, below the node's level 2",
    );
}

/// One scenario of [`secure_boot_b_kernel_that_would_not_start_is_no_fallback`]: `why` is
/// in the gate's reason.
fn no_fallback(name: Name, why: &str) {
    let bed = bed(name);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{name}: {}", run.describe());
    let o = &run.boots[0];
    let r = report(o);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Stop, Some(Fault::Image)),
        "{name}"
    );
    let reason = r.reason.as_deref().unwrap();
    assert!(reason.starts_with("modules: "), "{reason}");
    assert!(
        reason.contains(
            "; no fallback: slot B's kernel /run/validator/esp/B/vmlinuz would not start \
             under Secure Boot: "
        ),
        "{reason}"
    );
    assert!(reason.contains(why), "{name}: {reason}");
    assert!(!o.console.contains("kexec_file_load"), "no kexec tried");
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0", "{name}");
    if name == Name::SbDbxSignerB {
        assert!(reason.contains("its certificate"), "{reason}");
    }
    if matches!(name, Name::SbDbxB | Name::SbDbxSignerB) {
        pe_verify_agrees_with_the_dbx(&bed);
    }
    if name == Name::SbSbatB {
        pe_verify_agrees_with_the_sbat_level(&bed);
    }
    if name != Name::SbUntrustedB {
        let next = bed.boot().unwrap();
        let c = &next.console;
        assert!(c.contains("boot gate: slot B"), "{}", next.describe());
        assert!(c.contains("error: bad shim signature"), "{c}");
        assert!(c.contains(ab::GRUB_KERNEL_REFUSED), "{c}");
        if name == Name::SbSbatB {
            // Shim's own reason (SHIM_VERBOSE), for the kernel GRUB asked it to verify.
            assert!(
                c.contains(
                    "component linux.fleet, generation 1, was revoked by SbatLevel variable"
                ),
                "{c}"
            );
        }
        assert!(!c.contains("Linux version"), "no kernel started");
        assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=1");
    }
    if name == Name::SbUnsignedB {
        let last = bed.boot().unwrap();
        assert!(
            last.console.contains(ab::GRUB_NO_SLOT),
            "{}",
            last.describe()
        );
    }
}

/// `validator pe verify` on B's kernel as the ESP holds it, trusting the fleet's
/// certificate that signed it: verified without a list, refused with `--dbx` the `dbx`
/// of the node's own variable store (the one OVMF and shim judge by).
fn pe_verify_agrees_with_the_dbx(bed: &ab::Bed) {
    let line = pe_verify_agrees(
        bed,
        ("dbx", qemu::efivars::IMAGE_SECURITY_DATABASE),
        "--dbx",
    );
    assert!(line.contains("is revoked (--dbx"), "{line}");
}

/// The same with `--sbat-level` the `SbatLevel` of the node's variable store (the level
/// shim applied).
fn pe_verify_agrees_with_the_sbat_level(bed: &ab::Bed) {
    let line = pe_verify_agrees(bed, ("SbatLevel", qemu::efivars::SHIM_LOCK), "--sbat-level");
    assert!(
        line.contains(
            "its SBAT component linux.fleet is at generation 1, below the node's level 2"
        ),
        "{line}"
    );
}

/// `validator pe verify --rule kernel` on B's kernel trusting the fleet's certificate:
/// exit 0 alone, exit 1 with `flag` naming a copy of the node's variable `var`; the
/// refusal's line.
fn pe_verify_agrees(bed: &ab::Bed, var: (&str, &str), flag: &str) -> String {
    let vars = qemu::efivars::VarStore::open(&bed.dir.join("ovmf-vars.fd")).unwrap();
    let v = vars.get(var.0, var.1).unwrap();
    let copy = bed.dir.join(var.0);
    std::fs::write(&copy, &vars.bytes[v.data]).unwrap();
    let cli = qemu::paths::validator_cli().unwrap();
    let verify = |with: bool| {
        let mut c = std::process::Command::new(&cli);
        c.args(["pe", "verify", "--rule", "kernel", "--cert"])
            .arg(bed.dir.join("db-keys/snake.pem"));
        if with {
            c.arg(flag).arg(&copy);
        }
        let out = c.arg(bed.dir.join("slot-B/vmlinuz")).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, line) = verify(false);
    assert_eq!(code, Some(0), "{line}");
    let (code, line) = verify(true);
    assert_eq!(code, Some(1), "{line}");
    line
}

/// Without the gate's check (`sb-unsigned-b-unchecked`, a test-bed switch), the kernel's
/// own answer: `kexec_file_load` under lockdown refuses B's unsigned kernel ("PEFILE:
/// Unsigned PE binary", ENODATA); the gate gives B's try back and reboots; GRUB picks B,
/// shim refuses the same kernel, and the shipped `grub.cfg` halts. One run, no loop.
#[test]
fn secure_boot_unsigned_b_kernel_is_refused_by_the_kernel_then_by_shim() {
    let bed = bed(Name::SbUnsignedBUnchecked);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    let c = &run.console;
    let ra = report(&run.boots[0]);
    assert_eq!(ra.decision, Decision::Fallback);
    for text in [
        "PEFILE: Unsigned PE binary",
        "kexec_file: Enforced kernel signature verification failed",
        "slot: gave back the try of B",
        "boot gate: slot B (A_OK=0 A_TRY=0 B_OK=1 B_TRY=1)",
        "error: bad shim signature",
        ab::GRUB_KERNEL_REFUSED,
    ] {
        assert!(c.contains(text), "{text}: {}", run.describe());
    }
    assert_eq!(c.matches("Linux version").count(), 1, "only A's kernel ran");
    assert!(
        !run.timed_out && !run.boot_limit_reached,
        "{}",
        run.describe()
    );
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=1");
}

/// A fleet-signed module under Secure Boot (crc8 signed by OVMF's snakeoil key, standing
/// for the fleet's; the BOM trusts its certificate in the initramfs): with the certificate
/// enrolled in `db` (`sb-fleet-db`) or as a machine owner key (`sb-fleet-mok`: `MokList`,
/// which shim hands the kernel as `MokListRT`, with `MokListTrustedRT`; and
/// `sb-fleet-mok-untrusted`, without it) the kernel loads it into a keyring, the gate
/// passes it and the kernel loads it under lockdown; with it only in the initramfs (`sb-fleet-unenrolled`) the gate refuses it
/// (the kernel trusts only its built-in keys, `db` and MOK) and so does the kernel, asked
/// directly by slot B's root (`insmod`: "Loading of module with unavailable key is
/// rejected").
#[test]
fn secure_boot_fleet_key_counts_only_where_the_kernel_takes_it() {
    for (name, from, trusted_rt) in [
        (Name::SbFleetDb, "3 from db, 1 from MokListRT", None),
        (Name::SbFleetMok, "2 from db, 2 from MokListRT", Some(1)),
        (
            Name::SbFleetMokUntrusted,
            "2 from db, 2 from MokListRT",
            Some(0),
        ),
    ] {
        let run = bed(name).boot().unwrap();
        no_kernel_panic(&run);
        assert_eq!(run.boots.len(), 1, "{name}: {}", run.describe());
        let o = &run.boots[0];
        assert_eq!(report(o).decision, Decision::Pass, "{}", o.describe());
        assert!(o.console.contains("CRC8-STATE live"), "{}", o.describe());
        assert!(o.console.contains(from), "{name}: {from}");
        assert!(
            o.console.contains("integrity: Loaded X.509 cert 'SnakeOil"),
            "{name}"
        );
        // shim's MokListTrustedRT: set by default (the kernel's machine keyring), not after
        // `mokutil --untrust-mok` (the platform keyring); Debian's kernel trusts both.
        if let Some(n) = trusted_rt {
            let want = format!("MOK-TRUSTED-RT {n}");
            assert!(o.console.contains(&want), "{name}: {want}");
        }
    }

    let run = bed(Name::SbFleetUnenrolled).boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    let (a, b) = (&run.boots[0], &run.boots[1]);
    let ra = report(a);
    assert_eq!(
        (ra.decision, ra.fault),
        (Decision::Fallback, Some(Fault::Image))
    );
    let reason = ra.reason.as_deref().unwrap();
    assert!(
        reason.contains("module gate refused: crc8")
            && reason.contains("is not in the trust store"),
        "{reason}"
    );
    assert!(a
        .console
        .contains("is not trusted: under Secure Boot the kernel trusts only"));
    assert_eq!(report(b).decision, Decision::Pass);
    assert!(
        b.console
            .contains("Loading of module with unavailable key is rejected"),
        "{}",
        b.describe()
    );
    // insmod failed (busybox's exit status), and crc8 is not there.
    let rc = b
        .console
        .lines()
        .find_map(|l| l.strip_prefix("FLEET-INSMOD-RC "))
        .unwrap();
    assert_ne!(rc.trim(), "0", "insmod succeeded");
    assert!(!b.console.contains("CRC8-STATE live"));
}

/// Slot A's image fails the gate, A is demoted and B is started by kexec; returns A's
/// boot and B's.
fn kexec_fallback(name: Name) -> (Outcome, Outcome) {
    let bed = bed(name);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "two kernels: {}", run.describe());
    let (a, b) = (&run.boots[0], &run.boots[1]);
    let ra = report(a);
    assert_eq!(
        (ra.decision, ra.fault),
        (Decision::Fallback, Some(Fault::Image))
    );
    assert!(
        ra.reason.as_deref().unwrap().contains("crc16"),
        "{:?}",
        ra.reason
    );
    assert!(
        a.console.contains("kexec_core: Starting new kernel"),
        "{}",
        a.describe()
    );
    // (GRUB's own console lines, not the measured commands the dumped log repeats.)
    assert!(
        !b.console.lines().any(|l| l.starts_with(ab::GRUB_SLOT)),
        "no boot loader in a kexec"
    );
    assert_eq!(b.verdict, Verdict::RootInitReached, "{}", b.describe());
    assert_eq!(ab::root_slot(b), Some(Slot::B));
    assert_eq!(ab::cmdline_slot(b), Some(Slot::B));
    let rb = report(b);
    assert_eq!(rb.decision, Decision::Pass);
    let prev = rb
        .slot
        .as_ref()
        .unwrap()
        .previous
        .as_ref()
        .expect("A's failure");
    assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("A", "kexec"));
    assert_eq!(prev.fault.as_deref(), Some("image"));
    assert_eq!(prev.reason, ra.reason);
    let carried: Report = serde_json::from_value(prev.report.clone().unwrap()).unwrap();
    assert_eq!(carried.decision, Decision::Fallback);
    assert_eq!(rb.previous_report().as_ref(), Some(&carried));
    qemu::scenario::write_example_report("report-fallback.json", rb);
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0");
    // The TPM across the kexec: B continued A's log, and it replays to the PCRs.
    let tpm = rb.tpm.as_ref().unwrap();
    assert!(tpm.carried_log, "{tpm:?}");
    use qemu::tpmcheck;
    let view = tpmcheck::parse_listing(&tpmcheck::section(&b.console, "TPM-PCRREAD").unwrap());
    let log = tpmcheck::base64_section(&b.console, "TPM-LOG").unwrap();
    let replay = validator::formats::tpm::eventlog::EventLog::parse(&log)
        .unwrap()
        .replay();
    for (bank, pcrs) in &replay {
        for pcr in [11u32, 13] {
            let ours = validator::util::hex(&pcrs[&pcr]);
            assert_eq!(
                view[bank.name()].get(&pcr),
                Some(&ours),
                "{bank} PCR {pcr}: replay of B's log vs the TPM"
            );
        }
    }
    // Both boots' events are in it: A's decision, then B's second enter-initrd.
    let el = tpmcheck::section(&b.console, "TPM-EVENTLOG").unwrap();
    assert!(
        el.contains("TPM-EVENTLOG-RC 0"),
        "tpm2_eventlog reads it: {el}"
    );
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("decision:fallback") && text.contains("decision:pass"));
    assert_eq!(
        text.matches("enter-initrd").count(),
        2,
        "both boots' phases"
    );
    // Every PCR the carried log touches (the firmware's, the boot loader's, ours).
    for (bank, pcrs) in &replay {
        for (pcr, v) in pcrs {
            assert_eq!(
                view[bank.name()].get(pcr),
                Some(&validator::util::hex(v)),
                "{bank} PCR {pcr}: replay of B's log vs the TPM"
            );
        }
    }
    (a.clone(), b.clone())
}

/// With `fallback = "reboot"`: A is demoted, the node reboots, GRUB boots B, and B finds
/// A's failure in the record on the ESP.
#[test]
fn image_fault_falls_back_by_reboot_through_grub() {
    let bed = bed(Name::AbImageFaultReboot);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    assert_eq!(report(&run.boots[0]).decision, Decision::Fallback);
    assert!(
        run.console
            .contains("boot gate: slot B (A_OK=0 A_TRY=0 B_OK=1 B_TRY=1)"),
        "GRUB picked B: {}",
        run.describe()
    );
    let b = &run.boots[1];
    assert_eq!(ab::root_slot(b), Some(Slot::B), "{}", b.describe());
    let prev = report(b).slot.as_ref().unwrap().previous.clone().unwrap();
    assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("A", "reboot"));
    assert!(prev.reason.unwrap().contains("crc16"));
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0");
}

/// A corrupted block in a critical file of A's verity root is an image fault too.
#[test]
fn corrupted_root_falls_back_to_the_other_slot() {
    let bed = bed(Name::AbCorruptRoot);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    let ra = report(&run.boots[0]);
    assert_eq!(
        (ra.decision, ra.fault),
        (Decision::Fallback, Some(Fault::Image))
    );
    assert!(
        ra.reason.as_deref().unwrap().starts_with("critical:"),
        "{:?}",
        ra.reason
    );
    let b = run.boots.last().unwrap();
    assert_eq!(ab::root_slot(b), Some(Slot::B), "{}", run.describe());
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0");
}

/// The disk fails reads under A's root (issue 32: QEMU's blkdebug, `EIO` on the first
/// block of `/sbin/init`): dm-verity's status stays `V` and the kernel logs the failed
/// read, so the gate blames the disk, not A's image: it falls back to B by kexec without
/// demoting A. B passes its checks, and since it was entered for a hardware fault it is
/// a quarantine (the node runs and is drained); B is marked good, A keeps its mark.
#[test]
fn a_disk_error_under_a_slot_falls_back_without_burning_it() {
    let bed = bed(Name::AbDiskError);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    let ra = report(&run.boots[0]);
    assert_eq!(
        (ra.decision, ra.fault),
        (Decision::Fallback, Some(Fault::Hardware)),
        "{}",
        run.describe()
    );
    let why = ra.reason.as_deref().unwrap();
    assert!(
        why.starts_with("critical:") && why.contains("kernel: I/O error, dev vda, sector "),
        "{why}"
    );
    let f = ra.verity.as_ref().unwrap().read_fault.as_ref().unwrap();
    assert_eq!(f.status, "V", "{f:?}");
    assert!(
        run.boots[0]
            .console
            .contains(f.kernel.last().unwrap().as_str()),
        "{}",
        run.describe()
    );
    let b = &run.boots[1];
    assert_eq!(ab::root_slot(b), Some(Slot::B), "{}", run.describe());
    let rb = report(b);
    assert_eq!(
        (rb.decision, rb.fault),
        (Decision::Quarantine, Some(Fault::Hardware)),
        "{}",
        b.describe()
    );
    assert!(
        rb.reason
            .as_deref()
            .unwrap()
            .starts_with("slot: slot A fell back here for a hardware fault: critical:"),
        "{:?}",
        rb.reason
    );
    // A not demoted; its try used, B's too (the kexec), and B marked good.
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=1 B_OK=1 B_TRY=0");
    let state = record(&bed);
    assert_ne!(state.slots["A"].good, Some(false));
    assert_eq!(state.slots["B"].good, Some(true));
}

/// Both images bad: A falls back to B, B finds A demoted and stops in the safe state
/// with the report on the console; two kernel boots, then nothing. Powered on again,
/// GRUB finds no bootable slot and halts.
#[test]
fn both_slots_bad_stop_within_two_boots_and_never_loop() {
    let bed = bed(Name::AbBothBad);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    assert!(!run.boot_limit_reached, "no third boot: {}", run.describe());
    let rb = report(&run.boots[1]);
    assert_eq!(
        (rb.decision, rb.fault),
        (Decision::Stop, Some(Fault::Image))
    );
    assert!(
        rb.reason.as_deref().unwrap_or_default().contains("crc16"),
        "the cause is named: {:?}",
        rb.reason
    );
    qemu::scenario::write_example_report("report-both-bad.json", rb);
    let s = rb.slot.as_ref().unwrap();
    assert_eq!(s.booted.map(|b| b.as_str()), Some("B"));
    assert_eq!(s.previous.as_ref().unwrap().slot, "A");
    assert!(
        run.boots[1]
            .console
            .contains(validator::report::console::PREFIX),
        "report on the console"
    );
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=0 B_TRY=0");
    let rec = record(&bed);
    assert_eq!(
        (rec.slots["A"].good, rec.slots["B"].good),
        (Some(false), Some(false))
    );
    let again = bed.boot().unwrap();
    assert!(
        again.console.contains(ab::GRUB_NO_SLOT),
        "{}",
        again.describe()
    );
    assert!(
        !again.console.contains("Linux version"),
        "no kernel started"
    );
}

/// A hardware fault with a usable root (slot A's BOM promises four NVMe controllers; the
/// VM has none) boots on as quarantine, and the slot is not burned: it is marked good.
#[test]
fn hardware_fault_boots_on_as_quarantine_without_burning_the_slot() {
    let bed = bed(Name::AbHardwareFault);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    assert_eq!(ab::root_slot(o), Some(Slot::A));
    let r = report(o);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Quarantine, Some(Fault::Hardware))
    );
    assert!(
        r.reason.as_deref().unwrap().starts_with("preflight:"),
        "{:?}",
        r.reason
    );
    assert!(
        r.reason.as_deref().unwrap().contains("nvme"),
        "{:?}",
        r.reason
    );
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
    assert_eq!(record(&bed).slots["A"].good, Some(true));
}

/// The production BOM (`secure_boot = true`) on the GRUB node, whose firmware has
/// Secure Boot off: efivarfs is mounted whatever the boot loader, so the preflight reads
/// Secure Boot off (not unknown) and fails `secure-boot` as a hardware fault: quarantine,
/// the slot not burned. (`sb-node` is the same BOM on the Secure Boot chain: it passes.)
#[test]
fn secure_boot_required_but_off_is_a_hardware_fault() {
    let bed = bed(Name::SbRequiredOff);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    let r = report(o);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Quarantine, Some(Fault::Hardware))
    );
    let p = r.preflight.as_ref().unwrap();
    assert_eq!(p.platform.secure_boot, Some(false));
    let c = p.checks.iter().find(|c| c.name == "secure-boot").unwrap();
    assert_eq!(c.detail, "Secure Boot off, the BOM requires it on");
    assert_eq!(
        r.reason.as_deref(),
        Some("preflight: secure-boot: Secure Boot off, the BOM requires it on")
    );
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
}

/// A platform fault (the BOM requires a TPM; the VM has none) stops by the default
/// policy and does not demote the slot: the image is not to blame.
#[test]
fn platform_fault_stops_without_burning_the_slot() {
    let bed = bed(Name::AbNoTpm);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let r = report(&run.boots[0]);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Stop, Some(Fault::Platform))
    );
    let env = grubenv(&bed);
    assert!(env.starts_with("A_OK=1 "), "A not demoted: {env}");
}

#[test]
fn systemd_boot_marks_good_and_falls_back_by_renaming_entries() {
    let good = bed(Name::SdbootGood);
    let run = good.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(ab::root_slot(&run.boots[0]), Some(Slot::A));
    let s = report(&run.boots[0]).slot.clone().unwrap();
    assert_eq!(
        s.before.get("A").map(String::as_str),
        Some("slot-a+2-1.conf")
    );
    let mut entries = good.esp().unwrap().list("/loader/entries").unwrap();
    entries.sort();
    assert_eq!(entries, ["slot-a.conf", "slot-b+3.conf"]);

    let bad = bed(Name::SdbootImageFault);
    let run = bad.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    assert_eq!(report(&run.boots[0]).decision, Decision::Fallback);
    let b = &run.boots[1];
    assert_eq!(ab::root_slot(b), Some(Slot::B), "{}", b.describe());
    assert_eq!(
        report(b)
            .slot
            .as_ref()
            .unwrap()
            .previous
            .as_ref()
            .unwrap()
            .via,
        "kexec"
    );
    let mut entries = bad.esp().unwrap().list("/loader/entries").unwrap();
    entries.sort();
    // A demoted (no tries left, one done); B's try used by the kexec, then marked good.
    assert_eq!(entries, ["slot-a+0-1.conf", "slot-b.conf"]);
}

/// A small generator for the cut times (seeded from the clock, printed for reruns).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Power cuts: QEMU killed at random moments during the gate's writes (our record, the
/// grubenv), with the disk's writes throttled so the cuts land inside them. After every
/// cut GRUB's own code (`grub-editenv list`) and ours read a valid state; every fourth
/// cut, and at the end, the node is powered on through OVMF and GRUB and ends on a good
/// slot. Eight cuts in the suite; `VALIDATOR_CUT_TRIALS` runs more (a campaign).
#[test]
fn power_cuts_during_state_writes_leave_a_valid_state() {
    let mut s = Scenario::ab_gate(BootPath::Direct, Roots::Plain).unwrap();
    s.name = "ab-power-cuts".into();
    let bed = s.bed().unwrap();
    // A first, complete boot creates the record.
    let first = bed.boot().unwrap();
    assert_eq!(
        first.boots[0].verdict,
        Verdict::RootInitReached,
        "{}",
        first.describe()
    );
    let seed = std::env::var("VALIDATOR_CUT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        });
    eprintln!("power cuts: seed {seed} (VALIDATOR_CUT_SEED reruns it)");
    let mut rng = Lcg(seed);
    let firmware_boot = |bed: &ab::Bed| -> Run {
        let ovmf = qemu::firmware::Ovmf::fresh(&bed.dir).unwrap();
        bed.boot_with(|c| {
            let disks = std::mem::take(&mut c.disks);
            let tpm = c.tpm.clone();
            *c = qemu::vm::VmConfig::uefi(ovmf);
            c.disks = disks;
            c.tpm = tpm;
        })
        .unwrap()
    };
    let trials: u32 = std::env::var("VALIDATOR_CUT_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    assert!(trials >= 1, "VALIDATOR_CUT_TRIALS: at least 1");
    let mut cut_in_write = 0;
    for trial in 1..=trials {
        let nth = 1 + u32::try_from(rng.next(3)).unwrap();
        let delay = Duration::from_millis(rng.next(400));
        let run = bed
            .boot_with(|c| {
                c.kill_at = Some(KillAt {
                    text: "slot: writing".into(),
                    nth,
                    delay,
                });
                c.throttle = Some(Throttle {
                    bps_write: Some(512 * 1024),
                    iops_write: None,
                });
            })
            .unwrap();
        let killed = run.killed_at.is_some();
        // Killed before the report: the cut came while the gate was writing its state
        // (the writes end just before the report is printed).
        if killed && !run.console.contains(validator::report::console::PREFIX) {
            cut_in_write += 1;
        }
        eprintln!("trial {trial}: cut at write {nth} + {delay:?}: killed {killed}");
        // GRUB's reading: grub-editenv lists it, every flag 0 or 1.
        let env = grubenv(&bed);
        for kv in env.split(' ') {
            assert!(
                kv.ends_with("=0") || kv.ends_with("=1"),
                "trial {trial}: {env}"
            );
        }
        // Ours: the block parses, and a valid copy of the record is there.
        let bytes = bed.esp().unwrap().read("/EFI/BOOT/grubenv").unwrap();
        GrubEnv::parse(&bytes).unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        let _ = record(&bed);
        if trial % 4 == 0 || trial == trials {
            let run = firmware_boot(&bed);
            no_kernel_panic(&run);
            let o = run.boots.last().unwrap();
            assert_eq!(
                o.verdict,
                Verdict::RootInitReached,
                "trial {trial}: {}",
                run.describe()
            );
            assert!(
                matches!(report(o).decision, Decision::Pass),
                "trial {trial}: {}",
                o.describe()
            );
        }
    }
    eprintln!("power cuts: {cut_in_write} of {trials} landed before the gate's writes were done");
    // Each cut lands inside the writes more often than not; at least one of them must,
    // or the test showed nothing (all eight missing is well under one run in a thousand).
    assert!(
        cut_in_write >= 1,
        "no cut landed inside the writes: {cut_in_write} of {trials}"
    );
}

/// The fallback on the production chain (issue 31: `sb-uki-fallback`, Secure Boot on,
/// Debian's signed shim and GRUB, both slots fleet-signed Unified Kernel Images
/// chainloaded through shim): A's image is bad (a module the gate refuses), so the gate
/// checks B's image as shim and the kernel would check it and loads its `.linux`,
/// `.initrd` and `.cmdline` from the bytes it checked into `kexec_file_load`, which
/// accepts B's Debian-signed kernel under lockdown `integrity`; B starts with the command
/// line it was signed with, its report reads Secure Boot on and lockdown `integrity`, and
/// the log carried across replays to the TPM in every PCR it touches. No stub ran for B's
/// kernel, so the log's stub events are A's alone; the two-boot log verifies against both
/// images' references as the policy says (B's kexec'd kernel and initramfs are its
/// image's `.linux` and `.initrd`, as systemd-stub's events of it name them). (The same
/// fallback with a plain kernel and initramfs, `sb-fallback`, is the recovery bench's.)
#[test]
fn secure_boot_image_fault_falls_back_by_kexec_into_the_other_slots_checked_image() {
    let (a, b) = kexec_fallback(Name::SbUkiFallback);
    assert!(
        a.console
            .contains("/run/validator/esp/B/linux.efi's .linux and .initrd"),
        "{}",
        a.describe()
    );
    let line = qemu::reportcheck::kernel_cmdline(&b.console).unwrap();
    assert!(line.starts_with("validator.slot=B "), "{line}");
    assert!(!line.contains("BOOT_IMAGE="), "{line}");
    for o in [&a, &b] {
        assert!(o
            .console
            .contains("Kernel is locked down from EFI Secure Boot"));
    }
    assert!(a.console.contains("EFI stub: UEFI Secure Boot is enabled"));
    // A stopped at the module gate, before the preflight; B ran it.
    let p = report(&b).preflight.clone().unwrap();
    assert_eq!(p.platform.secure_boot, Some(true), "{}", b.describe());
    assert_eq!(p.platform.lockdown.as_deref(), Some("integrity"));
    fallback_attests_as_the_policy_says(&b);
}

/// B's image changed after signing (`sb-uki-tampered-b`): the gate's check of it refuses
/// it as shim would, so there is no fallback: stop, with a reason naming B's image, A
/// demoted, B untouched (its try unused, still good).
#[test]
fn uki_b_changed_after_signing_is_no_fallback() {
    let bed = bed(Name::SbUkiTamperedB);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    let r = report(o);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.contains(
            "; no fallback: slot B's image /run/validator/esp/B/linux.efi would not start \
             under Secure Boot: "
        ),
        "{reason}"
    );
    assert!(reason.contains("digest does not match"), "{reason}");
    assert!(!o.console.contains("kexec_file_load"), "no kexec tried");
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0");
}

/// A GPU the driver does not see (issue 32, the fault both slots show): both slots'
/// preflight read the fixture `driver-sees-7` (the driver sees 7 of the 8 GPUs on PCI;
/// not `0000:d1:00.0`). A's `gpu-driver` is an image fault: A is demoted and B entered
/// by kexec; B's fails on the same GPU, so the fault is the hardware's: quarantine, B
/// marked good and A given back its good mark, in the grubenv and our record, the report
/// naming why. Powered on again, A finds the finding in B's report in our record and
/// quarantines at once: no fallback, no slot burned, no loop.
#[test]
fn the_same_gpu_failing_on_both_slots_is_quarantine_with_a_given_back() {
    let bed = bed(Name::AbGpuBothSlots);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    let gpu = "0000:d1:00.0";
    let a = report(&run.boots[0]);
    assert_eq!(
        (a.decision, a.fault),
        (Decision::Fallback, Some(Fault::Image)),
        "{}",
        run.describe()
    );
    let reason = a.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("preflight: gpu-driver: the driver sees 7 of the 8 GPU(s)")
            && reason.contains(gpu),
        "{reason}"
    );
    let o = &run.boots[1];
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    assert_eq!(ab::root_slot(o), Some(Slot::B));
    let b = report(o);
    assert_eq!(
        (b.decision, b.fault),
        (Decision::Quarantine, Some(Fault::Hardware)),
        "{}",
        o.describe()
    );
    let reason = b.reason.as_deref().unwrap();
    assert!(
        reason.contains("slot A's boot failed this check on the same device(s)"),
        "{reason}"
    );
    let repeated = b.preflight.as_ref().unwrap().repeated.as_ref().unwrap();
    assert_eq!(
        (repeated.slot.as_str(), repeated.check.as_str()),
        ("A", "gpu-driver")
    );
    assert_eq!(repeated.devices, [gpu]);
    let slot = b.slot.as_ref().unwrap();
    let action = slot.action.as_deref().unwrap();
    assert!(action.contains("gave A back its good mark"), "{action}");
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
    let state = record(&bed);
    assert_eq!(
        (state.slots["A"].good, state.slots["B"].good),
        (Some(true), Some(true))
    );
    // The next power-on: GRUB boots A, which quarantines by B's finding.
    let next = bed.boot().unwrap();
    no_kernel_panic(&next);
    assert_eq!(next.boots.len(), 1, "{}", next.describe());
    let o = &next.boots[0];
    assert_eq!(ab::root_slot(o), Some(Slot::A), "{}", o.describe());
    let r = report(o);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Quarantine, Some(Fault::Hardware))
    );
    assert!(
        r.reason
            .as_deref()
            .unwrap()
            .contains("slot B's last boot found this check failing on the same device(s)"),
        "{:?}",
        r.reason
    );
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
}

/// Only A's root shows the GPU missing from the driver (B's holds the `good` fixture):
/// A's image fault falls back to B, B passes, and A stays demoted.
#[test]
fn a_gpu_failing_on_one_slot_only_is_that_images_fault() {
    let bed = bed(Name::AbGpuSlotA);
    let run = bed.boot().unwrap();
    no_kernel_panic(&run);
    assert_eq!(run.boots.len(), 2, "{}", run.describe());
    assert_eq!(
        report(&run.boots[0]).decision,
        Decision::Fallback,
        "{}",
        run.describe()
    );
    let o = &run.boots[1];
    assert_eq!(ab::root_slot(o), Some(Slot::B), "{}", o.describe());
    let b = report(o);
    assert_eq!(
        (b.decision, b.fault),
        (Decision::Pass, None),
        "{}",
        o.describe()
    );
    assert_eq!(b.preflight.as_ref().unwrap().repeated, None);
    assert_eq!(grubenv(&bed), "A_OK=0 A_TRY=0 B_OK=1 B_TRY=0");
    assert_eq!(record(&bed).slots["A"].good, Some(false));
}

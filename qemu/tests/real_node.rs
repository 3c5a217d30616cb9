//! The real node: Debian 12 with systemd behind the gate (scenario `real-node`, under
//! Secure Boot with Debian's signed shim, GRUB and kernel, signed verity roots, the TPM),
//! its disk laid out by `mkinitramfs install` from the two slot directories (`sfdisk
//! --dump` is docs/INSTALL.md's table); `mark_good = "later"` done by the shipped unit,
//! the rollback of a node that never gets healthy, both slots bad and the node recovered
//! by the procedure INSTALL.md gives (reinstalled from its slot images); RAUC as the
//! updater: `rauc install` of bundles made by `mkinitramfs slot --rauc-bundle` writes the
//! other slot with Debian's 6.12 kernel, the gate refuses a bad update (falling back by
//! kexec into the 6.1 slot) and passes a good one, and RAUC's view agrees with the gate's; power
//! cuts during `rauc install` (three seeds of `qemu_harness install-cuts`); a quarantine cleared by the shipped
//! re-check timer once the hardware is there (`real-node-recheck`). Three nodes, booted
//! side by side two at a time.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use qemu::ab::{self, Slot};
use qemu::debroot;
use qemu::install_cuts::{self, Spans};
use qemu::nodeview::{self, Rauc};
use qemu::rootfs::section;
use qemu::scenario::{Name, Scenario};
use qemu::tpmcheck;
use qemu::vm::Outcome;
use validator::report::{Decision, Fault};

fn grubenv(bed: &ab::Bed) -> String {
    let vars = bed.esp().unwrap().grubenv(&bed.dir).unwrap();
    ["A_OK", "A_TRY", "B_OK", "B_TRY"]
        .iter()
        .map(|k| {
            let v = vars.iter().find(|(n, _)| n == k).map_or("?", |(_, v)| v);
            format!("{k}={v}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `ROOT-SYSTEM` line's `key=value` words.
fn system(o: &Outcome) -> std::collections::BTreeMap<String, String> {
    let line = o
        .console
        .lines()
        .find_map(|l| l.strip_prefix(debroot::SYSTEM))
        .unwrap_or_else(|| panic!("no {} line: {}", debroot::SYSTEM, o.describe()));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn mark_good(o: &Outcome) -> String {
    o.console
        .lines()
        .find_map(|l| l.strip_prefix(debroot::MARK_GOOD))
        .unwrap_or_else(|| panic!("no mark-good result: {}", o.describe()))
        .trim()
        .to_string()
}

/// One power-on (with an update disk attached, if given): exactly one boot, which
/// reached the root and passed.
fn power_on(bed: &ab::Bed, disk: Option<&std::path::Path>) -> Outcome {
    let run = match disk {
        Some(d) => bed.boot_with_disk(d).unwrap(),
        None => bed.boot().unwrap(),
    };
    assert_eq!(run.boots.len(), 1, "{}", run.log_path.display());
    let o = run.boots.into_iter().next().unwrap();
    checked(o)
}

/// A boot that reached a Debian root behind the gate and passed.
fn checked(o: Outcome) -> Outcome {
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Pass, "{}", o.describe());
    let sys = system(&o);
    assert_eq!(sys["pid1"], "systemd", "{}", o.describe());
    assert_eq!(sys["multi-user"], "active", "{}", o.describe());
    // systemd's own word for when it got there (`ActiveEnterTimestampMonotonic`): its
    // console status line for the target is not always printed (6.12's boot shows the
    // targets before it, then node-check's output).
    let at_us: u64 = sys["at_us"].parse().unwrap_or(0);
    assert!(
        at_us > 0,
        "multi-user.target never entered: {}",
        o.describe()
    );
    o
}

#[test]
fn real_node_reaches_multi_user_marks_good_and_rolls_back_when_unhealthy() {
    let bed = Scenario::named(Name::RealNode).unwrap().bed().unwrap();
    // The disk `mkinitramfs install` laid out from the two slot directories is the table
    // docs/INSTALL.md shows (its sizes, its types, names and PARTUUIDs).
    let hashes: Vec<(String, String)> = Slot::ALL
        .iter()
        .map(|s| {
            let f = bed.dir.join(format!("slot-{s}/image/root.roothash"));
            let h = std::fs::read_to_string(&f).unwrap();
            (s.to_string(), h.trim().to_string())
        })
        .collect();
    assert_eq!(
        test_support::install::dump(&bed.disk, &hashes),
        test_support::install::documented_table(),
        "sfdisk --dump of {} against docs/INSTALL.md",
        bed.disk.display()
    );

    // Power-on 1, slot A healthy and marked good, is the kernel-upgrade test's first
    // (`healthy_first_boot`): the same node, one power-on fewer. The disk starts as
    // installed: both slots good, neither tried.
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");

    // Power-on 2: node_exporter never starts: A passes the gate, the unit fails, A's
    // try stays consumed.
    bed.set_cmdline_word(debroot::UNHEALTHY, true).unwrap();
    let o = power_on(&bed, None);
    assert_eq!(ab::root_slot(&o), Some(Slot::A));
    assert_ne!(system(&o)["node_exporter"], "active");
    assert_eq!(mark_good(&o), "exit-code");
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=1 B_OK=1 B_TRY=0");

    // Power-on 3 (healthy again): GRUB passes over A (tried, never confirmed) to B. This
    // time RAUC marks it good (`rauc status mark-good`, the shipped unit masked): the same
    // variables as `validator slot mark-good`, which reads them back.
    bed.set_cmdline_word(debroot::UNHEALTHY, false).unwrap();
    for w in debroot::RAUC_MARKS_GOOD_WORDS {
        bed.set_cmdline_word(w, true).unwrap();
    }
    let o = power_on(&bed, None);
    assert_eq!(ab::grub_slot(&o), Some(Slot::B));
    assert_eq!(ab::root_slot(&o), Some(Slot::B));
    let rauc_rc = o
        .console
        .lines()
        .find_map(|l| l.strip_prefix(debroot::RAUC_MARK_GOOD))
        .map(str::trim);
    assert_eq!(rauc_rc, Some("0"), "{}", o.describe());
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=1 B_OK=1 B_TRY=0");
    let status = section(&o.console, debroot::SLOT_STATUS).unwrap();
    assert!(
        status.contains("B_OK=1") && status.contains("B_TRY=0"),
        "{status}"
    );

    // Power-on 4: both slots' images bad (one character of each root hash signature
    // changed on the disk). GRUB boots B (A was tried and never confirmed); B's image
    // fails and A is no fallback (its try is used), so the gate demotes B and stops in
    // the safe state: no slot is bootable now.
    for slot in Slot::ALL {
        damage_signature(&bed.disk, &format!("root-{slot}-sig"));
    }
    let run = bed.boot().unwrap();
    assert_eq!(run.boots.len(), 1, "{}", run.log_path.display());
    let stopped = &run.boots[0];
    let r = stopped.report.as_ref().unwrap();
    assert_eq!(
        (r.decision, r.fault, r.booted_slot()),
        (Decision::Stop, Some(Fault::Image), Some("B")),
        "{}",
        stopped.describe()
    );
    assert!(
        r.reason
            .as_deref()
            .unwrap_or("")
            .starts_with("verity: root-verity-sig:"),
        "{:?}",
        r.reason
    );
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=1 B_OK=0 B_TRY=0");
    // Power-on 5: the halted state docs/INSTALL.md describes: GRUB finds no bootable slot.
    let halted = bed.boot().unwrap();
    assert!(
        halted.console.contains(ab::GRUB_NO_SLOT),
        "{}",
        halted.describe()
    );
    assert!(
        !halted.console.contains("Linux version"),
        "no kernel started"
    );
    // The recovery INSTALL.md gives: reinstall the node from its slot images
    // (`mkinitramfs install --force`); power-on 6 passes on A and is marked good.
    let installed = bed.reinstall().unwrap();
    assert!(installed.efibootmgr.contains("efibootmgr --create"));
    let o = power_on(&bed, None);
    assert_eq!(ab::root_slot(&o), Some(Slot::A));
    assert_eq!(mark_good(&o), "success");
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
}

/// What the first power-on of a freshly installed real node shows: slot A passed, its
/// services run, node_exporter serves the gate's metrics, the NFD features and the run
/// directory are there, the shipped unit marked A good, the node booted A's Unified
/// Kernel Image, and the TPM equals the replay of our log (PCR 11 with systemd's phases).
fn healthy_first_boot(bed: &ab::Bed, o: &Outcome) {
    let r = o.report.as_ref().unwrap();
    assert_eq!(ab::root_slot(o), Some(Slot::A));
    assert_eq!(system(o)["node_exporter"], "active");
    // node_exporter serves, over HTTP, every sample of the textfile the gate wrote.
    let file = section(&o.console, "METRICS").expect("the textfile");
    let scrape = section(&o.console, debroot::SCRAPE).expect("the scrape");
    let samples = qemu::reportcheck::prometheus_samples(&file);
    let served = qemu::reportcheck::prometheus_samples(&scrape);
    assert!(samples.len() > 20, "{file}");
    let missing: Vec<_> = samples.difference(&served).collect();
    assert!(missing.is_empty(), "not served: {missing:?}\n{scrape}");
    assert!(
        scrape.contains("validator_decision{decision=\"pass\"} 1"),
        "{scrape}"
    );
    // The NFD features file is where NFD's local source reads it, and the report in /run.
    let nfd = section(&o.console, "NFD").expect("features");
    let f = validator::formats::nfd::parse(&nfd).unwrap();
    let get = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.value.clone());
    assert_eq!(get("decision").as_deref(), Some("pass"));
    assert_eq!(get("image"), r.image_id.clone());
    let run = section(&o.console, "RUN").unwrap();
    assert!(run.lines().any(|l| l == "report.json"), "{run}");
    // The gate left A's try consumed; the shipped unit marked it good once healthy.
    let slot = r.slot.as_ref().unwrap();
    assert_eq!(slot.after.get("A_TRY").map(String::as_str), Some("1"));
    assert_eq!(mark_good(o), "success");
    let status = section(&o.console, debroot::SLOT_STATUS).unwrap();
    assert!(
        status.contains("A_OK=1") && status.contains("A_TRY=0"),
        "{status}"
    );
    assert_eq!(grubenv(bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
    // The node booted its slot's Unified Kernel Image: systemd-stub said so.
    assert!(
        qemu::reportcheck::stub_booted(r).is_some(),
        "{:?}",
        r.boot_image
    );
    // After systemd ran, the TPM still equals the replay of our log in every PCR the log
    // touches, but PCR 11: booted from a UKI (`StubPcrKernelImage` set), systemd 252's
    // pcrphase units extend it in the real root with their phase words, `sysinit` and then
    // `ready` (systemd's own log in /run/log/systemd/tpm2-measure.log has them; our quote
    // was made before them, in the initramfs).
    let tpm = tpmcheck::parse_listing(&tpmcheck::section(&o.console, "TPM-PCRREAD").unwrap());
    let el = tpmcheck::section(&o.console, "TPM-EVENTLOG").unwrap();
    assert!(el.contains("TPM-EVENTLOG-RC 0"), "{el}");
    let replay = tpmcheck::eventlog_pcrs(&el);
    for bank in ["sha1", "sha256"] {
        assert!(replay[bank].contains_key(&11) && replay[bank].contains_key(&13));
        for (pcr, v) in replay[bank].iter().filter(|(p, _)| **p != 11) {
            assert_eq!(tpm[bank].get(pcr), Some(v), "{bank} PCR {pcr}");
        }
        let alg = validator::formats::tpm::HashAlg::from_name(bank).unwrap();
        let mut pcr11 = validator::util::unhex(&replay[bank][&11]).unwrap();
        let mut phases = Vec::new();
        for word in ["sysinit", "ready"] {
            pcr11 = alg.extend(&pcr11, &alg.digest(word.as_bytes()));
            phases.push(validator::util::hex(&pcr11));
        }
        assert!(
            phases.contains(&tpm[bank][&11]),
            "{bank} PCR 11: the TPM's {} is our log's {} with systemd's sysinit ({}) or also ready ({})",
            tpm[bank][&11],
            replay[bank][&11],
            phases[0],
            phases[1]
        );
        // The report read its PCRs back before the quote and the seal that follows it
        // (the log's last record, which the TPM holds too).
        let ours = &r.tpm.as_ref().unwrap().pcrs[bank];
        let at_quote = tpmcheck::pcrs_before_seal(&o.console).unwrap();
        assert_eq!(ours[&11], at_quote[bank][&11]);
        assert_eq!(ours[&13], at_quote[bank][&13]);
        assert_eq!(ours[&11], replay[bank][&11], "the seal is in PCR 13 only");
    }
}

/// Changes one character of the signature in the DPS signature partition `label` (its
/// JSON `signature`, base64): the root hash signature no longer verifies.
fn damage_signature(disk: &std::path::Path, label: &str) {
    use std::os::unix::fs::FileExt;
    let (offset, _) = qemu::disk::partition_offset(disk, label).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk)
        .unwrap();
    let mut head = vec![0u8; 4096];
    f.read_exact_at(&mut head, offset).unwrap();
    let key = b"\"signature\":\"";
    let at = head
        .windows(key.len())
        .position(|w| w == key)
        .unwrap_or_else(|| panic!("{label}: no signature"))
        + key.len()
        + 16;
    head[at] = if head[at] == b'A' { b'B' } else { b'A' };
    f.write_all_at(&head[at..=at], offset + at as u64).unwrap();
}

/// RAUC as the updater, and a kernel upgrade through the slots (issue 32): slot A runs
/// Debian's 6.1 kernel; updates made by `mkinitramfs slot --rauc-bundle` carry Debian's
/// 6.12 kernel (its `.ko.xz` modules, ECDSA P-384 module signatures, its own build key)
/// in each slot's Unified Kernel Image. First an update whose root hash is signed by a
/// key the new image does not trust: from A, `rauc install` writes B and makes it next;
/// GRUB boots B's 6.12 image, the gate refuses its root, demotes B and falls back by
/// kexec into A's 6.1 kernel (a kexec across kernel versions under lockdown), which
/// passes and is marked good. From A the good 6.12 update then goes
/// into B: GRUB boots it through the signed chain, the gate passes it and the unit marks
/// it good; RAUC and the gate agree. Each power-on's quote and event log verify against
/// the references of the images it booted (A's as installed, each update's as `mkinitramfs
/// slot` made it, for whichever slot RAUC wrote): the refused update's boot from B then
/// A's after the kexec in one log. Then three power cuts during the install of the same
/// update into A ([`install_cuts::campaign`], the phases timed on power-on 2's install).
#[test]
fn rauc_upgrades_the_kernel_through_the_other_slot_and_a_refused_update_falls_back_across_kernels()
{
    let bed = Scenario::named(Name::RealNode).unwrap().bed().unwrap();
    let old = bed.slots.a.kernel.release.clone();
    let new = qemu::paths::kernel("k612").unwrap();
    assert!(old.starts_with("6.1.") && new.release.starts_with("6.12."));
    let mut base = bed.slots.a.bom.clone();
    base.kernel.release = validator::config::bom::Version(new.release.clone());
    let update = |name: &str, trusted: bool| {
        debroot::update_disk(
            &bed.dir,
            &new,
            &base,
            name,
            trusted,
            bed.uki_cmdline().as_deref(),
        )
        .unwrap()
    };
    let refused = update("untrusted", false);

    // Power-on 1: A (6.1), healthy and marked good, installs the refused 6.12 update
    // into B.
    let o = power_on(&bed, Some(&refused));
    healthy_first_boot(&bed, &o);
    assert_eq!(ab::root_slot(&o), Some(Slot::A));
    assert_eq!(kernel_of(&o), old);
    assert_eq!(mark_good(&o), "success");
    assert_eq!(installed(&o), ["untrusted.raucb 0"]);
    let rauc = rauc_status(&o);
    assert_eq!(rauc.booted, "A");
    assert_eq!(rauc.primary.as_deref(), Some("B"), "{rauc:?}");
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");
    // Each image's attestation reference verifies the boots of it: A's as installed, the
    // updates' as `mkinitramfs slot` made their bundles (for either slot).
    let a_ref = debroot::slot_reference(&bed.dir, Slot::A).unwrap();
    assert_eq!(
        attested(&o, std::slice::from_ref(&a_ref)),
        [boot_of(&a_ref, "A", "pass")]
    );

    // Power-on 2: GRUB boots B's 6.12 image; the gate refuses its root (an image fault),
    // demotes B and falls back by kexec into A's 6.1 kernel, which passes and is marked
    // good; RAUC sees B bad. A then installs the good 6.12 update into B.
    let good = update("update", true);
    let run = bed.boot_with_disk(&good).unwrap();
    // The install's phases, uncut, for the power cuts below.
    let spans = Spans::measure(&run).unwrap();
    assert_eq!(run.boots.len(), 2, "{}", run.log_path.display());
    let first = &run.boots[0];
    let fr = first.report.as_ref().expect("B's report");
    assert_eq!(
        (fr.decision, fr.fault, fr.booted_slot()),
        (Decision::Fallback, Some(Fault::Image), Some("B")),
        "{}",
        first.describe()
    );
    assert_eq!(fr.kernel_release.as_deref(), Some(new.release.as_str()));
    assert!(
        fr.reason.as_deref().unwrap_or("").starts_with("verity: "),
        "{:?}",
        fr.reason
    );
    let action = fr
        .slot
        .as_ref()
        .and_then(|s| s.action.as_deref())
        .unwrap_or("");
    assert!(action.contains("demoted B"), "{action}");
    let o = checked(run.boots[1].clone());
    assert_eq!(ab::cmdline_slot(&o), Some(Slot::A));
    assert_eq!(kernel_of(&o), old);
    let r = o.report.as_ref().unwrap();
    let p = r.preflight.as_ref().unwrap();
    assert_eq!(
        (p.platform.secure_boot, p.platform.lockdown.as_deref()),
        (Some(true), Some("integrity")),
        "the 6.1 kernel kexec'd under lockdown"
    );
    let slot = r.slot.as_ref().unwrap();
    let prev = slot.previous.as_ref().unwrap();
    assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("B", "kexec"));
    // What the boot loader said when A's gate read it: B demoted by its own boot.
    assert_eq!(
        (
            slot.before.get("B_OK").map(String::as_str),
            slot.before.get("B_TRY").map(String::as_str)
        ),
        (Some("0"), Some("0")),
        "{:?}",
        slot.before
    );
    // The quote after the kexec covers both boots: the refused 6.12 image from B, then
    // A's 6.1 image.
    let refused_ref = debroot::update_reference(&bed.dir, "untrusted").unwrap();
    assert_eq!(
        attested(&o, &[a_ref.clone(), refused_ref.clone()]),
        [
            boot_of(&refused_ref, "B", "fallback"),
            boot_of(&a_ref, "A", "pass")
        ]
    );
    assert_eq!(mark_good(&o), "success");
    assert_eq!(installed(&o), ["update.raucb 0"]);
    let rauc = rauc_status(&o);
    assert_eq!(rauc.booted, "A");
    assert_eq!(rauc.primary.as_deref(), Some("B"), "{rauc:?}");

    // Power-on 3: GRUB boots B's good 6.12 image through the signed chain; the gate
    // passes it, the unit marks it good, and RAUC and the gate agree.
    let o = power_on(&bed, None);
    assert_eq!(ab::grub_slot(&o), Some(Slot::B));
    assert!(o.console.contains("ROOT-IMAGE update"), "{}", o.describe());
    assert_eq!(kernel_of(&o), new.release);
    let r = o.report.as_ref().unwrap();
    assert!(
        r.image_id.as_deref().unwrap_or("").ends_with("-update"),
        "{:?}",
        r.image_id
    );
    assert!(
        qemu::reportcheck::stub_booted(r).is_some(),
        "{:?}",
        r.boot_image
    );
    let good_ref = debroot::update_reference(&bed.dir, "update").unwrap();
    assert_eq!(
        attested(&o, &[a_ref.clone(), good_ref.clone()]),
        [boot_of(&good_ref, "B", "pass")]
    );
    assert_eq!(mark_good(&o), "success");
    let rauc = rauc_status(&o);
    assert_eq!(rauc.booted, "B");
    assert_eq!(rauc.status("B"), Some("good"), "{rauc:?}");
    assert_eq!(grubenv(&bed), "A_OK=1 A_TRY=0 B_OK=1 B_TRY=0");

    // Power cuts during `rauc install` of the same 6.12 update (the seeds aimed at the
    // root partition's writes, the ESP writes and RAUC's grubenv switch; chained: each
    // recovery's install is cut by the next seed; `qemu-harness install-cuts` runs a
    // campaign with an uncut install after every cut): after each the node comes back on
    // a slot the gate passes and RAUC, GRUB and our record agree; the last install
    // succeeds and its slot passes.
    eprintln!("install phases: {}", spans.describe());
    let s = install_cuts::chained(&bed, &good, &spans, &SUITE_SEEDS).unwrap();
    eprintln!("{}\n{}", s.table(), s.line());
    assert!(s.ok(), "{}\n{}", s.table(), s.line());
}

/// The power cuts the suite runs (seeds aimed at the root partition's writes, the ESP
/// writes and RAUC's grubenv switch).
const SUITE_SEEDS: [u64; 3] = [1, 2, 5];

#[test]
fn the_suite_seeds_aim_at_the_writes_and_the_switch() {
    let phases: Vec<&str> = SUITE_SEEDS
        .iter()
        .map(|s| install_cuts::aim(*s).0.as_str())
        .collect();
    assert_eq!(phases, ["data", "esp", "switch"]);
}

/// The release of the kernel a boot ran, as its report says.
fn kernel_of(o: &Outcome) -> String {
    o.report
        .as_ref()
        .and_then(|r| r.kernel_release.clone())
        .unwrap_or_else(|| panic!("no kernel release: {}", o.describe()))
}

/// The boots a verifier finds in `o`'s report and event log (its quote checked with the
/// attestation key the node's TPM derives), each against the images' references `refs`:
/// (image id, slot, decision) in order.
fn attested(
    o: &Outcome,
    refs: &[validator::attest::reference::Reference],
) -> Vec<(String, String, String)> {
    use qemu::attestation::{self, Evidence};
    use validator::attest::verify::{verify_report, Policy};
    use validator::formats::tpm::attest::KeyKind;
    let (tpm_dir, _) = attestation::dirs(o);
    let ev = Evidence::of(o).unwrap_or_else(|e| panic!("{e}: {}", o.describe()));
    let ak = attestation::enrolled_ak(&tpm_dir, KeyKind::EccP256).unwrap();
    let v = verify_report(&ak, refs, &ev.report, &ev.log, &Policy::default())
        .unwrap_or_else(|e| panic!("{e}: {}", o.describe()));
    v.boots
        .iter()
        .map(|b| {
            (
                b.image_id.clone(),
                b.slot.as_str().to_string(),
                b.decision.as_str().to_string(),
            )
        })
        .collect()
}

fn boot_of(
    r: &validator::attest::reference::Reference,
    slot: &str,
    decision: &str,
) -> (String, String, String) {
    (r.image_id.clone(), slot.to_string(), decision.to_string())
}

/// The live re-check under systemd (`real-node-recheck`): the BOM expects an NVMe
/// controller that is not there when the gate looks, so the boot is quarantined as a
/// hardware fault; the test bed then plugs the controller into the running node, and the
/// shipped `validator-recheck.timer` re-runs the preflight: the re-check passes, the
/// metrics node_exporter serves and the NFD label say pass, and the boot's report is the
/// one the gate wrote. (Named to sort last: libtest starts tests in name order, so the
/// two longer nodes start first.)
#[test]
fn the_timers_recheck_clears_a_quarantine_once_the_hardware_recovered() {
    let bed = Scenario::named(Name::RealNodeRecheck)
        .unwrap()
        .bed()
        .unwrap();
    let run = bed.boot().unwrap();
    assert_eq!(run.boots.len(), 1, "{}", run.log_path.display());
    let o = &run.boots[0];
    // The boot: quarantined by the preflight's NVMe check, a hardware fault.
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Quarantine, "{}", o.describe());
    assert_eq!(r.fault, Some(Fault::Hardware));
    let nvme = r.check("preflight/nvme").unwrap();
    assert_eq!(
        nvme.status,
        validator::report::CheckStatus::Fail,
        "{nvme:?}"
    );
    let before = section(&o.console, "METRICS").unwrap();
    assert!(
        before.contains("validator_decision{decision=\"quarantine\"} 1"),
        "{before}"
    );
    let nfd = section(&o.console, "NFD").unwrap();
    assert!(
        nfd.lines().any(|l| l.ends_with("/quarantine=true")),
        "{nfd}"
    );

    // The controller plugged in by QEMU's monitor, without an error.
    let monitor = std::fs::read_to_string(run.log_path.with_file_name("monitor.log")).unwrap();
    assert!(monitor.contains("device_add nvme"), "{monitor}");
    assert!(!monitor.to_lowercase().contains("error"), "{monitor}");

    // The timer ran the service (systemd's own record of the trigger), and its last run
    // passed.
    let timer = o
        .console
        .lines()
        .find_map(|l| l.strip_prefix(debroot::RECHECK_TIMER))
        .unwrap_or_else(|| panic!("no timer line: {}", o.describe()));
    assert!(timer.contains("active=active"), "{timer}");
    // systemd's time of the last trigger since boot (`25.254362s`), `0` when never.
    let triggered = timer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("triggered="))
        .unwrap_or("0");
    assert!(triggered != "0" && triggered.ends_with('s'), "{timer}");
    let log = section(&o.console, debroot::RECHECK_LOG).unwrap();
    let verdicts: Vec<&str> = log.lines().filter(|l| l.starts_with("recheck: ")).collect();
    assert_eq!(
        verdicts.last().copied(),
        Some("recheck: pass (the boot: quarantine)"),
        "{log}"
    );
    let text = section(&o.console, debroot::RECHECK).unwrap();
    let live: validator::report::Report = validator::report::json::parse(text.trim()).unwrap();
    assert_eq!(
        (live.decision, live.fault),
        (Decision::Pass, None),
        "{text}"
    );
    let k = live.recheck.as_ref().unwrap();
    assert_eq!(k.boot_decision, Decision::Quarantine);
    assert_eq!(
        live.check("preflight/nvme").unwrap().status,
        validator::report::CheckStatus::Pass
    );
    // What Prometheus scrapes and NFD reads now.
    let scrape = section(&o.console, debroot::SCRAPE_AFTER).unwrap();
    assert!(
        scrape.contains("validator_decision{decision=\"pass\"} 1"),
        "{scrape}"
    );
    assert!(
        scrape.contains("validator_decision{decision=\"quarantine\"} 0"),
        "{scrape}"
    );
    assert!(
        scrape.contains("validator_boot_info{decision=\"quarantine\",fault=\"hardware\"} 1"),
        "{scrape}"
    );
    let info = scrape
        .lines()
        .find(|l| l.starts_with("validator_report_info{"))
        .unwrap();
    assert!(
        info.contains("decision=\"pass\"") && !info.contains("fault="),
        "{info}"
    );
    let f =
        validator::formats::nfd::parse(&section(&o.console, debroot::NFD_AFTER).unwrap()).unwrap();
    let get = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.value.clone());
    assert_eq!(get("decision").as_deref(), Some("pass"));
    assert_eq!(get("quarantine").as_deref(), Some("false"));
    // The boot's report is the file the gate wrote (its console line's digest).
    let line = validator::report::console::find(&o.console).unwrap();
    let kept = o
        .console
        .lines()
        .find_map(|l| l.strip_prefix(debroot::REPORT_SHA256))
        .unwrap()
        .trim();
    assert_eq!(kept, line.sha256);
}

/// `rauc install` of the bundles on the update disk: `<file> <exit status>`.
fn installed(o: &Outcome) -> Vec<String> {
    nodeview::installed(&o.console)
}

/// What `rauc status` said in the root after any install.
fn rauc_status(o: &Outcome) -> Rauc {
    Rauc::of(&o.console, debroot::RAUC_STATUS).unwrap()
}

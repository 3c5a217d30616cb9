//! End-to-end: a dm-verity root from `veritysetup format`, its root hash signed in a
//! Discoverable Partitions `root-verity-sig` partition, set up by our init through the
//! device-mapper ioctls and checked by the kernel's dm-verity.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use validator::report::{Decision, Fault};

use qemu::scenario::Name;

fn run(name: Name) -> qemu::vm::Outcome {
    qemu::catalogue::run_named(name)
}

#[test]
fn signed_verity_root_boots_with_status_v() {
    let o = run(Name::Verity);
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Pass, "{r:?}");
    let v = r.verity.as_ref().unwrap();
    assert_eq!(v.status.as_deref(), Some("V"));
    assert_eq!(v.source, "signature");
    assert!(
        v.signer
            .as_deref()
            .unwrap()
            .starts_with("fleet image signing trusted"),
        "{v:?}"
    );
    assert_eq!(v.root_hash.len(), 64);
    assert_eq!(v.dm_device.as_deref(), Some("/dev/dm-0"));
    let root = r.root.as_ref().unwrap();
    assert_eq!(root.partition.device, "/dev/dm-0");
    assert!(root.read_only);
    // The partitions were found by the systemd PARTUUID convention.
    let root_hash = v.root_hash.as_str();
    let first = validator::formats::verity::uuid_from_hash(
        &validator::util::unhex(&root_hash[..32]).unwrap(),
    )
    .unwrap();
    assert_eq!(root.partition.partuuid, first);
    // Every option reached the kernel and came back in its table.
    let kt = v.kernel_table.as_deref().unwrap();
    assert!(kt.contains(root_hash), "{kt}");
    for opt in [
        "restart_on_corruption",
        "ignore_zero_blocks",
        "check_at_most_once",
    ] {
        assert!(
            kt.contains(opt),
            "{opt} missing from the kernel's table: {kt}"
        );
    }
    let crit = &v.critical_files;
    assert_eq!(crit.len(), 2);
    assert!(crit.iter().all(|c| c.ok && c.bytes > 0), "{crit:?}");
    assert_eq!(o.root_report.as_ref(), Some(r));
}

#[test]
fn corrupted_block_in_a_critical_file_stops_before_switch_root() {
    let o = run(Name::VerityCorrupt);
    let r = o.stopped();
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("critical: critical file(s) unreadable through verity: /sbin/init (EIO"),
        "{reason}"
    );
    assert_eq!(r.fault, Some(Fault::Image));
    let v = r.verity.as_ref().unwrap();
    assert_eq!(
        v.status.as_deref(),
        Some("V"),
        "the device came up valid; the read found the bad block"
    );
    let init = &v.critical_files[0];
    assert_eq!((init.path.as_str(), init.ok), ("/sbin/init", false));
    // The kernel's account, as the report quotes it: a hash mismatch (status `C`), not
    // the disk.
    let f = v.read_fault.as_ref().unwrap();
    assert_eq!(
        (f.cause, f.status.as_str()),
        (validator::runtime::read_fault::Cause::Corruption, "C"),
        "{f:?}"
    );
    let line = f.kernel.last().unwrap();
    assert!(
        line.starts_with("device-mapper: verity: ") && line.ends_with("is corrupted"),
        "{line}"
    );
    assert!(line.contains(": data block "), "{line}");
    assert!(o.console.contains(line.as_str()), "{}", o.describe());
    assert!(
        reason.contains("a block failed its hash (corruption)"),
        "{reason}"
    );
    assert!(
        o.marker.is_none() && !o.console.contains("switch_root:"),
        "{}",
        o.describe()
    );
}

fn refused_before_dm(name: Name, want: &str) {
    let o = run(name);
    let r = o.stopped();
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("verity: ") && reason.contains(want),
        "{reason}"
    );
    assert_eq!(r.fault, Some(Fault::Image));
    let v = r.verity.as_ref().unwrap();
    assert!(
        v.dm_device.is_none() && v.table.is_none() && v.status.is_none(),
        "a dm device was made: {v:?}"
    );
    assert!(
        !o.console.contains("device-mapper: verity"),
        "the kernel saw a verity table: {}",
        o.describe()
    );
}

#[test]
fn bad_signature_is_refused_before_any_dm_device() {
    refused_before_dm(Name::VerityBadSig, "signature does not verify");
}

#[test]
fn untrusted_certificate_is_refused_before_any_dm_device() {
    refused_before_dm(
        Name::VerityUntrusted,
        "names no certificate in the trust store",
    );
}

#[test]
fn superblock_disagreeing_with_the_bom_is_refused_before_any_dm_device() {
    refused_before_dm(
        Name::VerityBadSuperblock,
        "superblock hash_block_size is 1024, the trusted value is 4096",
    );
}

/// `kernel_signature`: the signature also goes to the kernel (a `user` key named by
/// `root_hash_sig_key_desc`). Our signing key is not in the kernel's built-in keyring, so
/// the kernel itself refuses the table: proof the signature reached it.
///
/// The signature carries signed attributes out of DER's sorted order, signed as they lie:
/// we verified it (the report names its signer), and the kernel took its encoding and
/// its message digest (those refusals are `EBADMSG` and `EKEYREJECTED`, not `ENOKEY`).
#[test]
fn signature_handed_to_the_kernel_is_checked_by_the_kernel() {
    let o = run(Name::VerityKernelSig);
    let r = o.stopped();
    let v = r.verity.as_ref().unwrap();
    assert_eq!(v.source, "signature", "{v:?}");
    assert!(
        v.signer
            .as_deref()
            .is_some_and(|s| s.starts_with("fleet image signing trusted")),
        "{v:?}"
    );
    let reason = r.reason.as_deref().unwrap();
    assert_eq!(
        reason,
        "verity: device-mapper: DM_TABLE_LOAD(root): ENOKEY: Required key not available"
    );
    let v = r.verity.as_ref().unwrap();
    assert!(v
        .table
        .as_deref()
        .unwrap()
        .contains("root_hash_sig_key_desc validator:root-hash-sig"));
    assert!(
        o.console
            .contains("verity: Root hash verification failed (-ENOKEY)"),
        "{}",
        o.describe()
    );
    assert!(v.dm_device.is_none(), "the half-made device must be gone");
}

/// The same chain with an EROFS root (found by trying ext4, then erofs).
#[test]
fn erofs_verity_root_boots() {
    let o = run(Name::VerityErofs);
    let r = o.reached_root();
    assert_eq!(r.root.as_ref().unwrap().fstype, "erofs");
    let v = r.verity.as_ref().unwrap();
    assert_eq!(v.status.as_deref(), Some("V"));
    assert!(v.critical_files.iter().all(|c| c.ok));
}

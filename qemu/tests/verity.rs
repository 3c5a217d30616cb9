//! End-to-end: a dm-verity root from `veritysetup format`, its root hash signed in a
//! Discoverable Partitions `root-verity-sig` partition, set up by our init through the
//! device-mapper ioctls and checked by the kernel's dm-verity.

fn run(name: &str) -> qemu::vm::Outcome {
    qemu::scenario::run_named(name)
}

#[test]
fn signed_verity_root_boots_with_status_v() {
    let o = run("verity");
    let r = o.reached_root();
    assert_eq!(r["decision"], "pass", "{r}");
    let v = &r["verity"];
    assert_eq!(v["status"], "V");
    assert_eq!(v["source"], "signature");
    assert!(
        v["signer"]
            .as_str()
            .unwrap()
            .starts_with("fleet image signing trusted"),
        "{v}"
    );
    assert_eq!(v["root_hash"].as_str().unwrap().len(), 64);
    assert_eq!(v["dm_device"], "/dev/dm-0");
    assert_eq!(r["root"]["device"], "/dev/dm-0");
    assert_eq!(r["root"]["read_only"], true);
    // The partitions were found by the systemd PARTUUID convention.
    let root_hash = v["root_hash"].as_str().unwrap();
    let first = validator::verity::uuid_from_hash(
        &validator::verity::sig::unhex(&root_hash[..32]).unwrap(),
    )
    .unwrap();
    assert_eq!(r["root"]["partuuid"], first);
    // Every option reached the kernel and came back in its table.
    let kt = v["kernel_table"].as_str().unwrap();
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
    let crit = v["critical_files"].as_array().unwrap();
    assert_eq!(crit.len(), 2);
    assert!(
        crit.iter()
            .all(|c| c["ok"] == true && c["bytes"].as_u64().unwrap() > 0),
        "{crit:?}"
    );
    assert_eq!(o.root_report.as_ref(), Some(r));
}

#[test]
fn corrupted_block_in_a_critical_file_stops_before_switch_root() {
    let o = run("verity-corrupt");
    let r = o.stopped();
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("critical: critical file(s) unreadable through verity: /sbin/init (EIO"),
        "{reason}"
    );
    assert_eq!(r["fault"], "image");
    assert_eq!(
        r["verity"]["status"], "V",
        "the device came up valid; the read found the bad block"
    );
    let init = &r["verity"]["critical_files"][0];
    assert_eq!(
        (init["path"].as_str(), init["ok"].as_bool()),
        (Some("/sbin/init"), Some(false))
    );
    assert!(
        o.console.contains("device-mapper: verity") && o.console.contains("is corrupted"),
        "{}",
        o.describe()
    );
    assert!(
        o.marker.is_none() && !o.console.contains("switch_root:"),
        "{}",
        o.describe()
    );
}

fn refused_before_dm(name: &str, want: &str) {
    let o = run(name);
    let r = o.stopped();
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("verity: ") && reason.contains(want),
        "{reason}"
    );
    assert_eq!(r["fault"], "image");
    let v = &r["verity"];
    assert!(
        v.get("dm_device").is_none() && v.get("table").is_none() && v.get("status").is_none(),
        "a dm device was made: {v}"
    );
    assert!(
        !o.console.contains("device-mapper: verity"),
        "the kernel saw a verity table: {}",
        o.describe()
    );
}

#[test]
fn bad_signature_is_refused_before_any_dm_device() {
    refused_before_dm("verity-bad-sig", "signature does not verify");
}

#[test]
fn untrusted_certificate_is_refused_before_any_dm_device() {
    refused_before_dm(
        "verity-untrusted",
        "names no certificate in the trust store",
    );
}

#[test]
fn superblock_disagreeing_with_the_bom_is_refused_before_any_dm_device() {
    refused_before_dm(
        "verity-bad-superblock",
        "superblock hash_block_size is 1024, the trusted value is 4096",
    );
}

/// `kernel_signature`: the signature also goes to the kernel (a `user` key named by
/// `root_hash_sig_key_desc`). Our signing key is not in the kernel's built-in keyring, so
/// the kernel itself refuses the table: proof the signature reached it.
#[test]
fn signature_handed_to_the_kernel_is_checked_by_the_kernel() {
    let o = run("verity-kernel-sig");
    let r = o.stopped();
    let reason = r["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        "verity: device-mapper: DM_TABLE_LOAD(root): ENOKEY: Required key not available"
    );
    assert!(r["verity"]["table"]
        .as_str()
        .unwrap()
        .contains("root_hash_sig_key_desc validator:root-hash-sig"));
    assert!(
        o.console
            .contains("verity: Root hash verification failed (-ENOKEY)"),
        "{}",
        o.describe()
    );
    assert!(
        r["verity"].get("dm_device").is_none(),
        "the half-made device must be gone"
    );
}

/// The same chain with an EROFS root (found by trying ext4, then erofs).
#[test]
fn erofs_verity_root_boots() {
    let o = run("verity-erofs");
    let r = o.reached_root();
    assert_eq!(r["root"]["fstype"], "erofs");
    assert_eq!(r["verity"]["status"], "V");
    assert!(r["verity"]["critical_files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["ok"] == true));
}

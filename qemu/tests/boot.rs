//! End-to-end boots of the real Debian kernel in QEMU with our init as PID 1.

use qemu::vm::Verdict;
use validator::report::{Decision, Fault, StageStatus};
use validator::runtime::modload::ModStatus;
use validator::stages::Stage;

use qemu::scenario::Name;

fn run(name: Name) -> qemu::vm::Outcome {
    qemu::catalogue::run_named(name)
}

#[test]
fn good_boot_loads_modules_itself_and_switches_root() {
    let o = run(Name::Good);
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    let marker = o.marker.as_deref().unwrap_or_default();
    assert!(
        marker.ends_with("pid=1"),
        "the root's init is not PID 1: {marker}"
    );
    let r = o.report.as_ref().expect("report line");
    assert_eq!(r.schema, "validator.report/v2");
    assert_eq!(r.decision, Decision::Pass, "{r:?}");
    // The init loaded the storage and filesystem modules and their dependencies itself.
    let loaded: Vec<&str> = r
        .modules
        .iter()
        .filter(|m| m.status == ModStatus::Loaded)
        .map(|m| m.name.as_str())
        .collect();
    for m in [
        "virtio_ring",
        "virtio",
        "virtio_pci",
        "virtio_blk",
        "crc16",
        "mbcache",
        "jbd2",
        "ext4",
    ] {
        assert!(loaded.contains(&m), "{m} not loaded: {loaded:?}");
    }
    let pos = |n: &str| loaded.iter().position(|x| *x == n).unwrap();
    assert!(pos("jbd2") < pos("ext4") && pos("virtio") < pos("virtio_blk"));
    // The module options modprobe would give: the initramfs's modprobe.d, then the
    // command line; the kernel took both (sysfs, read by the root), and the report and
    // the measured event say so.
    let blk = r.modules.iter().find(|m| m.name == "virtio_blk").unwrap();
    assert_eq!(
        blk.options.as_deref(),
        Some("queue_depth=77 num_request_queues=1")
    );
    assert!(
        o.console
            .contains("VIRTIO-BLK-PARAMS queue_depth=77 num_request_queues=1"),
        "{}",
        o.describe()
    );
    assert!(
        r.modules
            .iter()
            .filter(|m| m.name != "virtio_blk")
            .all(|m| m.options.is_none()),
        "{:?}",
        r.modules
    );
    let root = r.root.as_ref().expect("root in the report");
    assert_eq!(root.partition.label, "root");
    assert_eq!(root.fstype, "ext4");
    assert!(root.read_only);
    assert_eq!(
        r.stage_names(),
        [
            "start",
            "measure",
            "modules",
            "storage",
            "mount",
            "preflight",
            "handover"
        ]
    );
    assert!(r.stages.iter().all(|s| s.status == StageStatus::Ok));
    // The BOM digest is the digest of the BOM file that went into the initramfs.
    assert_eq!(r.bom_sha256.as_deref().map(str::len), Some(64));
    // The report survived switch_root in /run, and the initramfs was emptied.
    assert_eq!(
        o.root_report.as_ref(),
        Some(r),
        "report in /run differs from the console's"
    );
    assert!(
        o.console.contains("switch_root: freed the initramfs"),
        "{}",
        o.describe()
    );
    assert!(o.console.contains("reboot: Power down"));
}

#[test]
fn absent_root_device_stops_cleanly_with_a_report() {
    let o = run(Name::NoRoot);
    let r = o.stopped();
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("storage: root device PARTLABEL=root not found after 3."),
        "{reason}"
    );
    // The NVMe disk plugged in during the wait was scanned at once on its block device
    // event (the wait's interval alone would say 0), and is no root.
    let woken = reason
        .split_once(" (")
        .and_then(|(_, r)| r.split_once(" scan(s) on a block device event); disks seen: "));
    let (n, seen) = woken.expect(reason);
    assert!(n.parse::<u32>().unwrap() >= 1, "{reason}");
    assert!(seen.contains("nvme0n1"), "{reason}");
    assert_eq!(r.fault, Some(Fault::Hardware));
    let last = r.stages.last().unwrap();
    assert_eq!(
        (last.name, last.status),
        (Stage::Storage, StageStatus::Failed)
    );
    assert!(o.console.contains("reboot: Power down"), "{}", o.describe());
    assert!(!o.console.contains("Kernel panic"), "{}", o.describe());
}

#[test]
fn module_the_kernel_refuses_is_named_with_its_errno() {
    let o = run(Name::BadModule);
    let r = o.stopped();
    let m = r.module("kvm_intel").expect("kvm_intel in report");
    assert_eq!(m.status, ModStatus::Failed);
    assert_eq!(m.errno.as_deref(), Some("EOPNOTSUPP"));
    assert_eq!(
        r.reason.as_deref(),
        Some("modules: module(s) failed to load: kvm_intel (EOPNOTSUPP)")
    );
    assert_eq!(r.fault, Some(Fault::Image));
    // Its dependencies did load.
    assert_eq!(r.module("kvm").unwrap().status, ModStatus::Loaded);
    assert!(!o.console.contains("Kernel panic"), "{}", o.describe());
}

#[test]
fn forced_panic_is_logged_and_ends_the_vm_without_killing_init() {
    let o = run(Name::Panic);
    let line = o
        .console
        .lines()
        .find(|l| {
            l.contains(
                "PANIC in PID 1: test panic requested at stage modules (validator.test_panic)",
            )
        })
        .unwrap_or_else(|| panic!("panic message not in the kernel log: {}", o.describe()));
    assert!(line.contains("then power off"), "{line}");
    assert!(o.console.contains("reboot: Power down"), "{}", o.describe());
    assert!(o.report.is_none(), "no report after a panic");
    assert!(matches!(o.verdict, Verdict::Exited(_)), "{}", o.describe());
}

#[test]
fn tampered_module_is_refused_before_the_kernel_sees_it() {
    let o = run(Name::TamperedModule);
    let r = o.stopped();
    let m = r.module("virtio_blk").expect("virtio_blk in report");
    assert_eq!(m.status, ModStatus::Rejected, "{m:?}");
    let codes: Vec<&str> = m.reasons.iter().map(|x| x.code.as_str()).collect();
    assert_eq!(codes, ["bad-signature"], "{m:?}");
    assert_eq!(
        m.signer.as_deref(),
        Some("Build time autogenerated kernel key")
    );
    let reason = r.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("modules: module gate refused: virtio_blk (signature does not verify"),
        "{reason}"
    );
    assert_eq!(r.fault, Some(Fault::Image));
    // Its dependencies passed the gate and loaded; the kernel never saw virtio_blk.
    assert_eq!(r.module("virtio").unwrap().status, ModStatus::Loaded);
    assert!(
        !o.console.contains("module verification failed"),
        "{}",
        o.describe()
    );
    assert!(
        !o.console.contains("virtio_blk virtio"),
        "the kernel loaded virtio_blk: {}",
        o.describe()
    );
    assert!(!o.console.contains("Kernel panic"), "{}", o.describe());
}

/// A module signed with SHA-512 on Debian 6.1, where sha512 is a module: the initramfs
/// packs `sha512_generic` as `crc8`'s `pre:` soft dependency, the init loads it first, and
/// then the gate and the kernel (signatures enforced, the signing key trusted through
/// UEFI db) both pass `crc8`. Without `sha512_generic` the kernel refuses it (ENOPKG,
/// `SIGNATURE-RULES.md` S23) and so does the gate.
#[test]
fn sha512_signed_module_loads_after_its_digest_module() {
    let o = run(Name::Sha512Module);
    let r = o.reached_root();
    assert!(
        r.kernel_release.as_deref().unwrap().starts_with("6.1."),
        "{r:?}"
    );
    let pos = |n: &str| {
        r.modules
            .iter()
            .position(|m| m.name == n)
            .unwrap_or_else(|| panic!("{n} not in {:?}", r.modules))
    };
    let sha = &r.modules[pos("sha512_generic")];
    assert_eq!(sha.status, ModStatus::Loaded, "{sha:?}");
    assert!(sha.softdep, "{sha:?}");
    let crc8 = &r.modules[pos("crc8")];
    assert_eq!(crc8.status, ModStatus::Loaded, "{crc8:?}");
    assert_eq!(crc8.sig_hashalgo.as_deref(), Some("sha512"), "{crc8:?}");
    assert!(crc8.reasons.is_empty(), "{crc8:?}");
    assert!(pos("sha512_generic") < pos("crc8"), "{:?}", r.modules);
    assert!(
        crc8.start_us >= sha.start_us + sha.duration_us,
        "{sha:?} {crc8:?}"
    );
    // The kernel checked it with enforcement on, and trusted the key through db.
    assert!(
        o.console.contains("integrity: Loaded X.509 cert 'SnakeOil"),
        "no snakeoil certificate in the kernel's keyrings: {}",
        o.describe()
    );
    assert!(o.console.contains("SIG-ENFORCE Y"), "{}", o.describe());
    assert!(o.console.contains("CRC8-STATE live"), "{}", o.describe());
    assert!(
        !o.console.contains("module verification failed"),
        "{}",
        o.describe()
    );
}

/// Debian's 6.12 kernel: `.ko.xz` modules decompressed once, by the gate, and handed to
/// the kernel as the image it judged (`init_module`), ECDSA P-384 signatures checked by
/// the gate, a built-in virtio_pci reported as such.
#[test]
fn kernel_6_12_with_compressed_modules_and_ecdsa_signatures() {
    let o = run(Name::K612);
    let r = o.reached_root();
    assert!(
        r.kernel_release.as_deref().unwrap().starts_with("6.12."),
        "{r:?}"
    );
    let get = |n: &str| {
        r.module(n)
            .unwrap_or_else(|| panic!("{n} not in {:?}", r.modules))
    };
    assert_eq!(get("virtio_pci").status, ModStatus::Builtin);
    let ext4 = get("ext4");
    assert_eq!(ext4.status, ModStatus::Loaded);
    assert!(ext4.path.as_deref().unwrap().ends_with("ext4.ko.xz"));
    assert_eq!(
        ext4.signer.as_deref(),
        Some("Build time autogenerated kernel key")
    );
    assert!(
        matches!(
            ext4.sig_hashalgo.as_deref(),
            Some("sha384" | "sha512" | "sha256")
        ),
        "{ext4:?}"
    );
}

/// The benchmark's floor (busybox: the same modules, the same root, no checks) reaches the
/// same root init, so the bench compares like with like.
#[test]
fn benchmark_floor_initramfs_reaches_the_root() {
    let s = qemu::scenario::Scenario::good().unwrap();
    let dir = qemu::paths::run_dir("floor").unwrap();
    let mut cfg = s.prepare(&dir).unwrap();
    let (_, order) = qemu::floor::load_order(&s).unwrap();
    assert!(
        order.iter().any(|p| p.ends_with("ext4.ko"))
            && order.iter().any(|p| p.ends_with("virtio_blk.ko")),
        "{order:?}"
    );
    let pos = |n: &str| order.iter().position(|p| p.ends_with(n)).unwrap();
    assert!(pos("jbd2.ko") < pos("ext4.ko"));
    cfg.initrd = qemu::floor::build(&s, &dir).unwrap();
    cfg.append = String::new();
    let o = qemu::vm::run(&cfg, &dir).unwrap();
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    assert!(o.report.is_none(), "the floor runs no checks");
    assert!(o.kernel_time_of(qemu::rootfs::KMSG_MARKER).is_some());
}

//! The fault matrix (`docs/FAULTS.md`): one boot per fault, each a good node with one
//! thing broken, booted with reboots followed so that a loop would show. Every test checks
//! the documented decision and fault class, that the report names the cause, that the
//! console never shows a kernel panic or "Attempted to kill init", and that the VM booted
//! no more kernels than the documented bound. Faults that other suites already boot
//! exactly (no root device, bad and untrusted root-hash signatures, no TPM, the TPM dying,
//! both slots bad) are listed in the table with those tests.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use qemu::ab::{self, Slot};
use qemu::faults;
use qemu::scenario::{Name, Scenario};
use qemu::vm::{Outcome, Run, Verdict, KERNEL_BOOT_MARKER};
use validator::report::{Decision, Fault, Report};
use validator::runtime::modload::ModStatus;
use validator::runtime::read_fault::Cause;

/// What every row checks: the run ended by itself (no timeout), no kernel panic, PID 1
/// never died, and at most `bound` kernels booted (the run is cut at the next one).
fn clean(run: &Run, bound: usize) {
    assert!(!run.timed_out, "timed out: {}", run.describe());
    for bad in ["Attempted to kill init", "Kernel panic"] {
        assert!(!run.console.contains(bad), "{bad}: {}", run.describe());
    }
    assert!(
        !run.boot_limit_reached && run.boots.len() <= bound,
        "more than {bound} kernel boot(s): {}",
        run.describe()
    );
}

/// Boots scenario `name`, following reboots up to `bound` kernel boots (kexec'd kernels
/// count), and checks [`clean`].
fn boot(name: Name, bound: u32) -> Run {
    let mut s = Scenario::named(name).unwrap();
    s.boot.follow_reboots = Some(bound);
    s.boot.split_at = Some(KERNEL_BOOT_MARKER.into());
    let run = s.run_boots().unwrap_or_else(|e| panic!("{name}: {e}"));
    eprintln!("{name}: {}", run.describe());
    clean(&run, bound as usize);
    assert_eq!(run.boots.len(), bound as usize, "{}", run.describe());
    run
}

/// The one boot of a run that stopped: its report, after checking the node powered off
/// (`validator.on_stop=poweroff`) rather than rebooting.
fn stopped(o: &Outcome) -> &Report {
    let r = o.stopped();
    assert!(o.console.contains("reboot: Power down"), "{}", o.describe());
    r
}

fn reason(r: &Report) -> &str {
    r.reason
        .as_deref()
        .unwrap_or_else(|| panic!("no reason: {r:?}"))
}

/// The gate refused [`faults::MODULE`] for `codes` (and only those) and the kernel
/// never saw it; the boot stopped on an image fault naming the module.
fn module_refused(name: Name, codes: &[&str]) -> (Run, Report) {
    let run = boot(name, 1);
    let o = &run.boots[0];
    let r = stopped(o).clone();
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    let m = r.module(faults::MODULE).expect("virtio_blk in the report");
    assert_eq!(m.status, ModStatus::Rejected, "{m:?}");
    // The codes in order, a run of one code counted once (one `crc` per symbol).
    let mut got: Vec<&str> = m.reasons.iter().map(|x| x.code.as_str()).collect();
    got.dedup();
    assert_eq!(got, codes, "{m:?}");
    assert!(
        reason(&r).starts_with("modules: module gate refused: virtio_blk ("),
        "{}",
        reason(&r)
    );
    assert!(
        !o.console.contains("virtio_blk virtio"),
        "the kernel bound virtio_blk: {}",
        o.describe()
    );
    (run, r)
}

#[test]
fn wrong_partuuid_stops_as_a_missing_disk_naming_what_it_saw() {
    let run = boot(Name::WrongPartuuid, 1);
    let r = stopped(&run.boots[0]);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Stop, Some(Fault::Hardware))
    );
    let why = reason(r);
    assert!(
        why.starts_with(&format!(
            "storage: root device PARTUUID={} not found after 3.",
            faults::ABSENT_PARTUUID
        )),
        "{why}"
    );
    // The disk that is there, with its partition, so an operator can tell a wrong name
    // from a dead disk.
    assert!(why.contains("disks seen: ") && why.contains("vda"), "{why}");
}

/// A corrupted hash block (level 0, under `/sbin/init`) leaves the root hash and the top
/// block intact, so the device comes up; the kernel refuses every data block it covers,
/// and reading the critical files through verity finds it before the handover.
#[test]
fn corrupt_hash_block_stops_before_the_handover() {
    let run = boot(Name::VerityCorruptHash, 1);
    let o = &run.boots[0];
    let r = read_failed(
        o,
        Fault::Image,
        &["critical: critical file(s) unreadable through verity: /sbin/init (EIO"],
        Cause::Corruption,
        "metadata block",
    );
    // The device came up valid; the read found the bad block.
    assert_eq!(r.verity.as_ref().unwrap().status.as_deref(), Some("V"));
    assert!(
        !o.console.contains("I/O error, dev vda"),
        "{}",
        o.describe()
    );
    assert!(o.marker.is_none(), "{}", o.describe());
}

/// A read through verity that failed, as the report and the kernel tell it: the stop, the
/// fault class, the reason's stage and cause, the verdict's status, and the kernel line
/// the report quotes, which the console shows for the same boot. Returns the report.
fn read_failed<'a>(
    o: &'a Outcome,
    fault: Fault,
    stages: &[&str],
    cause: Cause,
    kernel: &str,
) -> &'a Report {
    let r = stopped(o);
    assert_eq!(
        (r.decision, r.fault),
        (Decision::Stop, Some(fault)),
        "{}",
        o.describe()
    );
    let why = reason(r);
    assert!(
        stages.iter().any(|s| why.starts_with(s)),
        "{why} (expected one of {stages:?})"
    );
    let f = r.verity.as_ref().unwrap().read_fault.as_ref().unwrap();
    assert_eq!(f.cause, cause, "{f:?}");
    assert_eq!(
        f.status,
        if cause == Cause::Corruption { "C" } else { "V" },
        "{f:?}"
    );
    let line = f
        .kernel
        .iter()
        .rev()
        .find(|l| l.contains(kernel))
        .unwrap_or_else(|| panic!("no kernel line with {kernel:?}: {f:?}"));
    assert!(why.contains(f.kernel.last().unwrap()), "{why}");
    assert!(
        o.console.contains(line.as_str()),
        "{line}: {}",
        o.describe()
    );
    r
}

/// The disk fails reads of `/sbin/init`'s first data block (QEMU's blkdebug, `EIO`):
/// dm-verity passes the disk's error through without hashing, its status stays `V`, and
/// the kernel logs the block layer's `I/O error, dev vda`; the gate reads that as the
/// hardware's fault, not the image's: stop, hardware.
#[test]
fn disk_error_under_a_critical_file_is_the_hardwares() {
    let run = boot(Name::VerityEioData, 1);
    let o = &run.boots[0];
    read_failed(
        o,
        Fault::Hardware,
        &["critical: critical file(s) unreadable through verity: /sbin/init (EIO"],
        Cause::Disk,
        "I/O error, dev vda, sector ",
    );
    assert!(!o.console.contains("is corrupted"), "{}", o.describe());
}

/// The disk fails reads of the level-0 hash block above that block: dm-verity returns
/// the hash device's error as it is (the mount's reads fetch it with its neighbours, or
/// the critical read does): hardware, stop.
#[test]
fn disk_error_under_a_hash_block_is_the_hardwares() {
    let run = boot(Name::VerityEioHash, 1);
    let o = &run.boots[0];
    read_failed(
        o,
        Fault::Hardware,
        &[
            "mount: cannot mount /dev/dm-0: ext4: EIO",
            "critical: critical file(s) unreadable through verity: /sbin/init (EIO",
        ],
        Cause::Disk,
        "I/O error, dev vda, sector ",
    );
    assert!(!o.console.contains("is corrupted"), "{}", o.describe());
}

/// The disk fails reads of the filesystem's first block: the mount fails with `EIO`,
/// the status is `V`: hardware, stop.
#[test]
fn disk_error_under_the_superblock_fails_the_mount_as_the_hardwares() {
    let run = boot(Name::VerityEioMount, 1);
    read_failed(
        &run.boots[0],
        Fault::Hardware,
        &["mount: cannot mount /dev/dm-0: ext4: EIO"],
        Cause::Disk,
        "I/O error, dev vda, sector ",
    );
}

/// A BOM that pins a root hash the image does not have: the partitions are found by type,
/// and the stored top hash block does not hash to the pinned value, before any
/// device-mapper device exists.
#[test]
fn wrong_root_hash_is_refused_before_any_dm_device() {
    let run = boot(Name::VerityWrongRootHash, 1);
    let o = &run.boots[0];
    let r = stopped(o);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    assert_eq!(
        reason(r),
        format!(
            "verity: the stored top hash block does not hash to the trusted root hash {}",
            faults::WRONG_ROOT_HASH
        )
    );
    let v = r.verity.as_ref().unwrap();
    assert_eq!(v.source, "bom");
    assert!(v.dm_device.is_none() && v.table.is_none(), "{v:?}");
    assert!(
        !o.console.contains("device-mapper: verity"),
        "{}",
        o.describe()
    );
}

#[test]
fn unsigned_module_is_refused() {
    let (_, r) = module_refused(Name::UnsignedModule, &["unsigned"]);
    assert_eq!(
        reason(&r),
        "modules: module gate refused: virtio_blk (module is not signed)"
    );
}

/// The same module from Debian's `cloud` kernel flavour of the same release: its
/// vermagic names another kernel, it is signed by that build's key (which this kernel does
/// not trust) and its imports carry that build's CRCs; all three are named, the kernel
/// first.
#[test]
fn module_of_another_kernel_flavour_is_refused_for_its_vermagic() {
    let (_, r) = module_refused(
        Name::WrongVermagic,
        &["vermagic-release", "untrusted-signer", "crc"],
    );
    let m = r.module(faults::MODULE).unwrap();
    let vm = &m.reasons[0];
    let release = qemu::paths::kernel("default").unwrap().release;
    let cloud = qemu::paths::kernel("cloud").unwrap().release;
    assert_eq!(
        vm.message,
        format!("built for kernel {cloud}, the image's kernel is {release}")
    );
    assert!(
        reason(&r).contains(&format!("built for kernel {cloud}")),
        "{}",
        reason(&r)
    );
}

/// One `__versions` CRC changed, the module re-signed by a key the BOM trusts: the CRC is
/// the one reason, named with its symbol, as the kernel would word it.
#[test]
fn symbol_crc_mismatch_is_refused_naming_the_symbol() {
    let (_, r) = module_refused(Name::CrcMismatch, &["crc"]);
    let kernel = qemu::paths::kernel("default").unwrap();
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root).unwrap();
    let signed = std::fs::read(tree.moddir.join(&tree.files[faults::MODULE])).unwrap();
    let body = validator::formats::kmod::sig::split(&signed).unwrap().body;
    let (sym, _) = faults::crc_symbol(body).unwrap();
    assert!(
        reason(&r).contains(&format!(
            "disagrees about version of symbol {sym} (module 0x"
        )),
        "{}",
        reason(&r)
    );
    let m = r.module(faults::MODULE).unwrap();
    assert_eq!(
        m.signer.as_deref(),
        Some("fleet test module signing"),
        "{m:?}"
    );
}

#[test]
fn truncated_module_is_refused_as_unreadable() {
    let (_, r) = module_refused(Name::TruncatedModule, &["unreadable", "unsigned"]);
    assert!(
        reason(&r).starts_with("modules: module gate refused: virtio_blk ("),
        "{}",
        reason(&r)
    );
}

#[test]
fn missing_bom_stops_naming_the_path() {
    let run = boot(Name::BomMissing, 1);
    let r = stopped(&run.boots[0]);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    let why = reason(r);
    assert!(
        why.starts_with(&format!("start: BOM {}: ", faults::MISSING_BOM))
            && why.contains("No such file or directory"),
        "{why}"
    );
    assert!(r.image_id.is_none() && r.bom_sha256.is_none(), "{r:?}");
}

#[test]
fn corrupt_bom_stops_naming_the_file_and_line() {
    let run = boot(Name::BomCorrupt, 1);
    let r = stopped(&run.boots[0]);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    let why = reason(r);
    let prefix = format!("start: {}:", faults::CORRUPT_BOM);
    let line: usize = why
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no file:line in {why}"));
    assert!(line > 1, "{why}");
}

/// Hostile values for every `validator.*` key, a 1200-byte value, quotes, a control byte,
/// bytes that are not UTF-8, unknown keys and an unterminated quote: each bad key is named
/// in a warning, its default stays, and the node boots as it would without them.
#[test]
fn garbage_command_line_boots_with_every_bad_key_named() {
    let run = boot(Name::GarbageCmdline, 1);
    let o = &run.boots[0];
    let r = o.reached_root();
    assert_eq!((r.decision, r.fault), (Decision::Pass, None));
    let w = r.warnings.join("\n");
    for (key, _) in faults::GARBAGE_ARGS {
        assert!(
            r.warnings
                .iter()
                .any(|x| x.starts_with(key) || x.contains(&format!("key {key} "))),
            "no warning names {key}:\n{w}"
        );
    }
    assert!(w.contains("not UTF-8"), "{w}");
}

/// Memory pressure: the 40-module BOM in the least memory the kernel boots it in
/// ([`faults::LOW_MEMORY_MIB`]); the gate decides cleanly and PID 1's peak memory is in
/// the report.
#[test]
fn low_memory_still_ends_in_a_clean_decision() {
    let run = boot(Name::LowMemory, 1);
    let o = &run.boots[0];
    let r = o.reached_root();
    assert_eq!((r.decision, r.fault), (Decision::Pass, None));
    let peak = r.peak_rss_bytes.expect("peak memory in the report");
    eprintln!(
        "low-memory ({} MiB): PID 1 peak RSS {} KiB",
        faults::LOW_MEMORY_MIB,
        peak / 1024
    );
    assert!(peak > 0 && peak < u64::from(faults::LOW_MEMORY_MIB) << 20);
}

/// The A/B gate with no ESP: slot handling is off (the report says why) and a good boot
/// hands over.
#[test]
fn no_esp_good_boot_passes_with_slot_handling_off() {
    let run = boot(Name::AbNoEsp, 1);
    let o = &run.boots[0];
    let r = o.reached_root();
    assert_eq!((r.decision, r.fault), (Decision::Pass, None));
    assert_eq!(ab::root_slot(o), Some(Slot::A));
    let err = r.slot.as_ref().unwrap().error.as_deref().unwrap();
    assert!(err.starts_with("the ESP not found after 5."), "{err}");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("slot handling off")),
        "{:?}",
        r.warnings
    );
}

/// A full ESP: our record cannot be created, so the bound on boots cannot be kept and
/// the gate does not fall back; the image fault stops the node, and the report says why.
/// The grubenv, rewritten in place (no allocation), still demotes the slot.
#[test]
fn full_esp_image_fault_stops_without_a_fallback() {
    let bed = Scenario::named(Name::AbEspFull).unwrap().bed().unwrap();
    let run = bed.boot().unwrap();
    clean(&run, 1);
    let r = stopped(&run.boots[0]);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    assert!(reason(r).contains("crc16"), "{}", reason(r));
    let err = r.slot.as_ref().unwrap().error.as_deref().unwrap();
    assert!(err.contains("No space left on device"), "{err}");
    let env = bed.esp().unwrap().grubenv(&bed.dir).unwrap();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        (get("A_OK"), get("B_OK")),
        (Some("0"), Some("1")),
        "{env:?}"
    );
}

/// An ESP on write-protected media: it cannot be mounted for writing, slot handling is off
/// (the report says why), the image fault stops the node, and the ESP is unchanged.
#[test]
fn read_only_esp_image_fault_stops_and_leaves_the_esp_alone() {
    let bed = Scenario::named(Name::AbEspReadOnly).unwrap().bed().unwrap();
    let before = bed
        .esp()
        .unwrap()
        .read(qemu::firmware::GRUBENV_PATH)
        .unwrap();
    let run = bed.boot().unwrap();
    clean(&run, 1);
    let r = stopped(&run.boots[0]);
    assert_eq!((r.decision, r.fault), (Decision::Stop, Some(Fault::Image)));
    let err = r.slot.as_ref().unwrap().error.as_deref().unwrap();
    assert!(err.starts_with("cannot mount the ESP"), "{err}");
    assert!(err.contains("read-only"), "{err}");
    let after = bed
        .esp()
        .unwrap()
        .read(qemu::firmware::GRUBENV_PATH)
        .unwrap();
    assert_eq!(before, after);
}

/// A grubenv GRUB cannot load: GRUB keeps its defaults, finds no bootable slot and halts
/// (no kernel starts); booted without GRUB, the gate reports the grubenv, never writes
/// it, and a good boot hands over.
#[test]
fn corrupt_grubenv_halts_grub_and_is_left_alone_by_the_gate() {
    let bed = Scenario::named(Name::AbCorruptGrubenv)
        .unwrap()
        .bed()
        .unwrap();
    let before = bed
        .esp()
        .unwrap()
        .read(qemu::firmware::GRUBENV_PATH)
        .unwrap();
    through_grub_no_kernel_starts(&bed);
    let err = direct_boot_passes_with_a_slot_error(&bed);
    assert!(
        err.contains("grubenv") && err.contains("(left alone)"),
        "{err}"
    );
    let after = bed
        .esp()
        .unwrap()
        .read(qemu::firmware::GRUBENV_PATH)
        .unwrap();
    assert_eq!(before, after, "the gate wrote the grubenv");
}

/// The grubenv's cluster chain broken after its first cluster (the FAT a cut between a
/// chain's FAT writes leaves): GRUB's FAT reader refuses the file (`invalid cluster`) and
/// finds no bootable slot; booted directly, the kernel's vfat refuses it too (EIO, then
/// the file system set read-only), the gate names the grubenv and the FAT driver's lines,
/// and a good boot hands over with the ESP left as it was (but the dirty mark the kernel
/// sets).
#[test]
fn broken_cluster_chain_under_the_grubenv_halts_grub_and_is_named_by_the_gate() {
    let bed = Scenario::named(Name::AbGrubenvBrokenChain)
        .unwrap()
        .bed()
        .unwrap();
    let esp = bed.esp().unwrap();
    let before = esp_bytes(&bed);
    assert!(
        esp.read(qemu::firmware::GRUBENV_PATH).is_err(),
        "mtools read it"
    );
    let fw = through_grub_no_kernel_starts(&bed);
    assert!(fw.console.contains("invalid cluster"), "{}", fw.describe());
    let err = direct_boot_passes_with_a_slot_error(&bed);
    assert!(
        err.starts_with("grubenv: ") && err.contains("I/O error"),
        "{err}"
    );
    assert!(
        err.contains("kernel: FAT-fs (vda1): error, fat_get_cluster: invalid cluster chain")
            && err.contains("FAT-fs (vda1): Filesystem has been set read-only"),
        "{err}"
    );
    assert_eq!(
        err.matches("our state record is not written").count(),
        1,
        "each error once: {err}"
    );
    let after = esp_bytes(&bed);
    let changed: Vec<usize> = (0..before.len())
        .filter(|&i| before.get(i) != after.get(i))
        .take(16)
        .collect();
    // Only the boot sector's state byte (FAT32 offset 0x41): the kernel marks the volume
    // dirty when it mounts it read-write and, once it set it read-only after the error,
    // never clears the mark; `fsck.fat` at the root's next boot sees it.
    assert_eq!(changed, [0x41], "the ESP changed at these bytes");
    assert_eq!(after[0x41] & 1, 1, "the dirty bit");
}

/// The bytes of the bed's ESP partition.
fn esp_bytes(bed: &ab::Bed) -> Vec<u8> {
    use std::io::{Read, Seek};
    let esp = bed.esp().unwrap();
    let (_, len) = qemu::disk::partition_offset(&esp.image, qemu::firmware::ESP_LABEL).unwrap();
    let mut f = std::fs::File::open(&esp.image).unwrap();
    f.seek(std::io::SeekFrom::Start(esp.offset)).unwrap();
    let mut b = vec![0u8; usize::try_from(len).unwrap()];
    f.read_exact(&mut b).unwrap();
    b
}

/// Powers `bed` on through OVMF and GRUB: GRUB finds no bootable slot and no kernel
/// starts.
fn through_grub_no_kernel_starts(bed: &ab::Bed) -> Run {
    let ovmf = qemu::firmware::Ovmf::fresh(&bed.dir).unwrap();
    let fw = bed
        .boot_with(|c| {
            let disks = std::mem::take(&mut c.disks);
            let tpm = c.tpm.clone();
            *c = qemu::vm::VmConfig::uefi(ovmf);
            c.disks = disks;
            c.tpm = tpm;
            c.follow_reboots = Some(1);
            c.split_at = Some(KERNEL_BOOT_MARKER.into());
        })
        .unwrap();
    clean(&fw, 0);
    assert!(fw.console.contains(ab::GRUB_NO_SLOT), "{}", fw.describe());
    assert!(!fw.console.contains("Linux version"), "no kernel started");
    fw
}

/// Boots `bed` directly: one boot, which passes and hands over; returns the report's
/// slot `error`.
fn direct_boot_passes_with_a_slot_error(bed: &ab::Bed) -> String {
    let run = bed.boot().unwrap();
    clean(&run, 1);
    let o = &run.boots[0];
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    let r = o.report.as_ref().unwrap();
    assert_eq!((r.decision, r.fault), (Decision::Pass, None));
    r.slot.as_ref().unwrap().error.clone().unwrap()
}

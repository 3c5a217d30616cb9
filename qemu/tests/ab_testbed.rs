//! The A/B test bed, end to end with the real boot loaders: OVMF + an unmodified GRUB
//! (`grub-mkstandalone`) reading and writing `grubenv` on a FAT ESP through the shipped
//! `grub.cfg`, OVMF + Debian's systemd-boot renaming its counted entry, reboots followed
//! and counted, and a power cut at a console marker. The slots' BOMs carry no `[slot]`
//! section, so the init's slot stage stays off: these tests prove the bed (the boot
//! loaders' own state changes, reboots, cuts), not the gate's slot handling.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::time::Duration;

use qemu::ab::{self, Slot};
use qemu::scenario::{BootPath, Roots, Scenario, ESP_MODULES};
use qemu::vm::{KillAt, Throttle, Verdict};
use validator::config::bom::RootHashSource;
use validator::report::Decision;
use validator::runtime::modload::ModStatus;

/// GRUB gives both slots one command line, so each slot's root is named by its own BOM
/// (the pinned root hash names its verity partitions).
fn grub_node() -> Scenario {
    Scenario::two_slots(BootPath::Grub, Roots::Verity(RootHashSource::Bom)).unwrap()
}

fn env_of(bed: &ab::Bed) -> Vec<(String, String)> {
    bed.esp().unwrap().grubenv(&bed.dir).unwrap()
}

fn var(env: &[(String, String)], k: &str) -> String {
    env.iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{k} not in grubenv: {env:?}"))
}

/// The boot reached slot `slot`'s root through slot `slot`'s kernel command line and
/// initramfs; returns nothing, panics with the log path otherwise.
fn assert_slot_root(o: &qemu::vm::Outcome, slot: Slot) {
    assert_eq!(o.verdict, Verdict::RootInitReached, "{}", o.describe());
    assert_eq!(ab::cmdline_slot(o), Some(slot), "{}", o.describe());
    assert_eq!(ab::root_slot(o), Some(slot), "{}", o.describe());
    let r = o.report.as_ref().expect("report");
    assert_eq!(r.decision, Decision::Pass, "{r:?}");
    let id = r.image_id.as_deref().unwrap_or_default();
    assert!(
        id.ends_with(&format!("-{slot}")),
        "image {id}: not slot {slot}'s initramfs"
    );
}

#[test]
fn grub_boots_slot_b_when_a_is_demoted() {
    let mut s = grub_node();
    s.boot.slots.as_mut().unwrap().grubenv = vec![
        ("ORDER".into(), "A B".into()),
        ("A_OK".into(), "0".into()),
        ("A_TRY".into(), "0".into()),
        ("B_OK".into(), "1".into()),
        ("B_TRY".into(), "0".into()),
    ];
    let bed = s.bed().unwrap();
    let run = bed.boot().unwrap();
    eprintln!("{}", run.describe());
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert_eq!(ab::grub_slot(o), Some(Slot::B), "{}", o.describe());
    assert!(
        o.console.contains("BOOT_IMAGE=/B/vmlinuz"),
        "{}",
        o.describe()
    );
    assert_slot_root(o, Slot::B);
    let env = env_of(&bed);
    assert_eq!(
        (var(&env, "A_OK"), var(&env, "A_TRY")),
        ("0".into(), "0".into())
    );
    assert_eq!(var(&env, "B_TRY"), "1");
}

#[test]
fn grub_halts_when_no_slot_is_good() {
    let mut s = grub_node();
    // Nothing boots, so nothing needs building beyond the ESP; the slots are still made.
    s.boot.slots.as_mut().unwrap().grubenv = vec![
        ("ORDER".into(), "A B".into()),
        ("A_OK".into(), "0".into()),
        ("A_TRY".into(), "0".into()),
        ("B_OK".into(), "0".into()),
        ("B_TRY".into(), "0".into()),
    ];
    s.boot.follow_reboots = Some(3);
    let bed = s.bed().unwrap();
    let run = bed.boot().unwrap();
    eprintln!("{}", run.describe());
    assert!(
        !run.timed_out && !run.boot_limit_reached,
        "{}",
        run.describe()
    );
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert!(o.console.contains(ab::GRUB_NO_SLOT), "{}", o.describe());
    assert!(!o.console.contains("Linux version"), "{}", o.describe());
    assert_eq!(o.verdict, Verdict::Exited(Some(0)), "{}", o.describe());
    let env = env_of(&bed);
    assert_eq!(
        (var(&env, "A_TRY"), var(&env, "B_TRY")),
        ("0".into(), "0".into())
    );
}

#[test]
fn systemd_boot_boots_slot_a_and_counts_the_try_on_the_esp() {
    let mut s = Scenario::two_slots(BootPath::SystemdBoot, Roots::Plain).unwrap();
    {
        let a = &mut s.boot.slots.as_mut().unwrap().a;
        // The root's init shows the LoaderBootCountPath variable systemd-boot set, on the
        // efivarfs the gate mounted (it stays mounted across switch_root).
        a.root_extra = "echo \"BOOT-COUNT-PATH $(tail -c +5 /sys/firmware/efi/efivars/LoaderBootCountPath-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f | tr -d '\\000')\""
            .into();
    }
    let bed = s.bed().unwrap();
    let entries = bed.esp().unwrap().list("/loader/entries").unwrap();
    assert_eq!(entries, ["slot-a+3.conf", "slot-b+3.conf"]);
    let run = bed.boot().unwrap();
    eprintln!("{}", run.describe());
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    let o = &run.boots[0];
    assert_slot_root(o, Slot::A);
    assert!(
        o.console.contains("root=PARTLABEL=root-A"),
        "{}",
        o.describe()
    );
    // systemd-boot renamed the entry before booting it: one try done, two left.
    let entries = bed.esp().unwrap().list("/loader/entries").unwrap();
    assert_eq!(entries, ["slot-a+2-1.conf", "slot-b+3.conf"]);
    assert!(
        o.console
            .contains("BOOT-COUNT-PATH \\loader\\entries\\slot-a+2-1.conf"),
        "{}",
        o.describe()
    );
    bed.reset_boot_state().unwrap();
    let entries = bed.esp().unwrap().list("/loader/entries").unwrap();
    assert_eq!(entries, ["slot-a+3.conf", "slot-b+3.conf"]);
}

#[test]
fn reboots_are_followed_counted_and_stopped_at_the_limit() {
    let mut s = Scenario::two_slots(BootPath::Direct, Roots::Plain).unwrap();
    s.root_extra = "sync; reboot -f".into();
    s.boot.follow_reboots = Some(3);
    let run = s.run_boots().unwrap();
    eprintln!("{}", run.describe());
    assert!(run.boot_limit_reached, "{}", run.describe());
    assert!(!run.timed_out, "{}", run.describe());
    assert_eq!(run.boots.len(), 3, "{}", run.describe());
    for (i, o) in run.boots.iter().enumerate() {
        assert_eq!(
            o.verdict,
            Verdict::RootInitReached,
            "boot {i}: {}",
            o.describe()
        );
        assert_eq!(ab::root_slot(o), Some(Slot::A), "boot {i}");
        // Each part holds one boot: one kernel banner, one report.
        assert_eq!(o.console.matches("Linux version ").count(), 1, "boot {i}");
        assert!(o.console.contains("reboot: Restarting system"), "boot {i}");
    }
    assert!(run.started.windows(2).all(|w| w[0] < w[1]));
    // The fourth boot started and was cut off.
    assert!(run.console.matches("Linux version ").count() >= 4);
}

/// The shipped grub.cfg never loops: a slot that rebooted without being marked good is
/// not tried again, so A, then B, then a halt. The first boot is also GRUB booting slot A
/// from grubenv: it saved A's try before the kernel started, and the slot's ESP modules
/// are in its BOM and loaded. Then the bed's own state handling, on the host: the initial
/// state put back, and a saved disk restored.
#[test]
fn grub_tries_each_slot_once_then_halts() {
    let mut s = grub_node();
    s.root_extra = "sync; reboot -f".into();
    s.boot.follow_reboots = Some(5);
    let bed = s.bed().unwrap();
    assert_eq!(var(&env_of(&bed), "A_TRY"), "0");
    let run = bed.boot().unwrap();
    eprintln!("{}", run.describe());
    assert!(
        !run.boot_limit_reached && !run.timed_out,
        "{}",
        run.describe()
    );
    assert_eq!(run.boots.len(), 3, "{}", run.describe());
    let o = &run.boots[0];
    assert_slot_root(o, Slot::A);
    assert_eq!(ab::grub_slot(o), Some(Slot::A));
    assert_eq!(o.verdict, Verdict::RootInitReached);
    // What GRUB's save_env wrote before the kernel started, as the gate read it.
    assert!(
        o.console
            .contains("boot gate: slot A (A_OK=1 A_TRY=1 B_OK=1 B_TRY=0)"),
        "{}",
        o.describe()
    );
    let r = o.report.as_ref().unwrap();
    // The modules the init needs to mount the ESP are in the slot's BOM and loaded.
    for m in ESP_MODULES {
        assert!(
            r.modules
                .iter()
                .any(|x| x.name == *m && x.status == ModStatus::Loaded),
            "{m} not loaded: {:?}",
            r.modules
        );
    }
    assert_slot_root(&run.boots[1], Slot::B);
    assert_eq!(ab::grub_slot(&run.boots[1]), Some(Slot::B));
    assert!(run.boots[2].console.contains(ab::GRUB_NO_SLOT));
    assert!(!run.boots[2].console.contains("Linux version"));
    // GRUB's save_env rewrote grubenv on the FAT ESP; grub-editenv reads it back.
    let env = env_of(&bed);
    assert_eq!(var(&env, "ORDER"), "A B");
    assert_eq!(
        (
            var(&env, "A_OK"),
            var(&env, "A_TRY"),
            var(&env, "B_OK"),
            var(&env, "B_TRY")
        ),
        ("1".into(), "1".into(), "1".into(), "1".into())
    );
    // The bed puts the initial state back in place (as GRUB's save_env writes it).
    bed.reset_boot_state().unwrap();
    let env = env_of(&bed);
    assert_eq!(
        (var(&env, "A_TRY"), var(&env, "B_TRY")),
        ("0".into(), "0".into())
    );
    // A saved disk comes back as it was.
    bed.save("fresh").unwrap();
    bed.esp()
        .unwrap()
        .grubenv_set(&bed.dir, &[("A_OK", "0")])
        .unwrap();
    assert_eq!(var(&env_of(&bed), "A_OK"), "0");
    bed.restore("fresh").unwrap();
    assert_eq!(var(&env_of(&bed), "A_OK"), "1");
}

/// A power cut while slot A's root rewrites a file on the ESP through slow (throttled)
/// writes: the run is cut at the chosen moment, the disk's GPT, FAT and grubenv still
/// read on the host, and the next power-on goes on from the state GRUB saved.
#[test]
fn power_cut_during_esp_writes_leaves_a_usable_disk() {
    let mut s = grub_node();
    s.boot.slots.as_mut().unwrap().a.root_extra = "mkdir -p /run/esp && \
         mount -t vfat /dev/vda1 /run/esp && echo ESP-MOUNTED && \
         i=0; while true; do i=$((i+1)); echo $i > /run/esp/count.txt; sync; done"
        .into();
    s.boot.kill_at = Some(KillAt::on("ESP-MOUNTED", Duration::from_millis(700)));
    s.boot.throttle = Some(Throttle {
        bps_write: Some(64 * 1024),
        iops_write: Some(20),
    });
    let bed = s.bed().unwrap();
    let run = bed.boot().unwrap();
    eprintln!("{}", run.describe());
    let killed = run.killed_at.expect("killed");
    let mounted = run
        .seen_at(0, "ESP-MOUNTED")
        .expect("ESP mounted in slot A's root");
    assert!(
        killed >= mounted + Duration::from_millis(700),
        "{killed:?} {mounted:?}"
    );
    assert_eq!(run.boots.len(), 1, "{}", run.describe());
    assert_eq!(run.boots[0].verdict, Verdict::RootInitReached);
    assert!(!run.boots[0].console.contains("reboot: Power down"));
    let cmd = std::fs::read_to_string(bed.dir.join("power-1/qemu.cmdline")).unwrap();
    assert!(
        cmd.contains("throttling.bps-write=65536") && cmd.contains("throttling.iops-write=20"),
        "{cmd}"
    );
    // The disk is still a disk: the GPT, the FAT and grubenv read back.
    let esp = bed.esp().unwrap();
    let root = esp.list("/").unwrap();
    assert!(root.iter().any(|n| n == "EFI"), "{root:?}");
    let env = env_of(&bed);
    assert_eq!(var(&env, "A_TRY"), "1");
    assert_eq!(var(&env, "B_TRY"), "0");
    // Power on again, uncut: A was tried and never marked good, so GRUB goes on with B.
    let again = bed
        .boot_with(|c| {
            c.kill_at = None;
            c.throttle = None;
        })
        .unwrap();
    eprintln!("{}", again.describe());
    assert_eq!(again.boots.len(), 1, "{}", again.describe());
    assert_eq!(ab::grub_slot(&again.boots[0]), Some(Slot::B));
    assert_slot_root(&again.boots[0], Slot::B);
}

/// A slot's own variant reaches that slot's image only: slot A's initramfs carries a
/// tampered module and stops; slot B's, booted directly on the same kind of node, passes.
#[test]
fn slot_variants_reach_only_their_slot() {
    for (slot, tampered) in [(Slot::A, true), (Slot::B, false)] {
        let mut s = Scenario::two_slots(BootPath::Direct, Roots::Plain).unwrap();
        let two = s.boot.slots.as_mut().unwrap();
        two.a.tampered_modules.push("virtio_blk".into());
        two.direct_slot = slot;
        let o = s.run_checked();
        if tampered {
            let r = o.stopped();
            assert!(
                r.image_id.as_deref().unwrap_or_default().ends_with("-A"),
                "{r:?}"
            );
            let reason = r.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("virtio_blk"), "{reason}");
        } else {
            assert_slot_root(&o, slot);
        }
    }
}

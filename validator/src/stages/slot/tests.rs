//! The slot stage end to end on host directories: GRUB's scheme on files made by
//! `grub-editenv` (good boot, fallback, both bad), the bound on failed boots, and a
//! grubenv that does not parse. Needs `/usr/bin/grub-editenv`.

use std::path::{Path, PathBuf};

use super::kexec::target_cmdline;
use super::*;
use crate::stages::Roots;

fn cfg(bootloader: Bootloader) -> Slot {
    let toml = match bootloader {
        Bootloader::Grub => "bootloader = \"grub\"",
        Bootloader::SystemdBoot => "bootloader = \"systemd-boot\"",
    };
    toml::from_str(toml).unwrap()
}

/// An ESP directory with a grubenv made by grub-editenv.
fn esp(tag: &str, vars: &[&str]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vld-slot-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("EFI/BOOT")).unwrap();
    let env = d.join("EFI/BOOT/grubenv");
    let tool = "/usr/bin/grub-editenv";
    assert!(std::process::Command::new(tool)
        .arg(&env)
        .arg("create")
        .status()
        .unwrap()
        .success());
    let mut c = std::process::Command::new(tool);
    c.arg(&env).arg("set").args(vars);
    assert!(c.status().unwrap().success());
    d
}

fn grub_list(d: &Path) -> String {
    let out = std::process::Command::new("/usr/bin/grub-editenv")
        .arg(d.join("EFI/BOOT/grubenv"))
        .arg("list")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn boot(d: &Path, slot: SlotName, bom_sha: &str) -> (Context, SlotFacts) {
    let mut ctx = Context::new(Roots::default());
    ctx.facts.image_id = Some(format!("img-{bom_sha}"));
    ctx.facts.bom_sha256 = Some(bom_sha.into());
    ctx.cmdline = format!("console=ttyS0 validator.slot={slot} quiet");
    let mut facts = SlotFacts::default();
    let rt = open_dir(
        &mut ctx,
        &cfg(Bootloader::Grub),
        &mut facts,
        slot,
        d.to_path_buf(),
    )
    .unwrap();
    ctx.slot = Some(rt);
    ctx.facts.slot = Some(facts.clone());
    (ctx, facts)
}

/// GRUB's scheme end to end on the files GRUB and grub-editenv use: a good boot marks
/// its slot good; an image fault demotes it, uses a try of the other slot for the
/// kexec and records the report; the other slot's boot sees where it came from; when
/// that one fails too there is no fallback left.
#[test]
fn grub_slots_good_then_fallback_then_both_bad() {
    let d = esp(
        "grub",
        &["ORDER=A B", "A_OK=1", "A_TRY=1", "B_OK=1", "B_TRY=0"],
    );
    let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
    assert_eq!(facts.attempts, 1);
    assert_eq!(facts.before.get("A_TRY").map(String::as_str), Some("1"));
    assert_eq!(fallback_target(&ctx), Some(SlotName::B));
    assert!(act(
        &mut ctx,
        Decision::Pass,
        None,
        None,
        "{\"decision\":\"pass\"}"
    )
    .is_none());
    assert_eq!(
        grub_list(&d),
        "ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n"
    );
    // Next boot of A: GRUB set A_TRY=1 again; now the image is bad.
    assert!(std::process::Command::new("/usr/bin/grub-editenv")
        .arg(d.join("EFI/BOOT/grubenv"))
        .args(["set", "A_TRY=1"])
        .status()
        .unwrap()
        .success());
    let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
    assert_eq!((facts.attempts, facts.consecutive_failures), (1, 0));
    let plan = act(
        &mut ctx,
        Decision::Fallback,
        Some(Fault::Image),
        Some("modules: module gate refused: virtio_blk"),
        "{\"decision\":\"fallback\",\"slot\":{\"booted\":\"A\"}}",
    )
    .expect("a fallback plan");
    assert_eq!(plan.target, SlotName::B);
    assert_eq!(plan.kernel, d.join("B/vmlinuz"));
    assert_eq!(plan.cmdline, "validator.slot=B console=ttyS0 quiet");
    let mut c2 = Context::new(Roots::default());
    c2.cmdline = "BOOT_IMAGE=/A/vmlinuz validator.slot=A ro".into();
    assert_eq!(target_cmdline(&c2, SlotName::B), "validator.slot=B ro");
    // A demoted, B's try used for the kexec (as GRUB would before booting it).
    assert_eq!(
        grub_list(&d),
        "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=1\nB_TRY=1\n"
    );
    let f = ctx.facts.slot.as_ref().unwrap();
    assert!(f.action.as_deref().unwrap().contains("demoted A"), "{f:?}");
    // B's boot (after a reboot: no carried report) finds A's failure in the record.
    let (mut ctx, facts) = boot(&d, SlotName::B, "bbb");
    let prev = facts.previous.expect("A's failure");
    assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("A", "reboot"));
    assert_eq!(
        prev.reason.as_deref(),
        Some("modules: module gate refused: virtio_blk")
    );
    assert_eq!(prev.report.unwrap()["decision"], "fallback");
    assert_eq!(facts.consecutive_failures, 1);
    // B is bad too: A is no longer offered: both bad, no fallback.
    assert_eq!(fallback_target(&ctx), None);
    assert!(act(
        &mut ctx,
        Decision::Stop,
        Some(Fault::Image),
        Some("x"),
        "{}"
    )
    .is_none());
    assert_eq!(
        grub_list(&d),
        "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=0\nB_TRY=0\n"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Our record bounds the boots when the boot loader's state is lost: after
/// `max_boots` failed boots in a row no fallback is offered, whatever GRUB says.
#[test]
fn the_record_bounds_failed_boots() {
    let d = esp(
        "bound",
        &["ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=1", "B_TRY=0"],
    );
    for n in 0..3 {
        let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
        assert_eq!(facts.consecutive_failures, n);
        // The boot crashed before deciding (nothing written back); GRUB's state is
        // reset by someone, so it would keep offering both slots.
        drop(ctx.slot.take());
    }
    let (ctx, facts) = boot(&d, SlotName::A, "aaa");
    assert_eq!(facts.consecutive_failures, 3);
    assert!(over_bound(&ctx));
    assert_eq!(fallback_target(&ctx), None);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A grubenv we cannot parse is reported and never written; the boot goes on.
#[test]
fn unparsable_grubenv_is_left_alone() {
    let d = esp("corrupt", &["A_OK=1"]);
    let env = d.join("EFI/BOOT/grubenv");
    let mut bytes = std::fs::read(&env).unwrap();
    let n = bytes.len();
    bytes[n - 1] = b'x';
    std::fs::write(&env, &bytes).unwrap();
    let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
    assert!(
        facts.error.as_deref().unwrap().contains("left alone"),
        "{facts:?}"
    );
    assert_eq!(fallback_target(&ctx), None);
    act(&mut ctx, Decision::Pass, None, None, "{}");
    assert_eq!(std::fs::read(&env).unwrap(), bytes, "untouched");
    let f = ctx.facts.slot.as_ref().unwrap();
    assert!(f.error.as_deref().unwrap().contains("unusable"), "{f:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The fault both slots showed (`stages::preflight::repeat`): A fell back for an image
/// fault, B's preflight found the same devices failing and made it the hardware's, so
/// B's quarantine gives A back its good mark, in GRUB's state and in our record; without
/// that finding a quarantine of B leaves A demoted.
#[test]
fn a_fault_both_slots_show_gives_the_first_slot_back() {
    use crate::runtime::slot::{RepeatSource, Repeated};
    for moved in [true, false] {
        let d = esp(
            if moved { "repeat" } else { "no-repeat" },
            &["ORDER=A B", "A_OK=1", "A_TRY=1", "B_OK=1", "B_TRY=0"],
        );
        let (mut ctx, _) = boot(&d, SlotName::A, "aaa");
        act(
            &mut ctx,
            Decision::Fallback,
            Some(Fault::Image),
            Some("preflight: gpu-driver: not seen: 0000:3a:00.0"),
            "{\"decision\":\"fallback\",\"slot\":{\"booted\":\"A\"}}",
        )
        .expect("a fallback plan");
        let (mut ctx, _) = boot(&d, SlotName::B, "bbb");
        if let Some(rt) = ctx.slot.as_mut() {
            rt.repeated = moved.then(|| Repeated {
                slot: "A".into(),
                check: "gpu-driver".into(),
                devices: vec!["0000:3a:00.0".into()],
                source: RepeatSource::FellBack,
            });
        }
        assert!(act(
            &mut ctx,
            Decision::Quarantine,
            Some(Fault::Hardware),
            Some("preflight: gpu-driver: ..."),
            "{}"
        )
        .is_none());
        let a = ctx.slot.as_ref().unwrap().record.state.slots["A"].good;
        let action = ctx.facts.slot.as_ref().unwrap().action.clone().unwrap();
        if moved {
            assert_eq!(
                grub_list(&d),
                "ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n"
            );
            assert_eq!(a, Some(true));
            assert!(action.contains("gave A back its good mark"), "{action}");
        } else {
            assert_eq!(
                grub_list(&d),
                "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=1\nB_TRY=0\n"
            );
            assert_eq!(a, Some(false));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// An updater marked the other slot bad before writing it (RAUC's GRUB backend sets
/// `B_OK=0 B_TRY=0`) while our record still held B's old image good: the next boot of A
/// drops that good mark, so `validator slot status` finds no disagreement; a slot the
/// gate itself demoted keeps its bad mark.
#[test]
fn a_slot_demoted_outside_the_gate_loses_its_good_mark_in_the_record() {
    let d = esp(
        "outside",
        &["ORDER=A B", "A_OK=1", "A_TRY=1", "B_OK=1", "B_TRY=0"],
    );
    let (mut ctx, _) = boot(&d, SlotName::B, "bbb");
    act(&mut ctx, Decision::Pass, None, None, "{}");
    let (mut ctx, _) = boot(&d, SlotName::A, "aaa");
    act(&mut ctx, Decision::Pass, None, None, "{}");
    assert!(ctx.slot.as_ref().unwrap().disagreements().is_empty());
    // RAUC's install into B marks it non-bootable, then the power is cut.
    assert!(std::process::Command::new("/usr/bin/grub-editenv")
        .arg(d.join("EFI/BOOT/grubenv"))
        .args(["set", "B_OK=0", "B_TRY=0", "A_TRY=1"])
        .status()
        .unwrap()
        .success());
    let (mut ctx, _) = boot(&d, SlotName::A, "aaa");
    assert_eq!(ctx.slot.as_ref().unwrap().disagreements().len(), 1);
    act(&mut ctx, Decision::Pass, None, None, "{}");
    let f = ctx.facts.slot.as_ref().unwrap();
    assert!(
        f.action
            .as_deref()
            .unwrap()
            .contains("dropped our good mark of B"),
        "{f:?}"
    );
    let (ctx, _) = boot(&d, SlotName::A, "aaa");
    let rt = ctx.slot.as_ref().unwrap();
    assert!(rt.disagreements().is_empty());
    assert_eq!(rt.record.state.slots["B"].good, None);
    assert_eq!(rt.record.state.slots["A"].good, Some(true));
    // A slot the gate demoted stays bad in the record.
    let (mut ctx, _) = boot(&d, SlotName::A, "aaa");
    act(
        &mut ctx,
        Decision::Stop,
        Some(Fault::Image),
        Some("x"),
        "{}",
    );
    let (ctx, _) = boot(&d, SlotName::B, "bbb");
    assert_eq!(
        ctx.slot.as_ref().unwrap().record.state.slots["A"].good,
        Some(false)
    );
    std::fs::remove_dir_all(&d).unwrap();
}

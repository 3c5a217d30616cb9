//! Reports across a fallback, made by the real slot code on a host directory: a grubenv
//! made by `grub-editenv`, our state record, and the report a kexec fallback carries in
//! the next initramfs. The stage lines are the ones such boots have (a verity failure
//! after the slot stage). Checks that the report a boot carried reads back as the next
//! boot's previous report, and that the slot code decides as the documented examples
//! (made by the A/B QEMU boots) say.

use std::path::{Path, PathBuf};

use super::schema::{Report, StageReport, StageStatus};
use crate::config::bom::{Slot, SlotName};
use crate::config::layout;
use crate::runtime::slot::SlotFacts;
use crate::stages::slot::{act, fallback_target, open_dir};
use crate::stages::{Context, Decision, Fault, Roots, Stage};

const IMAGE: &str = "qemu-node-2026.12.01";
const VERITY_FAULT: &str = "verity: the root hash signature does not verify against the \
                            trusted certificates (root-verity-sig on /dev/vda3)";

fn grubenv(dir: &Path, vars: &[&str]) {
    let env = dir.join("EFI/BOOT/grubenv");
    std::fs::create_dir_all(dir.join("EFI/BOOT")).unwrap();
    for args in [vec!["create"], [&["set"][..], vars].concat()] {
        let ok = std::process::Command::new("grub-editenv")
            .arg(&env)
            .args(args)
            .status()
            .expect("grub-editenv (grub-common)")
            .success();
        assert!(ok);
    }
}

/// One boot of `slot` on the ESP `esp`, whose stages end with verity failing when
/// `verity_fails`; `initramfs` may hold a report carried by a kexec. Returns the report as
/// the init publishes it and the JSON it carries or records.
fn boot(esp: &Path, initramfs: &Path, slot: SlotName, verity_fails: bool, t0: u64) -> Report {
    let mut ctx = Context::new(Roots {
        initramfs: initramfs.to_path_buf(),
        ..Roots::default()
    });
    ctx.facts.image_id = Some(IMAGE.into());
    ctx.facts.bom_sha256 =
        Some("d1038380a4127b779bbea97a4f6d106a7399333dfd15d53e11f49fc3490f4ead".into());
    ctx.facts.kernel_release = Some("6.1.0-57-amd64".into());
    ctx.facts.node.product_name = Some("Standard PC (Q35 + ICH9, 2009)".into());
    ctx.facts.node.product_serial = Some("QEMU-NODE-0001".into());
    ctx.cmdline = format!("console=ttyS0 validator.slot={slot} ro");
    let cfg = Slot::from_toml("bootloader = \"grub\"\nfallback = \"kexec\"").unwrap();
    let mut facts = SlotFacts {
        bootloader: Some(cfg.bootloader),
        max_boots: cfg.max_boots,
        esp: Some("/dev/vda1".into()),
        ..SlotFacts::default()
    };
    let rt = open_dir(&mut ctx, &cfg, &mut facts, slot, esp.to_path_buf()).unwrap();
    facts.booted = Some(slot);
    ctx.slot = Some(rt);
    ctx.facts.slot = Some(facts);
    let mut r = Report::new(t0);
    let mut t = t0;
    let mut stage = |r: &mut Report, name: Stage, us: u64, fail: Option<&str>| {
        r.stages.push(StageReport {
            name,
            status: if fail.is_some() {
                StageStatus::Failed
            } else {
                StageStatus::Ok
            },
            start_us: t,
            duration_us: us,
            fault: fail.map(|_| Fault::Image),
            detail: Some(fail.map_or_else(|| format!("{} ok", name.name()), str::to_string)),
        });
        t += us;
        if let Some(why) = fail {
            r.fail(Fault::Image, format!("{}: {why}", name.name()));
        }
    };
    for (name, us) in [
        (Stage::Start, 2_100),
        (Stage::Measure, 31_000),
        (Stage::Modules, 412_000),
        (Stage::Slot, 48_000),
        (Stage::Storage, 23_000),
    ] {
        stage(&mut r, name, us, None);
    }
    if verity_fails {
        stage(
            &mut r,
            Stage::Verity,
            61_000,
            Some(VERITY_FAULT.trim_start_matches("verity: ")),
        );
    } else {
        for (name, us) in [
            (Stage::Verity, 95_000),
            (Stage::Mount, 9_000),
            (Stage::Critical, 4_000),
            (Stage::Handover, 300),
        ] {
            stage(&mut r, name, us, None);
        }
    }
    r.absorb(&ctx.facts);
    r.decision = match r.fault {
        None => Decision::Pass,
        Some(_) if fallback_target(&ctx).is_some() => Decision::Fallback,
        Some(_) => Decision::Stop,
    };
    r.checks = super::checks::derive(&r);
    r.boottime_report_us = t + 700;
    let json = r.to_json();
    let _ = act(&mut ctx, r.decision, r.fault, r.reason.as_deref(), &json);
    r.absorb(&ctx.facts);
    r.checks = super::checks::derive(&r);
    r
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vld-examples-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fails verity and falls back by kexec, carrying its report; B boots with it. When B
/// fails too, both slots are bad and the boot stops.
fn scenario(b_fails: bool) -> (Report, Report) {
    let esp = tmp(if b_fails { "bad-esp" } else { "fb-esp" });
    grubenv(
        &esp,
        &["ORDER=A B", "A_OK=1", "A_TRY=1", "B_OK=1", "B_TRY=0"],
    );
    let empty = tmp(if b_fails { "bad-i0" } else { "fb-i0" });
    let a = boot(&esp, &empty, SlotName::A, true, 2_300_000);
    let carried = tmp(if b_fails { "bad-i1" } else { "fb-i1" });
    let p = carried.join(layout::CARRIED_REPORT);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, a.to_json()).unwrap();
    let b = boot(&esp, &carried, SlotName::B, b_fails, 1_900_000);
    for d in [esp, empty, carried] {
        std::fs::remove_dir_all(d).unwrap();
    }
    (a, b)
}

#[test]
fn fallback_and_both_bad_reports() {
    let (a, b) = scenario(false);
    assert_eq!(a.decision, Decision::Fallback);
    assert_eq!(b.decision, Decision::Pass);
    let prev = b.slot.as_ref().unwrap().previous.as_ref().unwrap();
    assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("A", "kexec"));
    assert_eq!(b.previous_report().unwrap().reason, a.reason);
    let (_, bb) = scenario(true);
    assert_eq!(
        (bb.decision, bb.fault),
        (Decision::Stop, Some(Fault::Image))
    );
    assert!(bb.slot.as_ref().unwrap().previous.is_some());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    for (file, r) in [("report-fallback.json", &b), ("report-both-bad.json", &bb)] {
        let path = dir.join(file);
        let committed: Report =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            (committed.decision, committed.fault),
            (r.decision, r.fault),
            "{file}"
        );
        let prev = |r: &Report| {
            r.previous_report()
                .map(|p| (p.decision, p.fault, p.booted_slot().map(str::to_string)))
        };
        assert_eq!(prev(&committed), prev(r), "{file}");
        let action = |r: &Report| r.slot.as_ref().and_then(|s| s.action.clone());
        assert_eq!(action(&committed), action(r), "{file}");
    }
}

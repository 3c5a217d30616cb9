//! The fault both slots show: when a boot that another slot fell back into fails the same
//! device check on the same devices as that slot's boot did, the devices are at fault,
//! not either image ([`attribute`]).
//!
//! The rule. Only the checks in [`DEVICE_CHECKS`] can move: their image fault says a
//! device is on PCI but its driver does not see it (`gpu-driver`: a GPU with no
//! `/proc/driver/nvidia/gpus` entry, or excluded; `nvswitches`: an NVSwitch with no
//! `nvidia-nvswitch` entry), which a wrong driver gives, and so does a device that fails
//! its probe. Two different images whose drivers both fail the same devices, and see the
//! others, point at the devices. So the deciding check of this boot
//! ([`PreflightReport::decide`]) becomes a hardware fault when all of these hold:
//! - it is an image fault of a check in [`DEVICE_CHECKS`] that names the devices it did
//!   not see ([`Check::devices`]), and the driver saw at least one device of that kind on
//!   PCI (a driver that sees none stays the image's fault: it is likely the driver);
//! - either this boot is the fallback of the other slot's boot, whose decision was
//!   `fallback` for an image fault ([`Previous`]: its report came along by kexec, or our
//!   record kept it for a fallback by reboot), and that boot's own preflight was decided
//!   by the same check, an image fault, naming the same set of devices;
//! - or the other slot's last boot (its report in our record) already found this check
//!   failing on the same devices on both slots: the next boot of the slot that was given
//!   back its good mark quarantines at once instead of falling back on every boot.
//!
//! The check's detail then says so, the report's preflight keeps the evidence
//! ([`Repeated`]), and the slot stage gives the other slot back what its boot's demotion
//! took ([`crate::stages::slot::act`]): it was not the image.
//!
//! Current limits: the evidence is the two reports' device lists; the kernel log's probe
//! errors are not read. A fallback by reboot keeps the other boot's report only when our
//! record had room for it (`slotstate`); without it the fault stays the image's.

use super::{Check, PreflightReport};
use crate::runtime::slot::Previous;
pub use crate::runtime::slot::{RepeatSource, Repeated};
use crate::stages::Fault;

/// The checks whose image fault can be the devices' (see the module doc).
pub const DEVICE_CHECKS: [&str; 2] = ["gpu-driver", "nvswitches"];

/// The deciding check of `now`, when the rule may move it: an image fault of a device
/// check naming some, not all, of the devices of its kind. Returns its index.
fn movable(now: &PreflightReport) -> Option<usize> {
    let (fault, c) = now.decide()?;
    if fault != Fault::Image || !DEVICE_CHECKS.contains(&c.name.as_str()) || c.devices.is_empty() {
        return None;
    }
    let on_pci = match c.name.as_str() {
        "gpu-driver" => now.gpus.len(),
        _ => now.nvswitches.len(),
    };
    if c.devices.len() >= on_pci {
        return None;
    }
    now.checks.iter().position(|x| std::ptr::eq(x, c))
}

/// Whether two device lists name the same set.
fn same_set(a: &[String], b: &[String]) -> bool {
    use std::collections::BTreeSet;
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// Whether `before`'s preflight was decided by `check`, an image fault, on `devices`.
fn same_in(before: &PreflightReport, check: &Check) -> bool {
    before.decide().is_some_and(|(f, c)| {
        f == Fault::Image && c.name == check.name && same_set(&c.devices, &check.devices)
    })
}

/// The preflight of the boot that fell back into this one, when it fell back for an
/// image fault and its report holds one.
fn previous_preflight(previous: &Previous) -> Option<PreflightReport> {
    if previous.decision.as_deref() != Some("fallback")
        || previous.fault.as_deref() != Some("image")
    {
        return None;
    }
    let p = previous.report.as_ref()?.get("preflight")?;
    serde_json::from_value(p.clone())
        .map_err(|e| {
            log::warn!(
                "preflight: slot {}'s preflight report is not one this gate reads: {e}",
                previous.slot
            );
        })
        .ok()
}

/// What this boot knows of the other slot's boots.
#[derive(Debug, Clone, Copy, Default)]
pub struct OtherSlot<'a> {
    /// The boot that fell back into this one ([`crate::stages::slot`]'s `previous`).
    pub fell_back: Option<&'a Previous>,
    /// The other slot's last boot, as our record keeps it.
    pub last: Option<LastBoot<'a>>,
}

/// The other slot's last boot as our record keeps it.
#[derive(Debug, Clone, Copy)]
pub struct LastBoot<'a> {
    /// The other slot.
    pub slot: &'a str,
    /// This boot's slot (the finding in the other slot's report names it).
    pub this: &'a str,
    /// Its report.
    pub report: &'a serde_json::Value,
}

/// Whether the other slot's last boot already found `check` failing on the same devices
/// on both slots, with this slot as the other one (its preflight's [`Repeated`]).
fn diagnosed(last: &LastBoot<'_>, check: &Check) -> bool {
    let Some(r) = last.report.pointer("/preflight/repeated") else {
        return false;
    };
    match serde_json::from_value::<Repeated>(r.clone()) {
        Ok(r) => {
            r.slot == last.this && r.check == check.name && same_set(&r.devices, &check.devices)
        }
        Err(e) => {
            log::warn!(
                "preflight: slot {}'s finding in our record is not one this gate reads: {e}",
                last.slot
            );
            false
        }
    }
}

/// Applies the rule to `report` (this boot's preflight) against what is known of the
/// other slot's boots: the deciding check becomes a hardware fault and
/// [`PreflightReport::repeated`] holds the evidence when the boot that fell back into
/// this one failed it on the same devices, or when the other slot's last boot had
/// already found that fault on both slots (so a node whose first slot was given back
/// its good mark does not fall back on every boot). Returns whether it moved.
pub fn attribute(report: &mut PreflightReport, other: OtherSlot<'_>) -> bool {
    let Some(i) = movable(report) else {
        return false;
    };
    let Some(c) = report.checks.get(i) else {
        return false;
    };
    let fell_back = other
        .fell_back
        .filter(|p| previous_preflight(p).is_some_and(|before| same_in(&before, c)));
    let (slot, source, how) = match (fell_back, other.last) {
        (Some(p), _) => (
            p.slot.clone(),
            RepeatSource::FellBack,
            "'s boot failed this check on the same device(s) and fell back here",
        ),
        (None, Some(last)) if diagnosed(&last, c) => (
            last.slot.to_string(),
            RepeatSource::Record,
            "'s last boot found this check failing on the same device(s) on both slots",
        ),
        _ => return false,
    };
    let repeated = Repeated {
        slot,
        check: c.name.clone(),
        devices: c.devices.clone(),
        source,
    };
    let how = format!("slot {}{how}", repeated.slot);
    mark(report, i, repeated, &how)
}

/// The live re-check (`validator recheck`, [`crate::report::recheck`]) of a boot whose
/// preflight moved a fault to the devices (`boot`, its [`PreflightReport::repeated`]):
/// when the same check fails now on the same devices, it is the devices' fault again,
/// on the boot's evidence. Returns whether it moved.
pub fn carry(report: &mut PreflightReport, boot: &Repeated) -> bool {
    let Some(i) = movable(report) else {
        return false;
    };
    let same = report
        .checks
        .get(i)
        .is_some_and(|c| c.name == boot.check && same_set(&c.devices, &boot.devices));
    if !same {
        return false;
    }
    let how = format!("as at boot, where slot {} showed it too", boot.slot);
    mark(report, i, boot.clone(), &how)
}

/// Makes check `i` of `report` a hardware fault (`how`: why, in its detail) and keeps
/// `repeated`, unless another image fault of the report would decide then (left as it
/// was). Returns whether it moved.
fn mark(report: &mut PreflightReport, i: usize, repeated: Repeated, how: &str) -> bool {
    let before = report.checks.get(i).cloned();
    if let Some(c) = report.checks.get_mut(i) {
        c.fault = Some(Fault::Hardware);
        c.detail = format!(
            "{}; {how}: the devices are at fault, not the image",
            c.detail
        );
    }
    // Another image fault of this boot decides now: the image is at fault after all.
    if report.decide().map(|(f, _)| f) != Some(Fault::Hardware) {
        if let (Some(c), Some(b)) = (report.checks.get_mut(i), before) {
            *c = b;
        }
        return false;
    }
    report.repeated = Some(repeated);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::preflight::nvidia::GpuFact;

    fn gpu(address: &str, seen: bool) -> GpuFact {
        GpuFact {
            address: address.into(),
            pci_id: "10de:2335".into(),
            driver: seen.then(|| "nvidia".to_string()),
            model: seen.then(|| "NVIDIA H200".to_string()),
            minor: None,
            excluded: false,
            vbios: None,
        }
    }

    /// A preflight of 4 GPUs whose driver does not see `unseen`.
    fn preflight(unseen: &[&str]) -> PreflightReport {
        let all = [
            "0000:18:00.0",
            "0000:2a:00.0",
            "0000:3a:00.0",
            "0000:5d:00.0",
        ];
        let gpus: Vec<GpuFact> = all.iter().map(|a| gpu(a, !unseen.contains(a))).collect();
        let check = if unseen.is_empty() {
            Check::pass("gpu-driver", "all seen")
        } else {
            Check::fail("gpu-driver", Fault::Image, "not seen")
                .with_devices(unseen.iter().map(|s| s.to_string()).collect())
        };
        PreflightReport {
            checks: vec![Check::pass("gpus", "4 on PCI"), check],
            gpus,
            ..PreflightReport::default()
        }
    }

    fn fell_back(from: &PreflightReport) -> Previous {
        let report = serde_json::json!({ "preflight": from });
        Previous {
            slot: "A".into(),
            via: "kexec".into(),
            image_id: None,
            decision: Some("fallback".into()),
            fault: Some("image".into()),
            reason: None,
            report: Some(report),
        }
    }

    fn from(p: &Previous) -> OtherSlot<'_> {
        OtherSlot {
            fell_back: Some(p),
            last: None,
        }
    }

    #[test]
    fn the_same_devices_on_both_slots_are_the_hardwares() {
        let a = preflight(&["0000:3a:00.0"]);
        let mut b = preflight(&["0000:3a:00.0"]);
        assert!(attribute(&mut b, from(&fell_back(&a))));
        let (fault, c) = b.decide().unwrap();
        assert_eq!((fault, c.name.as_str()), (Fault::Hardware, "gpu-driver"));
        assert!(
            c.detail.contains("slot A's boot failed this check"),
            "{}",
            c.detail
        );
        assert_eq!(
            b.repeated,
            Some(Repeated {
                slot: "A".into(),
                check: "gpu-driver".into(),
                devices: vec!["0000:3a:00.0".into()],
                source: RepeatSource::FellBack,
            })
        );
    }

    /// The live re-check keeps the boot's finding while the same devices fail; other
    /// devices, or none failing, are judged afresh.
    #[test]
    fn the_recheck_carries_the_boots_finding_for_the_same_devices_only() {
        let a = preflight(&["0000:3a:00.0"]);
        let mut b = preflight(&["0000:3a:00.0"]);
        assert!(attribute(&mut b, from(&fell_back(&a))));
        let found = b.repeated.clone().unwrap();
        let mut now = preflight(&["0000:3a:00.0"]);
        assert!(carry(&mut now, &found));
        let (fault, c) = now.decide().unwrap();
        assert_eq!(fault, Fault::Hardware);
        assert!(
            c.detail.contains("as at boot, where slot A showed it too"),
            "{}",
            c.detail
        );
        assert_eq!(now.repeated, Some(found.clone()));
        let mut other = preflight(&["0000:5d:00.0"]);
        assert!(!carry(&mut other, &found));
        assert_eq!(
            (other.decide().unwrap().0, other.repeated),
            (Fault::Image, None)
        );
        let mut well = preflight(&[]);
        assert!(!carry(&mut well, &found));
        assert!(well.decide().is_none());
    }

    #[test]
    fn other_devices_a_first_boot_or_a_driver_that_sees_none_stay_the_images() {
        let a = preflight(&["0000:3a:00.0"]);
        // Another GPU unseen in B: not the same fault.
        let mut b = preflight(&["0000:5d:00.0"]);
        assert!(!attribute(&mut b, from(&fell_back(&a))));
        assert_eq!(b.decide().unwrap().0, Fault::Image);
        // More GPUs unseen in B.
        let mut b = preflight(&["0000:3a:00.0", "0000:5d:00.0"]);
        assert!(!attribute(&mut b, from(&fell_back(&a))));
        // No boot fell back here.
        let mut b = preflight(&["0000:3a:00.0"]);
        assert!(!attribute(&mut b, OtherSlot::default()));
        assert_eq!(b.repeated, None);
        // A driver that sees none of the GPUs, in both boots.
        let all = [
            "0000:18:00.0",
            "0000:2a:00.0",
            "0000:3a:00.0",
            "0000:5d:00.0",
        ];
        let a = preflight(&all);
        let mut b = preflight(&all);
        assert!(!attribute(&mut b, from(&fell_back(&a))));
        assert_eq!(b.decide().unwrap().0, Fault::Image);
    }

    #[test]
    fn the_previous_boot_must_have_fallen_back_for_that_image_fault() {
        let a = preflight(&["0000:3a:00.0"]);
        let mut prev = fell_back(&a);
        prev.decision = Some("quarantine".into());
        let mut b = preflight(&["0000:3a:00.0"]);
        assert!(!attribute(&mut b, from(&prev)));
        // Its report without a preflight (a record that had no room for it).
        let mut prev = fell_back(&a);
        prev.report = Some(serde_json::json!({ "decision": "fallback" }));
        assert!(!attribute(&mut b, from(&prev)));
        // Its preflight decided by another check.
        let mut other = a.clone();
        other.checks.insert(
            0,
            Check::fail("driver-version", Fault::Image, "570 is not 535"),
        );
        assert!(!attribute(&mut b, from(&fell_back(&other))));
        assert_eq!(b.decide().unwrap().0, Fault::Image);
    }

    #[test]
    fn an_image_fault_elsewhere_still_decides() {
        // B's own image fault decides before the device check: nothing moves.
        let a = preflight(&["0000:3a:00.0"]);
        let mut b = preflight(&["0000:3a:00.0"]);
        b.checks
            .insert(0, Check::fail("fabric-manager", Fault::Image, "missing"));
        assert!(!attribute(&mut b, from(&fell_back(&a))));
        assert_eq!(b.decide().unwrap().1.name, "fabric-manager");
        // An image fault after the device check decides once it moved: moved back.
        let mut b = preflight(&["0000:3a:00.0"]);
        b.checks.push(Check::fail(
            "driver-version",
            Fault::Image,
            "570 is not 535",
        ));
        let detail = b.checks[1].detail.clone();
        assert!(!attribute(&mut b, from(&fell_back(&a))));
        assert_eq!(b.checks[1].fault, Some(Fault::Image));
        assert_eq!(b.checks[1].detail, detail);
        assert_eq!(b.repeated, None);
    }

    /// The next boot of the first slot (given back its good mark): the other slot's last
    /// report holds the finding, so the same failure is the hardware's at once, with no
    /// fallback; another device, or a report without the finding, is not.
    #[test]
    fn the_finding_is_kept_for_the_next_boot_of_the_first_slot() {
        let a = preflight(&["0000:3a:00.0"]);
        let mut b = preflight(&["0000:3a:00.0"]);
        assert!(attribute(&mut b, from(&fell_back(&a))));
        let b_report = serde_json::json!({ "preflight": b });
        let last = |report| OtherSlot {
            fell_back: None,
            last: Some(LastBoot {
                slot: "B",
                this: "A",
                report,
            }),
        };
        let mut a2 = preflight(&["0000:3a:00.0"]);
        assert!(attribute(&mut a2, last(&b_report)));
        assert_eq!(a2.decide().unwrap().0, Fault::Hardware);
        assert_eq!(a2.repeated.as_ref().unwrap().slot, "B");
        assert_eq!(a2.repeated.as_ref().unwrap().source, RepeatSource::Record);
        assert!(
            a2.checks[1]
                .detail
                .contains("slot B's last boot found this check failing"),
            "{}",
            a2.checks[1].detail
        );
        let mut other = preflight(&["0000:5d:00.0"]);
        assert!(!attribute(&mut other, last(&b_report)));
        // A finding that names another slot than this one.
        let mut wrong = b_report.clone();
        wrong["preflight"]["repeated"]["slot"] = serde_json::json!("B");
        let mut a4 = preflight(&["0000:3a:00.0"]);
        assert!(!attribute(&mut a4, last(&wrong)));
        let plain = serde_json::json!({ "preflight": preflight(&["0000:3a:00.0"]) });
        let mut a3 = preflight(&["0000:3a:00.0"]);
        assert!(!attribute(&mut a3, last(&plain)));
    }
}

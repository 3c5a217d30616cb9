//! The GPU fault both slots show (`ab-gpu-both-slots`, `ab-gpu-slot-a`): the A/B node whose
//! preflight reads the GPUs, NVSwitches, ports and driver of an HGX H200 node from a
//! hardware fixture tree in each slot's root (`validator.test_hw_fixture`, a key only the
//! test bed's init knows), since a VM shows no NVIDIA device.
//!
//! Contract: `setup` gives both slots the fixture node's `[hardware]`, `[nvidia]` and
//! taint policy (`examples/hgx-h200-training.toml`, no link wait) and each slot's root the
//! fixture the name says: `driver-sees-7` (the driver does not see GPU `0000:d1:00.0`)
//! in A, and in B too for `ab-gpu-both-slots`, `good` in B for `ab-gpu-slot-a`.
//!
//! Limits: the fixture is read in place of `/sys`, `/proc` and the root by the preflight
//! alone; every other stage reads the VM.

use crate::scenario::{Name, Scenario};
use crate::HarnessError;

/// Where the slot roots hold the fixture, as the command line names it.
pub const FIXTURE_DIR: &str = "/hw-fixture";

/// Turns the A/B node `s` (GRUB, plain roots) into the GPU scenario `name`.
pub(super) fn setup(s: &mut Scenario, name: Name) -> Result<(), HarnessError> {
    let example = crate::paths::workspace().join("examples/hgx-h200-training.toml");
    let node = validator::config::bom::load(&example)
        .map_err(|e| HarnessError::Setup(format!("{}: {e}", example.display())))?
        .bom;
    s.cmdline
        .push_str(&format!(" validator.test_hw_fixture={FIXTURE_DIR}"));
    let two = s
        .boot
        .slots
        .as_mut()
        .ok_or_else(|| HarnessError::Setup(format!("{name}: not an A/B scenario")))?;
    for (img, fixture) in [
        (&mut two.a, "driver-sees-7"),
        (
            &mut two.b,
            if name == Name::AbGpuBothSlots {
                "driver-sees-7"
            } else {
                "good"
            },
        ),
    ] {
        img.bom.hardware = node.hardware.clone();
        img.bom.hardware.link_wait_s = Some(0);
        img.bom.nvidia = node.nvidia.clone();
        img.bom.policy.taint_allowed = node.policy.taint_allowed.clone();
        img.hw_fixture = Some(fixture.into());
    }
    Ok(())
}

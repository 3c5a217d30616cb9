//! The boot gate's test bed: real Debian kernels in QEMU under TCG, with real disks,
//! real module files, real dm-verity images (`veritysetup format`) and a swtpm per VM.
//!
//! Contract: [`scenario::Scenario`] describes a boot and [`catalogue`] names them
//! (`Scenario::named`: a name to its set-up, by topic: [`basic`], [`ab`], [`preflight`],
//! [`faults`]); [`prepare`] assembles it (BOM, initramfs built with the
//! `mkinitramfs` library, a GPT root disk made from a directory with `mkfs.ext4 -d` and
//! `sfdisk`, no loop devices, the kernel command line) in a fresh directory under
//! `target/qemu-runs/`, and [`vm::run`] boots it in its own process group with the serial
//! console captured to a file, a wall-clock timeout, `panic=-1` and `-no-reboot`, and
//! returns a typed [`vm::Outcome`] (root init reached / validator decision / kernel panic /
//! timeout) with the log path. The process group is killed at the end, whatever happened.
//!
//! [`verity`] makes signed DPS verity roots, [`tpmcheck`] reads what the test root printed
//! about its TPM, [`mod@bench`] runs every benchmark: the boot against Debian's initramfs and the
//! floor ([`floor`]: a busybox initramfs that only loads the same modules and mounts the
//! same root), PID 1's peak memory and the A/B boot paths; the `bench_*` modules beside it
//! measure the time to recover ([`bench_recover`]), the Secure Boot node and the real root.
//!
//! [`firmware`] boots through OVMF with GRUB or systemd-boot on a FAT ESP and reads that
//! ESP back on the host; [`ab`] builds the A/B node (an ESP and two slots, each with its
//! own kernel, initramfs, BOM and root) and boots it directly or through firmware, with
//! reboots followed ([`vm::run_boots`]: one outcome per boot), power cuts
//! ([`vm::KillAt`]) and throttled writes ([`vm::Throttle`]).
//!
//! [`sigrules`] hands every case of the `sigcases` crate (module files breaking one
//! kernel signature, vermagic or CRC rule each) to the real kernels with no gate in
//! between, booted through OVMF with test keys in UEFI `db` ([`efivars`]).
//!
//! Modules, roughly from the bottom up (`tests/import_cycles.rs` checks that no two import
//! each other, directly or round a circle, and that this list names every module):
//! `paths`, `aptsources`, `disk`, `rootfs`, `verity`, `initramfs`, `firmware`,
//! `secureboot`, `efivars`, `reportcheck`, `tpmcheck`, `vm`, `hw`, `sigrules`,
//! `debroot`, `nodeview`, `attestation`; then `scenario` (types only); the set-ups
//! `basic`, `ab`, `preflight`, `faults` and the builder `prepare`; then `catalogue`; then
//! `install_cuts` (power cuts during `rauc install` on the real node), `floor`, `bench`
//! and the `bench_*` modules.
//!
//! Current limits: x86-64 guests only; TCG by default (`VALIDATOR_ACCEL=kvm` switches);
//! one vCPU unless a config says more; kernels come from `scripts/provision`
//! (`target/kernels/`).

// The test bed is test infrastructure: a broken setup step (a missing tool, a failed
// image build) should stop the test that asked for it loudly, so the workspace's denial
// of unwrap/expect/panic/indexing (meant for the init and the library) does not apply.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test harness: a failed step panics the test that called it"
)]

static PROGRESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on [`progress`] prints (the harness's `run` command, for the demo).
pub fn show_progress() {
    PROGRESS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One line on stderr saying what the test bed does now and about how long it takes,
/// when [`show_progress`] was called (tests stay quiet).
pub fn progress(what: &str) {
    if PROGRESS.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("... {what}");
    }
}

pub mod ab;
pub mod aptsources;
pub mod attestation;
pub mod basic;
pub mod bench;
pub mod bench_real_root;
pub mod bench_recover;
pub mod bench_secure_boot;
pub mod bench_split;
pub mod catalogue;
pub mod debroot;
pub mod disk;
pub mod efivars;
pub mod faults;
pub mod firmware;
pub mod floor;
pub mod hw;
pub mod initramfs;
pub mod install_cuts;
pub mod nodeview;
pub mod paths;
pub mod preflight;
pub mod prepare;
pub mod reportcheck;
pub mod rootfs;
pub mod scenario;
pub mod secureboot;
pub mod sigrules;
pub mod tpmcheck;
pub mod verity;
pub mod vm;

use std::path::{Path, PathBuf};

/// A test-bed problem (not a boot outcome: those are [`vm::Verdict`]s).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{0}")]
    Setup(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl HarnessError {
    pub fn io(path: &Path, source: std::io::Error) -> HarnessError {
        HarnessError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

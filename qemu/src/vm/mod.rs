//! One QEMU virtual machine: started in its own process group, serial console captured
//! to a file, watched until it ends or a wall-clock timeout passes, then the whole
//! process group is killed. `panic=-1` and `-no-reboot` are set by default, so a dead PID 1
//! ends the VM instead of hanging it.
//!
//! A VM boots either a kernel directly (`-kernel`, SeaBIOS; the image's `vmlinux`
//! through its PVH entry point, [`pvh`], so the guest does not decompress it) or UEFI firmware
//! ([`VmConfig::firmware`]: OVMF from pflash with a writable copy of its variable store)
//! which starts the boot loader on the first disk's ESP. [`run_boots`] can follow reboots
//! ([`VmConfig::follow_reboots`]: no `-no-reboot`, so QEMU resets the guest): the console
//! is split per boot at [`VmConfig::boot_marker`] and each boot gets its own typed
//! [`Outcome`]. A run can be cut like a power cut ([`KillAt`]: SIGKILL to QEMU's process
//! group a given delay after a console text), and disk writes can be throttled
//! ([`Throttle`]) so a cut lands inside a write more often. Commands can be sent to
//! QEMU's monitor at a console text ([`MonitorAt`]: a device hot-plugged into the running
//! node).
//!
//! Limits: boots are told apart by a console text, so a boot loader or kernel that prints
//! nothing is not counted; the console is polled every 20 ms, so times seen on the host
//! ([`Run::seen_at`], a kill's moment) are late by up to that much.
//!
//! Where it is: [`VmConfig`] and its QEMU command line in `config.rs`; starting QEMU and
//! its swtpm, watching the console and killing the process groups in `watch.rs`; telling
//! how a console ended ([`classify`], [`Outcome`]) in `outcome.rs`; [`run`] and
//! [`run_boots`] (the console split per boot) in `boots.rs`.

mod boots;
mod config;
mod outcome;
pub mod pvh;
mod watch;

pub use boots::{run, run_boots, Run};
pub use config::{
    Accel, KillAt, MonitorAt, Throttle, VmConfig, DEFAULT_MEMORY_MIB, FIRMWARE_BOOT_MARKER,
    KERNEL_BOOT_MARKER, MONITOR_SOCKET,
};
pub use outcome::{classify, Outcome, Verdict};

//! How a boot that does not hand over ends: sync, then halt, power off or reboot as the
//! command line says (`validator.on_stop=`, `validator.on_panic=`), and never return (PID 1
//! must not exit). Used by the boot's decision, the panic hook (`start`) and the slot
//! stage's reboot into the other slot.
//!
//! Contract: [`finish`] never returns: if `reboot(2)` fails, the reason goes to the kernel
//! log and the thread reaps zombies and sleeps forever.

use std::time::Duration;

use crate::config::cmdline::Action;
use crate::sys::{self, RebootMode};

/// Syncs and performs `action`; never returns. If `reboot(2)` fails the thread sleeps
/// forever (PID 1 must not exit).
pub fn finish(action: Action) -> ! {
    sys::sync();
    let mode = match action {
        Action::Halt => RebootMode::Halt,
        Action::Poweroff => RebootMode::PowerOff,
        Action::Reboot => RebootMode::Restart,
    };
    let e = sys::reboot(mode);
    crate::sys::kmsg::emergency(&format!("{e}; sleeping forever"));
    loop {
        sys::reap_zombies();
        std::thread::sleep(Duration::from_secs(3600));
    }
}

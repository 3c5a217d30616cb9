//! The boot gate's PID 1: started by the kernel as `/init` in the initramfs.
//!
//! Contract: it refuses to run as anything but PID 1, installs the panic policy (log to
//! `/dev/kmsg`, sync, then reboot / power off / halt as `validator.on_panic=` says; never
//! the kernel's "Attempted to kill init!"), and runs [`validator::boot::run_pid1`], which
//! never returns. Built for `x86_64-unknown-linux-musl`: a static binary without
//! `PT_INTERP` or `DT_NEEDED`. All logic lives in the `validator` library.

fn main() {
    if validator::sys::getpid() != 1 {
        eprintln!("init: this is the boot gate's PID 1; it only runs as process 1 in an initramfs");
        std::process::exit(1);
    }
    validator::stages::start::install_panic_hook();
    validator::boot::run_pid1()
}

//! The real root of the test node: a tiny filesystem whose `/sbin/init` (busybox sh from
//! Debian's busybox-static) proves it was reached as PID 1 after `switch_root`, shows the
//! report the validator left in `/run`, runs any extra commands, and powers off.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::HarnessError;

/// Printed by the root's init, with `uptime=` (seconds since boot) and `pid=`.
pub const MARKER: &str = "ROOT-INIT-MARKER";
/// Written by the root's init to `/dev/kmsg` first thing, so the kernel log timestamps it
/// on the same clock as "Run /init".
pub const KMSG_MARKER: &str = "root-init: reached";
/// Printed by the root's init before the report it found in `/run/validator/report.json`.
pub const ROOT_REPORT: &str = "ROOT-REPORT ";

/// Builds the root directory at `dir`. `extra` is shell run after the marker.
pub fn build(dir: &Path, extra: &str) -> Result<(), HarnessError> {
    let io = |p: &Path, e| HarnessError::io(p, e);
    let _ = std::fs::remove_dir_all(dir);
    for d in [
        "bin", "sbin", "dev", "proc", "sys", "run", "tmp", "etc", "usr/bin", "lib", "lib64",
    ] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| io(&dir.join(d), e))?;
    }
    let bb = Path::new("/bin/busybox");
    let target = dir.join("bin/busybox");
    std::fs::copy(bb, &target).map_err(|e| {
        HarnessError::Setup(format!(
            "{}: {e} (install busybox-static: scripts/provision)",
            bb.display()
        ))
    })?;
    let list = crate::disk::run(std::process::Command::new(bb).arg("--list"))?;
    for applet in list
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        let link = dir.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).map_err(|e| io(&link, e))?;
        }
    }
    let init = dir.join("sbin/init");
    let script = format!(
        "#!/bin/sh\n\
         export PATH=/usr/bin:/bin\n\
         echo \"{KMSG_MARKER}\" > /dev/kmsg\n\
         echo \"{MARKER} uptime=$(cut -d' ' -f1 /proc/uptime) pid=$$\"\n\
         echo \"{ROOT_REPORT}$(cat /run/validator/report.json 2>/dev/null)\"\n\
         {extra}\n\
         sync\n\
         poweroff -f\n"
    );
    std::fs::write(&init, script).map_err(|e| io(&init, e))?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(&init, e))?;
    Ok(())
}

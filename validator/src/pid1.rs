//! What it takes to be PID 1 in an initramfs: the guard, the panic policy, the early
//! mounts, stopping in a safe state, and `switch_root` in the safe order.
//!
//! PID 1 must never return, exit or unwind: the kernel would panic with "Attempted to kill
//! init!". The panic hook therefore logs to `/dev/kmsg`, syncs and reboots, powers off or
//! halts as the command line says ([`set_panic_action`]); if even that fails, the thread
//! sleeps forever.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use nix::mount::MsFlags;

use crate::cmdline::Action;
use crate::sys::{self, RebootMode, SysError};

static PANIC_ACTION: AtomicU8 = AtomicU8::new(2);

fn encode(a: Action) -> u8 {
    match a {
        Action::Halt => 0,
        Action::Poweroff => 1,
        Action::Reboot => 2,
    }
}

fn decode(v: u8) -> Action {
    match v {
        0 => Action::Halt,
        1 => Action::Poweroff,
        _ => Action::Reboot,
    }
}

/// Sets what the panic hook does (the default is reboot).
pub fn set_panic_action(a: Action) {
    PANIC_ACTION.store(encode(a), Ordering::SeqCst);
}

/// Installs the PID-1 panic hook.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let action = decode(PANIC_ACTION.load(Ordering::SeqCst));
        crate::kmsg::emergency(&format!(
            "PANIC in PID 1: {payload}{loc}; syncing, then {}",
            action_word(action)
        ));
        finish(action)
    }));
}

fn action_word(a: Action) -> &'static str {
    match a {
        Action::Halt => "halt",
        Action::Poweroff => "power off",
        Action::Reboot => "reboot",
    }
}

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
    crate::kmsg::emergency(&format!("{e}; sleeping forever"));
    loop {
        sys::reap_zombies();
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Mounts the API filesystems PID 1 needs: `/proc`, `/sys`, `/dev` (devtmpfs), `/run`.
/// Already-mounted targets (`EBUSY`) are fine. Returns the failures, which the caller
/// reports; the boot goes on as far as it can.
pub fn mount_api_filesystems(root: &Path) -> Vec<SysError> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let table: [(&str, &str, &str, MsFlags, Option<&str>); 4] = [
        ("proc", "proc", "proc", nosuid, None),
        ("sysfs", "sys", "sysfs", nosuid, None),
        (
            "devtmpfs",
            "dev",
            "devtmpfs",
            MsFlags::MS_NOSUID,
            Some("mode=0755"),
        ),
        (
            "tmpfs",
            "run",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
    ];
    let mut errs = Vec::new();
    for (src, dir, fstype, flags, data) in table {
        let target = root.join(dir);
        let _ = std::fs::create_dir_all(&target);
        match sys::mount(src, &target, Some(fstype), flags, data) {
            Ok(()) => {}
            Err(e) if e.errno == nix::errno::Errno::EBUSY => {}
            Err(e) => errs.push(e),
        }
    }
    errs
}

/// A `switch_root` problem; before the point of no return the init can still report and
/// stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("the new root has no executable init {init} ({why})")]
    NoInit { init: String, why: String },
    #[error("the new root has no {0} directory to move the API mount into")]
    NoMountPoint(PathBuf),
    #[error(transparent)]
    Sys(#[from] SysError),
}

/// Resolves `path` inside `root` following symlinks as if `root` were `/`.
pub fn resolve_in_root(root: &Path, path: &str) -> Result<PathBuf, String> {
    let mut parts: Vec<String> = Vec::new();
    let mut todo: Vec<String> = path.split('/').rev().map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                parts.pop();
                continue;
            }
            _ => {}
        }
        let mut cand = root.to_path_buf();
        for p in &parts {
            cand.push(p);
        }
        cand.push(&c);
        match std::fs::symlink_metadata(&cand) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return Err("too many levels of symbolic links".into());
                }
                let target = std::fs::read_link(&cand).map_err(|e| e.to_string())?;
                let t = target.to_string_lossy().into_owned();
                if t.starts_with('/') {
                    parts.clear();
                }
                todo.extend(t.split('/').rev().map(str::to_string));
            }
            Ok(_) => parts.push(c),
            Err(e) => return Err(format!("{}: {e}", cand.display())),
        }
    }
    let mut out = root.to_path_buf();
    for p in parts {
        out.push(p);
    }
    Ok(out)
}

/// Checks that `new_root` can be switched to: an executable `init` and the API mount
/// points. Nothing is changed.
pub fn check_new_root(new_root: &Path, init: &str) -> Result<(), SwitchError> {
    let real = resolve_in_root(new_root, init).map_err(|why| SwitchError::NoInit {
        init: init.to_string(),
        why,
    })?;
    if !sys::is_executable(&real) {
        return Err(SwitchError::NoInit {
            init: init.to_string(),
            why: format!("{} is not an executable file", real.display()),
        });
    }
    for d in ["dev", "proc", "sys", "run"] {
        if !new_root.join(d).is_dir() {
            return Err(SwitchError::NoMountPoint(PathBuf::from("/").join(d)));
        }
    }
    Ok(())
}

/// Switches to `new_root` and executes `init` there. The order is the safe one: move
/// `/dev` `/proc` `/sys` `/run` into the new root, `MS_MOVE` the new root onto `/`,
/// `chroot`, delete the old initramfs contents without crossing mounts, then `execv`.
/// Returns only on failure.
pub fn switch_root(new_root: &Path, init: &str, args: &[String]) -> SwitchError {
    if let Err(e) = check_new_root(new_root, init) {
        return e;
    }
    // Keep a handle on the old root to empty it once we have left it.
    let old_root = match sys::open_dir(Path::new("/")) {
        Ok(fd) => fd,
        Err(e) => return e.into(),
    };
    let old_is_ram = matches!(
        sys::fs_magic(Path::new("/")),
        Ok(m) if m == sys::RAMFS_MAGIC || m == sys::TMPFS_MAGIC
    );
    for d in ["/dev", "/proc", "/sys", "/run"] {
        let to = new_root.join(&d[1..]);
        if let Err(e) = sys::move_mount(Path::new(d), &to) {
            return e.into();
        }
    }
    if let Err(e) = sys::chdir(new_root) {
        return e.into();
    }
    if let Err(e) = sys::move_mount(new_root, Path::new("/")) {
        return e.into();
    }
    if let Err(e) = sys::chroot(Path::new(".")) {
        return e.into();
    }
    if let Err(e) = sys::chdir(Path::new("/")) {
        return e.into();
    }
    if old_is_ram {
        use std::os::fd::AsFd;
        let (removed, failed) = sys::remove_tree_same_dev(old_root.as_fd());
        log::info!("switch_root: freed the initramfs ({removed} entries removed, {failed} failed)");
    } else {
        log::warn!("switch_root: the old root is not a ramfs/tmpfs; its contents are left alone");
    }
    drop(old_root);
    log::info!("switch_root: executing {init}");
    sys::execv(init, args).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_symlinks_inside_the_root() {
        let root = std::env::temp_dir().join(format!("vld-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["sbin", "lib/systemd", "dev", "proc", "sys", "run", "usr"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("lib/systemd/systemd"), b"#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("/lib/systemd/systemd", root.join("sbin/init")).unwrap();
        std::os::unix::fs::symlink("../lib", root.join("usr/lib")).unwrap();
        assert_eq!(
            resolve_in_root(&root, "/sbin/init").unwrap(),
            root.join("lib/systemd/systemd")
        );
        assert_eq!(
            resolve_in_root(&root, "/usr/lib/systemd/systemd").unwrap(),
            root.join("lib/systemd/systemd")
        );
        // Not executable yet.
        let e = check_new_root(&root, "/sbin/init").unwrap_err();
        assert!(e.to_string().contains("not an executable file"), "{e}");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            root.join("lib/systemd/systemd"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        check_new_root(&root, "/sbin/init").unwrap();
        let e = check_new_root(&root, "/nope").unwrap_err();
        assert!(e.to_string().contains("no executable init /nope"), "{e}");
        std::fs::remove_dir(root.join("run")).unwrap();
        let e = check_new_root(&root, "/sbin/init").unwrap_err();
        assert!(e.to_string().contains("/run"), "{e}");
        // A symlink loop ends.
        std::os::unix::fs::symlink("/loop", root.join("loop")).unwrap();
        assert!(resolve_in_root(&root, "/loop")
            .unwrap_err()
            .contains("too many"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}

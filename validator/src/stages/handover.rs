//! Stage `handover`: the new root must have an executable init and the API mount points;
//! then `switch_root` in the safe order, freeing the initramfs, and `execv` of the real
//! init. Also how a stopped boot ends ([`finish`]): sync, then halt, power off or reboot
//! as the command line says, and never return (PID 1 must not exit).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::cmdline::Action;
use crate::sys::{self, RebootMode, SysError};

use super::{Classified, Context, Fault};

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

impl Classified for SwitchError {
    fn fault(&self) -> Fault {
        Fault::Image
    }
}

/// The stage: checks that the new root can be switched to (nothing is changed yet).
pub fn run(ctx: &mut Context) -> Result<String, SwitchError> {
    check_new_root(&ctx.roots.new_root, &ctx.args.init)?;
    Ok(format!(
        "switch_root to {} and exec {}",
        ctx.roots.new_root.display(),
        ctx.args.init
    ))
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

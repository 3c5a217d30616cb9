//! Stage `handover`: the new root must have an executable init and the API mount points;
//! then `switch_root` in the safe order, freeing the initramfs, and `execv` of the real
//! init. The init is found inside the new root as it will see itself
//! ([`crate::runtime::rootpath`]); how a stopped boot ends is
//! [`crate::runtime::power::finish`].

use std::path::{Path, PathBuf};

use crate::runtime::rootpath::resolve_in_root;
use crate::sys::{self, SysError};

use super::{Classified, Context, Fault};

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

/// Checks that `new_root` can be switched to: an executable `init` and the API mount
/// points. Nothing is changed.
pub fn check_new_root(new_root: &Path, init: &str) -> Result<(), SwitchError> {
    let real = resolve_in_root(new_root, init).map_err(|e| SwitchError::NoInit {
        init: init.to_string(),
        why: e.to_string(),
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
            .to_string()
            .contains("too many"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}

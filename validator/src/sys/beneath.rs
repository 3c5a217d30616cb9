//! Opening a file beneath a directory without following any symlink (`openat(2)` one
//! component at a time with `O_NOFOLLOW`): what the slot stage and `validator slot` use
//! for every file on the ESP, so a symlink there (`validator/state.0`, the grubenv, a
//! directory on the way) can never make a write land outside it.
//!
//! Contract: [`open_beneath`] resolves `rel` below the directory `root` (which itself may
//! be reached through symlinks: it is the caller's), refusing `..`, a symlink as any
//! component (`ELOOP` from the kernel, said in words), and opens the last component without
//! blocking (a FIFO never hangs it). The caller judges the file type of what was opened.
//! Equivalent to `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` but works on every
//! kernel.
//!
//! [`read_limited`] and [`write_in_place`] are `crate::util::fs`'s reads and in-place
//! writes through such an open, for regular files only.
//!
//! Current limits: it opens, never creates.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::SysError;
use crate::util::fs::{kind_of, read_open_limited, write_in_place_file, InputError};

fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful `open`/`openat`: a valid descriptor
    // that nothing else owns or closes.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Opens `root/rel` for reading (or reading and writing when `write`), following no
/// symlink below `root` and never leaving it.
pub fn open_beneath(root: &Path, rel: &Path, write: bool) -> Result<File, SysError> {
    let err = |errno| SysError {
        call: "openat",
        what: if errno == Errno::ELOOP {
            format!(
                "{}: the path holds a symbolic link, and files here are never followed through one",
                root.join(rel).display()
            )
        } else {
            format!("{}, following no symlink", root.join(rel).display())
        },
        errno,
    };
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = own(nix::fcntl::open(root, dir_flags, Mode::empty()).map_err(err)?);
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => names.push(n),
            // `..` could leave `root`; a prefix does not occur on Unix.
            Component::ParentDir | Component::Prefix(_) => return Err(err(Errno::EXDEV)),
        }
    }
    let (last, parents) = names.split_last().ok_or(err(Errno::EISDIR))?;
    for n in parents {
        let fd = nix::fcntl::openat(
            Some(dir.as_raw_fd()),
            *n,
            dir_flags | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        // A link to a directory fails `O_DIRECTORY | O_NOFOLLOW` with ENOTDIR: told apart
        // from a file on the way by a look at the name itself.
        .map_err(|e| match e {
            Errno::ENOTDIR if is_link(&dir, n) => err(Errno::ELOOP),
            e => err(e),
        })?;
        dir = own(fd);
    }
    let mode = if write {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    };
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        *last,
        mode | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(err)?;
    Ok(File::from(own(fd)))
}

/// Whether `name` in the directory `dir` is a symbolic link (not followed).
fn is_link(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    nix::sys::stat::fstatat(
        Some(dir.as_raw_fd()),
        name,
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .is_ok_and(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK)
}

/// Renames `from` to `to` (names, no `/`) in the directory `root/rel_dir`, reached
/// following no symlink (`renameat(2)` itself never follows one).
pub fn rename_beneath(root: &Path, rel_dir: &Path, from: &str, to: &str) -> Result<(), SysError> {
    let d = open_beneath(root, rel_dir, false)?;
    if !d.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(SysError {
            call: "openat",
            what: format!("{} (not a directory)", root.join(rel_dir).display()),
            errno: Errno::ENOTDIR,
        });
    }
    let bad = |n: &str| n.is_empty() || n.contains('/') || n == "." || n == "..";
    if bad(from) || bad(to) {
        return Err(SysError {
            call: "renameat",
            what: format!("{from} -> {to} (not a file name)"),
            errno: Errno::EINVAL,
        });
    }
    let fd = Some(d.as_raw_fd());
    nix::fcntl::renameat(fd, from, fd, to).map_err(|errno| SysError {
        call: "renameat",
        what: format!("{} -> {to}", root.join(rel_dir).join(from).display()),
        errno,
    })?;
    // The rename is made; a directory that cannot be synced is logged, as before.
    if let Err(e) = d.sync_all() {
        log::warn!("{}: {e}", root.join(rel_dir).display());
    }
    Ok(())
}

fn io(e: SysError) -> std::io::Error {
    std::io::Error::new(std::io::Error::from(e.errno).kind(), e.to_string())
}

/// Reads the regular file `root/rel` (at most `limit` bytes), following no symlink.
pub fn read_limited(root: &Path, rel: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let path = root.join(rel);
    let f = open_beneath(root, rel, false).map_err(|e| InputError::Io {
        path: path.clone(),
        source: io(e),
    })?;
    check_file(&f, &path).map_err(|source| InputError::Io {
        path: path.clone(),
        source,
    })?;
    read_open_limited(&f, &path, limit)
}

/// Rewrites the regular file `root/rel` in place ([`write_in_place_file`]), following no
/// symlink.
pub fn write_in_place(root: &Path, rel: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let path = root.join(rel);
    let f = open_beneath(root, rel, true).map_err(io)?;
    check_file(&f, &path)?;
    write_in_place_file(&f, &path, bytes)
}

/// Whether what was opened is a regular file.
fn check_file(f: &File, path: &Path) -> std::io::Result<()> {
    match kind_of(f.metadata()?.file_type()) {
        None => Ok(()),
        Some(kind) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: is a {kind}, not a regular file", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_and_dotdot_are_refused() {
        let d = std::env::temp_dir().join(format!("vld-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let esp = d.join("esp");
        std::fs::create_dir_all(esp.join("sub")).unwrap();
        std::fs::write(d.join("outside"), b"x").unwrap();
        std::fs::write(esp.join("sub/f"), b"y").unwrap();
        std::os::unix::fs::symlink(d.join("outside"), esp.join("link")).unwrap();
        std::os::unix::fs::symlink(esp.join("sub"), esp.join("dirlink")).unwrap();
        assert!(open_beneath(&esp, Path::new("/sub/f"), true).is_ok());
        // A link on the way says so in words (not only the kernel's ELOOP).
        for bad in ["link", "dirlink/f"] {
            let e = open_beneath(&esp, Path::new(bad), true).unwrap_err();
            assert!(
                e.to_string().contains(
                    "the path holds a symbolic link, and files here are never followed through one"
                ),
                "{bad}: {e}"
            );
        }
        for bad in ["sub/../../outside", ""] {
            let e = open_beneath(&esp, Path::new(bad), true).unwrap_err();
            assert!(e.to_string().contains("following no symlink"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! Layer 4: the one place where the validator makes system calls and ioctls that std
//! does not wrap: mounts, module loading, `switch_root`'s pieces, device nodes, keys,
//! clocks, [`dm`] (device-mapper), [`kmsg`] (the kernel log), [`tpm`] (the TPM device
//! and its client) and [`uevent`] (the kernel's device events).
//!
//! Every wrapper names its system call (see its man page) and returns a [`SysError`] that
//! carries the call, the object it acted on and the errno name, so reports can say
//! `finit_module(virtio_blk): ENOENT` rather than "error".
//!
//! Safe wrappers (nix, std) are used wherever they exist: `finit_module` with the
//! compressed-file flag, directory descriptors owned by `OwnedFd` or nix's `Dir`. The
//! `unsafe` calls left, each with its `SAFETY:` argument: the device-mapper ioctl in
//! [`dm`] (a variable-size buffer no wrapper describes), taking ownership of the
//! descriptor nix's `openat` returns in [`beneath`] (the no-follow open of ESP files),
//! the read-only module maps of [`mmap`], and here `add_key(2)` and `kexec_file_load(2)`
//! (raw `syscall`s: neither nix nor std wraps them). The validator's only other `unsafe`
//! code is the calls into AWS-LC in `trust::keys`.

pub mod beneath;
pub mod dm;
pub mod kmsg;
pub mod mmap;
pub mod tpm;
pub mod uevent;

use std::ffi::CString;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::{Mode, SFlag};

/// The EFI variable filesystem, and its module's name (Debian 6.1 builds it as one, which
/// mkinitramfs packs and the modules stage loads first on a UEFI boot).
pub const EFIVARFS: &str = "efivarfs";

/// Mounts efivarfs on `sys_root`'s `firmware/efi/efivars` when that directory exists
/// (booted through UEFI; already mounted is fine, and so is a kernel that does not have
/// the filesystem yet, before the modules stage loaded its module; other failures are
/// logged, and the preflight then reports Secure Boot unknown). `nosuid,nodev,noexec`, as systemd mounts
/// it, so the root's own tools find it as they expect after `switch_root`.
pub fn mount_efivarfs(sys_root: &Path) {
    let d = sys_root.join("firmware/efi/efivars");
    if d.is_dir() {
        if let Err(e) = mount(
            "efivarfs",
            &d,
            Some("efivarfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        ) {
            if e.errno != Errno::EBUSY && e.errno != Errno::ENODEV {
                log::warn!("{e}");
            }
        }
    }
}

/// A failed system call: which, on what, and the errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}({what}): {errno}")]
pub struct SysError {
    pub call: &'static str,
    pub what: String,
    pub errno: Errno,
}

impl SysError {
    pub fn new(call: &'static str, what: impl Into<String>, errno: Errno) -> SysError {
        SysError {
            call,
            what: what.into(),
            errno,
        }
    }

    /// The symbolic errno name, e.g. `ENOENT`.
    pub fn errno_name(&self) -> String {
        errno_name(self.errno)
    }
}

impl From<SysError> for std::io::Error {
    fn from(e: SysError) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.errno as i32)
    }
}

/// The symbolic name of an errno (`ENOENT`), or `E<number>` when unknown.
pub fn errno_name(e: Errno) -> String {
    let s = format!("{e:?}");
    if s.starts_with('E') {
        s
    } else {
        format!("E{}", e as i32)
    }
}

/// The symbolic name of a raw errno value from `std::io::Error`.
pub fn io_errno_name(e: &std::io::Error) -> Option<String> {
    e.raw_os_error().map(|n| errno_name(Errno::from_raw(n)))
}

fn disp(p: &Path) -> String {
    p.display().to_string()
}

/// `mount(2)`.
pub fn mount(
    source: &str,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), SysError> {
    nix::mount::mount(Some(source), target, fstype, flags, data)
        .map_err(|e| SysError::new("mount", format!("{source} on {}", disp(target)), e))
}

/// `mount(2)` with `MS_MOVE`.
pub fn move_mount(from: &Path, to: &Path) -> Result<(), SysError> {
    nix::mount::mount(Some(from), to, None::<&str>, MsFlags::MS_MOVE, None::<&str>).map_err(|e| {
        SysError::new(
            "mount",
            format!("MS_MOVE {} to {}", disp(from), disp(to)),
            e,
        )
    })
}

/// `finit_module(2)`: loads a module from an open file.
pub fn finit_module(
    file: &File,
    params: &str,
    compressed: bool,
    name: &str,
) -> Result<(), SysError> {
    let params =
        CString::new(params).map_err(|_| SysError::new("finit_module", name, Errno::EINVAL))?;
    // MODULE_INIT_COMPRESSED_FILE from <linux/module.h>; nix 0.29 does not name it, its
    // flag type carries it as a raw bit.
    const MODULE_INIT_COMPRESSED_FILE: nix::libc::c_uint = 4;
    let flags = if compressed {
        nix::kmod::ModuleInitFlags::from_bits_retain(MODULE_INIT_COMPRESSED_FILE)
    } else {
        nix::kmod::ModuleInitFlags::empty()
    };
    nix::kmod::finit_module(file, &params, flags)
        .map_err(|e| SysError::new("finit_module", name, e))
}

/// `init_module(2)`: loads a module from memory (used after in-process decompression).
pub fn init_module(image: &[u8], params: &str, name: &str) -> Result<(), SysError> {
    let params =
        CString::new(params).map_err(|_| SysError::new("init_module", name, Errno::EINVAL))?;
    nix::kmod::init_module(image, &params).map_err(|e| SysError::new("init_module", name, e))
}

/// `sync(2)`.
pub fn sync() {
    nix::unistd::sync();
}

/// What `reboot(2)` should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootMode {
    Halt,
    PowerOff,
    Restart,
}

/// `reboot(2)`: only returns on failure.
pub fn reboot(mode: RebootMode) -> SysError {
    let how = match mode {
        RebootMode::Halt => nix::sys::reboot::RebootMode::RB_HALT_SYSTEM,
        RebootMode::PowerOff => nix::sys::reboot::RebootMode::RB_POWER_OFF,
        RebootMode::Restart => nix::sys::reboot::RebootMode::RB_AUTOBOOT,
    };
    match nix::sys::reboot::reboot(how) {
        Err(e) => SysError::new("reboot", format!("{mode:?}"), e),
        Ok(never) => match never {},
    }
}

/// `chroot(2)`.
pub fn chroot(p: &Path) -> Result<(), SysError> {
    nix::unistd::chroot(p).map_err(|e| SysError::new("chroot", disp(p), e))
}

/// `chdir(2)`.
pub fn chdir(p: &Path) -> Result<(), SysError> {
    nix::unistd::chdir(p).map_err(|e| SysError::new("chdir", disp(p), e))
}

/// Waits until what was written to standard output has left the terminal (`tcdrain(3)`),
/// so that a kernel message printed next does not land inside a line still being sent
/// (the kernel writes its messages to the console directly, past the terminal's queue).
/// Standard output that is not a terminal (a pipe, a file) has nothing to wait for.
pub fn drain_stdout() -> Result<(), SysError> {
    match nix::sys::termios::tcdrain(std::io::stdout()) {
        Ok(()) | Err(Errno::ENOTTY) | Err(Errno::EINVAL) => Ok(()),
        Err(e) => Err(SysError::new("tcdrain", "standard output", e)),
    }
}

/// `getpid(2)`.
pub fn getpid() -> i32 {
    nix::unistd::getpid().as_raw()
}

/// `waitpid(-1, WNOHANG)` until no zombie is left; returns how many were reaped.
pub fn reap_zombies() -> usize {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let mut n = 0;
    while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if st == WaitStatus::StillAlive {
            break;
        }
        n += 1;
    }
    n
}

/// `uname(2)`: the running kernel's release.
pub fn kernel_release() -> Result<String, SysError> {
    let u = nix::sys::utsname::uname().map_err(|e| SysError::new("uname", "", e))?;
    Ok(u.release().to_string_lossy().into_owned())
}

/// `mknod(2)` of a block device node.
pub fn mknod_block(p: &Path, major: u64, minor: u64) -> Result<(), SysError> {
    nix::sys::stat::mknod(
        p,
        SFlag::S_IFBLK,
        Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(major, minor),
    )
    .map_err(|e| SysError::new("mknod", disp(p), e))
}

/// Size in bytes of a file or block device (`lseek(2)` to the end).
pub fn file_size(f: &File) -> Result<u64, SysError> {
    let mut f = f;
    f.seek(SeekFrom::End(0)).map_err(|e| {
        SysError::new(
            "lseek",
            "SEEK_END",
            Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        )
    })
}

/// `statfs(2)` magic of the filesystem holding `p`.
pub fn fs_magic(p: &Path) -> Result<i64, SysError> {
    let s = nix::sys::statfs::statfs(p).map_err(|e| SysError::new("statfs", disp(p), e))?;
    Ok(s.filesystem_type().0 as i64)
}

pub const RAMFS_MAGIC: i64 = 0x8584_58f6;
pub const TMPFS_MAGIC: i64 = 0x0102_1994;

/// `open(2)` of a directory (`O_DIRECTORY`, read-only, close-on-exec), for removing a
/// tree relative to it later.
pub fn open_dir(p: &Path) -> Result<OwnedFd, SysError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY)
        .open(p)
        .map(OwnedFd::from)
        .map_err(|e| {
            SysError::new(
                "open",
                disp(p),
                Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO)),
            )
        })
}

/// Removes everything below the directory `dir` that lives on the same filesystem
/// (device) as `dir` itself, never crossing into mounts, like `switch_root` does with the
/// old initramfs. Returns how many entries were removed; failures are counted, not fatal.
pub fn remove_tree_same_dev(dir: BorrowedFd<'_>) -> (usize, usize) {
    let dev = match nix::sys::stat::fstat(dir.as_raw_fd()) {
        Ok(st) => st.st_dev,
        Err(_) => return (0, 1),
    };
    let mut removed = 0;
    let mut failed = 0;
    remove_children(dir.as_raw_fd(), dev, &mut removed, &mut failed, 0);
    (removed, failed)
}

/// Removes the entries of the open directory `dir` (kept open by the caller).
fn remove_children(
    dir: std::os::fd::RawFd,
    dev: u64,
    removed: &mut usize,
    failed: &mut usize,
    depth: u32,
) {
    if depth > 64 {
        *failed += 1;
        return;
    }
    let Ok(dupfd) = nix::unistd::dup(dir) else {
        *failed += 1;
        return;
    };
    let Ok(mut d) = nix::dir::Dir::from_fd(dupfd) else {
        *failed += 1;
        return;
    };
    // A listing that fails ends there, counted: a directory whose reads keep failing
    // must not keep the listing going (each `readdir` would try again).
    let mut names: Vec<CString> = Vec::new();
    for e in d.iter() {
        match e {
            Ok(e) if e.file_name().to_bytes() != b"." && e.file_name().to_bytes() != b".." => {
                names.push(e.file_name().to_owned());
            }
            Ok(_) => {}
            Err(_) => {
                *failed += 1;
                break;
            }
        }
    }
    for name in names {
        let st =
            match nix::sys::stat::fstatat(Some(dir), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            {
                Ok(st) => st,
                Err(_) => {
                    *failed += 1;
                    continue;
                }
            };
        if st.st_dev != dev {
            continue; // a mount point: never cross it
        }
        let is_dir = (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFDIR;
        if is_dir {
            // `Dir` owns the descriptor `openat` returns and closes it when dropped.
            match nix::dir::Dir::openat(
                Some(dir),
                name.as_c_str(),
                OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(sub) => {
                    remove_children(sub.as_raw_fd(), dev, removed, failed, depth + 1);
                }
                Err(_) => {
                    *failed += 1;
                    continue;
                }
            }
        }
        let flag = if is_dir {
            nix::unistd::UnlinkatFlags::RemoveDir
        } else {
            nix::unistd::UnlinkatFlags::NoRemoveDir
        };
        match nix::unistd::unlinkat(Some(dir), name.as_c_str(), flag) {
            Ok(()) => *removed += 1,
            Err(_) => *failed += 1,
        }
    }
}

/// `execv(2)` of the real init: only returns on failure.
pub fn execv(path: &str, args: &[String]) -> SysError {
    let to_c = |s: &str| CString::new(s).unwrap_or_default();
    let cpath = to_c(path);
    let mut argv = vec![cpath.clone()];
    argv.extend(args.iter().map(|a| to_c(a)));
    match nix::unistd::execv(&cpath, &argv) {
        Err(e) => SysError::new("execv", path, e),
        Ok(never) => match never {},
    }
}

/// Whether `p` exists and is a regular file with an execute bit (`faccessat(2)` would
/// follow the caller's credentials; PID 1 is root, so the mode bits decide).
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `add_key(2)`: a `user` key in the process keyring (for dm-verity's
/// `root_hash_sig_key_desc`). Returns the key serial.
pub fn add_user_key(desc: &str, payload: &[u8]) -> Result<i64, SysError> {
    const KEY_SPEC_PROCESS_KEYRING: i32 = -2;
    let ty = CString::new("user").map_err(|_| SysError::new("add_key", desc, Errno::EINVAL))?;
    let d = CString::new(desc).map_err(|_| SysError::new("add_key", desc, Errno::EINVAL))?;
    // SAFETY: add_key reads two NUL-terminated strings and `payload.len()` bytes at
    // `payload`, all valid for the duration of the call; nothing is retained.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_add_key,
            ty.as_ptr(),
            d.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_PROCESS_KEYRING,
        )
    };
    if rc < 0 {
        Err(SysError::new("add_key", desc, Errno::last()))
    } else {
        Ok(rc)
    }
}

/// `clock_gettime(CLOCK_BOOTTIME)` in microseconds: time since the kernel started, the
/// clock the report's timings use. `None` if the clock cannot be read.
pub fn boottime_us() -> Option<u64> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .ok()
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0) / 1000
        })
}

/// Reads the GPT of a disk image or block device (never blocks on a FIFO).
pub fn read_gpt(
    path: &Path,
    sector_size: u64,
) -> Result<crate::formats::gpt::Table, crate::formats::gpt::GptError> {
    use crate::formats::gpt::GptError;
    let f = crate::util::fs::open_input(path, true).map_err(|e| GptError::Invalid {
        disk: path.to_path_buf(),
        what: match e {
            crate::util::fs::InputError::Io { source, .. } => source.to_string(),
            other => other.to_string(),
        },
    })?;
    let size = file_size(&f).map_err(|e| GptError::Io {
        disk: path.to_path_buf(),
        source: e.into(),
    })?;
    crate::formats::gpt::read_table(&f, size, sector_size, path)
}

/// `pread(2)` of up to `len` bytes at `offset` of a block device or image file (fewer at
/// its end). Refuses FIFOs and directories before opening.
pub fn read_device_at(path: &str, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = crate::util::fs::open_input(Path::new(path), true)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut b = vec![0u8; len];
    let mut n = 0;
    while n < len {
        let off = offset.checked_add(n as u64).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "offset overflows")
        })?;
        let got = match b.get_mut(n..) {
            Some(rest) => f.read_at(rest, off)?,
            None => 0,
        };
        if got == 0 {
            break;
        }
        n += got;
    }
    b.truncate(n);
    Ok(b)
}

/// Size in bytes of a block device or image file.
pub fn device_size(path: &str) -> std::io::Result<u64> {
    let f = crate::util::fs::open_input(Path::new(path), true)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(file_size(&f)?)
}

/// `memfd_create(2)` holding `bytes`, rewound: an anonymous file to hand to the kernel
/// (an initramfs for `kexec_file_load`).
pub fn memfd_with(name: &str, bytes: &[u8]) -> Result<File, SysError> {
    use std::io::Write;
    let cname =
        CString::new(name).map_err(|_| SysError::new("memfd_create", name, Errno::EINVAL))?;
    let fd = nix::sys::memfd::memfd_create(&cname, nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .map_err(|e| SysError::new("memfd_create", name, e))?;
    let mut f = File::from(fd);
    f.write_all(bytes).map_err(|e| {
        SysError::new(
            "write",
            name,
            Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        )
    })?;
    f.seek(SeekFrom::Start(0)).map_err(|e| {
        SysError::new(
            "lseek",
            name,
            Errno::from_raw(e.raw_os_error().unwrap_or(0)),
        )
    })?;
    Ok(f)
}

/// `kexec_file_load(2)`: stages `kernel` with `initrd` and `cmdline` for a later
/// `reboot(LINUX_REBOOT_CMD_KEXEC)` ([`kexec_reboot`]). Under lockdown the kernel
/// accepts only a kernel image signed by a key it trusts (`KEXEC_SIG`).
pub fn kexec_file_load(kernel: &File, initrd: &File, cmdline: &str) -> Result<(), SysError> {
    let c = CString::new(cmdline)
        .map_err(|_| SysError::new("kexec_file_load", "command line", Errno::EINVAL))?;
    let len = c.as_bytes_with_nul().len();
    // SAFETY: kexec_file_load reads two valid open descriptors and `len` bytes of the
    // NUL-terminated command line, which outlives the call; nothing is retained.
    let rc = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_kexec_file_load,
            kernel.as_raw_fd(),
            initrd.as_raw_fd(),
            len,
            c.as_ptr(),
            0 as nix::libc::c_ulong,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(SysError::new("kexec_file_load", cmdline, Errno::last()))
    }
}

/// `reboot(LINUX_REBOOT_CMD_KEXEC)`: jumps into the kernel staged by
/// [`kexec_file_load`]. Only returns on failure.
pub fn kexec_reboot() -> SysError {
    match nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_KEXEC) {
        Err(e) => SysError::new("reboot", "LINUX_REBOOT_CMD_KEXEC", e),
        Ok(never) => match never {},
    }
}

/// `umount2(2)`.
pub fn umount(target: &Path) -> Result<(), SysError> {
    nix::mount::umount2(target, nix::mount::MntFlags::empty())
        .map_err(|e| SysError::new("umount2", disp(target), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// `open_dir` and `remove_tree_same_dev` (the handover's cleanup of the old root) on
    /// a scratch tree: everything below the directory goes, the directory stays.
    #[test]
    fn removes_a_tree_below_an_open_directory() {
        let d = std::env::temp_dir().join(format!("vld-sys-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a/b/c")).unwrap();
        std::fs::write(d.join("a/b/c/f"), b"x").unwrap();
        std::fs::write(d.join("top"), b"y").unwrap();
        std::os::unix::fs::symlink("a", d.join("link")).unwrap();
        let fd = open_dir(&d).unwrap();
        let (removed, failed) = remove_tree_same_dev(fd.as_fd());
        assert_eq!((removed, failed), (6, 0));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        assert!(open_dir(&d.join("missing")).is_err());
        let f = d.join("file");
        std::fs::write(&f, b"z").unwrap();
        assert_eq!(
            open_dir(&f).unwrap_err().to_string(),
            format!("open({}): ENOTDIR: Not a directory", f.display())
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! Device-mapper through its ioctls on `/dev/mapper/control` (`<linux/dm-ioctl.h>`,
//! interface version 4): create a device, load a read-only table, resume it, read its
//! status and table, remove it. No libdevmapper, no udev.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;

use nix::errno::Errno;

use super::SysError;
use crate::util::le::{put, u32_ne, u64_ne};

/// `sizeof(struct dm_ioctl)`.
const HEADER: usize = 312;
/// [`HEADER`] as the header's own u32 fields (and the ioctl number) carry it.
const HEADER_U32: u32 = 312;
const _: () = assert!(HEADER_U32 as usize == HEADER);
/// `sizeof(struct dm_target_spec)`.
const SPEC: usize = 40;
const DM_NAME_LEN: usize = 128;
const DM_UUID_LEN: usize = 129;

pub const DM_READONLY_FLAG: u32 = 1 << 0;
pub const DM_STATUS_TABLE_FLAG: u32 = 1 << 4;
pub const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;

/// `_IOWR(0xfd, nr, struct dm_ioctl)`.
const fn iowr(nr: u32) -> u32 {
    (3 << 30) | (HEADER_U32 << 16) | (0xfd << 8) | nr
}
const DM_DEV_CREATE: u32 = iowr(3);
const DM_DEV_REMOVE: u32 = iowr(4);
const DM_DEV_SUSPEND: u32 = iowr(6);
const DM_TABLE_LOAD: u32 = iowr(9);
const DM_TABLE_STATUS: u32 = iowr(12);

/// One target line of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub start: u64,
    pub length: u64,
    pub kind: String,
    pub params: String,
}

/// An open `/dev/mapper/control`.
#[derive(Debug)]
pub struct Control {
    file: File,
}

fn put_str(buf: &mut [u8], at: usize, max: usize, s: &str) -> Result<(), Errno> {
    let b = s.as_bytes();
    if b.len() >= max || b.contains(&0) {
        return Err(Errno::EINVAL);
    }
    put(buf, at, b).ok_or(Errno::EINVAL)
}

/// Writes a native-endian field of a buffer this module sized itself.
fn put_field(buf: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), Errno> {
    put(buf, at, bytes).ok_or(Errno::EINVAL)
}

/// A request buffer: the header (version 4.0.0, name) and room for data.
fn request(name: &str, data_len: usize) -> Result<Vec<u8>, Errno> {
    let size = (HEADER + data_len + 7) & !7;
    let mut b = vec![0u8; size.max(16384)];
    put_field(&mut b, 0, &4u32.to_ne_bytes())?;
    let len = u32::try_from(b.len()).map_err(|_| Errno::E2BIG)?;
    put_field(&mut b, 12, &len.to_ne_bytes())?; // data_size
    put_field(&mut b, 16, &HEADER_U32.to_ne_bytes())?; // data_start
    put_str(&mut b, 48, DM_NAME_LEN, name)?;
    Ok(b)
}

impl Control {
    /// Opens the control node under `dev_root` (creating it from sysfs if devtmpfs has not).
    pub fn open(dev_root: &Path, sys_root: &Path) -> Result<Control, SysError> {
        let path = dev_root.join("mapper/control");
        if !path.exists() {
            // A `MAJ:MIN` value; anything unreadable or odd falls back to 10:236.
            let mm = crate::util::fs::read_text_limited(
                &sys_root.join("class/misc/device-mapper/dev"),
                crate::util::fs::SYSFS_VALUE_MAX,
            )
            .unwrap_or_default();
            let (maj, min) = mm
                .trim()
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .unwrap_or((10u64, 236u64));
            let _ = std::fs::create_dir_all(dev_root.join("mapper"));
            nix::sys::stat::mknod(
                &path,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(maj, min),
            )
            .map_err(|e| SysError::new("mknod", path.display().to_string(), e))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| {
                SysError::new(
                    "open",
                    path.display().to_string(),
                    Errno::from_raw(e.raw_os_error().unwrap_or(0)),
                )
            })?;
        Ok(Control { file })
    }

    fn ioctl(
        &self,
        req: u32,
        what: &'static str,
        name: &str,
        buf: &mut [u8],
    ) -> Result<(), SysError> {
        // SAFETY: `buf` is a writable buffer of at least HEADER bytes whose header says its
        // own size (data_size), so the kernel reads and writes only inside it; the fd is
        // the open control node.
        let rc = unsafe {
            nix::libc::ioctl(self.file.as_raw_fd(), ioctl_request(req), buf.as_mut_ptr())
        };
        if rc < 0 {
            return Err(SysError::new(what, name.to_string(), Errno::last()));
        }
        Ok(())
    }

    /// `DM_DEV_CREATE`: returns the new device's (major, minor).
    pub fn create(&self, name: &str, uuid: &str) -> Result<(u64, u64), SysError> {
        let mut b = request(name, 0).map_err(|e| SysError::new("DM_DEV_CREATE", name, e))?;
        put_str(&mut b, 48 + DM_NAME_LEN, DM_UUID_LEN, uuid)
            .map_err(|e| SysError::new("DM_DEV_CREATE", name, e))?;
        self.ioctl(DM_DEV_CREATE, "DM_DEV_CREATE", name, &mut b)?;
        let dev =
            u64_ne(&b, 40).ok_or_else(|| SysError::new("DM_DEV_CREATE", name, Errno::EPROTO))?;
        Ok((nix::sys::stat::major(dev), nix::sys::stat::minor(dev)))
    }

    /// `DM_TABLE_LOAD` of `targets` into the inactive slot.
    pub fn load(&self, name: &str, targets: &[Target], read_only: bool) -> Result<(), SysError> {
        let err = |e| SysError::new("DM_TABLE_LOAD", name, e);
        let mut data = Vec::new();
        for t in targets {
            let mut spec = vec![0u8; SPEC];
            put_field(&mut spec, 0, &t.start.to_ne_bytes()).map_err(err)?;
            put_field(&mut spec, 8, &t.length.to_ne_bytes()).map_err(err)?;
            put_str(&mut spec, 24, 16, &t.kind).map_err(err)?;
            let mut params = t.params.as_bytes().to_vec();
            params.push(0);
            while !(SPEC + params.len()).is_multiple_of(8) {
                params.push(0);
            }
            let next = u32::try_from(SPEC + params.len()).map_err(|_| err(Errno::E2BIG))?;
            put_field(&mut spec, 20, &next.to_ne_bytes()).map_err(err)?;
            data.extend_from_slice(&spec);
            data.extend_from_slice(&params);
        }
        let mut b = request(name, data.len()).map_err(err)?;
        put_field(&mut b, HEADER, &data).map_err(err)?;
        let count = u32::try_from(targets.len()).map_err(|_| err(Errno::E2BIG))?;
        put_field(&mut b, 20, &count.to_ne_bytes()).map_err(err)?;
        let flags = if read_only { DM_READONLY_FLAG } else { 0 };
        put_field(&mut b, 28, &flags.to_ne_bytes()).map_err(err)?;
        self.ioctl(DM_TABLE_LOAD, "DM_TABLE_LOAD", name, &mut b)
    }

    /// `DM_DEV_SUSPEND` without the suspend flag: resume, making the loaded table live.
    pub fn resume(&self, name: &str) -> Result<(), SysError> {
        let mut b = request(name, 0).map_err(|e| SysError::new("DM_DEV_SUSPEND", name, e))?;
        self.ioctl(DM_DEV_SUSPEND, "DM_DEV_SUSPEND", name, &mut b)
    }

    /// `DM_DEV_REMOVE`.
    pub fn remove(&self, name: &str) -> Result<(), SysError> {
        let mut b = request(name, 0).map_err(|e| SysError::new("DM_DEV_REMOVE", name, e))?;
        self.ioctl(DM_DEV_REMOVE, "DM_DEV_REMOVE", name, &mut b)
    }

    /// `DM_TABLE_STATUS`: each target's status (or, with `table`, its table line).
    pub fn status(&self, name: &str, table: bool) -> Result<Vec<Target>, SysError> {
        let err = |e| SysError::new("DM_TABLE_STATUS", name, e);
        let mut b = request(name, 0).map_err(err)?;
        if table {
            put_field(&mut b, 28, &DM_STATUS_TABLE_FLAG.to_ne_bytes()).map_err(err)?;
        }
        self.ioctl(DM_TABLE_STATUS, "DM_TABLE_STATUS", name, &mut b)?;
        let field = |o| u32_ne(&b, o).map(|v| v as usize).ok_or(err(Errno::EPROTO));
        if field(28)? & DM_BUFFER_FULL_FLAG as usize != 0 {
            return Err(err(Errno::ENOBUFS));
        }
        let count = field(20)?;
        let data_start = field(16)?;
        let mut at = data_start;
        let mut out = Vec::new();
        // A C string at the start of `b` (all of it without a NUL).
        let c_str = |b: &[u8]| {
            String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(b)).into_owned()
        };
        for _ in 0..count {
            let spec = at
                .checked_add(SPEC)
                .and_then(|end| b.get(at..end))
                .ok_or(err(Errno::EPROTO))?;
            let (start, length, next) = match (u64_ne(spec, 0), u64_ne(spec, 8), u32_ne(spec, 20)) {
                (Some(s), Some(l), Some(n)) => (s, l, n as usize),
                _ => return Err(err(Errno::EPROTO)),
            };
            let kind = c_str(spec.get(24..).unwrap_or_default());
            let params = c_str(b.get(at + SPEC..).unwrap_or_default());
            out.push(Target {
                start,
                length,
                kind,
                params,
            });
            // In status replies `next` is the offset from the data start.
            at = data_start.saturating_add(next);
            if next == 0 {
                break;
            }
        }
        Ok(out)
    }
}

/// The request number as libc's `ioctl` takes it: `c_ulong` on glibc.
#[cfg(not(target_env = "musl"))]
fn ioctl_request(req: u32) -> nix::libc::c_ulong {
    nix::libc::c_ulong::from(req)
}

/// The request number as libc's `ioctl` takes it: `c_int` on musl, the same 32 bits.
#[cfg(target_env = "musl")]
fn ioctl_request(req: u32) -> nix::libc::c_int {
    nix::libc::c_int::from_ne_bytes(req.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ioctl_numbers_match_the_kernel_header() {
        // From <linux/dm-ioctl.h> on x86-64: DM_DEV_CREATE = 0xc138fd03, DM_TABLE_STATUS = 0xc138fd0c.
        assert_eq!(super::DM_DEV_CREATE, 0xc138_fd03);
        assert_eq!(super::DM_TABLE_LOAD, 0xc138_fd09);
        assert_eq!(super::DM_TABLE_STATUS, 0xc138_fd0c);
    }
}

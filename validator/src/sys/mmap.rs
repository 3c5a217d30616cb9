//! Read-only memory maps of open files (`mmap(2)`, `madvise(2)`, `munmap(2)`): how PID 1's
//! module loader lets the gate read a module without copying it, so checking costs no copy
//! and PID 1's memory does not grow with the largest module.
//!
//! Contract: [`Mapped::of`] maps the whole of an open regular file (`PROT_READ`,
//! `MAP_PRIVATE`), after checking it against a size limit; [`Mapped::bytes`] is the file's
//! content; [`Mapped::release`] tells the kernel that a part already read is not needed
//! any more (`MADV_DONTNEED` on the whole pages inside it): those pages leave the process's
//! resident set, and reading them again maps them again from the page cache, unchanged;
//! dropping the value unmaps it. An empty file maps to an empty slice (no mapping).
//!
//! A page that cannot be read (a dm-verity block that fails its hash, a disk error) makes
//! the access that faults it in raise `SIGBUS`, which would kill PID 1: [`Mapped::check_readable`]
//! faults every page in first, a part at a time, with `MADV_POPULATE_READ` (Linux 5.14),
//! which fails with an error where an access would raise `SIGBUS`, and releases each
//! part again; the loader refuses a module that does not pass it.
//!
//! Current limits: a file that another process truncates while it is mapped makes reads
//! beyond its new end fault (`SIGBUS`), so only files nobody else writes are mapped: the
//! initramfs (only PID 1 writes it) and the verified root (read-only, under dm-verity);
//! a page that was readable in [`Mapped::check_readable`], then evicted from the page cache
//! and corrupted on the disk before the gate reads it again would still raise `SIGBUS`.
//! The operator's CLI reads files into memory instead.

use std::ffi::c_void;
use std::fs::File;
use std::num::NonZeroUsize;
use std::path::Path;
use std::ptr::NonNull;

use nix::sys::mman::{madvise, mmap, munmap, MapFlags, MmapAdvise, ProtFlags};

use crate::util::fs::InputError;

/// The part [`Mapped::check_readable`] faults in at a time (a multiple of any page size).
pub const CHECK_CHUNK: usize = 8 << 20;

/// A read-only map of one file, unmapped on drop.
#[derive(Debug)]
pub struct Mapped {
    /// `None` for an empty file.
    ptr: Option<NonNull<c_void>>,
    len: usize,
}

// SAFETY: the mapping is read-only and private to this value; shared references only read
// it, which is safe from any thread.
unsafe impl Send for Mapped {}
// SAFETY: as for `Send`.
unsafe impl Sync for Mapped {}

fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

impl Mapped {
    /// Maps the open regular file `f` (named `path` in errors) if it is at most `limit`
    /// bytes.
    pub fn of(f: &File, path: &Path, limit: u64) -> Result<Mapped, InputError> {
        let io = |source| InputError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = f.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        if meta.len() > limit {
            return Err(InputError::TooLarge {
                path: path.to_path_buf(),
                limit,
            });
        }
        let Ok(len) = usize::try_from(meta.len()) else {
            return Err(InputError::TooLarge {
                path: path.to_path_buf(),
                limit,
            });
        };
        let Some(nz) = NonZeroUsize::new(len) else {
            return Ok(Mapped { ptr: None, len: 0 });
        };
        // SAFETY: a new read-only, private mapping of a file we hold open, at an address
        // the kernel picks: it aliases no Rust object. The content may only change if
        // another process writes the file, which the callers rule out (module doc).
        let ptr = unsafe { mmap(None, nz, ProtFlags::PROT_READ, MapFlags::MAP_PRIVATE, f, 0) }
            .map_err(|e| io(std::io::Error::from(e)))?;
        Ok(Mapped {
            ptr: Some(ptr),
            len,
        })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self.ptr {
            // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives (unmapped
            // only in `drop`); the borrow of `self` bounds the slice's lifetime.
            Some(p) => unsafe { std::slice::from_raw_parts(p.as_ptr().cast::<u8>(), self.len) },
            None => &[],
        }
    }

    /// Faults in every page of the map, [`CHECK_CHUNK`] bytes at a time, releasing each
    /// part after it: an error (`EFAULT` from the kernel: an access would raise `SIGBUS`,
    /// e.g. an I/O error under dm-verity) names the first part that cannot be read.
    pub fn check_readable(&self) -> std::io::Result<()> {
        let Some(base) = self.ptr else { return Ok(()) };
        let mut off = 0;
        while off < self.len {
            let n = CHECK_CHUNK.min(self.len - off);
            // SAFETY: `[base + off, base + off + n)` lies inside our own read-only private
            // file mapping (`off` is a multiple of the page-aligned chunk); populating only
            // maps the file's pages, it changes no memory we hand out.
            let rc = unsafe {
                nix::libc::madvise(
                    base.as_ptr().cast::<u8>().add(off).cast(),
                    n,
                    nix::libc::MADV_POPULATE_READ,
                )
            };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                // EINVAL: a kernel older than 5.14; nothing checked, as before maps.
                if e.raw_os_error() == Some(nix::libc::EINVAL) {
                    return Ok(());
                }
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "bytes {off}..{} cannot be read ({e}): an I/O error, or a block that \
                         fails its hash",
                        off + n
                    ),
                ));
            }
            if let Some(part) = self.bytes().get(off..off + n) {
                self.release(part);
            }
            off += n;
        }
        Ok(())
    }

    /// Drops from the resident set the whole pages inside `part` (a slice of
    /// [`Mapped::bytes`]; anything else is ignored). Reading them again is still correct.
    pub fn release(&self, part: &[u8]) {
        let Some(base) = self.ptr else { return };
        let start = base.as_ptr() as usize;
        let (lo, hi) = (part.as_ptr() as usize, part.as_ptr() as usize + part.len());
        if lo < start || hi > start + self.len {
            return;
        }
        let page = page_size();
        let first = lo.div_ceil(page) * page;
        let last = hi / page * page;
        if last <= first {
            return;
        }
        let Some(addr) = NonNull::new(first as *mut c_void) else {
            return;
        };
        // SAFETY: `[first, last)` is whole pages inside our own read-only private file
        // mapping; MADV_DONTNEED only drops them from the page tables (the next read maps
        // the page cache's copy again), so every slice handed out stays valid. A failure
        // only means the pages stay resident.
        let _ = unsafe { madvise(addr, last - first, MmapAdvise::MADV_DONTNEED) };
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(p) = self.ptr.take() {
            // SAFETY: unmaps exactly the mapping made in `of`, once; no slice of it can
            // outlive `self`.
            let _ = unsafe { munmap(p, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_reads_releases_and_refuses() {
        let d = std::env::temp_dir().join(format!("vld-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("m");
        let data: Vec<u8> = (0..3 * 4096 + 17u32)
            .map(|i| u8::try_from(i % 251).unwrap())
            .collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let m = Mapped::of(&f, &p, 1 << 20).unwrap();
        m.check_readable().unwrap();
        assert_eq!(m.bytes(), &data[..]);
        // Released pages read back the same.
        m.release(m.bytes());
        m.release(&m.bytes()[5..9000]);
        m.release(&data[..]); // not ours: ignored
        assert_eq!(m.bytes(), &data[..]);
        assert!(matches!(
            Mapped::of(&f, &p, 100),
            Err(InputError::TooLarge { limit: 100, .. })
        ));
        // Pages the kernel cannot give (here: beyond a file truncated after the map, as a
        // block failing its hash would be) are an error, not a SIGBUS.
        let t = d.join("truncated");
        std::fs::write(&t, &data).unwrap();
        let tf = File::open(&t).unwrap();
        let m = Mapped::of(&tf, &t, 1 << 20).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&t)
            .unwrap()
            .set_len(100)
            .unwrap();
        let err = m.check_readable().unwrap_err().to_string();
        assert!(err.contains("cannot be read"), "{err}");
        drop(m);
        let e = d.join("empty");
        std::fs::write(&e, b"").unwrap();
        let m = Mapped::of(&File::open(&e).unwrap(), &e, 10).unwrap();
        assert!(m.bytes().is_empty());
        m.release(m.bytes());
        assert!(Mapped::of(&File::open(&d).unwrap(), &d, 10).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

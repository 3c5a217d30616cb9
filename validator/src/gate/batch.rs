//! Checking many module files at once (a whole kernel tree on a host, or every module on a
//! live node): files are read and inspected by worker threads, each keeping two files
//! under way and feeding their digests in turn (a file's verdict is the one
//! [`Gate::check`] gives it alone), the exports of every file whose ELF could be read join
//! the symbol table (over the gate's own, which is not copied), then each module's CRCs
//! are checked against the full table.
//! Finding and reading the files fails with a [`BatchError`] naming the path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::digest::STEP;
use super::{Begun, Gate, Verdict};
use crate::formats::kmod::index::name_of_path;
use crate::formats::kmod::modinfo;
use crate::formats::kmod::symvers::Symvers;

/// Most bytes read from one module file, compressed or not (the largest real module,
/// NVIDIA's proprietary `nvidia.ko`, is about 76 MB): the operator's batch check, the
/// init's module loader and mkinitramfs all read module files up to this. A module is read
/// whole, so this also bounds the memory per module. What a compressed module may
/// decompress to is a separate limit, [`modinfo::MODULE_IMAGE_MAX`].
pub const MODULE_FILE_MAX: u64 = 1 << 30;

/// Why module files could not be found or read.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A directory (or an entry's type in it) could not be read.
    #[error("{}: {source}", path.display())]
    Walk {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {size} bytes is larger than any module ({MODULE_FILE_MAX} at most)", path.display())]
    TooLarge { path: PathBuf, size: u64 },
    /// The file ended before the size it had when it was opened.
    #[error("{}: the file shrank from {size} bytes while it was read", path.display())]
    Shrank { path: PathBuf, size: u64 },
    #[error(transparent)]
    Read(#[from] crate::util::fs::InputError),
}

/// Module files under `paths` (files as given, directories searched for `*.ko*`), sorted.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, BatchError> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) -> Result<(), BatchError> {
        let rd = std::fs::read_dir(d).map_err(|source| BatchError::Walk {
            path: d.to_path_buf(),
            source,
        })?;
        for e in rd {
            // An entry the directory could not list is an error, not a module skipped.
            let e = e.map_err(|source| BatchError::Walk {
                path: d.to_path_buf(),
                source,
            })?;
            let p = e.path();
            let ft = e.file_type().map_err(|source| BatchError::Walk {
                path: p.clone(),
                source,
            })?;
            if ft.is_dir() {
                walk(&p, out)?;
            } else {
                let n = p.to_string_lossy();
                if n.ends_with(".ko")
                    || n.ends_with(".ko.xz")
                    || n.ends_with(".ko.zst")
                    || n.ends_with(".ko.gz")
                {
                    out.push(p);
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    out.sort();
    Ok(out)
}

/// The result of a batch.
#[derive(Debug)]
pub struct Batch {
    pub verdicts: Vec<Verdict>,
    /// Bytes read from disk.
    pub bytes: u64,
    pub elapsed: Duration,
}

/// One file's result, filled in by whichever worker took it.
type Slot = Mutex<Option<(Verdict, Option<modinfo::ModuleElf>)>>;

/// A file in one of a worker's two lanes: read, its checks begun, its digest under way.
struct Lane {
    i: usize,
    raw: Vec<u8>,
    begun: Begun,
}

/// Checks every file with `jobs` threads. The exports of the checked modules are added to
/// the gate's symbol table (when it has one) before the CRC check. Each thread keeps two
/// files under way and feeds their digests in turn ([`Begun::hash_step`], a few blocks
/// each): one thread then hashes about a fifth faster than one file at a time, and holds
/// up to two modules (and their decompressed images) in memory.
pub fn check_files(gate: &Gate, files: &[PathBuf], jobs: usize) -> Batch {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    let slots: Vec<Slot> = files.iter().map(|_| Mutex::new(None)).collect();
    let store = |i: usize, mut v: Verdict, elf: Option<modinfo::ModuleElf>| {
        if let Some(path) = files.get(i) {
            v.file = Some(path.display().to_string());
        }
        if let Some(Ok(mut s)) = slots.get(i).map(|m| m.lock()) {
            *s = Some((v, elf));
        }
    };
    // The next file that could be read, its checks begun (a file that cannot be read gets
    // its verdict here); `None` when no file is left.
    let take = |spare: &mut Vec<Vec<u8>>| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let path = files.get(i)?;
        let (name, file_name) = names(path);
        let mut raw = spare.pop().unwrap_or_default();
        match read_into(path, &mut raw) {
            Ok(()) => {
                total.fetch_add(raw.len(), Ordering::Relaxed);
                let begun = gate.begin(&name, &file_name, &raw);
                return Some(Lane { i, raw, begun });
            }
            Err(e) => {
                store(i, unreadable(&name, &e), None);
                spare.push(raw);
            }
        }
    };
    let work = || {
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut lanes: [Option<Lane>; 2] = [None, None];
        loop {
            for lane in lanes.iter_mut().filter(|l| l.is_none()) {
                *lane = take(&mut spare);
            }
            if lanes.iter().all(Option::is_none) {
                return;
            }
            // Both lanes' digests in turn until one is complete; a lone lane is finished
            // whole by `end`.
            if let [Some(a), Some(b)] = &mut lanes {
                while !(a.begun.hash_step(&a.raw, STEP) | b.begun.hash_step(&b.raw, STEP)) {}
            }
            let both = lanes.iter().all(Option::is_some);
            for lane in &mut lanes {
                if lane.as_ref().is_some_and(|l| !both || l.begun.hashed()) {
                    if let Some(l) = lane.take() {
                        let (v, elf, _) = gate.end(l.begun, &l.raw, &|_| {});
                        store(l.i, v, elf);
                        spare.push(l.raw);
                    }
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..jobs.max(1) {
            s.spawn(work);
        }
        work();
    });
    let results: Vec<_> = slots
        .into_iter()
        .filter_map(|m| m.into_inner().ok().flatten())
        .collect();
    // The exports of the modules checked here, over the gate's table (a module whose
    // ELF could not be read exports nothing: the kernel could not load it).
    let mut extra = Symvers::default();
    if gate.symvers.is_some() {
        for (v, elf) in &results {
            for (symbol, crc) in elf.iter().flat_map(|elf| elf.exports()) {
                extra.insert(symbol, crc, &v.module, false);
            }
        }
    }
    let over = gate.overlay(&extra);
    let verdicts = results
        .into_iter()
        .map(|(mut v, elf)| {
            if let Some(elf) = &elf {
                gate.check_crcs_over(&over, elf, &mut v);
            }
            v.pass = v.reasons.is_empty();
            v
        })
        .collect();
    Batch {
        verdicts,
        bytes: total.load(Ordering::Relaxed) as u64,
        elapsed: start.elapsed(),
    }
}

/// The module name a file should hold and its file name (which decides decompression).
fn names(path: &Path) -> (String, String) {
    let name = name_of_path(&path.to_string_lossy());
    let file_name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    (name, file_name)
}

/// The verdict on a file that could not be read: that reason alone, and no digest (there
/// are no bytes to have one of).
fn unreadable(name: &str, e: &BatchError) -> Verdict {
    let mut v = Verdict::new(name);
    v.reason(super::ReasonCode::Unreadable, e.to_string());
    v
}

/// Reads a module file, refusing absurd sizes before reading.
pub fn read_file(path: &Path) -> Result<Vec<u8>, BatchError> {
    let mut buf = Vec::new();
    read_into(path, &mut buf)?;
    Ok(buf)
}

/// Reads a module file into `buf` (emptied first; its memory is kept, so one buffer
/// serves file after file): a regular file of at most [`MODULE_FILE_MAX`] bytes, read to
/// the size it had when opened, as the kernel's `kernel_read_file` reads a module (to
/// `i_size`; growth after the open is not read, a file that shrank is an error).
pub fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), BatchError> {
    use std::io::Read;
    buf.clear();
    let (mut f, meta) = crate::util::fs::open_input_metadata(path, false)?;
    let size = meta.len();
    let too_large = || BatchError::TooLarge {
        path: path.to_path_buf(),
        size,
    };
    if size > MODULE_FILE_MAX {
        return Err(too_large());
    }
    let len = usize::try_from(size).map_err(|_| too_large())?;
    buf.reserve(len);
    // `take` ends the read at the size without another read(2) to find the end.
    if let Err(source) = f.by_ref().take(size).read_to_end(buf) {
        buf.clear();
        return Err(crate::util::fs::InputError::Io {
            path: path.to_path_buf(),
            source,
        }
        .into());
    }
    if buf.len() != len {
        buf.clear();
        return Err(BatchError::Shrank {
            path: path.to_path_buf(),
            size,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_into_reuses_the_buffer_and_refuses_what_is_not_a_module_file() {
        let dir = std::env::temp_dir().join(format!("batch-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.ko");
        let small = dir.join("small.ko");
        std::fs::write(&big, vec![7u8; 100_000]).unwrap();
        std::fs::write(&small, b"small").unwrap();
        let mut buf = Vec::new();
        read_into(&big, &mut buf).unwrap();
        assert_eq!(buf.len(), 100_000);
        read_into(&small, &mut buf).unwrap();
        assert_eq!(buf, b"small");
        // Larger than any module: refused from its size, before a byte is read (sparse).
        let huge = dir.join("huge.ko");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MODULE_FILE_MAX + 1)
            .unwrap();
        let e = read_into(&huge, &mut buf).unwrap_err();
        assert!(matches!(e, BatchError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("huge.ko"), "{e}");
        assert!(buf.is_empty());
        // A directory and a FIFO named like modules: refused by type, without blocking.
        let d = dir.join("dir.ko");
        std::fs::create_dir(&d).unwrap();
        let fifo = dir.join("fifo.ko");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR).unwrap();
        for p in [&d, &fifo] {
            let e = read_into(p, &mut buf).unwrap_err();
            assert!(
                e.to_string().contains("not a regular file"),
                "{}: {e}",
                p.display()
            );
        }
        let e = read_into(&dir.join("absent.ko"), &mut buf).unwrap_err();
        assert!(e.to_string().contains("absent.ko"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Checking many module files at once (a whole kernel tree on a host, or every module on a
//! live node): files are read and inspected by worker threads, the exports of every file
//! join the symbol table, then each module's CRCs are checked against the full table.
//! Finding and reading the files fails with a [`BatchError`] naming the path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Gate, Verdict};
use crate::formats::kmod::index::name_of_path;
use crate::formats::kmod::modinfo;

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
    /// A module file's metadata could not be read.
    #[error("{}: {source}", path.display())]
    Metadata {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("{}: {size} bytes is larger than any module ({MODULE_FILE_MAX} at most)", path.display())]
    TooLarge { path: PathBuf, size: u64 },
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
        for e in rd.filter_map(Result::ok) {
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
type Slot = Mutex<
    Option<(
        Verdict,
        Option<modinfo::ModuleElf>,
        Vec<modinfo::VersionEntry>,
    )>,
>;

/// Checks every file with `jobs` threads. The exports of the checked modules are added to
/// the gate's symbol table (when it has one) before the CRC check.
pub fn check_files(gate: &Gate, files: &[PathBuf], jobs: usize) -> Batch {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    let slots: Vec<Slot> = files.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(path) = files.get(i) else { return };
        let name = name_of_path(&path.to_string_lossy());
        let file_name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let result = match read_file(path) {
            Ok(raw) => {
                total.fetch_add(raw.len(), Ordering::Relaxed);
                let (mut v, elf, image) = gate.inspect(&name, &file_name, &raw);
                let exports = image
                    .as_deref()
                    .map(|img| {
                        let body = crate::formats::kmod::sig::split(img)
                            .map(|s| s.body)
                            .unwrap_or(img);
                        modinfo::exports(body).unwrap_or_default()
                    })
                    .unwrap_or_default();
                v.file = Some(path.display().to_string());
                (v, elf, exports)
            }
            Err(e) => {
                let (mut v, _, _) = gate.inspect(&name, &file_name, b"");
                v.reasons.clear();
                v.reasons.push(super::Reason {
                    code: super::ReasonCode::Unreadable,
                    message: e.to_string(),
                });
                v.file = Some(path.display().to_string());
                (v, None, Vec::new())
            }
        };
        if let Some(Ok(mut s)) = slots.get(i).map(|m| m.lock()) {
            *s = Some(result);
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
    let mut g = gate.clone();
    if let Some(table) = g.symvers.as_mut() {
        for (v, _, exports) in &results {
            for e in exports {
                table.insert(&e.symbol, e.crc, &v.module, false);
            }
        }
    }
    let verdicts = results
        .into_iter()
        .map(|(mut v, elf, _)| {
            if let Some(elf) = &elf {
                g.check_crcs(elf, &mut v);
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

/// Reads a module file, refusing absurd sizes before reading.
pub fn read_file(path: &Path) -> Result<Vec<u8>, BatchError> {
    let meta = std::fs::metadata(path).map_err(|source| BatchError::Metadata {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(BatchError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > MODULE_FILE_MAX {
        return Err(BatchError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
        });
    }
    let f = crate::util::fs::open_input(path, false)?;
    Ok(crate::util::fs::read_file_limited(
        f,
        path,
        MODULE_FILE_MAX,
    )?)
}

//! Builds the boot gate's initramfs.
//!
//! Contract: given a kernel tree (an unpacked Debian kernel package), a BOM and the static
//! init, [`build`] produces a newc cpio ([`cpio`]) holding `/init`, `/dev/console`
//! (c 5 1), the API mount points, `/sysroot`, the BOM at `/etc/validator/bom.toml`, and
//! under `/lib/modules/<release>/` exactly the BOM's module closure ([`closure`]) with
//! its `modules.dep`, `modules.softdep` and `modules.builtin`. Output is byte-identical
//! for identical inputs (sorted entries, uid/gid 0, mtimes from `SOURCE_DATE_EPOCH` or 0,
//! gzip without name or time), uncompressed, gzip or zstd.
//!
//! Current limits: no firmware files, no trust store or CRC table yet (the module gate
//! adds them); softdep aliases are resolved by scanning module `alias=` entries.

pub mod closure;
pub mod cpio;

use std::io::Write;
use std::path::{Path, PathBuf};

use closure::{ClosureError, KernelTree};
use cpio::{Archive, CpioError, Entry, Kind};

/// A build problem.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Bom(#[from] validator::bom::BomError),
    #[error("the BOM is for kernel {bom} but the kernel tree is {tree}")]
    ReleaseMismatch { bom: String, tree: String },
    #[error(transparent)]
    Closure(#[from] ClosureError),
    #[error(transparent)]
    Cpio(#[from] CpioError),
    #[error("compression: {0}")]
    Compress(std::io::Error),
}

/// Output compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compress {
    None,
    Gzip,
    Zstd,
}

impl std::str::FromStr for Compress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Compress::None),
            "gzip" | "gz" => Ok(Compress::Gzip),
            "zstd" | "zst" => Ok(Compress::Zstd),
            _ => Err(format!("unknown compression {s:?} (none, gzip, zstd)")),
        }
    }
}

/// What goes into an initramfs.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kernel: PathBuf,
    pub bom: PathBuf,
    pub init: PathBuf,
    /// Extra modules beyond the BOM's `modules.load`.
    pub extra_modules: Vec<String>,
    /// Extra files: (source on the host, absolute destination in the initramfs).
    pub extra_files: Vec<(PathBuf, String)>,
    pub compress: Compress,
    /// mtime of every entry.
    pub mtime: u32,
}

/// What was built.
#[derive(Debug, Clone)]
pub struct Built {
    pub bytes: Vec<u8>,
    pub release: String,
    pub modules: Vec<String>,
    pub unresolved_softdeps: Vec<String>,
}

/// `SOURCE_DATE_EPOCH` if set and valid, else 0.
pub fn source_date_epoch() -> u32 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn read(path: &Path) -> Result<Vec<u8>, BuildError> {
    std::fs::read(path).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Builds the archive described by `spec`.
pub fn build(spec: &Spec) -> Result<Built, BuildError> {
    let bom = validator::bom::load(&spec.bom)?;
    let tree = KernelTree::open(&spec.kernel)?;
    if bom.bom.kernel.release.as_str() != tree.release {
        return Err(BuildError::ReleaseMismatch {
            bom: bom.bom.kernel.release.to_string(),
            tree: tree.release.clone(),
        });
    }
    let mut names: Vec<String> = bom.bom.modules.load.iter().map(|m| m.0.clone()).collect();
    names.extend(spec.extra_modules.iter().cloned());
    let clo = closure::closure(&tree, &names)?;

    let mut a = Archive::new();
    for d in [
        "dev",
        "proc",
        "sys",
        "run",
        "sysroot",
        "tmp",
        "etc/validator",
    ] {
        a.dir(d)?;
    }
    a.add(
        "dev/console",
        Entry {
            kind: Kind::CharDev { major: 5, minor: 1 },
            perm: 0o600,
        },
    )?;
    a.file("init", read(&spec.init)?, 0o755)?;
    a.file("etc/validator/bom.toml", read(&spec.bom)?, 0o644)?;
    let mdir = format!("lib/modules/{}", tree.release);
    a.dir(&mdir)?;
    for rel in clo.files.values() {
        a.file(
            &format!("{mdir}/{rel}"),
            read(&tree.moddir.join(rel))?,
            0o644,
        )?;
    }
    a.file(
        &format!("{mdir}/modules.dep"),
        clo.index.dep_text().into_bytes(),
        0o644,
    )?;
    a.file(
        &format!("{mdir}/modules.softdep"),
        clo.index.softdep_text().into_bytes(),
        0o644,
    )?;
    let builtin = tree.moddir.join("modules.builtin");
    if builtin.exists() {
        a.file(&format!("{mdir}/modules.builtin"), read(&builtin)?, 0o644)?;
    }
    for (src, dst) in &spec.extra_files {
        let perm = {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(src)
                .map_err(|source| BuildError::Io {
                    path: src.clone(),
                    source,
                })?
                .permissions()
                .mode()
                & 0o7777
        };
        a.file(dst, read(src)?, perm)?;
    }
    let raw = a.write(spec.mtime);
    let bytes = compress(&raw, spec.compress).map_err(BuildError::Compress)?;
    Ok(Built {
        bytes,
        release: tree.release,
        modules: clo.files.keys().cloned().collect(),
        unresolved_softdeps: clo.unresolved_softdeps,
    })
}

/// Compresses deterministically.
pub fn compress(raw: &[u8], c: Compress) -> std::io::Result<Vec<u8>> {
    match c {
        Compress::None => Ok(raw.to_vec()),
        Compress::Gzip => {
            let mut e = flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::best());
            e.write_all(raw)?;
            e.finish()
        }
        Compress::Zstd => zstd::encode_all(raw, 19),
    }
}

/// Decompresses an initramfs by its magic (gzip, zstd, or none).
pub fn decompress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out)?;
        Ok(out)
    } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        zstd::decode_all(bytes)
    } else {
        Ok(bytes.to_vec())
    }
}

//! The test node's initramfs, built with the `mkinitramfs` library from a BOM file: the
//! static init, the BOM, the module closure of its `modules.load`, with module files
//! replaced (`overrides`), tampered (one byte of the ELF body flipped) or re-signed with
//! OVMF's snakeoil key on request. With any replaced or tampered module the build-time
//! gate is off, so the boot-time gate is what judges them; re-signed ones pass both.
//!
//! The archive is compressed with zstd at the test bed's level ([`TESTBED_ZSTD_LEVEL`],
//! a quarter of a second an image, about a tenth larger) or at mkinitramfs' own
//! ([`mkinitramfs::ZSTD_LEVEL`], 19: about 5 s an image), [`Compression`]: what the
//! kernel unpacks is the same archive either way. mkinitramfs' level is kept where the
//! compressed image itself is measured: the benchmarks (`qemu-harness` sets it for its
//! process, [`set_default_compression`]) and a scenario with less memory than the
//! default (the kernel's zstd window is the level's); those images are kept in a cache
//! keyed on the archive's bytes, zstd's version and the level ([`zstd_cached`]). The
//! real node's slots are built by `mkinitramfs slot`, at its level.

use std::path::{Path, PathBuf};

use crate::paths::{self, Kernel};
use crate::HarnessError;

/// What goes into one initramfs besides the init and the BOM's module closure.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Host files packed at the given paths.
    pub files: Vec<(PathBuf, String)>,
    /// Module files packed in place of the kernel's.
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Modules packed with one byte of their ELF body flipped.
    pub tampered_modules: Vec<String>,
    /// Modules packed re-signed with OVMF's snakeoil key by `sign-file <hash>`, as
    /// `(module, hash)`; the snakeoil key's files are written to the scratch directory.
    /// The build-time gate stays on for them (the BOM should trust `snake.pem`).
    pub snakeoil_signed: Vec<(String, String)>,
    /// How the archive is compressed; `None`: the process's default
    /// ([`set_default_compression`]).
    pub compression: Option<Compression>,
}

/// How [`build`] compresses an archive (zstd at some level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// mkinitramfs' default: zstd at [`mkinitramfs::ZSTD_LEVEL`].
    Product,
    /// zstd at [`TESTBED_ZSTD_LEVEL`].
    TestBed,
}

/// zstd's level for [`Compression::TestBed`]: 0.26 s and 2.51 MB for the test node's
/// 8.3 MB archive, where level 19 takes 4.7 s for 2.29 MB (`zstd -9` and `zstd -19` on
/// this machine).
pub const TESTBED_ZSTD_LEVEL: i32 = 9;
// The test bed's level is the faster one.
const _: () = assert!(TESTBED_ZSTD_LEVEL < mkinitramfs::ZSTD_LEVEL);

/// Whether this process compresses at mkinitramfs' level by default.
static PRODUCT_BY_DEFAULT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Sets the compression of every image this process builds whose [`Extras`] do not name
/// one ([`Compression::TestBed`] until set).
pub fn set_default_compression(c: Compression) {
    PRODUCT_BY_DEFAULT.store(
        c == Compression::Product,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// This process's default compression ([`set_default_compression`]).
pub fn default_compression() -> Compression {
    if PRODUCT_BY_DEFAULT.load(std::sync::atomic::Ordering::Relaxed) {
        Compression::Product
    } else {
        Compression::TestBed
    }
}

/// Writes `kernel`'s module `name` re-signed by `key` (`sign-file <hash>`) to `out`.
pub fn resign_module(
    kernel: &Kernel,
    name: &str,
    key: &sigcases::keys::Key,
    hash: &str,
    out: &Path,
) -> Result<(), HarnessError> {
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let rel = tree
        .files
        .get(name)
        .ok_or_else(|| HarnessError::Setup(format!("no module {name} in the kernel")))?;
    let src = tree.moddir.join(rel);
    let bytes = std::fs::read(&src).map_err(|e| HarnessError::io(&src, e))?;
    sigcases::cases::resign(&bytes, key, hash, out);
    Ok(())
}

/// Builds the initramfs for `kernel` and the BOM at `bom_path` into `out`, with the test
/// bed's init ([`paths::init_binary`]); tampered module copies go to `scratch`.
pub fn build(
    kernel: &Kernel,
    bom_path: &Path,
    extras: &Extras,
    out: &Path,
    scratch: &Path,
) -> Result<(), HarnessError> {
    build_with(
        kernel,
        bom_path,
        extras,
        out,
        scratch,
        &paths::init_binary()?,
    )
}

/// [`build`] with the init at `init` (the boot benchmark times the production one,
/// [`paths::production_init`]: no test hooks, so the full report is not printed on the
/// console).
pub fn build_with(
    kernel: &Kernel,
    bom_path: &Path,
    extras: &Extras,
    out: &Path,
    scratch: &Path,
    init: &Path,
) -> Result<(), HarnessError> {
    let mut overrides = extras.module_overrides.clone();
    // The build-time gate would refuse a tampered module; the boot-time gate is tested.
    let gate = overrides.is_empty() && extras.tampered_modules.is_empty();
    if !extras.snakeoil_signed.is_empty() {
        let key = sigcases::keys::snakeoil(scratch);
        for (m, hash) in &extras.snakeoil_signed {
            let signed = scratch.join(format!("{m}-{hash}.ko"));
            resign_module(kernel, m, &key, hash, &signed)?;
            overrides.push((m.clone(), signed));
        }
    }
    if !extras.tampered_modules.is_empty() {
        let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
            .map_err(|e| HarnessError::Setup(e.to_string()))?;
        for m in &extras.tampered_modules {
            let rel = tree
                .files
                .get(m)
                .ok_or_else(|| HarnessError::Setup(format!("no module {m} in the kernel")))?;
            let src = tree.moddir.join(rel);
            let mut bytes = std::fs::read(&src).map_err(|e| HarnessError::io(&src, e))?;
            // A byte only the signature covers: e_ident's padding (EI_PAD, offset 9),
            // which neither the kernel's ELF checks nor the gate's parser read, so the
            // signature is the one reason to refuse (a byte in the symbol table would
            // also rename an import).
            bytes[9] ^= 0x01;
            let tampered = scratch.join(format!("tampered-{m}.ko"));
            std::fs::write(&tampered, &bytes).map_err(|e| HarnessError::io(&tampered, e))?;
            overrides.push((m.clone(), tampered));
        }
    }
    let mut spec = mkinitramfs::Spec::new(&paths::elf_tree(kernel)?, bom_path, init);
    spec.extra_files = extras.files.clone();
    spec.mtime = 0;
    spec.gate = gate;
    spec.module_overrides = overrides;
    // The archive as mkinitramfs writes it, then compressed through the cache.
    spec.compress = mkinitramfs::Compress::None;
    let built = mkinitramfs::build(&spec).map_err(|e| HarnessError::Setup(e.to_string()))?;
    let packed = match extras.compression.unwrap_or_else(default_compression) {
        Compression::Product => zstd_cached(&built.bytes)?,
        Compression::TestBed => zstd::encode_all(&built.bytes[..], TESTBED_ZSTD_LEVEL)
            .map_err(|e| HarnessError::Setup(format!("zstd: {e}")))?,
    };
    std::fs::write(out, &packed).map_err(|e| HarnessError::io(out, e))
}

/// `raw` compressed as mkinitramfs compresses by default (`zstd::encode_all` at
/// [`mkinitramfs::ZSTD_LEVEL`]: seconds an image), kept in
/// `target/qemu-cache/initramfs/<SHA-256 of zstd's version, the level and raw>.zst`,
/// for the benchmarks' runs and the tests that boot such an image. A cached file is used
/// only when it decompresses to `raw` (otherwise it is made again, so two processes
/// writing the same file at once cost a rebuild, never a wrong image); a new one is
/// written by `validator::util::fs::write_atomic`. A cache that cannot be written is
/// reported on stderr and the image used.
pub fn zstd_cached(raw: &[u8]) -> Result<Vec<u8>, HarnessError> {
    let path = cache_path(raw);
    if let Ok(cached) = std::fs::read(&path) {
        let same = validator::formats::compress::zstd_frame(&cached, raw.len())
            .is_ok_and(|back| back.data == raw && back.consumed == cached.len());
        if same {
            return Ok(cached);
        }
    }
    let packed = mkinitramfs::compress(raw, mkinitramfs::Compress::Zstd)
        .map_err(|e| HarnessError::Setup(format!("zstd: {e}")))?;
    if let Err(e) = validator::util::fs::write_atomic(&path, &packed) {
        eprintln!("initramfs cache {}: {e}", path.display());
    }
    Ok(packed)
}

/// Where [`zstd_cached`] keeps `raw`'s image.
fn cache_path(raw: &[u8]) -> PathBuf {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let settings = format!(
        "zstd {} level {}",
        zstd::zstd_safe::version_string(),
        mkinitramfs::ZSTD_LEVEL
    );
    h.update(settings.as_bytes());
    h.update([0]);
    h.update(raw);
    paths::workspace()
        .join("target/qemu-cache/initramfs")
        .join(format!("{}.zst", validator::util::hex(&h.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_image_is_the_one_mkinitramfs_compresses_and_a_bad_one_is_made_again() {
        // An input of this run only, so no other process shares its cache file.
        let mut raw =
            format!("{:?} {}", std::time::SystemTime::now(), std::process::id()).into_bytes();
        raw.extend((0..200_000u32).map(|i| (i % 251) as u8));
        let fresh = mkinitramfs::compress(&raw, mkinitramfs::Compress::Zstd).unwrap();
        let path = cache_path(&raw);
        assert!(!path.exists());
        // Made and kept, then read back.
        assert_eq!(zstd_cached(&raw).unwrap(), fresh);
        assert_eq!(std::fs::read(&path).unwrap(), fresh);
        assert_eq!(zstd_cached(&raw).unwrap(), fresh);
        // A cached file that does not decompress to the input (cut, another archive,
        // more after the frame, empty) is not used: the image is made again and the
        // file replaced.
        let other = mkinitramfs::compress(b"another archive", mkinitramfs::Compress::Zstd).unwrap();
        let mut longer = fresh.clone();
        longer.push(0);
        for bad in [&fresh[..fresh.len() / 2], &other[..], &longer[..], &[][..]] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(zstd_cached(&raw).unwrap(), fresh);
            assert_eq!(std::fs::read(&path).unwrap(), fresh);
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_process_compresses_at_the_test_beds_level_unless_it_asks() {
        assert_eq!(default_compression(), Compression::TestBed);
    }
}

//! Builds the boot gate's initramfs.
//!
//! Contract: given a kernel tree (an unpacked Debian kernel package), a BOM and the static
//! init, [`build`] produces a newc cpio ([`cpio`]) holding `/init`, `/dev/console`
//! (c 5 1), the API mount points, `/sysroot`, the BOM at `/etc/validator/bom.toml`, and
//! under `/lib/modules/<release>/` exactly the BOM's module closure ([`closure`]) with
//! its `modules.dep`, `modules.softdep` and `modules.builtin`. Output is byte-identical
//! for identical inputs (sorted entries, uid/gid 0, mtimes from `SOURCE_DATE_EPOCH` or 0,
//! gzip without name or time), compressed by zstd at level 19 unless asked otherwise (the
//! Debian kernels unpack it; a fifth smaller than gzip's best: 2.20 MB against 2.70 MB
//! for the test bed's node), gzip or not at all. Gzip is zlib's best
//! compression by the zlib-rs crate (a Rust port of zlib-ng: about 2.4 times
//! miniz_oxide's speed here), called directly rather than as flate2's backend: a backend
//! feature would be unified into every crate of a workspace build, and the init's tests
//! must run against the decoder the init ships (flate2's default).
//!
//! The module gate's inputs go in too: the kernel's built-in trusted certificates and the
//! BOM's `policy.trust` certificates (`/etc/validator/trust/`), the CRCs of every symbol
//! the packed modules import (`/etc/validator/Module.symvers`, from the kernel image and
//! the packed modules) and the kernel's vermagic (`/etc/validator/kernel.vermagic`). Every
//! packed module must pass the gate at build time, so a bad module is caught before any
//! node boots it. A module whose signature needs a digest the kernel has only as a module
//! (sha384/sha512 on Debian 6.1) gets the module that provides it
//! ([`closure::KernelTree::digest_providers`]) packed, gated like any other, and listed
//! as its `pre:` soft dependency, so the init loads it first; the build-time gate counts
//! that digest as present, as it will be when the init gets there.
//!
//! [`slot`] builds a whole A/B slot image around such an initramfs (`mkinitramfs slot`):
//! the root image, its dm-verity tree, the signed root hash and the boot entries.
//! [`install`] writes one or two such slots onto a disk (`mkinitramfs install`): the GPT,
//! the ESP with the boot chain and the slots' boot files, and each slot's partitions.
//!
//! Every error names the file it is about (an input, the BOM, a certificate, a module
//! file, the `--file` source whose entry clashes); only a compression failure of the
//! archive in memory names none. Every input is read through [`validator::util::fs::read_limited`] (no FIFO, directory
//! or device; at most the size in [`limits`]), and [`unpack`] reads an initramfs back as
//! the kernel does.
//!
//! Current limits: no firmware files; softdep aliases are resolved by scanning module
//! `alias=` entries; the CRC table covers the packed modules' imports only, plus every
//! symbol the kernel exports when the BOM has `modules.root` (drivers the preflight gates
//! from the verified root).

mod build;
pub mod closure;
pub mod cpio;
pub mod install;
pub mod slot;
pub mod uki;
pub mod unpack;

/// The largest input of each kind that mkinitramfs reads (a larger one is an error
/// naming the file and the limit; `docs/PREFLIGHT.md` lists them).
pub mod limits {
    /// The init binary (`--init`).
    pub const INIT_MAX: u64 = 64 << 20;
    /// The kernel image (`boot/vmlinuz-<release>`): the validator's limit for one.
    pub use validator::formats::vmlinuz::VMLINUZ_MAX;
    /// A module file (the kernel tree's or a `--module-file`): the validator's limit for one.
    pub use validator::gate::batch::MODULE_FILE_MAX;
    /// An extra file (`--file`).
    pub const EXTRA_FILE_MAX: u64 = 256 << 20;
    /// `modules.builtin`, `modules.builtin.modinfo`.
    pub const INDEX_MAX: u64 = 64 << 20;
    /// An initramfs given to `list`: the validator's limit for one.
    pub use validator::formats::newc::INITRAMFS_MAX;
    /// A certificate named by the BOM's `policy.trust`: the validator's limit for one.
    pub use validator::trust::CERT_FILE_MAX;
    /// What `list` unpacks, all parts together.
    pub const UNPACKED_MAX: usize = 1 << 30;
}

use std::path::{Path, PathBuf};

use closure::ClosureError;
use cpio::CpioError;

/// A build problem.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Input(#[from] validator::util::fs::InputError),
    #[error(transparent)]
    Bom(#[from] validator::config::bom::BomError),
    #[error("{path}: the BOM is for kernel {bom} but the kernel tree is {tree}")]
    ReleaseMismatch {
        path: PathBuf,
        bom: String,
        tree: String,
    },
    #[error(transparent)]
    Closure(#[from] ClosureError),
    #[error("{bom}: the modules to pack (modules.load and --module): {source}")]
    ModuleClosure { bom: PathBuf, source: ClosureError },
    #[error(transparent)]
    Cpio(#[from] CpioError),
    #[error("compression: {0}")]
    Compress(std::io::Error),
    #[error("{path}: {source}")]
    Kernel {
        path: PathBuf,
        source: validator::formats::vmlinuz::VmlinuzError,
    },
    #[error(
        "{0}: no boot/vmlinuz-<release> next to the modules (the gate needs the kernel image)"
    )]
    NoVmlinuz(PathBuf),
    #[error("{path}: trust store: {source}")]
    Trust {
        path: PathBuf,
        source: validator::trust::TrustError,
    },
    #[error("{path}: {source}")]
    Entry { path: PathBuf, source: CpioError },
    #[error("the module gate refuses {}", .0.join("; "))]
    Gate(Vec<String>),
    #[error("{0}: the init is empty")]
    EmptyInit(PathBuf),
    #[error(
        "{bom}: modules.load names {module}, which the initramfs's module configuration \
         blacklists ({origin}): the init would refuse it"
    )]
    Blacklisted {
        bom: PathBuf,
        module: String,
        origin: String,
    },
    #[error(
        "{bom}: the BOM has [slot], so the init mounts the ESP (vfat, with the kernel's \
         default code page 437 and character set ascii), but modules.load does not name {} \
         and the kernel does not build it in: add it to modules.load",
        .missing.join(", ")
    )]
    EspModules { bom: PathBuf, missing: Vec<String> },
}

/// What mounting the ESP takes, as modules: the file system and the two character sets
/// its default mount options name (Debian builds all three as modules).
pub const ESP_MODULES: &[&str] = &["vfat", "nls_cp437", "nls_ascii"];

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
    /// Module files to pack instead of the kernel tree's (name, file).
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Run the module gate over the packed modules and refuse to build if one fails.
    pub gate: bool,
    /// The BOM's text in place of `bom`'s (a BOM derived from it, [`slot`]); its
    /// `policy.trust` certificates are still found next to `bom`.
    pub bom_bytes: Option<Vec<u8>>,
}

impl Spec {
    /// A spec with the defaults: zstd, mtime from `SOURCE_DATE_EPOCH`, gate on.
    pub fn new(kernel: &Path, bom: &Path, init: &Path) -> Spec {
        Spec {
            kernel: kernel.to_path_buf(),
            bom: bom.to_path_buf(),
            init: init.to_path_buf(),
            extra_modules: Vec::new(),
            extra_files: Vec::new(),
            compress: Compress::Zstd,
            mtime: source_date_epoch(),
            module_overrides: Vec::new(),
            gate: true,
            bom_bytes: None,
        }
    }
}

/// What was built.
#[derive(Debug, Clone)]
pub struct Built {
    pub bytes: Vec<u8>,
    pub release: String,
    /// The kernel image of the tree (`boot/vmlinuz-<release>`), when it has one.
    pub vmlinuz: Option<PathBuf>,
    pub modules: Vec<String>,
    pub unresolved_softdeps: Vec<String>,
}

/// Runs a tool to its end: its stdout, or the tool's name and why it failed (it could not
/// be started: the error and `hint`, or its stderr).
pub(crate) fn run_tool(
    c: &mut std::process::Command,
    hint: &str,
) -> Result<Vec<u8>, (String, String)> {
    let tool = c.get_program().to_string_lossy().into_owned();
    match c.output() {
        Err(e) => Err((tool, format!("{e}{hint}"))),
        Ok(out) if !out.status.success() => Err((
            tool,
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
        Ok(out) => Ok(out.stdout),
    }
}

/// `SOURCE_DATE_EPOCH` if set and valid, else 0.
pub fn source_date_epoch() -> u32 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn read(path: &Path, limit: u64) -> Result<Vec<u8>, BuildError> {
    validator::util::fs::read_limited(path, limit).map_err(BuildError::Input)
}

/// The module of the EFI variable filesystem, packed whenever the kernel has it as one.
pub use validator::sys::EFIVARFS;

pub use build::build;

/// gzip at zlib's best compression, by zlib-rs: zlib's own header (no name, mtime 0, the
/// Unix OS byte), so the same bytes give the same member.
fn gzip_best(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut config = zlib_rs::DeflateConfig::new(9);
    // Window bits above 15 ask for the gzip wrapper (zlib's deflateInit2).
    config.window_bits = 15 + 16;
    let mut d = zlib_rs::Deflate::new_with_config(config);
    let mut out = vec![0u8; zlib_rs::compress_bound(raw.len()) + 32];
    let at = |n: u64| usize::try_from(n).map_err(std::io::Error::other);
    loop {
        let input = raw.get(at(d.total_in())?..).unwrap_or_default();
        let done = at(d.total_out())?;
        let output = out.get_mut(done..).unwrap_or_default();
        match d.compress(input, output, zlib_rs::DeflateFlush::Finish) {
            Ok(zlib_rs::Status::StreamEnd) => {
                out.truncate(at(d.total_out())?);
                return Ok(out);
            }
            // The output is full (the bound should prevent it): room for more.
            Ok(_) => out.resize(out.len() + out.len() / 2 + 64, 0),
            Err(e) => return Err(std::io::Error::other(format!("gzip: {e:?}"))),
        }
    }
}

/// zstd's compression level for [`Compress::Zstd`] (`zstd::encode_all` at it).
pub const ZSTD_LEVEL: i32 = 19;

/// Compresses deterministically.
pub fn compress(raw: &[u8], c: Compress) -> std::io::Result<Vec<u8>> {
    match c {
        Compress::None => Ok(raw.to_vec()),
        Compress::Gzip => gzip_best(raw),
        Compress::Zstd => zstd::encode_all(raw, ZSTD_LEVEL),
    }
}

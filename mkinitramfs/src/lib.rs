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

pub mod closure;
pub mod cpio;
pub mod slot;
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

use std::collections::{BTreeMap, BTreeSet};
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

/// The module configuration the init will read from the initramfs: the extra files put
/// in `modprobe.d` directories, in `modprobe`'s order (the command line is the node's, so
/// not known here).
fn initramfs_module_config(
    files: &[(PathBuf, String)],
) -> Result<validator::formats::kmod::modprobe::Config, BuildError> {
    use validator::formats::kmod::modprobe::{config_files, Config, CONFIG_DIRS};
    let mut dirs: Vec<Vec<String>> = vec![Vec::new(); CONFIG_DIRS.len()];
    let mut sources = BTreeMap::new();
    for (src, dst) in files {
        let Some((dir, name)) = dst.trim_start_matches('/').rsplit_once('/') else {
            continue;
        };
        if let Some(i) = CONFIG_DIRS.iter().position(|d| *d == dir) {
            if let Some(names) = dirs.get_mut(i) {
                names.push(name.to_string());
                sources.insert((i, name.to_string()), (src.clone(), dst.clone()));
            }
        }
    }
    let mut cfg = Config::default();
    for key in config_files(&dirs) {
        if let Some((src, dst)) = sources.get(&key) {
            cfg.add_file(dst, &read(src, limits::EXTRA_FILE_MAX)?);
        }
    }
    Ok(cfg)
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
    /// Module files to pack instead of the kernel tree's (name, file).
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Run the module gate over the packed modules and refuse to build if one fails.
    pub gate: bool,
    /// The BOM's text in place of `bom`'s (a BOM derived from it, [`slot`]); its
    /// `policy.trust` certificates are still found next to `bom`.
    pub bom_bytes: Option<Vec<u8>>,
}

impl Spec {
    /// A spec with the defaults: gzip, mtime from `SOURCE_DATE_EPOCH`, gate on.
    pub fn new(kernel: &Path, bom: &Path, init: &Path) -> Spec {
        Spec {
            kernel: kernel.to_path_buf(),
            bom: bom.to_path_buf(),
            init: init.to_path_buf(),
            extra_modules: Vec::new(),
            extra_files: Vec::new(),
            compress: Compress::Gzip,
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

/// Builds the archive described by `spec`.
pub fn build(spec: &Spec) -> Result<Built, BuildError> {
    let bom = match &spec.bom_bytes {
        Some(b) => validator::config::bom::parse(b, &spec.bom)?,
        None => validator::config::bom::load(&spec.bom)?,
    };
    let tree = KernelTree::open(&spec.kernel)?;
    if bom.bom.kernel.release.as_str() != tree.release {
        return Err(BuildError::ReleaseMismatch {
            path: spec.bom.clone(),
            bom: bom.bom.kernel.release.to_string(),
            tree: tree.release.clone(),
        });
    }
    let mut names: Vec<String> = bom.bom.modules.load.iter().map(|m| m.0.clone()).collect();
    names.extend(spec.extra_modules.iter().cloned());
    // A module the initramfs's own modprobe.d blacklists is refused by the init: say so
    // now.
    let config = initramfs_module_config(&spec.extra_files)?;
    for n in &names {
        let module = validator::formats::kmod::normalize_name(n);
        if let Some(origin) = config.blacklisted(&module) {
            return Err(BuildError::Blacklisted {
                bom: spec.bom.clone(),
                module,
                origin: origin.to_string(),
            });
        }
    }
    // With slots the init mounts the ESP: its modules must come from the initramfs.
    if bom.bom.slot.is_some() {
        let missing: Vec<String> = ESP_MODULES
            .iter()
            .filter(|m| {
                !tree.builtin.contains(**m)
                    && !names
                        .iter()
                        .any(|n| validator::formats::kmod::normalize_name(n) == **m)
            })
            .map(|m| (*m).to_string())
            .collect();
        if !missing.is_empty() {
            return Err(BuildError::EspModules {
                bom: spec.bom.clone(),
                missing,
            });
        }
    }
    // efivarfs, which Debian builds as a module: on a UEFI boot the init mounts it to
    // read Secure Boot (the preflight) and systemd-boot's variables (the slot stage).
    if tree.files.contains_key(EFIVARFS) && !names.iter().any(|n| n == EFIVARFS) {
        names.push(EFIVARFS.to_string());
    }
    let closure_of = |names: &[String]| {
        closure::closure(&tree, names).map_err(|source| BuildError::ModuleClosure {
            bom: spec.bom.clone(),
            source,
        })
    };
    let mut clo = closure_of(&names)?;
    // The module files to pack (overrides replace the tree's file): name to (path, bytes).
    let mut files: BTreeMap<String, (PathBuf, Vec<u8>)> = BTreeMap::new();
    // A signature digest the kernel has only as a module (sha512 on Debian 6.1): the
    // module that provides it is packed and loaded first (`pre:` softdep), as the kernel
    // would need it before it can check that signature.
    let rules = validator::gate::KernelRules::debian(&tree.release);
    let mut crypto_pre: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut gained = Vec::new();
    let mut providers_of: Vec<(validator::trust::HashAlg, Vec<String>)> = Vec::new();
    for _ in 0..4 {
        let mut more = Vec::new();
        for (name, rel) in &clo.files {
            if files.contains_key(name) {
                continue;
            }
            let src = module_source(spec, &tree, name, rel);
            let bytes = read(&src, limits::MODULE_FILE_MAX)?;
            for d in signature_digests(&bytes, rel) {
                if rules.is_none_or(|k| k.has_digest(d)) {
                    continue;
                }
                // Each digest's providers are looked up once (a scan of the crypto modules).
                let providers = match providers_of.iter().find(|(a, _)| *a == d) {
                    Some((_, p)) => p.clone(),
                    None => {
                        let p = tree.digest_providers(d).map_err(|source| {
                            BuildError::ModuleClosure {
                                bom: spec.bom.clone(),
                                source,
                            }
                        })?;
                        providers_of.push((d, p.clone()));
                        p
                    }
                };
                for p in providers.into_iter().filter(|p| p != name) {
                    if !gained.contains(&d) {
                        gained.push(d);
                    }
                    if !clo.files.contains_key(&p) {
                        more.push(p.clone());
                    }
                    crypto_pre.entry(name.clone()).or_default().insert(p);
                }
            }
            files.insert(name.clone(), (src, bytes));
        }
        if more.is_empty() {
            break;
        }
        names.extend(more);
        clo = closure_of(&names)?;
    }
    for (module, providers) in crypto_pre {
        let sd = clo.index.softdeps.entry(module).or_default();
        for p in providers.into_iter().rev() {
            if !sd.pre.contains(&p) {
                sd.pre.insert(0, p);
            }
        }
    }

    // The gate's inputs: what the kernel image says about itself, and the trust store.
    let vmlinuz = tree
        .vmlinuz
        .clone()
        .ok_or_else(|| BuildError::NoVmlinuz(spec.kernel.clone()))?;
    let kerr = |source| BuildError::Kernel {
        path: vmlinuz.clone(),
        source,
    };
    let vmlinux = validator::formats::vmlinuz::vmlinux(&read(&vmlinuz, limits::VMLINUZ_MAX)?)
        .map_err(kerr)?;
    let builtin = validator::formats::vmlinuz::builtin_certs(&vmlinux).map_err(kerr)?;
    let vermagic =
        validator::formats::vmlinuz::vermagic(&vmlinux, &tree.release).ok_or_else(|| {
            kerr(validator::formats::vmlinuz::VmlinuzError::Missing(format!(
                "no vermagic string for {}",
                tree.release
            )))
        })?;
    let mut symvers = validator::formats::kmod::symvers::Symvers::default();
    for e in validator::formats::vmlinuz::exported_crcs(&vmlinux).map_err(kerr)? {
        symvers.insert_ns(&e.symbol, e.crc, "vmlinux", e.gpl, &e.namespace);
    }
    drop(vmlinux);
    // (name in the initramfs, the file it came from, bytes)
    let mut trust_files: Vec<(String, PathBuf, Vec<u8>)> = builtin
        .iter()
        .enumerate()
        .map(|(i, der)| {
            (
                format!("{}{i}.der", layout::BUILTIN_CERT_PREFIX),
                vmlinuz.clone(),
                der.clone(),
            )
        })
        .collect();
    // A BOM given as a bare file name has the empty parent: its certificates are in ".".
    let bom_dir = spec
        .bom
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    for t in &bom.bom.policy.trust {
        let p = bom_dir.join(t);
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = read(&p, limits::CERT_FILE_MAX)?;
        trust_files.push((format!("bom-{name}"), p, bytes));
    }
    let mut trust = validator::trust::TrustStore::new();
    for (name, path, bytes) in &trust_files {
        trust
            .add_bytes(bytes, name)
            .map_err(|source| BuildError::Trust {
                path: path.clone(),
                source,
            })?;
    }
    // The module files to pack (overrides replace the tree's file).
    // (name, path in the tree, bytes), in the closure's order.
    let mut module_files: Vec<(&String, &String, PathBuf, Vec<u8>)> = Vec::new();
    let mut referenced = BTreeSet::new();
    for (name, rel) in &clo.files {
        let (src, bytes) = match files.remove(name) {
            Some(f) => f,
            None => {
                let src = module_source(spec, &tree, name, rel);
                let bytes = read(&src, limits::MODULE_FILE_MAX)?;
                (src, bytes)
            }
        };
        let image = validator::formats::kmod::modinfo::decompress(
            &bytes,
            validator::formats::kmod::modinfo::Compression::from_name(rel),
        )
        .ok()
        .unwrap_or_default();
        let body = validator::formats::kmod::sig::split(&image)
            .map(|s| s.body)
            .unwrap_or(&image);
        for e in validator::formats::kmod::modinfo::exports(body).unwrap_or_default() {
            symvers.insert(&e.symbol, e.crc, name, false);
        }
        if let Ok(elf) = validator::formats::kmod::modinfo::parse_elf(body) {
            referenced.extend(elf.versions.into_iter().map(|v| v.symbol));
            referenced.extend(elf.undefined.into_iter().map(|u| u.name));
        }
        module_files.push((name, rel, src, bytes));
    }
    // The init only needs the CRCs of symbols the packed modules import (their undefined
    // symbols and `__versions` records, `module_layout` included). With root modules
    // (gated by the preflight after the root is mounted) it needs the kernel's full table:
    // what they import is not known when the initramfs is built.
    let keep_kernel = !bom.bom.modules.root.is_empty();
    symvers
        .map
        .retain(|sym, e| referenced.contains(sym) || (keep_kernel && e.module == "vmlinux"));
    if spec.gate {
        let mut policy = validator::gate::Policy::from_bom(&bom.bom);
        policy.kernel_vermagic = Some(vermagic.clone());
        // The init loads each packed digest provider before the modules that need it.
        for d in &gained {
            policy.module_digests.add(*d);
        }
        let gate = validator::gate::Gate {
            trust: trust.clone(),
            symvers: Some(symvers.clone()),
            policy,
        };
        let refused: Vec<String> = module_files
            .iter()
            .filter_map(|(name, rel, src, bytes)| {
                let (v, _) = gate.check(name, rel, bytes);
                (!v.pass).then(|| format!("{name} ({}): {}", src.display(), v.summary()))
            })
            .collect();
        if !refused.is_empty() {
            return Err(BuildError::Gate(refused));
        }
    }

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
    let init = read(&spec.init, limits::INIT_MAX)?;
    if init.is_empty() {
        return Err(BuildError::EmptyInit(spec.init.clone()));
    }
    a.file("init", init, 0o755)?;
    a.file("etc/validator/bom.toml", bom.bytes.clone(), 0o644)?;
    let mdir = format!("lib/modules/{}", tree.release);
    a.dir(&mdir)?;
    for (_, rel, _, bytes) in module_files {
        a.file(&format!("{mdir}/{rel}"), bytes, 0o644)?;
    }
    use validator::config::layout;
    for (name, path, bytes) in &trust_files {
        a.file(
            &format!("{}/{name}", layout::TRUST_DIR),
            bytes.clone(),
            0o644,
        )
        .map_err(|source| BuildError::Entry {
            path: path.clone(),
            source,
        })?;
    }
    a.file(layout::SYMVERS, symvers.to_text().into_bytes(), 0o644)?;
    a.file(
        layout::VERMAGIC,
        format!("{vermagic}\n").into_bytes(),
        0o644,
    )?;
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
        a.file(
            &format!("{mdir}/modules.builtin"),
            read(&builtin, limits::INDEX_MAX)?,
            0o644,
        )?;
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
        a.file(dst, read(src, limits::EXTRA_FILE_MAX)?, perm)
            .map_err(|source| BuildError::Entry {
                path: src.clone(),
                source,
            })?;
    }
    let raw = a.write(spec.mtime);
    let bytes = compress(&raw, spec.compress).map_err(BuildError::Compress)?;
    Ok(Built {
        bytes,
        vmlinuz: tree.vmlinuz.clone(),
        release: tree.release,
        modules: clo.files.keys().cloned().collect(),
        unresolved_softdeps: clo.unresolved_softdeps,
    })
}

/// The file packed for module `name` (at `rel` in the tree): its override, else the tree's.
fn module_source(spec: &Spec, tree: &KernelTree, name: &str, rel: &str) -> PathBuf {
    spec.module_overrides
        .iter()
        .find(|(n, _)| validator::formats::kmod::normalize_name(n) == name)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| tree.moddir.join(rel))
}

/// The digests a module's signature asks the kernel for: each signer's (the kernel's
/// `pkcs7_verify` digests the body once per signer); none when it is unsigned or its
/// signature does not parse (the gate then says why).
fn signature_digests(bytes: &[u8], rel: &str) -> Vec<validator::trust::HashAlg> {
    use validator::formats::kmod::{modinfo, sig};
    let Ok(image) = modinfo::decompress(bytes, modinfo::Compression::from_name(rel)) else {
        return Vec::new();
    };
    let Ok(split) = sig::split(&image) else {
        return Vec::new();
    };
    validator::formats::pkcs7::parse_message(split.pkcs7)
        .map(|m| m.signers.iter().map(|s| s.digest).collect())
        .unwrap_or_default()
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

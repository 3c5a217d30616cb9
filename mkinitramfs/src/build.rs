//! The steps of [`build`]: the BOM's module names checked against the initramfs's own
//! module configuration and what the init needs ([`check_names`]), the module closure
//! with the crypto modules a signature digest needs ([`closure_with_crypto`]), the init,
//! extra files and BOM certificates ([`small_inputs`], read before the kernel image is
//! decoded, so that a bad one is named at once), what the kernel image says about itself
//! ([`kernel_facts`]), the trust store
//! ([`trust_files`]), the module files and the CRCs they import ([`module_files`]), the
//! gate over every packed module ([`gate_modules`]) and the archive's layout ([`pack`]).
//!
//! Contract: each step reads only what it is given and fails with a [`BuildError`]
//! naming the file or the module; [`build`] runs them in this order and compresses.
//! [`kernel_facts`] keeps its answer for the process, keyed by the SHA-256 of the image
//! and the release (tests/kernel_facts.rs: a changed image is read again).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use validator::config::bom::LoadedBom;
use validator::config::layout;
use validator::formats::kmod::symvers::Symvers;
use validator::trust::{HashAlg, TrustStore};

use crate::closure::{self, Closure, KernelTree};
use crate::cpio::{Archive, Entry, Kind};
use crate::{compress, limits, read, BuildError, Built, Spec, EFIVARFS, ESP_MODULES};

/// A packed module: its name, its path in the tree, the file it came from, its bytes.
type ModuleFile<'a> = (&'a String, &'a String, PathBuf, Vec<u8>);

/// A file of the trust store: its name in the initramfs, the file it came from, bytes.
type TrustFile = (String, PathBuf, Vec<u8>);

/// Module files read while the closure grew: name to the file and its bytes.
type ReadModules = BTreeMap<String, (PathBuf, Vec<u8>)>;

/// What the kernel image says about itself.
struct KernelFacts {
    vmlinuz: PathBuf,
    /// Its built-in certificates (DER).
    builtin: Vec<Vec<u8>>,
    vermagic: String,
    /// The CRCs of the symbols it exports.
    symvers: Symvers,
}

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
    check_names(spec, &bom, &tree, &names)?;
    // efivarfs, which Debian builds as a module: on a UEFI boot the init mounts it to
    // read Secure Boot (the preflight) and systemd-boot's variables (the slot stage).
    if tree.files.contains_key(EFIVARFS) && !names.iter().any(|n| n == EFIVARFS) {
        names.push(EFIVARFS.to_string());
    }
    let (clo, mut files, gained) = closure_with_crypto(spec, &tree, names)?;
    // The small inputs before the kernel image's decode (about a second): a bad init,
    // extra file or BOM certificate is named at once.
    let (small, bom_certs) = small_inputs(spec, &bom)?;
    let KernelFacts {
        vmlinuz,
        builtin,
        vermagic,
        mut symvers,
    } = kernel_facts(spec, &tree)?;
    let (trust_files, trust) = trust_files(&vmlinuz, &builtin, bom_certs)?;
    let (module_files, referenced) = module_files(spec, &tree, &clo, &mut files, &mut symvers)?;
    // The init only needs the CRCs of symbols the packed modules import (their undefined
    // symbols and `__versions` records, `module_layout` included). With root modules
    // (gated by the preflight after the root is mounted) it needs the kernel's full table:
    // what they import is not known when the initramfs is built.
    let keep_kernel = !bom.bom.modules.root.is_empty();
    symvers
        .map
        .retain(|sym, e| referenced.contains(sym) || (keep_kernel && e.module == "vmlinux"));
    if spec.gate {
        gate_modules(&bom, &trust, &symvers, &vermagic, &gained, &module_files)?;
    }
    let a = pack(
        small,
        &bom,
        &tree,
        &clo,
        module_files,
        &trust_files,
        &symvers,
        &vermagic,
    )?;
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

/// Refuses names the init would refuse: a module the initramfs's own `modprobe.d`
/// blacklists, and a BOM with `[slot]` whose initramfs could not mount the ESP.
fn check_names(
    spec: &Spec,
    bom: &LoadedBom,
    tree: &KernelTree,
    names: &[String],
) -> Result<(), BuildError> {
    // A module the initramfs's own modprobe.d blacklists is refused by the init: say so
    // now.
    let config = initramfs_module_config(&spec.extra_files)?;
    for n in names {
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
    Ok(())
}

/// The closure of `names`, with the crypto modules a module's signature digest needs
/// (sha512 on Debian 6.1, which the kernel has only as a module): each provider is packed
/// and made a `pre:` soft dependency of the module, as the kernel would need it before it
/// can check that signature. Returns the closure, the module files read on the way
/// (name to file and bytes) and the digests the providers give the kernel.
fn closure_with_crypto(
    spec: &Spec,
    tree: &KernelTree,
    mut names: Vec<String>,
) -> Result<(Closure, ReadModules, Vec<HashAlg>), BuildError> {
    let closure_of = |names: &[String]| {
        closure::closure(tree, names).map_err(|source| BuildError::ModuleClosure {
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
    let mut providers_of: Vec<(HashAlg, Vec<String>)> = Vec::new();
    for _ in 0..4 {
        let mut more = Vec::new();
        for (name, rel) in &clo.files {
            if files.contains_key(name) {
                continue;
            }
            let src = module_source(spec, tree, name, rel);
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
    Ok((clo, files, gained))
}

/// What the kernel image says about itself: the image, its built-in certificates, its
/// vermagic and the CRCs of the symbols it exports. Decompressing the image is most of
/// a build's time (xz, tens of MB), and building two slots from one kernel asks twice:
/// the answer is kept for the process, keyed by the SHA-256 of the image's bytes as read
/// now and the release, so a changed image is always read afresh.
fn kernel_facts(spec: &Spec, tree: &KernelTree) -> Result<KernelFacts, BuildError> {
    use sha2::Digest;
    /// The image's SHA-256 and the release.
    type Key = ([u8; 32], String);
    /// The built-in certificates, the vermagic, the exported CRCs.
    type Facts = std::sync::Arc<(Vec<Vec<u8>>, String, Symvers)>;
    static SEEN: std::sync::Mutex<Vec<(Key, Facts)>> = std::sync::Mutex::new(Vec::new());
    let vmlinuz = tree
        .vmlinuz
        .clone()
        .ok_or_else(|| BuildError::NoVmlinuz(spec.kernel.clone()))?;
    let kerr = |source| BuildError::Kernel {
        path: vmlinuz.clone(),
        source,
    };
    let image = read(&vmlinuz, limits::VMLINUZ_MAX)?;
    let key = (sha2::Sha256::digest(&image).into(), tree.release.clone());
    let seen = |k: &Key| {
        let list = SEEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        list.iter().find(|(x, _)| x == k).map(|(_, f)| f.clone())
    };
    let facts = match seen(&key) {
        Some(f) => f,
        None => {
            let f = std::sync::Arc::new(decode_facts(&image, &tree.release).map_err(kerr)?);
            SEEN.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((key, f.clone()));
            f
        }
    };
    let (builtin, vermagic, symvers) = &*facts;
    Ok(KernelFacts {
        vmlinuz,
        builtin: builtin.clone(),
        vermagic: vermagic.clone(),
        symvers: symvers.clone(),
    })
}

/// What [`kernel_facts`] reads out of a kernel image: its built-in certificates, its
/// vermagic for `release` and the CRCs of the symbols it exports.
fn decode_facts(
    image: &[u8],
    release: &str,
) -> Result<(Vec<Vec<u8>>, String, Symvers), validator::formats::vmlinuz::VmlinuzError> {
    use validator::formats::vmlinuz;
    let vmlinux = vmlinuz::vmlinux(image)?;
    let builtin = vmlinuz::builtin_certs(&vmlinux)?;
    let vermagic = vmlinuz::vermagic(&vmlinux, release).ok_or_else(|| {
        vmlinuz::VmlinuzError::Missing(format!("no vermagic string for {release}"))
    })?;
    let mut symvers = Symvers::default();
    for e in vmlinuz::exported_crcs(&vmlinux)? {
        symvers.insert_ns(&e.symbol, e.crc, "vmlinux", e.gpl, &e.namespace);
    }
    Ok((builtin, vermagic, symvers))
}

/// The trust store's files (the kernel's built-in certificates, the BOM's `policy.trust`
/// found next to the BOM) and the store they make.
fn trust_files(
    vmlinuz: &Path,
    builtin: &[Vec<u8>],
    bom_certs: Vec<TrustFile>,
) -> Result<(Vec<TrustFile>, TrustStore), BuildError> {
    let mut trust_files: Vec<TrustFile> = builtin
        .iter()
        .enumerate()
        .map(|(i, der)| {
            (
                format!("{}{i}.der", layout::BUILTIN_CERT_PREFIX),
                vmlinuz.to_path_buf(),
                der.clone(),
            )
        })
        .collect();
    trust_files.extend(bom_certs);
    let trust = store_of(&trust_files)?;
    Ok((trust_files, trust))
}

/// The trust store of `files`, in their order (a duplicate keeps its first origin).
fn store_of(files: &[TrustFile]) -> Result<TrustStore, BuildError> {
    let mut trust = TrustStore::new();
    for (name, path, bytes) in files {
        trust
            .add_bytes(bytes, name)
            .map_err(|source| BuildError::Trust {
                path: path.clone(),
                source,
            })?;
    }
    Ok(trust)
}

/// The files [`pack`] copies as they are, read before the kernel image is decoded.
struct SmallInputs {
    /// The init's bytes (never empty).
    init: Vec<u8>,
    /// Each extra file: its path in the archive, its bytes, its permission bits, where
    /// it came from.
    extras: Vec<(String, Vec<u8>, u32, PathBuf)>,
}

/// Reads the init, the extra files and the BOM's certificates (`policy.trust`, each
/// parsed once here to check it).
fn small_inputs(spec: &Spec, bom: &LoadedBom) -> Result<(SmallInputs, Vec<TrustFile>), BuildError> {
    let init = read(&spec.init, limits::INIT_MAX)?;
    if init.is_empty() {
        return Err(BuildError::EmptyInit(spec.init.clone()));
    }
    let mut extras = Vec::new();
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
        let bytes = read(src, limits::EXTRA_FILE_MAX)?;
        extras.push((dst.clone(), bytes, perm, src.clone()));
    }
    // A BOM given as a bare file name has the empty parent: its certificates are in ".".
    let bom_dir = spec
        .bom
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut bom_certs = Vec::new();
    for t in &bom.bom.policy.trust {
        let p = bom_dir.join(t);
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = read(&p, limits::CERT_FILE_MAX)?;
        bom_certs.push((format!("bom-{name}"), p, bytes));
    }
    store_of(&bom_certs)?;
    Ok((SmallInputs { init, extras }, bom_certs))
}

/// The module files to pack, in the closure's order (overrides replace the tree's file),
/// each module's exports added to `symvers`; and every symbol they import.
fn module_files<'c>(
    spec: &Spec,
    tree: &KernelTree,
    clo: &'c Closure,
    files: &mut ReadModules,
    symvers: &mut Symvers,
) -> Result<(Vec<ModuleFile<'c>>, BTreeSet<String>), BuildError> {
    let mut module_files: Vec<ModuleFile<'c>> = Vec::new();
    let mut referenced = BTreeSet::new();
    for (name, rel) in &clo.files {
        let (src, bytes) = match files.remove(name) {
            Some(f) => f,
            None => {
                let src = module_source(spec, tree, name, rel);
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
            referenced.extend(elf.versions().map(|v| v.symbol.to_string()));
            referenced.extend(elf.undefined().map(|u| u.name.to_string()));
        }
        module_files.push((name, rel, src, bytes));
    }
    Ok((module_files, referenced))
}

/// The module gate over every packed module, as the init will run it.
fn gate_modules(
    bom: &LoadedBom,
    trust: &TrustStore,
    symvers: &Symvers,
    vermagic: &str,
    gained: &[HashAlg],
    module_files: &[ModuleFile<'_>],
) -> Result<(), BuildError> {
    let mut policy = validator::gate::Policy::from_bom(&bom.bom);
    policy.kernel_vermagic = Some(vermagic.to_string());
    // The init loads each packed digest provider before the modules that need it.
    for d in gained {
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
    Ok(())
}

/// The archive's layout: directories, the console, the init, the BOM, the modules and
/// their index, the trust store, the CRC table, the vermagic and the extra files.
#[expect(clippy::too_many_arguments, reason = "every input of the layout")]
fn pack(
    small: SmallInputs,
    bom: &LoadedBom,
    tree: &KernelTree,
    clo: &Closure,
    module_files: Vec<ModuleFile<'_>>,
    trust_files: &[TrustFile],
    symvers: &Symvers,
    vermagic: &str,
) -> Result<Archive, BuildError> {
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
    a.file("init", small.init, 0o755)?;
    a.file("etc/validator/bom.toml", bom.bytes.clone(), 0o644)?;
    let mdir = format!("lib/modules/{}", tree.release);
    a.dir(&mdir)?;
    for (_, rel, _, bytes) in module_files {
        a.file(&format!("{mdir}/{rel}"), bytes, 0o644)?;
    }
    for (name, path, bytes) in trust_files {
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
    for (dst, bytes, perm, src) in small.extras {
        a.file(&dst, bytes, perm)
            .map_err(|source| BuildError::Entry { path: src, source })?;
    }
    Ok(a)
}

/// The module configuration the init will read from the initramfs: the extra files put
/// in `modprobe.d` directories, in `modprobe`'s order (the command line is the node's, so
/// not known here).
pub(crate) fn initramfs_module_config(
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

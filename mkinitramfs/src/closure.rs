//! The dependency closure of a list of modules, taken from an unpacked kernel tree.
//!
//! Debian's kernel package ships no `modules.dep` (depmod runs at install time), so the
//! closure is computed from each module's own `.modinfo`: `depends=` for hard
//! dependencies and `softdep=` for `pre:`/`post:` soft dependencies. A soft dependency may
//! name an alias (ext4's `pre: crc32c`); it is resolved to every module that declares that
//! alias, looking first at modules whose name contains it and then at all of them, and is
//! dropped when a built-in module provides it (`modules.builtin.modinfo`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use validator::formats::kmod::index::{
    name_of_path, parse_builtin, parse_softdep_value, Entry, Index, SoftDeps,
};
use validator::formats::kmod::modinfo::{self, Compression, ModuleElf};

/// A closure problem.
#[derive(Debug, thiserror::Error)]
pub enum ClosureError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: no lib/modules/<release> directory found")]
    NoModuleDir(PathBuf),
    #[error("{0}: more than one lib/modules/<release> directory; name one")]
    AmbiguousModuleDir(PathBuf),
    #[error("module {0} is neither in the kernel tree nor built in")]
    Unknown(String),
    #[error("module {module} depends on {dep}, which is neither in the kernel tree nor built in")]
    MissingDependency { module: String, dep: String },
    #[error("{path}: {source}")]
    Module {
        path: PathBuf,
        source: modinfo::ModFileError,
    },
    #[error(transparent)]
    Input(#[from] validator::util::fs::InputError),
}

/// An optional index file: absent is empty, anything else unreadable is an error.
fn read_optional(path: &Path) -> Result<Vec<u8>, ClosureError> {
    use validator::util::fs::{read_limited, InputError};
    match read_limited(path, crate::limits::INDEX_MAX) {
        Ok(b) => Ok(b),
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(Vec::new())
        }
        Err(e) => Err(e.into()),
    }
}

/// An unpacked kernel: its module directory and files.
#[derive(Debug, Clone)]
pub struct KernelTree {
    /// `.../lib/modules/<release>`.
    pub moddir: PathBuf,
    pub release: String,
    /// `boot/vmlinuz-<release>` when the tree is a whole package.
    pub vmlinuz: Option<PathBuf>,
    /// Module name to path relative to `moddir`.
    pub files: BTreeMap<String, String>,
    pub builtin: BTreeSet<String>,
    /// Aliases provided by built-in modules.
    pub builtin_aliases: BTreeSet<String>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ClosureError + '_ {
    move |source| ClosureError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) -> Result<(), ClosureError> {
    let mut ents: Vec<_> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .filter_map(Result::ok)
        .collect();
    ents.sort_by_key(|e| e.file_name());
    for e in ents {
        let p = e.path();
        let ft = e.file_type().map_err(io(&p))?;
        if ft.is_dir() {
            walk(&p, base, out)?;
        } else if ft.is_file() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".ko")
                || name.ends_with(".ko.xz")
                || name.ends_with(".ko.zst")
                || name.ends_with(".ko.gz")
            {
                if let Ok(rel) = p.strip_prefix(base) {
                    out.push(rel.to_string_lossy().into_owned());
                }
            }
        }
    }
    Ok(())
}

impl KernelTree {
    /// Opens an unpacked kernel package (`<root>/lib/modules/<release>`, `<root>/boot`) or
    /// a module directory itself.
    pub fn open(root: &Path) -> Result<KernelTree, ClosureError> {
        let (moddir, pkgroot) = if root.join("lib/modules").is_dir() {
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("lib/modules"))
                .map_err(io(root))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("kernel").is_dir())
                .collect();
            dirs.sort();
            match dirs.len() {
                0 => return Err(ClosureError::NoModuleDir(root.into())),
                1 => (dirs.remove(0), Some(root.to_path_buf())),
                _ => return Err(ClosureError::AmbiguousModuleDir(root.into())),
            }
        } else if root.join("kernel").is_dir() {
            (root.to_path_buf(), None)
        } else {
            return Err(ClosureError::NoModuleDir(root.into()));
        };
        let release = moddir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let vmlinuz = pkgroot
            .map(|r| r.join(format!("boot/vmlinuz-{release}")))
            .filter(|p| p.is_file());
        let mut paths = Vec::new();
        walk(&moddir, &moddir, &mut paths)?;
        let mut files: BTreeMap<String, String> = BTreeMap::new();
        for p in paths {
            let name = name_of_path(&p);
            // As depmod searches: updates/ and extra/ override kernel/.
            let prefer = !p.starts_with("kernel/");
            match files.get(&name) {
                Some(old) if !prefer || !old.starts_with("kernel/") => {}
                _ => {
                    files.insert(name, p);
                }
            }
        }
        let builtin = parse_builtin(&String::from_utf8_lossy(&read_optional(
            &moddir.join("modules.builtin"),
        )?));
        let mut builtin_aliases = BTreeSet::new();
        for rec in read_optional(&moddir.join("modules.builtin.modinfo"))?.split(|&c| c == 0) {
            let rec = String::from_utf8_lossy(rec);
            if let Some((_, v)) = rec.split_once(".alias=") {
                builtin_aliases.insert(v.to_string());
            }
        }
        Ok(KernelTree {
            moddir,
            release,
            vmlinuz,
            files,
            builtin,
            builtin_aliases,
        })
    }

    /// Reads, decompresses and parses one module by name.
    pub fn module(&self, name: &str) -> Result<(String, Vec<u8>, ModuleElf), ClosureError> {
        let rel = self
            .files
            .get(name)
            .ok_or_else(|| ClosureError::Unknown(name.into()))?
            .clone();
        let path = self.moddir.join(&rel);
        let raw = validator::util::fs::read_limited(&path, crate::limits::MODULE_FILE_MAX)?;
        let image = modinfo::decompress(&raw, Compression::from_name(&rel)).map_err(|source| {
            ClosureError::Module {
                path: path.clone(),
                source,
            }
        })?;
        let elf =
            modinfo::parse_elf(&image).map_err(|source| ClosureError::Module { path, source })?;
        Ok((rel, raw, elf))
    }
}

impl KernelTree {
    /// The modules that give the kernel's crypto API the digest `digest`: the tree's
    /// modules under a `crypto/` directory (`kernel/crypto/`, `kernel/arch/*/crypto/`,
    /// where the crypto API's implementations live) whose `.modinfo` declares
    /// `alias=crypto-<digest>` (what `request_module("crypto-sha512")` would load); only
    /// the generic C implementation (`*_generic`) when there is one, which loads on every
    /// CPU. Empty when none does.
    pub fn digest_providers(
        &self,
        digest: validator::trust::HashAlg,
    ) -> Result<Vec<String>, ClosureError> {
        let mut found = Vec::new();
        for (name, rel) in &self.files {
            if !rel.contains("/crypto/") {
                continue;
            }
            let (_, _, elf) = self.module(name)?;
            if validator::gate::provided_digests(elf.modinfo.all("alias")).contains(&digest) {
                found.push(name.clone());
            }
        }
        let generic: Vec<String> = found
            .iter()
            .filter(|n| n.ends_with("_generic"))
            .cloned()
            .collect();
        Ok(if generic.is_empty() { found } else { generic })
    }
}

/// The closure: which modules to pack, and the index describing them.
#[derive(Debug, Clone, Default)]
pub struct Closure {
    /// Name to path relative to the module directory.
    pub files: BTreeMap<String, String>,
    /// The index to write into the initramfs (transitive deps, kmod order).
    pub index: Index,
    /// Requested modules that are built into the kernel.
    pub builtin: Vec<String>,
    /// Soft dependencies nothing provides (modprobe ignores these too).
    pub unresolved_softdeps: Vec<String>,
}

struct Walker<'a> {
    tree: &'a KernelTree,
    direct: BTreeMap<String, Vec<String>>,
    soft: BTreeMap<String, SoftDeps>,
    aliases: Option<BTreeMap<String, BTreeSet<String>>>,
    unresolved: BTreeSet<String>,
}

impl Walker<'_> {
    fn aliases_of(&mut self, name: &str) -> Result<BTreeSet<String>, ClosureError> {
        let scan = |tree: &KernelTree,
                    names: &mut dyn Iterator<Item = &String>|
         -> Result<BTreeMap<String, BTreeSet<String>>, ClosureError> {
            let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for n in names {
                let (_, _, elf) = tree.module(n)?;
                for a in elf.modinfo.all("alias") {
                    m.entry(validator::formats::kmod::normalize_name(a))
                        .or_default()
                        .insert(n.clone());
                }
            }
            Ok(m)
        };
        let key = validator::formats::kmod::normalize_name(name);
        // Cheap first: modules whose own name contains the alias.
        let mut near = self.tree.files.keys().filter(|n| n.contains(&key));
        let quick = scan(self.tree, &mut near)?;
        if let Some(s) = quick.get(&key) {
            return Ok(s.clone());
        }
        if self.aliases.is_none() {
            let mut all = self.tree.files.keys();
            self.aliases = Some(scan(self.tree, &mut all)?);
        }
        Ok(self
            .aliases
            .as_ref()
            .and_then(|m| m.get(&key))
            .cloned()
            .unwrap_or_default())
    }

    /// Resolves a softdep word to module names.
    fn resolve_soft(&mut self, word: &str) -> Result<Vec<String>, ClosureError> {
        if self.tree.files.contains_key(word) {
            return Ok(vec![word.to_string()]);
        }
        if self.tree.builtin.contains(word)
            || self
                .tree
                .builtin_aliases
                .iter()
                .any(|a| validator::formats::kmod::normalize_name(a) == word)
        {
            return Ok(vec![]);
        }
        let provided = self.aliases_of(word)?;
        if provided.is_empty() {
            self.unresolved.insert(word.to_string());
        }
        Ok(provided.into_iter().collect())
    }

    fn visit(&mut self, name: &str) -> Result<(), ClosureError> {
        if self.direct.contains_key(name) {
            return Ok(());
        }
        let (_, _, elf) = self.tree.module(name)?;
        let deps = elf.modinfo.depends();
        self.direct.insert(name.to_string(), deps.clone());
        for d in &deps {
            if self.tree.builtin.contains(d) {
                continue;
            }
            if !self.tree.files.contains_key(d) {
                return Err(ClosureError::MissingDependency {
                    module: name.into(),
                    dep: d.clone(),
                });
            }
            self.visit(d)?;
        }
        let mut sd = SoftDeps::default();
        for v in elf
            .modinfo
            .all("softdep")
            .map(str::to_string)
            .collect::<Vec<_>>()
        {
            let parsed = parse_softdep_value(&v);
            for w in parsed.pre {
                sd.pre.extend(self.resolve_soft(&w)?);
            }
            for w in parsed.post {
                sd.post.extend(self.resolve_soft(&w)?);
            }
        }
        for m in sd
            .pre
            .iter()
            .chain(sd.post.iter())
            .cloned()
            .collect::<Vec<_>>()
        {
            self.visit(&m)?;
        }
        if !sd.pre.is_empty() || !sd.post.is_empty() {
            self.soft.insert(name.to_string(), sd);
        }
        Ok(())
    }

    /// Post-order of `name`'s hard dependencies (each after its own), without `name`.
    fn load_order(&self, name: &str, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if let Some(ds) = self.direct.get(name) {
            for d in ds {
                if self.direct.contains_key(d) && seen.insert(d.clone()) {
                    self.load_order(d, seen, out);
                    out.push(d.clone());
                }
            }
        }
    }
}

/// Computes the closure of `names` in `tree`.
pub fn closure(tree: &KernelTree, names: &[String]) -> Result<Closure, ClosureError> {
    let mut w = Walker {
        tree,
        direct: BTreeMap::new(),
        soft: BTreeMap::new(),
        aliases: None,
        unresolved: BTreeSet::new(),
    };
    let mut builtin = Vec::new();
    for n in names {
        let n = validator::formats::kmod::normalize_name(n);
        if tree.files.contains_key(&n) {
            w.visit(&n)?;
        } else if tree.builtin.contains(&n) {
            builtin.push(n);
        } else {
            return Err(ClosureError::Unknown(n));
        }
    }
    let mut out = Closure {
        builtin,
        unresolved_softdeps: w.unresolved.iter().cloned().collect(),
        ..Closure::default()
    };
    for name in w.direct.keys() {
        let mut order = Vec::new();
        w.load_order(name, &mut BTreeSet::new(), &mut order);
        order.reverse(); // kmod order: the one to load first comes last
        let path = tree
            .files
            .get(name)
            .cloned()
            .ok_or_else(|| ClosureError::Unknown(name.clone()))?;
        out.files.insert(name.clone(), path.clone());
        out.index
            .entries
            .insert(name.clone(), Entry { path, deps: order });
    }
    out.index.softdeps = w.soft;
    out.index.builtin = tree.builtin.clone();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real Debian kernel unpacked by `scripts/provision`.
    fn tree() -> Option<KernelTree> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kernels/default");
        assert!(
            root.exists(),
            "no kernel at {}: run scripts/provision first",
            root.display()
        );
        Some(KernelTree::open(&root).unwrap())
    }

    #[test]
    fn ext4_and_virtio_closure_of_the_real_kernel() {
        let Some(t) = tree() else { return };
        assert!(t.files.len() > 3000, "{}", t.files.len());
        assert!(t.vmlinuz.is_some());
        let c = closure(
            &t,
            &["virtio_blk".into(), "ext4".into(), "virtio-pci".into()],
        )
        .unwrap();
        for m in [
            "ext4",
            "jbd2",
            "mbcache",
            "crc16",
            "virtio_blk",
            "virtio_pci",
            "virtio_pci_modern_dev",
        ] {
            assert!(
                c.files.contains_key(m),
                "{m} missing from {:?}",
                c.files.keys()
            );
        }
        // ext4's transitive deps, kmod order: jbd2/mbcache/crc16 all listed.
        let e = &c.index.entries["ext4"];
        for d in ["jbd2", "mbcache", "crc16"] {
            assert!(e.deps.iter().any(|x| x == d), "{:?}", e.deps);
        }
        // ext4's softdep on the crc32c alias resolves to real modules.
        let sd = &c.index.softdeps["ext4"];
        assert!(sd.pre.iter().any(|m| m.starts_with("crc32c")), "{sd:?}");
        // The index round-trips through its own text form.
        let dep = validator::formats::kmod::index::parse_dep(&c.index.dep_text(), Path::new("d"))
            .unwrap();
        assert_eq!(dep, c.index.entries);
    }

    #[test]
    fn unknown_and_builtin_names() {
        let Some(t) = tree() else { return };
        assert!(matches!(
            closure(&t, &["no_such_module".into()]),
            Err(ClosureError::Unknown(_))
        ));
        let b = t.builtin.iter().next().unwrap().clone();
        let c = closure(&t, std::slice::from_ref(&b)).unwrap();
        assert_eq!(c.builtin, vec![b]);
        assert!(c.files.is_empty());
    }

    /// Deps are followed transitively and a missing dep is named.
    #[test]
    fn synthetic_order() {
        let Some(t) = tree() else { return };
        // virtio_blk -> virtio_ring/virtio: both before it in the transitive list.
        let c = closure(&t, &["virtio_blk".into()]).unwrap();
        let deps = &c.index.entries["virtio_blk"].deps;
        assert!(
            deps.contains(&"virtio".to_string()) && deps.contains(&"virtio_ring".to_string()),
            "{deps:?}"
        );
        let mut t2 = t.clone();
        t2.files.remove("virtio_ring");
        let e = closure(&t2, &["virtio_blk".into()]).unwrap_err();
        assert!(e.to_string().contains("depends on virtio_ring"), "{e}");
    }
}

//! Stage `modules`: load the BOM's modules, each after its dependencies, with
//! `finit_module(2)` directly (no kmod binary).
//!
//! Dependencies come from the initramfs's own index ([`index`]): `modules.dep` for hard
//! dependencies, `modules.softdep` for `pre:`/`post:` soft dependencies (whose failure is
//! reported but, as with modprobe, not fatal), `modules.builtin` for modules compiled into
//! the kernel. A module already live in `/sys/module` is not loaded again; `EEXIST` from
//! the kernel means the same. A module whose hard dependency failed is not attempted.
//! Compressed modules go to the kernel as files only when `/sys/module/compression` names
//! their compression; otherwise they are decompressed here and passed by `init_module(2)`.

pub mod index;
pub mod modinfo;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::sys;
pub use index::Index;
use modinfo::Compression;

/// What happened to one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModStatus {
    Loaded,
    AlreadyLoaded,
    Builtin,
    /// The kernel refused it (errno in the report).
    Failed,
    /// Not attempted: a dependency failed or the file is missing from the index.
    Skipped,
}

/// One line of the report's `modules` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleReport {
    pub name: String,
    pub status: ModStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Symbolic errno (`ENOENT`) when the kernel refused the module.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Loaded as a soft dependency of another module (its failure is not fatal).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub softdep: bool,
    pub duration_us: u64,
}

impl ModuleReport {
    fn new(name: &str, status: ModStatus) -> ModuleReport {
        ModuleReport {
            name: name.to_string(),
            status,
            path: None,
            errno: None,
            message: None,
            softdep: false,
            duration_us: 0,
        }
    }

    /// Whether this outcome lets dependants load.
    pub fn ok(&self) -> bool {
        matches!(
            self.status,
            ModStatus::Loaded | ModStatus::AlreadyLoaded | ModStatus::Builtin
        )
    }
}

/// Loads modules from one module directory (`/lib/modules/<release>`).
#[derive(Debug)]
pub struct Loader {
    pub dir: PathBuf,
    pub index: Index,
    /// The sysfs root (`/sys` on a live system).
    pub sys_root: PathBuf,
    results: BTreeMap<String, ModuleReport>,
    order: Vec<String>,
}

impl Loader {
    pub fn new(dir: &Path, index: Index, sys_root: &Path) -> Loader {
        Loader {
            dir: dir.to_path_buf(),
            index,
            sys_root: sys_root.to_path_buf(),
            results: BTreeMap::new(),
            order: Vec::new(),
        }
    }

    /// Loads each named module (and what it needs); returns one report per module touched,
    /// in the order they were handled.
    pub fn load_all(&mut self, names: &[String]) -> Vec<ModuleReport> {
        for n in names {
            self.load(&crate::bom::normalize_module_name(n), false, 0);
        }
        self.order
            .iter()
            .filter_map(|n| self.results.get(n).cloned())
            .collect()
    }

    fn record(&mut self, r: ModuleReport) -> bool {
        let ok = r.ok();
        self.order.push(r.name.clone());
        self.results.insert(r.name.clone(), r);
        ok
    }

    fn load(&mut self, name: &str, softdep: bool, depth: u32) -> bool {
        if let Some(r) = self.results.get(name) {
            return r.ok();
        }
        if depth > 64 {
            let mut r = ModuleReport::new(name, ModStatus::Skipped);
            r.message = Some("dependency chain deeper than 64 (a cycle?)".into());
            return self.record(r);
        }
        if self.index.builtin.contains(name) {
            return self.record(ModuleReport::new(name, ModStatus::Builtin));
        }
        let Some(entry) = self.index.entries.get(name).cloned() else {
            let mut r = ModuleReport::new(name, ModStatus::Skipped);
            r.softdep = softdep;
            r.message = Some("not in the initramfs module index (modules.dep)".into());
            return self.record(r);
        };
        let soft = self.index.softdeps.get(name).cloned().unwrap_or_default();
        for p in &soft.pre {
            self.load(p, true, depth + 1);
        }
        for d in &entry.deps {
            if !self.load(d, softdep, depth + 1) {
                let mut r = ModuleReport::new(name, ModStatus::Skipped);
                r.path = Some(entry.path.clone());
                r.softdep = softdep;
                r.message = Some(format!("dependency {d} did not load"));
                return self.record(r);
            }
        }
        let mut r = self.load_one(name, &entry.path);
        r.softdep = softdep;
        let ok = self.record(r);
        if ok {
            for p in &soft.post {
                self.load(p, true, depth + 1);
            }
        }
        ok
    }

    fn is_live(&self, name: &str) -> bool {
        self.sys_root
            .join("module")
            .join(name)
            .join("initstate")
            .exists()
    }

    fn kernel_compression(&self) -> Option<String> {
        std::fs::read_to_string(self.sys_root.join("module/compression"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn load_one(&self, name: &str, rel: &str) -> ModuleReport {
        let start = Instant::now();
        let mut r = ModuleReport::new(name, ModStatus::Loaded);
        r.path = Some(rel.to_string());
        if self.is_live(name) {
            r.status = ModStatus::AlreadyLoaded;
            return r;
        }
        let path = self.dir.join(rel);
        let fail = |mut r: ModuleReport, errno: Option<String>, msg: String| {
            r.status = ModStatus::Failed;
            r.errno = errno;
            r.message = Some(msg);
            r
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                return fail(
                    r,
                    sys::io_errno_name(&e),
                    format!("open {}: {e}", path.display()),
                )
            }
        };
        let comp = Compression::from_name(rel);
        let result = if comp == Compression::None
            || self.kernel_compression().as_deref() == Some(comp.sysfs_name())
        {
            sys::finit_module(&file, "", comp != Compression::None, name)
        } else {
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    return fail(
                        r,
                        sys::io_errno_name(&e),
                        format!("read {}: {e}", path.display()),
                    )
                }
            };
            match modinfo::decompress(&bytes, comp) {
                Ok(image) => sys::init_module(&image, "", name),
                Err(e) => return fail(r, None, format!("{}: {e}", path.display())),
            }
        };
        r.duration_us = start.elapsed().as_micros() as u64;
        match result {
            Ok(()) => r,
            Err(e) if e.errno == nix::errno::Errno::EEXIST => {
                r.status = ModStatus::AlreadyLoaded;
                r
            }
            Err(e) => {
                let n = e.errno_name();
                fail(r, Some(n), e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use index::{Entry, SoftDeps};

    fn idx() -> Index {
        let mut i = Index::default();
        let mut add = |n: &str, deps: &[&str]| {
            i.entries.insert(
                n.into(),
                Entry {
                    path: format!("kernel/{n}.ko"),
                    deps: deps.iter().map(|s| s.to_string()).collect(),
                },
            );
        };
        add("ext4", &["jbd2", "mbcache", "crc16"]);
        add("jbd2", &[]);
        add("mbcache", &[]);
        add("crc16", &[]);
        add("crc32c_generic", &[]);
        i.softdeps.insert(
            "ext4".into(),
            SoftDeps {
                pre: vec!["crc32c_generic".into(), "crc32c".into()],
                post: vec![],
            },
        );
        i.builtin.insert("crc16".into());
        i
    }

    /// Without root or real modules: every file is missing, so loads fail with ENOENT at
    /// open, and the order, softdeps, builtins and skipping are what we check.
    #[test]
    fn order_and_failures_without_files() {
        let tmp = std::env::temp_dir().join(format!("vld-mod-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("sys/module/mbcache")).unwrap();
        std::fs::write(tmp.join("sys/module/mbcache/initstate"), "live\n").unwrap();
        let mut l = Loader::new(&tmp.join("lib"), idx(), &tmp.join("sys"));
        let r = l.load_all(&["ext4".into()]);
        let names: Vec<_> = r.iter().map(|m| (m.name.as_str(), m.status)).collect();
        assert_eq!(
            names,
            vec![
                ("crc32c_generic", ModStatus::Failed),
                ("crc32c", ModStatus::Skipped),
                ("jbd2", ModStatus::Failed),
                ("ext4", ModStatus::Skipped),
            ]
        );
        assert_eq!(r[0].errno.as_deref(), Some("ENOENT"));
        assert!(r[0].softdep && r[1].softdep && !r[2].softdep);
        assert_eq!(
            r[3].message.as_deref(),
            Some("dependency jbd2 did not load")
        );
        // The live and built-in modules are reported once asked for directly.
        let r = l.load_all(&["mbcache".into(), "crc16".into()]);
        let st: Vec<_> = r.iter().map(|m| m.status).collect();
        assert!(st.contains(&ModStatus::AlreadyLoaded) && st.contains(&ModStatus::Builtin));
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

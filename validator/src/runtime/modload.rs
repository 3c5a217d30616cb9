//! Loading gated modules, shared by the `modules` stage (the initramfs's modules) and the
//! preflight's root drivers (the BOM's `modules.root` on the verified root): the module
//! directory's index ([`load_index`]), the [`Loader`] that plans each module after its
//! dependencies, judges it with the [`Gate`] and hands it to `finit_module(2)` (or
//! `init_module(2)` for a compression the kernel cannot read), and the report line of
//! each module ([`ModuleReport`]).
//!
//! Dependencies come from the directory's own index: `modules.dep` for hard
//! dependencies, `modules.softdep` for `pre:`/`post:` soft dependencies (whose failure is
//! reported but, as with modprobe, not fatal), `modules.builtin` for modules compiled into
//! the kernel. A module already live in `/sys/module` is not loaded again; `EEXIST` from
//! the kernel means the same. A module whose hard dependency failed is not attempted.
//! With a [`Gate`] every module is mapped once ([`sys::mmap::Mapped`], no copy), judged,
//! and only then handed to the kernel: an uncompressed module as the same open file
//! (`finit_module`), a compressed one as the image the gate decompressed from the judged
//! bytes (`init_module`, so it is decompressed once); a refused module is reported as
//! `rejected` and the kernel never sees it. The pages the gate has hashed are released as
//! it goes ([`Gate::check_releasing`]), so PID 1's memory does not grow with the largest
//! module.
//!
//! A module whose signature needs a digest the kernel does not have built in (sha512 on
//! Debian 6.1) passes only once a module that provides it has loaded: the initramfs lists
//! that crypto module as its `pre:` soft dependency, and when the gate refuses for an
//! unsupported crypto the loader asks the kernel (`<proc>/crypto`, [`Loader::proc_root`])
//! which digests it holds now, records them in the gate's
//! [`crate::gate::ModuleDigests`], and judges the module again: the kernel's answer at
//! the moment it would be asked.
//!
//! Current limits: a module is at most [`MODULE_FILE_MAX`] bytes; a compressed module's
//! image is held whole in memory while it loads; a module signed with a digest other than
//! SHA-256 is read a second time for that digest without releasing its pages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::formats::kmod::index::{Index, IndexError};
use crate::formats::kmod::modinfo::{self, Compression};
use crate::gate::batch::MODULE_FILE_MAX;
use crate::gate::{self, Gate};
use crate::sys;
use crate::util::fs::{open_input, read_text_limited, InputError};

/// What happened to one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModStatus {
    Loaded,
    AlreadyLoaded,
    Builtin,
    /// The kernel refused it (errno in the report).
    Failed,
    /// The module gate refused it; the kernel was never asked to load it.
    Rejected,
    /// Not attempted: a dependency failed or the file is missing from the index.
    Skipped,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One line of the report's `modules` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModuleReport {
    pub name: String,
    pub status: ModStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Symbolic errno (`ENOENT`) when the kernel refused the module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Loaded as a soft dependency of another module (its failure is not fatal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub softdep: bool,
    /// Why the module gate refused it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<gate::Reason>,
    /// The signature as `modinfo` shows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig_hashalgo: Option<String>,
    /// SHA-256 of the module image the kernel was given (decompressed, signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// When the module's turn came (CLOCK_BOOTTIME, µs); 0 when it was not attempted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub start_us: u64,
    /// Time spent in the gate (part of `duration_us`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gate_us: u64,
    pub duration_us: u64,
}

impl ModuleReport {
    pub(crate) fn new(name: &str, status: ModStatus) -> ModuleReport {
        ModuleReport {
            name: name.to_string(),
            status,
            path: None,
            errno: None,
            message: None,
            softdep: false,
            reasons: Vec::new(),
            signer: None,
            sig_key: None,
            sig_hashalgo: None,
            sha256: None,
            start_us: 0,
            gate_us: 0,
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

/// One module in a load plan.
#[derive(Debug, Clone)]
struct Node {
    name: String,
    path: String,
    softdep: bool,
    /// Hard dependencies: must have loaded first, else this one is skipped.
    hard: Vec<usize>,
    /// `pre:` soft dependencies: attempted first, their failure does not matter.
    pre: Vec<usize>,
    /// For a `post:` soft dependency: the module it follows (loaded only if that loaded).
    post_of: Option<usize>,
    /// Decided without loading (built in, not in the index, cycle).
    preset: Option<ModuleReport>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Running,
    Done(bool),
    /// Never attempted: the module it was a post-softdep of did not load.
    Dropped,
}

/// Loads modules from one module directory (`/lib/modules/<release>`).
#[derive(Debug)]
pub struct Loader {
    pub dir: PathBuf,
    pub index: Index,
    /// The sysfs root (`/sys` on a live system).
    pub sys_root: PathBuf,
    /// Worker threads; independent modules load in parallel (the kernel allows it).
    pub jobs: usize,
    /// The module gate every load goes through (`None`: no gate, e.g. in unit tests).
    pub gate: Option<Gate>,
    /// The procfs root (`/proc` on a live system), where the kernel lists the digests it
    /// holds (`crypto`); `None`: only the gate's own knowledge of the kernel counts.
    pub proc_root: Option<PathBuf>,
    nodes: Vec<Node>,
    by_name: BTreeMap<String, usize>,
}

impl Loader {
    pub fn new(dir: &Path, index: Index, sys_root: &Path) -> Loader {
        Loader {
            dir: dir.to_path_buf(),
            index,
            sys_root: sys_root.to_path_buf(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            gate: None,
            proc_root: None,
            nodes: Vec::new(),
            by_name: BTreeMap::new(),
        }
    }

    /// Loads each named module (and what it needs); returns one report per module touched,
    /// in plan order (each module after what it waits for), whatever the timing was.
    pub fn load_all(&mut self, names: &[String]) -> Vec<ModuleReport> {
        self.nodes.clear();
        self.by_name.clear();
        let mut visiting = Vec::new();
        for n in names {
            self.plan(
                &crate::formats::kmod::normalize_name(n),
                false,
                None,
                &mut visiting,
            );
        }
        self.execute()
    }

    fn push(&mut self, mut node: Node) -> usize {
        let i = self.nodes.len();
        if let Some(r) = node.preset.as_mut() {
            r.softdep = node.softdep;
        }
        self.by_name.insert(node.name.clone(), i);
        self.nodes.push(node);
        i
    }

    fn preset(
        &mut self,
        name: &str,
        softdep: bool,
        post_of: Option<usize>,
        r: ModuleReport,
    ) -> usize {
        self.push(Node {
            name: name.to_string(),
            path: String::new(),
            softdep,
            hard: vec![],
            pre: vec![],
            post_of,
            preset: Some(r),
        })
    }

    /// Adds `name` and everything it waits for to the plan (post-order: dependencies
    /// first); returns its node.
    fn plan(
        &mut self,
        name: &str,
        softdep: bool,
        post_of: Option<usize>,
        visiting: &mut Vec<String>,
    ) -> usize {
        if let Some(&i) = self.by_name.get(name) {
            return i;
        }
        if visiting.iter().any(|v| v == name) || visiting.len() > 64 {
            let mut r = ModuleReport::new(name, ModStatus::Skipped);
            r.message = Some(format!(
                "dependency cycle through {}",
                visiting.join(" -> ")
            ));
            return self.preset(name, softdep, post_of, r);
        }
        if self.index.builtin.contains(name) {
            return self.preset(
                name,
                softdep,
                post_of,
                ModuleReport::new(name, ModStatus::Builtin),
            );
        }
        let Some(entry) = self.index.entries.get(name).cloned() else {
            let mut r = ModuleReport::new(name, ModStatus::Skipped);
            r.message = Some(format!(
                "not in the module index ({})",
                self.dir.join("modules.dep").display()
            ));
            return self.preset(name, softdep, post_of, r);
        };
        let soft = self.index.softdeps.get(name).cloned().unwrap_or_default();
        visiting.push(name.to_string());
        let pre: Vec<usize> = soft
            .pre
            .iter()
            .map(|p| self.plan(p, true, None, visiting))
            .collect();
        // modules.dep lists the one to load first last.
        let hard: Vec<usize> = entry
            .deps
            .iter()
            .rev()
            .map(|d| self.plan(d, softdep, None, visiting))
            .collect();
        visiting.pop();
        let me = self.push(Node {
            name: name.to_string(),
            path: entry.path.clone(),
            softdep,
            hard,
            pre,
            post_of,
            preset: None,
        });
        for q in &soft.post {
            visiting.push(name.to_string());
            self.plan(q, true, Some(me), visiting);
            visiting.pop();
        }
        me
    }

    /// Runs the plan with `jobs` workers.
    fn execute(&self) -> Vec<ModuleReport> {
        use std::sync::{Condvar, Mutex};
        let n = self.nodes.len();
        // Node i's state and result (indexes come from the plan; `get` keeps a bad one
        // from panicking: a missing node reads as dropped).
        fn state(states: &[State], j: usize) -> State {
            states.get(j).copied().unwrap_or(State::Dropped)
        }
        fn settle(
            states: &mut [State],
            results: &mut [Option<ModuleReport>],
            i: usize,
            s: State,
            r: Option<ModuleReport>,
        ) {
            if let (Some(st), Some(res)) = (states.get_mut(i), results.get_mut(i)) {
                *st = s;
                if r.is_some() {
                    *res = r;
                }
            }
        }
        let mut states = vec![State::Waiting; n];
        let mut results: Vec<Option<ModuleReport>> = vec![None; n];
        for (i, node) in self.nodes.iter().enumerate() {
            if let (Some(r), None) = (&node.preset, node.post_of) {
                settle(
                    &mut states,
                    &mut results,
                    i,
                    State::Done(r.ok()),
                    Some(r.clone()),
                );
            }
        }
        let shared = Mutex::new((states, results));
        let cv = Condvar::new();
        let worker = || loop {
            let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
            let pick = loop {
                let (states, results) = &mut *g;
                let mut pick = None;
                for (i, node) in self.nodes.iter().enumerate() {
                    if state(states, i) != State::Waiting {
                        continue;
                    }
                    if let Some(p) = node.post_of {
                        match state(states, p) {
                            State::Done(true) => {}
                            State::Done(false) | State::Dropped => {
                                settle(states, results, i, State::Dropped, None);
                                continue;
                            }
                            _ => continue,
                        }
                    }
                    let finished =
                        |j: &usize| matches!(state(states, *j), State::Done(_) | State::Dropped);
                    if !node.pre.iter().all(finished) || !node.hard.iter().all(finished) {
                        continue;
                    }
                    if let Some(&d) = node
                        .hard
                        .iter()
                        .find(|&&j| state(states, j) != State::Done(true))
                    {
                        let mut r = ModuleReport::new(&node.name, ModStatus::Skipped);
                        r.path = Some(node.path.clone());
                        r.softdep = node.softdep;
                        let dep = self.nodes.get(d).map_or("?", |n| n.name.as_str());
                        r.message = Some(format!("dependency {dep} did not load"));
                        settle(states, results, i, State::Done(false), Some(r));
                        continue;
                    }
                    if let Some(r) = &node.preset {
                        settle(states, results, i, State::Done(r.ok()), Some(r.clone()));
                        continue;
                    }
                    settle(states, results, i, State::Running, None);
                    pick = Some(i);
                    break;
                }
                let pending = states
                    .iter()
                    .any(|s| matches!(s, State::Waiting | State::Running));
                if pick.is_some() || !pending {
                    cv.notify_all();
                    break pick;
                }
                g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
            };
            drop(g);
            let Some((i, node)) = pick.and_then(|i| Some((i, self.nodes.get(i)?))) else {
                return;
            };
            let mut r = self.load_one(&node.name, &node.path);
            r.softdep = node.softdep;
            let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
            let (states, results) = &mut *g;
            settle(states, results, i, State::Done(r.ok()), Some(r));
            drop(g);
            cv.notify_all();
        };
        std::thread::scope(|s| {
            for _ in 1..self.jobs.max(1) {
                s.spawn(worker);
            }
            worker();
        });
        let (_, results) = shared.into_inner().unwrap_or_else(|p| p.into_inner());
        results.into_iter().flatten().collect()
    }

    fn is_live(&self, name: &str) -> bool {
        self.sys_root
            .join("module")
            .join(name)
            .join("initstate")
            .exists()
    }

    fn kernel_compression(&self) -> Option<String> {
        read_text_limited(
            &self.sys_root.join("module/compression"),
            crate::util::fs::SYSFS_VALUE_MAX,
        )
        .ok()
        .map(|s| s.trim().to_string())
    }

    /// Records in `gate` the digests the kernel now lists in `<proc>/crypto` that the gate
    /// did not know it had; whether there was one.
    fn kernel_gained_digests(&self, gate: &Gate) -> bool {
        let Some(proc_root) = &self.proc_root else {
            return false;
        };
        let known = &gate.policy.module_digests;
        let kc = gate
            .policy
            .release
            .as_deref()
            .and_then(gate::KernelRules::debian);
        let missing: Vec<_> = gate::DIGESTS
            .into_iter()
            .filter(|d| !known.has(*d) && kc.is_some_and(|k| !k.has_digest(*d)))
            .collect();
        if missing.is_empty() {
            return false;
        }
        // Unreadable: the kernel's list is unknown, so nothing is added and the verdict
        // stands.
        let Ok(text) = read_text_limited(
            &proc_root.join("crypto"),
            crate::formats::proccrypto::PROC_CRYPTO_MAX,
        ) else {
            return false;
        };
        let mut gained = false;
        for d in missing {
            if crate::formats::proccrypto::has_shash(&text, d.name()) {
                known.add(d);
                gained = true;
            }
        }
        gained
    }

    fn load_one(&self, name: &str, rel: &str) -> ModuleReport {
        let start = Instant::now();
        let mut r = ModuleReport::new(name, ModStatus::Loaded);
        r.start_us = sys::boottime_us().unwrap_or(0);
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
        // A regular file only: a FIFO would block the open, a directory or a device is
        // no module.
        let file = match open_input(&path, false) {
            Ok(f) => f,
            Err(e) => {
                let errno = match &e {
                    InputError::Io { source, .. } => sys::io_errno_name(source),
                    _ => None,
                };
                return fail(r, errno, format!("open {e}"));
            }
        };
        let comp = Compression::from_name(rel);
        // Map the file once: the gate judges exactly the bytes the kernel is then given,
        // the same open file (`finit_module` on it) or, for a compressed module, the image
        // the gate decompressed from these bytes (`init_module`: decompressed once, and
        // the kernel does not decompress it again). Pages already hashed are released as
        // the gate goes, so PID 1's memory does not grow with the module.
        let mut image = None;
        let kernel_decompresses = comp == Compression::None
            || self.kernel_compression().as_deref() == Some(comp.sysfs_name());
        if self.gate.is_some() || !kernel_decompresses {
            let map = match sys::mmap::Mapped::of(&file, &path, MODULE_FILE_MAX) {
                Ok(m) => m,
                Err(e) => {
                    let errno = match &e {
                        InputError::Io { source, .. } => sys::io_errno_name(source),
                        _ => None,
                    };
                    return fail(r, errno, format!("read {e}"));
                }
            };
            // A page that cannot be read must be an error here, not a SIGBUS in PID 1
            // when the gate touches it.
            if let Err(e) = map.check_readable() {
                return fail(
                    r,
                    Some("EIO".into()),
                    format!("read {}: {e}", path.display()),
                );
            }
            let raw = map.bytes();
            let release = |part: &[u8]| map.release(part);
            match &self.gate {
                Some(gate) => {
                    let t = Instant::now();
                    let (mut v, mut img) = gate.check_releasing(name, rel, raw, &release);
                    if !v.pass && self.kernel_gained_digests(gate) {
                        (v, img) = gate.check_releasing(name, rel, raw, &release);
                    }
                    r.gate_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                    r.signer = v.signer.clone();
                    r.sig_key = v.sig_key.clone();
                    r.sig_hashalgo = v.sig_hashalgo.clone();
                    r.sha256 = v.image_sha256.clone();
                    if !v.pass {
                        r.status = ModStatus::Rejected;
                        r.message = Some(v.summary());
                        r.reasons = v.reasons;
                        r.duration_us =
                            u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
                        return r;
                    }
                    if comp != Compression::None {
                        image = img.map(std::borrow::Cow::into_owned);
                    }
                }
                None => match modinfo::decompress(raw, comp) {
                    Ok(i) => image = Some(i),
                    Err(e) => return fail(r, None, format!("{}: {e}", path.display())),
                },
            }
        }
        let result = match &image {
            Some(i) => sys::init_module(i, "", name),
            None if kernel_decompresses => {
                sys::finit_module(&file, "", comp != Compression::None, name)
            }
            None => return fail(r, None, format!("{}: not decompressed", path.display())),
        };
        r.duration_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
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

/// Most bytes read from one module index file.
pub const INDEX_FILE_MAX: u64 = 16 << 20;

/// Reads the index of a module directory (`/lib/modules/<release>`): `modules.dep` is
/// required, `modules.softdep` and `modules.builtin` are empty when absent.
pub fn load_index(dir: &Path) -> Result<Index, IndexLoadError> {
    let read = |name: &str, required: bool| -> Result<String, IndexLoadError> {
        let path = dir.join(name);
        match read_text_limited(&path, INDEX_FILE_MAX) {
            Ok(s) => Ok(s),
            Err(InputError::Io { source, .. })
                if !required && source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(String::new())
            }
            Err(e) => Err(IndexLoadError::Read(e)),
        }
    };
    Ok(Index::from_texts(
        dir,
        &read("modules.dep", true)?,
        &read("modules.softdep", false)?,
        &read("modules.builtin", false)?,
    )?)
}

/// Why a module directory's index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IndexLoadError {
    #[error("module index: {0}")]
    Read(InputError),
    #[error("module index: {0}")]
    Parse(#[from] IndexError),
}

#[cfg(test)]
mod tests {
    //! The load plan's order, softdeps and skipping, and the limits on reading module
    //! files.
    use super::*;
    use crate::formats::kmod::index::{Entry, SoftDeps};

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
            "jbd2".into(),
            SoftDeps {
                pre: vec![],
                post: vec!["crc32c_generic".into(), "never_reached".into()],
            },
        );
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

    /// The digests the kernel lists in `<proc>/crypto` reach the gate's
    /// `module_digests` only when the gate's kernel lacks them built in, and only when
    /// the list says so (an unreadable list adds nothing).
    #[test]
    fn digests_the_kernel_gained_from_proc_crypto() {
        use crate::trust::HashAlg;
        let tmp = std::env::temp_dir().join(format!("vld-crypto-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut l = Loader::new(&tmp, Index::default(), &tmp.join("sys"));
        let mut gate = Gate::default();
        gate.policy.release = Some("6.1.0-57-amd64".into());
        // No procfs root, or no crypto file: nothing learnt.
        assert!(!l.kernel_gained_digests(&gate));
        l.proc_root = Some(tmp.clone());
        assert!(!l.kernel_gained_digests(&gate));
        std::fs::write(
            tmp.join("crypto"),
            "name : sha256
type : shash
selftest : passed
",
        )
        .unwrap();
        assert!(!l.kernel_gained_digests(&gate));
        std::fs::write(
            tmp.join("crypto"),
            "name : sha512
driver : sha512-generic
module : sha512_generic
             selftest : passed
type : shash

name : sha384
type : shash
             selftest : passed
",
        )
        .unwrap();
        assert!(l.kernel_gained_digests(&gate));
        let d = &gate.policy.module_digests;
        assert!(d.has(HashAlg::Sha512) && d.has(HashAlg::Sha384));
        // Known now: the list is not read again.
        assert!(!l.kernel_gained_digests(&gate));
        // 6.12 has them built in: nothing to learn.
        let mut g612 = Gate::default();
        g612.policy.release = Some("6.12.117+deb12-amd64".into());
        assert!(!l.kernel_gained_digests(&g612));
        assert!(!g612.policy.module_digests.has(HashAlg::Sha512));
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// Without root or real modules: every file is missing, so loads fail with ENOENT at
    /// open, and the order, softdeps, builtins and skipping are what we check.
    #[test]
    fn order_and_failures_without_files() {
        let tmp = std::env::temp_dir().join(format!("vld-mod-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("sys/module/mbcache")).unwrap();
        std::fs::write(tmp.join("sys/module/mbcache/initstate"), "live\n").unwrap();
        for jobs in [1, 4] {
            let mut l = Loader::new(&tmp.join("lib"), idx(), &tmp.join("sys"));
            l.jobs = jobs;
            let r = l.load_all(&["ext4".into(), "jbd2".into()]);
            let names: Vec<_> = r.iter().map(|m| (m.name.as_str(), m.status)).collect();
            // Plan order: pre-softdeps, then hard deps (modules.dep lists the one to load
            // first last), then the module; a post-softdep of a failed module is dropped.
            assert_eq!(
                names,
                vec![
                    ("crc32c_generic", ModStatus::Failed),
                    ("crc32c", ModStatus::Skipped),
                    ("crc16", ModStatus::Builtin),
                    ("mbcache", ModStatus::AlreadyLoaded),
                    ("jbd2", ModStatus::Failed),
                    ("ext4", ModStatus::Skipped),
                ],
                "jobs={jobs}"
            );
            assert_eq!(r[0].errno.as_deref(), Some("ENOENT"));
            assert!(r[0].softdep && r[1].softdep && !r[2].softdep);
            assert_eq!(
                r[5].message.as_deref(),
                Some("dependency jbd2 did not load")
            );
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// A module file is read with a limit and only when it is a regular file: a FIFO fails
    /// at once (an open for reading would wait for a writer forever), a directory and a
    /// file over [`MODULE_FILE_MAX`] (sparse here) fail with a message naming them; none
    /// reaches the kernel.
    #[test]
    fn module_files_are_opened_and_read_with_limits() {
        let tmp = std::env::temp_dir().join(format!("vld-mod-lim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("lib/kernel")).unwrap();
        std::fs::create_dir_all(tmp.join("sys/module")).unwrap();
        let dir = tmp.join("lib");
        let mut index = Index::default();
        for n in ["fifo", "dir", "big"] {
            index.entries.insert(
                n.into(),
                Entry {
                    path: format!("kernel/{n}.ko"),
                    deps: Vec::new(),
                },
            );
        }
        nix::unistd::mkfifo(
            &dir.join("kernel/fifo.ko"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("kernel/dir.ko")).unwrap();
        let big = std::fs::File::create(dir.join("kernel/big.ko")).unwrap();
        big.set_len(MODULE_FILE_MAX + 1).unwrap();
        let mut l = Loader::new(&dir, index, &tmp.join("sys"));
        l.gate = Some(Gate::default());
        let r = l.load_all(&["fifo".into(), "dir".into(), "big".into()]);
        let get = |n: &str| r.iter().find(|m| m.name == n).unwrap();
        for (n, want) in [
            ("fifo", "is a FIFO, not a regular file".to_string()),
            ("dir", "is a directory, not a regular file".to_string()),
            (
                "big",
                format!("larger than the limit of {MODULE_FILE_MAX} bytes"),
            ),
        ] {
            let m = get(n);
            assert_eq!(m.status, ModStatus::Failed, "{m:?}");
            let msg = m.message.as_deref().unwrap();
            assert!(msg.ends_with(&want), "{n}: {msg}");
            assert!(msg.contains(&format!("kernel/{n}.ko")), "{n}: {msg}");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

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
//! the kernel. Independent modules load in parallel, one worker per CPU (at most 8); of
//! the modules ready, the one heading the heaviest chain of files still to gate and load
//! goes first, so the longest chain starts early. The report and the measurements keep
//! the plan's order whatever the timing was. A module already live in `/sys/module` is not loaded again; `EEXIST` from
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
//! Each module is given the options `modprobe` would give it ([`Loader::options`], read by
//! [`read_config`] from the root's `modprobe.d` and the kernel command line); a module
//! asked for by name that the configuration blacklists is refused, not loaded, unless
//! another module asked for depends on it (as `systemd-modules-load`, which applies
//! kmod's blacklist to the names it loads; a plain `modprobe NAME` would not apply it).
//!
//! Layout: the loader here, the index in `index.rs` ([`load_index`]), the module options
//! in `options.rs` ([`read_config`]), the report line of each module in `report.rs`
//! ([`ModuleReport`]), the set-up, load and measurement both stages share and the
//! initramfs's load order in [`gated`].
//!
//! Current limits: a module is at most [`MODULE_FILE_MAX`] bytes; a compressed module's
//! image is held whole in memory while it loads; a module signed with a digest other than
//! SHA-256 is read a second time for that digest without releasing its pages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub mod gated;
mod index;
mod options;
mod report;

pub use index::{load_index, IndexLoadError, INDEX_FILE_MAX};
pub use options::{read_config, OptionsError};
pub use report::{ModStatus, ModuleReport};

use crate::formats::kmod::index::Index;
use crate::formats::kmod::modinfo::{self, Compression};
use crate::formats::kmod::modprobe;
use crate::gate::batch::MODULE_FILE_MAX;
use crate::gate::{self, Gate};
use crate::sys;
use crate::util::fs::{open_input, read_text_limited, InputError};

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
    /// The module options and blacklist ([`read_config`]): each module is given the
    /// options `modprobe` would give it, and a module asked for by name that is
    /// blacklisted is refused (as `systemd-modules-load` refuses it) unless another
    /// depends on it. Empty: none.
    pub options: modprobe::Config,
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
            options: modprobe::Config::default(),
            nodes: Vec::new(),
            by_name: BTreeMap::new(),
        }
    }

    /// Loads each named module (and what it needs); returns one report per module touched,
    /// in plan order (each module after what it waits for), whatever the timing was.
    pub fn load_all(&mut self, names: &[String]) -> Vec<ModuleReport> {
        self.plan_names(names);
        self.execute()
    }

    /// A fresh plan of `names` and what they need.
    fn plan_names(&mut self, names: &[String]) {
        self.nodes.clear();
        self.by_name.clear();
        let mut visiting = Vec::new();
        let names: Vec<String> = names
            .iter()
            .map(|n| crate::formats::kmod::normalize_name(n))
            .collect();
        // A blacklisted name is refused only where nothing else needs it: a module that
        // depends on it still gets it, whatever the order (as `systemd-modules-load`
        // loading each name with kmod's blacklist applied to that name only).
        let mut refused = Vec::new();
        let mut wanted = Vec::new();
        for name in names {
            match self.options.blacklisted(&name) {
                Some(origin) => refused.push((name, origin.to_string())),
                None => wanted.push(name),
            }
        }
        for name in &wanted {
            self.plan(name, false, None, &mut visiting);
        }
        for (name, origin) in refused {
            if self.by_name.contains_key(&name) {
                continue;
            }
            let mut r = ModuleReport::new(&name, ModStatus::Rejected);
            r.message = Some(format!("blacklisted by {origin}"));
            self.preset(&name, false, None, r);
        }
    }

    /// The plan [`Loader::load_all`] would run for `names`, in the order its reports
    /// come back, without loading anything: each module's name, its path in the module
    /// directory (empty for a module decided without loading) and, for those, the status
    /// the plan gives it (built in, not in the index, a cycle). Used to predict a boot's
    /// measurements from an image.
    pub fn plan_only(&mut self, names: &[String]) -> Vec<(String, String, Option<ModStatus>)> {
        self.plan_names(names);
        self.nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    n.path.clone(),
                    n.preset.as_ref().map(|r| r.status),
                )
            })
            .collect()
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

    /// Each node's weight for [`critical_path`]: its file's size (the gate hashes every
    /// byte of it and the kernel reads, verifies and relocates it), 0 for a node decided
    /// without loading. A file that cannot be read weighs nothing here (it only orders the
    /// work): its load then fails, naming why.
    fn weights(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|node| match node.preset {
                Some(_) => 0,
                None => std::fs::metadata(self.dir.join(&node.path)).map_or(0, |m| m.len()),
            })
            .collect()
    }

    /// Runs the plan with `jobs` workers. Of the modules ready to load, a worker takes the
    /// one heading the heaviest chain of work still ahead ([`critical_path`]), so the
    /// module at the end of the longest chain (ext4 after jbd2, a GPU driver after its
    /// helpers) is not left waiting behind independent ones; with one worker the order is
    /// the same work in another sequence.
    fn execute(&self) -> Vec<ModuleReport> {
        use std::sync::{Condvar, Mutex};
        let n = self.nodes.len();
        let rank = critical_path(&self.nodes, &self.weights());
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
                let mut pick: Option<usize> = None;
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
                    // Ready: the heaviest chain ahead first, the plan's order among equals.
                    let at = |j: usize| rank.get(j).copied().unwrap_or(0);
                    if pick.is_none_or(|p| at(i) > at(p)) {
                        pick = Some(i);
                    }
                }
                if let Some(i) = pick {
                    settle(states, results, i, State::Running, None);
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

    /// Gates and loads one module. The boot-time stamp is taken before the clock its
    /// duration runs on, so start plus duration never passes the next module's start.
    fn load_one(&self, name: &str, rel: &str) -> ModuleReport {
        let mut r = ModuleReport::new(name, ModStatus::Loaded);
        r.start_us = sys::boottime_us().unwrap_or(0);
        let start = Instant::now();
        r.path = Some(rel.to_string());
        if self.is_live(name) {
            r.status = ModStatus::AlreadyLoaded;
            return r;
        }
        let path = self.dir.join(rel);
        // As modprobe hands them over: the options, then one space (its separator before
        // options of its own command line), which the kernel's parser skips.
        let options = self.options.options(name);
        let params = if options.is_empty() {
            String::new()
        } else {
            format!("{options} ")
        };
        if !options.is_empty() {
            r.options = Some(options);
        }
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
            Some(i) => sys::init_module(i, &params, name),
            None if kernel_decompresses => {
                sys::finit_module(&file, &params, comp != Compression::None, name)
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

/// For each node of a plan (dependencies before what waits on them), its own weight plus
/// the heaviest chain of nodes that wait on it (`hard`, `pre` or `post_of`): how much
/// work, at least, still follows once it starts.
fn critical_path(nodes: &[Node], weights: &[u64]) -> Vec<u64> {
    let mut waiting_on: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (j, node) in nodes.iter().enumerate() {
        for &i in node.hard.iter().chain(&node.pre).chain(node.post_of.iter()) {
            if let Some(w) = waiting_on.get_mut(i) {
                w.push(j);
            }
        }
    }
    let mut rank = vec![0u64; nodes.len()];
    // A node waits only on nodes planned before it, so one pass from the end suffices
    // (a later node's rank is final when an earlier one reads it).
    for i in (0..nodes.len()).rev() {
        let after = waiting_on
            .get(i)
            .into_iter()
            .flatten()
            .filter(|&&j| j > i)
            .filter_map(|&j| rank.get(j).copied())
            .max()
            .unwrap_or(0);
        if let Some(r) = rank.get_mut(i) {
            *r = weights.get(i).copied().unwrap_or(0).saturating_add(after);
        }
    }
    rank
}

#[cfg(test)]
mod tests;

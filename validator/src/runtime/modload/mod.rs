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
//! the kernel. Independent modules load in parallel, one worker per CPU (at most 8), the
//! heaviest chain of work first, and a free worker may judge a module ahead of its
//! dependencies (`schedule.rs`); the report and the measurements keep the plan's order
//! whatever the timing was. A module already live in `/sys/module` is not loaded again;
//! `EEXIST` from the kernel means the same. A module whose hard dependency failed is not
//! attempted. With a [`Gate`] every module is mapped once ([`sys::mmap::Mapped`], no
//! copy), judged (`judge.rs`), and only then handed to the kernel: an uncompressed module
//! as the same open file (`finit_module`), a compressed one as the image the gate
//! decompressed from the judged bytes (`init_module`, so it is decompressed once); a
//! refused module is reported as `rejected` and the kernel never sees it. The pages the
//! gate has hashed are released as it goes ([`Gate::check_releasing`]), so PID 1's memory
//! does not grow with the largest module.
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
//! Current limits: a module is at most [`crate::gate::batch::MODULE_FILE_MAX`] bytes; a compressed module's
//! image is held whole in memory while it loads; a module signed with a digest other than
//! SHA-256 is read a second time for that digest without releasing its pages.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub mod gated;
mod index;
mod judge;
mod options;
mod report;
mod schedule;

pub use index::{load_index, IndexLoadError, INDEX_FILE_MAX};
pub use options::{read_config, OptionsError};
pub use report::{ModStatus, ModuleReport};

use crate::formats::kmod::index::Index;
use crate::formats::kmod::modprobe;
use crate::gate::{self, Gate};
use crate::sys;
use crate::util::fs::read_text_limited;
use judge::Ahead;

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

    /// Gates and loads one module (judged ahead of its turn when `ahead` is `Some`: its
    /// start and gate time are the judging's, and its duration counts the gate and the
    /// load, not the wait between). The boot-time stamp is taken before the clock its
    /// duration runs on, so start plus duration never passes the next module's start.
    fn load_one(&self, name: &str, rel: &str, ahead: Option<Box<Ahead>>) -> ModuleReport {
        let mut r = ModuleReport::new(name, ModStatus::Loaded);
        r.start_us = sys::boottime_us().unwrap_or(0);
        let start = Instant::now();
        r.path = Some(rel.to_string());
        if self.is_live(name) {
            r.status = ModStatus::AlreadyLoaded;
            return r;
        }
        // As modprobe hands them over: the options, then one space (its separator before
        // options of its own command line), which the kernel's parser skips.
        let options = self.options.options(name);
        let params = if options.is_empty() {
            String::new()
        } else {
            format!("{options} ")
        };
        let (judged, before_us) = match ahead {
            Some(a) => {
                r = a.report;
                (Some(a.judged), r.gate_us)
            }
            None => (self.judge(name, rel, &mut r, start), 0),
        };
        if !options.is_empty() {
            r.options = Some(options);
        }
        let Some(judged) = judged else {
            return r;
        };
        let result = match &judged.image {
            Some(i) => sys::init_module(i, &params, name),
            None if judged.kernel_reads => {
                sys::finit_module(&judged.file, &params, judged.compressed, name)
            }
            None => {
                let why = format!("{}: not decompressed", self.dir.join(rel).display());
                judge::failed(&mut r, None, why);
                return r;
            }
        };
        let took = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        r.duration_us = before_us.saturating_add(took);
        match result {
            Ok(()) => r,
            Err(e) if e.errno == nix::errno::Errno::EEXIST => {
                r.status = ModStatus::AlreadyLoaded;
                r
            }
            Err(e) => {
                judge::failed(&mut r, Some(e.errno_name()), e.to_string());
                r
            }
        }
    }
}

#[cfg(test)]
mod tests;

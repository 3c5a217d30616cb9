//! The order of the loader's work: which module a free worker takes next.
//!
//! Of the modules ready to load (everything they wait for has finished), a worker takes
//! the one heading the heaviest chain of files still to gate and load
//! ([`critical_path`]), so the module at the end of the longest chain (ext4 after jbd2, a
//! GPU driver after its helpers) is not left waiting behind independent ones. With more
//! than one worker, a worker judges ahead when nothing is ready to load or when the
//! heaviest module still waiting on its dependencies heads more work than any ready one:
//! it runs the gate over it ([`super::Loader::judge_ahead`]) while its helpers load,
//! keeping the open file it judged for the load. One worker keeps the plan's order and
//! judges nothing ahead. The report and the measurements keep the plan's order whatever
//! the timing was. (Measuring each module while later ones load was tried: on one vCPU
//! the measurements then took 30 ms instead of 20 and the stage no less time.)

use std::sync::{Condvar, Mutex};

use super::judge::Ahead;
use super::{Loader, ModStatus, ModuleReport, Node, State};

/// A module judged ahead of its turn: not tried, being judged, or judged (what the gate
/// passed, until its load takes it).
#[derive(Debug)]
enum AheadState {
    NotTried,
    Judging,
    Judged(Option<Box<Ahead>>),
}

/// Node `j`'s rank ([`critical_path`]); a missing one counts as nothing.
fn rank_of(rank: &[u64], j: usize) -> u64 {
    rank.get(j).copied().unwrap_or(0)
}

/// What a worker does next.
enum Job {
    /// Load node `i`, judged ahead when `Some`.
    Load(usize, Option<Box<Ahead>>),
    /// Judge node `i` ahead of its dependencies.
    Judge(usize),
}

/// The plan's progress, under the workers' lock. Indexes come from the plan; `get` keeps
/// a bad one from panicking: a missing node reads as dropped.
struct Progress {
    states: Vec<State>,
    results: Vec<Option<ModuleReport>>,
    ahead: Vec<AheadState>,
}

impl Progress {
    fn state(&self, j: usize) -> State {
        self.states.get(j).copied().unwrap_or(State::Dropped)
    }

    fn settle(&mut self, i: usize, s: State, r: Option<ModuleReport>) {
        if let (Some(st), Some(res)) = (self.states.get_mut(i), self.results.get_mut(i)) {
            *st = s;
            if r.is_some() {
                *res = r;
            }
        }
    }

    fn judging(&self, i: usize) -> bool {
        matches!(self.ahead.get(i), Some(AheadState::Judging))
    }

    /// Settles what needs no load (dropped post-softdeps, skipped dependents, presets)
    /// and returns the ready node heading the heaviest chain, if any.
    fn ready(&mut self, nodes: &[Node], rank: &[u64]) -> Option<usize> {
        let mut pick: Option<usize> = None;
        for (i, node) in nodes.iter().enumerate() {
            if self.state(i) != State::Waiting {
                continue;
            }
            if let Some(p) = node.post_of {
                match self.state(p) {
                    State::Done(true) => {}
                    State::Done(false) | State::Dropped => {
                        self.settle(i, State::Dropped, None);
                        continue;
                    }
                    _ => continue,
                }
            }
            let finished = |j: &usize| matches!(self.state(*j), State::Done(_) | State::Dropped);
            if !node.pre.iter().all(finished) || !node.hard.iter().all(finished) {
                continue;
            }
            if let Some(&d) = node
                .hard
                .iter()
                .find(|&&j| self.state(j) != State::Done(true))
            {
                let mut r = ModuleReport::new(&node.name, ModStatus::Skipped);
                r.path = Some(node.path.clone());
                r.softdep = node.softdep;
                let dep = nodes.get(d).map_or("?", |n| n.name.as_str());
                r.message = Some(format!("dependency {dep} did not load"));
                self.settle(i, State::Done(false), Some(r));
                continue;
            }
            if let Some(r) = &node.preset {
                self.settle(i, State::Done(r.ok()), Some(r.clone()));
                continue;
            }
            // Being judged ahead: ready once that ends (its worker wakes the others).
            if self.judging(i) {
                continue;
            }
            if pick.is_none_or(|p| rank_of(rank, i) > rank_of(rank, p)) {
                pick = Some(i);
            }
        }
        pick
    }

    /// The heaviest module still waiting on its dependencies and not yet judged ahead
    /// (nor a `post:` softdep, loaded only if what it follows loads).
    fn to_judge(&self, nodes: &[Node], rank: &[u64]) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, n) in nodes.iter().enumerate() {
            let candidate = self.state(i) == State::Waiting
                && n.preset.is_none()
                && n.post_of.is_none()
                && matches!(self.ahead.get(i), Some(AheadState::NotTried));
            if candidate && best.is_none_or(|b| rank_of(rank, i) > rank_of(rank, b)) {
                best = Some(i);
            }
        }
        best
    }

    /// The next job for a free worker, `None` when the plan is finished; waits while
    /// nothing can be done yet.
    fn next<'a>(
        mut g: std::sync::MutexGuard<'a, Progress>,
        cv: &Condvar,
        loader: &Loader,
        rank: &[u64],
    ) -> Option<Job> {
        loop {
            let ready = g.ready(&loader.nodes, rank);
            // Judging ahead pays only beside other work, and only with a gate.
            let judge = (loader.jobs > 1 && loader.gate.is_some())
                .then(|| g.to_judge(&loader.nodes, rank))
                .flatten();
            // The heavier chain first: a module waiting on its helpers is judged before
            // an independent one is loaded when more work follows it.
            let judge = match (ready, judge) {
                (Some(i), Some(j)) if rank_of(rank, j) > rank_of(rank, i) => Some(j),
                (None, j) => j,
                _ => None,
            };
            if let Some(j) = judge {
                if let Some(a) = g.ahead.get_mut(j) {
                    *a = AheadState::Judging;
                }
                return Some(Job::Judge(j));
            }
            if let Some(i) = ready {
                g.settle(i, State::Running, None);
                let ahead = match g.ahead.get_mut(i) {
                    Some(AheadState::Judged(j)) => j.take(),
                    _ => None,
                };
                cv.notify_all();
                return Some(Job::Load(i, ahead));
            }
            let pending = g.states.contains(&State::Running) || g.states.contains(&State::Waiting);
            if !pending {
                cv.notify_all();
                return None;
            }
            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Loader {
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

    /// Runs the plan with `jobs` workers (see the module's documentation for the order).
    pub(super) fn execute(&self) -> Vec<ModuleReport> {
        let n = self.nodes.len();
        // One worker does the same work in any order: it keeps the plan's.
        let rank = if self.jobs > 1 {
            critical_path(&self.nodes, &self.weights())
        } else {
            vec![0; n]
        };
        let mut p = Progress {
            states: vec![State::Waiting; n],
            results: vec![None; n],
            ahead: (0..n).map(|_| AheadState::NotTried).collect(),
        };
        for (i, node) in self.nodes.iter().enumerate() {
            if let (Some(r), None) = (&node.preset, node.post_of) {
                p.settle(i, State::Done(r.ok()), Some(r.clone()));
            }
        }
        let shared = Mutex::new(p);
        let cv = Condvar::new();
        let worker = || loop {
            let g = shared.lock().unwrap_or_else(|p| p.into_inner());
            let Some(job) = Progress::next(g, &cv, self, &rank) else {
                return;
            };
            match job {
                Job::Load(i, ahead) => {
                    let Some(node) = self.nodes.get(i) else {
                        return;
                    };
                    let mut r = self.load_one(&node.name, &node.path, ahead);
                    r.softdep = node.softdep;
                    let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                    g.settle(i, State::Done(r.ok()), Some(r));
                }
                Job::Judge(i) => {
                    let judged = self
                        .nodes
                        .get(i)
                        .and_then(|node| self.judge_ahead(&node.name, &node.path));
                    let mut g = shared.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(a) = g.ahead.get_mut(i) {
                        *a = AheadState::Judged(judged);
                    }
                }
            }
            cv.notify_all();
        };
        std::thread::scope(|s| {
            for _ in 1..self.jobs.max(1) {
                s.spawn(worker);
            }
            worker();
        });
        let p = shared.into_inner().unwrap_or_else(|p| p.into_inner());
        p.results.into_iter().flatten().collect()
    }
}

/// For each node of a plan (dependencies before what waits on them), its own weight plus
/// the heaviest chain of nodes that wait on it (`hard`, `pre` or `post_of`): how much
/// work, at least, still follows once it starts.
pub(super) fn critical_path(nodes: &[Node], weights: &[u64]) -> Vec<u64> {
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

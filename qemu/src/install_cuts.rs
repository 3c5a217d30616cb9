//! Power cuts during `rauc install` on the real node: a campaign of seeded cuts
//! (`qemu-harness install-cuts`, and a few seeds in `tests/real_node.rs`).
//!
//! Each cut: the node boots the slot it last installed (with the update disk attached,
//! so `node-check` runs `rauc install` of the bundle into the other slot) and QEMU is
//! killed without warning at a point the seed picks: a [`Phase`] of the install (RAUC's
//! marking the target bad, the root partition's writes, the bundle hook's ESP writes,
//! the hash and signature partitions, RAUC's grubenv switch) and a delay within it, as a
//! fraction of that phase's length in an uncut install of the same bed ([`Spans`]). Then
//! the node is powered on (with the update disk) until a boot passes the gate, at most
//! [`MAX_POWER_ONS`] times. Checked after every cut ([`Cut`]):
//! - every boot that reached a root was one the gate passed (its report says so, with
//!   the root's verity signature verified): no half-written slot is booted past the gate;
//! - no power-on holds more than two boots (one per slot: the gate's fallback) and the
//!   node passes within [`MAX_POWER_ONS`]: no loop;
//! - in the passing boot, before it installs again, RAUC's `rauc status`, GRUB's grubenv
//!   and our record agree ([`nodeview::agreement`]);
//! - the install in that boot (the same bundle, uncut) succeeds, and the next cut's first
//!   boot (or the campaign's last power-on) passes on the slot it wrote.
//!
//! [`campaign`] does that for every seed (two power-ons or more per cut); [`chained`]
//! (the suite's, one power-on per cut) cuts each recovery's install with the next seed,
//! so the install goes uncut, and is shown to succeed, after the last cut only.
//!
//! Limits: one bundle, installed over and over (the slots alternate); the phases are
//! found by console text (RAUC's progress lines, the hook's line through the service's
//! journal on the console), so a cut is placed to within the console's latency
//! (milliseconds) and the phase it landed in is the last one whose start was seen.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use crate::ab::Bed;
use crate::debroot;
use crate::nodeview::{self, Rauc, SlotStatus};
use crate::vm::{KillAt, Run, Verdict};
use crate::HarnessError;
use validator::report::Decision;

/// Power-ons after a cut before the node must be on a passing slot.
pub const MAX_POWER_ONS: usize = 3;

/// A part of `rauc install` a cut aims at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// RAUC marks the target slot non-bootable (grubenv) before it writes it.
    Mark,
    /// The root partition's writes (the hook's `dd`, then the partition's PARTUUID).
    Data,
    /// The hook's writes of the slot's kernel, initramfs and image on the ESP.
    Esp,
    /// The hash partition.
    Hash,
    /// The signature partition.
    Sig,
    /// RAUC marks the target primary and good (grubenv), and writes its status.
    Switch,
}

/// The bundle hook's line before its ESP writes (`mkinitramfs`'s `RAUC_HOOK`).
pub const HOOK_ESP: &str = "'s root written; writing its boot files to";

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Mark,
        Phase::Data,
        Phase::Esp,
        Phase::Hash,
        Phase::Sig,
        Phase::Switch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Mark => "mark",
            Phase::Data => "data",
            Phase::Esp => "esp",
            Phase::Hash => "hash",
            Phase::Sig => "sig",
            Phase::Switch => "switch",
        }
    }

    /// The console text the phase starts with: its `nth` occurrence.
    pub fn start(self) -> (&'static str, u32) {
        match self {
            // RAUC logs "Marking target slot ... as non-bootable" right after this line.
            Phase::Mark => ("Determining target install group done.", 1),
            Phase::Data => (COPY_ROOT, 1),
            Phase::Esp => (HOOK_ESP, 1),
            Phase::Hash => ("Copying image to rootfs-verity.", 1),
            Phase::Sig => (COPY_SIG, 1),
            // The signature partition's "done": RAUC then marks the slot bootable.
            Phase::Switch => (COPY_SIG, 2),
        }
    }

    /// The console text seen after it ends.
    fn end(self) -> (&'static str, u32) {
        match self {
            Phase::Mark => Phase::Data.start(),
            Phase::Data => Phase::Esp.start(),
            Phase::Esp => ("Checking slot rootfs-verity.", 1),
            Phase::Hash => ("Checking slot rootfs-sig.", 1),
            Phase::Sig => Phase::Switch.start(),
            Phase::Switch => (INSTALLED, 1),
        }
    }
}

/// RAUC's progress lines around the partitions' writes.
const COPY_ROOT: &str = "Copying image to rootfs.";
const COPY_SIG: &str = "Copying image to rootfs-sig.";
const INSTALLED: &str = "Installing done.";

/// What a seed picks: the phase (seed modulo the phases, so consecutive seeds visit
/// each) and where in it (a fraction of its length, from a generator seeded with it).
#[expect(
    clippy::cast_precision_loss,
    reason = "53 bits (and 2^53) are exact in an f64"
)]
pub fn aim(seed: u64) -> (Phase, f64) {
    let i = usize::try_from(seed % Phase::ALL.len() as u64).unwrap_or(0);
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    for _ in 0..3 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
    }
    let frac = (x >> 11) as f64 / (1u64 << 53) as f64;
    (Phase::ALL[i], frac)
}

/// Each phase's length in an uncut install.
#[derive(Debug, Clone, PartialEq)]
pub struct Spans(pub [Duration; 6]);

impl Spans {
    /// From the last boot of `run`, a power-on whose install was not cut.
    pub fn measure(run: &Run) -> Result<Spans, HarnessError> {
        let boot = run.boots.len().saturating_sub(1);
        let mut out = [Duration::ZERO; 6];
        for (slot, p) in out.iter_mut().zip(Phase::ALL) {
            let at = |(t, n): (&str, u32)| {
                run.seen_nth(boot, t, n).ok_or_else(|| {
                    HarnessError::Setup(format!(
                        "install spans: {t:?} not on the console ({})",
                        run.describe()
                    ))
                })
            };
            *slot = at(p.end())?.saturating_sub(at(p.start())?);
        }
        Ok(Spans(out))
    }

    fn of(&self, p: Phase) -> Duration {
        let i = Phase::ALL.iter().position(|q| *q == p).unwrap_or(0);
        self.0.get(i).copied().unwrap_or_default()
    }

    /// One line: each phase and its length.
    pub fn describe(&self) -> String {
        Phase::ALL
            .iter()
            .map(|p| format!("{} {} ms", p.as_str(), self.of(*p).as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One cut and what followed.
#[derive(Debug, Clone, PartialEq)]
pub struct Cut {
    pub seed: u64,
    pub aimed: Phase,
    pub delay: Duration,
    /// The slot the install wrote.
    pub target: String,
    /// The last phase whose start was seen before the kill (`before`: none; `after`: the
    /// install had finished; `no cut`: the VM ended first).
    pub landed: String,
    /// Power-ons after the cut until a boot passed, and the boots in them.
    pub power_ons: usize,
    pub boots: usize,
    /// Boots that reached a root without the gate's pass.
    pub unverified: usize,
    /// Power-ons with more boots than the two slots (a loop).
    pub loops: usize,
    /// The slot the node came back on (empty: it did not).
    pub slot: String,
    /// RAUC, GRUB and our record after the recovery: `agree` or where they differ.
    pub agreement: String,
    /// `rauc install` again in the recovered boot: its exit status line.
    pub reinstall: String,
}

impl Cut {
    /// Recovered on a passing slot, no unverified boot, no loop, the three agree and the
    /// install again succeeded.
    pub fn ok(&self) -> bool {
        !self.slot.is_empty()
            && self.unverified == 0
            && self.loops == 0
            && self.agreement == "agree"
            && (self.reinstall.ends_with(" 0") || self.reinstall.starts_with("cut by seed "))
    }

    /// The line the campaign prints.
    pub fn line(&self, n: usize) -> String {
        format!(
            "cut {n}: seed {} aimed at {} +{} ms, landed in {}; into {}: back on {} after {} power-on(s), {} boot(s); unverified {}, loops {}; {}; reinstall {}: {}",
            self.seed,
            self.aimed.as_str(),
            self.delay.as_millis(),
            self.landed,
            self.target,
            if self.slot.is_empty() { "nothing" } else { &self.slot },
            self.power_ons,
            self.boots,
            self.unverified,
            self.loops,
            self.agreement,
            self.reinstall,
            if self.ok() { "ok" } else { "FAILED" }
        )
    }
}

/// The phase the cut of `run` landed in.
fn landed(run: &Run) -> String {
    let Some(killed) = run.killed_at else {
        return "no cut".into();
    };
    let boot = run.boots.len().saturating_sub(1);
    if run
        .seen_nth(boot, INSTALLED, 1)
        .is_some_and(|t| t <= killed)
    {
        return "after".into();
    }
    Phase::ALL
        .iter()
        .rev()
        .find(|p| {
            let (t, n) = p.start();
            run.seen_nth(boot, t, n).is_some_and(|at| at <= killed)
        })
        .map_or_else(|| "before".into(), |p| p.as_str().into())
}

/// The slot a boot ran, as its report says.
fn slot_of(o: &crate::vm::Outcome) -> Option<String> {
    o.report
        .as_ref()
        .and_then(|r| r.booted_slot().map(str::to_string))
}

/// The kill of `seed`: the phase it aims at, the delay into it, and the power cut.
fn kill_of(spans: &Spans, seed: u64) -> (Phase, Duration, KillAt) {
    let (aimed, frac) = aim(seed);
    let delay = spans.of(aimed).mul_f64(frac);
    let (text, nth) = aimed.start();
    let kill = KillAt {
        text: text.into(),
        nth,
        delay,
    };
    (aimed, delay, kill)
}

/// A power-on of `bed` with the update disk `disk` attached (`node-check` installs its
/// bundle), cut at `kill` when given.
fn power_on(bed: &Bed, disk: &Path, kill: Option<KillAt>) -> Result<Run, HarnessError> {
    bed.boot_with(|c| {
        c.extra_args.extend([
            "-drive".into(),
            format!("file={},format=raw,if=virtio,readonly=on", disk.display()),
        ]);
        c.kill_at = kill;
    })
}

/// The cut of `seed` made in `run`, before its recovery.
fn new_cut(seed: u64, aimed: Phase, delay: Duration, run: &Run) -> Cut {
    let from = run.boots.last().and_then(slot_of).unwrap_or_default();
    let mut cut = Cut {
        seed,
        aimed,
        delay,
        target: if from == "A" { "B".into() } else { "A".into() },
        landed: landed(run),
        power_ons: 0,
        boots: 0,
        unverified: 0,
        loops: 0,
        slot: String::new(),
        agreement: String::new(),
        reinstall: String::new(),
    };
    let passed = run
        .boots
        .last()
        .and_then(|o| o.report.as_ref())
        .map(|r| r.decision)
        == Some(Decision::Pass);
    if !passed {
        cut.agreement = format!("the boot before the cut did not pass: {}", run.describe());
    }
    cut
}

/// One seed on `bed`: the cut power-on (whose boot must pass: the slot the last install
/// wrote), then the recovery, whose install of `disk`'s bundle goes uncut.
pub fn cut_once(bed: &Bed, disk: &Path, spans: &Spans, seed: u64) -> Result<Cut, HarnessError> {
    let (aimed, delay, kill) = kill_of(spans, seed);
    let run = power_on(bed, disk, Some(kill))?;
    let mut cut = new_cut(seed, aimed, delay, &run);
    if cut.agreement.is_empty() {
        recover(bed, disk, &mut cut, None)?;
    }
    Ok(cut)
}

/// Powers `bed` on until a boot passes (at most [`MAX_POWER_ONS`]), each power-on's
/// install cut at `next` when given, then reads the agreement and the install from that
/// boot. Returns the run of the boot that passed.
fn recover(
    bed: &Bed,
    disk: &Path,
    cut: &mut Cut,
    next: Option<KillAt>,
) -> Result<Option<Run>, HarnessError> {
    for _ in 0..MAX_POWER_ONS {
        let run = power_on(bed, disk, next.clone())?;
        cut.power_ons += 1;
        cut.boots += run.boots.len();
        if run.boots.len() > 2 {
            cut.loops += 1;
        }
        for o in &run.boots {
            let passed = o.report.as_ref().is_some_and(|r| {
                matches!(r.decision, Decision::Pass | Decision::Quarantine)
                    && r.verity.as_ref().is_some_and(|v| {
                        v.source == "signature" && v.signer.is_some() && v.dm_device.is_some()
                    })
            });
            if o.verdict == Verdict::RootInitReached && !passed {
                cut.unverified += 1;
            }
        }
        let Some(o) = run.boots.last() else { continue };
        let pass = o.verdict == Verdict::RootInitReached
            && o.report.as_ref().map(|r| r.decision) == Some(Decision::Pass);
        if !pass {
            continue;
        }
        cut.slot = slot_of(o).unwrap_or_default();
        cut.agreement = match (
            Rauc::of(&o.console, debroot::RAUC_BEFORE),
            SlotStatus::of(&o.console),
        ) {
            (Ok(r), Ok(s)) => match nodeview::agreement(&cut.slot, &r, &s) {
                Ok(()) => "agree".into(),
                Err(e) => e,
            },
            (Err(e), _) | (_, Err(e)) => e,
        };
        cut.reinstall = nodeview::installed(&o.console).join(", ");
        return Ok(Some(run));
    }
    Ok(None)
}

/// The cuts of `seeds` chained (the suite's way, one power-on per cut): each recovery's
/// install is cut by the next seed, and only the last recovery's install goes uncut, so
/// "the install again succeeds" is shown once, at the end; the first cut not recovered
/// ends it. Then one power-on without the update disk: the last install's slot must
/// pass.
pub fn chained(
    bed: &Bed,
    disk: &Path,
    spans: &Spans,
    seeds: &[u64],
) -> Result<Summary, HarnessError> {
    let mut s = Summary::default();
    let Some(first) = seeds.first() else {
        return Ok(s);
    };
    let (mut aimed, mut delay, kill) = kill_of(spans, *first);
    let mut run = power_on(bed, disk, Some(kill))?;
    for (i, seed) in seeds.iter().enumerate() {
        let mut cut = new_cut(*seed, aimed, delay, &run);
        let next = seeds.get(i + 1).map(|n| kill_of(spans, *n));
        let recovered = if cut.agreement.is_empty() {
            recover(bed, disk, &mut cut, next.as_ref().map(|n| n.2.clone()))?
        } else {
            None
        };
        if let (Some(r), Some(n)) = (recovered.as_ref(), next.as_ref()) {
            cut.reinstall = format!("cut by seed {}", seeds.get(i + 1).copied().unwrap_or(0));
            (aimed, delay) = (n.0, n.1);
            run = r.clone();
        }
        if !s.push(cut) {
            return Ok(s);
        }
    }
    last_power_on(bed, &mut s)?;
    Ok(s)
}

/// The campaign's outcome.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub cuts: Vec<Cut>,
    /// The last power-on's slot and decision (after the last install).
    pub last: String,
    pub last_ok: bool,
}

impl Summary {
    /// Prints `cut`'s line and keeps it; false when it was not recovered as
    /// [`Cut::ok`] says (the campaign ends there: what follows would start from that
    /// state).
    fn push(&mut self, cut: Cut) -> bool {
        eprintln!("{}", cut.line(self.cuts.len() + 1));
        let ok = cut.ok();
        self.cuts.push(cut);
        if !ok {
            self.last = "not run: a cut was not recovered".into();
        }
        ok
    }

    /// Every cut ok and the last install's slot passed.
    pub fn ok(&self) -> bool {
        self.last_ok && self.cuts.iter().all(Cut::ok)
    }

    /// The summary line.
    pub fn line(&self) -> String {
        let n = self.cuts.len();
        let count = |f: &dyn Fn(&Cut) -> bool| self.cuts.iter().filter(|c| f(c)).count();
        let mut by_phase = String::new();
        for p in [
            "before", "mark", "data", "esp", "hash", "sig", "switch", "after", "no cut",
        ] {
            let k = count(&|c: &Cut| c.landed == p);
            if k > 0 {
                let _ = write!(by_phase, " {p} {k}");
            }
        }
        format!(
            "{n} cuts: {} recovered, {} unverified boot(s), {} loop(s), {} disagreement(s), {} reinstall(s) ok; most power-ons to a good slot {}; landed:{by_phase}; last power-on: {}",
            count(&|c: &Cut| !c.slot.is_empty()),
            self.cuts.iter().map(|c| c.unverified).sum::<usize>(),
            self.cuts.iter().map(|c| c.loops).sum::<usize>(),
            count(&|c: &Cut| !c.slot.is_empty() && c.agreement != "agree"),
            count(&|c: &Cut| c.reinstall.ends_with(" 0")),
            self.cuts.iter().map(|c| c.power_ons).max().unwrap_or(0),
            self.last
        )
    }

    /// The table (Markdown): one row per cut.
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| cut | seed | aimed at | delay (ms) | landed in | into | back on | power-ons | boots | unverified | loops | RAUC, GRUB, record | reinstall |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (i, c) in self.cuts.iter().enumerate() {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                i + 1,
                c.seed,
                c.aimed.as_str(),
                c.delay.as_millis(),
                c.landed,
                c.target,
                if c.slot.is_empty() { "-" } else { &c.slot },
                c.power_ons,
                c.boots,
                c.unverified,
                c.loops,
                c.agreement.replace('|', "/"),
                c.reinstall
            );
        }
        t
    }
}

/// The cuts of `seeds` on `bed` in turn (each printed to stderr as it ends; the first
/// one not recovered as [`Cut::ok`] says ends the campaign), then one power-on without
/// the update disk: the slot the last install wrote must pass.
pub fn campaign(
    bed: &Bed,
    disk: &Path,
    spans: &Spans,
    seeds: &[u64],
) -> Result<Summary, HarnessError> {
    let mut s = Summary::default();
    for seed in seeds {
        if !s.push(cut_once(bed, disk, spans, *seed)?) {
            return Ok(s);
        }
    }
    last_power_on(bed, &mut s)?;
    Ok(s)
}

/// The power-on after the last install, without the update disk: the slot it wrote must
/// pass, in one boot.
fn last_power_on(bed: &Bed, s: &mut Summary) -> Result<(), HarnessError> {
    let run = bed.boot()?;
    let o = run.boots.last();
    s.last_ok = run.boots.len() == 1
        && o.is_some_and(|o| {
            o.verdict == Verdict::RootInitReached
                && o.report.as_ref().map(|r| r.decision) == Some(Decision::Pass)
        });
    s.last = format!(
        "slot {} {}",
        o.and_then(slot_of).unwrap_or_else(|| "-".into()),
        if s.last_ok { "passed" } else { "did not pass" }
    );
    if !s.last_ok {
        s.last.push_str(&format!(" ({})", run.describe()));
    }
    Ok(())
}

/// The campaign as a command: the real node, a first (uncut) install of a 6.1 update to
/// measure the phases, then `cuts` seeded cuts from `first_seed`; prints the spans, a line
/// per cut and the summary, and writes the table to `table` when given. Ok(true) when
/// every cut was recovered as [`Cut::ok`] says.
pub fn run_campaign(
    cuts: u64,
    first_seed: u64,
    table: Option<&Path>,
) -> Result<bool, HarnessError> {
    // Refused before the half hour of boots, not after: a table path in no directory,
    // or one that is a directory.
    if let Some(t) = table {
        let parent = t.parent().filter(|p| !p.as_os_str().is_empty());
        if t.is_dir() || parent.is_some_and(|p| !p.is_dir()) {
            return Err(HarnessError::Setup(format!(
                "--table {}: not a file in an existing directory",
                t.display()
            )));
        }
    }
    let bed = crate::scenario::Scenario::named(crate::scenario::Name::RealNode)?.bed()?;
    let kernel = crate::paths::kernel("default")?;
    let bom = bed.slots.a.bom.clone();
    let disk = debroot::update_disk(
        &bed.dir,
        &kernel,
        &bom,
        "update",
        true,
        bed.uki_cmdline().as_deref(),
    )?;
    let first = bed.boot_with_disk(&disk)?;
    let o = first.boots.last();
    if nodeview::installed(o.map_or("", |o| o.console.as_str())) != ["update.raucb 0"] {
        return Err(HarnessError::Setup(format!(
            "the first (uncut) install did not succeed: {}",
            first.describe()
        )));
    }
    let spans = Spans::measure(&first)?;
    eprintln!("install phases (uncut): {}", spans.describe());
    let seeds: Vec<u64> = (first_seed..first_seed.saturating_add(cuts)).collect();
    let s = campaign(&bed, &disk, &spans, &seeds)?;
    println!("{}", s.line());
    if let Some(t) = table {
        let text = format!(
            "Install phases (uncut): {}\n\n{}\n{}\n",
            spans.describe(),
            s.table(),
            s.line()
        );
        std::fs::write(t, text).map_err(|e| HarnessError::io(t, e))?;
    }
    Ok(s.ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Consecutive seeds visit every phase; the fraction is in [0, 1) and a seed always
    /// picks the same point.
    #[test]
    fn seeds_aim_at_each_phase_in_turn() {
        let phases: Vec<Phase> = (0..6).map(|s| aim(s).0).collect();
        assert_eq!(phases, Phase::ALL);
        for s in 0..1000 {
            let (_, f) = aim(s);
            assert!((0.0..1.0).contains(&f), "{s}: {f}");
            assert_eq!(aim(s), aim(s));
        }
        assert_ne!(aim(1).1, aim(7).1);
    }
}

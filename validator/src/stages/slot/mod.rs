//! Stage `slot`: which A/B slot booted, what the boot loader and our record say about the
//! slots, and, once the decision is made ([`act`]), what is written back: the slot marked
//! good, or demoted, and the fallback to the other slot by kexec or reboot ([`fall_back`]).
//!
//! State lives on the ESP, which the stage finds (`validator.esp=`, else the one partition
//! of the EFI System type) and mounts read-write ([`esp`]). What a boot loader does is one
//! trait, [`BootLoader`], with one implementation per loader:
//! - GRUB ([`Bootloader::Grub`], `examples/grub/grub.cfg`, [`grub`]): RAUC's `ORDER`,
//!   `X_OK`, `X_TRY` in the grubenv, read and rewritten in place as GRUB's `save_env`
//!   does. A grubenv that does not parse is never written.
//! - systemd-boot ([`bls`]): the slots' BLS entries with boot counters; marking good or
//!   bad renames the entry file, as `systemd-bless-boot` does.
//! - Our record ([`record`], [`crate::formats::slotstate`], two copies under `state_dir`):
//!   attempts of each slot's image, the last decision and report of each slot,
//!   consecutive failed boots. The record bounds the boots ([`Slot::max_boots`]) even
//!   when the boot loader's counters are lost.
//!
//! The kexec into the other slot is staged by [`kexec`]; errors are [`SlotError`].
//!
//! Missing or unusable state never stops a good boot: the stage records why slot handling
//! is off (a platform fault, in the report) and the boot goes on; only the fallback is then
//! impossible. The decision itself is made by `boot`; this stage only carries it out.
//!
//! Current limits: two slots, `A` and `B`; the ESP is vfat (its modules must be in the
//! BOM's `modules.load`).

pub mod bls;
pub mod bootable;
mod error;
pub mod esp;
pub mod grub;
pub mod kexec;
pub mod loader;
pub mod record;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Context, Decision, Fault};
use crate::config::bom::{Bootloader, FallbackVia, MarkGood, Slot, SlotName};
use crate::config::layout;
use crate::formats::slotstate::{self, SlotRecord, State};
use crate::util::fs::read_limited;

pub use error::SlotError;
pub use loader::BootLoader;
use record::Store;

/// The boot that led to this one, when it fell back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Previous {
    pub slot: String,
    /// `kexec` (its report came along) or `reboot` (read from our record).
    pub via: String,
    pub image_id: Option<String>,
    pub decision: Option<String>,
    pub fault: Option<String>,
    pub reason: Option<String>,
    /// That boot's report, as it was written.
    pub report: Option<serde_json::Value>,
}

/// What the report says about the slots.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotFacts {
    /// The slot this boot runs from.
    pub booted: Option<SlotName>,
    pub bootloader: Option<Bootloader>,
    /// The ESP's device node.
    pub esp: Option<String>,
    /// The boot loader's view before and after this boot's writes (grubenv variables,
    /// or entry file names).
    pub before: BTreeMap<String, String>,
    pub after: BTreeMap<String, String>,
    /// Boots of this slot's image since it was last marked good, this one included.
    pub attempts: u32,
    /// Failed boots in a row before this one, and the bound.
    pub consecutive_failures: u32,
    pub max_boots: u32,
    pub previous: Option<Previous>,
    /// What this boot did to the slots.
    pub action: Option<String>,
    /// Why slot handling is off or incomplete (the boot went on without it).
    pub error: Option<String>,
}

/// What the stage keeps for the decision.
#[derive(Debug)]
pub struct Runtime {
    cfg: Slot,
    slot: SlotName,
    esp_dir: PathBuf,
    /// The boot loader's state (unusable state is never written).
    loader: Box<dyn BootLoader>,
    /// Our record (not written when it could not be read or created).
    record: Store,
    over_bound: bool,
    /// Whether the other slot's kernel would start ([`bootable`]), checked once.
    target_kernel: std::cell::OnceCell<bootable::Verdict>,
}

/// A fallback about to happen.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: SlotName,
    pub via: FallbackVia,
    kernel: PathBuf,
    initrd: PathBuf,
    cmdline: String,
    /// The kernel and initramfs read and measured for a kexec ([`prepare_kexec`]), or
    /// why they could not be.
    images: Option<Result<kexec::Images, String>>,
}

/// The stage: never fails the boot; what goes wrong is in the facts and the warnings.
pub fn run(ctx: &mut Context) -> Result<String, SlotError> {
    let Some(cfg) = ctx.bom.as_ref().and_then(|b| b.bom.slot.clone()) else {
        return Ok("no [slot] in the BOM: no A/B handling".into());
    };
    let mut facts = SlotFacts {
        bootloader: Some(cfg.bootloader),
        max_boots: cfg.max_boots,
        ..SlotFacts::default()
    };
    match open(ctx, &cfg, &mut facts) {
        Ok(rt) => {
            let detail = format!(
                "slot {} ({}), attempt {}, {} failed boot(s) before this one{}",
                rt.slot,
                describe(&facts.before),
                facts.attempts,
                facts.consecutive_failures,
                facts
                    .previous
                    .as_ref()
                    .map(|p| format!("; fell back from {} ({})", p.slot, p.via))
                    .unwrap_or_default()
            );
            ctx.slot = Some(rt);
            ctx.facts.slot = Some(facts);
            Ok(detail)
        }
        Err(why) => {
            ctx.facts
                .warnings
                .push(format!("slot handling off (platform fault): {why}"));
            facts.error = Some(why.to_string());
            ctx.facts.slot = Some(facts);
            Ok(format!("slot handling off: {why}"))
        }
    }
}

fn describe(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The errors' messages, joined as the report shows them.
fn join(errors: &[SlotError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Finds and mounts the ESP, reads the boot loader's state and our record, and counts
/// this boot.
fn open(ctx: &mut Context, cfg: &Slot, facts: &mut SlotFacts) -> Result<Runtime, SlotError> {
    let slot = ctx
        .args
        .slot
        .as_deref()
        .and_then(SlotName::parse)
        .ok_or(SlotError::NoSlotArg)?;
    facts.booted = Some(slot);
    let device = esp::find(ctx)?;
    facts.esp = Some(device.clone());
    let dir = esp::mount(ctx, &device)?;
    open_dir(ctx, cfg, facts, slot, dir)
}

/// Everything after the mount: the boot loader's state and our record in the mounted
/// ESP `dir`, and this boot counted.
pub(crate) fn open_dir(
    ctx: &mut Context,
    cfg: &Slot,
    facts: &mut SlotFacts,
    slot: SlotName,
    dir: PathBuf,
) -> Result<Runtime, SlotError> {
    let loaded = Runtime::load(cfg, slot, dir, true);
    let mut rt = loaded.runtime;
    let mut problems = loaded.errors;
    facts.before = loaded.view;
    facts.before.extend(rt.loader.firmware_view(&ctx.roots.sys));
    if loaded.created {
        ctx.facts
            .warnings
            .push("slot: created a new state record on the ESP".into());
    }
    if let Some(d) = rt.record.damaged.take() {
        ctx.facts
            .warnings
            .push(format!("slot: {d}: this boot starts a new record"));
    }
    facts.previous = previous(ctx, &rt);
    facts.consecutive_failures = rt.record.state.consecutive_failures;
    rt.over_bound = rt.record.state.consecutive_failures >= cfg.max_boots;
    // Count this boot before anything can go wrong: a crash later in it still counts.
    let (image_id, bom_sha) = (ctx.facts.image_id.clone(), ctx.facts.bom_sha256.clone());
    let state = &mut rt.record.state;
    let rec = state.slots.entry(slot.as_str().to_string()).or_default();
    if rec.bom_sha256 != bom_sha {
        *rec = SlotRecord {
            image_id,
            bom_sha256: bom_sha,
            ..SlotRecord::default()
        };
    }
    rec.attempts = rec.attempts.saturating_add(1);
    facts.attempts = rec.attempts;
    state.consecutive_failures = state.consecutive_failures.saturating_add(1);
    state.last_slot = Some(slot.as_str().to_string());
    if let Err(e) = rt.record.write() {
        problems.push(e);
    }
    if !problems.is_empty() {
        let why = join(&problems);
        ctx.facts
            .warnings
            .push(format!("slot state incomplete (platform fault): {why}"));
        facts.error = Some(why);
    }
    Ok(rt)
}

/// What [`Runtime::load`] found.
#[derive(Debug)]
pub struct Loaded {
    pub runtime: Runtime,
    /// The boot loader's view (grubenv variables or entry file names).
    pub view: BTreeMap<String, String>,
    /// What could not be read (the rest is still usable), typed: match on these (e.g.
    /// [`SlotError::NoRecord`]).
    pub errors: Vec<SlotError>,
    /// Whether our record was created just now.
    pub created: bool,
}

/// The slots as an operator's tool reports them.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub bootloader: Bootloader,
    /// The boot loader's view (grubenv variables or entry file names).
    pub bootloader_state: BTreeMap<String, String>,
    /// Our record (newest valid copy) and its generation.
    pub record: Option<State>,
    pub generation: u64,
    pub problems: Vec<String>,
}

impl Runtime {
    /// Reads the boot loader's state and our record from the ESP mounted at `dir`,
    /// creating the record's two copies when `create` and they are missing. Nothing is
    /// counted or written otherwise.
    pub fn load(cfg: &Slot, slot: SlotName, dir: PathBuf, create: bool) -> Loaded {
        let mut errors = Vec::new();
        let (loader, e) = loader::open(cfg, &dir);
        errors.extend(e);
        let state_dir = PathBuf::from(cfg.state_dir.trim_start_matches('/'));
        let (mut record, created, e) = Store::open_in(dir.clone(), state_dir, create);
        errors.extend(e);
        // A boot starts a new record over a damaged one (and warns); a reader reports it.
        if !create {
            errors.extend(record.damaged.take());
        }
        let rt = Runtime {
            cfg: cfg.clone(),
            slot,
            esp_dir: dir,
            loader,
            record,
            over_bound: false,
            target_kernel: std::cell::OnceCell::new(),
        };
        Loaded {
            view: rt.view(),
            errors,
            runtime: rt,
            created,
        }
    }

    /// The status report of what was loaded.
    pub fn status(&self, view: BTreeMap<String, String>, problems: Vec<String>) -> Status {
        Status {
            bootloader: self.cfg.bootloader,
            bootloader_state: view,
            record: self.record.ok.then(|| self.record.state.clone()),
            generation: self.record.generation,
            problems,
        }
    }

    /// Marks slot `s` good or bad in the boot loader's state and in our record, as the
    /// post-boot service (`validator slot mark-good`) or an operator does. Returns what
    /// was done, in words.
    ///
    /// Both or neither: the record's next copy is checked writable before the boot
    /// loader's state changes; when the record's write still fails, the boot loader's
    /// change is undone, and the error ([`SlotError::MarkIncomplete`]) says whether that
    /// worked, i.e. exactly what changed.
    pub fn mark(&mut self, s: SlotName, good: bool) -> Result<String, SlotError> {
        if self.record.ok {
            self.record.check_writable()?;
        }
        self.loader.mark(s, good)?;
        let mut done = format!("marked {s} {}", if good { "good" } else { "bad" });
        if self.record.ok {
            let saved = self.record.state.clone();
            let state = &mut self.record.state;
            let rec = state.slots.entry(s.as_str().to_string()).or_default();
            rec.good = Some(good);
            if good {
                rec.attempts = 0;
                state.consecutive_failures = 0;
            }
            if let Err(e) = self.record.write() {
                self.record.state = saved;
                let undone = self.loader.undo();
                return Err(SlotError::MarkIncomplete {
                    slot: s,
                    good,
                    source: Box::new(e),
                    undone: match undone {
                        Ok(_) => None,
                        Err(u) => Some(Box::new(u)),
                    },
                });
            }
            done.push_str(" (boot loader and record)");
        }
        Ok(done)
    }

    /// What an operator is told is wrong with a state that could be read: where the
    /// boot loader and our record disagree ([`Runtime::disagreements`]), and a boot
    /// loader state under which no slot would boot ([`BootLoader::unbootable`]).
    pub fn problems(&self) -> Vec<SlotError> {
        let mut p = self.disagreements();
        p.extend(self.loader.unbootable());
        p
    }

    /// Where the boot loader's state and our record disagree on a slot being good or bad
    /// (the record says so, and the boot loader says the opposite).
    pub fn disagreements(&self) -> Vec<SlotError> {
        if !self.record.ok {
            return Vec::new();
        }
        [SlotName::A, SlotName::B]
            .into_iter()
            .filter_map(|s| {
                let record = self.record.state.slots.get(s.as_str())?.good?;
                let loader = self.loader.marked(s)?;
                (record != loader).then_some(SlotError::Disagree {
                    slot: s,
                    loader,
                    record,
                })
            })
            .collect()
    }

    /// The boot loader's view now.
    pub fn view(&self) -> BTreeMap<String, String> {
        self.loader.view()
    }
}

/// The boot that fell back into this one: its report came along (kexec), or our record
/// says the other slot's last boot fell back (reboot).
fn previous(ctx: &Context, rt: &Runtime) -> Option<Previous> {
    let other = rt.slot.other();
    let carried = ctx.roots.initramfs.join(layout::CARRIED_REPORT);
    if let Ok(bytes) = read_limited(&carried, slotstate::FILE_SIZE as u64) {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
            return Some(Previous {
                slot: v
                    .pointer("/slot/booted")
                    .and_then(|x| x.as_str())
                    .unwrap_or(other.as_str())
                    .to_string(),
                via: "kexec".into(),
                image_id: s("image_id"),
                decision: s("decision"),
                fault: s("fault"),
                reason: s("reason"),
                report: Some(v),
            });
        }
    }
    let state = &rt.record.state;
    let rec = state.slots.get(other.as_str())?;
    if state.last_slot.as_deref() != Some(other.as_str())
        || rec.last_decision.as_deref() != Some("fallback")
    {
        return None;
    }
    Some(Previous {
        slot: other.as_str().to_string(),
        via: "reboot".into(),
        image_id: rec.image_id.clone(),
        decision: rec.last_decision.clone(),
        fault: rec.last_fault.clone(),
        reason: rec.last_reason.clone(),
        report: rec.last_report.clone(),
    })
}

/// The slot a fallback would boot, if one may be tried: the boot loader still offers it,
/// our record has not seen its image fail, the bound on failed boots is not reached, and
/// under Secure Boot its kernel would start ([`bootable`]).
pub fn fallback_target(ctx: &Context) -> Option<SlotName> {
    let rt = ctx.slot.as_ref()?;
    if rt.over_bound || !rt.record.ok {
        return None;
    }
    let y = rt.slot.other();
    let offered = rt.loader.offers(y);
    let failed = rt
        .record
        .state
        .slots
        .get(y.as_str())
        .is_some_and(|r| r.good == Some(false));
    if !offered || failed {
        return None;
    }
    target_kernel(ctx, rt, y).refused.is_none().then_some(y)
}

/// The other slot's kernel check, made once per boot.
fn target_kernel<'a>(ctx: &Context, rt: &'a Runtime, y: SlotName) -> &'a bootable::Verdict {
    rt.target_kernel.get_or_init(|| {
        let kernel = esp::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.kernel, y));
        #[cfg(feature = "test-hooks")]
        if ctx.args.test_skip_kernel_check {
            log::warn!("slot: slot {y}'s kernel not checked (validator.test_skip_kernel_check)");
            return bootable::Verdict::default();
        }
        let v = bootable::check(
            ctx.uefi_keys(),
            &ctx.roots.initramfs,
            &kernel,
            boot_chain(rt).as_ref(),
        );
        match &v.refused {
            None => log::info!("slot: slot {y}'s kernel: {}", v.note),
            Some(why) => log::error!("slot: slot {y}'s kernel: {why} ({})", v.note),
        }
        v
    })
}

/// The chain in front of the slots' kernels after a reboot, when the ESP holds shim and
/// the GRUB it loads (Debian's signed chain: `EFI/BOOT/BOOTX64.EFI` and
/// `EFI/BOOT/grubx64.efi` beside it).
fn boot_chain(rt: &Runtime) -> Option<bootable::Chain> {
    if rt.cfg.bootloader != Bootloader::Grub {
        return None;
    }
    let dir = rt.esp_dir.join("EFI/BOOT");
    let chain = bootable::Chain {
        shim: dir.join("BOOTX64.EFI"),
        second_stage: dir.join("grubx64.efi"),
    };
    chain.second_stage.is_file().then_some(chain)
}

/// Why the fallback was given up because the other slot's kernel would not start, when
/// it was ([`fallback_target`] checked it).
pub fn no_fallback(ctx: &Context) -> Option<String> {
    let rt = ctx.slot.as_ref()?;
    let why = rt.target_kernel.get()?.refused.as_ref()?;
    Some(format!("slot {}'s kernel {why}", rt.slot.other()))
}

/// Whether this boot is over the bound of failed boots (the decision then never falls
/// back, so a lost boot-loader state cannot make the node loop).
pub fn over_bound(ctx: &Context) -> bool {
    ctx.slot.as_ref().is_some_and(|rt| rt.over_bound)
}

/// Carries out the decision on the slots: marks this slot good (pass, quarantine),
/// demotes it (image fault), uses a try of the fallback target, and records the decision
/// and `report_json` in our record. Returns the fallback plan when the decision is
/// `Fallback`.
pub fn act(
    ctx: &mut Context,
    decision: Decision,
    fault: Option<Fault>,
    reason: Option<&str>,
    report_json: &str,
) -> Option<Plan> {
    let rt = ctx.slot.as_mut()?;
    let x = rt.slot;
    let mut done: Vec<String> = Vec::new();
    let mut problems: Vec<SlotError> = Vec::new();
    let mut note = |r: Result<(), SlotError>, what: String| match r {
        Ok(()) => done.push(what),
        Err(e) => problems.push(e),
    };
    let report: Option<serde_json::Value> = serde_json::from_str(report_json).ok();
    let up = matches!(decision, Decision::Pass | Decision::Quarantine);
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        note(rt.loader.mark(x, true), format!("marked {x} good"));
    } else if up {
        note(Ok(()), format!("left {x}'s try consumed (mark-good later)"));
    }
    let y = x.other();
    let kexec = decision == Decision::Fallback && rt.cfg.fallback == FallbackVia::Kexec;
    if fault == Some(Fault::Image) && kexec {
        // One write of the boot loader's state where it can.
        note(
            rt.loader.demote_and_use_try(x, y),
            format!("demoted {x}; used a try of {y}"),
        );
    } else if fault == Some(Fault::Image) {
        note(rt.loader.mark(x, false), format!("demoted {x}"));
    } else if kexec {
        note(rt.loader.use_try(y), format!("used a try of {y}"));
    }
    let mut plan = None;
    if decision == Decision::Fallback {
        let via = rt.cfg.fallback;
        plan = Some(Plan {
            target: y,
            via,
            kernel: esp::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.kernel, y)),
            initrd: esp::esp_path(&rt.esp_dir, &rt.cfg.path(&rt.cfg.initrd, y)),
            cmdline: String::new(),
            images: None,
        });
        let how = match via {
            FallbackVia::Kexec => "kexec",
            FallbackVia::Reboot => "reboot",
        };
        note(Ok(()), format!("falling back to {y} by {how}"));
    }
    let state = &mut rt.record.state;
    let rec = state.slots.entry(x.as_str().to_string()).or_default();
    rec.last_decision = Some(decision.as_str().to_string());
    rec.last_fault = fault.map(|f| f.as_str().to_string());
    rec.last_reason = reason.map(str::to_string);
    rec.last_report = report;
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        rec.good = Some(true);
        rec.attempts = 0;
        state.consecutive_failures = 0;
    }
    if fault == Some(Fault::Image) {
        rec.good = Some(false);
    }
    note(rt.record.write(), "recorded the decision".into());
    let after = rt.view();
    if let Some(p) = plan.as_mut() {
        p.cmdline = kexec::target_cmdline(ctx, p.target);
    }
    if let Some(f) = ctx.facts.slot.as_mut() {
        f.after = after;
        f.action = Some(done.join("; "));
        if !problems.is_empty() {
            let why = join(&problems);
            f.error = Some(match f.error.take() {
                Some(e) => format!("{e}; {why}"),
                None => why,
            });
        }
    }
    plan
}

/// Replaces the report in this slot's record with `report` (the finished, quoted
/// report) and writes the record again; a failure is logged (the record keeps the
/// report [`act`] wrote).
pub fn keep_report(ctx: &mut Context, v: serde_json::Value) {
    let Some(rt) = ctx.slot.as_mut() else {
        return;
    };
    let x = rt.slot.as_str().to_string();
    rt.record.state.slots.entry(x).or_default().last_report = Some(v);
    if let Err(e) = rt.record.write() {
        log::warn!("slot: keeping the quoted report: {e}");
    }
}

/// Before the report is quoted and the boot sealed: a fallback by kexec reads the other
/// slot's kernel and initramfs and measures what it read ([`kexec::prepare`]), so a
/// verifier can tell the kexec'd boot's images as it tells the boot loader's. The same
/// bytes are loaded later ([`fall_back`]).
pub fn prepare_kexec(ctx: &mut Context, plan: &mut Plan) {
    if plan.via == FallbackVia::Kexec {
        plan.images = Some(kexec::prepare(ctx, plan).map_err(|e| e.to_string()));
    }
}

/// Falls back to the plan's slot: the report and the TPM event log go along in an archive
/// appended to its initramfs ([`kexec::stage`]), the ESP is unmounted, then kexec; when
/// the kernel refuses the kexec, the try of the slot used for it is given back (where the
/// loader can: [`BootLoader::give_back_try`]) and the node reboots, so the boot loader
/// picks the slot itself. Never returns.
pub fn fall_back(ctx: &mut Context, plan: &Plan, report_json: &str) -> ! {
    let esp = esp::mountpoint(ctx);
    let t = std::time::Instant::now();
    let staged = match plan.via {
        FallbackVia::Kexec => match &plan.images {
            Some(Ok(images)) => kexec::stage(ctx, plan, images, report_json),
            Some(Err(why)) => Err(SlotError::KexecPrepared(why.clone())),
            None => Err(SlotError::KexecPrepared(
                "not read before the report".into(),
            )),
        },
        FallbackVia::Reboot => Err(SlotError::RebootAsked),
    };
    if plan.via == FallbackVia::Kexec && staged.is_err() {
        if let Some(rt) = ctx.slot.as_mut() {
            match rt.loader.give_back_try(plan.target) {
                Ok(true) => log::info!("slot: gave back the try of {}", plan.target),
                Ok(false) => log::warn!(
                    "slot: the boot loader cannot give back the try of {}",
                    plan.target
                ),
                Err(e) => log::warn!("slot: giving back the try of {}: {e}", plan.target),
            }
        }
    }
    let staging = t.elapsed();
    crate::sys::sync();
    if let Err(e) = crate::sys::umount(&esp) {
        log::warn!("{e}");
    }
    log::info!(
        "slot: staged in {} ms, ESP synced and unmounted in {} ms",
        staging.as_millis(),
        t.elapsed().saturating_sub(staging).as_millis()
    );
    match staged {
        Ok(()) => {
            log::info!("slot: kexec into slot {}", plan.target);
            let e = crate::sys::kexec_reboot();
            log::error!("slot: {e}; rebooting instead");
        }
        Err(why) => log::warn!(
            "slot: no kexec ({why}); rebooting into slot {}",
            plan.target
        ),
    }
    crate::runtime::power::finish(crate::config::cmdline::Action::Reboot)
}

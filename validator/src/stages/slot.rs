//! Stage `slot`: which A/B slot booted, what the boot loader and our record say about the
//! slots, and, once the decision is made ([`act`]), what is written back: the slot marked
//! good, or demoted, and the fallback to the other slot by kexec or reboot ([`fall_back`]).
//!
//! State lives on the ESP, which the stage finds (`validator.esp=`, else the one partition
//! of the EFI System type) and mounts read-write:
//! - GRUB ([`Bootloader::Grub`], `examples/grub/grub.cfg`): RAUC's `ORDER`, `X_OK`, `X_TRY`
//!   in the grubenv, read and rewritten in place as GRUB's `save_env` does. A grubenv that
//!   does not parse is never written.
//! - systemd-boot: the slots' BLS entries with boot counters; marking good or bad renames
//!   the entry file, as `systemd-bless-boot` does.
//! - Our record ([`crate::formats::slotstate`], two copies under `state_dir`): attempts of
//!   each slot's image, the last decision and report of each slot, consecutive failed
//!   boots. The record bounds the boots ([`Slot::max_boots`]) even when the boot loader's
//!   counters are lost.
//!
//! Missing or unusable state never stops a good boot: the stage records why slot handling
//! is off (a platform fault, in the report) and the boot goes on; only the fallback is then
//! impossible. The decision itself is made by `boot`; this stage only carries it out.
//!
//! Current limits: two slots, `A` and `B`; the ESP is vfat (its modules must be in the
//! BOM's `modules.load`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Context, Decision, Fault};
use crate::config::bom::{Bootloader, FallbackVia, MarkGood, Slot, SlotName};
use crate::config::{layout, ESP_TYPE, LOADER_BOOT_COUNT_PATH};
use crate::formats::bls::{self, EntryName};
use crate::formats::grubenv::GrubEnv;
use crate::formats::slotstate::{self, Record, SlotRecord, State, StateError};
use crate::util::fs::{read_limited, write_in_place};

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
    /// The parsed grubenv; `None` when unusable (then never written).
    grub: Option<GrubEnv>,
    /// systemd-boot entry files, by slot.
    entries: BTreeMap<SlotName, EntryName>,
    state: State,
    generation: u64,
    next_copy: usize,
    /// Our record could not be read or created: nothing is written to it.
    state_ok: bool,
    over_bound: bool,
}

/// A fallback about to happen.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: SlotName,
    pub via: FallbackVia,
    kernel: PathBuf,
    initrd: PathBuf,
    cmdline: String,
}

/// Why a write to the slot state failed.
#[derive(Debug, thiserror::Error)]
#[error("slot state: {0}")]
pub struct SlotError(String);

impl super::Classified for SlotError {
    fn fault(&self) -> Fault {
        Fault::Platform
    }
}

fn esp_mountpoint(ctx: &Context) -> PathBuf {
    ctx.roots.run.join("validator/esp")
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
            facts.error = Some(why.clone());
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

/// Finds and mounts the ESP, reads the boot loader's state and our record, and counts
/// this boot.
fn open(ctx: &mut Context, cfg: &Slot, facts: &mut SlotFacts) -> Result<Runtime, String> {
    let slot = ctx
        .args
        .slot
        .as_deref()
        .and_then(SlotName::parse)
        .ok_or("no validator.slot=A|B on the kernel command line")?;
    facts.booted = Some(slot);
    let spec = ctx.args.esp.clone();
    let esp = super::storage::wait_scan(
        "the ESP",
        &ctx.roots.sys,
        &ctx.roots.dev,
        ctx.args.root_timeout,
        Duration::from_millis(100),
        || {
            crate::sys::reap_zombies();
        },
        |parts| -> Result<_, String> {
            let hits: Vec<_> = parts
                .iter()
                .filter(|p| match &spec {
                    Some(s) => super::storage::matches(s, p),
                    None => p.type_uuid == ESP_TYPE,
                })
                .collect();
            match hits.as_slice() {
                [] => Ok(None),
                [one] => Ok(Some((*one).clone())),
                many => Err(format!(
                    "more than one ESP: {}",
                    many.iter()
                        .map(|p| p.device.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        },
        |e| e.to_string(),
    )?;
    facts.esp = Some(esp.device.clone());
    let dir = esp_mountpoint(ctx);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    crate::sys::mount(
        &esp.device,
        &dir,
        Some("vfat"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        Some("flush"),
    )
    .map_err(|e| {
        let why = format!("cannot mount the ESP: {e}");
        if device_read_only(&ctx.roots.sys, &esp.device) {
            // The kernel refuses a read-write mount of a write-protected device with EACCES,
            // which alone does not say why.
            format!("{why} (the device is read-only)")
        } else {
            why
        }
    })?;
    open_dir(ctx, cfg, facts, slot, dir)
}

/// Whether the kernel marks block device `device` (`/dev/NAME`) read-only (its sysfs `ro`
/// is `1`; a partition is read-only when its disk is).
fn device_read_only(sys_root: &Path, device: &str) -> bool {
    let Some(name) = Path::new(device).file_name() else {
        return false;
    };
    let ro = sys_root.join("class/block").join(name).join("ro");
    crate::util::fs::read_text_limited(&ro, crate::util::fs::SYSFS_VALUE_MAX)
        .map(|v| v.trim() == "1")
        .unwrap_or(false)
}

/// Everything after the mount: the boot loader's state and our record in the mounted
/// ESP `dir`, and this boot counted.
pub(crate) fn open_dir(
    ctx: &mut Context,
    cfg: &Slot,
    facts: &mut SlotFacts,
    slot: SlotName,
    dir: PathBuf,
) -> Result<Runtime, String> {
    if cfg.bootloader == Bootloader::SystemdBoot {
        mount_efivarfs(ctx);
    }
    let loaded = Runtime::load(cfg, slot, dir, true);
    let mut rt = loaded.runtime;
    let mut problems = loaded.problems;
    facts.before = loaded.view;
    if cfg.bootloader == Bootloader::SystemdBoot {
        if let Some(p) = loader_boot_count_path(ctx) {
            facts.before.insert("LoaderBootCountPath".into(), p);
        }
    }
    if loaded.created {
        ctx.facts
            .warnings
            .push("slot: created a new state record on the ESP".into());
    }
    facts.previous = previous(ctx, &rt);
    facts.consecutive_failures = rt.state.consecutive_failures;
    rt.over_bound = rt.state.consecutive_failures >= cfg.max_boots;
    // Count this boot before anything can go wrong: a crash later in it still counts.
    let (image_id, bom_sha) = (ctx.facts.image_id.clone(), ctx.facts.bom_sha256.clone());
    let rec = rt.state.slots.entry(slot.as_str().to_string()).or_default();
    if rec.bom_sha256 != bom_sha {
        *rec = SlotRecord {
            image_id,
            bom_sha256: bom_sha,
            ..SlotRecord::default()
        };
    }
    rec.attempts = rec.attempts.saturating_add(1);
    facts.attempts = rec.attempts;
    rt.state.consecutive_failures = rt.state.consecutive_failures.saturating_add(1);
    rt.state.last_slot = Some(slot.as_str().to_string());
    if let Err(e) = write_state(&mut rt) {
        problems.push(e);
    }
    if !problems.is_empty() {
        let why = problems.join("; ");
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
    /// What could not be read (the rest is still usable).
    pub problems: Vec<String>,
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
        let mut rt = Runtime {
            cfg: cfg.clone(),
            slot,
            esp_dir: dir,
            grub: None,
            entries: BTreeMap::new(),
            state: State::default(),
            generation: 0,
            next_copy: 0,
            state_ok: false,
            over_bound: false,
        };
        let mut problems = Vec::new();
        let mut view = BTreeMap::new();
        match cfg.bootloader {
            Bootloader::Grub => match read_grubenv(&rt) {
                Ok(env) => {
                    view = grub_view(&env);
                    rt.grub = Some(env);
                }
                Err(e) => problems.push(e),
            },
            Bootloader::SystemdBoot => match read_entries(&rt) {
                Ok(found) => {
                    view = found
                        .iter()
                        .map(|(s, n)| (s.as_str().to_string(), n.file_name()))
                        .collect();
                    rt.entries = found;
                }
                Err(e) => problems.push(e),
            },
        }
        let mut created = false;
        match read_state(&rt, create) {
            Ok((copies, c)) => {
                created = c;
                if let Some((_, r)) = slotstate::newest(&copies) {
                    rt.state = r.state.clone();
                    rt.generation = r.generation;
                }
                rt.next_copy = slotstate::next_copy(&copies);
                rt.state_ok = true;
            }
            Err(e) => problems.push(e),
        }
        Loaded {
            runtime: rt,
            view,
            problems,
            created,
        }
    }

    /// The status report of what was loaded.
    pub fn status(&self, view: BTreeMap<String, String>, problems: Vec<String>) -> Status {
        Status {
            bootloader: self.cfg.bootloader,
            bootloader_state: view,
            record: self.state_ok.then(|| self.state.clone()),
            generation: self.generation,
            problems,
        }
    }

    /// Marks slot `s` good or bad in the boot loader's state and in our record, as the
    /// post-boot service (`validator slot mark-good`) or an operator does.
    pub fn mark_slot(&mut self, s: SlotName, good: bool) -> Result<String, String> {
        mark(self, s, good)?;
        let mut done = format!("marked {s} {}", if good { "good" } else { "bad" });
        if self.state_ok {
            let rec = self.state.slots.entry(s.as_str().to_string()).or_default();
            rec.good = Some(good);
            if good {
                rec.attempts = 0;
                self.state.consecutive_failures = 0;
            }
            write_state(self)?;
            done.push_str(" (boot loader and record)");
        }
        Ok(done)
    }

    /// The boot loader's view now.
    pub fn view(&self) -> BTreeMap<String, String> {
        match self.cfg.bootloader {
            Bootloader::Grub => self.grub.as_ref().map(grub_view).unwrap_or_default(),
            Bootloader::SystemdBoot => self
                .entries
                .iter()
                .map(|(s, n)| (s.as_str().to_string(), n.file_name()))
                .collect(),
        }
    }
}

fn esp_path(rt: &Runtime, p: &str) -> PathBuf {
    rt.esp_dir.join(p.trim_start_matches('/'))
}

fn read_grubenv(rt: &Runtime) -> Result<GrubEnv, String> {
    let p = esp_path(rt, &rt.cfg.grubenv);
    let bytes = read_limited(&p, crate::formats::grubenv::MAX_SIZE as u64)
        .map_err(|e| format!("grubenv: {e}"))?;
    GrubEnv::parse(&bytes).map_err(|e| format!("{}: {e} (left alone)", p.display()))
}

fn grub_view(env: &GrubEnv) -> BTreeMap<String, String> {
    env.vars()
        .into_iter()
        .filter(|(k, _)| matches!(k.as_str(), "ORDER" | "A_OK" | "A_TRY" | "B_OK" | "B_TRY"))
        .collect()
}

fn entries_dir(rt: &Runtime) -> PathBuf {
    rt.esp_dir.join("loader/entries")
}

/// The slots' BLS entry files (exactly one per slot id, any counters).
fn read_entries(rt: &Runtime) -> Result<BTreeMap<SlotName, EntryName>, String> {
    let dir = entries_dir(rt);
    let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found: BTreeMap<SlotName, EntryName> = BTreeMap::new();
    for e in rd.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(n) = EntryName::parse(&name) else {
            continue; // not ours to judge; left alone
        };
        for (s, id) in &rt.cfg.entries {
            if &n.id == id {
                if let Some(prev) = found.insert(*s, n.clone()) {
                    return Err(format!(
                        "two entries for slot {s}: {} and {}",
                        prev.file_name(),
                        n.file_name()
                    ));
                }
            }
        }
    }
    for s in [SlotName::A, SlotName::B] {
        if !found.contains_key(&s) {
            return Err(format!(
                "no BLS entry {}[+N[-M]].conf for slot {s} in {}",
                rt.cfg.entries.get(&s).map_or("?", String::as_str),
                dir.display()
            ));
        }
    }
    Ok(found)
}

fn mount_efivarfs(ctx: &Context) {
    let d = ctx.roots.sys.join("firmware/efi/efivars");
    if d.is_dir() {
        if let Err(e) = crate::sys::mount(
            "efivarfs",
            &d,
            Some("efivarfs"),
            nix::mount::MsFlags::MS_NOSUID
                | nix::mount::MsFlags::MS_NODEV
                | nix::mount::MsFlags::MS_NOEXEC,
            None,
        ) {
            if e.errno != nix::errno::Errno::EBUSY {
                log::warn!("{e}");
            }
        }
    }
}

fn loader_boot_count_path(ctx: &Context) -> Option<String> {
    let p = ctx
        .roots
        .sys
        .join("firmware/efi/efivars")
        .join(LOADER_BOOT_COUNT_PATH);
    let bytes = read_limited(&p, 4096).ok()?;
    bls::efivar_utf16(&bytes, LOADER_BOOT_COUNT_PATH).ok()
}

fn copy_path(rt: &Runtime, i: usize) -> PathBuf {
    let name = slotstate::COPIES.get(i).copied().unwrap_or("state.0");
    esp_path(rt, &rt.cfg.state_dir).join(name)
}

/// Reads both copies, creating them (zero-filled, fixed size) when the directory is new.
fn read_state(
    rt: &Runtime,
    create: bool,
) -> Result<([Result<Record, StateError>; 2], bool), String> {
    let dir = esp_path(rt, &rt.cfg.state_dir);
    let mut created = false;
    if !dir.exists() && !create {
        return Err(format!("no state record at {}", dir.display()));
    }
    if !dir.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        created = true;
    }
    let read = |i: usize| -> Result<Record, StateError> {
        let p = copy_path(rt, i);
        match read_limited(&p, slotstate::FILE_SIZE as u64) {
            Ok(b) => slotstate::decode(&b),
            Err(e) => Err(StateError::Invalid(e.to_string())),
        }
    };
    for i in 0..2 {
        let p = copy_path(rt, i);
        if !p.exists() && create {
            let f = std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            f.set_len(slotstate::FILE_SIZE as u64)
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("{}: {e}", p.display()))?;
            created = true;
        }
    }
    Ok(([read(0), read(1)], created))
}

fn write_state(rt: &mut Runtime) -> Result<(), String> {
    if !rt.state_ok {
        return Err("our state record is not written (unreadable ESP directory)".into());
    }
    let mut rec = Record {
        generation: rt.generation.saturating_add(1),
        state: rt.state.clone(),
    };
    let bytes = match slotstate::encode(&rec, slotstate::FILE_SIZE) {
        Ok(b) => b,
        Err(StateError::TooLarge { .. }) => {
            // Keep the facts, drop the reports' bodies rather than the record.
            for r in rec.state.slots.values_mut() {
                r.last_report = None;
            }
            slotstate::encode(&rec, slotstate::FILE_SIZE).map_err(|e| e.to_string())?
        }
        Err(e) => return Err(e.to_string()),
    };
    let p = copy_path(rt, rt.next_copy);
    log::info!(
        "slot: writing state generation {} to {}",
        rec.generation,
        p.display()
    );
    write_in_place(&p, &bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    log::info!("slot: state written");
    rt.generation = rec.generation;
    rt.next_copy = 1 - rt.next_copy.min(1);
    Ok(())
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
    let rec = rt.state.slots.get(other.as_str())?;
    if rt.state.last_slot.as_deref() != Some(other.as_str())
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
/// our record has not seen its image fail, and the bound on failed boots is not reached.
pub fn fallback_target(ctx: &Context) -> Option<SlotName> {
    let rt = ctx.slot.as_ref()?;
    if rt.over_bound || !rt.state_ok {
        return None;
    }
    let y = rt.slot.other();
    let offered = match rt.cfg.bootloader {
        Bootloader::Grub => {
            let env = rt.grub.as_ref()?;
            env.get(&format!("{y}_OK")).as_deref() == Some("1")
                && env.get(&format!("{y}_TRY")).as_deref() == Some("0")
        }
        Bootloader::SystemdBoot => rt.entries.get(&y).is_some_and(|n| !n.bad()),
    };
    let failed = rt
        .state
        .slots
        .get(y.as_str())
        .is_some_and(|r| r.good == Some(false));
    (offered && !failed).then_some(y)
}

/// Whether this boot is over the bound of failed boots (the decision then never falls
/// back, so a lost boot-loader state cannot make the node loop).
pub fn over_bound(ctx: &Context) -> bool {
    ctx.slot.as_ref().is_some_and(|rt| rt.over_bound)
}

fn set_grub(rt: &mut Runtime, vars: &[(String, &str)]) -> Result<(), String> {
    let path = esp_path(rt, &rt.cfg.grubenv);
    let env = rt
        .grub
        .as_mut()
        .ok_or("the grubenv is unusable; left alone")?;
    for (k, v) in vars {
        env.set(k, v).map_err(|e| format!("grubenv: {e}"))?;
    }
    log::info!("slot: writing {}", path.display());
    write_in_place(&path, env.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))
}

fn rename_entry(rt: &mut Runtime, s: SlotName, to: EntryName) -> Result<(), String> {
    let dir = entries_dir(rt);
    let from = rt
        .entries
        .get(&s)
        .cloned()
        .ok_or_else(|| format!("no entry for slot {s}"))?;
    if from == to {
        return Ok(());
    }
    let (a, b) = (dir.join(from.file_name()), dir.join(to.file_name()));
    std::fs::rename(&a, &b)
        .map_err(|e| format!("rename {} to {}: {e}", a.display(), b.display()))?;
    if let Ok(d) = std::fs::File::open(&dir) {
        if let Err(e) = d.sync_all() {
            log::warn!("{}: {e}", dir.display());
        }
    }
    rt.entries.insert(s, to);
    Ok(())
}

fn mark(rt: &mut Runtime, s: SlotName, good: bool) -> Result<(), String> {
    match rt.cfg.bootloader {
        Bootloader::Grub => set_grub(
            rt,
            &[
                (format!("{s}_OK"), if good { "1" } else { "0" }),
                (format!("{s}_TRY"), "0"),
            ],
        ),
        Bootloader::SystemdBoot => {
            let n = rt
                .entries
                .get(&s)
                .cloned()
                .ok_or_else(|| format!("no entry for slot {s}"))?;
            let to = if good {
                n.marked_good()
            } else {
                n.marked_bad()
            };
            rename_entry(rt, s, to)
        }
    }
}

/// Uses one try of slot `s`, as the boot loader does before it boots it (for a kexec,
/// which bypasses the boot loader).
fn use_try(rt: &mut Runtime, s: SlotName) -> Result<(), String> {
    match rt.cfg.bootloader {
        Bootloader::Grub => set_grub(rt, &[(format!("{s}_TRY"), "1")]),
        Bootloader::SystemdBoot => {
            let n = rt
                .entries
                .get(&s)
                .cloned()
                .ok_or_else(|| format!("no entry for slot {s}"))?;
            match n.left {
                Some(l) if l > 0 => {
                    let to = EntryName {
                        id: n.id.clone(),
                        left: Some(l - 1),
                        done: Some(n.done.unwrap_or(0).saturating_add(1)),
                    };
                    rename_entry(rt, s, to)
                }
                _ => Ok(()),
            }
        }
    }
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
    let mut problems: Vec<String> = Vec::new();
    let mut note = |r: Result<(), String>, what: String| match r {
        Ok(()) => done.push(what),
        Err(e) => problems.push(e),
    };
    let report: Option<serde_json::Value> = serde_json::from_str(report_json).ok();
    let up = matches!(decision, Decision::Pass | Decision::Quarantine);
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        note(mark(rt, x, true), format!("marked {x} good"));
    } else if up {
        note(Ok(()), format!("left {x}'s try consumed (mark-good later)"));
    }
    if fault == Some(Fault::Image) {
        note(mark(rt, x, false), format!("demoted {x}"));
    }
    let mut plan = None;
    if decision == Decision::Fallback {
        let y = x.other();
        let via = rt.cfg.fallback;
        if via == FallbackVia::Kexec {
            note(use_try(rt, y), format!("used a try of {y}"));
        }
        plan = Some(Plan {
            target: y,
            via,
            kernel: esp_path(rt, &rt.cfg.path(&rt.cfg.kernel, y)),
            initrd: esp_path(rt, &rt.cfg.path(&rt.cfg.initrd, y)),
            cmdline: String::new(),
        });
        let how = match via {
            FallbackVia::Kexec => "kexec",
            FallbackVia::Reboot => "reboot",
        };
        note(Ok(()), format!("falling back to {y} by {how}"));
    }
    let rec = rt.state.slots.entry(x.as_str().to_string()).or_default();
    rec.last_decision = Some(decision.as_str().to_string());
    rec.last_fault = fault.map(|f| f.as_str().to_string());
    rec.last_reason = reason.map(str::to_string);
    rec.last_report = report;
    if up && rt.cfg.mark_good == MarkGood::Initramfs {
        rec.good = Some(true);
        rec.attempts = 0;
        rt.state.consecutive_failures = 0;
    }
    if fault == Some(Fault::Image) {
        rec.good = Some(false);
    }
    note(write_state(rt), "recorded the decision".into());
    let after = rt.view();
    if let Some(p) = plan.as_mut() {
        p.cmdline = target_cmdline(ctx, p.target);
    }
    if let Some(f) = ctx.facts.slot.as_mut() {
        f.after = after;
        f.action = Some(done.join("; "));
        if !problems.is_empty() {
            let why = problems.join("; ");
            f.error = Some(match f.error.take() {
                Some(e) => format!("{e}; {why}"),
                None => why,
            });
        }
    }
    plan
}

/// The other slot's kernel command line: its BLS entry's options (systemd-boot), or this
/// boot's command line with `validator.slot=` naming it (GRUB, whose configuration gives
/// every slot the same line).
fn target_cmdline(ctx: &Context, y: SlotName) -> String {
    if let Some(rt) = ctx.slot.as_ref() {
        if rt.cfg.bootloader == Bootloader::SystemdBoot {
            if let Some(n) = rt.entries.get(&y) {
                let p = entries_dir(rt).join(n.file_name());
                if let Ok(bytes) = read_limited(&p, bls::MAX_ENTRY as u64) {
                    if let Ok(e) = bls::Entry::parse(&bytes, &n.file_name()) {
                        return e.options;
                    }
                }
            }
        }
    }
    let mut words: Vec<String> = ctx
        .cmdline
        .split_whitespace()
        // BOOT_IMAGE= is the boot loader's note of the kernel it loaded, not ours to keep.
        .filter(|w| {
            !["validator.slot=", "validator-slot=", "BOOT_IMAGE="]
                .iter()
                .any(|p| w.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    words.insert(0, format!("validator.slot={y}"));
    words.join(" ")
}

/// Falls back to the plan's slot: the report and the TPM event log go along in an archive
/// appended to its initramfs, the ESP is unmounted, then kexec; when the kernel refuses
/// the kexec, a reboot (the boot loader then picks the slot). Never returns.
pub fn fall_back(ctx: &Context, plan: &Plan, report_json: &str) -> ! {
    let esp = esp_mountpoint(ctx);
    let staged = match plan.via {
        FallbackVia::Kexec => stage_kexec(ctx, plan, report_json),
        FallbackVia::Reboot => Err("the BOM asks for a reboot".to_string()),
    };
    crate::sys::sync();
    if let Err(e) = crate::sys::umount(&esp) {
        log::warn!("{e}");
    }
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
    super::handover::finish(crate::config::cmdline::Action::Reboot)
}

fn stage_kexec(ctx: &Context, plan: &Plan, report_json: &str) -> Result<(), String> {
    let kernel = crate::util::fs::open_input(&plan.kernel, false).map_err(|e| e.to_string())?;
    let mut initrd = read_limited(&plan.initrd, 1 << 30).map_err(|e| e.to_string())?;
    // The kernel unpacks archives one after another; the next must start 4-aligned.
    while !initrd.len().is_multiple_of(4) {
        initrd.push(0);
    }
    let mut carry = crate::formats::newc::Writer::new();
    carry
        .dir("etc")
        .dir("etc/validator")
        .dir("etc/validator/carried")
        .file(layout::CARRIED_REPORT, report_json.as_bytes());
    let log = ctx.roots.run.join(super::measure::BINARY_LOG);
    if let Ok(bytes) = read_limited(&log, 64 << 20) {
        carry.file(layout::CARRIED_EVENTLOG, &bytes);
    }
    initrd.extend_from_slice(&carry.finish());
    let fd = crate::sys::memfd_with("initrd", &initrd).map_err(|e| e.to_string())?;
    log::info!(
        "slot: kexec_file_load {} with {} ({} bytes), command line {:?}",
        plan.kernel.display(),
        plan.initrd.display(),
        initrd.len(),
        plan.cmdline
    );
    crate::sys::kexec_file_load(&kernel, &fd, &plan.cmdline).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Roots;

    /// The read-only flag comes from the partition's sysfs `ro`; anything else (absent,
    /// `0`, a bad name) is not read-only.
    #[test]
    fn read_only_device_is_read_from_sysfs() {
        let d = std::env::temp_dir().join(format!("vld-slot-ro-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (name, ro) in [("vdb1", "1\n"), ("vda1", "0\n")] {
            let p = d.join("class/block").join(name);
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("ro"), ro).unwrap();
        }
        assert!(device_read_only(&d, "/dev/vdb1"));
        assert!(!device_read_only(&d, "/dev/vda1"));
        assert!(!device_read_only(&d, "/dev/vdc1"));
        assert!(!device_read_only(&d, "/"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn cfg(bootloader: Bootloader) -> Slot {
        let toml = match bootloader {
            Bootloader::Grub => "bootloader = \"grub\"",
            Bootloader::SystemdBoot => "bootloader = \"systemd-boot\"",
        };
        toml::from_str(toml).unwrap()
    }

    /// An ESP directory with a grubenv made by grub-editenv.
    fn esp(tag: &str, vars: &[&str]) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vld-slot-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("EFI/BOOT")).unwrap();
        let env = d.join("EFI/BOOT/grubenv");
        let tool = "/usr/bin/grub-editenv";
        assert!(std::process::Command::new(tool)
            .arg(&env)
            .arg("create")
            .status()
            .unwrap()
            .success());
        let mut c = std::process::Command::new(tool);
        c.arg(&env).arg("set").args(vars);
        assert!(c.status().unwrap().success());
        d
    }

    fn grub_list(d: &Path) -> String {
        let out = std::process::Command::new("/usr/bin/grub-editenv")
            .arg(d.join("EFI/BOOT/grubenv"))
            .arg("list")
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn boot(d: &Path, slot: SlotName, bom_sha: &str) -> (Context, SlotFacts) {
        let mut ctx = Context::new(Roots::default());
        ctx.facts.image_id = Some(format!("img-{bom_sha}"));
        ctx.facts.bom_sha256 = Some(bom_sha.into());
        ctx.cmdline = format!("console=ttyS0 validator.slot={slot} quiet");
        let mut facts = SlotFacts::default();
        let rt = open_dir(
            &mut ctx,
            &cfg(Bootloader::Grub),
            &mut facts,
            slot,
            d.to_path_buf(),
        )
        .unwrap();
        ctx.slot = Some(rt);
        ctx.facts.slot = Some(facts.clone());
        (ctx, facts)
    }

    /// GRUB's scheme end to end on the files GRUB and grub-editenv use: a good boot marks
    /// its slot good; an image fault demotes it, uses a try of the other slot for the
    /// kexec and records the report; the other slot's boot sees where it came from; when
    /// that one fails too there is no fallback left.
    #[test]
    fn grub_slots_good_then_fallback_then_both_bad() {
        let d = esp(
            "grub",
            &["ORDER=A B", "A_OK=1", "A_TRY=1", "B_OK=1", "B_TRY=0"],
        );
        let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
        assert_eq!(facts.attempts, 1);
        assert_eq!(facts.before.get("A_TRY").map(String::as_str), Some("1"));
        assert_eq!(fallback_target(&ctx), Some(SlotName::B));
        assert!(act(
            &mut ctx,
            Decision::Pass,
            None,
            None,
            "{\"decision\":\"pass\"}"
        )
        .is_none());
        assert_eq!(
            grub_list(&d),
            "ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n"
        );
        // Next boot of A: GRUB set A_TRY=1 again; now the image is bad.
        assert!(std::process::Command::new("/usr/bin/grub-editenv")
            .arg(d.join("EFI/BOOT/grubenv"))
            .args(["set", "A_TRY=1"])
            .status()
            .unwrap()
            .success());
        let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
        assert_eq!((facts.attempts, facts.consecutive_failures), (1, 0));
        let plan = act(
            &mut ctx,
            Decision::Fallback,
            Some(Fault::Image),
            Some("modules: module gate refused: virtio_blk"),
            "{\"decision\":\"fallback\",\"slot\":{\"booted\":\"A\"}}",
        )
        .expect("a fallback plan");
        assert_eq!(plan.target, SlotName::B);
        assert_eq!(plan.kernel, d.join("B/vmlinuz"));
        assert_eq!(plan.cmdline, "validator.slot=B console=ttyS0 quiet");
        let mut c2 = Context::new(Roots::default());
        c2.cmdline = "BOOT_IMAGE=/A/vmlinuz validator.slot=A ro".into();
        assert_eq!(target_cmdline(&c2, SlotName::B), "validator.slot=B ro");
        // A demoted, B's try used for the kexec (as GRUB would before booting it).
        assert_eq!(
            grub_list(&d),
            "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=1\nB_TRY=1\n"
        );
        let f = ctx.facts.slot.as_ref().unwrap();
        assert!(f.action.as_deref().unwrap().contains("demoted A"), "{f:?}");
        // B's boot (after a reboot: no carried report) finds A's failure in the record.
        let (mut ctx, facts) = boot(&d, SlotName::B, "bbb");
        let prev = facts.previous.expect("A's failure");
        assert_eq!((prev.slot.as_str(), prev.via.as_str()), ("A", "reboot"));
        assert_eq!(
            prev.reason.as_deref(),
            Some("modules: module gate refused: virtio_blk")
        );
        assert_eq!(prev.report.unwrap()["decision"], "fallback");
        assert_eq!(facts.consecutive_failures, 1);
        // B is bad too: A is no longer offered: both bad, no fallback.
        assert_eq!(fallback_target(&ctx), None);
        assert!(act(
            &mut ctx,
            Decision::Stop,
            Some(Fault::Image),
            Some("x"),
            "{}"
        )
        .is_none());
        assert_eq!(
            grub_list(&d),
            "ORDER=A B\nA_OK=0\nA_TRY=0\nB_OK=0\nB_TRY=0\n"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Our record bounds the boots when the boot loader's state is lost: after
    /// `max_boots` failed boots in a row no fallback is offered, whatever GRUB says.
    #[test]
    fn the_record_bounds_failed_boots() {
        let d = esp(
            "bound",
            &["ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=1", "B_TRY=0"],
        );
        for n in 0..3 {
            let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
            assert_eq!(facts.consecutive_failures, n);
            // The boot crashed before deciding (nothing written back); GRUB's state is
            // reset by someone, so it would keep offering both slots.
            drop(ctx.slot.take());
        }
        let (ctx, facts) = boot(&d, SlotName::A, "aaa");
        assert_eq!(facts.consecutive_failures, 3);
        assert!(over_bound(&ctx));
        assert_eq!(fallback_target(&ctx), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A grubenv we cannot parse is reported and never written; the boot goes on.
    #[test]
    fn unparsable_grubenv_is_left_alone() {
        let d = esp("corrupt", &["A_OK=1"]);
        let env = d.join("EFI/BOOT/grubenv");
        let mut bytes = std::fs::read(&env).unwrap();
        let n = bytes.len();
        bytes[n - 1] = b'x';
        std::fs::write(&env, &bytes).unwrap();
        let (mut ctx, facts) = boot(&d, SlotName::A, "aaa");
        assert!(
            facts.error.as_deref().unwrap().contains("left alone"),
            "{facts:?}"
        );
        assert_eq!(fallback_target(&ctx), None);
        act(&mut ctx, Decision::Pass, None, None, "{}");
        assert_eq!(std::fs::read(&env).unwrap(), bytes, "untouched");
        let f = ctx.facts.slot.as_ref().unwrap();
        assert!(f.error.as_deref().unwrap().contains("unusable"), "{f:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

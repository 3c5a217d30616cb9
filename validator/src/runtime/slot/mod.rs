//! The A/B state, below the stages: which slots there are, what the boot loader and our
//! record say about them, and how they are changed - the one home the `slot` stage, the
//! operator's `validator slot`, `attest predict` and the test bed use.
//!
//! What a boot loader does is one trait, [`BootLoader`] ([`loader`]), with one
//! implementation per loader:
//! - GRUB ([`grub`], `examples/grub/grub.cfg`): RAUC's `ORDER`, `X_OK`, `X_TRY` in the
//!   grubenv, read and rewritten in place as GRUB's `save_env` does. A grubenv that does
//!   not parse is never written.
//! - systemd-boot ([`bls`]): the slots' BLS entries with boot counters; marking good or
//!   bad renames the entry file, as `systemd-bless-boot` does.
//! - Our record ([`record`], [`crate::formats::slotstate`], two copies under
//!   `state_dir`): attempts of each slot's image, the last decision and report of each
//!   slot, consecutive failed boots. The record bounds the boots even when the boot
//!   loader's counters are lost.
//!
//! [`Runtime`] holds one loaded state ([`Runtime::load`]) and marks slots
//! ([`Runtime::mark`]: both or neither); [`bootable`] says whether a slot's kernel would
//! start under Secure Boot; [`same_line_for`] is the rule for the command line a GRUB
//! slot boots with. Errors are [`SlotError`] (a platform fault where a stage returns
//! one).
//!
//! Current limits: two slots, `A` and `B`; paths on the ESP are the BOM's `[slot]`
//! paths, relative to where the ESP is mounted (the caller mounts it).

pub mod bls;
pub mod bootable;
mod error;
pub mod grub;
pub mod loader;
pub mod record;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::bom::{Bootloader, Slot, SlotName};
use crate::formats::slotstate::State;

pub use error::SlotError;
pub use loader::BootLoader;
use record::Store;

/// `p` (a path the BOM gives, absolute or not) on the ESP mounted at `esp_dir`.
pub fn esp_path(esp_dir: &Path, p: &str) -> PathBuf {
    esp_dir.join(p.trim_start_matches('/'))
}

/// A slot's Unified Kernel Image on the ESP, in the slot's directory, where `mkinitramfs
/// install` puts it and the shipped grub.cfg chainloads it.
pub const UKI_FILE: &str = "linux.efi";

/// The largest Unified Kernel Image read (a kernel, an initramfs, the stub).
pub const UKI_MAX: u64 = 512 << 20;

/// Slot `y`'s Unified Kernel Image on the ESP mounted at `esp_dir` (`/<slot>/linux.efi`).
pub fn uki_path(esp_dir: &Path, y: SlotName) -> PathBuf {
    esp_dir.join(y.as_str()).join(UKI_FILE)
}

/// This boot's command line `this_boot` with `validator.slot=` naming `y` (GRUB, whose
/// configuration gives every slot the same line).
pub fn same_line_for(this_boot: &str, y: SlotName) -> String {
    let mut words: Vec<String> = this_boot
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

/// The words before the milliseconds `kexec_file_load(2)` itself took, in the init's log
/// (read by the recovery benchmark).
pub const KERNEL_LOAD_LOG: &str = "kexec_file_load returned in";

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

/// The A/B state of one boot or one operator's command: the configuration, the slot
/// that booted (or is named), the ESP, the boot loader's state and our record; what the
/// `slot` stage decides with and writes through.
#[derive(Debug)]
pub struct Runtime {
    pub(crate) cfg: Slot,
    pub(crate) slot: SlotName,
    pub(crate) esp_dir: PathBuf,
    /// The boot loader's state (unusable state is never written).
    pub(crate) loader: Box<dyn BootLoader>,
    /// Our record (not written when it could not be read or created).
    pub(crate) record: Store,
    pub(crate) over_bound: bool,
    /// Whether the other slot's kernel would start ([`bootable`]), checked once.
    pub(crate) target_kernel: std::cell::OnceCell<bootable::Verdict>,
    /// The preflight found this boot's fault on both slots (`stages::preflight::repeat`):
    /// the other slot's demotion is undone when the decision is carried out.
    pub(crate) repeated: Option<Repeated>,
}

/// The same device fault in this boot and in a boot of the other slot: the devices are
/// at fault, not either image (`stages::preflight::repeat` finds it, the `slot` stage
/// acts on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Repeated {
    /// The other slot, whose boot failed the same way.
    pub slot: String,
    pub check: String,
    /// The devices (PCI addresses) both boots' drivers did not see.
    pub devices: Vec<String>,
    /// Where the other boot's evidence came from.
    pub source: RepeatSource,
}

/// Where the evidence of a [`Repeated`] finding came from. Our record on the ESP is not
/// authenticated (root on the node can write it); a verifier weighs the finding by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepeatSource {
    /// The boot that fell back into this one (its report carried by kexec, or kept in our
    /// record for a fallback by reboot): its demotion of the other slot is given back.
    FellBack,
    /// The other slot's last report in our record, which already held the finding: this
    /// boot quarantines at once, and nothing is given back.
    Record,
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
            repeated: None,
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

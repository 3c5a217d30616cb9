//! Layer 8: the boot stages, one module per stage, named as the report names them, in
//! run order: [`start`], [`measure`], [`modules`], [`slot`], [`storage`], [`verity`],
//! [`mount`], [`critical`], [`preflight`], [`handover`].
//!
//! Contract: a stage is `run(&mut Context) -> Result<String, E>`: it reads what earlier
//! stages left in the [`Context`], adds its own facts to [`Context::facts`], and returns a
//! one-line detail or its own error type. Every stage error implements [`Classified`]:
//! its fault class (image, hardware, platform) comes from its type and variant, never
//! from the call site, and the decision reads only that class. Stages take every root
//! (`/sys`, `/proc`, `/dev`, `/run`, the new root, the initramfs) from [`Roots`], so each
//! runs against a fixture tree as well as on a node.
//!
//! No stage uses another: what several stages share at run time (the TPM measurer, device
//! discovery, the final action, the node's identity, ...) lives one layer down in
//! [`crate::runtime`]; this module is the framework they all use ([`Context`], [`Fault`],
//! [`Classified`], [`Facts`], [`Stage`]).

pub mod critical;
pub mod handover;
pub mod measure;
pub mod modules;
pub mod mount;
pub mod preflight;
pub mod slot;
pub mod start;
pub mod storage;
pub mod verity;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::bom::LoadedBom;
use crate::config::cmdline::BootArgs;
use crate::runtime::measure::{MeasureError, Measurer, TpmReport};
use crate::runtime::node::NodeFacts;
use crate::runtime::verity_parts::Parts;
use crate::trust::TrustStore;

/// What a failure points at. Only image faults burn an A/B slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// Something we built is wrong (BOM, module, root hash, versions).
    Image,
    /// Hardware the BOM promises is missing or degraded.
    Hardware,
    /// The platform around the image (no TPM, firmware, command line).
    Platform,
}

impl Fault {
    /// The word the report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Image => "image",
            Fault::Hardware => "hardware",
            Fault::Platform => "platform",
        }
    }
}

/// What the boot does next (one type with the measurement vocabulary's).
pub use crate::formats::tpm::measurement::Decision;

/// A stage error that knows its fault class.
pub trait Classified: std::error::Error {
    fn fault(&self) -> Fault;
}

/// A measurement that failed: the TPM the BOM requires is missing or failed (platform),
/// or what should be measured is not there (image).
impl Classified for MeasureError {
    fn fault(&self) -> Fault {
        match self {
            MeasureError::Required(_) => Fault::Platform,
            MeasureError::Unmeasurable { .. } => Fault::Image,
        }
    }
}

/// The stages, in run order, as the report names them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Start,
    Measure,
    Modules,
    Slot,
    Storage,
    Verity,
    Mount,
    Critical,
    Preflight,
    Handover,
}

impl Stage {
    /// Every stage in run order.
    pub const ALL: [Stage; 10] = [
        Stage::Start,
        Stage::Measure,
        Stage::Modules,
        Stage::Slot,
        Stage::Storage,
        Stage::Verity,
        Stage::Mount,
        Stage::Critical,
        Stage::Preflight,
        Stage::Handover,
    ];

    /// The name the report and the log use.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Start => "start",
            Stage::Measure => "measure",
            Stage::Modules => "modules",
            Stage::Slot => "slot",
            Stage::Storage => "storage",
            Stage::Verity => "verity",
            Stage::Mount => "mount",
            Stage::Critical => "critical",
            Stage::Preflight => "preflight",
            Stage::Handover => "handover",
        }
    }
}

/// Where the boot finds things. On a node these are the real roots; every check takes
/// them as parameters so it also runs against fixture trees.
#[derive(Debug, Clone)]
pub struct Roots {
    pub proc: PathBuf,
    pub sys: PathBuf,
    pub dev: PathBuf,
    pub run: PathBuf,
    /// Where the real root is mounted before `switch_root`.
    pub new_root: PathBuf,
    /// The initramfs's module trees (`<modules>/<release>`).
    pub modules: PathBuf,
    /// The initramfs itself (gate inputs under `etc/validator/`).
    pub initramfs: PathBuf,
}

impl Default for Roots {
    fn default() -> Roots {
        Roots {
            proc: "/proc".into(),
            sys: "/sys".into(),
            dev: "/dev".into(),
            run: "/run".into(),
            new_root: "/sysroot".into(),
            modules: "/lib/modules".into(),
            initramfs: "/".into(),
        }
    }
}

/// What the stages found out, for the report (which is built one layer up).
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub image_id: Option<String>,
    pub bom_sha256: Option<String>,
    pub kernel_release: Option<String>,
    pub modules: Vec<crate::runtime::modload::ModuleReport>,
    pub root: Option<storage::RootReport>,
    pub taint: Option<crate::runtime::taint::TaintReport>,
    pub verity: Option<verity::VerityReport>,
    pub tpm: Option<TpmReport>,
    /// What the preflight checked and found.
    pub preflight: Option<preflight::PreflightReport>,
    pub slot: Option<slot::SlotFacts>,
    /// What systemd-stub said of this boot and what it added to the initramfs, read once
    /// efivarfs is mounted (`None`: neither a stub nor anything added).
    pub boot_image: Option<crate::runtime::uki::BootImage>,
    /// Who the node is (DMI, boot id), read by `start`.
    pub node: NodeFacts,
    /// The GPUs the BOM promises (`hardware.gpus`).
    pub bom_gpus: Option<u32>,
    /// The node pool the BOM's `[report]` names.
    pub pool: Option<String>,
    /// Problems that did not stop the boot.
    pub warnings: Vec<String>,
}

/// The state one boot carries from stage to stage.
#[derive(Debug)]
pub struct Context {
    pub roots: Roots,
    pub args: BootArgs,
    /// The kernel command line as read (once) from `/proc/cmdline`, newline removed
    /// (bytes that are not UTF-8 replaced by U+FFFD, see `cmdline_raw`).
    pub cmdline: String,
    /// The command line's exact bytes when they are not UTF-8 (then what is measured);
    /// `None` when `cmdline` holds them exactly.
    pub cmdline_raw: Option<Vec<u8>>,
    pub bom: Option<LoadedBom>,
    /// The running kernel's release.
    pub release: String,
    pub measurer: Option<Measurer>,
    /// The initramfs's trust store as the modules stage loaded it (the BOM's certificates
    /// and the kernel's built-in ones), reused by the verity stage for the root hash
    /// signature; the module gate's own is narrower under Secure Boot.
    pub trust: Option<TrustStore>,
    /// Secure Boot and the firmware's keys (`db`, `dbx`, `MokListRT`), read once: by the
    /// modules stage right after it mounted efivarfs, else by the first
    /// [`Context::uefi_keys`].
    pub uefi: std::cell::OnceCell<crate::runtime::uefi_keys::UefiKeys>,
    pub verity_parts: Option<Parts>,
    /// The A/B state, when the BOM has a `[slot]` section and it could be read.
    pub slot: Option<slot::Runtime>,
    pub facts: Facts,
}

/// How often a stage scans for the partitions it waits for (and at once on a block
/// device event, `runtime::devices::wait_scan`).
pub const SCAN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Context {
    /// Waits for partitions as every stage does (`runtime::devices::wait_scan`): the
    /// context's `/sys` and `/dev` scanned every [`SCAN_INTERVAL`], and at once on a
    /// block device event, up to the command line's root timeout, zombies reaped between
    /// scans.
    pub fn wait_scan<T, E>(
        &self,
        what: &str,
        found: impl FnMut(&[crate::runtime::devices::FoundPartition]) -> Result<Option<T>, E>,
        on_timeout: impl FnOnce(crate::runtime::devices::StorageError) -> E,
    ) -> Result<T, E> {
        crate::runtime::devices::wait_scan(
            what,
            &self.roots.sys,
            &self.roots.dev,
            self.args.root_timeout,
            SCAN_INTERVAL,
            || {
                crate::sys::reap_zombies();
            },
            found,
            on_timeout,
        )
    }

    /// The kernel command line's bytes as read (what `modprobe` would read).
    pub fn cmdline_bytes(&self) -> &[u8] {
        self.cmdline_raw
            .as_deref()
            .unwrap_or(self.cmdline.as_bytes())
    }

    pub fn new(roots: Roots) -> Context {
        Context {
            roots,
            args: BootArgs::default(),
            cmdline: String::new(),
            cmdline_raw: None,
            bom: None,
            release: String::new(),
            measurer: None,
            trust: None,
            uefi: std::cell::OnceCell::new(),
            verity_parts: None,
            slot: None,
            facts: Facts::default(),
        }
    }

    /// Secure Boot and the firmware's keys ([`Context::uefi`]), read under `/sys` on the
    /// first call when the modules stage has not read them.
    pub fn uefi_keys(&self) -> &crate::runtime::uefi_keys::UefiKeys {
        self.uefi
            .get_or_init(|| crate::runtime::uefi_keys::read(&self.roots.sys))
    }

    /// Measures one event into the BOM's PCR with this boot's measurer, if any (see
    /// [`crate::runtime::measure::event`]): a TPM failure is fatal when the BOM requires the TPM, else a
    /// warning in the facts.
    pub fn measure(
        &mut self,
        what: &crate::formats::tpm::measurement::Measurement,
        external: Option<&[u8]>,
    ) -> Result<(), MeasureError> {
        crate::runtime::measure::event(
            self.measurer.as_mut(),
            &mut self.facts.warnings,
            what,
            external,
        )
    }

    /// The BOM's `[verity]` section: present means the root must be verified.
    pub fn verity_cfg(&self) -> Option<&crate::config::bom::Verity> {
        self.bom.as_ref().and_then(|b| b.bom.verity.as_ref())
    }
}

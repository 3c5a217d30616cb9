//! Predicting a good boot's measurements from the image, at build time: the same events
//! the init makes (`stages::measure`, `stages::modules`, `stages::verity`, the
//! preflight's root drivers), computed from the BOM, the built initramfs, the root hash,
//! each slot's kernel command line and the files the boot loader reads.
//!
//! Contract: [`predict`] reads the initramfs's module index and plans the loads with the
//! init's own planner ([`crate::runtime::modload::Loader::plan_only`]): on a UEFI boot
//! `efivarfs` first when the initramfs has it, then the BOM's `modules.load` with their
//! dependencies, each module's event `module:<name> sha256:<SHA-256 of the image the
//! kernel gets>` (decompressed when the file is compressed, signature included), followed
//! by ` options:<options>` when `modprobe` would give it options (the tree's `modprobe.d`,
//! then each entry's command line, so per entry), built-in
//! modules and modules already loaded left out as the init leaves them out. The BOM's
//! `modules.root` are planned the same way over the root's index and are optional (the
//! init loads a driver only when the kernel accepts it for a device). Every event gets
//! its digest in the four banks a TPM may have (SHA-1, SHA-256, SHA-384, SHA-512): the
//! BOM and the command line are extended as their bytes, the root hash as its hex text
//! (what was signed), every other event as its own text.
//!
//! Current limits: a symbolic link in a tree's `modprobe.d` is followed on the build
//! machine (the init follows it inside the root), and an initramfs listing holds no links
//! (so a linked configuration file there is not read); a module blacklisted by a tree's
//! configuration is predicted as loaded (the init refuses it, and the boot fails); a
//! module the kernel would refuse, or one whose load fails for want
//! of a device, is predicted as loaded (only root drivers are optional); the PCR values
//! are predicted for a boot that measured every event (`pass`, `quarantine`), not for a
//! fallback, whose first boot stops wherever its image failed (the verifier follows the
//! events instead).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::reference::{
    Digests, Entry, ExpectedEvent, ExpectedFile, Pcrs, Reference, SlotReference, StubPart,
    StubRecord, StubReference, SCHEMA,
};
use crate::config::bom::SlotName;
use crate::formats::kmod::index::Index;
use crate::formats::kmod::modinfo::{self, Compression};
use crate::formats::kmod::modprobe;
use crate::formats::tpm::measurement::{Decision, Measurement, Phase, PHASE_PCR};
use crate::formats::tpm::HashAlg;
use crate::gate::batch::MODULE_FILE_MAX;
use crate::runtime::modload::{Loader, INDEX_FILE_MAX};
use crate::sys::EFIVARFS;

/// A tree of files the prediction reads (the initramfs, the root filesystem).
pub trait Tree {
    /// The bytes of `rel` (a path relative to the tree's root, `/`-separated), at most
    /// `limit` bytes; `Ok(None)` when there is no such file.
    fn read(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, String>;
    /// The names directly in the directory `rel` that are not directories (symbolic
    /// links followed); empty when there is no such directory, an error when `rel` is a
    /// file or a name is not UTF-8.
    fn list(&self, rel: &str) -> Result<Vec<String>, String>;
    /// How to name the tree in messages.
    fn name(&self) -> String;
}

/// A directory on disk.
#[derive(Debug, Clone)]
pub struct DirTree(pub PathBuf);

impl Tree for DirTree {
    fn read(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
        match crate::util::fs::read_limited(&self.0.join(rel), limit) {
            Ok(b) => Ok(Some(b)),
            Err(crate::util::fs::InputError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }
    fn list(&self, rel: &str) -> Result<Vec<String>, String> {
        let dir = self.0.join(rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
            if std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let n = e.file_name().into_string().map_err(|n| {
                format!(
                    "{}/{}: the name is not UTF-8",
                    dir.display(),
                    n.to_string_lossy()
                )
            })?;
            out.push(n);
        }
        Ok(out)
    }
    fn name(&self) -> String {
        self.0.display().to_string()
    }
}

/// Files held in memory (an unpacked initramfs): path without a leading `/` to bytes.
#[derive(Debug, Clone, Default)]
pub struct MemTree {
    pub name: String,
    pub files: BTreeMap<String, Vec<u8>>,
}

impl MemTree {
    /// The regular files of an unpacked archive (`newc` entries, as `mkinitramfs`'s
    /// reader lists them), by path without a leading `./` or `/`.
    pub fn from_listing(name: &str, entries: Vec<crate::formats::newc::ListedEntry>) -> MemTree {
        let mut tree = MemTree {
            name: name.to_string(),
            ..MemTree::default()
        };
        for e in entries {
            if e.mode & 0o170_000 == 0o100_000 {
                let p = e
                    .path
                    .trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_string();
                tree.files.insert(p, e.data);
            }
        }
        tree
    }
}

impl Tree for MemTree {
    fn read(&self, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
        match self.files.get(rel.trim_start_matches('/')) {
            Some(b) if b.len() as u64 > limit => {
                Err(format!("{rel}: {} bytes, more than {limit}", b.len()))
            }
            Some(b) => Ok(Some(b.clone())),
            None => Ok(None),
        }
    }
    fn list(&self, rel: &str) -> Result<Vec<String>, String> {
        let dir = rel.trim_start_matches('/').trim_end_matches('/');
        if self.files.contains_key(dir) {
            return Err(format!("{rel}: a file, not a directory"));
        }
        let prefix = format!("{dir}/");
        Ok(self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|n| !n.contains('/'))
            .map(str::to_string)
            .collect())
    }
    fn name(&self) -> String {
        self.name.clone()
    }
}

/// One slot's boot entry.
#[derive(Debug, Clone)]
pub struct SlotInput {
    pub slot: SlotName,
    /// The kernel command line the slot's entry gives (as `/proc/cmdline` shows it).
    pub cmdline: String,
    /// The command line the init gives this slot's kernel when the other slot falls back
    /// to it by kexec (GRUB: [`kexec_cmdline_grub`]); `None`: no kexec entry predicted.
    pub kexec_cmdline: Option<String>,
    /// Files the boot loader measures (PCR, logged path, bytes; `None`: any content), in
    /// the order it reads them: the slot's kernel and initramfs for GRUB, and its
    /// configuration files where the install gives them.
    pub files: Vec<(u32, String, Option<Vec<u8>>)>,
    /// Whether `files` are every record the boot loader makes in their PCRs.
    pub files_complete: bool,
    /// The slot's Unified Kernel Image, when its boot-loader entry starts one: what
    /// systemd-stub measures of it precedes our events in PCR 11.
    pub uki: Option<Vec<u8>>,
}

/// What a prediction is made from.
#[expect(
    missing_debug_implementations,
    reason = "holds trait objects of file trees"
)]
pub struct Inputs<'a> {
    /// The BOM's bytes, as packed in the initramfs.
    pub bom: &'a [u8],
    /// The built initramfs.
    pub initramfs: &'a dyn Tree,
    /// The root filesystem (needed when the BOM names `modules.root`).
    pub root: Option<&'a dyn Tree>,
    /// The verity root hash (hex) when the BOM has `[verity]`: the BOM's own when absent.
    pub root_hash: Option<String>,
    /// A UEFI boot.
    pub uefi: bool,
    pub slots: Vec<SlotInput>,
}

/// Why no prediction could be made.
#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error("BOM: {0}")]
    Bom(#[from] crate::config::bom::BomError),
    #[error("{tree}: {why}")]
    Read { tree: String, why: String },
    #[error("{tree}: {path} is missing")]
    Missing { tree: String, path: String },
    #[error("{tree}: module index: {0}", tree = .1)]
    Index(crate::formats::kmod::index::IndexError, String),
    #[error("{tree}: module {name}: {why}")]
    Module {
        tree: String,
        name: String,
        why: String,
    },
    #[error("{tree}: module configuration: {why}")]
    ModuleConfig { tree: String, why: String },
    #[error("the BOM names root modules ({0}): give the root filesystem")]
    NoRoot(String),
    #[error("the BOM has [verity] with no root hash: give the root hash")]
    NoRootHash,
    #[error("{0}")]
    Invalid(String),
}

/// Digests of `data` in every bank.
fn digests(data: &[u8]) -> Digests {
    HashAlg::ALL
        .iter()
        .map(|a| (a.name().to_string(), crate::util::hex(&a.digest(data))))
        .collect()
}

/// The predicted record of one of our events, in our PCR `pcr` (the phase words in
/// theirs): its text and the digests of what the init measures for it (`external`: the
/// BOM's bytes, the command line's).
fn expected(
    m: &Measurement,
    external: Option<&[u8]>,
    pcr: u32,
    optional: bool,
) -> Result<ExpectedEvent, PredictError> {
    let text = m.text();
    let data = m
        .digested(&text, external)
        .ok_or_else(|| PredictError::Invalid(format!("{text}: its measured bytes are missing")))?;
    Ok(ExpectedEvent {
        pcr: m.pcr(pcr),
        digests: digests(data),
        data: text,
        optional,
    })
}

fn read_required(tree: &dyn Tree, rel: &str, limit: u64) -> Result<Vec<u8>, PredictError> {
    tree.read(rel, limit)
        .map_err(|why| PredictError::Read {
            tree: tree.name(),
            why,
        })?
        .ok_or_else(|| PredictError::Missing {
            tree: tree.name(),
            path: rel.to_string(),
        })
}

fn read_text(tree: &dyn Tree, rel: &str, required: bool) -> Result<String, PredictError> {
    let bytes = match tree.read(rel, INDEX_FILE_MAX) {
        Ok(Some(b)) => b,
        Ok(None) if !required => return Ok(String::new()),
        Ok(None) => {
            return Err(PredictError::Missing {
                tree: tree.name(),
                path: rel.into(),
            })
        }
        Err(why) => {
            return Err(PredictError::Read {
                tree: tree.name(),
                why,
            })
        }
    };
    String::from_utf8(bytes).map_err(|_| PredictError::Read {
        tree: tree.name(),
        why: format!("{rel} is not UTF-8"),
    })
}

/// The module directory `lib/modules/<release>` of `tree`: its loader (for planning).
fn loader(tree: &dyn Tree, release: &str) -> Result<(String, Loader), PredictError> {
    let dir = format!("lib/modules/{release}");
    let index = Index::from_texts(
        Path::new(&dir),
        &read_text(tree, &format!("{dir}/modules.dep"), true)?,
        &read_text(tree, &format!("{dir}/modules.softdep"), false)?,
        &read_text(tree, &format!("{dir}/modules.builtin"), false)?,
    )
    .map_err(|e| PredictError::Index(e, tree.name()))?;
    Ok((
        dir.clone(),
        Loader::new(Path::new(&dir), index, Path::new("/sys")),
    ))
}

/// Plans `names` (after `loaded`, which are live by then) and returns each module that
/// loads, in plan order, with the SHA-256 of the image the kernel gets, adding it to
/// `loaded`.
fn module_events(
    tree: &dyn Tree,
    dir: &str,
    loader: &mut Loader,
    names: &[String],
    loaded: &mut BTreeSet<String>,
) -> Result<Vec<(String, String)>, PredictError> {
    let mut out = Vec::new();
    for (name, path, preset) in loader.plan_only(names) {
        if preset.is_some() || loaded.contains(&name) {
            continue;
        }
        let rel = format!("{dir}/{path}");
        let bytes = read_required(tree, &rel, MODULE_FILE_MAX)?;
        let image = match Compression::from_name(&path) {
            Compression::None => bytes,
            c => modinfo::decompress(&bytes, c).map_err(|e| PredictError::Module {
                tree: tree.name(),
                name: name.clone(),
                why: e.to_string(),
            })?,
        };
        let sha256 = crate::util::hex(&HashAlg::Sha256.digest(&image));
        out.push((name.clone(), sha256));
        loaded.insert(name);
    }
    Ok(out)
}

/// The module configuration `modprobe` reads in `tree`, then `cmdline`, as the init reads
/// it ([`crate::runtime::modload::read_config`]).
fn module_config(tree: &dyn Tree, cmdline: &str) -> Result<modprobe::Config, PredictError> {
    let bad = |why: String| PredictError::ModuleConfig {
        tree: tree.name(),
        why,
    };
    let too_much = || bad("more files or bytes than the init reads".into());
    let mut dirs = Vec::new();
    for d in modprobe::CONFIG_DIRS {
        dirs.push(tree.list(d).map_err(bad)?);
    }
    if dirs.iter().map(Vec::len).sum::<usize>() > modprobe::CONFIG_FILES_MAX {
        return Err(too_much());
    }
    let mut cfg = modprobe::Config::default();
    let mut total = 0usize;
    for (i, name) in modprobe::config_files(&dirs) {
        let d = modprobe::CONFIG_DIRS.get(i).copied().unwrap_or_default();
        let rel = format!("{d}/{name}");
        let bytes = tree
            .read(&rel, modprobe::CONFIG_FILE_MAX as u64)
            .map_err(bad)?
            .ok_or_else(|| bad(format!("{rel} is listed and missing")))?;
        cfg.add_file_checked(&format!("/{rel}"), &bytes, &mut total)
            .map_err(|r| match r {
                modprobe::Refusal::TooMuch => too_much(),
                modprobe::Refusal::NotUtf8(o) => bad(format!("{o}: a line that is not UTF-8")),
            })?;
    }
    cfg.add_cmdline(cmdline.as_bytes());
    Ok(cfg)
}

/// The events of `modules` with the options `cfg` gives each.
fn with_options(
    modules: &[(String, String)],
    cfg: &modprobe::Config,
    pcr: u32,
    optional: bool,
) -> Result<Vec<ExpectedEvent>, PredictError> {
    modules
        .iter()
        .map(|(name, sha256)| {
            expected(
                &Measurement::Module {
                    name: name.clone(),
                    sha256: sha256.clone(),
                    options: cfg.options(name),
                },
                None,
                pcr,
                optional,
            )
        })
        .collect()
}

/// Replays `events` into PCR 11 and `pcr` in every bank, from zeros, PCR 11 from the
/// stub's value when a stub measured first.
fn replay(
    events: &[ExpectedEvent],
    pcr: u32,
    stub: Option<&StubReference>,
) -> Result<Pcrs, PredictError> {
    let mut out = Pcrs::new();
    for a in HashAlg::ALL {
        let bank = out.entry(a.name().to_string()).or_default();
        for p in [PHASE_PCR, pcr] {
            let start = stub
                .filter(|_| p == PHASE_PCR)
                .and_then(|s| s.pcr11.get(a.name()))
                .and_then(|h| crate::util::unhex(h));
            let mut v = start.unwrap_or_else(|| vec![0u8; a.size()]);
            for e in events.iter().filter(|e| e.pcr == p) {
                let d = e
                    .digests
                    .get(a.name())
                    .and_then(|h| crate::util::unhex(h))
                    .ok_or_else(|| {
                        PredictError::Invalid(format!("no {a} digest of {:?}", e.data))
                    })?;
                v = a.extend(&v, &d);
            }
            bank.insert(p, crate::util::hex(&v));
        }
    }
    Ok(out)
}

/// The events that end a boot with `decision` ([`Measurement::decision_events`]).
pub fn decision_events(decision: Decision, pcr: u32) -> Result<Vec<ExpectedEvent>, PredictError> {
    Measurement::decision_events(decision)
        .iter()
        .map(|m| expected(m, None, pcr, false))
        .collect()
}

/// The command line the init gives slot `to`'s kernel on a kexec from a GRUB boot whose
/// line was `from_line` (`runtime::slot::same_line_for`: GRUB gives every slot the
/// same line, so the init keeps it, naming the slot and dropping `BOOT_IMAGE=`).
pub fn kexec_cmdline_grub(from_line: &str, to: SlotName) -> String {
    crate::runtime::slot::same_line_for(from_line, to)
}

/// The slots given: at least one; a file of any content only in a complete list.
fn check_slots(slots: &[SlotInput]) -> Result<(), PredictError> {
    if slots.is_empty() {
        return Err(PredictError::Invalid("no slot given".into()));
    }
    match slots
        .iter()
        .find(|s| !s.files_complete && s.files.iter().any(|f| f.2.is_none()))
    {
        Some(s) => Err(PredictError::Invalid(format!(
            "slot {}: a file of any content stands for a record only in a complete list of the boot loader's files",
            s.slot
        ))),
        None => Ok(()),
    }
}

/// Predicts the measurements of a good boot of the image, per slot.
pub fn predict(i: &Inputs<'_>) -> Result<Reference, PredictError> {
    let loaded_bom = crate::config::bom::parse(i.bom, Path::new("bom.toml"))?;
    let bom = &loaded_bom.bom;
    let release = bom.kernel.release.as_str().to_string();
    let mut loaded = BTreeSet::new();
    let image = Image {
        loaded: &loaded_bom,
        modules: initramfs_modules(i, bom, &release, &mut loaded)?,
        root_events: root_hash_events(i, bom)?,
        root_modules: root_modules(i, bom, &release, &mut loaded)?,
    };
    check_slots(&i.slots)?;
    let mut slots = Vec::new();
    for s in &i.slots {
        slots.push(slot_reference(i, &image, s, Entry::BootLoader, &s.cmdline)?);
        if let Some(k) = &s.kexec_cmdline {
            slots.push(slot_reference(i, &image, s, Entry::Kexec, k)?);
        }
    }
    Ok(Reference {
        schema: SCHEMA.into(),
        image_id: bom.image_id.to_string(),
        bom_sha256: loaded_bom.sha256.clone(),
        kernel_release: release,
        pcr: bom.measure.pcr,
        uefi: i.uefi,
        slots,
    })
}

/// What every entry of the image measures whatever its command line: the BOM, the
/// modules of the initramfs and of the root (name and digest; options still to apply),
/// the root hash.
struct Image<'a> {
    loaded: &'a crate::config::bom::LoadedBom,
    modules: Vec<(String, String)>,
    root_events: Vec<ExpectedEvent>,
    root_modules: Vec<(String, String)>,
}

/// The initramfs's modules in the order the init loads them: efivarfs first on UEFI,
/// then the BOM's.
fn initramfs_modules(
    i: &Inputs<'_>,
    bom: &crate::config::bom::Bom,
    release: &str,
    loaded: &mut BTreeSet<String>,
) -> Result<Vec<(String, String)>, PredictError> {
    let (dir, mut l) = loader(i.initramfs, release)?;
    let names: Vec<String> = bom.modules.load.iter().map(|m| m.0.clone()).collect();
    let (first, names) = crate::runtime::modload::gated::initramfs_order(
        &names,
        i.uefi,
        l.index.entries.contains_key(EFIVARFS),
    );
    let mut modules = Vec::new();
    if let Some(f) = first {
        modules.extend(module_events(i.initramfs, &dir, &mut l, &[f], loaded)?);
    }
    modules.extend(module_events(i.initramfs, &dir, &mut l, &names, loaded)?);
    Ok(modules)
}

/// The verified root's hash event (none for a BOM without `[verity]`).
fn root_hash_events(
    i: &Inputs<'_>,
    bom: &crate::config::bom::Bom,
) -> Result<Vec<ExpectedEvent>, PredictError> {
    let Some(v) = &bom.verity else {
        return Ok(Vec::new());
    };
    let rh = i
        .root_hash
        .clone()
        .or_else(|| v.root_hash.as_ref().map(|h| h.as_str().to_string()))
        .ok_or(PredictError::NoRootHash)?
        .to_ascii_lowercase();
    if crate::util::unhex(&rh).is_none_or(|b| b.is_empty()) {
        return Err(PredictError::Invalid(format!(
            "root hash {rh:?} is not hex"
        )));
    }
    Ok(vec![expected(
        &Measurement::VerityRootHash(rh),
        None,
        bom.measure.pcr,
        false,
    )?])
}

/// The root's drivers: optional (loaded only when there is a device for them).
fn root_modules(
    i: &Inputs<'_>,
    bom: &crate::config::bom::Bom,
    release: &str,
    loaded: &mut BTreeSet<String>,
) -> Result<Vec<(String, String)>, PredictError> {
    let root_names: Vec<String> = bom.modules.root.iter().map(|m| m.normalized()).collect();
    if root_names.is_empty() {
        return Ok(Vec::new());
    }
    let root = i
        .root
        .ok_or_else(|| PredictError::NoRoot(root_names.join(", ")))?;
    let (rdir, mut rl) = loader(root, release)?;
    module_events(root, &rdir, &mut rl, &root_names, loaded)
}

/// One entry's reference: its events under its command line and the PCR values each
/// decision leaves.
fn slot_reference(
    i: &Inputs<'_>,
    image: &Image<'_>,
    s: &SlotInput,
    entry: Entry,
    cmdline: &str,
) -> Result<SlotReference, PredictError> {
    let pcr = image.loaded.bom.measure.pcr;
    if cmdline.contains('\n') {
        return Err(PredictError::Invalid(format!(
            "slot {}: the command line has a newline",
            s.slot
        )));
    }
    let mut events = vec![
        expected(&Measurement::Phase(Phase::EnterInitrd), None, pcr, false)?,
        expected(
            &Measurement::Bom {
                image_id: image.loaded.bom.image_id.to_string(),
                sha256: image.loaded.sha256.clone(),
            },
            Some(i.bom),
            pcr,
            false,
        )?,
        expected(
            &Measurement::Cmdline(cmdline.to_string()),
            Some(cmdline.as_bytes()),
            pcr,
            false,
        )?,
    ];
    // Each module with the options modprobe would give it under this command line.
    let init_cfg = module_config(i.initramfs, cmdline)?;
    events.extend(with_options(&image.modules, &init_cfg, pcr, false)?);
    events.extend(image.root_events.iter().cloned());
    if let (Some(root), false) = (i.root, image.root_modules.is_empty()) {
        let root_cfg = module_config(root, cmdline)?;
        events.extend(with_options(&image.root_modules, &root_cfg, pcr, true)?);
    }
    // The stub measures on the boot loader's entry only (a kexec starts the kernel
    // itself).
    let stub = match (&s.uki, entry) {
        (Some(image), Entry::BootLoader) => Some(stub_reference(image, s.slot)?),
        _ => None,
    };
    let mut pcrs = BTreeMap::new();
    for d in [Decision::Pass, Decision::Quarantine] {
        let mut all = events.clone();
        all.extend(decision_events(d, pcr)?);
        pcrs.insert(d, replay(&all, pcr, stub.as_ref())?);
    }
    Ok(SlotReference {
        slot: s.slot,
        entry,
        cmdline: cmdline.to_string(),
        events,
        // The boot loader's files are read on its own entry only.
        files: s
            .files
            .iter()
            .filter(|_| entry == Entry::BootLoader)
            .map(|(p, path, bytes)| ExpectedFile {
                pcr: *p,
                path: path.clone(),
                digests: bytes.as_deref().map(digests).unwrap_or_default(),
            })
            .collect(),
        files_complete: s.files_complete && entry == Entry::BootLoader,
        stub,
        pcrs,
    })
}

/// What systemd-stub measures of `image` into PCR 11 ([`crate::formats::uki::events`]),
/// and PCR 11 after it.
pub fn stub_reference(image: &[u8], slot: SlotName) -> Result<StubReference, PredictError> {
    let events = crate::formats::uki::events(image).map_err(|e| {
        PredictError::Invalid(format!("slot {slot}: its Unified Kernel Image: {e}"))
    })?;
    let mut pcr11 = BTreeMap::new();
    for a in HashAlg::ALL {
        let mut v = vec![0u8; a.size()];
        for e in &events {
            v = a.extend(&v, &a.digest(&e.digested));
        }
        pcr11.insert(a.name().to_string(), crate::util::hex(&v));
    }
    Ok(StubReference {
        events: events
            .iter()
            .map(|e| StubRecord {
                section: e.section.to_string(),
                part: if e.name {
                    StubPart::Name
                } else {
                    StubPart::Content
                },
                digests: digests(&e.digested),
            })
            .collect(),
        pcr11,
    })
}

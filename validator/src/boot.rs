//! The boot flow run by the PID-1 init: stage after stage, each timed and reported, until
//! the decision. A failed stage stops the flow; the report is printed and written either
//! way; a pass hands over with `switch_root`, a stop ends in the command line's
//! `validator.on_stop` action. Nothing here returns to the caller.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::bom::{self, LoadedBom};
use crate::cmdline::BootArgs;
use crate::modules::gate::Gate;
use crate::modules::{Index, Loader, ModStatus};
use crate::report::{Decision, Fault, Report, RootReport, StageReport, StageStatus};
use crate::{kmsg, pid1, storage, sys, verity};

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

/// A stage failure: what it points at and why.
type StageResult = Result<Option<String>, (Fault, String)>;

fn boottime_us() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0)
}

struct Boot {
    roots: Roots,
    args: BootArgs,
    report: Report,
    bom: Option<LoadedBom>,
    release: String,
    verity_parts: Option<verity::Parts>,
    measurer: Option<crate::measure::Measurer>,
    /// The trust store the module gate loaded, for the verity stage.
    trust: Option<crate::trust::TrustStore>,
}

impl Boot {
    fn stage(&mut self, name: &'static str, f: impl FnOnce(&mut Boot) -> StageResult) -> bool {
        if self.args.test_panic.as_deref() == Some(name) {
            panic!("test panic requested at stage {name} (validator.test_panic)");
        }
        log::info!("stage {name}: start");
        let t = Instant::now();
        let r = f(self);
        let duration_us = t.elapsed().as_micros() as u64;
        sys::reap_zombies();
        match r {
            Ok(detail) => {
                self.report.stages.push(StageReport {
                    name,
                    status: StageStatus::Ok,
                    duration_us,
                    detail,
                });
                true
            }
            Err((fault, why)) => {
                log::error!("stage {name} failed: {why}");
                self.report.stages.push(StageReport {
                    name,
                    status: StageStatus::Failed,
                    duration_us,
                    detail: Some(why.clone()),
                });
                self.report.fail(fault, format!("{name}: {why}"));
                false
            }
        }
    }

    fn emit_report(&mut self) {
        self.report.boottime_report_us = boottime_us();
        let json = self.report.to_json();
        let path = self.roots.run.join("validator/report.json");
        if let Err(e) = crate::report::write_atomic(&path, format!("{json}\n").as_bytes()) {
            log::error!("cannot write {}: {e}", path.display());
        }
        // One write of the whole line to the console (stdout of PID 1).
        use std::io::Write;
        let line = self.report.console_line();
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
        log::info!(
            "decision: {:?}{}",
            self.report.decision,
            self.report
                .reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }

    fn start(&mut self) -> StageResult {
        let cmdline = std::fs::read_to_string(self.roots.proc.join("cmdline"))
            .map_err(|e| (Fault::Platform, format!("cannot read /proc/cmdline: {e}")))?;
        self.args = BootArgs::parse(cmdline.trim_end());
        pid1::set_panic_action(self.args.on_panic);
        if self.args.debug {
            log::set_max_level(log::LevelFilter::Debug);
        }
        self.report.warnings.append(&mut self.args.warnings);
        self.release = sys::kernel_release().map_err(|e| (Fault::Platform, e.to_string()))?;
        self.report.kernel_release = Some(self.release.clone());
        let b =
            bom::load(Path::new(&self.args.bom_path)).map_err(|e| (Fault::Image, e.to_string()))?;
        self.report.image_id = Some(b.bom.image_id.to_string());
        self.report.bom_sha256 = Some(b.sha256.clone());
        log::info!("BOM {} sha256 {}", b.bom.image_id, b.sha256);
        if b.bom.kernel.release.as_str() != self.release {
            return Err((
                Fault::Image,
                format!(
                    "running kernel {} but the BOM's kernel.release is {}",
                    self.release, b.bom.kernel.release
                ),
            ));
        }
        let detail = format!("bom {} ({})", b.bom.image_id, b.path.display());
        self.bom = Some(b);
        Ok(Some(detail))
    }

    fn modules(&mut self) -> StageResult {
        let names: Vec<String> = self
            .bom
            .as_ref()
            .map(|b| b.bom.modules.load.iter().map(|m| m.0.clone()).collect())
            .unwrap_or_default();
        let dir = self.roots.modules.join(&self.release);
        let index = Index::load(&dir).map_err(|e| (Fault::Image, e.to_string()))?;
        let mut loader = Loader::new(&dir, index, &self.roots.sys);
        if let Some(b) = &self.bom {
            let gate = Gate::from_initramfs(&self.roots.initramfs, &b.bom)
                .map_err(|e| (Fault::Image, format!("module gate: {e}")))?;
            log::info!(
                "module gate: {} trusted certificate(s), {} symbol CRCs, vermagic {:?}",
                gate.trust.certs.len(),
                gate.symvers.as_ref().map_or(0, |s| s.map.len()),
                gate.policy.kernel_vermagic.as_deref().unwrap_or("")
            );
            loader.gate = Some(gate);
        }
        let results = loader.load_all(&names);
        self.trust = loader.gate.take().map(|g| g.trust);
        for r in &results {
            match r.status {
                ModStatus::Failed | ModStatus::Skipped | ModStatus::Rejected => log::error!(
                    "module {}: {:?} {} {}",
                    r.name,
                    r.status,
                    r.errno.as_deref().unwrap_or(""),
                    r.message.as_deref().unwrap_or("")
                ),
                s => log::debug!("module {}: {s:?} in {} us", r.name, r.duration_us),
            }
        }
        let refused: Vec<String> = results
            .iter()
            .filter(|r| r.status == ModStatus::Rejected)
            .map(|r| format!("{} ({})", r.name, r.message.as_deref().unwrap_or("")))
            .collect();
        let bad: Vec<String> = results
            .iter()
            .filter(|r| !r.ok() && !r.softdep && r.status != ModStatus::Rejected)
            .map(|r| {
                format!(
                    "{} ({})",
                    r.name,
                    r.errno
                        .clone()
                        .or_else(|| r.message.clone())
                        .unwrap_or_default()
                )
            })
            .collect();
        let loaded = results
            .iter()
            .filter(|r| r.status == ModStatus::Loaded)
            .count();
        self.report.modules = results;
        // What was loaded is measured even when the stage fails, so an attestation of a
        // stopped boot still names the modules the kernel runs.
        let t = Instant::now();
        let measured = self.measure_modules();
        let measured_us = t.elapsed().as_micros() as u64;
        if !refused.is_empty() {
            return Err((
                Fault::Image,
                format!("module gate refused: {}", refused.join(", ")),
            ));
        }
        if !bad.is_empty() {
            return Err((
                Fault::Image,
                format!("module(s) failed to load: {}", bad.join(", ")),
            ));
        }
        measured?;
        // What loading did to the kernel's taint.
        let allowed = self
            .bom
            .as_ref()
            .map(|b| b.bom.policy.taint_allowed.0.clone())
            .unwrap_or_default();
        let taint = read_taint(&self.roots.proc, &allowed);
        let gate_us: u64 = self.report.modules.iter().map(|m| m.gate_us).sum();
        let detail = format!(
            "{loaded} loaded (gate {} ms), measured in {} ms, taint {:?}",
            gate_us / 1000,
            measured_us / 1000,
            taint.flags
        );
        let unexpected_image: String = taint
            .unexpected
            .chars()
            .filter(|c| IMAGE_TAINTS.contains(*c))
            .collect();
        if !taint.unexpected.is_empty() {
            self.report.warnings.push(format!(
                "unexpected kernel taint {:?} (allowed {allowed:?})",
                taint.unexpected
            ));
        }
        self.report.taint = Some(taint);
        if !unexpected_image.is_empty() {
            return Err((
                Fault::Image,
                format!(
                    "kernel tainted {unexpected_image:?} by module loading, not allowed by the BOM"
                ),
            ));
        }
        Ok(Some(detail))
    }

    fn measure_cfg(&self) -> crate::bom::Measure {
        self.bom
            .as_ref()
            .map(|b| b.bom.measure.clone())
            .unwrap_or_default()
    }

    /// Measures one event into our PCR; a TPM failure fails the stage when the BOM
    /// requires the TPM, else it becomes a warning (once).
    fn measure_event(
        &mut self,
        description: &str,
        data: &[u8],
        kind: &str,
    ) -> Result<(), (Fault, String)> {
        let cfg = self.measure_cfg();
        let Some(m) = self.measurer.as_mut() else {
            return Ok(());
        };
        if !m.ok() {
            return Ok(()); // already reported
        }
        match m.measure(cfg.pcr, description, data, kind) {
            Ok(()) => Ok(()),
            Err(e) => self.tpm_failed(e),
        }
    }

    fn tpm_failed(&mut self, e: String) -> Result<(), (Fault, String)> {
        if self.measure_cfg().tpm == crate::bom::TpmPolicy::Required {
            Err((Fault::Platform, format!("TPM required by the BOM: {e}")))
        } else {
            self.report.warnings.push(format!("TPM (optional): {e}"));
            Ok(())
        }
    }

    /// Stage `measure`: open the TPM, `enter-initrd` into PCR 11, then the BOM and the
    /// command line into our PCR.
    fn measure_start(&mut self) -> StageResult {
        let cfg = self.measure_cfg();
        let sec = self.roots.sys.join("kernel/security");
        if let Err(e) = sys::mount(
            "securityfs",
            &sec,
            Some("securityfs"),
            nix::mount::MsFlags::empty(),
            None,
        ) {
            if e.errno != nix::errno::Errno::EBUSY {
                log::warn!("{e}");
            }
        }
        let m = crate::measure::Measurer::open(
            &self.roots.dev,
            &sec,
            cfg.pcr,
            cfg.tpm == crate::bom::TpmPolicy::Required,
            Duration::from_millis(cfg.timeout_ms),
        );
        let failure = m.report.failure.clone();
        self.measurer = Some(m);
        if let Some(f) = failure {
            self.tpm_failed(f)?;
            return Ok(Some("no TPM (optional)".into()));
        }
        if let Some(m) = self.measurer.as_mut() {
            if let Err(e) = m.phase("enter-initrd") {
                self.tpm_failed(e)?;
            }
        }
        if let Some(b) = self.bom.clone() {
            let bytes = std::fs::read(&b.path).unwrap_or_default();
            self.measure_event(
                &format!("bom:{} sha256:{}", b.bom.image_id, b.sha256),
                &bytes,
                "validator-bom",
            )?;
        }
        let cmdline = std::fs::read_to_string(self.roots.proc.join("cmdline")).unwrap_or_default();
        let cmdline = cmdline.trim_end_matches('\n').to_string();
        self.measure_event(
            &format!("cmdline:{cmdline}"),
            cmdline.as_bytes(),
            "validator-cmdline",
        )?;
        let m = self
            .measurer
            .as_ref()
            .map(|m| m.report.clone())
            .unwrap_or_default();
        Ok(Some(format!(
            "TPM {} banks {} (PCR 11 and {}), {} events",
            m.device.as_deref().unwrap_or("?"),
            m.banks.join("+"),
            m.pcr,
            m.events
        )))
    }

    /// Measures the loaded modules, in plan order: each event is the module's name and
    /// the SHA-256 of the image the kernel was given (computed by the gate in the same
    /// pass as its signature digest).
    fn measure_modules(&mut self) -> Result<(), (Fault, String)> {
        let loaded: Vec<(String, String, Option<String>)> = self
            .report
            .modules
            .iter()
            .filter(|m| m.status == ModStatus::Loaded)
            .filter_map(|m| {
                m.path
                    .clone()
                    .map(|p| (m.name.clone(), p, m.sha256.clone()))
            })
            .collect();
        let dir = self.roots.modules.join(&self.release);
        for (name, rel, sha) in loaded {
            let sha = match sha {
                Some(s) => s,
                None => {
                    use sha2::Digest;
                    let raw = std::fs::read(dir.join(&rel)).unwrap_or_default();
                    let img = crate::modules::modinfo::decompress(
                        &raw,
                        crate::modules::modinfo::Compression::from_name(&rel),
                    )
                    .unwrap_or(raw);
                    crate::bom::hex(&sha2::Sha256::digest(&img))
                }
            };
            let event = format!("module:{name} sha256:{sha}");
            self.measure_event(&event, event.as_bytes(), "validator-module")?;
        }
        Ok(())
    }

    /// The decision and, on a pass, `leave-initrd`; then reads the PCRs back and writes
    /// the logs. Runs on every path before the report is made.
    fn measure_end(&mut self) {
        let pass = self.report.decision == Decision::Pass;
        let word = if pass {
            "decision:pass"
        } else {
            "decision:stop"
        };
        if let Err((_, e)) = self.measure_event(word, word.as_bytes(), "validator-decision") {
            self.report.fail(Fault::Platform, format!("handover: {e}"));
        }
        if pass && self.report.decision == Decision::Pass {
            if let Some(m) = self.measurer.as_mut() {
                if m.ok() {
                    if let Err(e) = m.phase("leave-initrd") {
                        if let Err((f, e)) = self.tpm_failed(e) {
                            self.report.fail(f, format!("handover: {e}"));
                        }
                    }
                }
            }
        }
        if let Some(m) = self.measurer.as_mut() {
            m.finish(&self.roots.run);
            self.report.tpm = Some(m.report.clone());
        }
    }

    fn verity_cfg(&self) -> Option<crate::bom::Verity> {
        self.bom.as_ref().and_then(|b| b.bom.verity.clone())
    }

    fn verity_names(&self) -> verity::Names {
        verity::Names {
            data: self.args.verity_data.clone(),
            hash: self.args.verity_hash.clone(),
            sig: self.args.verity_sig.clone(),
        }
    }

    /// Waits for the verity partitions (the root hash is only parsed here, to find them
    /// by convention; it is verified in the verity stage).
    fn storage_verity(&mut self, cfg: &crate::bom::Verity) -> StageResult {
        let names = self.verity_names();
        let what =
            "the verity root's partitions (data, hash and, for a signed root hash, signature)";
        let parts = storage::wait_scan(
            what,
            &self.roots.sys,
            &self.roots.dev,
            self.args.root_timeout,
            Duration::from_millis(100),
            || {
                sys::reap_zombies();
            },
            |found| -> Result<Option<verity::Parts>, (Fault, String)> {
                let img = |e: verity::VerityError| (Fault::Image, e.to_string());
                let (sig, root) = match cfg.source {
                    crate::bom::RootHashSource::Bom => (
                        None,
                        cfg.root_hash
                            .as_ref()
                            .and_then(|h| verity::sig::unhex(h.as_str()))
                            .ok_or_else(|| img(verity::VerityError::NoRootHash))?,
                    ),
                    crate::bom::RootHashSource::Signature => {
                        let Some(sigp) = verity::find_sig(found, &names).map_err(img)? else {
                            return Ok(None);
                        };
                        let bytes = verity::read_sig_partition(&sigp.device).map_err(img)?;
                        let parsed = verity::sig::parse(&bytes)
                            .map_err(|e| img(verity::VerityError::Signature(e)))?;
                        let root = parsed.root_hash.clone();
                        (
                            Some(verity::SigPartition {
                                partition: sigp,
                                sig: parsed,
                            }),
                            root,
                        )
                    }
                };
                Ok(verity::find_data_hash(found, &names, &root)
                    .map_err(img)?
                    .map(|(data, hash)| verity::Parts { data, hash, sig }))
            },
            |e| (Fault::Hardware, e.to_string()),
        )?;
        let detail = format!(
            "verity data {} hash {}{}",
            parts.data.device,
            parts.hash.device,
            parts
                .sig
                .as_ref()
                .map(|s| format!(" signature {}", s.partition.device))
                .unwrap_or_default()
        );
        self.report.root = Some(RootReport {
            partition: parts.data.clone(),
            fstype: String::new(),
            read_only: true,
            mountpoint: self.roots.new_root.display().to_string(),
        });
        self.verity_parts = Some(parts);
        Ok(Some(detail))
    }

    fn verity(&mut self) -> StageResult {
        let (Some(cfg), Some(parts)) = (self.verity_cfg(), self.verity_parts.clone()) else {
            return Err((Fault::Platform, "verity partitions not found".into()));
        };
        // The module gate's trust store (the same certificates), loaded once.
        let trust = match self.trust.take() {
            Some(t) => t,
            None => {
                let mut t = crate::trust::TrustStore::new();
                t.add_path(
                    &self
                        .roots
                        .initramfs
                        .join(crate::modules::gate::layout::TRUST_DIR),
                )
                .map_err(|e| (Fault::Image, format!("trust store: {e}")))?;
                t
            }
        };
        let mut rep = verity::VerityReport::default();
        let result = (|| {
            let (g, root) = verity::prepare(&cfg, &parts, &trust, &mut rep)?;
            let key = if cfg.kernel_signature {
                let sigp = parts.sig.as_ref().ok_or_else(|| {
                    verity::VerityError::Partitions(
                        "kernel_signature needs the root-verity-sig partition".into(),
                    )
                })?;
                sys::add_user_key(verity::SIG_KEY_DESC, &sigp.sig.pkcs7)?;
                Some(verity::SIG_KEY_DESC)
            } else {
                None
            };
            verity::activate(
                &cfg,
                &parts,
                &g,
                &root,
                &self.roots.sys,
                &self.roots.dev,
                key,
                &mut rep,
            )
        })();
        let out = match result {
            Ok(node) => {
                if let Some(r) = self.report.root.as_mut() {
                    r.partition.device = node.clone();
                }
                let rh = rep.root_hash.clone();
                if let Err(e) = self.measure_event(
                    &format!("verity-root-hash:{rh}"),
                    rh.as_bytes(),
                    "validator-verity",
                ) {
                    self.report.verity = Some(rep);
                    return Err(e);
                }
                Ok(Some(format!(
                    "root hash {} ({}) on {node}, status {}",
                    rep.root_hash,
                    rep.signer.as_deref().unwrap_or("from the BOM"),
                    rep.status.as_deref().unwrap_or("")
                )))
            }
            Err(e) => Err((Fault::Image, e.to_string())),
        };
        self.report.verity = Some(rep);
        out
    }

    fn critical(&mut self) -> StageResult {
        let files: Vec<String> = self
            .verity_cfg()
            .map(|c| c.critical.iter().map(|p| p.to_string()).collect())
            .unwrap_or_default();
        let results = verity::read_critical(&self.roots.new_root, &files);
        let bad: Vec<String> = results
            .iter()
            .filter(|c| !c.ok)
            .map(|c| format!("{} ({})", c.path, c.error.as_deref().unwrap_or("")))
            .collect();
        let bytes: u64 = results.iter().map(|c| c.bytes).sum();
        if let Some(v) = self.report.verity.as_mut() {
            v.critical_files = results;
        }
        if bad.is_empty() {
            Ok(Some(format!(
                "{} file(s), {bytes} bytes read through verity",
                files.len()
            )))
        } else {
            Err((
                Fault::Image,
                format!(
                    "critical file(s) unreadable through verity: {}",
                    bad.join(", ")
                ),
            ))
        }
    }

    fn storage(&mut self) -> StageResult {
        if let Some(cfg) = self.verity_cfg() {
            return self.storage_verity(&cfg);
        }
        let spec = self.args.root.clone().ok_or_else(|| {
            (
                Fault::Platform,
                "no root= on the kernel command line".to_string(),
            )
        })?;
        let found = storage::wait_for(
            &spec,
            &self.roots.sys,
            &self.roots.dev,
            self.args.root_timeout,
            Duration::from_millis(100),
            || {
                sys::reap_zombies();
            },
        )
        .map_err(|e| (Fault::Hardware, e.to_string()))?;
        let detail = format!("{spec} is {}", found.device);
        self.report.root = Some(RootReport {
            partition: found,
            fstype: String::new(),
            read_only: self.args.read_only,
            mountpoint: self.roots.new_root.display().to_string(),
        });
        Ok(Some(detail))
    }

    fn mount(&mut self) -> StageResult {
        let Some(root) = self.report.root.as_mut() else {
            return Err((Fault::Platform, "no root device".into()));
        };
        let types: Vec<String> = match &self.args.rootfstype {
            Some(t) => t.split(',').map(str::to_string).collect(),
            None => vec!["ext4".into(), "erofs".into(), "squashfs".into()],
        };
        let mut flags = nix::mount::MsFlags::empty();
        let read_only = self.args.read_only || root.read_only;
        if read_only {
            flags |= nix::mount::MsFlags::MS_RDONLY;
        }
        let _ = std::fs::create_dir_all(&self.roots.new_root);
        let mut errs = Vec::new();
        for t in &types {
            match sys::mount(
                &root.partition.device,
                &self.roots.new_root,
                Some(t),
                flags,
                self.args.rootflags.as_deref(),
            ) {
                Ok(()) => {
                    root.fstype = t.clone();
                    return Ok(Some(format!(
                        "{} ({t}, {}) on {}",
                        root.partition.device,
                        if read_only { "ro" } else { "rw" },
                        self.roots.new_root.display()
                    )));
                }
                Err(e) => errs.push(format!("{t}: {}", e.errno_name())),
            }
        }
        Err((
            Fault::Image,
            format!(
                "cannot mount {}: {}",
                root.partition.device,
                errs.join(", ")
            ),
        ))
    }
}

/// Taint flags that point at the modules we loaded (proprietary, forced, staging,
/// out-of-tree, unsigned).
const IMAGE_TAINTS: &str = "PFCOE";

/// Reads `/proc/sys/kernel/tainted` as letters and compares them with `allowed`.
pub fn read_taint(proc_root: &Path, allowed: &str) -> crate::report::TaintReport {
    let value: u64 = std::fs::read_to_string(proc_root.join("sys/kernel/tainted"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let flags = crate::report::taint_letters(value);
    let unexpected = flags.chars().filter(|c| !allowed.contains(*c)).collect();
    crate::report::TaintReport {
        value,
        flags,
        unexpected,
    }
}

/// Runs the whole boot as PID 1. Never returns.
pub fn run_pid1() -> ! {
    let start = boottime_us();
    let api_errs = pid1::mount_api_filesystems(Path::new("/"));
    let mounted = boottime_us();
    kmsg::init(log::LevelFilter::Info);
    // Keep our records: the default kmsg rate limit would drop most of them.
    let _ = std::fs::write("/proc/sys/kernel/printk_devkmsg", "on\n");
    log::info!(
        "validator {} starting as PID 1 (at {start} us; API mounts {} us, log {} us)",
        env!("CARGO_PKG_VERSION"),
        mounted - start,
        boottime_us() - mounted
    );
    let mut boot = Boot {
        roots: Roots::default(),
        args: BootArgs::default(),
        report: Report::new(start),
        bom: None,
        release: String::new(),
        verity_parts: None,
        measurer: None,
        trust: None,
    };
    for e in &api_errs {
        boot.report.warnings.push(e.to_string());
    }
    let ok = boot.stage("start", Boot::start)
        && boot.stage("measure", Boot::measure_start)
        && boot.stage("modules", Boot::modules)
        && boot.stage("storage", Boot::storage)
        && (boot.verity_cfg().is_none() || boot.stage("verity", Boot::verity))
        && boot.stage("mount", Boot::mount)
        && (boot.verity_cfg().is_none() || boot.stage("critical", Boot::critical))
        && boot.stage("handover", |b| {
            pid1::check_new_root(&b.roots.new_root, &b.args.init)
                .map(|()| {
                    Some(format!(
                        "switch_root to {} and exec {}",
                        b.roots.new_root.display(),
                        b.args.init
                    ))
                })
                .map_err(|e| (Fault::Image, e.to_string()))
        });
    boot.measure_end();
    if ok && boot.report.decision == Decision::Pass {
        boot.emit_report();
        let err = pid1::switch_root(&boot.roots.new_root, &boot.args.init, &boot.args.init_args);
        // Past this point the old root may be gone; say what happened and stop.
        boot.report.fail(Fault::Image, format!("handover: {err}"));
        boot.emit_report();
    } else {
        boot.emit_report();
    }
    let action = boot.args.on_stop;
    log::error!("boot stopped; {action:?}");
    pid1::finish(action)
}

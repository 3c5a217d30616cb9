//! Part 1 of the preflight: the drivers that live on the verified root (the BOM's
//! `modules.root`: nvidia, nvidia_uvm, mlx5_core, mlx5_ib ...) are gated and loaded from
//! `<new root>/lib/modules/<release>` with the initramfs's gate ([`Gate::from_initramfs`]:
//! the trust store, the kernel's vermagic and its CRC table; the trust narrowed to the
//! kernel's under Secure Boot, `runtime::uefi_keys::module_trust`) and loader
//! ([`modload::Loader`], through [`modload::gated`], as the initramfs's modules): the same checks, the same dependency order, the same
//! `finit_module(2)`.
//!
//! The module index is the root's own `modules.dep` / `modules.softdep` /
//! `modules.builtin`, as `depmod` wrote it when the image was built (Debian's packages and
//! DKMS run depmod; the image build must leave it in place). The CRC table is the kernel's
//! full one (mkinitramfs keeps every `vmlinux` export when the BOM has root modules) plus
//! the exports of the root's modules that other modules of the closure import from (so
//! `nvidia_uvm`'s imports from `nvidia` are checked, and `mlx5_ib`'s from `ib_core`). An
//! exporter that fails the gate is never loaded, so its importers are skipped: using its
//! exports for their CRC check lets nothing through.
//!
//! Fault classes: a refused driver, a driver the kernel refuses, or a broken index is an
//! image fault, except a driver that the kernel refuses with `ENODEV` ("no device") while a
//! hardware check of the same preflight failed: then the hardware is missing and the
//! driver is right ([`attribute_no_device`]).

use std::collections::BTreeSet;
use std::path::Path;

use super::{Check, PreflightReport};
use crate::config::bom::Bom;
use crate::formats::kmod::index::Index;
use crate::formats::kmod::{modinfo, sig};
use crate::gate::{batch, Gate, Verdict};
use crate::runtime::modload::{self, ModStatus, ModuleReport};
use crate::stages::{Context, Fault};

/// The check's name.
pub const CHECK: &str = "root-modules";

/// The hard-dependency closure of `names` in `index`, each module after its
/// dependencies; names not in the index (or built in) are kept, the caller reports them.
pub fn closure(index: &Index, names: &[String]) -> Vec<String> {
    fn visit(index: &Index, n: &str, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !seen.insert(n.to_string()) || seen.len() > 4096 {
            return;
        }
        if let Some(e) = index.entries.get(n) {
            for d in e.deps.iter().rev() {
                visit(index, d, seen, out);
            }
        }
        out.push(n.to_string());
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for n in names {
        visit(
            index,
            &crate::formats::kmod::normalize_name(n),
            &mut seen,
            &mut out,
        );
    }
    out
}

/// Adds to the gate's CRC table the exports of every module in the closure that another
/// module of the closure depends on, read from `dir`. Returns the modules read.
pub fn add_root_exports(
    gate: &mut Gate,
    dir: &Path,
    index: &Index,
    closure: &[String],
) -> Vec<String> {
    let exporters: BTreeSet<&str> = closure
        .iter()
        .filter_map(|n| index.entries.get(n))
        .flat_map(|e| e.deps.iter().map(String::as_str))
        .collect();
    let Some(table) = gate.symvers.as_mut() else {
        return Vec::new();
    };
    let mut read = Vec::new();
    for name in exporters {
        let Some(entry) = index.entries.get(name) else {
            continue;
        };
        // An exporter that cannot be read adds nothing: its importers then fail the gate
        // on unknown symbols, and the exporter itself fails when its turn comes.
        let exports = batch::read_file(&dir.join(&entry.path))
            .map_err(|e| e.to_string())
            .and_then(|raw| {
                let comp = modinfo::Compression::from_name(&entry.path);
                let image = modinfo::decompress(&raw, comp).map_err(|e| e.to_string())?;
                let body = sig::split(&image).map(|s| s.body).unwrap_or(&image);
                modinfo::exports(body).map_err(|e| e.to_string())
            });
        match exports {
            Ok(list) => {
                for e in list {
                    table.insert(&e.symbol, e.crc, name, false);
                }
                read.push(name.to_string());
            }
            Err(why) => log::warn!("preflight: exports of {name}: {why}"),
        }
    }
    read
}

/// Gates (without loading) the BOM's root modules and their dependencies from `dir`: what
/// `validator preflight --gate-modules` runs on a host or a live node.
pub fn gate_root_modules(
    mut gate: Gate,
    dir: &Path,
    names: &[String],
) -> Result<Vec<Verdict>, modload::IndexLoadError> {
    let index = modload::load_index(dir)?;
    let all = closure(&index, names);
    add_root_exports(&mut gate, dir, &index, &all);
    Ok(all
        .iter()
        .filter(|n| !index.builtin.contains(*n))
        .map(|n| match index.entries.get(n) {
            None => unreadable(n, format!("not in {}", dir.join("modules.dep").display())),
            Some(e) => {
                let path = dir.join(&e.path);
                match batch::read_file(&path) {
                    Ok(raw) => {
                        let mut v = gate.check(n, &e.path, &raw).0;
                        v.file = Some(path.display().to_string());
                        v
                    }
                    Err(why) => unreadable(n, why.to_string()),
                }
            }
        })
        .collect())
}

/// The verdict on a module whose file could not be read.
fn unreadable(name: &str, message: String) -> Verdict {
    let mut v = Verdict::new(name);
    v.reasons.push(crate::gate::Reason {
        code: crate::gate::ReasonCode::Unreadable,
        message,
    });
    v
}

/// Why a module did not load, for the check's detail.
fn why(r: &ModuleReport) -> String {
    match r.status {
        ModStatus::Rejected => format!(
            "{}: refused by the gate: {}",
            r.name,
            r.message.as_deref().unwrap_or("")
        ),
        ModStatus::Failed => format!(
            "{}: the kernel refused it: {}",
            r.name,
            r.message
                .as_deref()
                .or(r.errno.as_deref())
                .unwrap_or("no reason recorded")
        ),
        _ => format!(
            "{}: {}",
            r.name,
            r.message.as_deref().unwrap_or("not loaded")
        ),
    }
}

/// Whether the kernel refused a module because there was no device for it.
fn no_device(r: &ModuleReport) -> bool {
    r.status == ModStatus::Failed && r.errno.as_deref() == Some("ENODEV")
}

/// Gates and loads the BOM's root modules (boot only), measures what loaded, and records
/// the `root-modules` check.
pub fn load_root_modules(ctx: &mut Context, bom: &Bom, report: &mut PreflightReport) {
    let dir = ctx.roots.new_root.join("lib/modules").join(&ctx.release);
    let names: Vec<String> = bom.modules.root.iter().map(|m| m.normalized()).collect();
    let index = match modload::load_index(&dir) {
        Ok(i) => i,
        Err(e) => {
            report.checks.push(Check::fail(
                CHECK,
                Fault::Image,
                format!("the root's module index: {e}"),
            ));
            return;
        }
    };
    let mut gate = match Gate::from_initramfs(&ctx.roots.initramfs, bom) {
        Ok(g) => g,
        Err(e) => {
            report.checks.push(Check::fail(
                CHECK,
                Fault::Image,
                format!("module gate: {e}"),
            ));
            return;
        }
    };
    // The firmware's keys decide what the kernel trusts for modules (efivarfs is mounted
    // by now on a UEFI boot): the gate follows (`runtime::uefi_keys::module_trust`).
    gate.trust = crate::runtime::uefi_keys::module_trust_logged(&gate.trust, ctx.uefi_keys());
    gate.policy.hash_blacklist = ctx.uefi_keys().module_hash_blacklist();
    let all = closure(&index, &names);
    let exporters = add_root_exports(&mut gate, &dir, &index, &all);
    log::info!(
        "preflight: gating {} root module(s) from {} ({} symbol CRCs, exports of {})",
        all.len(),
        dir.display(),
        gate.symvers.as_ref().map_or(0, |s| s.map.len()),
        if exporters.is_empty() {
            "none".to_string()
        } else {
            exporters.join(", ")
        }
    );
    // The options modprobe on the root would give: the root's modprobe.d, then the
    // command line.
    let options = match modload::read_config(&ctx.roots.new_root, Some(ctx.cmdline_bytes())) {
        Ok(c) => c,
        Err(e) => {
            report
                .checks
                .push(Check::fail(CHECK, Fault::Image, format!("root {e}")));
            return;
        }
    };
    let mut loader = modload::gated::loader(
        &dir,
        index,
        gate,
        options,
        &ctx.cmdline,
        &ctx.roots.sys,
        &ctx.roots.proc,
    );
    // Measured like the initramfs's modules: name and digest of the image the kernel got.
    let done = modload::gated::load_and_measure(
        &mut loader,
        &names,
        ctx.measurer.as_mut(),
        &mut ctx.facts.warnings,
    );
    let results = done.results;
    for r in &results {
        log::info!(
            "preflight: module {} {:?} {}",
            r.name,
            r.status,
            r.message.as_deref().unwrap_or("")
        );
    }
    let measure_err = done.measured.err();
    let causes: Vec<&ModuleReport> = results
        .iter()
        .filter(|r| matches!(r.status, ModStatus::Rejected | ModStatus::Failed))
        .filter(|r| !r.softdep)
        .collect();
    let skipped: Vec<&ModuleReport> = results
        .iter()
        .filter(|r| r.status == ModStatus::Skipped && !r.softdep)
        .collect();
    let loaded = results.iter().filter(|r| r.ok()).count();
    let c = if causes.is_empty() && skipped.is_empty() {
        Check::pass(CHECK, format!("{loaded} root module(s) gated and loaded"))
    } else {
        let mut parts: Vec<String> = causes.iter().map(|r| why(r)).collect();
        parts.extend(skipped.iter().map(|r| why(r)));
        Check::fail(CHECK, Fault::Image, parts.join("; "))
    };
    if let Some(e) = measure_err {
        use crate::stages::Classified;
        report.checks.push(Check::fail(
            "root-modules-measure",
            e.fault(),
            e.to_string(),
        ));
    }
    report.checks.push(c);
    report.modules = results;
}

/// After every check ran: a `root-modules` failure whose causes are all the kernel's
/// `ENODEV` becomes a hardware fault when a hardware check failed too (the device the
/// driver looks for is missing), and says so.
pub fn attribute_no_device(report: &mut PreflightReport) {
    let causes: Vec<&ModuleReport> = report
        .modules
        .iter()
        .filter(|r| matches!(r.status, ModStatus::Rejected | ModStatus::Failed) && !r.softdep)
        .collect();
    if causes.is_empty() || !causes.iter().all(|r| no_device(r)) {
        return;
    }
    let names: Vec<String> = causes.iter().map(|r| r.name.clone()).collect();
    let hardware: Vec<String> = report
        .checks
        .iter()
        .filter(|c| c.failed() && c.fault == Some(Fault::Hardware))
        .map(|c| c.name.clone())
        .collect();
    let Some(c) = report
        .checks
        .iter_mut()
        .find(|c| c.name == CHECK && c.failed())
    else {
        return;
    };
    if hardware.is_empty() {
        c.detail.push_str(&format!(
            " (ENODEV from {}: the driver found no device although the hardware checks pass)",
            names.join(", ")
        ));
    } else {
        c.fault = Some(Fault::Hardware);
        c.detail.push_str(&format!(
            " (ENODEV from {}: no device for the driver; see {})",
            names.join(", "),
            hardware.join(", ")
        ));
    }
}

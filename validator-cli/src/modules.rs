//! `validator modules check`: the module gate (`validator::gate`) over
//! module files and directories - vermagic, symbol CRCs, signature, BOM policy - one
//! line (or one JSON document) with every verdict.
//!
//! Contract: exit 0 only if every module passes; an unusable kernel image, BOM,
//! `Module.symvers`, certificate or path is exit 2, named. `--symvers` is read up to the
//! library's limit for the initramfs's `Module.symvers` (`gate::SYMVERS_MAX`).

use validator::util::as_f64;
use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::cli::{Mode, ModulesCheck};
use crate::kernel::load_kernel;
use crate::keys::trust_store;
use crate::{Res, Usage};

/// `validator modules check`.
pub(crate) fn check(a: ModulesCheck, out: &mut Out) -> Res {
    // The paths and every small input are read before the kernel image is decoded (a
    // second or so): bad input is named at once.
    let files = module_files(&a.paths)?;
    let g = gate_of(&a)?;
    let jobs = a.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let b = validator::gate::batch::check_files(&g, &files, jobs);
    let failed = b.verdicts.iter().filter(|v| !v.pass).count();
    let mb = as_f64(b.bytes) / 1e6;
    let secs = b.elapsed.as_secs_f64();
    if a.json {
        let doc = serde_json::json!({
            "modules": b.verdicts,
            "checked": b.verdicts.len(),
            "failed": failed,
            "bytes": b.bytes,
            "seconds": secs,
        });
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        for v in &b.verdicts {
            out.line(&verdict_line(v))?;
        }
    }
    eprintln!(
        "validator: {} modules, {} passed, {failed} failed; {mb:.1} MB in {secs:.2} s ({:.0} MB/s, {jobs} threads)",
        b.verdicts.len(),
        b.verdicts.len() - failed,
        mb / secs.max(1e-9)
    );
    Ok(failed == 0)
}

/// The gate the options describe: the kernel's vermagic and symbol CRCs (`--vmlinuz`,
/// `--symvers`), the BOM's policy (`--bom`), `--mode`, and the trust store. The small
/// inputs (certificates, `Module.symvers`, BOM) are read first, the kernel image last.
fn gate_of(a: &ModulesCheck) -> Result<validator::gate::Gate, Usage> {
    use validator::config::bom::VermagicMode;
    use validator::gate;
    let trust = trust_store(&a.trust)?;
    let symvers = match &a.symvers {
        Some(f) => {
            let bytes = read_limited(f, gate::SYMVERS_MAX)?;
            let text = String::from_utf8(bytes)
                .map_err(|_| Usage(format!("{}: not UTF-8", f.display())))?;
            let t = validator::formats::kmod::symvers::Symvers::parse(&text)
                .map_err(|e| Usage(format!("{}: {e}", f.display())))?;
            Some(t)
        }
        None => None,
    };
    let bom = match &a.bom {
        Some(b) => Some(validator::config::bom::load(b)?.bom),
        None => None,
    };
    let mut policy = gate::Policy {
        require_signature: true,
        ..gate::Policy::default()
    };
    let mut release = a.kernel_release.clone();
    let mut table = None;
    if let Some(v) = &a.vmlinuz {
        let k = load_kernel(v)?;
        table = Some(k.symvers());
        policy.kernel_vermagic = k.vermagic;
        if release.as_deref().is_some_and(|r| r != k.release) {
            return Err(Usage(format!(
                "--kernel-release differs from the release of {} ({})",
                v.display(),
                k.release
            )));
        }
        release = Some(k.release);
    }
    if let Some(t) = symvers {
        let tab = table.get_or_insert_with(Default::default);
        tab.map.extend(t.map);
    }
    if let Some(b) = bom {
        if release
            .as_deref()
            .is_some_and(|r| r != b.kernel.release.as_str())
        {
            eprintln!(
                "validator: note: the BOM's kernel.release {} is not the kernel given ({}); strict checks use the BOM's",
                validator::util::escape_controls(&b.kernel.release.to_string()),
                validator::util::escape_controls(release.as_deref().unwrap_or(""))
            );
        }
        let from_bom = gate::Policy::from_bom(&b);
        release = from_bom.release.clone();
        policy = gate::Policy {
            kernel_vermagic: policy.kernel_vermagic,
            unknown_symbols_fatal: false,
            ..from_bom
        };
    }
    if let Some(m) = a.mode {
        policy.mode = match m {
            Mode::Strict => VermagicMode::Strict,
            Mode::Kernel => VermagicMode::Kernel,
        };
    }
    policy.release = release;
    Ok(gate::Gate {
        trust,
        symvers: table,
        policy,
    })
}

/// The module files under the named paths. A named path must be a module file or a
/// directory to search; anything else (a FIFO, a device, nothing) is unusable input, and
/// so is finding no module at all.
fn module_files(paths: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>, Usage> {
    for p in paths {
        let m = std::fs::metadata(p).map_err(|e| Usage(format!("{}: {e}", p.display())))?;
        if !m.is_dir() {
            if let Some(kind) = validator::util::fs::kind_of(m.file_type()) {
                return Err(Usage(format!(
                    "{}: is a {kind}, not a module file or directory",
                    p.display()
                )));
            }
        }
    }
    let files = validator::gate::batch::collect(paths)?;
    if files.is_empty() {
        return Err(Usage(format!(
            "no module files (*.ko, *.ko.xz, *.ko.zst, *.ko.gz) in {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(files)
}

/// One verdict as a text line: `PASS name` or `FAIL name: why`, with the signer and the
/// vermagic when known.
fn verdict_line(v: &validator::gate::Verdict) -> String {
    let sig = match (&v.signer, &v.sig_key, &v.sig_hashalgo) {
        (Some(s), Some(k), Some(h)) => {
            format!(" signer=\"{s}\" sig_key={k} sig_hashalgo={h}")
        }
        _ => String::new(),
    };
    let vm = v
        .vermagic
        .as_deref()
        .map(|m| format!(" vermagic=\"{}\"", m.trim_end()))
        .unwrap_or_default();
    if v.pass {
        format!("PASS {}{sig}{vm}", v.module)
    } else {
        format!("FAIL {}: {}{sig}{vm}", v.module, v.summary())
    }
}

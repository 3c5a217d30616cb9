//! `validator preflight`: the boot's preflight checks (`validator::stages::preflight::check`,
//! the same code) against a live node's `/sys`, `/proc` and `/`, or against fixture trees;
//! with `--gate-modules`, also the module gate over the BOM's `modules.root` on that root
//! (judged, never loaded). Exit 0 when no check fails, 1 when one does, 2 on bad usage or an
//! unusable BOM, kernel image or directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::kernel::load_kernel;
use crate::{Res, Usage};
use validator::config::bom::hardware::LINK_WAIT_S_MAX;
use validator::gate::{Gate, Policy, Verdict};
use validator::stages::preflight::{self, CheckStatus, HwRoots, Options, PreflightReport};
use validator::util::out::Out;

// `<ROOT>` and `<release>` are the help text's placeholders, not HTML.
#[allow(rustdoc::invalid_html_tags)]
#[derive(Debug, Args)]
pub struct PreflightArgs {
    /// The image's BOM: what the node must have.
    #[arg(long, value_name = "FILE")]
    bom: PathBuf,
    #[command(flatten)]
    roots: NodeRoots,
    /// Seconds to wait for mlx5 ports and NVMe controllers (default: the BOM's
    /// hardware.link_wait_s).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(0..=i64::from(LINK_WAIT_S_MAX)))]
    wait: Option<u32>,
    /// Also gate (never load) the BOM's modules.root and their dependencies from
    /// <ROOT>/lib/modules/<release>, with the kernel's keys, CRCs and vermagic.
    #[arg(long)]
    gate_modules: bool,
    /// The kernel image for --gate-modules (default: <ROOT>/boot/vmlinuz-<running release>).
    #[arg(long, value_name = "PATH", requires = "gate_modules")]
    vmlinuz: Option<PathBuf>,
    /// More certificates trusted to sign modules (beyond the kernel's and the BOM's).
    #[arg(long, value_name = "CERT", requires = "gate_modules")]
    trust: Vec<PathBuf>,
    /// One JSON document: every check, the facts, the gate's verdicts and the result.
    #[arg(long)]
    json: bool,
}

/// The node's trees the preflight reads (also `validator recheck`'s).
#[derive(Debug, Args)]
pub struct NodeRoots {
    /// The sysfs root.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// The procfs root.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub procfs: PathBuf,
    /// The root holding the fabric manager's package and the drivers (on a live node, the
    /// booted root).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

impl NodeRoots {
    /// The three trees, each checked to be a directory.
    pub fn checked(&self) -> Result<HwRoots, Usage> {
        directory("sysfs", &self.sysfs)?;
        directory("procfs", &self.procfs)?;
        directory("root", &self.root)?;
        Ok(HwRoots {
            sys: self.sysfs.clone(),
            proc: self.procfs.clone(),
            root: self.root.clone(),
        })
    }
}

fn directory(flag: &str, p: &Path) -> Result<(), Usage> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Usage(format!("--{flag} {}: not a directory", p.display()))),
        Err(e) => Err(Usage(format!("--{flag} {}: {e}", p.display()))),
    }
}

/// The gate a boot would build, from a kernel image, the BOM and certificates.
fn gate(
    a: &PreflightArgs,
    bom: &validator::config::bom::LoadedBom,
) -> Result<(Gate, String), Usage> {
    let vmlinuz = match &a.vmlinuz {
        Some(v) => v.clone(),
        None => {
            let osrelease = a.roots.procfs.join("sys/kernel/osrelease");
            let rel = validator::util::fs::read_text_limited(&osrelease, 256)?;
            a.roots
                .root
                .join("boot")
                .join(format!("vmlinuz-{}", rel.trim_end()))
        }
    };
    // Certificates named on the command line and by the BOM first, the kernel image (a
    // second or so to decode) last: bad input is named at once.
    let mut named = validator::trust::TrustStore::new();
    let bom_dir = bom.path.parent().unwrap_or(Path::new("."));
    for t in &bom.bom.policy.trust {
        named.add_path(&bom_dir.join(t))?;
    }
    for t in &a.trust {
        named.add_path(t)?;
    }
    let k = load_kernel(&vmlinuz)?;
    let mut trust = validator::trust::TrustStore::new();
    for (i, der) in k
        .builtin_certs()
        .map_err(|e| Usage(format!("{}: {e}", vmlinuz.display())))?
        .iter()
        .enumerate()
    {
        trust.add_bytes(der, &format!("{} built-in key {i}", vmlinuz.display()))?;
    }
    // The kernel's keys first, as a boot's gate holds them.
    for c in named.certs {
        trust.add(c);
    }
    let mut policy = Policy::from_bom(&bom.bom);
    policy.kernel_vermagic = k.vermagic.clone();
    Ok((
        Gate {
            trust,
            symvers: Some(k.symvers()),
            policy,
        },
        k.release,
    ))
}

pub(crate) fn status_word(s: CheckStatus) -> &'static str {
    match s {
        CheckStatus::Pass => "PASS",
        CheckStatus::Warn => "WARN",
        CheckStatus::Fail => "FAIL",
        CheckStatus::Skip => "SKIP",
    }
}

/// Runs the command.
pub fn run(a: PreflightArgs, out: &mut Out) -> Res {
    let bom = validator::config::bom::load(&a.bom)?;
    let roots = a.roots.checked()?;
    let mut report = PreflightReport::default();
    let mut verdicts: Vec<Verdict> = Vec::new();
    if a.gate_modules {
        let (g, release) = gate(&a, &bom)?;
        let dir = a.roots.root.join("lib/modules").join(&release);
        let names: Vec<String> = bom
            .bom
            .modules
            .root
            .iter()
            .map(|m| m.normalized())
            .collect();
        if names.is_empty() {
            report.checks.push(preflight::Check::skip(
                preflight::drivers::CHECK,
                "the BOM lists no modules.root",
            ));
        } else {
            match preflight::drivers::gate_root_modules(g, &dir, &names) {
                Ok(v) => verdicts = v,
                Err(e) => {
                    report.checks.push(preflight::Check::fail(
                        preflight::drivers::CHECK,
                        validator::stages::Fault::Image,
                        e.to_string(),
                    ));
                }
            }
            if report.checks.is_empty() {
                let refused: Vec<String> = verdicts
                    .iter()
                    .filter(|v| !v.pass)
                    .map(|v| format!("{}: {}", v.module, v.summary()))
                    .collect();
                report.checks.push(if refused.is_empty() {
                    preflight::Check::pass(
                        preflight::drivers::CHECK,
                        format!("{} module(s) pass the gate (not loaded)", verdicts.len()),
                    )
                } else {
                    preflight::Check::fail(
                        preflight::drivers::CHECK,
                        validator::stages::Fault::Image,
                        format!("the gate refuses {}", refused.join("; ")),
                    )
                });
            }
        }
    }
    let mut opts = Options::from_bom(&bom.bom);
    if let Some(w) = a.wait {
        opts.link_wait = Duration::from_secs(u64::from(w));
    }
    preflight::check(&roots, &bom.bom, &opts, &mut report);
    let decided = report
        .decide()
        .map(|(f, c)| (f, c.name.clone(), c.detail.clone()));
    if a.json {
        let doc = serde_json::json!({
            "pass": decided.is_none(),
            "fault": decided.as_ref().map(|d| d.0),
            "reason": decided.as_ref().map(|d| format!("{}: {}", d.1, d.2)),
            "bom": bom.path.display().to_string(),
            "bom_sha256": bom.sha256,
            "preflight": report,
            "gated": verdicts,
        });
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        for c in &report.checks {
            let fault = c
                .fault
                .map(|f| {
                    format!(
                        " [{}{}]",
                        f.as_str(),
                        if c.transient { ", transient" } else { "" }
                    )
                })
                .unwrap_or_default();
            out.line(&format!(
                "{} {}{fault}: {}",
                status_word(c.status),
                c.name,
                c.detail
            ))?;
        }
        for v in &verdicts {
            if v.pass {
                out.line(&format!(
                    "PASS module {} signer={:?}",
                    v.module,
                    v.signer.as_deref().unwrap_or("")
                ))?;
            } else {
                out.line(&format!("FAIL module {}: {}", v.module, v.summary()))?;
            }
        }
        match &decided {
            None => out.line(&format!("preflight: pass ({})", report.summary()))?,
            Some((f, name, detail)) => out.line(&format!(
                "preflight: {} fault: {name}: {detail}",
                f.as_str()
            ))?,
        }
    }
    Ok(decided.is_none())
}

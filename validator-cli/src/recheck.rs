//! `validator recheck`: the live re-check of a running node (the shipped
//! `validator-recheck.timer` runs it). It re-runs the boot's preflight checks
//! (`validator::stages::preflight::check`, the same code) against the BOM the boot was
//! judged by (the copy the init left in `/run/validator/bom.toml`, refused unless its
//! SHA-256 is the boot report's `bom_sha256`), makes the node's report now
//! (`validator::report::recheck::live`: a quarantine the preflight raised clears when its
//! checks pass again, one appears when a check fails now) and writes it all or none: the
//! re-check's JSON (`/run/validator/recheck.json`), the Prometheus textfile and the NFD
//! features file into the BOM's `[report]` directories of the root (followed as the boot
//! placed them). The boot's own `report.json` is only read.
//!
//! Exit 0 when the node passes now, 1 when it is quarantined, 2 on bad usage or an
//! unusable report, BOM or directory (nothing written).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::{Res, Usage};
use validator::config::bom::hardware::LINK_WAIT_S_MAX;
use validator::report::{json, nfd, prometheus, publish, recheck};
use validator::stages::preflight::{self, Options, PreflightReport};
use validator::util::out::Out;

#[derive(Debug, Args)]
pub struct RecheckArgs {
    /// The boot's report.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/run/validator/report.json"
    )]
    report: PathBuf,
    /// The BOM the boot was judged by.
    #[arg(long, value_name = "FILE", default_value = "/run/validator/bom.toml")]
    bom: PathBuf,
    /// The trees the preflight reads; the root is also where the BOM's report.*
    /// directories are (its /run included).
    #[command(flatten)]
    roots: crate::preflight::NodeRoots,
    /// Seconds to wait for mlx5 ports and NVMe controllers.
    #[arg(long, value_name = "SECONDS", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(LINK_WAIT_S_MAX)))]
    wait: u32,
    /// Where the re-check's report goes.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/run/validator/recheck.json"
    )]
    out: PathBuf,
    /// Write the JSON report only (no textfile, no features file).
    #[arg(long)]
    no_fleet_files: bool,
}

fn now_unix_s() -> Result<u64, Usage> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .map_err(|e| Usage(format!("the clock is before 1970: {e}")))
}

/// `a` and `b` name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Where `dir` of the BOM's `[report]` lands in the running root (as the boot placed it).
fn placed(root: &Path, dir: &str, name: &str) -> Result<PathBuf, Usage> {
    let d = publish::place(root, &root.join("run"), dir)
        .map_err(|e| Usage(format!("[report] directory {dir}: {e}")))?;
    Ok(d.join(name))
}

/// Runs the command.
pub fn run(a: RecheckArgs, out: &mut Out) -> Res {
    let boot = crate::report::load(&a.report)?;
    let bom = validator::config::bom::load(&a.bom)?;
    if boot.bom_sha256.as_deref() != Some(bom.sha256.as_str()) {
        return Err(Usage(format!(
            "{}: SHA-256 {} is not the BOM the boot was judged by ({} says {}); refused",
            a.bom.display(),
            bom.sha256,
            a.report.display(),
            boot.bom_sha256.as_deref().unwrap_or("none")
        )));
    }
    let roots = a.roots.checked()?;
    let mut opts = Options::from_bom(&bom.bom);
    opts.link_wait = Duration::from_secs(u64::from(a.wait));
    let mut now = PreflightReport::default();
    preflight::check(&roots, &bom.bom, &opts, &mut now);
    let live = recheck::live(&boot, now, now_unix_s()?)
        .map_err(|e| Usage(format!("{}: {e}", a.report.display())))?;
    let report_bytes = json::file_bytes(&live);
    let mut files: Vec<(PathBuf, Vec<u8>)> = vec![(a.out.clone(), report_bytes)];
    let cfg = &bom.bom.report;
    if !a.no_fleet_files {
        if !cfg.textfile_dir.is_empty() {
            let p = placed(&a.roots.root, &cfg.textfile_dir, prometheus::FILE_NAME)?;
            files.push((p, prometheus::render(&live).into_bytes()));
        }
        if !cfg.nfd_dir.is_empty() {
            let p = placed(&a.roots.root, &cfg.nfd_dir, nfd::FILE_NAME)?;
            files.push((p, nfd::render(&live, &cfg.nfd_namespace).into_bytes()));
        }
    }
    // The boot's report (the quoted one) is never an output.
    if let Some((p, _)) = files.iter().find(|(p, _)| same_file(p, &a.report)) {
        return Err(Usage(format!(
            "{}: the boot's report cannot be an output of the re-check (it is kept as the boot wrote it); nothing was written",
            p.display()
        )));
    }
    let set: Vec<(&Path, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_path(), b.as_slice()))
        .collect();
    crate::files::write_set(&set)?;
    if let Some(p) = &live.preflight {
        for c in &p.checks {
            out.line(&format!(
                "{} {}: {}",
                crate::preflight::status_word(c.status),
                c.name,
                c.detail
            ))?;
        }
    }
    for (p, _) in &files {
        out.line(&format!("wrote {}", p.display()))?;
    }
    let k = live.recheck.as_ref();
    let boot_word = k.map_or("?", |k| k.boot_decision.as_str());
    out.line(&format!(
        "recheck: {}{} (the boot: {boot_word})",
        live.decision.as_str(),
        live.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    ))?;
    Ok(live.decision == validator::report::Decision::Pass)
}

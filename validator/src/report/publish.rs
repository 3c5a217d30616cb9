//! What the init does with the report at the end of a boot ([`emit`]):
//!
//! 1. when the boot goes on (pass, quarantine): the Prometheus textfile and the NFD
//!    features file, each written by rename into its `[report]` directory of the new
//!    root ([`place`] says where that is before `switch_root`); a file that cannot be
//!    written is a warning in the report, never a failed boot;
//! 2. the quote of the finished report (`[measure] quote`: [`crate::runtime::attest`],
//!    qualifying data [`json::quoted_digest`]) into its `attestation`, then the seal
//!    that closes the boot's measurements ([`crate::runtime::measure::Measurer::seal`]:
//!    `sealed:<digest of the quote>` into our PCR, the logs in `/run` written again), so
//!    no later quote can vouch for another report;
//! 3. the JSON, by rename, to `/run/validator/report.json`, which the new root inherits
//!    (beside it, when the boot goes on, the BOM it was judged by: [`BOM_RUN_PATH`]),
//!    and, when quoted, into the slot record (so the next boot and a verifier reading the
//!    ESP get the quoted report);
//! 4. the console line, one write, with the digest of that file. The test bed's init
//!    (`test-hooks`) first prints the whole JSON after [`super::console::FULL_PREFIX`].
//!
//! The root is normally mounted read-only, so an image that wants the files keeps the
//! directories in `/run`: a symbolic link such as
//! `/var/lib/prometheus/node-exporter -> /run/validator/textfile` in the image is
//! followed as the new root will see it ([`crate::runtime::rootpath`], with `/run` left
//! unresolved), and the file lands in the `/run` it inherits.

use std::path::{Path, PathBuf};

use super::schema::Report;
use super::{console, json, nfd, prometheus};
use crate::runtime::rootpath::{components, Lookup, ResolveError};
use crate::stages::Context;

/// Why a report file could not be placed or written into the new root.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Following `dir`'s symbolic links went round in circles.
    #[error("{dir}: {source}")]
    Loop { dir: String, source: ResolveError },
    /// A component of `dir` could not be looked up.
    #[error(transparent)]
    Resolve(ResolveError),
    /// The file could not be written.
    #[error("{}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where `dir`, a directory of the new root, is now: `dir` resolved inside `new_root`
/// following symbolic links as the new root will (missing components are kept as they
/// are, to be created), and, when that lands under `/run`, the same place under `run`,
/// the `/run` that `switch_root` moves into the new root.
pub fn place(new_root: &Path, run: &Path, dir: &str) -> Result<PathBuf, PublishError> {
    let lookup = Lookup {
        keep_missing: true,
        opaque: Some("run"),
    };
    let parts = components(new_root, dir, lookup).map_err(|e| match e {
        ResolveError::Loop { .. } => PublishError::Loop {
            dir: dir.to_string(),
            source: e,
        },
        ResolveError::Io { .. } => PublishError::Resolve(e),
    })?;
    Ok(match parts.split_first() {
        Some((first, rest)) if first == "run" => {
            let mut p = run.to_path_buf();
            p.extend(rest);
            p
        }
        _ => {
            let mut p = new_root.to_path_buf();
            p.extend(&parts);
            p
        }
    })
}

/// Writes `bytes` as `name` into `dir` of the new root, by rename.
pub fn write_into_root(
    new_root: &Path,
    run: &Path,
    dir: &str,
    name: &str,
    bytes: &[u8],
) -> Result<PathBuf, PublishError> {
    let d = place(new_root, run, dir)?;
    let f = d.join(name);
    crate::util::fs::write_atomic(&f, bytes).map_err(|source| PublishError::Write {
        path: f.clone(),
        source,
    })?;
    Ok(f)
}

/// Completes the report before it is written: the checks (derived again from everything
/// else), PID 1's peak memory (from `proc`), the time of the report.
pub fn seal(report: &mut Report, proc: &Path) {
    report.checks = super::checks::derive(report);
    report.peak_rss_bytes = crate::runtime::node::peak_rss_bytes(proc);
    if let Some(t) = crate::sys::boottime_us() {
        report.boottime_report_us = t;
    }
}

/// The quote of the finished report (`[measure] quote`, when the TPM works): its
/// qualifying data is [`json::quoted_digest`] of the report as it is about to be written.
fn attest(ctx: &mut Context, report: &mut Report) {
    let m = ctx
        .bom
        .as_ref()
        .map(|b| b.bom.measure.clone())
        .unwrap_or_default();
    let Some(measurer) = ctx.measurer.as_mut() else {
        return;
    };
    if !m.quote {
        return;
    }
    report.attestation = None;
    let kind = match m.ak {
        crate::config::bom::AkKind::Ecc => crate::formats::tpm::attest::KeyKind::EccP256,
        crate::config::bom::AkKind::Rsa => crate::formats::tpm::attest::KeyKind::Rsa2048,
    };
    let a = match json::quoted_digest(report) {
        Ok(d) => crate::runtime::attest::quote(measurer, kind, &d),
        Err(e) => crate::runtime::attest::Attestation {
            failure: Some(format!("the report does not serialise: {e}")),
            ..Default::default()
        },
    };
    if let Some(f) = &a.failure {
        log::warn!("no quote: {f}");
    }
    report.attestation = Some(a);
}

/// Closes the boot's measurements after its quote (with or without one): nothing later
/// can quote the PCR values the report's quote signed.
fn close(ctx: &mut Context, report: &Report) {
    let run = ctx.roots.run.clone();
    let Some(m) = ctx.measurer.as_mut() else {
        return;
    };
    if !m.ok() || m.is_sealed() {
        return;
    }
    let attest = report
        .attestation
        .as_ref()
        .and_then(|a| a.quote.as_ref())
        .and_then(crate::runtime::attest::Quote::attest_bytes);
    match m.seal(&run, attest.as_deref()) {
        Ok(()) => log::info!("measurements sealed"),
        Err(e) => log::warn!("the boot could not be sealed: {e}"),
    }
}

/// The metrics and node-label files, for a boot that goes on.
fn fleet_files(ctx: &Context, report: &mut Report) {
    let cfg = ctx
        .bom
        .as_ref()
        .map(|b| b.bom.report.clone())
        .unwrap_or_default();
    seal(report, &ctx.roots.proc);
    let outputs = [
        (
            "metrics",
            cfg.textfile_dir.as_str(),
            prometheus::FILE_NAME,
            prometheus::render(report),
        ),
        (
            "node labels",
            cfg.nfd_dir.as_str(),
            nfd::FILE_NAME,
            nfd::render(report, &cfg.nfd_namespace),
        ),
    ];
    for (what, dir, name, text) in outputs {
        if dir.is_empty() {
            continue;
        }
        match write_into_root(
            &ctx.roots.new_root,
            &ctx.roots.run,
            dir,
            name,
            text.as_bytes(),
        ) {
            Ok(p) => log::info!("{what}: wrote {}", p.display()),
            Err(e) => {
                log::warn!("{what} not written: {e}");
                report.warnings.push(format!("{what} not written: {e}"));
            }
        }
    }
}

/// Where the BOM this boot was judged by is left for the running node (`validator
/// recheck` re-runs the preflight against it, checking its digest against the report's).
pub const BOM_RUN_PATH: &str = "validator/bom.toml";

/// The BOM's exact bytes into `/run` for the new root ([`BOM_RUN_PATH`]).
fn keep_bom(ctx: &Context) {
    let Some(b) = ctx.bom.as_ref() else { return };
    let path = ctx.roots.run.join(BOM_RUN_PATH);
    if let Err(e) = crate::util::fs::write_atomic(&path, &b.bytes) {
        log::warn!("cannot write {}: {e}", path.display());
    }
}

/// Writes the outputs of the report (see the module's documentation) and logs the
/// decision.
pub fn emit(ctx: &mut Context, report: &mut Report) {
    if report.decision.hands_over() {
        fleet_files(ctx, report);
    }
    seal(report, &ctx.roots.proc);
    attest(ctx, report);
    close(ctx, report);
    if report.decision.hands_over() {
        keep_bom(ctx);
    }
    let bytes = json::file_bytes(report);
    let path = ctx.roots.run.join(json::RUN_PATH);
    if let Err(e) = crate::util::fs::write_atomic(&path, &bytes) {
        log::error!("cannot write {}: {e}", path.display());
    }
    if report
        .attestation
        .as_ref()
        .is_some_and(|a| a.quote.is_some())
    {
        match serde_json::to_value(&*report) {
            Ok(v) => crate::stages::slot::keep_report(ctx, v),
            Err(e) => log::warn!("slot: the quoted report does not serialise: {e}"),
        }
    }
    let mut text = String::new();
    #[cfg(feature = "test-hooks")]
    text.push_str(&console::full_line(&json::to_line(report)));
    text.push_str(&console::line(report, &json::digest(&bytes)));
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out.write_all(text.as_bytes()).is_err() || out.flush().is_err() {
        log::error!("cannot write the report line to the console");
    }
    // The line must leave the console whole before the next kernel message (ours, logged
    // below, included) is printed: at 115200 baud a 1 KiB line takes about 90 ms.
    if let Err(e) = crate::sys::drain_stdout() {
        log::warn!("{e}");
    }
    log::info!(
        "decision: {} ({})",
        report.decision.as_str(),
        report.reason.as_deref().unwrap_or("all stages passed")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Directories of the new root land where the new root will see them: through links
    /// into `/run` (the inherited tmpfs), through relative links, or in the root itself.
    #[test]
    fn placing_files_as_the_new_root_sees_them() {
        let d = std::env::temp_dir().join(format!("vld-place-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (root, run) = (d.join("sysroot"), d.join("run"));
        std::fs::create_dir_all(root.join("var/lib/prometheus")).unwrap();
        std::fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::os::unix::fs::symlink(
            "/run/validator/textfile",
            root.join("var/lib/prometheus/node-exporter"),
        )
        .unwrap();
        std::os::unix::fs::symlink("../../var/nfd", root.join("etc/kubernetes/features.d"))
            .unwrap();
        let p = place(&root, &run, "/var/lib/prometheus/node-exporter").unwrap();
        assert_eq!(p, run.join("validator/textfile"));
        let p = place(&root, &run, "/etc/kubernetes/features.d/").unwrap();
        assert_eq!(p, root.join("var/nfd"));
        assert_eq!(place(&root, &run, "/run/x/../y").unwrap(), run.join("y"));
        // Writes by rename, creating what is missing; the new root's own /run is not used.
        let f = write_into_root(
            &root,
            &run,
            "/var/lib/prometheus/node-exporter",
            "m.prom",
            b"x 1\n",
        )
        .unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"x 1\n");
        assert!(std::fs::read_dir(root.join("run"))
            .unwrap()
            .next()
            .is_none());
        let f = write_into_root(
            &root,
            &run,
            "/etc/kubernetes/features.d",
            "validator",
            b"a/b=c\n",
        )
        .unwrap();
        assert_eq!(f, root.join("var/nfd/validator"));
        // A loop of links, and a file where a directory should be, are errors naming it.
        std::os::unix::fs::symlink("/loop", root.join("loop")).unwrap();
        assert!(place(&root, &run, "/loop/x")
            .unwrap_err()
            .to_string()
            .contains("symbolic links"));
        std::fs::write(root.join("etc/file"), "").unwrap();
        let e = write_into_root(&root, &run, "/etc/file", "validator", b"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("etc/file"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

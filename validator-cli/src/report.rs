//! `validator report FILE`: a boot's health report for a person, and its other renderings.
//!
//! Contract: FILE is a report (`validator.report/v2` or `/v1`, e.g. a copy of
//! `/run/validator/report.json`), read up to [`REPORT_MAX`]. Without options the report is
//! printed as text: the decision first, then the node, image and slot, a table of checks
//! with status and fault class, the stage timings and the slowest modules, and the
//! warnings; `--brief` sums the checks up per stage instead and lists only those that
//! warned or failed (printed even with the file options below). The attestation is one
//! line (the AK, the PCRs quoted, or why there is no quote). `--previous` does the same for the report of the boot this one fell back from
//! (carried in `slot.previous.report`). A report of another schema (a newer
//! `validator.report/v3`) is refused, exit 2: its fields may not mean what this version
//! would show. `--svg OUT` draws the boot as a timeline,
//! `--prometheus OUT` and `--nfd OUT` write the metrics and node-label files the init
//! writes into the new root (for a boot that never reached it). The OUTs are written all
//! or none by `crate::files::write_set`, after every argument is judged: only a regular
//! file is replaced, a link or a device at OUT, a missing directory and the same file
//! named twice are refused, naming the path, and a failure leaves every file as it was. Everything printed from
//! the report is made printable first (control characters become `?`): a report is
//! input from a node, not trusted. Exit status: 0 when the report's decision is `pass`,
//! 1 for any other decision, 2 when FILE is not a readable report.

use std::path::{Path, PathBuf};
use validator::util::as_f64;

use validator::report::timeline::{human_us, printable};
use validator::report::{checks, nfd, prometheus, timeline, CheckStatus, Report};

use crate::{Res, Usage};
use validator::util::out::Out;

/// Largest report read (a report with a carried previous report is tens of KiB).
pub const REPORT_MAX: u64 = 16 << 20;

/// What to do with the report.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// The report (JSON).
    pub file: PathBuf,
    /// Render the report of the boot this one fell back from instead.
    #[arg(long)]
    pub previous: bool,
    /// Short: one line per stage (its time and its checks counted), then only the
    /// checks that warned or failed.
    #[arg(long)]
    pub brief: bool,
    /// Draw the boot as an SVG timeline into OUT.
    #[arg(long, value_name = "OUT")]
    pub svg: Option<PathBuf>,
    /// Write the Prometheus textfile (node_exporter's textfile collector) into OUT.
    #[arg(long, value_name = "OUT")]
    pub prometheus: Option<PathBuf>,
    /// Write the Node Feature Discovery features file into OUT.
    #[arg(long, value_name = "OUT")]
    pub nfd: Option<PathBuf>,
    /// The features' label namespace (default: the BOM's default).
    #[arg(long, value_name = "NS", requires = "nfd")]
    pub namespace: Option<String>,
}

fn cut(s: &str, max: usize) -> String {
    let s = printable(s);
    if s.chars().count() <= max {
        return s;
    }
    let mut t: String = s.chars().take(max.saturating_sub(3)).collect();
    t.push_str("...");
    t
}

fn or_dash(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_string(), printable)
}

/// Reads a report file.
pub fn load(path: &Path) -> Result<Report, Usage> {
    let bytes = validator::util::fs::read_limited(path, REPORT_MAX)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| Usage(format!("{}: not UTF-8 ({e})", path.display())))?;
    let mut r = validator::report::json::parse(text)
        .map_err(|e| Usage(format!("{}: not a report: {e}", path.display())))?;
    let known = [
        validator::report::SCHEMA,
        validator::report::schema::SCHEMA_V1,
    ];
    if !known.contains(&r.schema.as_str()) {
        return Err(Usage(format!(
            "{}: schema {:?} is not one this validator reads ({}); refused rather than rendered as one it knows",
            path.display(),
            r.schema,
            known.join(", ")
        )));
    }
    if r.checks.is_empty() {
        r.checks = checks::derive(&r);
    }
    Ok(r)
}

/// The report as text for a person: every check in a table ([`render_brief`] sums them
/// up per stage).
pub fn render(r: &Report) -> String {
    render_as(r, false)
}

/// The report as text for a person, short: the header, one line per stage with its
/// time and its checks counted, the checks that warned or failed, the slowest modules in
/// one line and the warnings.
pub fn render_brief(r: &Report) -> String {
    render_as(r, true)
}

fn render_as(r: &Report, brief: bool) -> String {
    let mut o = String::new();
    let mut line = |s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    line(format!(
        "decision  {}{}",
        r.decision.as_str().to_uppercase(),
        r.fault
            .map(|f| format!(" ({} fault)", f.as_str()))
            .unwrap_or_default()
    ));
    if let Some(why) = &r.reason {
        line(format!("reason    {}", printable(why)));
    }
    line(format!(
        "image     {}  bom sha256:{}  kernel {}",
        or_dash(r.image_id.as_deref()),
        or_dash(r.bom_sha256.as_deref()),
        or_dash(r.kernel_release.as_deref())
    ));
    if let Some(s) = &r.slot {
        let mut t = format!(
            "slot      {} (attempt {}, {} failed boot(s) before)",
            s.booted.map_or("-", |b| b.as_str()),
            s.attempts,
            s.consecutive_failures
        );
        if let Some(p) = &s.previous {
            t.push_str(&format!(
                "; fell back from {} by {} ({} fault): {}",
                printable(&p.slot),
                printable(&p.via),
                or_dash(p.fault.as_deref()),
                or_dash(p.reason.as_deref())
            ));
        }
        line(t);
        if let Some(e) = &s.error {
            line(format!("          slot handling: {}", printable(e)));
        }
    }
    let n = &r.node;
    line(format!(
        "node      {}  serial {}  board {}  boot {}",
        or_dash(n.product_name.as_deref()),
        or_dash(n.product_serial.as_deref()),
        or_dash(n.board_serial.as_deref()),
        or_dash(n.boot_id.as_deref())
    ));
    if let Some(p) = &r.pool {
        line(format!("pool      {}", printable(p)));
    }
    line(format!(
        "report    {} by validator {}; init at {:.3} s, report at {:.3} s{}",
        printable(&r.schema),
        printable(&r.validator_version),
        as_f64(r.boottime_start_us) / 1e6,
        as_f64(r.boottime_report_us) / 1e6,
        r.peak_rss_bytes
            .map(|b| format!("; peak memory {:.1} MiB", as_f64(b) / 1048576.0))
            .unwrap_or_default()
    ));
    if let Some(g) = &r.gpus {
        let f = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        line(format!(
            "gpus      bom {}  pci {}  driver {}",
            f(g.bom),
            f(g.pci),
            f(g.driver)
        ));
    }
    if let Some(a) = &r.attestation {
        line(match &a.quote {
            Some(q) => format!(
                "attest    quote by the {} AK {} over {}; {} TPM command(s), {}",
                printable(&q.ak),
                cut(&q.ak_name, 20),
                printable(&q.pcrs),
                a.commands,
                human_us(a.time_us)
            ),
            None => format!("attest    no quote: {}", or_dash(a.failure.as_deref())),
        });
    }
    line(String::new());
    if brief {
        brief_checks(r, &mut line);
    } else {
        full_checks(r, &mut line);
    }
    if !r.warnings.is_empty() {
        line(String::new());
        line("warnings".into());
        for w in &r.warnings {
            line(format!("  - {}", printable(w)));
        }
    }
    o
}

/// The checks counted by status in `checks` of stage `stage` (`3 pass, 1 skip`).
fn counted(checks: &[&validator::report::Check]) -> String {
    let all = [
        CheckStatus::Pass,
        CheckStatus::Warn,
        CheckStatus::Fail,
        CheckStatus::Skip,
    ];
    let parts: Vec<String> = all
        .iter()
        .filter_map(|s| {
            let n = checks.iter().filter(|c| c.status == *s).count();
            (n > 0).then(|| format!("{n} {}", s.as_str()))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// A stage's row of the timings table: name, status, start, time.
fn stage_row(s: &validator::report::StageReport) -> String {
    format!(
        "  {:<9} {:<7} {:>10} {:>10}",
        s.name.name(),
        s.status.as_str(),
        if s.start_us > 0 {
            format!("{:.3} s", as_f64(s.start_us) / 1e6)
        } else {
            "-".into()
        },
        human_us(s.duration_us)
    )
}

fn brief_checks(r: &Report, line: &mut impl FnMut(String)) {
    let all: Vec<_> = r.checks.iter().collect();
    line(format!(
        "stages    init {} from start to report; checks {}",
        human_us(r.boottime_report_us.saturating_sub(r.boottime_start_us)),
        counted(&all)
    ));
    line(format!(
        "  {:<9} {:<7} {:>10} {:>10}  CHECKS",
        "STAGE", "STATUS", "START", "TIME"
    ));
    for s in &r.stages {
        let of: Vec<_> = r.checks.iter().filter(|c| c.stage == s.name).collect();
        line(format!("{}  {}", stage_row(s), counted(&of)));
    }
    let mut slow: Vec<_> = r.modules.iter().filter(|m| m.duration_us > 0).collect();
    slow.sort_by_key(|m| std::cmp::Reverse(m.duration_us));
    if !slow.is_empty() {
        let top: Vec<String> = slow
            .iter()
            .take(3)
            .map(|m| format!("{} {}", cut(&m.name, 24), human_us(m.duration_us)))
            .collect();
        line(format!(
            "  slowest modules (gate + load): {}",
            top.join(", ")
        ));
    }
    let bad: Vec<_> = r
        .checks
        .iter()
        .filter(|c| matches!(c.status, CheckStatus::Warn | CheckStatus::Fail))
        .collect();
    if !bad.is_empty() {
        line(String::new());
        line("checks that warned or failed".into());
        for c in bad {
            line(format!(
                "  {:<4} {:<9} {}: {}",
                c.status.as_str(),
                c.fault.map_or("-", |f| f.as_str()),
                cut(&c.name, 40),
                cut(c.detail.as_deref().unwrap_or(""), 90)
            ));
        }
    }
}

fn full_checks(r: &Report, line: &mut impl FnMut(String)) {
    let count = |s| r.checks.iter().filter(|c| c.status == s).count();
    line(format!(
        "checks    {} pass, {} warn, {} fail, {} skip",
        count(CheckStatus::Pass),
        count(CheckStatus::Warn),
        count(CheckStatus::Fail),
        count(CheckStatus::Skip)
    ));
    let w = r
        .checks
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(5)
        .clamp(5, 40);
    line(format!(
        "  {:<6} {:<9} {:<9} {:<w$} {:>9}  DETAIL",
        "STATUS", "FAULT", "STAGE", "CHECK", "TIME"
    ));
    for c in &r.checks {
        line(format!(
            "  {:<6} {:<9} {:<9} {:<w$} {:>9}  {}",
            c.status.as_str(),
            c.fault.map_or("-", |f| f.as_str()),
            c.stage.name(),
            cut(&c.name, w),
            c.duration_us.map(human_us).unwrap_or_default(),
            cut(c.detail.as_deref().unwrap_or(""), 90)
        ));
    }
    line(String::new());
    line(format!(
        "timings   init {} from start to report",
        human_us(r.boottime_report_us.saturating_sub(r.boottime_start_us))
    ));
    line(format!(
        "  {:<9} {:<7} {:>10} {:>10}",
        "STAGE", "STATUS", "START", "TIME"
    ));
    for s in &r.stages {
        line(stage_row(s));
    }
    let mut slow: Vec<_> = r.modules.iter().filter(|m| m.duration_us > 0).collect();
    slow.sort_by_key(|m| std::cmp::Reverse(m.duration_us));
    if !slow.is_empty() {
        line("  slowest modules (gate + load):".into());
        for m in slow.iter().take(5) {
            line(format!(
                "    {:<24} {:>10} (gate {})",
                cut(&m.name, 24),
                human_us(m.duration_us),
                human_us(m.gate_us)
            ));
        }
    }
}

/// The subcommand.
pub fn run(a: ReportArgs, out: &mut Out) -> Res {
    let mut r = load(&a.file)?;
    if a.previous {
        r = r.previous_report().ok_or_else(|| {
            Usage(format!(
                "{}: no previous boot's report in it (slot.previous.report)",
                a.file.display()
            ))
        })?;
        if r.checks.is_empty() {
            r.checks = checks::derive(&r);
        }
    }
    // Every argument is judged and every rendering made before anything is written; the
    // files are then written all or none.
    let mut files: Vec<(&Path, String)> = Vec::new();
    if let Some(p) = &a.svg {
        files.push((p, timeline::svg(&r)));
    }
    if let Some(p) = &a.prometheus {
        files.push((p, prometheus::render(&r)));
    }
    if let Some(p) = &a.nfd {
        let ns = a
            .namespace
            .clone()
            .unwrap_or_else(|| validator::config::bom::ReportCfg::default().nfd_namespace);
        if !validator::formats::nfd::valid_namespace(&ns) {
            return Err(Usage(format!(
                "--namespace {ns:?} is not a label namespace NFD publishes (nothing was written)"
            )));
        }
        files.push((p, nfd::render(&r, &ns)));
    }
    let set: Vec<(&Path, &[u8])> = files.iter().map(|(p, t)| (*p, t.as_bytes())).collect();
    crate::files::write_set(&set)?;
    for (p, _) in &files {
        out.line(&format!("wrote {}", p.display()))?;
    }
    let wrote = !files.is_empty();
    if a.brief {
        out.bytes(render_brief(&r).as_bytes())?;
    } else if !wrote {
        out.bytes(render(&r).as_bytes())?;
    }
    Ok(r.decision == validator::report::Decision::Pass)
}

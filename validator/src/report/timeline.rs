//! The boot as a timeline (`validator report FILE --svg OUT`), in the manner of
//! `systemd-analyze plot`: one time axis from the init's start to its report, one row per
//! stage, then one row per module with its gate time and its load time as two segments
//! of one bar, each row labelled with its name and times.
//!
//! Contract: hand-written SVG 1.1 (a few rectangles, lines and texts: no drawing crate is
//! worth its weight for that), every text XML-escaped and made printable; every stage and
//! every module of the report has a `<text>` naming it. A report without start times (v1)
//! has its stages laid end to end from the init's start and its modules at the start of
//! the `modules` stage. `rsvg-convert` renders it (a test checks a real boot's).

use std::fmt::Write as _;

use super::schema::{Report, StageStatus};
use crate::runtime::modload::ModStatus;
use crate::stages::Stage;

/// Makes untrusted text printable on one line: control characters and bidirectional
/// formatting characters ([`crate::util::is_terminal_control`]) become `?`.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if crate::util::is_terminal_control(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// A duration in µs for a person.
#[expect(
    clippy::cast_precision_loss,
    reason = "display only: a duration printed to two decimals"
)]
pub fn human_us(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.1} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

const WIDTH: f64 = 1400.0;
const LEFT: f64 = 250.0;
const RIGHT: f64 = 30.0;
const ROW: f64 = 20.0;
const TOP: f64 = 90.0;

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in printable(s).chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// A step of 1, 2 or 5 × 10^k µs giving about 10 grid lines over `span` µs.
fn grid_step(span: u64) -> u64 {
    let target = (span / 10).max(1);
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if p.saturating_mul(m) >= target {
                return p.saturating_mul(m);
            }
        }
        p = p.saturating_mul(10);
    }
}

struct Bar {
    label: String,
    start: u64,
    /// (length µs, CSS class) segments, left to right.
    segments: Vec<(u64, &'static str)>,
    note: String,
}

fn rows(r: &Report) -> Vec<Bar> {
    let mut bars = Vec::new();
    let mut t = r.boottime_start_us;
    let mut modules_start = t;
    for s in &r.stages {
        let start = if s.start_us > 0 { s.start_us } else { t };
        t = start.saturating_add(s.duration_us);
        if s.name == Stage::Modules {
            modules_start = start;
        }
        let class = match s.status {
            StageStatus::Ok => "ok",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
        };
        bars.push(Bar {
            label: format!("stage {}", s.name.name()),
            start,
            segments: vec![(s.duration_us, class)],
            note: format!("{} {}", s.status.as_str(), human_us(s.duration_us)),
        });
    }
    for m in &r.modules {
        let start = if m.start_us > 0 {
            m.start_us
        } else {
            modules_start
        };
        let bad = matches!(m.status, ModStatus::Failed | ModStatus::Rejected);
        let load = m.duration_us.saturating_sub(m.gate_us);
        let mut segments = Vec::new();
        if m.gate_us > 0 {
            segments.push((m.gate_us, if bad { "failed" } else { "gate" }));
        }
        segments.push((load, if bad { "failed" } else { "load" }));
        let status = serde_json::to_value(m.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        bars.push(Bar {
            label: m.name.clone(),
            start,
            segments,
            note: if m.duration_us > 0 {
                format!(
                    "{status}: gate {} + load {}",
                    human_us(m.gate_us),
                    human_us(load)
                )
            } else {
                status
            },
        });
    }
    bars
}

/// The timeline of `r` as an SVG document.
#[expect(
    clippy::cast_precision_loss,
    reason = "display only: SVG coordinates and seconds printed rounded"
)]
pub fn svg(r: &Report) -> String {
    let bars = rows(r);
    let t0 = bars
        .iter()
        .map(|b| b.start)
        .chain([r.boottime_start_us])
        .min()
        .unwrap_or(0);
    let t1 = bars
        .iter()
        .map(|b| b.start + b.segments.iter().map(|s| s.0).sum::<u64>())
        .chain([r.boottime_report_us, t0 + 1])
        .max()
        .unwrap_or(t0 + 1);
    let span = t1 - t0;
    let scale = (WIDTH - LEFT - RIGHT) / span as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(t0)) as f64 * scale;
    let height = TOP + ROW * bars.len() as f64 + 40.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, sans-serif" font-size="11">
<style>
  .ok {{ fill: #4c9a2a; }} .failed {{ fill: #d62728; }} .skipped {{ fill: #aaaaaa; }}
  .gate {{ fill: #f0a030; }} .load {{ fill: #3b7dd8; }}
  .grid {{ stroke: #dddddd; stroke-width: 1; }} .label {{ fill: #222222; }} .note {{ fill: #555555; font-size: 10px; }} .inside {{ fill: #ffffff; font-size: 10px; }}
</style>
<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{} {} on {} (slot {}): {}{}</text>"#,
        esc(r.image_id.as_deref().unwrap_or("-")),
        esc(r.kernel_release.as_deref().unwrap_or("-")),
        esc(r.node.product_name.as_deref().unwrap_or("unknown node")),
        esc(r.booted_slot().unwrap_or("-")),
        esc(r.decision.as_str()),
        r.fault
            .map(|f| format!(" ({} fault)", f.as_str()))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="40" class="note">init started {:.3} s after the kernel, report at {:.3} s; time axis from {:.3} s. Stages: green ok, red failed. Modules: orange gate, blue load, red refused.</text>"#,
        r.boottime_start_us as f64 / 1e6,
        r.boottime_report_us as f64 / 1e6,
        t0 as f64 / 1e6
    );
    let step = grid_step(span);
    let mut g = 0u64;
    while g <= span {
        let gx = x(t0 + g);
        let _ = writeln!(
            s,
            r#"<line class="grid" x1="{gx:.1}" y1="{}" x2="{gx:.1}" y2="{:.1}"/><text x="{gx:.1}" y="{}" text-anchor="middle" class="note">+{}</text>"#,
            TOP - 14.0,
            height - 30.0,
            TOP - 18.0,
            human_us(g)
        );
        g = g.saturating_add(step);
        if step == 0 {
            break;
        }
    }
    for (i, b) in bars.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="label">{}</text>"#,
            LEFT - 8.0,
            y + 12.0,
            esc(&b.label)
        );
        let mut cx = x(b.start);
        for (len, class) in &b.segments {
            let w = (*len as f64 * scale).max(1.0);
            let _ = writeln!(
                s,
                r#"<rect class="{class}" x="{cx:.1}" y="{:.1}" width="{w:.1}" height="{:.1}"/>"#,
                y + 3.0,
                ROW - 6.0
            );
            cx += w;
        }
        // The note goes right of the bar, else inside a long bar, else left of it.
        let text_w = 6.0 * b.note.chars().count() as f64;
        let bx = x(b.start);
        let (nx, anchor, class) = if cx + 4.0 + text_w < WIDTH {
            (cx + 4.0, "start", "note")
        } else if cx - bx > text_w + 8.0 {
            (cx - 4.0, "end", "inside")
        } else {
            (bx - 4.0, "end", "note")
        };
        let _ = writeln!(
            s,
            r#"<text x="{nx:.1}" y="{:.1}" text-anchor="{anchor}" class="{class}">{}</text>"#,
            y + 12.0,
            esc(&b.note)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_steps_and_escaping() {
        assert_eq!(grid_step(1000), 100);
        assert_eq!(grid_step(1_300_000), 200_000);
        assert_eq!(grid_step(0), 1);
        assert_eq!(esc("a<b & \"c\"\x1b"), "a&lt;b &amp; &quot;c&quot;?");
    }

    /// A v1-style report (no start times): stages end to end, hostile names escaped.
    #[test]
    fn reports_without_start_times_still_draw() {
        let mut r = Report::new(1_000_000);
        r.boottime_report_us = 1_050_000;
        r.image_id = Some("<img>".into());
        r.stages.push(super::super::schema::StageReport {
            name: Stage::Start,
            status: StageStatus::Ok,
            start_us: 0,
            duration_us: 10_000,
            fault: None,
            detail: None,
        });
        let svg = svg(&r);
        assert!(svg.contains(">stage start</text>"), "{svg}");
        assert!(svg.contains("&lt;img&gt;") && !svg.contains("<img>"));
        assert!(svg.ends_with("</svg>\n"));
    }
}

//! The console line: what a serial-over-LAN capture of the boot needs, in one short line.
//!
//! ```text
//! VALIDATOR: decision=stop fault=image image=qemu-node-2026.11.30 slot=A sha256=<64 hex> reason="modules: module gate refused: virtio_blk (...)"
//! ```
//!
//! Contract: the line starts with [`PREFIX`], is at most [`LINE_MAX`] bytes with its
//! newline, and holds `key=value` fields in this order: `decision`, `fault` (`none` on a
//! pass), `image`, `slot` (`-` when unknown), `sha256` (of `/run/validator/report.json`,
//! so a captured line names exactly one report), `reason` (last; `-` on a pass). A value
//! made only of letters, digits and `._:+~/-` is written bare; any other is quoted, with
//! `"` and `\` escaped and control characters as `\n`, `\r`, `\t` or `\xNN`. A reason too
//! long for the line is cut at a character boundary and ends in `...`. [`parse_line`] and
//! [`find`] read the line back.
//!
//! The full report goes to `/run/validator/report.json`, never to the console, except in
//! the test bed's init (cargo feature `test-hooks`), which also prints it after
//! [`FULL_PREFIX`] so stopped boots can be checked in full.

use super::schema::Report;

/// Prefix of the console line.
pub const PREFIX: &str = "VALIDATOR: ";
/// Longest console line, newline included.
pub const LINE_MAX: usize = 1024;
/// Prefix of the full JSON report on the console, printed only by an init built with the
/// `test-hooks` feature.
pub const FULL_PREFIX: &str = "VALIDATOR-REPORT-JSON ";

/// The console line's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub decision: String,
    pub fault: String,
    pub image: String,
    pub slot: String,
    pub sha256: String,
    pub reason: String,
}

fn bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._:+~/-".contains(c)
}

fn escape_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c.is_control() => {
            for b in c.to_string().bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        }
        c => out.push(c),
    }
}

/// `value` as the line writes it, at most `max` bytes (cut with `...` if longer).
fn encode(value: &str, max: usize) -> String {
    if !value.is_empty() && value.len() <= max && value.chars().all(bare) {
        return value.to_string();
    }
    let mut whole = String::from("\"");
    for c in value.chars() {
        escape_char(c, &mut whole);
    }
    whole.push('"');
    if whole.len() <= max {
        return whole;
    }
    let mut out = String::from("\"");
    let mut piece = String::new();
    for c in value.chars() {
        piece.clear();
        escape_char(c, &mut piece);
        // Room for this piece, then `..."`.
        if out.len() + piece.len() + 4 > max {
            break;
        }
        out.push_str(&piece);
    }
    out.push_str("...\"");
    out
}

/// The console line for `r`, whose file digest is `sha256`, with its newline.
pub fn line(r: &Report, sha256: &str) -> String {
    let fault = r.fault.map_or("none", |f| f.as_str());
    let mut s = format!(
        "{PREFIX}decision={} fault={fault} image={} slot={} sha256={}",
        r.decision.as_str(),
        encode(r.image_id.as_deref().unwrap_or("-"), 200),
        encode(r.booted_slot().unwrap_or("-"), 8),
        encode(sha256, 64),
    );
    let room = LINE_MAX.saturating_sub(s.len() + " reason=".len() + 1);
    s.push_str(" reason=");
    s.push_str(&encode(r.reason.as_deref().unwrap_or("-"), room));
    s.push('\n');
    s
}

/// Reads one `value` at the start of `s`; returns it and the rest.
fn decode(s: &str) -> Option<(String, &str)> {
    let Some(body) = s.strip_prefix('"') else {
        let end = s.find(' ').unwrap_or(s.len());
        return Some((s.get(..end)?.to_string(), s.get(end..)?));
    };
    let mut out = String::new();
    let mut bytes = Vec::new();
    let mut it = body.char_indices();
    while let Some((i, c)) = it.next() {
        match c {
            '"' => {
                if !bytes.is_empty() {
                    out.push_str(&String::from_utf8_lossy(&bytes));
                }
                return Some((out, body.get(i + 1..)?));
            }
            '\\' => {
                let (_, e) = it.next()?;
                if e == 'x' {
                    let h: String = [it.next()?.1, it.next()?.1].iter().collect();
                    bytes.push(u8::from_str_radix(&h, 16).ok()?);
                    continue;
                }
                if !bytes.is_empty() {
                    out.push_str(&String::from_utf8_lossy(&bytes));
                    bytes.clear();
                }
                out.push(match e {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    other => other,
                });
            }
            c => {
                if !bytes.is_empty() {
                    out.push_str(&String::from_utf8_lossy(&bytes));
                    bytes.clear();
                }
                out.push(c);
            }
        }
    }
    None
}

/// Parses a console line (from [`PREFIX`] on; anything before it, such as a kernel
/// timestamp, is skipped).
pub fn parse_line(text: &str) -> Option<Line> {
    let at = text.find(PREFIX)?;
    let mut rest = text
        .get(at + PREFIX.len()..)?
        .trim_end_matches(['\r', '\n']);
    let mut fields = std::collections::BTreeMap::new();
    while !rest.is_empty() {
        rest = rest.trim_start_matches(' ');
        let (key, after) = rest.split_once('=')?;
        let (value, next) = decode(after)?;
        fields.insert(key.to_string(), value);
        rest = next;
    }
    let mut take = |k: &str| fields.remove(k);
    Some(Line {
        decision: take("decision")?,
        fault: take("fault")?,
        image: take("image")?,
        slot: take("slot")?,
        sha256: take("sha256")?,
        reason: take("reason")?,
    })
}

/// The last console line in captured console output.
pub fn find(console: &str) -> Option<Line> {
    console.lines().rev().find_map(parse_line)
}

/// The full report line of the test bed's init (`test-hooks`), with its newline.
pub fn full_line(json: &str) -> String {
    format!("{FULL_PREFIX}{json}\n")
}

/// The last full report in captured console output of a `test-hooks` init, as JSON text.
pub fn find_full(console: &str) -> Option<&str> {
    console.lines().rev().find_map(|l| {
        let at = l.find(FULL_PREFIX)?;
        l.get(at + FULL_PREFIX.len()..)
            .map(|j| j.trim_end_matches('\r'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Fault;

    const SHA: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn a_pass_line_reads_back() {
        let mut r = Report::new(1);
        r.image_id = Some("qemu-node-2026.11.30".into());
        let l = line(&r, SHA);
        assert_eq!(
            l,
            format!(
                "VALIDATOR: decision=pass fault=none image=qemu-node-2026.11.30 slot=- \
                 sha256={SHA} reason=-\n"
            )
        );
        let p = parse_line(&format!("[    2.5] {l}")).unwrap();
        assert_eq!(
            (p.decision.as_str(), p.fault.as_str(), p.image.as_str()),
            ("pass", "none", "qemu-node-2026.11.30")
        );
        assert_eq!((p.slot.as_str(), p.sha256.as_str()), ("-", SHA));
        assert_eq!(p.reason, "-");
    }

    /// A reason naming 40 modules, with quotes, newlines, control bytes and non-ASCII
    /// text, keeps the line under 1 KiB, cut at a character and readable back.
    #[test]
    fn long_hostile_reasons_stay_in_one_short_line() {
        let mut r = Report::new(1);
        r.image_id = Some("hgx-h200-2026.12.01+nv535".into());
        let names: Vec<String> = (0..40)
            .map(|i| format!("nvidia_module_number_{i} (signature does not verify: \"é\")"))
            .collect();
        r.fail(
            Fault::Image,
            format!(
                "modules: module gate refused: {}\nsecond line\x07\\",
                names.join(", ")
            ),
        );
        let l = line(&r, SHA);
        assert!(l.len() <= LINE_MAX, "{} bytes", l.len());
        assert!(l.len() > 900, "the room is used: {} bytes", l.len());
        assert_eq!(l.matches('\n').count(), 1);
        assert!(l.ends_with("...\"\n"), "{l}");
        let p = parse_line(&l).unwrap();
        assert_eq!(p.fault, "image");
        assert!(p.reason.starts_with("modules: module gate refused: nvidia_module_number_0 (signature does not verify: \"é\")"), "{}", p.reason);
        assert!(p.reason.ends_with("..."));
        // Short hostile reasons are kept whole, escaped and read back exactly.
        let mut r = Report::new(1);
        let why = "start: /x\"y\\z\n\t\x01 ünï";
        r.fail(Fault::Platform, why.into());
        let l = line(&r, SHA);
        assert!(!l.trim_end().contains('\n') && !l.contains('\x01'), "{l:?}");
        assert_eq!(parse_line(&l).unwrap().reason, why);
    }

    #[test]
    fn finding_lines_in_console_text() {
        let mut r = Report::new(1);
        r.fail(Fault::Hardware, "storage: no root".into());
        let console = format!(
            "[ 1.0] noise\r\n{}\r\n[ 2.0] {}\r\n[ 3.0] more\n",
            full_line("{\"schema\":\"x\"}").trim_end(),
            line(&r, SHA).trim_end()
        );
        let l = find(&console).unwrap();
        assert_eq!(
            (l.decision.as_str(), l.reason.as_str()),
            ("stop", "storage: no root")
        );
        assert_eq!(find_full(&console), Some("{\"schema\":\"x\"}"));
        assert!(find("nothing").is_none() && find_full("nothing").is_none());
        // Not a line: fields missing or an unterminated quote.
        assert!(parse_line("VALIDATOR: decision=pass").is_none());
        assert!(parse_line(&format!(
            "VALIDATOR: decision=pass fault=none image=x slot=A sha256={SHA} reason=\"open"
        ))
        .is_none());
    }
}

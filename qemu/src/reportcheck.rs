//! The reports a boot left on the console, read and checked.
//!
//! A boot shows its report in up to three places: the short console line every init
//! prints (`VALIDATOR: `, [`validator::report::console`]), the full JSON the test bed's
//! init (feature `test-hooks`) prints after `VALIDATOR-REPORT-JSON `, and the JSON the
//! root's init found in `/run/validator/report.json` (`ROOT-REPORT `). [`read`] finds
//! them and checks, for every boot of every test: each JSON report validates against the
//! committed JSON Schema (`docs/report.schema.json`); the console line is at most 1 KiB;
//! its `sha256` is the digest of the report file (the full JSON and a newline) and its
//! decision, fault and image are the report's. A violation panics with what is wrong:
//! the test bed exists to catch it.

use std::path::PathBuf;
use std::sync::OnceLock;

use validator::report::console::{self, Line};
use validator::report::Report;

use crate::rootfs::ROOT_REPORT;

/// The committed JSON Schema of the report.
pub fn schema_path() -> PathBuf {
    crate::paths::workspace().join("docs/report.schema.json")
}

fn validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let p = schema_path();
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let schema: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{}: not a usable schema: {e}", p.display()))
    })
}

/// Validates report JSON against the committed schema; the errors, one per line.
pub fn validate(json: &serde_json::Value) -> Result<(), String> {
    let errs: Vec<String> = validator()
        .iter_errors(json)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("\n"))
    }
}

/// Parses report JSON text, valid against the schema, into the typed report; panics
/// naming `what` when it is not.
pub fn checked(what: &str, text: &str) -> Report {
    let v: serde_json::Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text:.200}"));
    if let Err(e) = validate(&v) {
        panic!("{what} does not validate against docs/report.schema.json:\n{e}");
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{what}: not a report: {e}"))
}

/// What a boot's console says about its report.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub line: Option<Line>,
    /// The full report (test-hooks init).
    pub report: Option<Report>,
    /// The report from `/run`, as the root's init printed it.
    pub root_report: Option<Report>,
    /// The full report's JSON text, as printed.
    pub json: Option<String>,
}

/// The full report's JSON as the console shows it. The kernel prints its messages on the
/// console directly, so one may land inside the report line while the terminal still sends
/// it: a `[ seconds.micros] message` record and its line end. Such records are cut out
/// and the line joined with the next one until the text parses, a few times at most.
fn full_json(console_text: &str) -> Option<String> {
    rejoined(console_text, console::FULL_PREFIX)
}

/// The JSON after `prefix` on the last console line that holds it, with kernel records
/// printed inside it cut out (see [`full_json`]).
fn rejoined(console_text: &str, prefix: &str) -> Option<String> {
    let lines: Vec<&str> = console_text.lines().collect();
    let at = lines.iter().rposition(|l| l.contains(prefix))?;
    let line = lines.get(at)?;
    let from = line.find(prefix)? + prefix.len();
    let mut json = line.get(from..)?.trim_end_matches('\r').to_string();
    for next in lines.iter().skip(at + 1).take(8) {
        if serde_json::from_str::<serde_json::Value>(&json).is_ok() {
            break;
        }
        match kernel_record_start(&json) {
            Some(cut) => json.truncate(cut),
            None => break,
        }
        json.push_str(next.trim_end_matches('\r'));
    }
    Some(json)
}

/// Where the last kernel log record (`[` spaces, seconds `.` six digits `] `) in `s`
/// begins.
fn kernel_record_start(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    (0..b.len()).rev().find(|&i| {
        let Some(rest) = b.get(i..) else { return false };
        let Some(close) = rest.iter().position(|&c| c == b']') else {
            return false;
        };
        let inner = rest.get(1..close).unwrap_or_default();
        let t = std::str::from_utf8(inner).unwrap_or("").trim_start();
        rest.first() == Some(&b'[')
            && rest.get(close + 1) == Some(&b' ')
            && t.split_once('.').is_some_and(|(sec, us)| {
                !sec.is_empty()
                    && sec.bytes().all(|c| c.is_ascii_digit())
                    && us.len() == 6
                    && us.bytes().all(|c| c.is_ascii_digit())
            })
    })
}

/// Finds and checks the reports in console output (see the module's documentation).
/// Only complete lines count: a run cut short (a power cut the test made) may end in the
/// middle of one.
pub fn read(console_text: &str) -> Found {
    let console_text = match console_text.rfind('\n') {
        Some(i) => console_text.get(..=i).unwrap_or_default(),
        None => "",
    };
    let raw_line = console_text
        .lines()
        .rev()
        .find(|l| l.contains(console::PREFIX));
    let line = raw_line.and_then(console::parse_line);
    if let Some(raw) = raw_line {
        let from = raw.find(console::PREFIX).unwrap_or(0);
        let len = raw[from..].trim_end_matches('\r').len() + 1;
        assert!(
            len <= console::LINE_MAX,
            "console line of {len} bytes: {raw}"
        );
        assert!(line.is_some(), "unreadable console line: {raw}");
    }
    let json = full_json(console_text);
    let report = json
        .as_deref()
        .map(|j| checked("the console's full report", j));
    let root_json = rejoined(console_text, ROOT_REPORT).filter(|j| !j.is_empty());
    let root_report = root_json
        .as_deref()
        .map(|j| checked("the report in /run", j));
    if let (Some(l), Some(j)) = (&line, json.as_deref().or(root_json.as_deref())) {
        let digest = validator::report::json::digest(format!("{j}\n").as_bytes());
        assert_eq!(l.sha256, digest, "console line digest vs the report file");
        let r = report.as_ref().or(root_report.as_ref());
        if let Some(r) = r {
            assert_eq!(l.decision, r.decision.as_str(), "console line vs report");
            assert_eq!(
                l.fault,
                r.fault.map_or("none", |f| f.as_str()),
                "console line vs report"
            );
            assert_eq!(
                l.image,
                r.image_id.as_deref().unwrap_or("-"),
                "console line vs report"
            );
        }
    }
    Found {
        line,
        report,
        root_report,
        json,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel message printed inside the report line is cut out again.
    #[test]
    fn a_kernel_message_inside_the_report_line_is_cut_out() {
        let text = "[    1.000000] x\r\nVALIDATOR-REPORT-JSON {\"a\":\"b[    2.5] c\",\"d\"\
                    [    5.123456] random: crng init done\r\n:[1,2]}\r\nnext\r\n";
        assert_eq!(
            full_json(text).as_deref(),
            Some("{\"a\":\"b[    2.5] c\",\"d\":[1,2]}")
        );
        let whole = "VALIDATOR-REPORT-JSON {\"a\":1}\n[    5.123456] later\n";
        assert_eq!(full_json(whole).as_deref(), Some("{\"a\":1}"));
        // Not repairable: given back as printed, for the check to name.
        let cut = "VALIDATOR-REPORT-JSON {\"a\":\n";
        assert_eq!(full_json(cut).as_deref(), Some("{\"a\":"));
    }

    /// A report the types make validates; one with a wrong type or a missing field does
    /// not, with the place named.
    #[test]
    fn schema_accepts_reports_and_names_what_is_wrong() {
        let r = Report::new(1);
        let mut v = serde_json::to_value(&r).unwrap();
        validate(&v).unwrap();
        v["decision"] = "maybe".into();
        v["boottime_start_us"] = "soon".into();
        let e = validate(&v).unwrap_err();
        assert!(
            e.contains("/decision") && e.contains("/boottime_start_us"),
            "{e}"
        );
        let mut v = serde_json::to_value(&r).unwrap();
        v.as_object_mut().unwrap().remove("stages");
        assert!(validate(&v).unwrap_err().contains("stages"));
    }

    #[test]
    fn console_line_and_full_report_agree() {
        let mut r = Report::new(1);
        r.image_id = Some("img".into());
        r.fail(validator::report::Fault::Image, "modules: x".into());
        let bytes = validator::report::json::file_bytes(&r);
        let json = String::from_utf8(bytes.clone()).unwrap();
        let text = format!(
            "{}{}",
            console::full_line(json.trim_end()),
            console::line(&r, &validator::report::json::digest(&bytes))
        );
        let f = read(&text);
        assert_eq!(f.report.as_ref(), Some(&r));
        assert_eq!(f.line.unwrap().decision, "stop");
        let wrong = format!(
            "{}{}",
            console::full_line(json.trim_end()),
            console::line(&r, &"0".repeat(64))
        );
        assert!(std::panic::catch_unwind(|| read(&wrong)).is_err());
    }
}

/// The samples of a Prometheus text exposition as `name{labels sorted} value`, the value
/// as a number (so a file and a scrape of it compare equal: node_exporter sorts labels and
/// prints numbers its own way). Comments and blank lines are left out; a line that does
/// not parse is kept whole, so it never compares equal by accident.
pub fn prometheus_samples(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| normalize_sample(l).unwrap_or_else(|| format!("unparsed: {l}")))
        .collect()
}

fn normalize_sample(line: &str) -> Option<String> {
    let (head, value) = line.trim_end().rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        None => (head, Vec::new()),
        Some((name, rest)) => {
            let body = rest.strip_suffix('}')?;
            let mut labels = Vec::new();
            let mut chars = body.chars().peekable();
            loop {
                let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                if key.is_empty() {
                    break;
                }
                if chars.next() != Some('"') {
                    return None;
                }
                let mut val = String::new();
                loop {
                    match chars.next()? {
                        '\\' => {
                            val.push('\\');
                            val.push(chars.next()?);
                        }
                        '"' => break,
                        c => val.push(c),
                    }
                }
                labels.push(format!("{}=\"{val}\"", key.trim_start_matches(',')));
                if chars.peek() == Some(&',') {
                    chars.next();
                }
            }
            labels.sort();
            (name, labels)
        }
    };
    Some(format!("{name}{{{}}} {value}", labels.join(",")))
}

#[cfg(test)]
mod prometheus_tests {
    /// Label order and number spelling do not matter; names, labels and values do.
    #[test]
    fn samples_compare_as_values() {
        let a = super::prometheus_samples("# HELP x y\nm{b=\"2\",a=\"1,\\\"q\"} 1\nn 0.50\n");
        let b = super::prometheus_samples("m{a=\"1,\\\"q\",b=\"2\"} 1e0\nn 0.5\n");
        assert_eq!(a, b);
        let c = super::prometheus_samples("m{a=\"1,\\\"q\",b=\"3\"} 1\nn 0.5\n");
        assert_ne!(a, c);
        assert!(super::prometheus_samples("m{a=1} 2\n")
            .iter()
            .all(|s| s.starts_with("unparsed")));
    }
}

/// The command line the kernel says it was given (its `Kernel command line:` line) in a
/// boot's console.
pub fn kernel_cmdline(console: &str) -> Option<&str> {
    console
        .lines()
        .find_map(|l| l.split_once("Kernel command line: ").map(|x| x.1.trim()))
}

/// The report's `boot_image` when systemd-stub 252 started the kernel and measured the
/// image's sections into PCR 11: what a boot through a slot's Unified Kernel Image
/// reports.
pub fn stub_booted(r: &validator::report::Report) -> Option<&validator::runtime::uki::BootImage> {
    r.boot_image.as_ref().filter(|b| {
        b.stub
            .as_deref()
            .is_some_and(|s| s.starts_with("systemd-stub 252"))
            && b.kernel_image_pcr == Some(11)
    })
}

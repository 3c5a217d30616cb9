//! What the node reads and writes: sysfs values, the report's JSON and its renderings
//! (Prometheus text, NFD features).

use super::*;

/// The sysfs and procfs values the preflight and the report read, every parser over the same text; the
/// values with a canonical spelling (link speed, InfiniBand state and rate) parse back
/// from it to the same value.
pub fn sysfs(data: &[u8]) {
    use formats::sysfs as f;
    let text = String::from_utf8_lossy(data);
    let t = text.as_ref();
    let _ = f::one_line(t, "fuzz");
    let _ = f::pci_id(t);
    let _ = f::pci_class(t);
    let _ = f::decimal(t);
    let _ = f::link_width(t);
    if let Ok(Some(s)) = f::link_speed(t) {
        assert_eq!(f::link_speed(&format!("{s} PCIe\n")), Ok(Some(s)), "{t:?}");
        assert_eq!(f::link_speed(&s.gts()), Ok(Some(s)), "{t:?}");
    }
    if let Ok(a) = f::aer_counters(t) {
        let _ = a.nonzero();
    }
    if let Ok(e) = f::ib_enum(t) {
        assert_eq!(f::ib_enum(&format!("{e}\n")), Ok(e), "{t:?}");
    }
    if let Ok(r) = f::ib_rate(t) {
        assert_eq!(f::ib_rate(&format!("{r}\n")), Ok(r), "{t:?}");
    }
    for a in formats::proccrypto::parse(t) {
        assert!(!a.name.is_empty(), "{t:?}: a block without a name");
        let _ = formats::proccrypto::has_shash(t, &a.name);
    }
    if let Some(n) = formats::procstatus::memory_bytes(t, "VmHWM") {
        assert_eq!(n % 1024, 0, "{t:?}: {n} bytes is not a kB figure");
    }
    let _ = f::padded(t, "fuzz");
    let _ = f::is_driver_version(t);
    let _ = f::nvidia_version(t);
    let _ = f::gpu_information(t);
    let _ = f::nvswitch_information(t);
    let _ = f::is_pci_address(t);
    let _ = f::lockdown(t);
    let _ = f::efi_bool(data);
    let _ = f::module_taint(t);
    if let Ok(pkgs) = f::dpkg_status(t) {
        for p in &pkgs {
            let _ = (p.installed(), p.upstream_version());
        }
    }
}

/// The report's readers and renderers: a report file (v1 or v2, as `validator report FILE`
/// and a carried previous report read it), the console line and the full-report line in
/// captured console text, an NFD features file. A report that parses reads back the same
/// through its JSON; every rendering of it keeps its format whatever its strings hold:
/// the console line is one line of at most `LINE_MAX` bytes that reads back to the
/// report's fields, the NFD file parses as nfd-worker reads it, every line of the
/// Prometheus file is a comment or a sample, the SVG timeline's text has no raw markup.
pub fn report(data: &[u8]) {
    use validator::report::{checks, console, json, nfd, prometheus, timeline};
    let text = String::from_utf8_lossy(data);
    let _ = console::find(&text);
    let _ = console::find_full(&text);
    let _ = formats::nfd::parse(&text);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut r) = json::parse(text) else {
        return;
    };
    let again = json::parse(&json::to_line(&r))
        .unwrap_or_else(|e| panic!("a parsed report written back does not parse: {e}"));
    assert!(
        same_json(&to_value(&again), &to_value(&r)),
        "report changed through its JSON"
    );
    if r.checks.is_empty() {
        r.checks = checks::derive(&r);
    }
    let _ = r.previous_report();

    let sha = json::digest(&json::file_bytes(&r));
    let line = console::line(&r, &sha);
    assert!(
        line.len() <= console::LINE_MAX,
        "{} bytes: {line}",
        line.len()
    );
    assert_eq!(
        line.find('\n'),
        Some(line.len() - 1),
        "not one line: {line:?}"
    );
    let back = console::find(&format!("[    1.0] {line}"))
        .unwrap_or_else(|| panic!("the console line does not read back: {line:?}"));
    assert_eq!(back.decision, r.decision.as_str(), "{line:?}");
    assert_eq!(
        back.fault,
        r.fault.map_or("none", |f| f.as_str()),
        "{line:?}"
    );
    assert_eq!(back.slot, r.booted_slot().unwrap_or("-"), "{line:?}");
    assert_eq!(back.sha256, sha, "{line:?}");
    let image = r.image_id.as_deref().unwrap_or("-");
    assert!(
        back.image == image
            || (back.image.ends_with("...")
                && image.starts_with(back.image.trim_end_matches("..."))),
        "image {image:?} read back as {:?}",
        back.image
    );
    let reason = r.reason.as_deref().unwrap_or("-");
    assert!(
        back.reason == reason
            || (back.reason.ends_with("...")
                && reason.starts_with(back.reason.trim_end_matches("..."))),
        "reason {reason:?} read back as {:?}",
        back.reason
    );

    let ns = "feature.node.kubernetes.io";
    let features = nfd::render(&r, ns);
    let parsed = formats::nfd::parse(&features)
        .unwrap_or_else(|e| panic!("the NFD file does not parse: {e}\n{features}"));
    assert!(parsed.iter().all(|f| f.namespace == ns), "{features}");

    let metrics = prometheus::render(&r);
    for l in metrics.lines() {
        assert!(
            l.starts_with("# HELP validator_")
                || l.starts_with("# TYPE validator_")
                || prometheus_sample(l),
            "not a Prometheus line: {l:?}"
        );
    }

    let svg = timeline::svg(&r);
    assert!(
        !svg.chars().any(|c| c.is_control() && c != '\n'),
        "control character in the SVG"
    );
    // Outside a tag, `<` only opens the next tag: every text was escaped.
    for piece in svg.split('<').skip(1) {
        assert!(
            piece.starts_with(|c: char| c.is_ascii_alphabetic() || "/?!".contains(c)),
            "raw '<' in the SVG before {:?}",
            piece.chars().take(40).collect::<String>()
        );
    }
}

fn to_value(r: &validator::report::Report) -> serde_json::Value {
    serde_json::to_value(r).unwrap_or_else(|e| panic!("a report does not serialise: {e}"))
}

/// JSON values equal, numbers within a rounding of each other (a float read back from
/// its shortest decimal form may differ in the last bit).
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            x == y
                || matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y))
                    if (x - y).abs() <= f64::EPSILON * x.abs().max(y.abs()))
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// A Prometheus text-format sample line: `name[{label="value",...}] value`, label values
/// escaped (`\\`, `\"`, `\n`).
fn prometheus_sample(l: &str) -> bool {
    let name_end = l
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(l.len());
    let (name, mut rest) = l.split_at(name_end);
    if !name.starts_with("validator_") {
        return false;
    }
    if let Some(labels) = rest.strip_prefix('{') {
        rest = labels;
        loop {
            let Some((key, after)) = rest.split_once("=\"") else {
                return false;
            };
            if key.is_empty()
                || !key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return false;
            }
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\' | '"' | 'n')) => {}
                        _ => return false,
                    },
                    Some((i, '"')) => break i,
                    Some((_, '\n')) | None => return false,
                    Some(_) => {}
                }
            };
            rest = &after[end + 1..];
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
            } else if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            } else {
                return false;
            }
        }
    }
    rest.strip_prefix(' ')
        .is_some_and(|v| v.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&v))
}

/// An NFD feature file as nfd-worker reads it (`formats::nfd::parse`): the features of a
/// file that parses, written back one `namespace/name=value` line each, parse to the same
/// features.
pub fn nfd(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(features) = formats::nfd::parse(&text) else {
        return;
    };
    let written: String = features
        .iter()
        .map(|f| format!("{}/{}={}\n", f.namespace, f.name, f.value))
        .collect();
    let again = formats::nfd::parse(&written)
        .unwrap_or_else(|e| panic!("written features do not parse: {e}\n{written}"));
    assert_eq!(again, features, "features changed through their text");
}

//! The report as Node Feature Discovery labels: a local features file (`validator`) for
//! nfd-worker's `local` source, written by the init into the new root's `features.d`
//! (see [`super::publish`]).
//!
//! Contract: one `<namespace>/<name>=<value>` per line in the format
//! [`crate::formats::nfd`] parses, under 64 KiB (it is a few hundred bytes). The features,
//! each under the BOM's `[report] nfd_namespace`:
//!
//! | name | value |
//! |---|---|
//! | `image` | the image id, made a label value (characters other than letters, digits, `-_.` become `_`; at most 63) |
//! | `bom` | the first 16 hex digits of the BOM's SHA-256 |
//! | `slot` | `A` or `B` (absent without slots) |
//! | `decision` | `pass` or `quarantine` (the file is written only when the boot goes on) |
//! | `quarantine` | `true` or `false` |
//! | `fault` | `none`, `image`, `hardware` or `platform` |
//! | `preflight` | `pass`, `warn`, `fail`, `skip`, or `none` when the boot had no preflight stage |
//! | `fell-back` | `true` when this boot fell back from the other slot |

use super::schema::{CheckStatus, Report, StageStatus};
use crate::formats::nfd::{valid_label_part, LABEL_MAX};

/// The file name in `features.d`.
pub const FILE_NAME: &str = "validator";

/// `s` as a label value: invalid characters become `_`, at most 63 bytes, alphanumeric
/// at both ends; `None` when nothing is left.
pub fn label_value(s: &str) -> Option<String> {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cut: String = mapped
        .trim_start_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(LABEL_MAX)
        .collect();
    let v = cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    valid_label_part(v).then(|| v.to_string())
}

/// The preflight's result: its stage's status, `warn` when it passed with warnings, `none`
/// when the boot had no preflight stage.
fn preflight(r: &Report) -> &'static str {
    let Some(s) = r.stages.iter().find(|s| s.name.name() == "preflight") else {
        return "none";
    };
    let warned = r
        .checks
        .iter()
        .any(|c| c.stage == s.name && c.status == CheckStatus::Warn);
    match s.status {
        StageStatus::Ok if warned => "warn",
        StageStatus::Ok => "pass",
        StageStatus::Failed => "fail",
        StageStatus::Skipped => "skip",
    }
}

/// The features file for `r` under `namespace` (checked by the BOM's parser).
pub fn render(r: &Report, namespace: &str) -> String {
    // The schema comes from the report read (`validator report FILE --nfd`): a control
    // character in it would end the comment and start a line nfd-worker reads as a feature.
    let mut lines = vec![format!(
        "# {} {} (written by the boot validator at each boot)",
        super::timeline::printable(&r.schema),
        r.decision.as_str()
    )];
    let mut add = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            lines.push(format!("{namespace}/{name}={v}"));
        }
    };
    add("image", r.image_id.as_deref().and_then(label_value));
    add(
        "bom",
        r.bom_sha256
            .as_deref()
            .and_then(|h| h.get(..16))
            .and_then(label_value),
    );
    add("slot", r.booted_slot().map(str::to_string));
    add("decision", Some(r.decision.as_str().to_string()));
    add(
        "quarantine",
        Some((r.decision == crate::stages::Decision::Quarantine).to_string()),
    );
    add(
        "fault",
        Some(r.fault.map_or("none", |f| f.as_str()).to_string()),
    );
    add("preflight", Some(preflight(r).to_string()));
    let fell_back = r.slot.as_ref().is_some_and(|s| s.previous.is_some());
    add("fell-back", Some(fell_back.to_string()));
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::nfd::parse;
    use crate::stages::{Decision, Fault};

    #[test]
    fn features_parse_as_nfd_reads_them() {
        let mut r = Report::new(0);
        r.image_id = Some("hgx-h200-2026.12.01+nv535.261:1".into());
        r.bom_sha256 = Some("0123456789abcdef0123456789abcdef".into());
        r.decision = Decision::Quarantine;
        r.fault = Some(Fault::Hardware);
        let text = render(&r, "validator.gpu-fleet.example");
        let f = parse(&text).unwrap();
        let get = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.value.as_str());
        assert!(f
            .iter()
            .all(|x| x.namespace == "validator.gpu-fleet.example"));
        assert_eq!(get("image"), Some("hgx-h200-2026.12.01_nv535.261_1"));
        assert_eq!(get("bom"), Some("0123456789abcdef"));
        assert_eq!(get("slot"), None);
        assert_eq!(get("decision"), Some("quarantine"));
        assert_eq!(get("quarantine"), Some("true"));
        assert_eq!(get("fault"), Some("hardware"));
        assert_eq!(get("preflight"), Some("none"));
        assert_eq!(get("fell-back"), Some("false"));
    }

    /// Finding of the `report` fuzz target's invariant (`fuzz/regressions/report/`): a
    /// report whose schema held a newline (read from a file by `validator report FILE
    /// --nfd`) gave a comment line that ended early and a second line nfd-worker refuses
    /// (`line 2: value "y z stop (written ...)" is not a label value`), or reads as a
    /// feature of someone else's namespace.
    #[test]
    fn the_comment_stays_one_line() {
        for schema in [
            "validator.report/v1\nfoo.example.com/x=y z",
            "x\rfoo.example.com/flag",
            "x\u{85}foo.example.com/y",
        ] {
            let mut r = Report::new(0);
            r.schema = schema.into();
            let text = render(&r, "validator.example");
            let f = parse(&text).unwrap_or_else(|e| panic!("{schema:?}: {e}\n{text}"));
            assert!(
                f.iter().all(|x| x.namespace == "validator.example"),
                "{text}"
            );
            let first = text.lines().next().unwrap();
            assert!(
                first.starts_with("# ")
                    && first.ends_with(" pass (written by the boot validator at each boot)"),
                "{text}"
            );
        }
        let input = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/regressions/report/nfd-comment-with-newline"
        ))
        .unwrap();
        let r = crate::report::json::parse(&input).unwrap();
        assert!(r.schema.contains('\n'));
        let text = render(&r, "feature.node.kubernetes.io");
        let f = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(f
            .iter()
            .all(|x| x.namespace == "feature.node.kubernetes.io"));
        assert!(f.iter().any(|x| x.name == "decision" && x.value == "stop"));
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("a+b"), Some("a_b".into()));
        assert_eq!(label_value("+a+"), Some("a".into()));
        assert_eq!(label_value("+~"), None);
        let long = format!("{}-x", "a".repeat(62));
        assert_eq!(label_value(&long), Some("a".repeat(62)));
    }
}

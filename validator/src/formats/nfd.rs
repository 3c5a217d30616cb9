//! Node Feature Discovery's local feature files (`features.d/<name>`), as nfd-worker's
//! `local` source reads them, and the Kubernetes label syntax the labels must obey.
//!
//! The format (NFD customization guide, "Local feature source"): one feature per line,
//! `<namespace>/<name>[=<value>]` (the value defaults to `true`); lines starting with `#`
//! are comments (`# +expiry-time=`, `# +no-label`, `# +no-feature` are directives); empty
//! lines are ignored; a file over 64 KiB is ignored whole. A feature becomes a node label,
//! so the namespace must be a DNS subdomain (lower case, at most 253 bytes) outside
//! `kubernetes.io` and its subdomains (except NFD's own `feature.node.kubernetes.io` and
//! `profile.node.kubernetes.io`), the name a label name (at most 63 bytes, alphanumeric
//! at both ends, `-_.` inside) and the value a label value (the same, or empty).
//!
//! Contract: pure; [`parse`] returns every feature or the first bad line, by number.
//! Current limits: directives are accepted but not interpreted.

/// NFD ignores a feature file larger than this.
pub const FILE_MAX: usize = 64 * 1024;

/// Longest label name and label value.
pub const LABEL_MAX: usize = 63;

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// A label name or non-empty label value: at most 63 bytes, alphanumeric at both ends,
/// letters, digits, `-`, `_` and `.` inside.
pub fn valid_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            b.len() <= LABEL_MAX
                && alnum(f)
                && alnum(l)
                && b.iter().all(|&c| alnum(c) || b"-_.".contains(&c))
        }
        _ => false,
    }
}

/// A label value: empty or [`valid_label_part`].
pub fn valid_label_value(s: &str) -> bool {
    s.is_empty() || valid_label_part(s)
}

/// A label namespace (prefix) that NFD will publish: a lower-case DNS subdomain, not in
/// `kubernetes.io` except NFD's own namespaces.
pub fn valid_namespace(s: &str) -> bool {
    let dns = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && b.first().is_some_and(|&c| c != b'-')
                && b.last().is_some_and(|&c| c != b'-')
        });
    let nfd_own = ["feature.node.kubernetes.io", "profile.node.kubernetes.io"]
        .iter()
        .any(|own| s == *own || s.ends_with(&format!(".{own}")));
    let k8s = s == "kubernetes.io" || s.ends_with(".kubernetes.io");
    dns && (nfd_own || !k8s)
}

/// One feature of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub namespace: String,
    pub name: String,
    pub value: String,
}

/// A feature file NFD would not take: too big, or a line (numbered from 1) whose feature
/// is not a valid label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NfdError {
    #[error("{len} bytes: NFD ignores files over {FILE_MAX} bytes")]
    TooBig { len: usize },
    #[error("line {line}: {key:?} has no namespace")]
    NoNamespace { line: usize, key: String },
    #[error("line {line}: namespace {namespace:?} is not allowed")]
    Namespace { line: usize, namespace: String },
    #[error("line {line}: name {name:?} is not a label name")]
    Name { line: usize, name: String },
    #[error("line {line}: value {value:?} is not a label value")]
    Value { line: usize, value: String },
}

/// Parses a feature file as nfd-worker does, checking the label syntax of each feature.
pub fn parse(text: &str) -> Result<Vec<Feature>, NfdError> {
    if text.len() > FILE_MAX {
        return Err(NfdError::TooBig { len: text.len() });
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, "true"));
        let Some((ns, name)) = key.split_once('/') else {
            return Err(NfdError::NoNamespace {
                line: n,
                key: key.into(),
            });
        };
        if !valid_namespace(ns) {
            return Err(NfdError::Namespace {
                line: n,
                namespace: ns.into(),
            });
        }
        if !valid_label_part(name) {
            return Err(NfdError::Name {
                line: n,
                name: name.into(),
            });
        }
        if !valid_label_value(value) {
            return Err(NfdError::Value {
                line: n,
                value: value.into(),
            });
        }
        out.push(Feature {
            namespace: ns.into(),
            name: name.into(),
            value: value.into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_customization_guide_examples() {
        let f = parse(
            "# This is a comment\nfeature.node.kubernetes.io/my-feature.1\n\
             feature.node.kubernetes.io/my-feature.2=myvalue\nvendor.io/my-feature.3=456\n\n\
             # +expiry-time=2080-07-28T11:22:33Z\n",
        )
        .unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].value, "true");
        assert_eq!(
            (f[2].namespace.as_str(), f[2].value.as_str()),
            ("vendor.io", "456")
        );
    }

    #[test]
    fn bad_features_are_named_by_line() {
        for (text, why) in [
            ("foo=bar", "no namespace"),
            ("kubernetes.io/x=1", "not allowed"),
            ("node.kubernetes.io/x=1", "not allowed"),
            ("Vendor.io/x=1", "not allowed"),
            ("vendor.io/-x=1", "label name"),
            ("vendor.io/x=a b", "label value"),
            ("vendor.io/x=-a", "label value"),
            (&format!("vendor.io/x={}", "a".repeat(64)), "label value"),
            (&format!("vendor.io/{}=1", "a".repeat(64)), "label name"),
        ] {
            let e = parse(&format!("# ok\n{text}\n")).unwrap_err().to_string();
            assert!(e.starts_with("line 2: ") && e.contains(why), "{text}: {e}");
        }
        assert!(valid_namespace("sub.feature.node.kubernetes.io"));
        assert!(valid_label_value(""));
        assert!(parse(&"#".repeat(FILE_MAX + 1)).is_err());
    }
}

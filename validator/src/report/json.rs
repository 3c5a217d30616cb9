//! The report as JSON: one line of text, the file `/run/validator/report.json` (that line
//! and a newline) and the file's SHA-256, which the console line carries so a reader can
//! match a captured line to the file (`sha256sum /run/validator/report.json`).
//!
//! Contract: serialising never fails in practice (the report has only string map keys);
//! if it did, the line is still JSON naming the error. [`parse`] reads a report of either
//! version and says where the JSON is wrong.

use sha2::{Digest, Sha256};

use super::schema::Report;

/// Where the init writes the report (under the `/run` root).
pub const RUN_PATH: &str = "validator/report.json";

/// The report as one line of JSON (no newline).
pub fn to_line(r: &Report) -> String {
    r.to_json()
}

/// The bytes of `/run/validator/report.json`: the JSON line and a newline.
pub fn file_bytes(r: &Report) -> Vec<u8> {
    let mut b = to_line(r).into_bytes();
    b.push(b'\n');
    b
}

/// Lower-case hex SHA-256 of `bytes` (the report file's digest).
pub fn digest(bytes: &[u8]) -> String {
    crate::util::hex(&Sha256::digest(bytes))
}

/// The key of the report's attestation, left out of what its quote binds.
pub const ATTESTATION_KEY: &str = "attestation";

/// The report's canonical JSON without [`ATTESTATION_KEY`]: object keys sorted by their
/// bytes at every level, no whitespace, strings and numbers as serde_json writes them
/// (which reads back to the same text). A report read back from its file gives the same
/// bytes, whatever order its keys were written in.
pub fn quoted_bytes(report: &serde_json::Value) -> Vec<u8> {
    fn write(v: &serde_json::Value, top: bool, out: &mut Vec<u8>) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m
                    .keys()
                    .filter(|k| !(top && k.as_str() == ATTESTATION_KEY))
                    .collect();
                keys.sort_unstable();
                out.push(b'{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(&serde_json::Value::String((*k).clone()), false, out);
                    out.push(b':');
                    if let Some(x) = m.get(*k) {
                        write(x, false, out);
                    }
                }
                out.push(b'}');
            }
            serde_json::Value::Array(a) => {
                out.push(b'[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(x, false, out);
                }
                out.push(b']');
            }
            scalar => out.extend_from_slice(scalar.to_string().as_bytes()),
        }
    }
    let mut out = Vec::new();
    write(report, true, &mut out);
    out
}

/// What a report's quote binds: SHA-256 of [`quoted_bytes`].
pub fn quoted_digest_of(report: &serde_json::Value) -> [u8; 32] {
    Sha256::digest(quoted_bytes(report)).into()
}

/// [`quoted_digest_of`] the report as it will be written.
pub fn quoted_digest(report: &Report) -> Result<[u8; 32], serde_json::Error> {
    Ok(quoted_digest_of(&serde_json::to_value(report)?))
}

/// A report's JSON that does not read: where, and serde's account of it.
#[derive(Debug, thiserror::Error)]
#[error("line {line} column {column}: {source}")]
pub struct ParseError {
    pub line: usize,
    pub column: usize,
    pub source: serde_json::Error,
}

/// Reads a report (v1 or v2) from JSON text.
pub fn parse(text: &str) -> Result<Report, ParseError> {
    serde_json::from_str(text).map_err(|source| ParseError {
        line: source.line(),
        column: source.column(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_digest() {
        let r = Report::new(5);
        let b = file_bytes(&r);
        assert_eq!(b.last(), Some(&b'\n'));
        assert_eq!(b.iter().filter(|&&c| c == b'\n').count(), 1);
        assert_eq!(parse(std::str::from_utf8(&b).unwrap()).unwrap(), r);
        assert_eq!(
            digest(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let e = parse("{\"schema\": 1}").unwrap_err().to_string();
        assert!(e.starts_with("line 1 column"), "{e}");
    }

    #[test]
    fn the_quoted_digest_ignores_key_order_and_the_attestation_only() {
        let mut r = Report::new(5);
        r.reason = Some("a \"quoted\" reason \u{e9}\n".into());
        let d = quoted_digest(&r).unwrap();
        // Read back from its file: the same digest.
        let text = String::from_utf8(file_bytes(&r)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(quoted_digest_of(&v), d);
        // The attestation is left out; any other change is not.
        r.attestation = Some(crate::runtime::attest::Attestation {
            failure: Some("x".into()),
            ..Default::default()
        });
        assert_eq!(quoted_digest(&r).unwrap(), d);
        r.boottime_report_us += 1;
        assert_ne!(quoted_digest(&r).unwrap(), d);
        // Keys in another order, spaces: the same canonical bytes.
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "s"}], "a": null}"#).unwrap();
        assert_eq!(quoted_bytes(&a), br#"{"a":null,"b":[1,{"x":"s","y":2}]}"#);
        // Only the top-level attestation is left out.
        let a: serde_json::Value =
            serde_json::from_str(r#"{"attestation": 1, "n": {"attestation": 2}}"#).unwrap();
        assert_eq!(quoted_bytes(&a), br#"{"n":{"attestation":2}}"#);
    }
}

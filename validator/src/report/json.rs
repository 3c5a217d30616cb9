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
}

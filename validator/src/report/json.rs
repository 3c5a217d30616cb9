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

/// Reads JSON text as a value, refusing an object that gives a key twice at any level
/// (serde_json keeps the last silently: `"decision":"stop"` then `"decision":"pass"`
/// would read as a pass, while a typed read of the same text refuses it).
pub fn parse_value(bytes: &[u8]) -> Result<serde_json::Value, ParseError> {
    serde_json::from_slice::<Strict>(bytes)
        .map(|s| s.0)
        .map_err(|source| ParseError {
            line: source.line(),
            column: source.column(),
            source,
        })
}

/// A JSON value read with no key given twice in one object.
struct Strict(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<serde_json::Value, E> {
        Ok(b.into())
    }
    fn visit_i64<E>(self, n: i64) -> Result<serde_json::Value, E> {
        Ok(n.into())
    }
    fn visit_u64<E>(self, n: u64) -> Result<serde_json::Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<serde_json::Value, E> {
        serde_json::Number::from_f64(n)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E>(self, s: &str) -> Result<serde_json::Value, E> {
        Ok(s.into())
    }
    fn visit_string<E>(self, s: String) -> Result<serde_json::Value, E> {
        Ok(s.into())
    }
    fn visit_unit<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<serde_json::Value, A::Error> {
        let mut v = Vec::new();
        while let Some(Strict(x)) = seq.next_element()? {
            v.push(x);
        }
        Ok(serde_json::Value::Array(v))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<serde_json::Value, A::Error> {
        let mut m = serde_json::Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if m.contains_key(&k) {
                return Err(serde::de::Error::custom(format!(
                    "the key {k:?} is given twice"
                )));
            }
            let Strict(v) = map.next_value()?;
            m.insert(k, v);
        }
        Ok(serde_json::Value::Object(m))
    }
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
    fn a_key_given_twice_is_refused_at_any_level() {
        let e = parse_value(br#"{"decision":"stop","n":1,"decision":"pass"}"#).unwrap_err();
        assert!(e.to_string().contains("\"decision\" is given twice"), "{e}");
        assert!(parse_value(br#"{"a":[{"x":1,"x":2}]}"#).is_err());
        let v = parse_value(br#"{"a":[{"x":1,"y":-2.5,"z":null,"t":true}],"s":"\u00e9"}"#).unwrap();
        assert_eq!(
            v,
            serde_json::from_str::<serde_json::Value>(
                r#"{"a":[{"x":1,"y":-2.5,"z":null,"t":true}],"s":"\u00e9"}"#
            )
            .unwrap()
        );
        assert!(parse_value(b"").is_err() && parse_value(b"{").is_err());
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

//! Checked strings of the BOM: a string type per kind of value (a version, a module
//! name, a hex digest ...) whose `Deserialize` refuses a value outside its alphabet or
//! length, with an "invalid `<what> <value>`" message the TOML parser places on the value's
//! line. [`checked_string!`] makes such a type; every section (`[hardware]` too) uses it.
//!
//! Contract: a checked string holds only values its predicate accepts when it comes from
//! TOML; the tuple field is public, so code that builds one by hand is trusted to do the
//! same. Limits: the predicate is a plain `fn(&str) -> bool`, so the message names the
//! kind of value, not the rule that failed.

/// Makes a `String` newtype (`$name`) that deserializes only values `$ok` accepts,
/// serializes transparently, and displays as the string. Extra attributes (docs, another
/// `#[derive(Default)]`) go before the name.
macro_rules! checked_string {
    ($(#[$doc:meta])* $name:ident, $what:literal, $ok:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                let ok: fn(&str) -> bool = $ok;
                if ok(&s) {
                    Ok($name(s))
                } else {
                    Err(serde::de::Error::custom(format!(
                        concat!("invalid ", $what, " {:?}"),
                        s
                    )))
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}
pub(crate) use checked_string;

fn version_like(s: &str) -> bool {
    s.len() <= 128
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b".+~_-:".contains(&c))
}

checked_string!(
    #[derive(Default)]
    /// A version string: starts with a letter or digit, then letters, digits and `.+~_-:`.
    Version,
    "version (letters, digits and .+~_-: only)",
    version_like
);

//! Layer 1, the bottom layer: small helpers every other layer may use and that use nothing of ours.
//!
//! Contract: [`hex`] / [`unhex`] are the one hex encoder and decoder (lower-case out,
//! either case in, strict: odd lengths and non-hex digits are refused); [`le`] reads
//! little- and big-endian integers at an offset through zerocopy, returning `None` past
//! the end instead of panicking; [`fs`] writes files atomically and reads untrusted input
//! with a size limit and a file-type check; [`out`] is standard output for the
//! command-line tools (a closed pipe ends the output quietly); [`escape_controls`] is
//! the one escaper of control characters in the tools' messages.
//!
//! Current limits: nothing here knows about any format or policy; callers attach the
//! context (path, field) to the `None`s and errors they get back.

pub mod fs;
pub mod le;
pub mod out;

/// `x` as an `f64` for display and metrics (rates, ratios, MB, seconds): above 2^53 the
/// value rounds to the nearest representable one, which a printed or exported number
/// tolerates. Never use it for a value that is compared or fed back into the gate.
#[expect(
    clippy::cast_precision_loss,
    reason = "display only: reports and metrics print rounded values"
)]
pub fn as_f64(x: u64) -> f64 {
    x as f64
}

/// Whether `c` would change what a terminal shows around it rather than show itself: a
/// control character (a newline too) or a Unicode bidirectional formatting character
/// (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069), which reorders the text after it
/// (a file name that reads as another one).
pub fn is_terminal_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `s` with every control character (a newline too) and bidirectional formatting
/// character ([`is_terminal_control`]) written as an escape (`\u{1b}`, `\n`,
/// `\u{202e}`): the tools' messages name files and values from their input, which must
/// not move the terminal's cursor, reorder the line or forge one.
pub fn escape_controls(s: &str) -> String {
    s.chars()
        .map(|c| {
            if is_terminal_control(c) {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The items of `items` in their order, each kept once (its first occurrence).
pub fn first_of_each<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for x in items {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        for d in [b >> 4, b & 0x0f] {
            if let Some(&c) = DIGITS.get(usize::from(d)) {
                s.push(char::from(c));
            }
        }
    }
    s
}

/// Hex (either case, even length) to bytes; `None` if it is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|p| match p {
            [hi, lo] => Some((nibble(*hi)? << 4) | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

/// A DER integer (serial) or key id as `modinfo` prints `sig_key`: upper-case hex pairs
/// joined by `:`, without the sign-padding zero byte DER puts before a high first byte.
pub fn colon_hex(bytes: &[u8]) -> String {
    let b = match bytes {
        [0, rest @ ..] if rest.first().is_some_and(|x| x & 0x80 != 0) => rest,
        _ => bytes,
    };
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(b.len() * 3);
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        for d in [x >> 4, x & 0x0f] {
            if let Some(&c) = DIGITS.get(usize::from(d)) {
                s.push(char::from(c));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_of_each_keeps_the_first_occurrences_in_order() {
        assert_eq!(first_of_each(["b", "a", "b", "c", "a"]), ["b", "a", "c"]);
        assert!(first_of_each(Vec::<u8>::new()).is_empty());
    }

    #[test]
    fn hex_round_trips_and_is_strict() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(unhex("00ABff"), Some(vec![0x00, 0xab, 0xff]));
        assert_eq!(unhex(""), Some(vec![]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("+1"), None);
    }
}

//! `/proc/<pid>/status` (`proc(5)`): `Key:\tvalue` lines. Only what the report uses is
//! parsed: a memory figure such as `VmHWM` (peak resident set size), `   1234 kB`.
//!
//! Contract: pure; a missing key, a value that is not `<decimal> kB`, or an overflowing
//! number is `None`, never a panic. Current limits: only `kB` figures.

/// The value of memory key `key` (e.g. `VmHWM`) in bytes.
pub fn memory_bytes(text: &str, key: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.split_once(':').is_some_and(|(k, _)| k == key))?;
    let (_, value) = line.split_once(':')?;
    let mut words = value.split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => kib.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_figures() {
        let t = "Name:\tinit\nVmPeak:\t    9000 kB\nVmHWM:\t    4242 kB\nVmRSS:\t 12 kB\n";
        assert_eq!(memory_bytes(t, "VmHWM"), Some(4242 * 1024));
        assert_eq!(memory_bytes(t, "VmRSS"), Some(12 * 1024));
        assert_eq!(memory_bytes(t, "VmSwap"), None);
        // Only the exact key, only kB, no overflow, no garbage.
        assert_eq!(memory_bytes("XVmHWM:\t1 kB\n", "VmHWM"), None);
        assert_eq!(memory_bytes("VmHWM:\t1 MB\n", "VmHWM"), None);
        assert_eq!(memory_bytes("VmHWM:\t1 kB extra\n", "VmHWM"), None);
        assert_eq!(memory_bytes("VmHWM:\t-1 kB\n", "VmHWM"), None);
        assert_eq!(
            memory_bytes("VmHWM:\t18446744073709551615 kB\n", "VmHWM"),
            None
        );
        assert_eq!(memory_bytes("VmHWM:", "VmHWM"), None);
        assert_eq!(memory_bytes("", "VmHWM"), None);
    }
}

//! `/proc/crypto`: the algorithms the running kernel's crypto API holds, one block per
//! implementation (`name : sha512`, `driver : sha512-generic`, `type : shash`,
//! `selftest : passed`, ...), blocks separated by an empty line. The module gate asks it
//! whether a digest a module signature needs is there now (Debian 6.1 builds sha384 and
//! sha512 as a module), which is the question the kernel's `pkcs7_digest` asks through
//! `crypto_alloc_shash`.
//!
//! Contract: pure; lines that are not `key : value` are ignored, a block without a `name`
//! is skipped, never a panic. [`has_shash`] is true when some block names the algorithm
//! with type `shash` and a self-test that did not fail (`passed`, or no `selftest` line,
//! as kernels built without the self-tests print). Current limits: only the fields the gate
//! reads (`name`, `driver`, `type`, `selftest`) are kept.

/// Most bytes read from `/proc/crypto` (Debian 6.1 under QEMU prints about 20 KiB).
pub const PROC_CRYPTO_MAX: u64 = 1 << 20;

/// One implementation in `/proc/crypto`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Alg {
    pub name: String,
    pub driver: String,
    pub kind: String,
    /// `None` when the block has no `selftest` line.
    pub selftest: Option<String>,
}

/// Every block of `text` that has a `name`.
pub fn parse(text: &str) -> Vec<Alg> {
    let mut out = Vec::new();
    let mut cur = Alg::default();
    let mut flush = |cur: &mut Alg| {
        let a = std::mem::take(cur);
        if !a.name.is_empty() {
            out.push(a);
        }
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut cur);
            continue;
        }
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.trim() {
            "name" => {
                // A second `name` without a blank line starts a new block.
                if !cur.name.is_empty() {
                    flush(&mut cur);
                }
                cur.name = v;
            }
            "driver" => cur.driver = v,
            "type" => cur.kind = v,
            "selftest" => cur.selftest = Some(v),
            _ => {}
        }
    }
    flush(&mut cur);
    out
}

/// Whether `text` lists a synchronous hash named `name` (`sha512`) whose self-test did not
/// fail: what `crypto_alloc_shash(name, 0, 0)` would find without loading a module.
pub fn has_shash(text: &str, name: &str) -> bool {
    parse(text).iter().any(|a| {
        a.name == name && a.kind == "shash" && a.selftest.as_deref().is_none_or(|s| s == "passed")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three blocks as Debian 6.1 prints them after `sha512_generic` loaded, and one
    /// whose self-test failed.
    const TEXT: &str = "name         : sha384\n\
driver       : sha384-generic\n\
module       : sha512_generic\n\
priority     : 100\n\
refcnt       : 1\n\
selftest     : passed\n\
internal     : no\n\
type         : shash\n\
blocksize    : 128\n\
digestsize   : 48\n\
\n\
name         : sha512\n\
driver       : sha512-generic\n\
module       : sha512_generic\n\
selftest     : passed\n\
type         : shash\n\
\n\
name         : sha256\n\
driver       : sha256-generic\n\
module       : kernel\n\
selftest     : unknown\n\
type         : shash\n\
\n\
name         : cbc(aes)\n\
driver       : cbc(aes-generic)\n\
type         : skcipher\n";

    #[test]
    fn blocks_and_digests() {
        let algs = parse(TEXT);
        assert_eq!(algs.len(), 4);
        assert_eq!(algs[1].driver, "sha512-generic");
        assert!(has_shash(TEXT, "sha512"));
        assert!(has_shash(TEXT, "sha384"));
        // A self-test that did not pass: the kernel would not hand it out.
        assert!(!has_shash(TEXT, "sha256"));
        // Present, but not a hash.
        assert!(!has_shash(TEXT, "cbc(aes)"));
        assert!(!has_shash(TEXT, "sha224"));
        assert!(!has_shash("", "sha512"));
    }

    #[test]
    fn odd_input() {
        // No blank line between blocks, stray lines, a block without a name.
        let t = "garbage\nname : a\ntype : shash\nname : b\ntype : shash\n\ntype : shash\n";
        let algs = parse(t);
        assert_eq!(
            algs.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(has_shash(t, "a") && has_shash(t, "b"));
    }
}

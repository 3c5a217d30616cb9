//! The symbol-CRC table in kbuild's `Module.symvers` format
//! (`0x<crc>\t<symbol>\t<module>\t<export type>\t<namespace>`), built by mkinitramfs from
//! the kernel image and the packed modules, and read by the gate.

use std::collections::HashMap;

/// A malformed `Module.symvers` line: its number (from 1) and its text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Module.symvers line {line}: malformed: {text:?}")]
pub struct SymversError {
    pub line: usize,
    pub text: String,
}

/// One exported symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub crc: u32,
    /// `vmlinux` or the exporting module's name.
    pub module: String,
    pub gpl: bool,
    /// The symbol namespace (`EXPORT_SYMBOL_NS`), empty for none.
    pub namespace: String,
}

/// Symbol name to export, hashed with `foldhash` (seeded per process): the gate looks up
/// every import of every module here.
pub type SymbolMap = HashMap<String, Export, foldhash::fast::RandomState>;

/// Symbol name to export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symvers {
    pub map: SymbolMap,
}

impl Symvers {
    /// Parses `Module.symvers` text; a malformed line is an error naming it.
    pub fn parse(text: &str) -> Result<Symvers, SymversError> {
        // A line is about 50 bytes: room for every entry at once, no rehashing (at most a
        // whole kernel's, so text that is not a symbol table reserves little).
        let room = (text.len() / 48).min(1 << 16);
        let mut map = SymbolMap::with_capacity_and_hasher(room, Default::default());
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut f = line.split('\t');
            let bad = || SymversError {
                line: n + 1,
                text: line.to_string(),
            };
            let (Some(crc), Some(symbol), Some(module)) = (f.next(), f.next(), f.next()) else {
                return Err(bad());
            };
            let (kind, namespace) = (f.next(), f.next());
            let crc = crc
                .strip_prefix("0x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .ok_or_else(bad)?;
            map.insert(
                symbol.to_string(),
                Export {
                    crc,
                    module: module.to_string(),
                    gpl: kind.is_some_and(|t| t.ends_with("_GPL")),
                    namespace: namespace.map_or_else(String::new, str::to_string),
                },
            );
        }
        Ok(Symvers { map })
    }

    /// Adds an export (a later one for the same symbol replaces it).
    pub fn insert(&mut self, symbol: &str, crc: u32, module: &str, gpl: bool) {
        self.insert_ns(symbol, crc, module, gpl, "");
    }

    /// Adds an export in a namespace (empty: none).
    pub fn insert_ns(&mut self, symbol: &str, crc: u32, module: &str, gpl: bool, ns: &str) {
        self.map.insert(
            symbol.to_string(),
            Export {
                crc,
                module: module.to_string(),
                gpl,
                namespace: ns.to_string(),
            },
        );
    }

    /// The table as `Module.symvers` text, sorted by symbol.
    pub fn to_text(&self) -> String {
        let mut v: Vec<_> = self.map.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        let mut s = String::new();
        for (sym, e) in v {
            let t = if e.gpl {
                "EXPORT_SYMBOL_GPL"
            } else {
                "EXPORT_SYMBOL"
            };
            s.push_str(&format!(
                "0x{:08x}\t{sym}\t{}\t{t}\t{}\n",
                e.crc, e.module, e.namespace
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let mut s = Symvers::default();
        s.insert("printk", 0xdeadbeef, "vmlinux", false);
        s.insert("jbd2_journal_start", 0x12, "jbd2", true);
        let t = s.to_text();
        assert_eq!(
            t.lines().next(),
            Some("0x00000012\tjbd2_journal_start\tjbd2\tEXPORT_SYMBOL_GPL\t")
        );
        assert_eq!(Symvers::parse(&t).unwrap(), s);
        assert!(Symvers::parse("0xzz\tx\ty\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(Symvers::parse("0x12 x\n").is_err());
    }
}

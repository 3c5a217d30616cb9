//! Boot Loader Specification Type #1 entries (UAPI `BOOT_LOADER_SPECIFICATION.md`) and
//! systemd-boot's boot counting (systemd `AUTOMATIC_BOOT_ASSESSMENT.md`).
//!
//! An entry is a file `/loader/entries/<id>[+<left>[-<done>]].conf` on the ESP. With a
//! counter, systemd-boot renames the file before it boots it (`+3` to `+2-1`, one try
//! used) and names the new path in the EFI variable `LoaderBootCountPath`; the booted
//! system marks the entry good by renaming it to `<id>.conf`, or bad by setting the tries
//! left to 0 (`+0-<done>`), which systemd-boot sorts after every other entry.
//!
//! Contract: [`EntryName::parse`] accepts only names systemd-boot counts (the counters are
//! decimal without sign, the id non-empty, no path separator); [`Entry::parse`] reads the
//! keys a kexec needs (`linux`, `initrd`, `options`, `title`, `version`) and ignores the
//! others, as boot loaders must; [`efivar_utf16`] decodes an efivarfs file holding a
//! UTF-16 string (4 bytes of attributes, then the NUL-terminated string). All pure.

use std::fmt;

/// A malformed entry name, entry file or EFI variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {why}")]
pub struct BlsError {
    pub what: String,
    pub why: String,
}

fn err(what: &str, why: impl Into<String>) -> BlsError {
    BlsError {
        what: what.to_string(),
        why: why.into(),
    }
}

/// The file name of an entry, split into its id and boot counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryName {
    pub id: String,
    /// Tries left (`+LEFT`), when counting.
    pub left: Option<u32>,
    /// Tries done (`-DONE`), when counting and at least one try was made.
    pub done: Option<u32>,
}

/// The longest entry file name we accept (FAT's limit is 255 UTF-16 units).
pub const ENTRY_NAME_MAX: usize = 255;

/// The longest entry id we accept: room left for the longest counters the boot writes
/// when it uses a try or marks the entry bad (`+999999999-999999999.conf`), so every name
/// we rename an entry to is one we read back.
pub const ENTRY_ID_MAX: usize = ENTRY_NAME_MAX - "+999999999-999999999.conf".len();

fn counter(s: &str, name: &str) -> Result<u32, BlsError> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(err(
            name,
            format!("boot counter {s:?} is not a decimal number"),
        ));
    }
    s.parse()
        .map_err(|_| err(name, format!("boot counter {s:?} is not a decimal number")))
}

impl EntryName {
    /// Parses `<id>[+<left>[-<done>]].conf`.
    pub fn parse(name: &str) -> Result<EntryName, BlsError> {
        if name.len() > ENTRY_NAME_MAX {
            return Err(err(
                &name.chars().take(40).collect::<String>(),
                format!("entry name longer than {ENTRY_NAME_MAX} bytes"),
            ));
        }
        if name.contains(['/', '\\', '\0']) || name.chars().any(char::is_control) {
            return Err(err(name, "not a plain file name"));
        }
        let stem = name
            .strip_suffix(".conf")
            .ok_or_else(|| err(name, "an entry file name ends in .conf"))?;
        // The counter is the part after the last '+', if that part is counters only.
        let (id, left, done) = match stem.rsplit_once('+') {
            Some((id, ctr))
                if !ctr.is_empty() && ctr.bytes().all(|c| c.is_ascii_digit() || c == b'-') =>
            {
                match ctr.split_once('-') {
                    Some((l, d)) => (id, Some(counter(l, name)?), Some(counter(d, name)?)),
                    None => (id, Some(counter(ctr, name)?), None),
                }
            }
            _ => (stem, None, None),
        };
        if id.is_empty() {
            return Err(err(name, "empty entry id"));
        }
        // An id that itself ends in `+N` would lose that part when the entry is marked
        // good (`a+1+2.conf` becomes `a+1.conf`, which reads as id `a` with a try left).
        if id.rsplit_once('+').is_some_and(|(_, t)| {
            !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit() || c == b'-')
        }) {
            return Err(err(
                name,
                format!("entry id {id:?} ends in what reads as boot counters"),
            ));
        }
        if id.len() > ENTRY_ID_MAX {
            return Err(err(
                &name.chars().take(40).collect::<String>(),
                format!(
                    "entry id longer than {ENTRY_ID_MAX} bytes (no room for the boot counters)"
                ),
            ));
        }
        Ok(EntryName {
            id: id.to_string(),
            left,
            done,
        })
    }

    /// The file name.
    pub fn file_name(&self) -> String {
        match (self.left, self.done) {
            (Some(l), Some(d)) => format!("{}+{l}-{d}.conf", self.id),
            (Some(l), None) => format!("{}+{l}.conf", self.id),
            _ => format!("{}.conf", self.id),
        }
    }

    /// Whether systemd-boot counts tries of this entry.
    pub fn counting(&self) -> bool {
        self.left.is_some()
    }

    /// Whether the entry is bad (no tries left).
    pub fn bad(&self) -> bool {
        self.left == Some(0)
    }

    /// The name after marking good: the counters go.
    pub fn marked_good(&self) -> EntryName {
        EntryName {
            id: self.id.clone(),
            left: None,
            done: None,
        }
    }

    /// The name after marking bad: no tries left, the tries done kept.
    pub fn marked_bad(&self) -> EntryName {
        EntryName {
            id: self.id.clone(),
            left: Some(0),
            done: self.done,
        }
    }
}

impl fmt::Display for EntryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file_name())
    }
}

/// The keys of an entry a boot needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub title: Option<String>,
    pub version: Option<String>,
    /// The kernel, an absolute path on the ESP.
    pub linux: Option<String>,
    /// Initrds, in order.
    pub initrd: Vec<String>,
    /// The kernel command line (every `options` line, joined with spaces).
    pub options: String,
}

/// The largest entry file we read.
pub const ENTRY_FILE_MAX: usize = 64 * 1024;

impl Entry {
    /// Parses an entry file: `key value` lines, `#` comments, blank lines. `name` names
    /// it in errors.
    pub fn parse(bytes: &[u8], name: &str) -> Result<Entry, BlsError> {
        if bytes.len() > ENTRY_FILE_MAX {
            return Err(err(name, format!("larger than {ENTRY_FILE_MAX} bytes")));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| err(name, format!("not UTF-8: {e}")))?;
        let mut e = Entry::default();
        let mut options = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = match line.split_once(|c: char| c.is_ascii_whitespace()) {
                Some((k, v)) => (k, v.trim()),
                None => (line, ""),
            };
            let path = |v: &str| -> Result<String, BlsError> {
                if !v.starts_with('/') || v.split('/').any(|c| c == "..") {
                    return Err(err(
                        name,
                        format!(
                            "line {}: {key} {v:?} is not an absolute path on the ESP",
                            n + 1
                        ),
                    ));
                }
                Ok(v.to_string())
            };
            match key {
                "title" => e.title = Some(value.to_string()),
                "version" => e.version = Some(value.to_string()),
                "linux" => e.linux = Some(path(value)?),
                "initrd" => e.initrd.push(path(value)?),
                "options" => options.push(value.to_string()),
                _ => {}
            }
        }
        e.options = options.join(" ");
        Ok(e)
    }
}

/// Decodes an efivarfs file holding a UTF-16LE string: 4 bytes of attributes, then the
/// string, NUL-terminated (the terminator may be absent).
pub fn efivar_utf16(bytes: &[u8], name: &str) -> Result<String, BlsError> {
    let data = bytes
        .get(4..)
        .ok_or_else(|| err(name, "shorter than the 4 attribute bytes"))?;
    if data.len() % 2 != 0 {
        return Err(err(name, "odd length for a UTF-16 string"));
    }
    let units: Vec<u16> = data
        .chunks_exact(2)
        .map(|c| {
            u16::from_le_bytes([
                c.first().copied().unwrap_or(0),
                c.get(1).copied().unwrap_or(0),
            ])
        })
        .take_while(|&u| u != 0)
        .collect();
    String::from_utf16(&units).map_err(|_| err(name, "not UTF-16"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_systemd_boot() {
        let n = EntryName::parse("slot-a+3.conf").unwrap();
        assert_eq!((n.id.as_str(), n.left, n.done), ("slot-a", Some(3), None));
        let n = EntryName::parse("slot-a+2-1.conf").unwrap();
        assert_eq!((n.left, n.done), (Some(2), Some(1)));
        assert_eq!(n.marked_good().file_name(), "slot-a.conf");
        assert_eq!(n.marked_bad().file_name(), "slot-a+0-1.conf");
        assert!(n.marked_bad().bad() && n.counting());
        let n = EntryName::parse("slot-a.conf").unwrap();
        assert!(!n.counting());
        assert_eq!(n.file_name(), "slot-a.conf");
        // A '+' that is not followed by counters belongs to the id.
        let n = EntryName::parse("6.1+deb12.conf").unwrap();
        assert_eq!((n.id.as_str(), n.left), ("6.1+deb12", None));
        let n = EntryName::parse("a+b+1.conf").unwrap();
        assert_eq!((n.id.as_str(), n.left), ("a+b", Some(1)));
        for bad in [
            "slot-a+3",
            "+3.conf",
            "../x.conf",
            "a/b.conf",
            "a\0.conf",
            "a+-1.conf",
            "a+1-.conf",
            "a+99999999999.conf",
            "a\n.conf",
        ] {
            assert!(EntryName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(EntryName::parse(&format!("{}.conf", "a".repeat(300))).is_err());
    }

    /// Fuzz finding (`fuzz/regressions/bls/`): a 254-byte name without counters parsed,
    /// but marking it bad (`+0`) gave a 256-byte name the next boot refused. Ids keep
    /// room for the counters now, and every rename of an accepted name reads back.
    #[test]
    fn every_name_the_boot_writes_reads_back() {
        let long = format!("{}.conf", "\u{fffd}".repeat(83));
        assert_eq!(long.len(), 254);
        let e = EntryName::parse(&long).unwrap_err();
        assert!(e.why.contains("no room for the boot counters"), "{e}");
        let id = "a".repeat(ENTRY_ID_MAX);
        for name in [
            format!("{id}.conf"),
            format!("{id}+3.conf"),
            format!("{id}+1-2.conf"),
        ] {
            let n = EntryName::parse(&name).unwrap();
            let widest = EntryName {
                id: n.id.clone(),
                left: Some(999_999_999),
                done: Some(999_999_999),
            };
            for renamed in [n.marked_bad(), n.marked_good(), widest] {
                assert_eq!(EntryName::parse(&renamed.file_name()).unwrap(), renamed);
            }
        }
        assert!(EntryName::parse(&format!("{id}a.conf")).is_err());
        // Fuzz finding: `+3+1.conf` (id `+3`) marked good became `+3.conf`, an entry with
        // no id; `a+1+2.conf` marked good would become the counting `a+1.conf`. Ids that
        // end in counters are refused, so marking good always gives a plain name.
        for name in ["+3+1.conf", "a+1+2.conf", "a+1-2+3.conf", "a+1-+2.conf"] {
            let e = EntryName::parse(name).unwrap_err();
            assert!(e.why.contains("reads as boot counters"), "{name}: {e}");
        }
        for name in ["a+b+1.conf", "a++1.conf", "6.1+deb12+2-1.conf"] {
            let n = EntryName::parse(name).unwrap();
            let good = EntryName::parse(&n.marked_good().file_name()).unwrap();
            assert!(!good.counting() && good.id == n.id, "{name}: {good:?}");
        }
    }

    #[test]
    fn entries_and_efivars() {
        let e = Entry::parse(
            b"# slot A\ntitle Node A\nversion 6.1\nlinux /A/vmlinuz\ninitrd /A/initrd.img\noptions validator.slot=A\noptions  console=ttyS0\nmachine-id x\n",
            "a.conf",
        )
        .unwrap();
        assert_eq!(e.linux.as_deref(), Some("/A/vmlinuz"));
        assert_eq!(e.initrd, ["/A/initrd.img"]);
        assert_eq!(e.options, "validator.slot=A console=ttyS0");
        let bad = Entry::parse(b"linux ../../etc\n", "b.conf").unwrap_err();
        assert!(bad.to_string().contains("b.conf: line 1"), "{bad}");
        assert!(Entry::parse(b"\xff\n", "c.conf").is_err());
        let mut v = vec![7, 0, 0, 0];
        for u in "\\loader\\entries\\a+2-1.conf".encode_utf16() {
            v.extend_from_slice(&u.to_le_bytes());
        }
        v.extend_from_slice(&[0, 0]);
        assert_eq!(
            efivar_utf16(&v, "x").unwrap(),
            "\\loader\\entries\\a+2-1.conf"
        );
        assert!(efivar_utf16(&[1, 2], "x").is_err());
        assert!(efivar_utf16(&[1, 2, 3, 4, 5], "x").is_err());
        assert!(efivar_utf16(&[0, 0, 0, 0, 0x00, 0xd8], "x").is_err());
    }
}

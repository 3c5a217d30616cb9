//! The cpio "newc" (`070701`) format as the kernel's `init/initramfs.c` reads it
//! (`Documentation/driver-api/early-userspace`): the one writer and the plain reader of the
//! workspace. `mkinitramfs` builds its initramfs with [`Archive`] (and re-exports this
//! module as `mkinitramfs::cpio`); the slot stage appends the few files the boot carries
//! to the next kernel across a kexec with [`Writer`] (the kernel unpacks every archive
//! concatenated to an initramfs, so appending one adds files without touching the slot's
//! own image). Both write their headers through one function.
//!
//! Contract: [`Archive::write`] is deterministic: entries are sorted by path, parents are
//! created before children, inode numbers are assigned in order, every owner is 0:0 and
//! every mtime is the one given (`mkinitramfs` passes `SOURCE_DATE_EPOCH`, else 0), so
//! identical inputs give identical bytes. [`Writer`] writes entries in the order given
//! (directories 0755, files 0644, mtime 0, one link each). [`read`] and [`read_archive`]
//! are pure parsers over bytes: any input gives entries or a [`CpioError`] naming the
//! offset, never a panic. Nothing here does I/O.
//!
//! Current limits: no hard links, no `070702` checksums written (the reader accepts the
//! magic and ignores the checksum); sizes and names above 4 GiB do not fit the format.

use std::collections::BTreeMap;
use std::fmt;

/// Most bytes of an initramfs file read whole: the slot's initramfs the kexec stage loads,
/// and one given to `mkinitramfs list`.
pub const INITRAMFS_MAX: u64 = 1 << 30;

/// A cpio problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpioError {
    #[error("entry path {0:?} is not a clean absolute or relative path")]
    BadPath(String),
    #[error("{path:?} is added twice with different contents")]
    Conflict { path: String },
    #[error("offset {offset}: {what}")]
    Malformed { offset: usize, what: String },
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
    CharDev { major: u32, minor: u32 },
    BlockDev { major: u32, minor: u32 },
}

/// One entry: kind plus permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub perm: u32,
}

impl Entry {
    /// The full `st_mode`.
    pub fn mode(&self) -> u32 {
        let t = match self.kind {
            Kind::Dir => 0o040000,
            Kind::File(_) => 0o100000,
            Kind::Symlink(_) => 0o120000,
            Kind::CharDev { .. } => 0o020000,
            Kind::BlockDev { .. } => 0o060000,
        };
        t | (self.perm & 0o7777)
    }
}

/// An archive being assembled: path (without leading `/`) to entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archive {
    pub entries: BTreeMap<String, Entry>,
}

fn clean(path: &str) -> Result<String, CpioError> {
    let p = path.trim_start_matches('/');
    if p.is_empty()
        || p.split('/').any(|c| c.is_empty() || c == "." || c == "..")
        || p.contains('\0')
    {
        return Err(CpioError::BadPath(path.to_string()));
    }
    Ok(p.to_string())
}

impl Archive {
    pub fn new() -> Archive {
        Archive::default()
    }

    /// Adds an entry and any missing parent directories (0755). Adding the same path
    /// again with the same entry is a no-op; with another entry it is an error.
    pub fn add(&mut self, path: &str, entry: Entry) -> Result<(), CpioError> {
        let p = clean(path)?;
        let mut parent = String::new();
        let comps: Vec<&str> = p.split('/').collect();
        for c in comps.split_last().map_or(&[][..], |(_, parents)| parents) {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(c);
            match self.entries.get(&parent) {
                Some(Entry {
                    kind: Kind::Dir, ..
                }) => {}
                Some(_) => return Err(CpioError::Conflict { path: parent }),
                None => {
                    self.entries.insert(
                        parent.clone(),
                        Entry {
                            kind: Kind::Dir,
                            perm: 0o755,
                        },
                    );
                }
            }
        }
        match self.entries.get(&p) {
            Some(old) if *old == entry => Ok(()),
            Some(old) if old.kind == Kind::Dir && entry.kind == Kind::Dir => {
                self.entries.insert(p, entry);
                Ok(())
            }
            Some(_) => Err(CpioError::Conflict { path: p }),
            None => {
                self.entries.insert(p, entry);
                Ok(())
            }
        }
    }

    pub fn dir(&mut self, path: &str) -> Result<(), CpioError> {
        self.add(
            path,
            Entry {
                kind: Kind::Dir,
                perm: 0o755,
            },
        )
    }

    pub fn file(&mut self, path: &str, data: Vec<u8>, perm: u32) -> Result<(), CpioError> {
        self.add(
            path,
            Entry {
                kind: Kind::File(data),
                perm,
            },
        )
    }

    /// Serialises the archive as newc with the given mtime for every entry.
    pub fn write(&self, mtime: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (ino, (path, e)) in (1u32..).zip(self.entries.iter()) {
            let (data, rdev): (&[u8], (u32, u32)) = match &e.kind {
                Kind::File(d) => (d, (0, 0)),
                Kind::Symlink(t) => (t.as_bytes(), (0, 0)),
                Kind::CharDev { major, minor } | Kind::BlockDev { major, minor } => {
                    (&[], (*major, *minor))
                }
                Kind::Dir => (&[], (0, 0)),
            };
            let nlink = if e.kind == Kind::Dir { 2 } else { 1 };
            header(
                &mut out,
                ino,
                e.mode(),
                nlink,
                mtime,
                u32::try_from(data.len()).unwrap_or(u32::MAX),
                rdev,
                path,
            );
            out.extend_from_slice(data);
            pad4(&mut out);
        }
        header(&mut out, 0, 0, 1, 0, 0, (0, 0), "TRAILER!!!");
        out
    }
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one argument per field of the newc header"
)]
fn header(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    mtime: u32,
    size: u32,
    rdev: (u32, u32),
    name: &str,
) {
    use std::fmt::Write;
    let mut h = String::with_capacity(110);
    h.push_str("070701");
    for v in [
        ino,
        mode,
        0,
        0,
        nlink,
        mtime,
        size,
        0,
        0,
        rdev.0,
        rdev.1,
        u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
        0,
    ] {
        let _ = write!(h, "{v:08X}");
    }
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
}

/// One entry read back from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedEntry {
    pub path: String,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u32,
    pub size: u32,
    pub rdev: (u32, u32),
    /// File contents or symlink target.
    pub data: Vec<u8>,
}

impl fmt::Display for ListedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match self.mode & 0o170000 {
            0o040000 => 'd',
            0o120000 => 'l',
            0o020000 => 'c',
            0o060000 => 'b',
            _ => '-',
        };
        let mut perm = String::new();
        for (i, ch) in "rwxrwxrwx".chars().enumerate() {
            perm.push(if self.mode & (0o400 >> i) != 0 {
                ch
            } else {
                '-'
            });
        }
        let size = if t == 'c' || t == 'b' {
            format!("{}, {}", self.rdev.0, self.rdev.1)
        } else {
            self.size.to_string()
        };
        write!(
            f,
            "{t}{perm} {}/{} {size:>9} {}",
            self.uid, self.gid, self.path
        )?;
        if t == 'l' {
            write!(f, " -> {}", String::from_utf8_lossy(&self.data))?;
        }
        Ok(())
    }
}

/// One archive read from a stream of archives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archived {
    pub entries: Vec<ListedEntry>,
    /// Offset just after the archive (after its trailer and the trailer's padding, or
    /// the end of the input).
    pub end: usize,
    /// Whether it ended with `TRAILER!!!` (else it ran to the end of the input).
    pub trailer: bool,
}

/// One header and its data at `off`: the entry (or `None` for the trailer) and the
/// offset of the next header.
fn read_entry(bytes: &[u8], off: usize) -> Result<(Option<ListedEntry>, usize), CpioError> {
    let bad = |what: &str| CpioError::Malformed {
        offset: off,
        what: what.to_string(),
    };
    let h = off
        .checked_add(110)
        .and_then(|end| bytes.get(off..end))
        .ok_or_else(|| bad("truncated header"))?;
    let (magic, fields) = h.split_at(6);
    if magic != b"070701" && magic != b"070702" {
        return Err(bad("not a newc header (magic 070701)"));
    }
    let mut f = [0u32; 13];
    for (v, hex) in f.iter_mut().zip(fields.chunks_exact(8)) {
        let s = std::str::from_utf8(hex).map_err(|_| bad("header field is not hex"))?;
        *v = u32::from_str_radix(s, 16).map_err(|_| bad("header field is not hex"))?;
    }
    let [_, mode, uid, gid, _, mtime, size, _, _, rmaj, rmin, namesize, _] = f;
    let namesize = namesize as usize;
    let name_start = off + 110;
    let name = name_start
        .checked_add(namesize)
        .and_then(|end| bytes.get(name_start..end))
        .ok_or_else(|| bad("truncated name"))?;
    let Some((_, name)) = name.split_last() else {
        return Err(bad("empty name"));
    };
    let name = String::from_utf8_lossy(name).into_owned();
    let data_start = (name_start + namesize).div_ceil(4) * 4;
    let data = data_start
        .checked_add(size as usize)
        .and_then(|end| bytes.get(data_start..end))
        .ok_or_else(|| bad("truncated data"))?;
    let next = (data_start + size as usize).div_ceil(4) * 4;
    if name == "TRAILER!!!" {
        return Ok((None, next));
    }
    Ok((
        Some(ListedEntry {
            path: name,
            mode,
            uid,
            gid,
            mtime,
            size,
            rdev: (rmaj, rmin),
            data: data.to_vec(),
        }),
        next,
    ))
}

/// Reads the archive starting at `off`, up to and including its trailer (or to the end
/// of the input).
pub fn read_archive(bytes: &[u8], mut off: usize) -> Result<Archived, CpioError> {
    let mut entries = Vec::new();
    while off < bytes.len() {
        match read_entry(bytes, off)? {
            (Some(e), next) => {
                entries.push(e);
                off = next;
            }
            (None, next) => {
                return Ok(Archived {
                    entries,
                    end: next.min(bytes.len()),
                    trailer: true,
                })
            }
        }
    }
    Ok(Archived {
        entries,
        end: off.min(bytes.len()),
        trailer: false,
    })
}

/// Reads a newc archive (uncompressed; concatenated archives are read in turn).
pub fn read(bytes: &[u8]) -> Result<Vec<ListedEntry>, CpioError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    loop {
        // Padding between concatenated archives is zeros.
        off += bytes
            .get(off..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&b| b == 0)
            .count();
        if off >= bytes.len() {
            break;
        }
        let a = read_archive(bytes, off)?;
        out.extend(a.entries);
        off = a.end;
    }
    Ok(out)
}

/// Builds an archive of directories and regular files, then the trailer.
#[derive(Debug, Default)]
pub struct Writer {
    out: Vec<u8>,
    ino: u32,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            out: Vec::new(),
            ino: 1,
        }
    }

    fn header(&mut self, name: &str, mode: u32, size: usize) {
        let size = u32::try_from(size).unwrap_or(u32::MAX);
        header(&mut self.out, self.ino, mode, 1, 0, size, (0, 0), name);
        self.ino += 1;
    }

    fn pad(&mut self) {
        pad4(&mut self.out);
    }

    /// A directory (mode 0755).
    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.header(path, 0o040_755, 0);
        self
    }

    /// A regular file (mode 0644).
    pub fn file(&mut self, path: &str, data: &[u8]) -> &mut Self {
        self.header(path, 0o100_644, data.len());
        self.out.extend_from_slice(data);
        self.pad();
        self
    }

    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.header("TRAILER!!!", 0, 0);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Archive {
        let mut a = Archive::new();
        a.file("/init", b"#!init".to_vec(), 0o755).unwrap();
        a.add(
            "/dev/console",
            Entry {
                kind: Kind::CharDev { major: 5, minor: 1 },
                perm: 0o600,
            },
        )
        .unwrap();
        a.add(
            "bin/sh",
            Entry {
                kind: Kind::Symlink("busybox".into()),
                perm: 0o777,
            },
        )
        .unwrap();
        a.file("lib/modules/x/kernel/a.ko", vec![1, 2, 3, 4, 5], 0o644)
            .unwrap();
        a.dir("proc").unwrap();
        a
    }

    #[test]
    fn round_trip() {
        let a = sample();
        let bytes = a.write(1234);
        assert_eq!(bytes.len() % 4, 0);
        let l = read(&bytes).unwrap();
        let names: Vec<_> = l.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "bin",
                "bin/sh",
                "dev",
                "dev/console",
                "init",
                "lib",
                "lib/modules",
                "lib/modules/x",
                "lib/modules/x/kernel",
                "lib/modules/x/kernel/a.ko",
                "proc"
            ]
        );
        let console = l.iter().find(|e| e.path == "dev/console").unwrap();
        assert_eq!(console.mode, 0o020600);
        assert_eq!(console.rdev, (5, 1));
        assert_eq!(console.to_string(), "crw------- 0/0      5, 1 dev/console");
        let ko = l.iter().find(|e| e.path.ends_with("a.ko")).unwrap();
        assert_eq!(ko.data, vec![1, 2, 3, 4, 5]);
        assert!(l
            .iter()
            .all(|e| e.mtime == 1234 && e.uid == 0 && e.gid == 0));
        assert_eq!(
            l[1].to_string(),
            "lrwxrwxrwx 0/0         7 bin/sh -> busybox"
        );
        // Deterministic.
        assert_eq!(sample().write(1234), bytes);
    }

    #[test]
    fn conflicts_and_bad_paths() {
        let mut a = sample();
        assert!(matches!(
            a.file("init", b"other".to_vec(), 0o755),
            Err(CpioError::Conflict { .. })
        ));
        a.file("init", b"#!init".to_vec(), 0o755).unwrap();
        assert!(matches!(
            a.file("init/x", vec![], 0o644),
            Err(CpioError::Conflict { .. })
        ));
        for p in ["", "/", "a/../b", "a//b", "./a"] {
            assert!(
                matches!(a.file(p, vec![], 0o644), Err(CpioError::BadPath(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn malformed_archives() {
        let bytes = sample().write(0);
        assert!(read(&bytes[..50])
            .unwrap_err()
            .to_string()
            .contains("truncated header"));
        assert!(read(&bytes[..200]).is_err());
        let mut x = bytes.clone();
        x[0] = b'9';
        assert!(read(&x).unwrap_err().to_string().contains("magic"));
        let mut x = bytes.clone();
        x[10] = b'z';
        assert!(read(&x).unwrap_err().to_string().contains("not hex"));
        // Every truncation fails cleanly or reads a prefix; none panics.
        for n in 0..bytes.len() {
            let _ = read(&bytes[..n]);
        }
    }

    /// GNU cpio lists what we wrote.
    #[test]
    fn gnu_cpio_reads_it() {
        let mut w = Writer::new();
        w.dir("etc")
            .file("etc/x.json", b"{\"a\":1}\n")
            .file("etc/empty", b"");
        let bytes = w.finish();
        assert_eq!(bytes.len() % 4, 0);
        let mut child = std::process::Command::new("cpio")
            .args(["-i", "-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "etc\netc/x.json\netc/empty\n"
        );
    }
}

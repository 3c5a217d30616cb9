//! Files: atomic replacement, reading untrusted input safely, and writing an operator's
//! output file without replacing what is not a file.
//!
//! [`read_limited`] is how every input file (a BOM, a module, a kernel image, an event
//! log, a sysfs value) is read: the file type is checked before anything could block (a
//! FIFO with no writer would hang an `open(2)` for reading; a directory or `/dev/zero`
//! is not an input), the open is non-blocking, and at most `limit` bytes are accepted: a
//! larger file is an error naming the limit, never a partial read.
//!
//! [`write_output`] is how a command writes a file an operator names (`validator report
//! --svg OUT`, `mkinitramfs build -o OUT`): OUT is replaced only if it is absent or a
//! regular file. Anything else at OUT is refused before a byte is written and left as it
//! is: a directory, a device (`/dev/full`), a socket, and also a FIFO or a terminal
//! (OUT is replaced by rename, which would put a regular file in their place; a reader on
//! the other end cannot be told from a mistake, so the command refuses rather than
//! guessing). A symbolic link at OUT is refused too: it is neither followed (its target
//! is not written) nor replaced. The directory OUT goes in must exist: a missing one is
//! an error naming it, nothing is created. [`write_atomic`] (the init's own files under
//! `/run` and the new root) keeps creating its directory.
//! Limit: the type of OUT is judged just before the rename; a process that can write the
//! directory can still swap the entry in between (the rename then replaces its entry, it
//! never writes through it).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an input file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: is a {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("{path}: larger than the limit of {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
}

impl InputError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            InputError::Io { path, .. }
            | InputError::NotAFile { path, .. }
            | InputError::TooLarge { path, .. } => path,
        }
    }
}

/// What a file type is, in words, unless it is a regular file.
pub fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("directory")
    } else if t.is_fifo() {
        Some("FIFO")
    } else if t.is_socket() {
        Some("socket")
    } else if t.is_char_device() {
        Some("character device")
    } else if t.is_block_device() {
        Some("block device")
    } else {
        Some("special file")
    }
}

/// Why an output file could not be written: each names the path it is about.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: exists and is a {kind}, not a regular file: refused (an output only replaces a regular file)")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("{path}: is a symbolic link: refused (an output neither follows nor replaces a link)")]
    Symlink { path: PathBuf },
    #[error("{path}: the directory to write into does not exist (nothing was created)")]
    NoDirectory { path: PathBuf },
    #[error("{path}: the directory to write into is a {kind}, not a directory")]
    NotADirectory { path: PathBuf, kind: &'static str },
    #[error("{path}: cannot write the temporary file {tmp} beside it: {source}")]
    Temp {
        path: PathBuf,
        tmp: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a file name to write (a directory, or a name ending in /)")]
    NoName { path: PathBuf },
}

impl OutputError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            OutputError::Io { path, .. }
            | OutputError::NotAFile { path, .. }
            | OutputError::Symlink { path }
            | OutputError::NoDirectory { path }
            | OutputError::NotADirectory { path, .. }
            | OutputError::Temp { path, .. }
            | OutputError::NoName { path } => path,
        }
    }
}

/// The file name an output path writes: refused when there is none (`.`, `..`, `/`) or
/// the path ends in `/` (it names a directory, which `open(2)` would refuse to create as
/// a file).
pub fn output_name(path: &Path) -> Result<&std::ffi::OsStr, OutputError> {
    use std::os::unix::ffi::OsStrExt;
    let no = || OutputError::NoName {
        path: path.to_path_buf(),
    };
    if path.as_os_str().as_bytes().ends_with(b"/") {
        return Err(no());
    }
    path.file_name().ok_or_else(no)
}

/// The directory an output path goes in (`.` for a bare name).
pub fn output_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Checks that `dir` exists and is a directory (a link to one is followed: it is where
/// the operator asked the output to go).
pub fn check_output_dir(dir: &Path) -> Result<(), OutputError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) => Err(OutputError::NotADirectory {
            path: dir.to_path_buf(),
            kind: kind_of(m.file_type()).unwrap_or("regular file"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(OutputError::NoDirectory {
            path: dir.to_path_buf(),
        }),
        Err(source) => Err(OutputError::Io {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Checks what is at an output path, without following a link: `Ok(false)` nothing,
/// `Ok(true)` a regular file (to be replaced); anything else is refused.
pub fn check_output_target(path: &Path) -> Result<bool, OutputError> {
    output_target(path).map(|m| m.is_some())
}

/// [`check_output_target`], with the regular file's metadata when there is one.
pub fn output_target(path: &Path) -> Result<Option<std::fs::Metadata>, OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(OutputError::Symlink {
            path: path.to_path_buf(),
        }),
        Ok(m) => match kind_of(m.file_type()) {
            None => Ok(Some(m)),
            Some(kind) => Err(OutputError::NotAFile {
                path: path.to_path_buf(),
                kind,
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(OutputError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A temporary name next to `path`'s file name: `.NAME.PID.TAG`.
pub fn temp_name(dir: &Path, name: &std::ffi::OsStr, tag: &str) -> PathBuf {
    let mut t = std::ffi::OsString::from(".");
    t.push(name);
    t.push(format!(".{}.{tag}", std::process::id()));
    dir.join(t)
}

/// Creates `tmp`, the temporary file for output `path` (never an existing file, never
/// through a link), writes and syncs `bytes`; on a failure `tmp` is removed again.
pub fn write_new_file(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let io = |source| OutputError::Temp {
        path: path.to_path_buf(),
        tmp: tmp.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(tmp)
        .map_err(io)?;
    let r = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = r {
        let _ = std::fs::remove_file(tmp);
        return Err(io(e));
    }
    Ok(())
}

/// Writes an operator's output file: replaces `path` atomically if it is absent or a
/// regular file, refuses anything else, never creates a directory (the module doc has
/// the rule). On a failure nothing is left behind and `path` is unchanged.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let name = output_name(path)?;
    let dir = output_dir(path);
    check_output_dir(dir)?;
    check_output_target(path)?;
    let tmp = temp_name(dir, name, "tmp");
    write_new_file(path, &tmp, bytes)?;
    // Judge the target again just before the rename, which replaces whatever is there.
    let renamed = check_output_target(path).and_then(|_| {
        std::fs::rename(&tmp, path).map_err(|source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        })
    });
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Opens `path` for reading if it is a regular file (or, with `block_ok`, a block
/// device); never blocks on a FIFO.
pub fn open_input(path: &Path, block_ok: bool) -> Result<File, InputError> {
    open_input_metadata(path, block_ok).map(|(f, _)| f)
}

/// [`open_input`], with the metadata of what was opened (`fstat(2)` on the open file,
/// which the check already made).
pub fn open_input_metadata(
    path: &Path,
    block_ok: bool,
) -> Result<(File, std::fs::Metadata), InputError> {
    let io = |source| InputError::Io {
        path: path.to_path_buf(),
        source,
    };
    let check = |t: std::fs::FileType| match kind_of(t) {
        None => Ok(()),
        Some(_) if block_ok && t.is_block_device() => Ok(()),
        Some(kind) => Err(InputError::NotAFile {
            path: path.to_path_buf(),
            kind,
        }),
    };
    check(std::fs::metadata(path).map_err(io)?.file_type())?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    // The path may have changed between the two looks: judge what was opened.
    let meta = f.metadata().map_err(io)?;
    check(meta.file_type())?;
    Ok((f, meta))
}

/// The limit for one sysfs attribute (`dev`, `size`, `module/compression`, ...). sysfs
/// reports every attribute's size as one page (4096 bytes on x86-64) whatever it holds,
/// and a value never exceeds a page, so a smaller limit would refuse every sysfs file
/// before reading it.
pub const SYSFS_VALUE_MAX: u64 = 4096;

/// Reads a whole regular file of at most `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let f = open_input(path, false)?;
    read_file_limited(f, path, limit)
}

/// Reads an opened file to its end, refusing more than `limit` bytes (a regular file
/// whose size already exceeds the limit is refused before any byte is read).
pub fn read_file_limited(f: File, path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    read_open_limited(&f, path, limit)
}

/// [`read_file_limited`] through a borrowed file, which stays open for the caller (the
/// module loader hands the same file to the kernel after judging its bytes).
pub fn read_open_limited(f: &File, path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let meta = f.metadata().map_err(|source| InputError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.is_file() && meta.len() > limit {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    // A regular file's size is known: one allocation of it (and the byte that shows the
    // end) instead of growing, and copying, the buffer while reading.
    let mut buf = if meta.is_file() {
        Vec::with_capacity(usize::try_from(meta.len()).map_or(0, |n| n.saturating_add(1)))
    } else {
        Vec::new()
    };
    f.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|source| InputError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(buf)
}

/// Reads a small text file (sysfs, procfs) of at most `limit` bytes as UTF-8.
pub fn read_text_limited(path: &Path, limit: u64) -> Result<String, InputError> {
    let bytes = read_limited(path, limit)?;
    String::from_utf8(bytes).map_err(|_| InputError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8"),
    })
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync,
/// rename, fsync of the directory. Creates the directory if needed. A reader sees the
/// old file or the new one, never a part.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    std::fs::create_dir_all(dir)?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp: PathBuf = dir.join(tmp_name);
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Rewrites the whole of an existing file in place, as GRUB's `save_env` rewrites the
/// blocks of `grubenv`: no truncation, no rename, the same size; then fsync and read
/// back. The file must already have exactly `bytes.len()` bytes.
pub fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    write_in_place_file(&f, path, bytes)
}

/// [`write_in_place`] through a file the caller opened read-write (e.g. without following
/// symlinks, `crate::sys::beneath`); `path` names it in errors.
pub fn write_in_place_file(f: &File, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata()?.len();
    if len != bytes.len() as u64 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} has {len} bytes, not the {} being written in place",
                path.display(),
                bytes.len()
            ),
        ));
    }
    f.write_all_at(bytes, 0)?;
    f.sync_all()?;
    let mut back = vec![0u8; bytes.len()];
    f.read_exact_at(&mut back, 0)?;
    if back != bytes {
        return Err(std::io::Error::other(format!(
            "{}: read back differs from what was written",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vld-fs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tmpdir("atomic");
        let p = dir.join("sub/report.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An output replaces only a regular file: a FIFO, a character device, a directory
    /// and a link at OUT are refused and stay as they were; a missing directory is named,
    /// not created; nothing is left behind.
    #[test]
    fn outputs_replace_only_regular_files() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tmpdir("output");
        let f = dir.join("out");
        write_output(&f, b"one").unwrap();
        write_output(&f, b"two").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = write_output(&fifo, b"x").unwrap_err();
        assert!(
            e.to_string().contains("is a FIFO, not a regular file"),
            "{e}"
        );
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = write_output(&sub, b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = write_output(&link, b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        let missing = dir.join("missing/deeper/out");
        let e = write_output(&missing, b"x").unwrap_err();
        assert_eq!(e.path(), dir.join("missing/deeper"));
        assert!(!dir.join("missing").exists());
        let e = write_output(&f.join("x"), b"x").unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["fifo", "link", "out", "sub"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// sysfs says every attribute is a page long: [`SYSFS_VALUE_MAX`] reads a real one
    /// (`/sys/class/mem/null/dev`, present wherever sysfs is mounted), and one byte less
    /// refuses it before reading, naming the file and the limit.
    #[test]
    fn sysfs_values_fit_the_sysfs_limit() {
        let p = Path::new("/sys/class/mem/null/dev");
        assert_eq!(read_text_limited(p, SYSFS_VALUE_MAX).unwrap(), "1:3\n");
        let e = read_text_limited(p, SYSFS_VALUE_MAX - 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "/sys/class/mem/null/dev: larger than the limit of {} bytes",
                SYSFS_VALUE_MAX - 1
            )
        );
    }

    #[test]
    fn inputs_are_checked_before_reading() {
        let dir = tmpdir("input");
        let f = dir.join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_limited(&f, 5).unwrap(), b"12345");
        let e = read_limited(&f, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: larger than the limit of 4 bytes", f.display())
        );
        let e = read_limited(&dir, 10).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("is a directory, not a regular file"),
            "{e}"
        );
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_limited(&fifo, 10).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
        let e = read_limited(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = read_limited(&dir.join("missing"), 10).unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e}");
        assert_eq!(e.path(), dir.join("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

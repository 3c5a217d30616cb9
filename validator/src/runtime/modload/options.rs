//! The module options a root configures, read as `modprobe` reads them there: its
//! `modprobe.d` directories ([`crate::formats::kmod::modprobe::CONFIG_DIRS`], paths and
//! symbolic links resolved inside the root, as the root will see them once it is `/`),
//! then the kernel command line.
//!
//! Contract: a directory that does not exist is skipped, as `modprobe` skips it; an entry
//! that is a directory (or links to one) is left out before names are matched across
//! directories, as kmod leaves it out. Refused, as an error naming the path, so a node
//! never boots on a configuration other than the one `modprobe` would read: a
//! configuration path that is a file (kmod would read it as one file), a name that is not
//! UTF-8, a file that cannot be read whole (too large, unreadable, a link leading
//! nowhere), a line that is not UTF-8 (kmod would pass its bytes on), more than
//! [`modprobe::CONFIG_FILES_MAX`] files or [`CONFIG_TOTAL_MAX`] bytes in all. An entry
//! that is not a regular file (a FIFO, a device) is skipped and noted. What kmod would
//! log and skip is logged ([`Config::ignored`], the first [`NOTES_LOGGED`]).

use std::path::{Path, PathBuf};

use crate::formats::kmod::modprobe::{
    self, Config, Origin, Refusal, CONFIG_DIRS, CONFIG_TOTAL_MAX,
};
use crate::runtime::rootpath::{resolve_in_root, ResolveError};
use crate::util::fs::{read_limited, InputError};

/// The most notes logged.
pub const NOTES_LOGGED: usize = 32;

/// Why a root's module configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error("module configuration {path}: {source}")]
    Resolve {
        path: String,
        #[source]
        source: ResolveError,
    },
    #[error("module configuration {}: {source}", .path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("module configuration {0}: a file where modprobe reads a directory")]
    NotADir(String),
    #[error("module configuration {0}: the name is not UTF-8")]
    Name(String),
    #[error("module configuration: {0}")]
    File(#[from] InputError),
    #[error(
        "module configuration {0}: a line that is not UTF-8 (modprobe would pass its bytes on)"
    )]
    NotUtf8(Origin),
    #[error(
        "module configuration: more than {} files or {CONFIG_TOTAL_MAX} bytes",
        modprobe::CONFIG_FILES_MAX
    )]
    TooMuch,
}

/// The configuration `modprobe` would read in `root` (`/` for the initramfs, the new root
/// before the handover), then `cmdline` (the bytes of `/proc/cmdline`) when given.
pub fn read_config(root: &Path, cmdline: Option<&[u8]>) -> Result<Config, OptionsError> {
    let mut cfg = Config::default();
    let mut dirs: Vec<Vec<String>> = Vec::new();
    let mut count = 0usize;
    for d in CONFIG_DIRS {
        let abs = format!("/{d}");
        dirs.push(list(root, &abs, &mut count)?);
    }
    let mut total = 0usize;
    for (i, name) in modprobe::config_files(&dirs) {
        let Some(d) = CONFIG_DIRS.get(i) else {
            continue;
        };
        let abs = format!("/{d}/{name}");
        let path = resolve_in_root(root, &abs).map_err(|source| OptionsError::Resolve {
            path: abs.clone(),
            source,
        })?;
        match read_limited(&path, modprobe::CONFIG_FILE_MAX as u64) {
            Ok(bytes) => cfg
                .add_file_checked(&abs, &bytes, &mut total)
                .map_err(|r| match r {
                    Refusal::TooMuch => OptionsError::TooMuch,
                    Refusal::NotUtf8(o) => OptionsError::NotUtf8(o),
                })?,
            Err(InputError::NotAFile { kind, .. }) => cfg.ignored.push((
                Origin::File { file: abs, line: 0 },
                format!("a {kind}, not a file"),
            )),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(line) = cmdline {
        cfg.add_cmdline(line);
    }
    for (o, what) in cfg.ignored.iter().take(NOTES_LOGGED) {
        log::warn!("module configuration: {o}: ignored ({what}), as modprobe ignores it");
    }
    if cfg.ignored.len() > NOTES_LOGGED {
        log::warn!(
            "module configuration: {} more ignored",
            cfg.ignored.len() - NOTES_LOGGED
        );
    }
    if !cfg.not_utf8.is_empty() {
        log::warn!(
            "module configuration: {} command-line word(s) naming a module are not UTF-8: left out",
            cfg.not_utf8.len()
        );
    }
    Ok(cfg)
}

/// The names in the configuration directory `abs` of `root` that are not directories
/// (nor links to one), as kmod lists them; empty when there is no such directory.
fn list(root: &Path, abs: &str, count: &mut usize) -> Result<Vec<String>, OptionsError> {
    let dir = match resolve_in_root(root, abs) {
        Ok(p) => p,
        Err(ResolveError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new())
        }
        Err(source) => {
            return Err(OptionsError::Resolve {
                path: abs.to_string(),
                source,
            })
        }
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(OptionsError::NotADir(abs.to_string()))
        }
        Err(source) => return Err(OptionsError::Dir { path: dir, source }),
    };
    let mut names = Vec::new();
    for e in entries {
        let e = e.map_err(|source| OptionsError::Dir {
            path: dir.clone(),
            source,
        })?;
        *count += 1;
        if *count > modprobe::CONFIG_FILES_MAX {
            return Err(OptionsError::TooMuch);
        }
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| OptionsError::Name(format!("{abs}/{}", n.to_string_lossy())))?;
        // kmod's `fstatat` follows a link; inside the root, so does this.
        let is_dir = resolve_in_root(root, &format!("{abs}/{name}"))
            .ok()
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.is_dir());
        if is_dir {
            continue;
        }
        names.push(name);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files from every directory in name order, a name in /etc hiding /lib's, a link
    /// resolved inside the root, a directory left out (so /lib's file of its name is
    /// read) and a FIFO skipped and noted, a missing directory skipped, the command line
    /// last; an unreadable file, a line or a name that is not UTF-8, and a configuration
    /// path that is a file are errors.
    #[test]
    fn reads_a_root_as_modprobe_would() {
        let t = std::env::temp_dir().join(format!("modopts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        for d in ["etc/modprobe.d", "lib/modprobe.d", "usr/share/m"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        std::fs::write(t.join("etc/modprobe.d/b.conf"), "options m b=1\n").unwrap();
        std::fs::write(t.join("lib/modprobe.d/b.conf"), "options m hidden=1\n").unwrap();
        std::fs::write(t.join("lib/modprobe.d/a.conf"), "options m a=1\n").unwrap();
        std::fs::write(t.join("lib/modprobe.d/d.conf"), "options m d=1\n").unwrap();
        std::fs::write(t.join("usr/share/m/c"), "options m c=1\nblacklist x\n").unwrap();
        std::os::unix::fs::symlink("/usr/share/m/c", t.join("lib/modprobe.d/c.conf")).unwrap();
        std::fs::create_dir(t.join("etc/modprobe.d/d.conf")).unwrap();
        nix::unistd::mkfifo(
            &t.join("etc/modprobe.d/e.conf"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let c = read_config(&t, Some(b"m.z=9 quiet\n")).unwrap();
        assert_eq!(c.options("m"), "a=1 b=1 c=1 d=1 z=9");
        assert!(c.blacklisted("x").is_some());
        let ignored: Vec<_> = c.ignored.iter().map(|(o, w)| format!("{o} {w}")).collect();
        assert_eq!(ignored, ["/etc/modprobe.d/e.conf:0 a FIFO, not a file"]);

        std::fs::write(t.join("etc/modprobe.d/f.conf"), b"options m p=caf\xe9\n").unwrap();
        let e = read_config(&t, None).unwrap_err().to_string();
        assert!(
            e.contains("/etc/modprobe.d/f.conf:1: a line that is not UTF-8"),
            "{e}"
        );
        std::fs::remove_file(t.join("etc/modprobe.d/f.conf")).unwrap();

        let odd = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"\xff.conf");
        std::fs::write(t.join("etc/modprobe.d").join(odd), "").unwrap();
        let e = read_config(&t, None).unwrap_err().to_string();
        assert!(e.contains("the name is not UTF-8"), "{e}");
        std::fs::remove_file(t.join("etc/modprobe.d").join(odd)).unwrap();

        std::fs::remove_file(t.join("usr/share/m/c")).unwrap();
        let e = read_config(&t, None).unwrap_err().to_string();
        assert!(e.contains("/lib/modprobe.d/c.conf"), "{e}");

        std::fs::create_dir_all(t.join("run")).unwrap();
        std::fs::write(t.join("run/modprobe.d"), "options m r=1\n").unwrap();
        let e = read_config(&t, None).unwrap_err().to_string();
        assert!(
            e.contains("/run/modprobe.d: a file where modprobe reads a directory"),
            "{e}"
        );
        std::fs::remove_dir_all(&t).unwrap();
    }
}

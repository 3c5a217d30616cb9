//! The module options a root configures, read as `modprobe` reads them there: its
//! `modprobe.d` directories ([`crate::formats::kmod::modprobe::CONFIG_DIRS`], paths and
//! symbolic links resolved inside the root, as the root will see them once it is `/`),
//! then the kernel command line.
//!
//! Contract: a directory that does not exist is skipped, as `modprobe` skips it; a
//! configuration file that exists and cannot be read whole (too large, unreadable, a
//! link leading nowhere) is an error naming it, so a node never boots on half its
//! configuration; an entry that is not a regular file (a directory, a FIFO) is skipped
//! and noted in [`Config::ignored`], as are names that are not UTF-8.

use std::path::{Path, PathBuf};

use crate::formats::kmod::modprobe::{self, Config, Origin, CONFIG_DIRS};
use crate::runtime::rootpath::{resolve_in_root, ResolveError};
use crate::util::fs::{read_limited, InputError};

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
    #[error("module configuration: {0}")]
    File(#[from] InputError),
    #[error("module configuration: more than {} files", modprobe::CONFIG_FILES_MAX)]
    TooMany,
}

/// The configuration `modprobe` would read in `root` (`/` for the initramfs, the new root
/// before the handover), then `cmdline` (the bytes of `/proc/cmdline`) when given.
pub fn read_config(root: &Path, cmdline: Option<&[u8]>) -> Result<Config, OptionsError> {
    let mut cfg = Config::default();
    let mut dirs: Vec<Vec<String>> = Vec::new();
    let mut count = 0usize;
    for d in CONFIG_DIRS {
        let abs = format!("/{d}");
        let dir = match resolve_in_root(root, &abs) {
            Ok(p) => p,
            Err(ResolveError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                dirs.push(Vec::new());
                continue;
            }
            Err(source) => return Err(OptionsError::Resolve { path: abs, source }),
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // Not a directory, or gone: modprobe lists nothing there either.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                dirs.push(Vec::new());
                continue;
            }
            Err(source) => return Err(OptionsError::Dir { path: dir, source }),
        };
        let mut names = Vec::new();
        for e in entries {
            let e = e.map_err(|source| OptionsError::Dir {
                path: dir.clone(),
                source,
            })?;
            count += 1;
            if count > modprobe::CONFIG_FILES_MAX {
                return Err(OptionsError::TooMany);
            }
            match e.file_name().into_string() {
                Ok(n) => names.push(n),
                Err(n) => cfg.ignored.push((
                    Origin::File {
                        file: format!("{abs}/{}", n.to_string_lossy()),
                        line: 0,
                    },
                    "a name that is not UTF-8".into(),
                )),
            }
        }
        dirs.push(names);
    }
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
            Ok(bytes) => cfg.add_file(&abs, &bytes),
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
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files from every directory in name order, a name in /etc hiding /lib's, a link
    /// resolved inside the root, a directory and a FIFO skipped and noted, a missing
    /// directory skipped, the command line last; an unreadable file is an error.
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
        std::fs::write(t.join("usr/share/m/c"), "options m c=1\nblacklist x\n").unwrap();
        std::os::unix::fs::symlink("/usr/share/m/c", t.join("lib/modprobe.d/c.conf")).unwrap();
        std::fs::create_dir(t.join("etc/modprobe.d/d.conf")).unwrap();
        nix::unistd::mkfifo(
            &t.join("etc/modprobe.d/e.conf"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let c = read_config(&t, Some(b"m.z=9 quiet\n")).unwrap();
        assert_eq!(c.options("m"), "a=1 b=1 c=1 z=9");
        assert!(c.blacklisted("x").is_some());
        let ignored: Vec<_> = c.ignored.iter().map(|(o, w)| format!("{o} {w}")).collect();
        assert_eq!(
            ignored,
            [
                "/etc/modprobe.d/d.conf:0 a directory, not a file",
                "/etc/modprobe.d/e.conf:0 a FIFO, not a file"
            ]
        );
        std::fs::remove_file(t.join("usr/share/m/c")).unwrap();
        let e = read_config(&t, None).unwrap_err().to_string();
        assert!(e.contains("/lib/modprobe.d/c.conf"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }
}

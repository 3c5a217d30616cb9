//! Files the CLI writes: a set of files written all or none (certificates, man pages, a
//! credential and its secret, a report's renderings), and the rule every output follows.
//!
//! Contract: the rule is [`validator::util::fs::write_output`]'s: an output replaces only
//! a regular file (absent is fine); a directory, a device, a socket, a FIFO or a terminal
//! at an output's name is refused and left as it is, as is a symbolic link (neither
//! followed nor replaced); the directory written into must exist ([`write_all_or_nothing`]
//! alone may create its one directory when the parent exists, and removes it again on
//! failure): nothing else is created. A set is all or none: every name and directory is
//! judged before anything is written; two outputs that are the same file (the same name
//! in the same directory however spelled, or two names of one existing file) are refused;
//! every file is written and synced under a temporary name, every file it replaces is kept
//! under a second name (a hard link), then all are renamed into place; if one rename
//! fails, the ones done are undone (the old files put back, the new ones removed). On any
//! failure nothing of this call is left behind, every file that was there is as it was,
//! and the message names the path.

use std::path::{Path, PathBuf};

use validator::util::fs::{
    check_output_dir, check_output_target, output_dir, output_name, output_target, temp_name,
    write_new_file, OutputError,
};

use crate::Usage;

/// Writes every `(name, bytes)` into `dir`, or none (the module doc has the rule).
pub(crate) fn write_all_or_nothing(dir: &Path, files: &[(String, &[u8])]) -> Result<(), Usage> {
    // The directory: it exists, or its parent does and it is made (and unmade on failure).
    let created = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            check_output_dir(output_dir(dir))?;
            std::fs::create_dir(dir).map_err(|source| OutputError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
            true
        }
        _ => {
            check_output_dir(dir)?;
            false
        }
    };
    let paths: Vec<(PathBuf, &[u8])> = files.iter().map(|(f, b)| (dir.join(f), *b)).collect();
    let set: Vec<(&Path, &[u8])> = paths.iter().map(|(p, b)| (p.as_path(), *b)).collect();
    let r = write_set(&set);
    if r.is_err() && created {
        let _ = std::fs::remove_dir(dir);
    }
    r
}

/// Writes every `(path, bytes)`, each in its own directory, or none (the module doc has
/// the rule).
pub(crate) fn write_set(files: &[(&Path, &[u8])]) -> Result<(), Usage> {
    let mut targets = Vec::new();
    for (p, _) in files {
        targets.push(judge(p)?);
    }
    for (i, a) in targets.iter().enumerate() {
        if let Some(b) = targets.iter().skip(i + 1).find(|b| a.same_file(b)) {
            return Err(Usage(format!(
                "{} and {}: the same file named twice as an output: refused (each output must be a file of its own; nothing was written)",
                a.path.display(),
                b.path.display()
            )));
        }
    }
    let mut w = Writing {
        temps: Vec::new(),
        olds: Vec::new(),
        placed: Vec::new(),
    };
    let r = w.write(&targets, files);
    if r.is_err() {
        w.undo();
    }
    Ok(r?)
}

/// One output, judged before anything is written.
struct Target {
    path: PathBuf,
    dir: PathBuf,
    name: std::ffi::OsString,
    /// The directory, resolved (to tell two spellings of one place apart).
    real_dir: PathBuf,
    /// A regular file is there (to be replaced): its device and inode.
    existing: Option<(u64, u64)>,
}

impl Target {
    fn same_file(&self, o: &Target) -> bool {
        (self.real_dir == o.real_dir && self.name == o.name)
            || (self.existing.is_some() && self.existing == o.existing)
    }
}

/// Checks `path`'s name, its directory and what is there now.
fn judge(path: &Path) -> Result<Target, OutputError> {
    use std::os::unix::fs::MetadataExt;
    let name = output_name(path)?.to_os_string();
    let dir = output_dir(path).to_path_buf();
    check_output_dir(&dir)?;
    let existing = output_target(path)?.map(|m| (m.dev(), m.ino()));
    let real_dir = std::fs::canonicalize(&dir).map_err(|source| OutputError::Io {
        path: dir.clone(),
        source,
    })?;
    Ok(Target {
        path: path.to_path_buf(),
        dir,
        name,
        real_dir,
        existing,
    })
}

/// What one all-or-none write has done so far, to undo it.
struct Writing {
    /// Temporary files written (removed at the end either way).
    temps: Vec<PathBuf>,
    /// `(old file's second name, its name)` for each file being replaced.
    olds: Vec<(PathBuf, PathBuf)>,
    /// `(name, replaced an old file)` for each file renamed into place.
    placed: Vec<(PathBuf, bool)>,
}

impl Writing {
    fn write(&mut self, targets: &[Target], files: &[(&Path, &[u8])]) -> Result<(), OutputError> {
        for (t, (_, bytes)) in targets.iter().zip(files) {
            let tmp = temp_name(&t.dir, &t.name, "tmp");
            write_new_file(&t.path, &tmp, bytes)?;
            self.temps.push(tmp);
        }
        // Keep every file about to be replaced under a second name: a file that cannot be
        // linked (immutable) will not be replaced either, and fails here, before any rename.
        for t in targets {
            if t.existing.is_some() {
                let old = temp_name(&t.dir, &t.name, "old");
                std::fs::hard_link(&t.path, &old).map_err(|source| OutputError::Io {
                    path: t.path.clone(),
                    source,
                })?;
                self.olds.push((old, t.path.clone()));
            }
        }
        let temps = std::mem::take(&mut self.temps);
        for (i, (tmp, t)) in temps.iter().zip(targets).enumerate() {
            // Judge each target again just before the rename replaces it.
            let r = check_output_target(&t.path).and_then(|_| {
                std::fs::rename(tmp, &t.path).map_err(|source| OutputError::Io {
                    path: t.path.clone(),
                    source,
                })
            });
            if let Err(e) = r {
                self.temps = temps.get(i..).unwrap_or_default().to_vec();
                return Err(e);
            }
            self.placed.push((t.path.clone(), t.existing.is_some()));
        }
        for (old, _) in std::mem::take(&mut self.olds) {
            let _ = std::fs::remove_file(old);
        }
        let mut dirs: Vec<&Path> = targets.iter().map(|t| t.real_dir.as_path()).collect();
        dirs.dedup();
        for d in dirs {
            if let Ok(d) = std::fs::File::open(d) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }

    /// Puts back what was there before: the old files, no new file, no temporary file.
    fn undo(&mut self) {
        for (p, replaced) in self.placed.drain(..) {
            if replaced {
                if let Some((old, _)) = self.olds.iter().find(|(_, t)| *t == p) {
                    let _ = std::fs::rename(old, &p);
                }
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
        for p in self.temps.drain(..) {
            let _ = std::fs::remove_file(p);
        }
        for (old, _) in self.olds.drain(..) {
            let _ = std::fs::remove_file(old);
        }
    }
}

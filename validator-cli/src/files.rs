//! Files the CLI writes: a set of files written all or none (certificates, man pages),
//! and the rule every output follows.
//!
//! Contract: the rule is [`validator::util::fs::write_output`]'s: an output replaces only
//! a regular file (absent is fine); a directory, a device, a socket, a FIFO or a terminal
//! at an output's name is refused and left as it is, as is a symbolic link (neither
//! followed nor replaced); the directory written into must exist, or its parent must
//! (the directory itself is then created, and removed again on failure): nothing else is
//! created. A set is all or none: every file is written and synced under a temporary
//! name, every file it replaces is kept under a second name (a hard link), then all are
//! renamed into place; if one rename fails, the ones done are undone (the old files put
//! back, the new ones removed). On any failure nothing of this call is left behind, and
//! the message names the path.

use std::path::{Path, PathBuf};

use validator::util::fs::{
    check_output_dir, check_output_target, output_dir, temp_name, write_new_file, OutputError,
};

use crate::Usage;

/// Writes every `(name, bytes)` into `dir`, or none (the module doc has the rule).
pub(crate) fn write_all_or_nothing(dir: &Path, files: &[(String, &[u8])]) -> Result<(), Usage> {
    let io = |p: &Path, source: std::io::Error| OutputError::Io {
        path: p.to_path_buf(),
        source,
    };
    // The directory: it exists, or its parent does and it is made (and unmade on failure).
    let created = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            check_output_dir(output_dir(dir))?;
            std::fs::create_dir(dir).map_err(|e| io(dir, e))?;
            true
        }
        _ => {
            check_output_dir(dir)?;
            false
        }
    };
    let mut w = Writing {
        dir,
        created,
        temps: Vec::new(),
        olds: Vec::new(),
        placed: Vec::new(),
    };
    let r = w.write(files);
    if r.is_err() {
        w.undo();
    }
    Ok(r?)
}

/// What one all-or-none write has done so far, to undo it.
struct Writing<'a> {
    dir: &'a Path,
    /// The directory was made by this call.
    created: bool,
    /// Temporary files written (removed at the end either way).
    temps: Vec<PathBuf>,
    /// `(old file's second name, its name)` for each file being replaced.
    olds: Vec<(PathBuf, PathBuf)>,
    /// `(name, replaced an old file)` for each file renamed into place.
    placed: Vec<(PathBuf, bool)>,
}

impl Writing<'_> {
    fn write(&mut self, files: &[(String, &[u8])]) -> Result<(), OutputError> {
        let mut targets = Vec::new();
        for (f, _) in files {
            let p = self.dir.join(f);
            targets.push((check_output_target(&p)?, p));
        }
        for ((f, bytes), (_, p)) in files.iter().zip(&targets) {
            let tmp = temp_name(self.dir, p.file_name().unwrap_or(f.as_ref()), "tmp");
            write_new_file(p, &tmp, bytes)?;
            self.temps.push(tmp);
        }
        // Keep every file about to be replaced under a second name: a file that cannot be
        // linked (immutable) will not be replaced either, and fails here, before any rename.
        for (exists, p) in &targets {
            if *exists {
                let old = temp_name(self.dir, p.file_name().unwrap_or_default(), "old");
                std::fs::hard_link(p, &old).map_err(|source| OutputError::Io {
                    path: p.clone(),
                    source,
                })?;
                self.olds.push((old, p.clone()));
            }
        }
        let temps = std::mem::take(&mut self.temps);
        for (i, (tmp, (exists, p))) in temps.iter().zip(&targets).enumerate() {
            // Judge each target again just before the rename replaces it.
            let r = check_output_target(p).and_then(|_| {
                std::fs::rename(tmp, p).map_err(|source| OutputError::Io {
                    path: p.clone(),
                    source,
                })
            });
            if let Err(e) = r {
                self.temps = temps.get(i..).unwrap_or_default().to_vec();
                return Err(e);
            }
            self.placed.push((p.clone(), *exists));
        }
        for (old, _) in std::mem::take(&mut self.olds) {
            let _ = std::fs::remove_file(old);
        }
        if let Ok(d) = std::fs::File::open(self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Puts back what was there before: the old files, no new file, no temporary file,
    /// no directory this call made.
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
        if self.created {
            let _ = std::fs::remove_dir(self.dir);
        }
    }
}

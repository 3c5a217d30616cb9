//! Files the CLI writes: a set of files written all or none (certificates, man pages).
//!
//! Contract: on any failure the temporary files and the directories this call created are
//! removed again; a target that exists and is not a regular file is refused first.

use std::path::{Path, PathBuf};

use crate::Usage;

/// Writes every `(name, bytes)` into `dir`, or none: each is first written and synced
/// under a temporary name, then all are renamed into place; on a failure the temporary
/// files, and the directories this call created, are removed again.
pub(crate) fn write_all_or_nothing(dir: &Path, files: &[(String, &[u8])]) -> Result<(), Usage> {
    use std::io::Write;
    let err = |p: &Path, e: std::io::Error| Usage(format!("{}: {e}", p.display()));
    // A target that exists and is not a regular file would fail the rename: refuse first.
    for (f, _) in files {
        let p = dir.join(f);
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            if !m.is_file() {
                return Err(Usage(format!(
                    "{}: exists and is not a regular file",
                    p.display()
                )));
            }
        }
    }
    // The directories to create, outermost first, so they can be removed on failure.
    let mut created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    created.reverse();
    let undo = |temps: &[PathBuf], created: &[PathBuf]| {
        for t in temps {
            let _ = std::fs::remove_file(t);
        }
        for d in created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        undo(&[], &created);
        return Err(err(dir, e));
    }
    let mut temps = Vec::new();
    for (f, bytes) in files {
        let tmp = dir.join(format!(".{f}.tmp"));
        let r = std::fs::File::create(&tmp).and_then(|mut h| {
            h.write_all(bytes)?;
            h.sync_all()
        });
        temps.push(tmp.clone());
        if let Err(e) = r {
            undo(&temps, &created);
            return Err(err(&tmp, e));
        }
    }
    for (i, ((f, _), tmp)) in files.iter().zip(&temps).enumerate() {
        let p = dir.join(f);
        if let Err(e) = std::fs::rename(tmp, &p) {
            undo(temps.get(i..).unwrap_or_default(), &[]);
            return Err(err(&p, e));
        }
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

//! One resolver of paths inside a root that is not `/` yet: the new root before
//! `switch_root`. A path is followed component by component, symbolic links included,
//! as the new root will see it once it is `/` (an absolute link target starts again at
//! the root, `..` never leaves it).
//!
//! Contract: at most [`SYMLINKS_MAX`] links are followed (then [`ResolveError::Loop`]); a
//! component that cannot be looked up is an error naming the path tried, except that a
//! lookup may keep missing components as they are ([`Lookup::keep_missing`], for
//! directories to be created) and may leave one top-level directory's contents
//! unresolved ([`Lookup::opaque`], for `/run`, which `switch_root` replaces).
//!
//! Current limits: the lookup uses `lstat` and `readlink` on paths, not `openat2` with
//! `RESOLVE_IN_ROOT`, so a root that changes while it is resolved is not guarded against
//! (the new root is the image's, mounted by us and not yet running anything).

use std::path::{Path, PathBuf};

/// Most symbolic links followed in one resolution (as the kernel's `MAXSYMLINKS`).
pub const SYMLINKS_MAX: u32 = 40;

/// How a lookup treats what is not there.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lookup<'a> {
    /// A component that does not exist is kept as it is (a directory to be created)
    /// instead of being an error.
    pub keep_missing: bool,
    /// A top-level directory whose contents are kept as written, not looked up in the
    /// root.
    pub opaque: Option<&'a str>,
}

/// Why a path cannot be resolved inside the root.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// More than [`SYMLINKS_MAX`] symbolic links on the way (`path` is the path asked for).
    #[error("too many levels of symbolic links")]
    Loop { path: String },
    /// A component could not be looked up or read as a link.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The components of `path` inside `root`, symbolic links followed as if `root` were `/`
/// (see the module's documentation for `lookup`).
pub fn components(root: &Path, path: &str, lookup: Lookup) -> Result<Vec<String>, ResolveError> {
    let mut parts: Vec<String> = Vec::new();
    let mut todo: Vec<String> = path.split('/').rev().map(str::to_string).collect();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                parts.pop();
                continue;
            }
            _ => {}
        }
        if let (Some(o), Some(first)) = (lookup.opaque, parts.first()) {
            if first == o {
                parts.push(c);
                continue;
            }
        }
        let mut cand = root.to_path_buf();
        cand.extend(&parts);
        cand.push(&c);
        match std::fs::symlink_metadata(&cand) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > SYMLINKS_MAX {
                    return Err(ResolveError::Loop {
                        path: path.to_string(),
                    });
                }
                let target = std::fs::read_link(&cand).map_err(|source| ResolveError::Io {
                    path: cand.clone(),
                    source,
                })?;
                let t = target.to_string_lossy().into_owned();
                if t.starts_with('/') {
                    parts.clear();
                }
                todo.extend(t.split('/').rev().map(str::to_string));
            }
            Ok(_) => parts.push(c),
            Err(e) if lookup.keep_missing && e.kind() == std::io::ErrorKind::NotFound => {
                parts.push(c)
            }
            Err(source) => return Err(ResolveError::Io { path: cand, source }),
        }
    }
    Ok(parts)
}

/// Resolves `path` inside `root` following symlinks as if `root` were `/`; every
/// component must exist.
pub fn resolve_in_root(root: &Path, path: &str) -> Result<PathBuf, ResolveError> {
    let mut out = root.to_path_buf();
    out.extend(components(root, path, Lookup::default())?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strict lookup fails on a missing component, naming it; a lenient one keeps it,
    /// and leaves the opaque directory's contents as written.
    #[test]
    fn missing_and_opaque_components() {
        let root = std::env::temp_dir().join(format!("vld-rootpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::os::unix::fs::symlink("/run/x", root.join("etc/link")).unwrap();
        std::os::unix::fs::symlink("/nowhere", root.join("run/x")).unwrap();
        let e = resolve_in_root(&root, "/etc/missing/y").unwrap_err();
        assert!(matches!(e, ResolveError::Io { .. }), "{e}");
        assert!(e.to_string().contains("etc/missing"), "{e}");
        let lenient = Lookup {
            keep_missing: true,
            opaque: Some("run"),
        };
        assert_eq!(
            components(&root, "/etc/missing/../new/y", lenient).unwrap(),
            ["etc", "new", "y"]
        );
        // `/run/x` is a link in the root, but `/run` is opaque: not followed.
        assert_eq!(
            components(&root, "/etc/link/z", lenient).unwrap(),
            ["run", "x", "z"]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}

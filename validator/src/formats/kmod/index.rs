//! The module index inside the initramfs, in kmod's own file formats:
//! `modules.dep` (`path: dep-path dep-path ...`, every transitive dependency, the one to
//! load first last), `modules.softdep` (`softdep NAME pre: A B post: C`) and
//! `modules.builtin` (one path per built-in module). mkinitramfs writes them; the init
//! reads them. Parsing is pure and tolerant of comments and blank lines; a malformed line
//! is an error naming the file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::formats::kmod::normalize_name;

/// An index problem.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{path}:{line}: {what}")]
    Malformed {
        path: PathBuf,
        line: usize,
        what: String,
    },
}

/// Pre- and post-softdeps of one module (names, not paths).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SoftDeps {
    pub pre: Vec<String>,
    pub post: Vec<String>,
}

/// One module in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Path relative to the module directory (`kernel/fs/ext4/ext4.ko`).
    pub path: String,
    /// Normalised names of all dependencies, in modules.dep order.
    pub deps: Vec<String>,
}

/// The parsed index.
#[derive(Debug, Clone, Default)]
pub struct Index {
    pub entries: BTreeMap<String, Entry>,
    pub softdeps: BTreeMap<String, SoftDeps>,
    pub builtin: BTreeSet<String>,
}

/// The module name of a path: the file name without `.ko[.xz|.zst|.gz]`, `-` as `_`.
pub fn name_of_path(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file
        .strip_suffix(".xz")
        .or_else(|| file.strip_suffix(".zst"))
        .or_else(|| file.strip_suffix(".gz"))
        .unwrap_or(file);
    let stem = stem.strip_suffix(".ko").unwrap_or(stem);
    normalize_name(stem)
}

fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Parses `modules.dep`.
pub fn parse_dep(text: &str, file: &Path) -> Result<BTreeMap<String, Entry>, IndexError> {
    let mut out = BTreeMap::new();
    for (n, line) in lines(text) {
        let Some((path, deps)) = line.split_once(':') else {
            return Err(IndexError::Malformed {
                path: file.into(),
                line: n,
                what: format!("expected `path: deps`, got {line:?}"),
            });
        };
        let path = path.trim();
        // A path with whitespace in it would split into several when written back (the
        // dependencies are whitespace-separated), and no depmod writes one.
        if path.is_empty()
            || !path.contains(".ko")
            || path.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(IndexError::Malformed {
                path: file.into(),
                line: n,
                what: format!("not a module path: {path:?}"),
            });
        }
        let deps = deps.split_whitespace().map(name_of_path).collect();
        out.insert(
            name_of_path(path),
            Entry {
                path: path.to_string(),
                deps,
            },
        );
    }
    Ok(out)
}

/// Parses `modules.softdep`.
pub fn parse_softdep(text: &str, file: &Path) -> Result<BTreeMap<String, SoftDeps>, IndexError> {
    let mut out: BTreeMap<String, SoftDeps> = BTreeMap::new();
    for (n, line) in lines(text) {
        let malformed = |what: String| IndexError::Malformed {
            path: file.into(),
            line: n,
            what,
        };
        let mut words = line.splitn(3, char::is_whitespace);
        let (Some("softdep"), Some(name)) = (words.next(), words.next()) else {
            return Err(malformed(format!(
                "expected `softdep NAME pre: ... post: ...`, got {line:?}"
            )));
        };
        // Words before `pre:` / `post:` are ignored, as kmod's config parser does: depmod
        // copies modules' malformed `softdep=` values (6.1's cifs has `softdep=gcm`).
        let rest = words.next().unwrap_or("");
        let parsed = parse_softdep_value(rest);
        let sd = out.entry(normalize_name(name)).or_default();
        sd.pre.extend(parsed.pre);
        sd.post.extend(parsed.post);
    }
    Ok(out)
}

/// Parses `modules.builtin` into normalised names.
pub fn parse_builtin(text: &str) -> BTreeSet<String> {
    lines(text).map(|(_, l)| name_of_path(l)).collect()
}

/// Parses a `softdep=` value from `.modinfo` (`pre: a b post: c`).
pub fn parse_softdep_value(v: &str) -> SoftDeps {
    let mut sd = SoftDeps::default();
    let mut post = None;
    for w in v.split_whitespace() {
        match w {
            "pre:" => post = Some(false),
            "post:" => post = Some(true),
            m => match post {
                Some(false) => sd.pre.push(normalize_name(m)),
                Some(true) => sd.post.push(normalize_name(m)),
                None => {}
            },
        }
    }
    sd
}

impl Index {
    /// The index from the texts of `modules.dep`, `modules.softdep` and `modules.builtin`
    /// (empty when absent) of the module directory `dir` (which only names the files in
    /// errors).
    pub fn from_texts(
        dir: &Path,
        dep: &str,
        softdep: &str,
        builtin: &str,
    ) -> Result<Index, IndexError> {
        Ok(Index {
            entries: parse_dep(dep, &dir.join("modules.dep"))?,
            softdeps: parse_softdep(softdep, &dir.join("modules.softdep"))?,
            builtin: parse_builtin(builtin),
        })
    }

    /// Writes `modules.dep` text for `order` (each module after its dependencies).
    pub fn dep_text(&self) -> String {
        let mut s = String::new();
        for e in self.entries.values() {
            s.push_str(&e.path);
            s.push(':');
            for d in &e.deps {
                if let Some(de) = self.entries.get(d) {
                    s.push(' ');
                    s.push_str(&de.path);
                }
            }
            s.push('\n');
        }
        s
    }

    /// Writes `modules.softdep` text.
    pub fn softdep_text(&self) -> String {
        let mut s = String::new();
        for (name, sd) in &self.softdeps {
            if sd.pre.is_empty() && sd.post.is_empty() {
                continue;
            }
            s.push_str("softdep ");
            s.push_str(name);
            if !sd.pre.is_empty() {
                s.push_str(" pre: ");
                s.push_str(&sd.pre.join(" "));
            }
            if !sd.post.is_empty() {
                s.push_str(" post: ");
                s.push_str(&sd.post.join(" "));
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_paths() {
        assert_eq!(name_of_path("kernel/fs/ext4/ext4.ko"), "ext4");
        assert_eq!(
            name_of_path("kernel/drivers/char/hw_random/virtio-rng.ko.xz"),
            "virtio_rng"
        );
        assert_eq!(name_of_path("a.ko.zst"), "a");
        assert_eq!(name_of_path("crc32c-intel.ko.gz"), "crc32c_intel");
    }

    #[test]
    fn dep_round_trip() {
        let text = "# comment\nkernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko kernel/lib/crc16.ko\n\nkernel/fs/jbd2/jbd2.ko:\nkernel/lib/crc16.ko:\n";
        let deps = parse_dep(text, Path::new("modules.dep")).unwrap();
        assert_eq!(deps["ext4"].deps, vec!["jbd2", "crc16"]);
        assert!(deps["jbd2"].deps.is_empty());
        let idx = Index {
            entries: deps,
            ..Default::default()
        };
        let again = parse_dep(&idx.dep_text(), Path::new("x")).unwrap();
        assert_eq!(again, idx.entries);
    }

    /// Fuzz finding (`fuzz/regressions/kmod_index/`): `6 /4.ko:4` parsed as the module
    /// `6 /4.ko`, whose path written back as a dependency read as two (`6` and `4`). A
    /// module path with whitespace or a control character is refused.
    #[test]
    fn module_paths_without_whitespace() {
        for text in ["6 /4.ko:4\n", "kernel/a\u{c}b.ko:\n", "kernel/a\u{1}.ko:\n"] {
            let e = parse_dep(text, Path::new("m.dep")).unwrap_err();
            assert!(
                e.to_string().starts_with("m.dep:1: not a module path"),
                "{e}"
            );
        }
        // Around the path and between dependencies, whitespace is the separator.
        let d = parse_dep(
            "\tkernel/a.ko :\tkernel/b.ko  kernel/c.ko \n",
            Path::new("m"),
        )
        .unwrap();
        assert_eq!(d["a"].path, "kernel/a.ko");
        assert_eq!(d["a"].deps, ["b", "c"]);
    }

    #[test]
    fn malformed_lines_are_named() {
        let e = parse_dep("a.ko: b.ko\nnonsense\n", Path::new("m.dep")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.dep:2: expected `path: deps`, got \"nonsense\""
        );
        let e = parse_dep(": b.ko\n", Path::new("m.dep")).unwrap_err();
        assert!(e.to_string().contains("m.dep:1: not a module path"));
        // As modprobe -c shows it: `softdep a x pre: y` is `softdep a pre: y`.
        let sd = parse_softdep("softdep a x\nsoftdep b x pre: y\n", Path::new("s")).unwrap();
        assert!(sd["a"].pre.is_empty() && sd["a"].post.is_empty());
        assert_eq!(sd["b"].pre, ["y"]);
        let e = parse_softdep("options a x=1\n", Path::new("s")).unwrap_err();
        assert!(e.to_string().contains("expected `softdep"), "{e}");
    }

    #[test]
    fn softdeps() {
        let sd = parse_softdep(
            "softdep ext4 pre: crc32c post: foo-bar\nsoftdep ext4 pre: x\n",
            Path::new("s"),
        )
        .unwrap();
        assert_eq!(sd["ext4"].pre, vec!["crc32c", "x"]);
        assert_eq!(sd["ext4"].post, vec!["foo_bar"]);
        let idx = Index {
            softdeps: sd,
            ..Default::default()
        };
        assert_eq!(
            idx.softdep_text(),
            "softdep ext4 pre: crc32c x post: foo_bar\n"
        );
        assert_eq!(parse_softdep_value("pre: crc32c").pre, vec!["crc32c"]);
        assert_eq!(
            parse_softdep_value("junk pre: a post: b c").post,
            vec!["b", "c"]
        );
    }

    #[test]
    fn builtin() {
        let b = parse_builtin("kernel/drivers/block/loop.ko\nkernel/fs/fat/vfat.ko\n");
        assert!(b.contains("loop") && b.contains("vfat"));
    }
}

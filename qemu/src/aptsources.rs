//! Where the real node's Debian root comes from: the build host's own apt sources, as an
//! operator behind a mirror or a snapshot has them, or a sources file they name.
//!
//! Contract: [`mirrors`] returns the sources `mmdebstrap` is given, as one deb822 text:
//! the file named by `VALIDATOR_DEBROOT_SOURCES` as it is (deb822 or one-line format;
//! `mmdebstrap` reads either), or else the entries of the host's
//! `/etc/apt/sources.list` and `/etc/apt/sources.list.d/*.list` and `*.sources` that are
//! enabled `deb` entries for `bookworm`, `bookworm-updates` or `bookworm-security` with
//! the `main` component, rewritten as deb822 with `main` alone (the root needs nothing
//! else) and their `Signed-By`, `Architectures` and `Trusted` kept. The text is part of
//! the root's cache key. No matching entry is an error that says which setting to use.
//!
//! Why hand-written: a few lines of the two apt formats (`sources.list(5)`), which no
//! crate reads; `scripts/build-nvidia` derives its sources from the host by the same rule.
//!
//! Limits: `deb822` fields are read as `apt` writes them (one `Key: value` per line,
//! continuation lines for `Signed-By`'s inline key); options other than `signed-by`,
//! `arch` and `trusted` in a one-line entry are dropped.

use std::path::{Path, PathBuf};

use crate::HarnessError;

/// The suite of the root, and the suites taken with it.
pub const SUITE: &str = "bookworm";

/// The setting naming a sources file to use instead of the host's.
pub const SOURCES_VAR: &str = "VALIDATOR_DEBROOT_SOURCES";

/// The sources for the root's `mmdebstrap`, as deb822 (or the named file's text).
pub fn mirrors() -> Result<String, HarnessError> {
    if let Some(f) = std::env::var_os(SOURCES_VAR) {
        let p = PathBuf::from(f);
        return std::fs::read_to_string(&p).map_err(|e| HarnessError::io(&p, e));
    }
    from_apt_dir(Path::new("/etc/apt"))
}

/// The Debian entries of the apt configuration under `etc_apt`, as deb822.
pub fn from_apt_dir(etc_apt: &Path) -> Result<String, HarnessError> {
    let mut files = Vec::new();
    let list = etc_apt.join("sources.list");
    if list.is_file() {
        files.push(list);
    }
    let d = etc_apt.join("sources.list.d");
    if let Ok(rd) = std::fs::read_dir(&d) {
        let mut more: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "list" || x == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    let mut out = String::new();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| HarnessError::io(f, e))?;
        let deb822 = f.extension().is_some_and(|x| x == "sources");
        let entries = if deb822 {
            parse_deb822(&text)
        } else {
            parse_one_line(&text)
        };
        for e in entries {
            out.push_str(&e.to_deb822());
        }
    }
    if out.is_empty() {
        return Err(HarnessError::Setup(format!(
            "no enabled Debian entry for {SUITE} (main) in {}/sources.list or sources.list.d: \
             set {SOURCES_VAR} to a sources file naming the mirror to build the root from",
            etc_apt.display()
        )));
    }
    Ok(out)
}

/// One source entry kept for the root.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    uris: String,
    suites: String,
    /// `Signed-By`'s value as written (a path, or an inline key on continuation lines).
    signed_by: Option<String>,
    architectures: Option<String>,
    trusted: Option<String>,
}

impl Entry {
    /// The entry with only our suites, or `None` when it has none of them or no `main`.
    fn keep(
        types: &str,
        uris: &str,
        suites: &str,
        components: &str,
        enabled: bool,
    ) -> Option<(String, String)> {
        let ours = [
            SUITE.to_string(),
            format!("{SUITE}-updates"),
            format!("{SUITE}-security"),
        ];
        let suites: Vec<&str> = suites
            .split_whitespace()
            .filter(|s| ours.iter().any(|o| o == s))
            .collect();
        let ok = enabled
            && types.split_whitespace().any(|t| t == "deb")
            && components.split_whitespace().any(|c| c == "main")
            && !suites.is_empty()
            && !uris.trim().is_empty();
        ok.then(|| (uris.trim().to_string(), suites.join(" ")))
    }

    fn to_deb822(&self) -> String {
        let mut s = format!(
            "Types: deb\nURIs: {}\nSuites: {}\nComponents: main\n",
            self.uris, self.suites
        );
        for (k, v) in [
            ("Signed-By", &self.signed_by),
            ("Architectures", &self.architectures),
            ("Trusted", &self.trusted),
        ] {
            if let Some(v) = v {
                s.push_str(&format!("{k}:{v}\n"));
            }
        }
        s.push('\n');
        s
    }
}

/// The entries of a deb822 `.sources` file we keep.
fn parse_deb822(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    // (key lower-case, raw value after the colon, continuation lines included)
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut flush = |fields: &mut Vec<(String, String)>| {
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let trimmed = |k: &str| get(k).map(|v| v.trim().to_string());
        let enabled = trimmed("enabled").is_none_or(|v| !v.eq_ignore_ascii_case("no"));
        if let Some((uris, suites)) = Entry::keep(
            get("types").unwrap_or(""),
            get("uris").unwrap_or(""),
            get("suites").unwrap_or(""),
            get("components").unwrap_or(""),
            enabled,
        ) {
            out.push(Entry {
                uris,
                suites,
                signed_by: get("signed-by").map(str::to_string),
                architectures: trimmed("architectures").map(|v| format!(" {v}")),
                trusted: trimmed("trusted").map(|v| format!(" {v}")),
            });
        }
        fields.clear();
    };
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut fields);
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                v.push('\n');
                v.push_str(line);
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_ascii_lowercase(), v.to_string()));
        }
    }
    flush(&mut fields);
    out
}

/// The entries of a one-line `sources.list` file we keep.
fn parse_one_line(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace().peekable();
        let Some(kind) = words.next() else { continue };
        let mut opts = Vec::new();
        if words.peek().is_some_and(|w| w.starts_with('[')) {
            for w in words.by_ref() {
                let end = w.ends_with(']');
                let w = w.trim_start_matches('[').trim_end_matches(']');
                if !w.is_empty() {
                    opts.push(w.to_string());
                }
                if end {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else {
            continue;
        };
        let comps: Vec<&str> = words.collect();
        let opt = |k: &str| {
            opts.iter()
                .find_map(|o| o.strip_prefix(&format!("{k}=")))
                .map(|v| format!(" {}", v.replace(',', " ")))
        };
        if let Some((uris, suites)) = Entry::keep(kind, uri, suite, &comps.join(" "), true) {
            out.push(Entry {
                uris,
                suites,
                signed_by: opt("signed-by"),
                architectures: opt("arch"),
                trusted: opt("trusted"),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's entries for our suites with `main` are kept (as deb822, `main` alone,
    /// their keys kept); other suites, other archives, disabled and `deb-src` entries
    /// are not; a directory with none is an error naming the setting.
    #[test]
    fn host_sources_become_the_roots_mirrors() {
        let d = std::env::temp_dir().join(format!("qemu-aptsources-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sources.list.d")).unwrap();
        std::fs::write(
            d.join("sources.list"),
            "# a comment\n\
             deb [arch=amd64 signed-by=/k/snap.gpg] http://snapshot.example/debian/20250101T000000Z bookworm main contrib\n\
             deb-src http://mirror.example/debian bookworm main\n\
             deb http://mirror.example/debian trixie main\n\
             deb http://mirror.example/debian bookworm-updates non-free # main is not here\n",
        )
        .unwrap();
        std::fs::write(
            d.join("sources.list.d/debian.sources"),
            "Types: deb deb-src\nURIs: http://mirror.example/debian-security\n\
             Suites: bookworm-security trixie-security\nComponents: main non-free-firmware\n\
             Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
             Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\
             Components: main\nEnabled: no\n\n\
             Types: deb\nURIs: https://other.example/apt\nSuites: nodistro\nComponents: main\n",
        )
        .unwrap();
        std::fs::write(
            d.join("sources.list.d/x.list.disabled"),
            "deb http://x bookworm main\n",
        )
        .unwrap();
        let got = from_apt_dir(&d).unwrap();
        assert_eq!(
            got,
            "Types: deb\nURIs: http://snapshot.example/debian/20250101T000000Z\nSuites: bookworm\n\
             Components: main\nSigned-By: /k/snap.gpg\nArchitectures: amd64\n\n\
             Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\
             Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        );
        std::fs::remove_file(d.join("sources.list")).unwrap();
        std::fs::remove_file(d.join("sources.list.d/debian.sources")).unwrap();
        let e = from_apt_dir(&d).unwrap_err().to_string();
        assert!(e.contains(SOURCES_VAR), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}

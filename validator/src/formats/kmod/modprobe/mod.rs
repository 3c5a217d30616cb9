//! `modprobe.d` configuration and the module options on the kernel command line, read as
//! kmod 30 (Debian 12's `modprobe`) reads them: the `options` and `blacklist` a module
//! gets when `modprobe` loads it by name.
//!
//! Contract (kmod's `libkmod-config.c` and `shared/util.c`):
//! - Files: [`config_files`] picks, from the directories in kmod's order (`/etc/modprobe.d`,
//!   `/run/modprobe.d`, `/usr/local/lib/modprobe.d`, `/lib/modprobe.d`), the names ending
//!   in `.conf` or `.alias` that do not start with `.`; a name in an earlier directory
//!   hides the same name in a later one; the files are read in byte order of their names,
//!   whatever directory each comes from.
//! - Lines ([`Config::add_file`]): a `\` before a newline joins the next line, a `\`
//!   before any other byte is dropped (one at the very end is read as the byte 0xFF, as
//!   kmod stores `EOF`); a line ends at its first NUL; a line whose first byte is `#` and
//!   an empty line are skipped; words are split on spaces and tabs; a line is placed by
//!   the physical line it ends on, as kmod's messages place it. A line that is not UTF-8
//!   is not applied but listed in [`Config::not_utf8`] (kmod would pass its bytes on;
//!   the init refuses such a file rather than give a module other bytes). `options MODULE REST`: REST is everything
//!   after the one space or tab that ends MODULE (further leading blanks kept), tabs made
//!   spaces. `blacklist MODULE`. Module names take `_` for `-` outside `[...]`; a `]`
//!   without `[`, or a `[` never closed, makes the line bad. `alias`, `install`,
//!   `remove`, `softdep` are recognised and not applied here; `include`/`config` are
//!   deprecated; anything else, or a directive missing its words, is a bad line, kept
//!   in [`Config::ignored`] with its file and line, as kmod logs and skips it.
//! - The command line ([`Config::add_cmdline`], after every file): kmod's state machine
//!   over `/proc/cmdline`: a word `MODULE.PARAM[=VALUE]` adds the option `PARAM[=VALUE]`
//!   for MODULE; a `.` in PARAM, a `=` or `"` in MODULE, or a blank inside quotes outside
//!   the value drops the word; a quote before MODULE is moved after the `=`
//!   (`"m.p=a b"` gives `p="a b"`, and a value starting with that quote); a word that
//!   is not UTF-8 is left out and listed in [`Config::not_utf8`];
//!   `modprobe.blacklist=a,b` blacklists `a` and `b` as written (no `-` to `_`).
//! - A module's options ([`Config::options`]) are those of every matching entry in that
//!   order, the non-empty ones joined by one space; `modprobe` hands `init_module` that
//!   string followed by one space (the separator before options given to `modprobe`
//!   itself), and so does the loader. The kernel applies them left to right, so a later
//!   value wins.
//!
//! Hand-written: no crate reads `modprobe.d` (the `kmod` crates bind libkmod, which a
//! static PID 1 does not link).
//!
//! Current limits: options are matched by module name, not by alias (`modprobe` also
//! matches an alias it was asked for by that alias); `modules.softdep` in the module
//! directory, which kmod reads as one more configuration file, holds only `softdep`
//! lines as `depmod` writes it and is not read here; `install` commands are never run.

/// The directories `modprobe` reads, in its order (relative to a root).
pub const CONFIG_DIRS: [&str; 4] = [
    "etc/modprobe.d",
    "run/modprobe.d",
    "usr/local/lib/modprobe.d",
    "lib/modprobe.d",
];

/// The largest configuration file read, and the most files.
pub const CONFIG_FILE_MAX: usize = 1 << 20;
pub const CONFIG_FILES_MAX: usize = 4096;

/// The most configuration bytes read for one root, all files together.
pub const CONFIG_TOTAL_MAX: usize = 16 << 20;

/// Why a configuration, read file by file, is not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// More than [`CONFIG_TOTAL_MAX`] bytes in all.
    TooMuch,
    /// A line that is not UTF-8 (kmod would pass its bytes on).
    NotUtf8(Origin),
}

/// Where an entry came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file and the line its directive starts on (1-based).
    File { file: String, line: usize },
    /// The kernel command line.
    Cmdline,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File { file, line } => write!(f, "{file}:{line}"),
            Origin::Cmdline => f.write_str("the kernel command line"),
        }
    }
}

/// One `options` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionsEntry {
    pub module: String,
    pub options: String,
    pub origin: Origin,
}

/// The configuration read so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// `options`, in the order read.
    pub options: Vec<OptionsEntry>,
    /// Blacklisted modules and where.
    pub blacklist: Vec<(String, Origin)>,
    /// Lines kmod would log and skip: where, and the line's first word.
    pub ignored: Vec<(Origin, String)>,
    /// Lines, and command-line words that name a module, whose bytes are not UTF-8: kmod
    /// would pass them on; the init refuses a file that has one (see [`Config::add_file`])
    /// and leaves such a command-line word out.
    pub not_utf8: Vec<Origin>,
}

/// Of `dirs` (each a directory's label and the names it holds, in kmod's directory order),
/// the files `modprobe` reads, in its order, as `(directory index, name)`.
pub fn config_files(dirs: &[Vec<String>]) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    for (i, names) in dirs.iter().enumerate() {
        for n in names {
            let wanted = !n.starts_with('.')
                && ((n.len() >= 6 && n.ends_with(".conf"))
                    || (n.len() >= 6 && n.ends_with(".alias")));
            if wanted && !out.iter().any(|(_, m)| m == n) {
                out.push((i, n.clone()));
            }
        }
    }
    out.sort_by(|a, b| a.1.as_bytes().cmp(b.1.as_bytes()));
    out
}

/// kmod's `underscores`: `-` to `_` outside `[...]`; `None` for a `]` without `[` or a
/// `[` never closed.
pub fn underscores(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        match c {
            '-' => out.push('_'),
            ']' => return None,
            '[' => {
                out.push('[');
                loop {
                    let d = chars.next()?;
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// kmod's `freadline_wrapped` over `text`, each logical line cut at its first NUL (kmod's
/// string functions stop there): the lines and the physical line each ends on (the number
/// kmod's messages give). A `\` at the very end stands for the byte kmod stores in its
/// place (`EOF` as a `char`, 0xFF).
fn logical_lines(text: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut at = 1;
    let mut i = 0;
    let mut finish = |line: &mut Vec<u8>, at: usize| {
        let mut l = std::mem::take(line);
        if let Some(nul) = l.iter().position(|&b| b == 0) {
            l.truncate(nul);
        }
        out.push((at, l));
    };
    while let Some(&c) = text.get(i) {
        i += 1;
        match c {
            b'\n' => {
                finish(&mut line, at);
                at += 1;
            }
            b'\\' => match text.get(i) {
                Some(b'\n') => {
                    i += 1;
                    at += 1;
                }
                Some(&d) => {
                    line.push(d);
                    i += 1;
                }
                None => line.push(0xff),
            },
            c => line.push(c),
        }
    }
    if !line.is_empty() {
        finish(&mut line, at);
    }
    out
}

/// Splits off the next word (skipping leading blanks), and the rest after the one blank
/// that ended it, as `strtok_r(..., "\t ", ...)` does.
fn word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    match s.find([' ', '\t']) {
        Some(end) => Some((&s[..end], &s[end + 1..])),
        None => Some((s, "")),
    }
}

impl Config {
    /// Adds the directives of one file (`name` for messages), as kmod parses it.
    pub fn add_file(&mut self, name: &str, text: &[u8]) {
        for (line, bytes) in logical_lines(text) {
            if matches!(bytes.first(), None | Some(b'#')) {
                continue;
            }
            let origin = Origin::File {
                file: name.to_string(),
                line,
            };
            // kmod would hand the bytes on as they are; we pass on only what we can
            // report and measure faithfully.
            let Ok(text) = std::str::from_utf8(&bytes) else {
                self.not_utf8.push(origin);
                continue;
            };
            let Some((cmd, rest)) = word(text) else {
                continue;
            };
            let ok = match cmd {
                "options" => match word(rest) {
                    // strtok_r(NULL, "\0"): the rest, no token at all when it is empty.
                    Some((m, opts)) if !opts.is_empty() => underscores(m).map(|module| {
                        self.options.push(OptionsEntry {
                            module,
                            options: opts.replace('\t', " "),
                            origin: origin.clone(),
                        })
                    }),
                    _ => None,
                },
                "blacklist" => word(rest)
                    .and_then(|(m, _)| underscores(m))
                    .map(|m| self.blacklist.push((m, origin.clone()))),
                "alias" => word(rest)
                    .and_then(|(a, r)| Some((underscores(a)?, underscores(word(r)?.0)?)))
                    .map(|_| ()),
                "install" | "remove" | "softdep" => word(rest)
                    .filter(|(_, r)| !r.is_empty())
                    .and_then(|(m, _)| underscores(m))
                    .map(|_| ()),
                _ => None,
            };
            if ok.is_none() {
                self.ignored.push((origin, cmd.to_string()));
            }
        }
    }

    /// [`Config::add_file`] as a reader of a whole configuration applies it: `total` (the
    /// bytes read so far) stays within [`CONFIG_TOTAL_MAX`], and a line that is not UTF-8
    /// refuses the configuration.
    pub fn add_file_checked(
        &mut self,
        name: &str,
        text: &[u8],
        total: &mut usize,
    ) -> Result<(), Refusal> {
        *total = total.saturating_add(text.len());
        if *total > CONFIG_TOTAL_MAX {
            return Err(Refusal::TooMuch);
        }
        self.add_file(name, text);
        match self.not_utf8.first() {
            Some(o) => Err(Refusal::NotUtf8(o.clone())),
            None => Ok(()),
        }
    }

    /// Adds the module options and blacklist of a kernel command line, as kmod reads
    /// `/proc/cmdline` (after every file).
    pub fn add_cmdline(&mut self, cmdline: &[u8]) {
        #[derive(PartialEq, Clone, Copy)]
        enum St {
            Ignore,
            Modname,
            Param,
            Value,
        }
        // kmod reads at most 4095 bytes and stops at the first NUL.
        let end = cmdline
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(cmdline.len())
            .min(4095);
        let buf = cmdline.get(..end).unwrap_or_default();
        let mut st = St::Modname;
        let mut quoted = false;
        let mut quote_start: Option<usize> = None;
        let (mut modname, mut param, mut value) = (0usize, 0usize, None::<usize>);
        let mut p = 0usize;
        loop {
            let c = buf.get(p).copied();
            let mut complete = false;
            match c {
                Some(b'"') => {
                    quoted = !quoted;
                    if quoted && st == St::Modname && p == modname {
                        quote_start = Some(p);
                        modname = p + 1;
                    } else if st != St::Value {
                        st = St::Ignore;
                    }
                }
                None | Some(b' ' | b'\n' | b'\t' | 0x0b | 0x0c | b'\r') => {
                    if quoted && st == St::Value {
                    } else if quoted {
                        st = St::Ignore;
                    } else if st == St::Value || st == St::Param {
                        complete = true;
                    } else {
                        modname = p + 1;
                        st = St::Modname;
                        quote_start = None;
                    }
                }
                Some(b'.') => {
                    if st == St::Modname {
                        param = p + 1;
                        st = St::Param;
                    } else if st == St::Param {
                        st = St::Ignore;
                    }
                }
                Some(b'=') => {
                    if st == St::Param {
                        value = Some(p + 1);
                        st = St::Value;
                    } else if st == St::Modname {
                        st = St::Ignore;
                    }
                }
                Some(_) => {}
            }
            if complete {
                let word = buf.get(modname..p).unwrap_or_default();
                if std::str::from_utf8(word).is_err() {
                    self.not_utf8.push(Origin::Cmdline);
                } else {
                    let text = |r: std::ops::Range<usize>| {
                        String::from_utf8_lossy(buf.get(r).unwrap_or_default()).into_owned()
                    };
                    let name = text(modname..param.saturating_sub(1));
                    let mut opt = text(param..p);
                    let mut val = value.map(|v| text(v..p));
                    if let (Some(q), Some(v)) = (quote_start, value) {
                        if q < modname {
                            // The quote goes after the `=`: `"m.p=a b"` is `p="a b"`
                            // (and the value starts with it).
                            opt = format!("{}=\"{}", text(param..v - 1), text(v..p));
                            val = Some(format!("\"{}", text(v..p)));
                        }
                    }
                    self.add_cmdline_word(&name, &opt, val);
                }
                modname = p + 1;
                st = St::Modname;
                quote_start = None;
                value = None;
            }
            if c.is_none() {
                break;
            }
            p += 1;
        }
    }

    /// kmod's `kcmdline_parse_result`.
    fn add_cmdline_word(&mut self, modname: &str, param: &str, value: Option<String>) {
        if modname == "modprobe" && param.starts_with("blacklist=") {
            for m in value.unwrap_or_default().split(',') {
                self.blacklist.push((m.to_string(), Origin::Cmdline));
            }
            return;
        }
        match underscores(modname) {
            Some(module) => self.options.push(OptionsEntry {
                module,
                options: param.to_string(),
                origin: Origin::Cmdline,
            }),
            None => self
                .ignored
                .push((Origin::Cmdline, format!("{modname}.{param}"))),
        }
    }

    /// The options `modprobe` gives `module` (its kernel spelling): every matching entry
    /// in order, the non-empty ones joined by a space; empty when none.
    pub fn options(&self, module: &str) -> String {
        let mut out = String::new();
        for e in self.options.iter().filter(|e| e.module == module) {
            if e.options.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&e.options);
        }
        out
    }

    /// Where `module` is blacklisted first, if it is.
    pub fn blacklisted(&self, module: &str) -> Option<&Origin> {
        self.blacklist
            .iter()
            .find(|(m, _)| m == module)
            .map(|(_, o)| o)
    }
}

#[cfg(test)]
mod tests;

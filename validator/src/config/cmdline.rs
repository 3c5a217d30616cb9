//! Kernel command line: splitting by the kernel's own quoting rules and the keys we read.
//!
//! [`split`] mirrors `next_arg()` / `parse_args()` in the kernel's `lib/cmdline.c` and
//! `kernel/params.c`: arguments are separated by unquoted whitespace, a double quote toggles
//! quoting anywhere in an argument, a leading quote on the whole argument or on its value is
//! dropped together with a matching trailing quote, and a lone `--` ends the kernel's
//! parameters (everything after it belongs to init). [`BootArgs::parse`] then reads the keys
//! this product understands; in key names `-` and `_` are the same character, as in the
//! kernel's `parameq()`. A repeated key takes its last value.

use std::fmt;
use std::time::Duration;

/// Prefix of every key this product reads.
pub const PREFIX: &str = "validator.";

/// One `name[=value]` argument, with quotes removed as the kernel removes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub value: Option<String>,
}

/// The command line split into kernel parameters and the arguments after `--`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Split {
    pub params: Vec<Param>,
    pub init_args: Vec<String>,
}

/// The module names of `module_blacklist=` (comma-separated; the last occurrence wins,
/// as for any kernel parameter). The kernel compares each with the module's name exactly
/// (`kernel/module/main.c:blacklisted`).
pub fn module_blacklist(line: &str) -> Vec<String> {
    split(line)
        .params
        .iter()
        .rfind(|p| name_eq(&p.name, "module_blacklist"))
        .and_then(|p| p.value.as_deref())
        .map(|v| {
            v.split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Splits a command line exactly as the kernel does.
pub fn split(line: &str) -> Split {
    let bytes = line.as_bytes();
    let mut out = Split::default();
    let mut i = 0;
    let mut after_dashes = false;
    while i < bytes.len() {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        if i >= bytes.len() {
            break;
        }
        let (arg, next) = next_arg(bytes, i);
        i = next;
        if after_dashes {
            // The kernel hands everything after `--` to init, argument by argument.
            out.init_args.push(match arg.value {
                Some(v) => format!("{}={}", arg.name, v),
                None => arg.name,
            });
            continue;
        }
        if arg.name == "--" && arg.value.is_none() {
            after_dashes = true;
            continue;
        }
        out.params.push(arg);
    }
    out
}

/// One argument starting at `start` (not whitespace); returns it and the index after it.
fn next_arg(bytes: &[u8], start: usize) -> (Param, usize) {
    let mut s = start;
    let mut in_quote = false;
    let mut quoted = false;
    if bytes.get(s) == Some(&b'"') {
        s += 1;
        in_quote = true;
        quoted = true;
    }
    let mut equals: Option<usize> = None;
    let mut i = s;
    while let Some(&c) = bytes.get(i) {
        if c.is_ascii_whitespace() && !in_quote {
            break;
        }
        if equals.is_none() && c == b'=' {
            equals = Some(i);
        }
        if c == b'"' {
            in_quote = !in_quote;
        }
        i += 1;
    }
    let end = i;
    let mut stop = end;
    // A quote that closes the whole argument (or its value) is not part of it.
    let ends_with_quote = end > s && bytes.get(end - 1) == Some(&b'"');
    let text = |a: usize, b: usize| {
        String::from_utf8_lossy(bytes.get(a..b.max(a)).unwrap_or_default()).into_owned()
    };
    let param = match equals {
        None => {
            if quoted && ends_with_quote {
                stop = end - 1;
            }
            Param {
                name: text(s, stop),
                value: None,
            }
        }
        Some(eq) => {
            let mut vstart = eq + 1;
            if vstart < end && bytes.get(vstart) == Some(&b'"') {
                vstart += 1;
                if ends_with_quote && end > vstart {
                    stop = end - 1;
                }
            }
            if quoted && ends_with_quote && stop == end {
                stop = end - 1;
            }
            Param {
                name: text(s, eq),
                value: Some(text(vstart, stop)),
            }
        }
    };
    (param, end)
}

/// Compares parameter names the way the kernel does: `-` and `_` are equal.
pub fn name_eq(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes().zip(b.bytes()).all(|(x, y)| {
            let n = |c: u8| if c == b'-' { b'_' } else { c };
            n(x) == n(y)
        })
}

/// How the root device is named (`root=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootSpec {
    PartLabel(String),
    PartUuid(String),
    Path(String),
}

impl fmt::Display for RootSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootSpec::PartLabel(l) => write!(f, "PARTLABEL={l}"),
            RootSpec::PartUuid(u) => write!(f, "PARTUUID={u}"),
            RootSpec::Path(p) => write!(f, "{p}"),
        }
    }
}

/// What the init does when it stops, and after a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Halt the CPUs: the report stays on the console.
    Halt,
    Poweroff,
    Reboot,
}

impl Action {
    fn parse(v: &str) -> Option<Action> {
        match v {
            "halt" => Some(Action::Halt),
            "poweroff" => Some(Action::Poweroff),
            "reboot" => Some(Action::Reboot),
            _ => None,
        }
    }
}

/// A problem with one argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdlineError {
    #[error("{key}: invalid value {value:?}: {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("{key}: a value is required")]
    MissingValue { key: String },
}

/// Everything the init reads from the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct BootArgs {
    pub root: Option<RootSpec>,
    pub rootfstype: Option<String>,
    pub rootflags: Option<String>,
    /// `ro` (the kernel's default) or `rw`.
    pub read_only: bool,
    /// `init=`: the real root's init, default `/sbin/init`.
    pub init: String,
    /// Arguments after `--`, handed to the real init.
    pub init_args: Vec<String>,
    /// `validator.bom=`: the BOM inside the initramfs.
    pub bom_path: String,
    /// `validator.root_timeout=SECONDS`: how long to wait for the root device.
    pub root_timeout: Duration,
    /// `validator.on_stop=halt|poweroff|reboot`: what a stopped boot does.
    pub on_stop: Action,
    /// `validator.on_panic=reboot|poweroff|halt`: what the panic hook does.
    pub on_panic: Action,
    /// `validator.test_panic=STAGE`: panic at the start of that stage. Only in a build
    /// with the `test-hooks` feature (the test bed's); a production init does not know
    /// the key.
    #[cfg(feature = "test-hooks")]
    pub test_panic: Option<String>,
    /// `validator.test_skip_kernel_check`: fall back without checking the other slot's
    /// kernel first (`runtime::slot::bootable`), to show what the kernel and the boot chain
    /// do with it. Test bed only, as `test_panic`.
    #[cfg(feature = "test-hooks")]
    pub test_skip_kernel_check: bool,
    /// `validator.test_hw_fixture=DIR`: the preflight reads `/sys`, `/proc` and the root
    /// it judges from `DIR/sys`, `DIR/proc` and `DIR/root` in the new root (a hardware
    /// fixture tree, `validator/tests/fixtures/hw`), for the hardware a VM cannot show.
    /// Test bed only, as `test_panic`.
    #[cfg(feature = "test-hooks")]
    pub test_hw_fixture: Option<String>,
    /// `validator.debug`: log debug records to the kernel log.
    pub debug: bool,
    /// `validator.verity_data=`, `validator.verity_hash=`, `validator.verity_sig=`: the
    /// verity partitions, when not found by convention or partition type.
    pub verity_data: Option<RootSpec>,
    pub verity_hash: Option<RootSpec>,
    pub verity_sig: Option<RootSpec>,
    /// `validator.slot=A|B`: the A/B slot the boot loader booted.
    pub slot: Option<String>,
    /// `validator.esp=`: the ESP (default: the one partition of the EFI System type).
    pub esp: Option<RootSpec>,
    /// Problems that do not stop the boot (unknown `validator.*` keys, bad values that
    /// fell back to a default).
    pub warnings: Vec<String>,
}

impl Default for BootArgs {
    fn default() -> Self {
        BootArgs {
            root: None,
            rootfstype: None,
            rootflags: None,
            read_only: true,
            init: "/sbin/init".into(),
            init_args: Vec::new(),
            bom_path: "/etc/validator/bom.toml".into(),
            root_timeout: Duration::from_secs(30),
            on_stop: Action::Halt,
            on_panic: Action::Reboot,
            #[cfg(feature = "test-hooks")]
            test_panic: None,
            #[cfg(feature = "test-hooks")]
            test_skip_kernel_check: false,
            #[cfg(feature = "test-hooks")]
            test_hw_fixture: None,
            debug: false,
            verity_data: None,
            verity_hash: None,
            verity_sig: None,
            slot: None,
            esp: None,
            warnings: Vec::new(),
        }
    }
}

/// Reads an `rd.`-style boolean: a bare key is true; `1/0`, `yes/no`, `true/false`, `on/off`.
pub fn parse_bool(key: &str, value: Option<&str>) -> Result<bool, CmdlineError> {
    match value {
        None => Ok(true),
        Some("1" | "yes" | "true" | "on" | "y") => Ok(true),
        Some("0" | "no" | "false" | "off" | "n") => Ok(false),
        Some(v) => Err(CmdlineError::BadValue {
            key: key.into(),
            value: v.into(),
            expected: "a boolean (1/0, yes/no, true/false, on/off)",
        }),
    }
}

/// Reads a `root=`-style device name: `PARTLABEL=`, `PARTUUID=` or a path.
pub fn parse_root(v: &str) -> RootSpec {
    if let Some(l) = v.strip_prefix("PARTLABEL=") {
        RootSpec::PartLabel(l.to_string())
    } else if let Some(u) = v.strip_prefix("PARTUUID=") {
        RootSpec::PartUuid(u.to_ascii_lowercase())
    } else {
        RootSpec::Path(v.to_string())
    }
}

fn required<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, CmdlineError> {
    value.ok_or_else(|| CmdlineError::MissingValue { key: key.into() })
}

impl BootArgs {
    /// Parses a whole command line. Invalid values of our keys are returned as errors in
    /// `warnings` and leave the default in place: a typo must never stop a node from booting
    /// in a way the report cannot explain.
    pub fn parse(line: &str) -> BootArgs {
        let split = split(line);
        let mut a = BootArgs {
            init_args: split.init_args,
            ..BootArgs::default()
        };
        for p in &split.params {
            if let Err(e) = a.apply(p) {
                a.warnings.push(e.to_string());
            }
        }
        a
    }

    fn apply(&mut self, p: &Param) -> Result<(), CmdlineError> {
        let name = p.name.as_str();
        let v = p.value.as_deref();
        let is = |k: &str| name_eq(name, k);
        if is("root") {
            self.root = Some(parse_root(required(name, v)?));
        } else if is("rootfstype") {
            self.rootfstype = Some(required(name, v)?.to_string());
        } else if is("rootflags") {
            self.rootflags = Some(required(name, v)?.to_string());
        } else if is("ro") && v.is_none() {
            self.read_only = true;
        } else if is("rw") && v.is_none() {
            self.read_only = false;
        } else if is("init") {
            self.init = required(name, v)?.to_string();
        } else if is("validator.bom") {
            self.bom_path = required(name, v)?.to_string();
        } else if is("validator.root_timeout") {
            let s = required(name, v)?;
            let secs: f64 = s
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0 && *x <= 3600.0)
                .ok_or_else(|| CmdlineError::BadValue {
                    key: name.into(),
                    value: s.into(),
                    expected: "seconds between 0 and 3600",
                })?;
            self.root_timeout = Duration::from_secs_f64(secs);
        } else if is("validator.on_stop") || is("validator.on_panic") {
            let s = required(name, v)?;
            let act = Action::parse(s).ok_or_else(|| CmdlineError::BadValue {
                key: name.into(),
                value: s.into(),
                expected: "halt, poweroff or reboot",
            })?;
            if is("validator.on_stop") {
                self.on_stop = act;
            } else {
                self.on_panic = act;
            }
        } else if is("validator.debug") {
            self.debug = parse_bool(name, v)?;
        } else if is("validator.verity_data") {
            self.verity_data = Some(parse_root(required(name, v)?));
        } else if is("validator.verity_hash") {
            self.verity_hash = Some(parse_root(required(name, v)?));
        } else if is("validator.verity_sig") {
            self.verity_sig = Some(parse_root(required(name, v)?));
        } else if is("validator.slot") {
            let s = required(name, v)?;
            if !matches!(s, "A" | "B" | "a" | "b") {
                return Err(CmdlineError::BadValue {
                    key: name.into(),
                    value: s.into(),
                    expected: "A or B",
                });
            }
            self.slot = Some(s.to_ascii_uppercase());
        } else if is("validator.esp") {
            self.esp = Some(parse_root(required(name, v)?));
        } else if !self.apply_test_hook(name, v)? && name.starts_with(PREFIX) {
            self.warnings
                .push(format!("unknown command-line key {name} (ignored)"));
        }
        Ok(())
    }

    /// The test bed's keys; `Ok(true)` when `name` was one.
    #[cfg(feature = "test-hooks")]
    fn apply_test_hook(&mut self, name: &str, v: Option<&str>) -> Result<bool, CmdlineError> {
        if name_eq(name, concat!("validator.", "test_panic")) {
            self.test_panic = Some(required(name, v)?.to_string());
            return Ok(true);
        }
        if name_eq(name, concat!("validator.", "test_skip_kernel_check")) {
            self.test_skip_kernel_check = true;
            return Ok(true);
        }
        if name_eq(name, concat!("validator.", "test_hw_fixture")) {
            self.test_hw_fixture = Some(required(name, v)?.to_string());
            return Ok(true);
        }
        Ok(false)
    }

    #[cfg(not(feature = "test-hooks"))]
    fn apply_test_hook(&mut self, _name: &str, _v: Option<&str>) -> Result<bool, CmdlineError> {
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, value: Option<&str>) -> Param {
        Param {
            name: name.into(),
            value: value.map(Into::into),
        }
    }

    #[test]
    fn plain_and_valued() {
        let s = split("  ro  root=PARTLABEL=root   console=ttyS0,115200 quiet\n");
        assert_eq!(
            s.params,
            vec![
                p("ro", None),
                p("root", Some("PARTLABEL=root")),
                p("console", Some("ttyS0,115200")),
                p("quiet", None)
            ]
        );
        assert!(s.init_args.is_empty());
    }

    #[test]
    fn quotes_follow_the_kernel() {
        // Value quoted: quotes dropped.
        let s = split(r#"a="b c" d"#);
        assert_eq!(s.params, vec![p("a", Some("b c")), p("d", None)]);
        // Whole argument quoted.
        let s = split(r#""a=b c" e"#);
        assert_eq!(s.params, vec![p("a", Some("b c")), p("e", None)]);
        // Quote in the middle of a value: kept, but protects the space.
        let s = split(r#"a=x"y z"w q"#);
        assert_eq!(s.params, vec![p("a", Some(r#"x"y z"w"#)), p("q", None)]);
        // Unterminated quote runs to the end of the line.
        let s = split(r#"a="b c"#);
        assert_eq!(s.params, vec![p("a", Some("b c"))]);
        // Empty value.
        let s = split(r#"a= b="""#);
        assert_eq!(s.params, vec![p("a", Some("")), p("b", Some(""))]);
        // Bare quoted word.
        let s = split(r#""hello world""#);
        assert_eq!(s.params, vec![p("hello world", None)]);
    }

    #[test]
    fn double_dash_hands_the_rest_to_init() {
        let s = split("root=/dev/vda1 -- single x=1 --");
        assert_eq!(s.params, vec![p("root", Some("/dev/vda1"))]);
        assert_eq!(s.init_args, vec!["single", "x=1", "--"]);
        let a = BootArgs::parse("ro -- --verbose");
        assert_eq!(a.init_args, vec!["--verbose"]);
        // `--` as a value is not the separator; a quoted `--` is, as in the kernel.
        let s = split("a=-- b");
        assert_eq!(s.params, vec![p("a", Some("--")), p("b", None)]);
        let s = split(r#"a "--" b"#);
        assert_eq!(s.params, vec![p("a", None)]);
        assert_eq!(s.init_args, vec!["b"]);
    }

    #[test]
    fn dashes_and_underscores_are_equal_in_names() {
        assert!(name_eq("validator.root-timeout", "validator.root_timeout"));
        assert!(!name_eq("validator.root-timeou", "validator.root_timeout"));
        let a = BootArgs::parse("validator.root-timeout=2.5 validator.on-stop=poweroff");
        assert_eq!(a.root_timeout, Duration::from_millis(2500));
        assert_eq!(a.on_stop, Action::Poweroff);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    }

    #[test]
    fn repeats_take_the_last_value() {
        let a = BootArgs::parse("root=/dev/a root=PARTUUID=ABCD-1 ro rw init=/x init=/y");
        assert_eq!(a.root, Some(RootSpec::PartUuid("abcd-1".into())));
        assert!(!a.read_only);
        assert_eq!(a.init, "/y");
    }

    #[test]
    fn keys_and_defaults() {
        let a = BootArgs::parse("console=ttyS0");
        assert_eq!(a, BootArgs::default());
        let a = BootArgs::parse(
            "root=PARTLABEL=root rootfstype=ext4 rootflags=noatime validator.bom=/b.toml \
             validator.on_panic=poweroff validator.test_panic=modules validator.debug=off",
        );
        assert_eq!(a.root, Some(RootSpec::PartLabel("root".into())));
        assert_eq!(a.rootfstype.as_deref(), Some("ext4"));
        assert_eq!(a.rootflags.as_deref(), Some("noatime"));
        assert_eq!(a.bom_path, "/b.toml");
        assert_eq!(a.on_panic, Action::Poweroff);
        #[cfg(feature = "test-hooks")]
        assert_eq!(a.test_panic.as_deref(), Some("modules"));
        #[cfg(not(feature = "test-hooks"))]
        assert_eq!(
            a.warnings,
            ["unknown command-line key validator.test_panic (ignored)"]
        );
        assert!(!a.debug);
    }

    #[test]
    fn bad_values_are_warnings_and_keep_defaults() {
        let a = BootArgs::parse(
            "validator.root_timeout=soon validator.on_stop=explode validator.debug=maybe \
             validator.bogus=1 validator.bom",
        );
        assert_eq!(a.root_timeout, Duration::from_secs(30));
        assert_eq!(a.on_stop, Action::Halt);
        assert_eq!(a.warnings.len(), 5, "{:?}", a.warnings);
        assert!(a.warnings[0].contains("validator.root_timeout"));
        assert!(a.warnings[3].contains("unknown command-line key validator.bogus"));
        assert!(a.warnings[4].contains("a value is required"));
    }

    #[test]
    fn never_panics_on_odd_bytes() {
        for line in [
            "\"",
            "=",
            "\"=\"",
            "a=\"",
            "\u{0}\u{ff}",
            " -- ",
            "==",
            "\"\"\"",
            "a\"b=c",
        ] {
            let _ = BootArgs::parse(line);
        }
    }

    #[test]
    fn module_blacklist_takes_the_last_occurrence() {
        assert!(module_blacklist("quiet").is_empty());
        assert_eq!(
            module_blacklist("module_blacklist=a,b-c,,d"),
            ["a", "b-c", "d"]
        );
        assert_eq!(
            module_blacklist("module_blacklist=a module-blacklist=\"x,y\" -- module_blacklist=z"),
            ["x", "y"]
        );
        assert!(module_blacklist("module_blacklist").is_empty());
    }
}

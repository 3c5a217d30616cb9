//! The kernel as the judge of module signatures: every case of [`sigcases`] handed to a
//! real Debian kernel with no gate in between, and the kernel's answer read back.
//!
//! One boot per kernel and enforcement mode ([`boot`]): OVMF (so the kernel has EFI
//! runtime services and loads UEFI `db` into its `.platform` keyring, which Debian's
//! kernels consult for module signatures) with a variable store made from OVMF's snakeoil
//! store ([`vars`]): `db` holds the test keys of [`sigcases::Keys::db_certs`], `dbx` the
//! hashes of the S40 and S41 rows, and `SecureBootEnable` is 0, so Secure Boot is off and
//! enforcement is what `module.sig_enforce=` says. The kernel is started with `-kernel`
//! through OVMF and the initramfs is the test bed's own ([`initramfs`]): busybox, the
//! static `sigcase-load` (one `finit_module` per call, as the init makes it), the case
//! files and a script that loads each case, prints the errno and the module's taint,
//! unloads it, and prints the kernel log lines the load produced. No validator runs in
//! this initramfs; the production init is not involved.
//!
//! Output lines, parsed by [`Boot::parse`]: `SIGRULE <id> <ok|ERRNO> <taint|->`,
//! `SIGRULE-LOG <id> <kernel line>`, `SIGRULES-BOOT <kernel line>` (certificate loading,
//! Secure Boot, lockdown at boot), `SIGRULES-STATE ...`, and `SIGRULES-END`.
//!
//! Limits: the taint-once message ("module verification failed") appears only for the
//! first case that earns it; the lockdown cases run last, after
//! `/sys/kernel/security/lockdown` was raised to `integrity`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use mkinitramfs::cpio::{Archive, Entry, Kind};
use sigcases::{Case, Set};

use crate::efivars::{self, VarStore};
use crate::vm::{self, Outcome, VmConfig};
use crate::HarnessError;

/// OVMF's store with the snakeoil keys enrolled (PK, KEK, db), from Debian's `ovmf`.
pub const SNAKEOIL_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd";

static LOADER: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The static `sigcase-load`, built once per process into the harness's target directory.
pub fn loader() -> Result<PathBuf, HarnessError> {
    let mut guard = LOADER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = guard.as_ref() {
        return Ok(p.clone());
    }
    let ws = crate::paths::workspace();
    let target_dir = ws.join("target/harness");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(&ws)
        .args(["build", "--release", "--locked", "-q", "-p", "sigcases"])
        .args([
            "--bin",
            "sigcase-load",
            "--target",
            "x86_64-unknown-linux-musl",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .map_err(|e| HarnessError::Setup(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Setup(format!(
            "building sigcase-load failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let p = target_dir.join("x86_64-unknown-linux-musl/release/sigcase-load");
    *guard = Some(p.clone());
    Ok(p)
}

/// The variable store for `set`'s boots, written to `<dir>/ovmf-vars.fd`.
pub fn vars(set: &Set, dir: &Path) -> Result<PathBuf, HarnessError> {
    let keys = sigcases::keys();
    let mut s = VarStore::open(Path::new(SNAKEOIL_VARS))?;
    let certs: Vec<Vec<u8>> = keys.db_certs().iter().map(|k| k.cert_der()).collect();
    s.replace("db", efivars::IMAGE_SECURITY_DATABASE, &efivars::db(&certs))?;
    let dbx = efivars::dbx(&set.dbx_hashes(), &[keys.revoked_tbs_sha256()]);
    s.replace("dbx", efivars::IMAGE_SECURITY_DATABASE, &dbx)?;
    s.set_byte("SecureBootEnable", efivars::SECURE_BOOT_ENABLE_GUID, 0)?;
    let out = dir.join("ovmf-vars.fd");
    s.write(&out)?;
    Ok(out)
}

fn file_name(c: &Case) -> String {
    c.file.file_name().unwrap().to_string_lossy().into_owned()
}

/// `id file flags module after-file after-flags after-module` (`-` for none).
fn manifest_line(set: &Set, c: &Case) -> String {
    let (af, afl, am) = match c.after {
        Some(a) => {
            let a = set.get(a);
            (file_name(a), a.flags.to_string(), a.module.to_string())
        }
        None => ("-".into(), "-".into(), "-".into()),
    };
    format!(
        "{} {} {} {} {af} {afl} {am}\n",
        c.id,
        file_name(c),
        c.flags,
        c.module
    )
}

const SCRIPT: &str = r#"#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
dmesg | grep -iE 'x\.509|cert|integrity|secure ?boot|lockdown|platform|blacklist|keyring' | while read -r l; do echo "SIGRULES-BOOT $l"; done
dmesg -c >/dev/null
echo "SIGRULES-STATE sig_enforce=$(cat /sys/module/module/parameters/sig_enforce) compression=$(cat /sys/module/module/parameters/compression 2>/dev/null)"
run_cases() {
    while read -r id file flags mod after aflags amod; do
        if [ "$after" != - ]; then
            r=$(/bin/sigcase-load "/cases/$after" "$aflags")
            echo "SIGRULE-PRE $id $after $r"
        fi
        r=$(/bin/sigcase-load "/cases/$file" "$flags")
        taint=-
        if [ "$r" = ok ]; then
            taint=$(cat "/sys/module/$mod/taint")
            [ -n "$taint" ] || taint=none
            rmmod "$mod" || echo "SIGRULE-RMMOD-FAILED $id $mod"
        fi
        if [ "$after" != - ]; then rmmod "$amod"; fi
        echo "SIGRULE $id $r $taint"
        dmesg -c | while read -r l; do echo "SIGRULE-LOG $id $l"; done
    done < "$1"
}
run_cases /cases/manifest
mount -t securityfs securityfs /sys/kernel/security
echo integrity > /sys/kernel/security/lockdown
echo "SIGRULES-STATE lockdown=$(cat /sys/kernel/security/lockdown)"
dmesg -c | while read -r l; do echo "SIGRULES-BOOT $l"; done
run_cases /cases/manifest.lockdown
echo SIGRULES-END
poweroff -f
"#;

/// The test bed's initramfs for `set`: busybox, `sigcase-load`, the case files, the
/// manifests and the script above as `/init`. Returns its path in `dir`.
pub fn initramfs(set: &Set, dir: &Path) -> Result<PathBuf, HarnessError> {
    let cpio = |e: mkinitramfs::cpio::CpioError| HarnessError::Setup(e.to_string());
    let mut a = Archive::new();
    for d in ["bin", "dev", "proc", "sys", "cases"] {
        a.dir(d).map_err(cpio)?;
    }
    a.add(
        "dev/console",
        Entry {
            kind: Kind::CharDev { major: 5, minor: 1 },
            perm: 0o600,
        },
    )
    .map_err(cpio)?;
    let read = |p: &Path| std::fs::read(p).map_err(|e| HarnessError::io(p, e));
    a.file("bin/busybox", read(Path::new("/bin/busybox"))?, 0o755)
        .map_err(cpio)?;
    for applet in [
        "sh", "mount", "cat", "rmmod", "dmesg", "grep", "poweroff", "sleep",
    ] {
        a.add(
            &format!("bin/{applet}"),
            Entry {
                kind: Kind::Symlink("busybox".into()),
                perm: 0o777,
            },
        )
        .map_err(cpio)?;
    }
    a.file("bin/sigcase-load", read(&loader()?)?, 0o755)
        .map_err(cpio)?;
    let (mut main, mut locked) = (String::new(), String::new());
    for c in &set.cases {
        a.file(&format!("cases/{}", file_name(c)), read(&c.file)?, 0o644)
            .map_err(cpio)?;
        let line = manifest_line(set, c);
        if c.lockdown {
            locked.push_str(&line);
        } else {
            main.push_str(&line);
        }
    }
    a.file("cases/manifest", main.into_bytes(), 0o644)
        .map_err(cpio)?;
    a.file("cases/manifest.lockdown", locked.into_bytes(), 0o644)
        .map_err(cpio)?;
    a.file("init", SCRIPT.as_bytes().to_vec(), 0o755)
        .map_err(cpio)?;
    let gz = mkinitramfs::compress(&a.write(0), mkinitramfs::Compress::Gzip)
        .map_err(|e| HarnessError::Setup(format!("gzip: {e}")))?;
    let out = dir.join("sigrules-initrd.img");
    std::fs::write(&out, gz).map_err(|e| HarnessError::io(&out, e))?;
    Ok(out)
}

/// The kernel's answer to one case.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// `ok` or the errno's name (`EKEYREJECTED`).
    pub result: String,
    /// `/sys/module/<name>/taint` after a load (`none` when empty).
    pub taint: Option<String>,
    /// The kernel log lines the load produced (without their time stamps).
    pub log: Vec<String>,
}

impl Answer {
    pub fn loaded(&self) -> bool {
        self.result == "ok"
    }

    /// `ok taint=E` or `EKEYREJECTED`, for messages and the doc.
    pub fn short(&self) -> String {
        match &self.taint {
            Some(t) => format!("{} taint={t}", self.result),
            None => self.result.clone(),
        }
    }

    /// Whether a log line contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.log.iter().any(|l| l.contains(needle))
    }
}

/// What one boot showed.
#[derive(Debug, Clone)]
pub struct Boot {
    pub enforce: bool,
    pub answers: BTreeMap<String, Answer>,
    /// Kernel lines about certificates, Secure Boot and lockdown.
    pub boot_log: Vec<String>,
    pub state: Vec<String>,
    pub ended: bool,
    pub outcome: Outcome,
}

/// A kernel log line without its `[    1.234567] ` time stamp.
fn untimed(l: &str) -> String {
    match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((_, rest)) => rest.to_string(),
        None => l.to_string(),
    }
}

impl Boot {
    /// Reads the script's lines from a console.
    pub fn parse(console: &str, enforce: bool, outcome: Outcome) -> Boot {
        let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
        let mut boot_log = Vec::new();
        let mut state = Vec::new();
        let mut ended = false;
        for l in console.lines() {
            let l = l.trim_end_matches('\r');
            if let Some(rest) = l.strip_prefix("SIGRULE ") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if let [id, result, taint] = f.as_slice() {
                    let a = answers.entry(id.to_string()).or_default();
                    a.result = result.to_string();
                    a.taint = (*taint != "-").then(|| taint.to_string());
                }
            } else if let Some(rest) = l.strip_prefix("SIGRULE-LOG ") {
                if let Some((id, line)) = rest.split_once(' ') {
                    answers
                        .entry(id.to_string())
                        .or_default()
                        .log
                        .push(untimed(line));
                }
            } else if let Some(rest) = l.strip_prefix("SIGRULES-BOOT ") {
                boot_log.push(untimed(rest));
            } else if let Some(rest) = l.strip_prefix("SIGRULES-STATE ") {
                state.push(rest.to_string());
            } else if l.starts_with("SIGRULES-END") {
                ended = true;
            }
        }
        Boot {
            enforce,
            answers,
            boot_log,
            state,
            ended,
            outcome,
        }
    }

    /// The answer for case `id`; panics (test support) when the boot has none.
    pub fn answer(&self, id: &str) -> &Answer {
        self.answers.get(id).unwrap_or_else(|| {
            panic!(
                "no kernel answer for case {id} (enforce={}): {}",
                self.enforce,
                self.outcome.describe()
            )
        })
    }
}

/// The command line of the boots: the V05 module in `module_blacklist=`, console quiet
/// (the script prints the kernel's lines itself), and enforcement when asked.
pub fn append(enforce: bool) -> String {
    let mut a = format!(
        "loglevel=1 module_blacklist={}",
        sigcases::cases::BLACKLISTED
    );
    if enforce {
        a.push_str(" module.sig_enforce=1");
    }
    a
}

/// Boots `set`'s kernel through OVMF with every case, enforcing or not.
pub fn boot(set: &Set, enforce: bool) -> Result<Boot, HarnessError> {
    let dir = crate::paths::run_dir(&format!(
        "sigrules-{}-{}",
        set.kernel.label(),
        if enforce { "enforce" } else { "noenforce" }
    ))?;
    let kernel = crate::paths::kernel(set.kernel.dir())?;
    let initrd = initramfs(set, &dir)?;
    let vars = vars(set, &dir)?;
    let mut cfg = VmConfig::new(&kernel.vmlinuz, &initrd);
    cfg.tpm = None;
    cfg.append = append(enforce);
    cfg.extra_args = crate::firmware::Ovmf {
        code: crate::firmware::OVMF_CODE.into(),
        vars,
    }
    .qemu_args();
    cfg.timeout = cfg.timeout.max(Duration::from_secs(300));
    let o = vm::run(&cfg, &dir)?;
    let console = o.console.clone();
    Ok(Boot::parse(&console, enforce, o))
}

//! The kernel as the judge of module signatures: every case of [`sigcases`] handed to a
//! real Debian kernel with no gate in between, and the kernel's answer read back.
//!
//! One boot per kernel ([`boot`]): OVMF (so the kernel has EFI runtime services and loads
//! UEFI `db` into its `.platform` keyring, which Debian's kernels consult for module
//! signatures) with a variable store made from OVMF's snakeoil store ([`vars`]): `db` holds
//! the test keys of [`sigcases::Keys::db_certs`], `dbx` the hashes of the S40 and S41 rows,
//! and `SecureBootEnable` is 0, so Secure Boot is off and enforcement is what
//! `sig_enforce` says. The kernel is started with `-kernel` through OVMF and the initramfs
//! is the test bed's own ([`initramfs`]): busybox, the static `sigcase-load` (one
//! `finit_module` per call, as the init makes it), the case files and a script that loads
//! each case, prints the errno and the module's taint, unloads it, and prints the kernel
//! log lines the load produced. No validator runs in this initramfs; the production init
//! is not involved.
//!
//! The script makes three passes ([`Mode`]): every case without enforcement; the lockdown
//! cases after `/sys/kernel/security/lockdown` was raised to `integrity`; every case again
//! after `1` was written to `/sys/module/module/parameters/sig_enforce` (the variable
//! `module.sig_enforce=1` sets on the command line; it can be switched on, never off). So
//! one boot per kernel covers both enforcement settings.
//!
//! Before those passes, the root-hash pass ([`roothash`]) hands dm-verity every root-hash
//! signature of [`sigcases::roothash`].
//!
//! Output lines, parsed by [`Boot::parse`]: `SIGRULE <mode> <id> <ok|ERRNO> <taint|->`,
//! `SIGRULE-LOG <mode> <id> <kernel line>`, `SIGRULES-BOOT <kernel line>` (certificate
//! loading, Secure Boot, lockdown), `SIGRULES-STATE <mode> sig_enforce=.. lockdown=..`,
//! `SIGRULE-RMMOD-FAILED ...` and `SIGRULES-END`.
//!
//! Output lines of the root-hash pass: `ROOTSIG <id> <ok|ERRNO>`, `ROOTSIG-LOG <id> <kernel
//! line>`, `ROOTSIG-SETUP <line>` ([`roothash`]).
//!
//! Limits: the taint-once message ("module verification failed") appears only for the
//! first case of the boot that earns it; the enforcing pass runs under
//! `lockdown=integrity` (lockdown only changes the outcome of the errors enforcement
//! already refuses).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sigcases::{Case, Set};
pub use test_support::sigrules::Refused;
use validator::gate::{Gate, Verdict};

use crate::efivars;
use crate::vm::{self, Outcome, VmConfig};
use crate::HarnessError;

pub mod roothash;

/// The static `sigcase-load`, built once per process as the test bed's other static
/// binaries are (`paths::build_static`).
pub fn loader() -> Result<PathBuf, HarnessError> {
    crate::paths::build_static("sigcase-load", "sigcases", "sigcase-load", &[])
}

/// The variable store for `set`'s boots, written to `<dir>/ovmf-vars.fd`.
pub fn vars(set: &Set, dir: &Path) -> Result<PathBuf, HarnessError> {
    vars_with(set, dir, false)
}

/// [`vars`], with Secure Boot on when `secure_boot`: `SecureBootEnable` 1 and Debian's
/// Secure Boot CA (from shim's `.vendor_cert`, [`debian_ca`]) in `db` too, so OVMF starts
/// Debian's signed kernel; the kernel then locks itself down (`integrity`).
pub fn vars_with(set: &Set, dir: &Path, secure_boot: bool) -> Result<PathBuf, HarnessError> {
    let keys = sigcases::keys();
    let mut s = crate::firmware::snakeoil_store()?;
    let mut certs: Vec<Vec<u8>> = keys.db_certs().iter().map(|k| k.cert_der()).collect();
    if secure_boot {
        certs.push(debian_ca()?);
        s.set_byte(
            "SecureBootEnable",
            crate::efivars::SECURE_BOOT_ENABLE_GUID,
            1,
        )?;
    }
    s.replace("db", efivars::IMAGE_SECURITY_DATABASE, &efivars::db(&certs))?;
    s.replace("dbx", efivars::IMAGE_SECURITY_DATABASE, &dbx_value(set))?;
    let out = dir.join("ovmf-vars.fd");
    s.write(&out)?;
    Ok(out)
}

/// Debian's Secure Boot CA as shim carries it in its `.vendor_cert` section (four 32-bit
/// sizes and offsets, authorized first, then the certificates), DER. The section's name
/// is longer than eight bytes, so it lives in the COFF string table: `objcopy` finds it.
pub fn debian_ca() -> Result<Vec<u8>, HarnessError> {
    let path = crate::paths::workspace().join(crate::firmware::SHIM_SIGNED);
    let out = crate::paths::run_dir("vendor-cert")?.join("vendor_cert.bin");
    crate::disk::run(
        std::process::Command::new("objcopy")
            .args(["-O", "binary", "--only-section=.vendor_cert"])
            .arg(&path)
            .arg(&out),
    )?;
    let b = std::fs::read(&out).map_err(|e| HarnessError::io(&out, e))?;
    let bad = |why: &str| HarnessError::Setup(format!("{}: {why}", path.display()));
    let word = |o: usize| {
        b.get(o..o + 4)
            .and_then(|w| w.try_into().ok())
            .map(|w| u32::from_le_bytes(w) as usize)
    };
    let (size, at) = word(0)
        .zip(word(8))
        .ok_or_else(|| bad(".vendor_cert header"))?;
    b.get(at..at + size)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| bad(".vendor_cert certificate"))
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
@ROOTHASH@
state() { echo "SIGRULES-STATE $1 sig_enforce=$(cat /sys/module/module/parameters/sig_enforce) lockdown=$(cat /sys/kernel/security/lockdown 2>/dev/null)"; }
run_cases() {
    while read -r id file flags mod after aflags amod; do
        if [ "$after" != - ]; then
            r=$(/bin/sigcase-load "/cases/$after" "$aflags")
            echo "SIGRULE-PRE $2 $id $after $r"
        fi
        r=$(/bin/sigcase-load "/cases/$file" "$flags")
        taint=-
        if [ "$r" = ok ]; then
            taint=$(cat "/sys/module/$mod/taint")
            [ -n "$taint" ] || taint=none
            rmmod "$mod" || echo "SIGRULE-RMMOD-FAILED $2 $id $mod"
        fi
        if [ "$after" != - ]; then rmmod "$amod"; fi
        echo "SIGRULE $2 $id $r $taint"
        dmesg -c | while read -r l; do echo "SIGRULE-LOG $2 $id $l"; done
    done < "$1"
}
mount -t securityfs securityfs /sys/kernel/security
state noenforce
run_cases /cases/manifest noenforce
echo integrity > /sys/kernel/security/lockdown
state lockdown
dmesg -c | while read -r l; do echo "SIGRULES-BOOT $l"; done
run_cases /cases/manifest.lockdown lockdown
echo 1 > /sys/module/module/parameters/sig_enforce
state enforce
run_cases /cases/manifest enforce
echo SIGRULES-END
poweroff -f
"#;

/// The test bed's initramfs for `set`: busybox, `sigcase-load`, the case files, the
/// manifests, the root-hash pass's files (`root`) and the script above as `/init`.
/// Returns its path in `dir`.
pub fn initramfs(
    set: &Set,
    root: &roothash::RootHash,
    dir: &Path,
) -> Result<PathBuf, HarnessError> {
    let cpio = |e: mkinitramfs::cpio::CpioError| HarnessError::Setup(e.to_string());
    let mut a = crate::rootfs::busybox_initramfs(
        &["proc", "sys", "cases", "roothash"],
        &[
            "sh", "mount", "cat", "rmmod", "dmesg", "grep", "poweroff", "sleep", "insmod",
            "losetup",
        ],
    )?;
    root.add_to(&mut a)?;
    let read = |p: &Path| std::fs::read(p).map_err(|e| HarnessError::io(p, e));
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
    let script = SCRIPT.replace("@ROOTHASH@", roothash::SCRIPT);
    a.file("init", script.into_bytes(), 0o755).map_err(cpio)?;
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

/// How the kernel was set when it judged a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// `sig_enforce` 0, no lockdown: the kernel as Debian boots it without Secure Boot.
    NoEnforce,
    /// `sig_enforce` 0 and `lockdown=integrity` (the [`Case::lockdown`] cases only).
    Lockdown,
    /// `sig_enforce` 1 (set through `/sys/module/module/parameters/sig_enforce`, the
    /// variable `module.sig_enforce=1` sets), after the lockdown cases.
    Enforce,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::NoEnforce => "noenforce",
            Mode::Lockdown => "lockdown",
            Mode::Enforce => "enforce",
        }
    }

    fn from_label(s: &str) -> Option<Mode> {
        [Mode::NoEnforce, Mode::Lockdown, Mode::Enforce]
            .into_iter()
            .find(|m| m.label() == s)
    }
}

/// What one boot showed.
#[derive(Debug, Clone)]
pub struct Boot {
    pub answers: BTreeMap<(Mode, String), Answer>,
    /// Kernel lines about certificates, Secure Boot and lockdown.
    pub boot_log: Vec<String>,
    /// `SIGRULES-STATE` lines: each pass's mode, `sig_enforce` and lockdown as read back.
    pub state: Vec<String>,
    /// Modules that stayed loaded after a case (a later case of the same module would
    /// then see EEXIST).
    pub rmmod_failed: Vec<String>,
    pub ended: bool,
    pub outcome: Outcome,
    /// The root-hash pass: the kernel's answer per case id (`ok` or the errno's name, and
    /// the log lines), what its set-up printed, and the set-up itself.
    pub roothash: BTreeMap<String, Answer>,
    pub roothash_setup: Vec<String>,
    pub root: Option<roothash::RootHash>,
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
    pub fn parse(console: &str, outcome: Outcome) -> Boot {
        let mut answers: BTreeMap<(Mode, String), Answer> = BTreeMap::new();
        let mut boot_log = Vec::new();
        let mut state = Vec::new();
        let mut rmmod_failed = Vec::new();
        let mut ended = false;
        let mut roothash: BTreeMap<String, Answer> = BTreeMap::new();
        let mut roothash_setup = Vec::new();
        let key = |m: &str, id: &str| Mode::from_label(m).map(|m| (m, id.to_string()));
        for l in console.lines() {
            let l = l.trim_end_matches('\r');
            if let Some(rest) = l.strip_prefix("SIGRULE ") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if let [m, id, result, taint] = f.as_slice() {
                    if let Some(k) = key(m, id) {
                        let a = answers.entry(k).or_default();
                        a.result = result.to_string();
                        a.taint = (*taint != "-").then(|| taint.to_string());
                    }
                }
            } else if let Some(rest) = l.strip_prefix("SIGRULE-LOG ") {
                let mut f = rest.splitn(3, ' ');
                if let (Some(m), Some(id), Some(line)) = (f.next(), f.next(), f.next()) {
                    if let Some(k) = key(m, id) {
                        answers.entry(k).or_default().log.push(untimed(line));
                    }
                }
            } else if let Some(rest) = l.strip_prefix("ROOTSIG ") {
                if let Some((id, result)) = rest.split_once(' ') {
                    roothash.entry(id.to_string()).or_default().result = result.to_string();
                }
            } else if let Some(rest) = l.strip_prefix("ROOTSIG-LOG ") {
                if let Some((id, line)) = rest.split_once(' ') {
                    roothash
                        .entry(id.to_string())
                        .or_default()
                        .log
                        .push(untimed(line));
                }
            } else if let Some(rest) = l.strip_prefix("ROOTSIG-SETUP ") {
                roothash_setup.push(untimed(rest));
            } else if let Some(rest) = l.strip_prefix("SIGRULE-RMMOD-FAILED ") {
                rmmod_failed.push(rest.to_string());
            } else if let Some(rest) = l.strip_prefix("SIGRULES-BOOT ") {
                boot_log.push(untimed(rest));
            } else if let Some(rest) = l.strip_prefix("SIGRULES-STATE ") {
                state.push(rest.to_string());
            } else if l.starts_with("SIGRULES-END") {
                ended = true;
            }
        }
        Boot {
            answers,
            boot_log,
            state,
            rmmod_failed,
            ended,
            outcome,
            roothash,
            roothash_setup,
            root: None,
        }
    }

    /// The answer for case `id` in `mode`, if the boot got that far.
    pub fn answer(&self, mode: Mode, id: &str) -> Option<&Answer> {
        self.answers.get(&(mode, id.to_string()))
    }
}

/// The command line of the boot: the V05 module in `module_blacklist=`, console quiet
/// (the script prints the kernel's lines itself).
pub fn append() -> String {
    format!(
        "loglevel=1 module_blacklist={}",
        sigcases::cases::BLACKLISTED
    )
}

/// Boots `set`'s kernel through OVMF and hands it every case: each case once without
/// enforcement, the lockdown cases under `lockdown=integrity`, then each case again with
/// `sig_enforce` on.
pub fn boot(set: &Set) -> Result<Boot, HarnessError> {
    boot_with(set, false)
}

/// [`boot`], with Secure Boot on when `secure_boot` ([`vars_with`]): the kernel is locked
/// down from the start, so every pass enforces signatures.
pub fn boot_with(set: &Set, secure_boot: bool) -> Result<Boot, HarnessError> {
    let label = if secure_boot { "-secure-boot" } else { "" };
    let dir = crate::paths::run_dir(&format!("sigrules-{}{label}", set.kernel.label()))?;
    let kernel = crate::paths::kernel(set.kernel.dir())?;
    let root = roothash::make(set.kernel.dir(), &dir.join("roothash"))?;
    let initrd = initramfs(set, &root, &dir)?;
    let vars = vars_with(set, &dir, secure_boot)?;
    let mut cfg = VmConfig::new(&kernel.vmlinuz, &initrd);
    cfg.tpm = None;
    cfg.append = append();
    cfg.extra_args = crate::firmware::Ovmf {
        code: crate::firmware::OVMF_CODE.into(),
        vars,
        smm: false,
    }
    .qemu_args();
    cfg.timeout = cfg.timeout.max(Duration::from_secs(600));
    let o = vm::run(&cfg, &dir)?;
    let console = o.console.clone();
    let mut boot = Boot::parse(&console, o);
    boot.root = Some(root);
    Ok(boot)
}

/// The value of `dbx` in the boots' firmware: the S40 file hashes, the S41 certificate's
/// TBS hash.
fn dbx_value(set: &Set) -> Vec<u8> {
    efivars::dbx(&set.dbx_hashes(), &[sigcases::keys().revoked_tbs_sha256()])
}

/// The `dbx` the boots' firmware holds, read back as the init reads it.
pub fn revocations(set: &Set) -> Result<validator::trust::revocation::Revocations, HarnessError> {
    let db = validator::formats::efisiglist::parse(&dbx_value(set))
        .map_err(|e| HarnessError::Setup(format!("the test dbx: {e}")))?;
    Ok(validator::trust::revocation::Revocations::from_database(
        "dbx", &db,
    ))
}

/// The gate the kernel's answers are compared with: [`test_support::sigrules::gate`] (the
/// one the gate's own tests use), with the firmware's `dbx` read back ([`revocations`]) as
/// its hash blacklist, as the init reads it (S40). Returns the gate and the `db`
/// certificates its trust store refused, with the store's message.
pub fn gate(set: &Set) -> Result<(Gate, Refused), HarnessError> {
    test_support::sigrules::gate(set, revocations(set)?.image_sha256).map_err(HarnessError::Setup)
}

/// The gate's verdict on one case (with the case's extra trusted certificates).
pub fn verdict(gate: &Gate, c: &Case) -> Result<Verdict, HarnessError> {
    let mut gate = gate.clone();
    for extra in &c.extra_trust {
        gate.trust
            .add_path(extra)
            .map_err(|e| HarnessError::Setup(format!("{}: {e}", extra.display())))?;
    }
    let raw = std::fs::read(&c.file).map_err(|e| HarnessError::io(&c.file, e))?;
    Ok(gate.check(c.module, &file_name(c), &raw).0)
}

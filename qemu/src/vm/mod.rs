//! One QEMU virtual machine: started in its own process group, serial console captured
//! to a file, watched until it ends or a wall-clock timeout passes, then the whole
//! process group is killed. `panic=-1` and `-no-reboot` are set by default, so a dead PID 1
//! ends the VM instead of hanging it.
//!
//! A VM boots either a kernel directly (`-kernel`, SeaBIOS) or UEFI firmware
//! ([`VmConfig::firmware`]: OVMF from pflash with a writable copy of its variable store)
//! which starts the boot loader on the first disk's ESP. [`run_boots`] can follow reboots
//! ([`VmConfig::follow_reboots`]: no `-no-reboot`, so QEMU resets the guest): the console
//! is split per boot at [`VmConfig::boot_marker`] and each boot gets its own typed
//! [`Outcome`]. A run can be cut like a power cut ([`KillAt`]: SIGKILL to QEMU's process
//! group a given delay after a console text), and disk writes can be throttled
//! ([`Throttle`]) so a cut lands inside a write more often.
//!
//! Limits: boots are told apart by a console text, so a boot loader or kernel that prints
//! nothing is not counted; the console is polled every 20 ms, so times seen on the host
//! ([`Run::seen_at`], a kill's moment) are late by up to that much.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::rootfs::MARKER;
use crate::HarnessError;
use test_support::swtpm::{Channel, Swtpm};
use validator::report::{Decision, Report};

/// The accelerator. TCG is the default: KVM guests hang on the machines we test on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Tcg,
    Kvm,
}

impl Accel {
    /// From `VALIDATOR_ACCEL` (`tcg` or `kvm`), TCG when unset.
    pub fn from_env() -> Accel {
        match std::env::var("VALIDATOR_ACCEL").as_deref() {
            Ok("kvm") => Accel::Kvm,
            _ => Accel::Tcg,
        }
    }
}

/// What to boot.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Appended to the fixed `console=ttyS0 panic=-1`.
    pub append: String,
    /// Bytes appended after `append` (and a space), for bytes that are not UTF-8.
    pub append_raw: Vec<u8>,
    /// Raw disk images, attached as virtio-blk in order (`vda`, `vdb`, ...).
    pub disks: Vec<PathBuf>,
    pub memory_mib: u32,
    /// Virtual CPUs (default 1).
    pub cpus: u32,
    pub accel: Accel,
    pub timeout: Duration,
    /// Extra QEMU arguments (devices).
    pub extra_args: Vec<String>,
    /// A TPM 2.0 (swtpm) with these PCR banks, started for this VM alone.
    pub tpm: Option<Vec<String>>,
    /// Kill the swtpm when the console shows this text (a TPM failing mid-boot).
    pub kill_tpm_on: Option<String>,
    /// Boot UEFI firmware (OVMF) from the disks instead of `-kernel`; `kernel`, `initrd`
    /// and `append` are then unused (the boot loader on the ESP names them).
    pub firmware: Option<crate::firmware::Ovmf>,
    /// Follow guest reboots (no `-no-reboot`): stop when this many boots have ended, that
    /// is when boot N+1 starts, or when QEMU exits, or at the timeout.
    pub follow_reboots: Option<u32>,
    /// Kill QEMU (SIGKILL, its whole process group) at a moment set by the console.
    pub kill_at: Option<KillAt>,
    /// Throttle writes to every disk.
    pub throttle: Option<Throttle>,
    /// The console text that starts a boot, instead of [`VmConfig::boot_marker`]'s
    /// default (e.g. [`KERNEL_BOOT_MARKER`] under firmware to count kexec'd kernels too).
    pub split_at: Option<String>,
}

/// A power cut: SIGKILL to QEMU's process group `delay` after the `nth` (1-based)
/// occurrence of `text` on the console was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillAt {
    pub text: String,
    pub nth: u32,
    pub delay: Duration,
}

impl KillAt {
    /// At the first occurrence of `text`, after `delay`.
    pub fn on(text: &str, delay: Duration) -> KillAt {
        KillAt {
            text: text.into(),
            nth: 1,
            delay,
        }
    }
}

/// QEMU block throttling on the disks' writes (`throttling.bps-write`,
/// `throttling.iops-write` on each `-drive`); `None` leaves that limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Throttle {
    pub bps_write: Option<u64>,
    pub iops_write: Option<u64>,
}

/// The console text that starts a boot under firmware: OVMF's boot manager prints it
/// each time it starts the boot loader, after every reset.
pub const FIRMWARE_BOOT_MARKER: &str = "BdsDxe: loading Boot";
/// The console text that starts a boot without firmware: the kernel's banner.
pub const KERNEL_BOOT_MARKER: &str = "Linux version ";

impl VmConfig {
    pub fn new(kernel: &Path, initrd: &Path) -> VmConfig {
        VmConfig {
            kernel: kernel.to_path_buf(),
            initrd: initrd.to_path_buf(),
            append: String::new(),
            append_raw: Vec::new(),
            disks: Vec::new(),
            memory_mib: 1024,
            cpus: 1,
            accel: Accel::from_env(),
            timeout: Duration::from_secs(
                std::env::var("VALIDATOR_VM_TIMEOUT")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(120),
            ),
            extra_args: Vec::new(),
            tpm: Some(vec!["sha1".into(), "sha256".into()]),
            kill_tpm_on: None,
            firmware: None,
            follow_reboots: None,
            kill_at: None,
            throttle: None,
            split_at: None,
        }
    }

    /// A VM that boots `firmware` (OVMF) and, through it, the boot loader on its disk.
    pub fn uefi(firmware: crate::firmware::Ovmf) -> VmConfig {
        let mut c = VmConfig::new(Path::new(""), Path::new(""));
        c.firmware = Some(firmware);
        c
    }

    /// The console text each boot starts with: [`VmConfig::split_at`], else
    /// [`FIRMWARE_BOOT_MARKER`] under firmware (a kexec is then no new boot), else
    /// [`KERNEL_BOOT_MARKER`].
    pub fn boot_marker(&self) -> &str {
        if let Some(m) = &self.split_at {
            m
        } else if self.firmware.is_some() {
            FIRMWARE_BOOT_MARKER
        } else {
            KERNEL_BOOT_MARKER
        }
    }

    /// The kernel command line of a direct boot: the fixed part, `append`, `append_raw`.
    pub fn kernel_cmdline(&self) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStringExt;
        let mut line = format!("console=ttyS0 panic=-1 {}", self.append)
            .trim_end()
            .as_bytes()
            .to_vec();
        if !self.append_raw.is_empty() {
            line.push(b' ');
            line.extend_from_slice(&self.append_raw);
        }
        std::ffi::OsString::from_vec(line)
    }

    /// The full QEMU command line.
    pub fn command(&self, console: &Path) -> Command {
        let mut c = Command::new("qemu-system-x86_64");
        let accel = match self.accel {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        };
        let cpu = match self.accel {
            Accel::Tcg => "max",
            Accel::Kvm => "host",
        };
        let smm = if self.firmware.as_ref().is_some_and(|f| f.smm) {
            ",smm=on"
        } else {
            ""
        };
        c.args(["-machine", &format!("q35,accel={accel}{smm}"), "-cpu", cpu])
            .args([
                "-m",
                &self.memory_mib.to_string(),
                "-smp",
                &self.cpus.to_string(),
            ])
            .args(["-nodefaults", "-display", "none", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()));
        if self.follow_reboots.is_none() {
            c.arg("-no-reboot");
        }
        match &self.firmware {
            Some(fw) => {
                c.args(fw.qemu_args());
            }
            None => {
                c.arg("-kernel")
                    .arg(&self.kernel)
                    .arg("-initrd")
                    .arg(&self.initrd)
                    .arg("-append")
                    .arg(self.kernel_cmdline());
            }
        }
        let mut throttle = String::new();
        if let Some(t) = &self.throttle {
            if let Some(b) = t.bps_write {
                throttle.push_str(&format!(",throttling.bps-write={b}"));
            }
            if let Some(n) = t.iops_write {
                throttle.push_str(&format!(",throttling.iops-write={n}"));
            }
        }
        for (i, d) in self.disks.iter().enumerate() {
            c.arg("-drive")
                .arg(format!(
                    "file={},format=raw,if=none,id=d{i},cache=unsafe{throttle}",
                    d.display()
                ))
                .args(["-device", &format!("virtio-blk-pci,drive=d{i}")]);
        }
        c.args(&self.extra_args);
        c
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The real root's init printed its marker (after our `switch_root`).
    RootInitReached,
    /// The validator printed its report and stopped the boot ("pass" that never reached the
    /// root shows up here too).
    Decision(Decision),
    /// The kernel panicked (the line after "Kernel panic - not syncing").
    KernelPanic(String),
    /// Still running at the timeout.
    Timeout,
    /// QEMU ended without any of the above.
    Exited(Option<i32>),
    /// The guest reset itself (a reboot that [`run_boots`] followed) without any of the
    /// above.
    Rebooted,
    /// Killed by the harness ([`KillAt`]) before any of the above.
    Killed,
}

/// The typed outcome of a run.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub verdict: Verdict,
    /// The validator's full report (printed by the test bed's init), checked against the
    /// schema and the console line ([`crate::reportcheck`]).
    pub report: Option<Report>,
    /// The report as the root's init found it in `/run/validator/report.json`.
    pub root_report: Option<Report>,
    /// The root's init marker line.
    pub marker: Option<String>,
    pub console: String,
    pub log_path: PathBuf,
    pub wall: Duration,
    pub timed_out: bool,
}

impl Outcome {
    /// Seconds since boot printed by the root's init (`uptime=`).
    pub fn root_uptime(&self) -> Option<f64> {
        self.marker
            .as_ref()?
            .split_whitespace()
            .find_map(|w| w.strip_prefix("uptime=")?.parse().ok())
    }

    /// The kernel's timestamp (seconds) of the first console line containing `needle`.
    pub fn kernel_time_of(&self, needle: &str) -> Option<f64> {
        self.console
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| {
                let l = l.trim_start();
                let inner = l.strip_prefix('[')?.split(']').next()?;
                inner.trim().parse().ok()
            })
    }

    /// For tests: the report of a boot the validator stopped; panics on any other end.
    pub fn stopped(&self) -> &Report {
        assert_eq!(
            self.verdict,
            Verdict::Decision(Decision::Stop),
            "{}",
            self.describe()
        );
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report: {}", self.describe()))
    }

    /// For tests: the report of a boot that reached the real root's init; panics on any
    /// other end.
    pub fn reached_root(&self) -> &Report {
        assert_eq!(
            self.verdict,
            Verdict::RootInitReached,
            "{}",
            self.describe()
        );
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report: {}", self.describe()))
    }

    /// A one-line description for test failure messages.
    pub fn describe(&self) -> String {
        format!(
            "{:?} after {:.1}s (console log: {})",
            self.verdict,
            self.wall.as_secs_f64(),
            self.log_path.display()
        )
    }
}

/// Kills the VM's whole process group when dropped.
struct Group(Child);

impl Group {
    /// SIGKILL to the whole process group, then reap the leader.
    fn kill(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id().cast_signed());
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Classifies console text.
pub fn classify(
    console: &str,
    timed_out: bool,
    code: Option<i32>,
) -> (Verdict, Option<Report>, Option<Report>, Option<String>) {
    let found = crate::reportcheck::read(console);
    let (report, root_report) = (found.report, found.root_report);
    let decided = found.line.as_ref().and_then(|l| {
        serde_json::from_value::<Decision>(serde_json::Value::String(l.decision.clone())).ok()
    });
    let marker = console
        .lines()
        .find(|l| l.starts_with(MARKER))
        .map(|l| l.trim_end().to_string());
    let panic = console.lines().find_map(|l| {
        l.find("Kernel panic - not syncing:").map(|i| {
            l[i + "Kernel panic - not syncing:".len()..]
                .trim()
                .to_string()
        })
    });
    let verdict = if marker.is_some() {
        Verdict::RootInitReached
    } else if let Some(p) = panic {
        Verdict::KernelPanic(p)
    } else if let Some(d) = decided {
        Verdict::Decision(d)
    } else if timed_out {
        Verdict::Timeout
    } else {
        Verdict::Exited(code)
    };
    (verdict, report, root_report, marker)
}

/// Starts a swtpm for one VM: a fresh state with `banks`, a control socket in `dir`.
/// swtpm exits when QEMU disconnects; dropping it kills its process group in any case.
fn start_swtpm(dir: &Path, banks: &[String]) -> Result<Swtpm, HarnessError> {
    let setup = |e: test_support::swtpm::SwtpmError| HarnessError::Setup(e.to_string());
    let state = dir.join("tpm-state");
    let _ = std::fs::remove_dir_all(&state);
    test_support::swtpm::create_state(&state, &banks.join(","), false).map_err(setup)?;
    Swtpm::serve(
        &state,
        &Channel::Unix(dir.join("swtpm.sock")),
        "startup-clear",
        &dir.join("swtpm.log"),
    )
    .map_err(setup)
}

/// Boots `cfg`, writing the console to `<dir>/console.log`; one outcome for the whole
/// console (see [`run_boots`] for one per boot).
pub fn run(cfg: &VmConfig, dir: &Path) -> Result<Outcome, HarnessError> {
    let w = watch(cfg, dir)?;
    let console = String::from_utf8_lossy(&w.console).into_owned();
    Ok(outcome(console, true, &w, w.log_path.clone(), w.wall))
}

/// Every boot of one QEMU run, in order.
#[derive(Debug, Clone)]
pub struct Run {
    /// One outcome per boot; its console is that boot's part of the log (the first also
    /// holds what came before the first boot marker).
    pub boots: Vec<Outcome>,
    /// When each boot started (its marker seen), since QEMU started.
    pub started: Vec<Duration>,
    /// Stopped because boot `follow_reboots + 1` started.
    pub boot_limit_reached: bool,
    /// When the [`KillAt`] cut happened, since QEMU started.
    pub killed_at: Option<Duration>,
    pub timed_out: bool,
    /// QEMU's exit status when it ended by itself.
    pub exit_code: Option<i32>,
    pub console: String,
    pub log_path: PathBuf,
    pub wall: Duration,
    /// Byte offset in the console of each boot's start.
    offsets: Vec<usize>,
    /// (console length, time it was first seen) after each read.
    arrivals: Vec<(usize, Duration)>,
    raw: Vec<u8>,
}

impl Run {
    /// When `needle` was first seen on the console in boot `boot` (0-based), since QEMU
    /// started (late by up to one poll interval).
    pub fn seen_at(&self, boot: usize, needle: &str) -> Option<Duration> {
        let from = *self.offsets.get(boot)?;
        let to = self
            .offsets
            .get(boot + 1)
            .copied()
            .unwrap_or(self.raw.len());
        let at = find(&self.raw[from..to], needle.as_bytes())? + from + needle.len();
        self.arrivals
            .iter()
            .find(|(len, _)| *len >= at)
            .map(|(_, t)| *t)
    }

    /// A one-line description for test failure messages.
    pub fn describe(&self) -> String {
        let v: Vec<String> = self
            .boots
            .iter()
            .map(|o| format!("{:?}", o.verdict))
            .collect();
        format!(
            "{} boot(s) [{}]{}{}{} after {:.1}s (console log: {})",
            self.boots.len(),
            v.join(", "),
            if self.boot_limit_reached {
                ", boot limit reached"
            } else {
                ""
            },
            match self.killed_at {
                Some(t) => format!(", killed at {:.2}s", t.as_secs_f64()),
                None => String::new(),
            },
            if self.timed_out { ", timed out" } else { "" },
            self.wall.as_secs_f64(),
            self.log_path.display()
        )
    }
}

/// Boots `cfg` and returns one outcome per boot (reboots are followed when
/// `cfg.follow_reboots` is set; otherwise there is one boot, or none when nothing printed
/// a boot marker, e.g. firmware that found nothing to boot).
pub fn run_boots(cfg: &VmConfig, dir: &Path) -> Result<Run, HarnessError> {
    let w = watch(cfg, dir)?;
    let limit = match (w.boot_limit_reached, cfg.follow_reboots) {
        (true, Some(n)) => Some(n as usize),
        _ => None,
    };
    let (mut offsets, end) = boot_starts(&w.console, cfg.boot_marker().as_bytes(), limit);
    let time_of = |off: usize| {
        w.arrivals
            .iter()
            .find(|(len, _)| *len > off)
            .map(|(_, t)| *t)
            .unwrap_or(w.wall)
    };
    let started: Vec<Duration> = offsets.iter().map(|o| time_of(*o)).collect();
    let mut boots = Vec::new();
    for (k, off) in offsets.iter().enumerate() {
        let from = if k == 0 { 0 } else { *off };
        let last = k + 1 == offsets.len();
        let to = offsets.get(k + 1).copied().unwrap_or(end);
        let text = String::from_utf8_lossy(&w.console[from..to]).into_owned();
        let ended_run = last && !w.boot_limit_reached;
        let until = if ended_run { w.wall } else { time_of(to) };
        boots.push(outcome(
            text,
            ended_run,
            &w,
            w.log_path.clone(),
            until.saturating_sub(started[k]),
        ));
    }
    if let Some(first) = offsets.first_mut() {
        *first = 0;
    }
    Ok(Run {
        boots,
        started,
        boot_limit_reached: w.boot_limit_reached,
        killed_at: w.killed_at,
        timed_out: w.timed_out,
        exit_code: w.code,
        console: String::from_utf8_lossy(&w.console).into_owned(),
        log_path: w.log_path,
        wall: w.wall,
        offsets,
        arrivals: w.arrivals,
        raw: w.console,
    })
}

/// The typed outcome of one console part; `ended_run`: this part is where the run ended
/// (so a timeout, a kill or QEMU's exit status belong to it), else the guest rebooted.
fn outcome(
    console: String,
    ended_run: bool,
    w: &Watched,
    log_path: PathBuf,
    wall: Duration,
) -> Outcome {
    let (timed_out, code) = if ended_run {
        (w.timed_out, w.code)
    } else {
        (false, None)
    };
    let (mut verdict, report, root_report, marker) = classify(&console, timed_out, code);
    if verdict == Verdict::Exited(None) {
        if ended_run && w.killed_at.is_some() {
            verdict = Verdict::Killed;
        } else if !ended_run {
            verdict = Verdict::Rebooted;
        }
    }
    Outcome {
        verdict,
        report,
        root_report,
        marker,
        console,
        log_path,
        wall,
        timed_out,
    }
}

/// Where each boot starts in `console` (each occurrence of `marker`), and where the last
/// counted boot ends: with `limit` (the boot limit was reached) the boots past it are
/// left out and the last one ends where the next began.
fn boot_starts(console: &[u8], marker: &[u8], limit: Option<usize>) -> (Vec<usize>, usize) {
    let mut offsets = Vec::new();
    let mut i = 0;
    while let Some(p) = find(&console[i..], marker) {
        offsets.push(i + p);
        i += p + marker.len();
    }
    let mut end = console.len();
    if let Some(limit) = limit {
        if let Some(e) = offsets.get(limit) {
            end = *e;
        }
        offsets.truncate(limit);
    }
    (offsets, end)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Counts the occurrences of a text in a growing buffer, scanning each byte once.
struct Counter {
    needle: Vec<u8>,
    count: u32,
    /// The first position where an occurrence not yet counted may start.
    next: usize,
}

impl Counter {
    fn new(needle: &str) -> Counter {
        Counter {
            needle: needle.as_bytes().to_vec(),
            count: 0,
            next: 0,
        }
    }

    /// Counts the new occurrences in `buf` (which only grows).
    fn update(&mut self, buf: &[u8]) -> u32 {
        while let Some(p) = find(&buf[self.next..], &self.needle) {
            self.count += 1;
            self.next += p + self.needle.len();
        }
        self.next = self
            .next
            .max((buf.len() + 1).saturating_sub(self.needle.len()));
        self.count
    }
}

/// What watching one QEMU run saw.
struct Watched {
    console: Vec<u8>,
    arrivals: Vec<(usize, Duration)>,
    code: Option<i32>,
    timed_out: bool,
    killed_at: Option<Duration>,
    boot_limit_reached: bool,
    log_path: PathBuf,
    wall: Duration,
}

/// Starts QEMU for `cfg` (and its swtpm) and watches the console until QEMU ends, the
/// timeout, the boot limit or the kill; then kills both process groups.
fn watch(cfg: &VmConfig, dir: &Path) -> Result<Watched, HarnessError> {
    let log_path = dir.join("console.log");
    let _ = std::fs::remove_file(&log_path);
    let mut swtpm = match &cfg.tpm {
        Some(banks) => Some(start_swtpm(dir, banks)?),
        None => None,
    };
    let mut cmd = cfg.command(&log_path);
    if let Some(sock) = swtpm.as_ref().and_then(|t| t.socket.as_ref()) {
        cmd.arg("-chardev")
            .arg(format!("socket,id=chrtpm,path={}", sock.display()))
            .args([
                "-tpmdev",
                "emulator,id=tpm0,chardev=chrtpm",
                "-device",
                "tpm-tis,tpmdev=tpm0",
            ]);
    }
    let qemu_log = dir.join("qemu.stderr");
    let errf = std::fs::File::create(&qemu_log).map_err(|e| HarnessError::io(&qemu_log, e))?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(errf)
        .process_group(0);
    std::fs::write(dir.join("qemu.cmdline"), format!("{cmd:?}\n"))
        .map_err(|e| HarnessError::io(dir, e))?;
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| {
        HarnessError::Setup(format!(
            "cannot start qemu-system-x86_64: {e} (run scripts/provision)"
        ))
    })?;
    let mut group = Group(child);
    let mut timed_out = false;
    let mut killed_at = None;
    let mut boot_limit_reached = false;
    let mut console = Vec::new();
    let mut arrivals = Vec::new();
    let mut file: Option<std::fs::File> = None;
    let mut boots = Counter::new(cfg.boot_marker());
    let mut tpm_text = cfg.kill_tpm_on.as_deref().map(Counter::new);
    let mut kill_text = cfg.kill_at.as_ref().map(|k| Counter::new(&k.text));
    let mut kill_deadline: Option<Duration> = None;
    let mut read_console = |console: &mut Vec<u8>, arrivals: &mut Vec<(usize, Duration)>| {
        use std::io::Read;
        if file.is_none() {
            file = std::fs::File::open(&log_path).ok();
        }
        if let Some(f) = file.as_mut() {
            let before = console.len();
            let _ = f.read_to_end(console);
            if console.len() > before {
                arrivals.push((console.len(), start.elapsed()));
            }
        }
    };
    let code = loop {
        let exited = match group.0.try_wait() {
            Ok(Some(st)) => Some(st.code()),
            Ok(None) => None,
            Err(e) => return Err(HarnessError::io(&log_path, e)),
        };
        read_console(&mut console, &mut arrivals);
        if let Some(code) = exited {
            break code;
        }
        let now = start.elapsed();
        if now >= cfg.timeout {
            timed_out = true;
            break None;
        }
        if let (Some(c), Some(_)) = (tpm_text.as_mut(), &swtpm) {
            if c.update(&console) > 0 {
                swtpm = None; // dropping it kills the swtpm's process group
            }
        }
        if let Some(limit) = cfg.follow_reboots {
            if boots.update(&console) > limit {
                boot_limit_reached = true;
                break None;
            }
        }
        if let (Some(k), Some(c)) = (&cfg.kill_at, kill_text.as_mut()) {
            if kill_deadline.is_none() && c.update(&console) >= k.nth.max(1) {
                kill_deadline = Some(now + k.delay);
            }
        }
        if let Some(d) = kill_deadline {
            if now >= d {
                group.kill();
                killed_at = Some(start.elapsed());
                break None;
            }
            let left = d - now;
            std::thread::sleep(left.min(Duration::from_millis(20)));
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    drop(group);
    drop(swtpm);
    read_console(&mut console, &mut arrivals);
    let wall = start.elapsed();
    if console.is_empty() && !timed_out && killed_at.is_none() {
        let err = std::fs::read_to_string(&qemu_log).unwrap_or_default();
        return Err(HarnessError::Setup(format!(
            "QEMU exited ({code:?}) without output: {err}"
        )));
    }
    Ok(Watched {
        console,
        arrivals,
        code,
        timed_out,
        killed_at,
        boot_limit_reached,
        log_path,
        wall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        let (v, ..) = classify(
            "[ 1.0] x\nROOT-INIT-MARKER uptime=2.5 pid=1\n",
            false,
            Some(0),
        );
        assert_eq!(v, Verdict::RootInitReached);
        let (v, ..) = classify(
            "[ 2.0] Kernel panic - not syncing: Attempted to kill init! exitcode=0x0\n",
            false,
            Some(0),
        );
        assert_eq!(
            v,
            Verdict::KernelPanic("Attempted to kill init! exitcode=0x0".into())
        );
        let mut rep = Report::new(1);
        rep.fail(validator::report::Fault::Image, "x".into());
        let bytes = validator::report::json::file_bytes(&rep);
        let text = format!(
            "{}{}",
            validator::report::console::full_line(&rep.to_json()),
            validator::report::console::line(&rep, &validator::report::json::digest(&bytes))
        );
        let (v, r, ..) = classify(&text, false, Some(0));
        assert_eq!(v, Verdict::Decision(Decision::Stop));
        assert!(r.is_some());
        assert_eq!(classify("", true, None).0, Verdict::Timeout);
        assert_eq!(classify("x", false, Some(1)).0, Verdict::Exited(Some(1)));
    }

    #[test]
    fn counter_counts_each_occurrence_once_as_the_buffer_grows() {
        let mut c = Counter::new("Linux version ");
        let mut buf = b"xx Linux ver".to_vec();
        assert_eq!(c.update(&buf), 0);
        buf.extend_from_slice(b"sion 6.1\nLinux version 6.1\n");
        assert_eq!(c.update(&buf), 2);
        assert_eq!(c.update(&buf), 2);
        buf.extend_from_slice(b"Linux version");
        assert_eq!(c.update(&buf), 2);
        buf.push(b' ');
        assert_eq!(c.update(&buf), 3);
    }

    #[test]
    fn boots_split_at_their_markers() {
        let c = b"fw M1 a M2 b M3 c";
        assert_eq!(boot_starts(c, b"M", None), (vec![3, 8, 13], c.len()));
        assert_eq!(boot_starts(c, b"M", Some(2)), (vec![3, 8], 13));
        assert_eq!(boot_starts(b"nothing", b"M", None), (vec![], 7));
    }

    #[test]
    fn command_line_for_firmware_reboots_and_throttling() {
        let args = |c: &VmConfig| -> Vec<String> {
            c.command(Path::new("/c.log"))
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let mut c = VmConfig::new(Path::new("/k"), Path::new("/i"));
        c.disks.push("/d.img".into());
        let a = args(&c);
        assert!(a.contains(&"-no-reboot".to_string()));
        assert!(a.contains(&"-kernel".to_string()));
        assert_eq!(c.boot_marker(), KERNEL_BOOT_MARKER);
        c.firmware = Some(crate::firmware::Ovmf {
            code: "/code.fd".into(),
            vars: "/vars.fd".into(),
            smm: false,
        });
        c.follow_reboots = Some(2);
        c.throttle = Some(Throttle {
            bps_write: Some(4096),
            iops_write: None,
        });
        let a = args(&c);
        assert!(!a.contains(&"-no-reboot".to_string()));
        assert!(!a.contains(&"-kernel".to_string()));
        assert!(a.contains(&"if=pflash,format=raw,unit=0,readonly=on,file=/code.fd".to_string()));
        assert!(a.contains(&"if=pflash,format=raw,unit=1,file=/vars.fd".to_string()));
        assert!(a.contains(
            &"file=/d.img,format=raw,if=none,id=d0,cache=unsafe,throttling.bps-write=4096"
                .to_string()
        ));
        assert_eq!(c.boot_marker(), FIRMWARE_BOOT_MARKER);
    }

    #[test]
    fn kernel_timestamps() {
        let o = Outcome {
            verdict: Verdict::Timeout,
            report: None,
            root_report: None,
            marker: Some("ROOT-INIT-MARKER uptime=2.25 pid=1".into()),
            console: "[    1.568855] Run /init as init process\n".into(),
            log_path: PathBuf::new(),
            wall: Duration::ZERO,
            timed_out: false,
        };
        assert_eq!(o.kernel_time_of("Run /init"), Some(1.568855));
        assert_eq!(o.root_uptime(), Some(2.25));
    }
}

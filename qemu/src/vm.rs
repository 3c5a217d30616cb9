//! One QEMU virtual machine: started in its own process group, serial console captured
//! to a file, watched until it ends or a wall-clock timeout passes, then the whole
//! process group is killed. `panic=-1` and `-no-reboot` are always set, so a dead PID 1
//! ends the VM instead of hanging it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::rootfs::MARKER;
use crate::HarnessError;
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
}

impl VmConfig {
    pub fn new(kernel: &Path, initrd: &Path) -> VmConfig {
        VmConfig {
            kernel: kernel.to_path_buf(),
            initrd: initrd.to_path_buf(),
            append: String::new(),
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
        }
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
        c.args(["-machine", &format!("q35,accel={accel}"), "-cpu", cpu])
            .args([
                "-m",
                &self.memory_mib.to_string(),
                "-smp",
                &self.cpus.to_string(),
            ])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-no-reboot",
                "-monitor",
                "none",
            ])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&self.initrd)
            .arg("-append")
            .arg(format!("console=ttyS0 panic=-1 {}", self.append).trim_end());
        for (i, d) in self.disks.iter().enumerate() {
            c.arg("-drive")
                .arg(format!(
                    "file={},format=raw,if=none,id=d{i},cache=unsafe",
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

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
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
/// swtpm exits when QEMU disconnects; the guard kills it in any case.
fn start_swtpm(dir: &Path, banks: &[String]) -> Result<(Group, PathBuf), HarnessError> {
    let state = dir.join("tpm-state");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).map_err(|e| HarnessError::io(&state, e))?;
    crate::disk::run(
        Command::new("swtpm_setup")
            .arg("--tpm2")
            .arg("--tpmstate")
            .arg(&state)
            .args(["--pcr-banks", &banks.join(","), "--overwrite"]),
    )?;
    let sock = dir.join("swtpm.sock");
    let _ = std::fs::remove_file(&sock);
    let log = std::fs::File::create(dir.join("swtpm.log")).map_err(|e| HarnessError::io(dir, e))?;
    let child = Command::new("swtpm")
        .args(["socket", "--tpm2", "--tpmstate"])
        .arg(format!("dir={}", state.display()))
        .arg("--ctrl")
        .arg(format!("type=unixio,path={}", sock.display()))
        .args(["--flags", "startup-clear"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| {
            HarnessError::Setup(format!("cannot start swtpm: {e} (run scripts/provision)"))
        })?;
    let g = Group(child);
    let t = Instant::now();
    while !sock.exists() {
        if t.elapsed() > Duration::from_secs(10) {
            return Err(HarnessError::Setup(
                "swtpm did not create its socket".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((g, sock))
}

/// Boots `cfg`, writing the console to `<dir>/console.log`.
pub fn run(cfg: &VmConfig, dir: &Path) -> Result<Outcome, HarnessError> {
    let log_path = dir.join("console.log");
    let _ = std::fs::remove_file(&log_path);
    let mut swtpm = match &cfg.tpm {
        Some(banks) => Some(start_swtpm(dir, banks)?),
        None => None,
    };
    let mut cmd = cfg.command(&log_path);
    if let Some((_, sock)) = &swtpm {
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
    let code = loop {
        match group.0.try_wait() {
            Ok(Some(st)) => break st.code(),
            Ok(None) => {}
            Err(e) => return Err(HarnessError::io(&log_path, e)),
        }
        if start.elapsed() >= cfg.timeout {
            timed_out = true;
            break None;
        }
        if let (Some(needle), Some(_)) = (&cfg.kill_tpm_on, &swtpm) {
            let text = std::fs::read(&log_path).unwrap_or_default();
            if text.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                swtpm = None; // the guard kills the swtpm's process group
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(group);
    drop(swtpm);
    let wall = start.elapsed();
    let console =
        String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).into_owned();
    if console.is_empty() && !timed_out {
        let err = std::fs::read_to_string(&qemu_log).unwrap_or_default();
        return Err(HarnessError::Setup(format!(
            "QEMU exited ({code:?}) without output: {err}"
        )));
    }
    let (verdict, report, root_report, marker) = classify(&console, timed_out, code);
    Ok(Outcome {
        verdict,
        report,
        root_report,
        marker,
        console,
        log_path,
        wall,
        timed_out,
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

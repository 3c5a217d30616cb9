//! Starting one QEMU run and watching it.
//!
//! Contract: [`watch`] starts a swtpm for the VM when its config asks for one (a fresh
//! state, a control socket in the run directory) and QEMU in its own process group with
//! the serial console written to `<dir>/console.log` (its stderr to `qemu.stderr`, its
//! command line to `qemu.cmdline`, the console with host times to `console.timed`); it
//! polls the console until QEMU exits, the timeout passes, the boot limit is reached (`follow_reboots`), or a [`KillAt`](super::KillAt)
//! cut is due, kills the swtpm when `kill_tpm_on` shows, and at the end kills both process
//! groups, whatever happened. [`Watched`] is what it saw: the console bytes, when each
//! part of them arrived, and how the run ended. A QEMU that exits with no console output
//! at all is a setup error, not an outcome.
//!
//! Limits: the console is polled every 20 ms, so times seen on the host (arrivals, a
//! kill's moment) are late by up to that much.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::VmConfig;
use crate::HarnessError;
use test_support::swtpm::{Channel, Swtpm};

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

pub(super) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
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

/// The console with each line prefixed by the host's time (seconds since QEMU started)
/// at which the line's last byte had arrived: where a run's wall time went, firmware and
/// boot loader included, which the kernel's own timestamps do not show.
fn timed(console: &[u8], arrivals: &[(usize, Duration)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(console.len() + console.len() / 8);
    let mut next = arrivals.iter().peekable();
    let mut line_start = 0;
    for (i, b) in console.iter().enumerate() {
        if *b != b'\n' && i + 1 != console.len() {
            continue;
        }
        while next.peek().is_some_and(|(end, _)| *end <= i) {
            next.next();
        }
        let t = next.peek().map_or(0.0, |(_, t)| t.as_secs_f64());
        out.extend_from_slice(format!("{t:8.2} ").as_bytes());
        out.extend_from_slice(console.get(line_start..=i).unwrap_or_default());
        line_start = i + 1;
    }
    out
}

/// What watching one QEMU run saw.
pub(super) struct Watched {
    pub(super) console: Vec<u8>,
    pub(super) arrivals: Vec<(usize, Duration)>,
    pub(super) code: Option<i32>,
    pub(super) timed_out: bool,
    pub(super) killed_at: Option<Duration>,
    pub(super) boot_limit_reached: bool,
    pub(super) log_path: PathBuf,
    pub(super) wall: Duration,
}

/// Sends `commands` to QEMU's monitor socket beside `log_path`, each after the previous
/// one's prompt came back; the monitor's output (or why it could not be reached) goes to
/// `monitor.log` there.
fn monitor(log_path: &Path, commands: &[String]) {
    use std::io::{Read, Write};
    let sock = log_path.with_file_name(super::config::MONITOR_SOCKET);
    let mut log = String::new();
    let mut talk = || -> std::io::Result<()> {
        let mut s = std::os::unix::net::UnixStream::connect(&sock)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = [0u8; 4096];
        let mut prompt = |s: &mut std::os::unix::net::UnixStream, log: &mut String| {
            let mut seen = String::new();
            while !seen.contains("(qemu)") {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                seen.push_str(&String::from_utf8_lossy(buf.get(..n).unwrap_or_default()));
            }
            log.push_str(&seen);
            std::io::Result::Ok(())
        };
        prompt(&mut s, &mut log)?;
        for c in commands {
            s.write_all(format!("{c}\n").as_bytes())?;
            prompt(&mut s, &mut log)?;
        }
        Ok(())
    };
    if let Err(e) = talk() {
        log.push_str(&format!("\nmonitor {}: {e}\n", sock.display()));
    }
    let _ = std::fs::write(log_path.with_file_name("monitor.log"), log);
}

/// Starts QEMU for `cfg` (and its swtpm) and watches the console until QEMU ends, the
/// timeout, the boot limit or the kill; then kills both process groups.
pub(super) fn watch(cfg: &VmConfig, dir: &Path) -> Result<Watched, HarnessError> {
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
    let mut monitor_text = cfg.monitor_on.as_ref().map(|m| Counter::new(&m.text));
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
        if let (Some(m), Some(c)) = (&cfg.monitor_on, monitor_text.as_mut()) {
            if c.update(&console) > 0 {
                monitor(&log_path, &m.commands);
                monitor_text = None;
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
    let _ = std::fs::write(dir.join("console.timed"), timed(&console, &arrivals));
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
    fn timed_prefixes_each_line_with_the_arrival_of_its_last_byte() {
        let console = b"a\nbb\nc";
        let arrivals = [
            (3, Duration::from_millis(1000)),
            (5, Duration::from_millis(2500)),
            (6, Duration::from_millis(3000)),
        ];
        assert_eq!(
            String::from_utf8(timed(console, &arrivals)).unwrap(),
            "    1.00 a\n    2.50 bb\n    3.00 c"
        );
        assert!(timed(b"", &[]).is_empty());
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
}

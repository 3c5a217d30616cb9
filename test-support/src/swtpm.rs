//! The workspace's one swtpm (libtpms) launcher: for the tests that talk to a real TPM
//! over TCP (with the TCTI tpm2-tools use to reach the same TPM), for the test bed's VMs
//! (QEMU's `tpm-emulator` over a control socket), for the attestation harness that serves
//! a VM's TPM state again after the VM is gone, and for the fuzz seeds.
//!
//! Contract: [`create_state`] manufactures a state with exactly the PCR banks asked (and
//! an EK certificate from swtpm's local CA when asked); [`Swtpm::serve`] starts `swtpm
//! socket` on a state in its own process group and returns once it answers (the TCP
//! port connects, or the control socket exists), retrying other ports when one is taken
//! meanwhile; dropping the [`Swtpm`] kills its process group and reaps it, also when a
//! test fails. The fallible forms return [`SwtpmError`] naming the step; the test
//! conveniences ([`setup_state`], [`Swtpm::start`]) panic with it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use validator::sys::tpm::{TcpTransport, Tpm};

/// Whether swtpm, swtpm_setup and the tpm2-tools in `tools` run; a missing one fails
/// the test (they are part of the test bed).
pub fn have_tools(tools: &[&str]) -> bool {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let all = ok("swtpm", "--version")
        && ok("swtpm_setup", "--print-capabilities")
        && tools.iter().all(|t| ok(t, "--version"));
    // The tools are part of the test bed (scripts/provision installs them): a missing one
    // is a failure, never a silent pass.
    assert!(
        all,
        "swtpm, swtpm_setup or tpm2-tools missing: run scripts/provision"
    );
    all
}

/// A swtpm step that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwtpmError(pub String);

impl std::fmt::Display for SwtpmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SwtpmError {}

/// Manufactures a TPM 2.0 state in `dir` with exactly the PCR `banks` active
/// (`sha256`, `sha1,sha256`), and an EK certificate issued by swtpm's local CA
/// (`/var/lib/swtpm-localca/issuercert.pem`, as a TPM vendor's) when `ek_cert` is set.
pub fn create_state(dir: &Path, banks: &str, ek_cert: bool) -> Result<(), SwtpmError> {
    std::fs::create_dir_all(dir).map_err(|e| SwtpmError(format!("{}: {e}", dir.display())))?;
    let out = Command::new("swtpm_setup")
        .args(["--tpm2", "--tpmstate"])
        .arg(dir)
        .args(["--pcr-banks", banks, "--overwrite"])
        .args(if ek_cert {
            &["--create-ek-cert"][..]
        } else {
            &[]
        })
        .output()
        .map_err(|e| {
            SwtpmError(format!(
                "cannot run swtpm_setup: {e} (run scripts/provision)"
            ))
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SwtpmError(format!(
            "swtpm_setup failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// Manufactures a TPM 2.0 state with exactly these PCR banks active.
pub fn setup_state(dir: &Path, banks: &str) {
    if let Err(e) = create_state(dir, banks, false) {
        panic!("{e}");
    }
}

/// Manufactures a TPM 2.0 state with a SHA-256 bank and an EK certificate issued by
/// swtpm's local CA, as a TPM vendor's.
pub fn setup_state_with_ek_cert(dir: &Path) {
    if let Err(e) = create_state(dir, "sha256", true) {
        panic!("swtpm_setup --create-ek-cert: {e}");
    }
}

/// How the swtpm is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// The TPM on a free 127.0.0.1 port, its control channel on the next one (as the
    /// swtpm TCTI of tpm2-tools expects).
    Tcp,
    /// One control socket at this path, for QEMU's `-chardev socket` + `tpm-emulator`
    /// (swtpm exits when QEMU disconnects).
    Unix(PathBuf),
}

/// A running swtpm, its process group killed when dropped.
#[derive(Debug)]
pub struct Swtpm {
    child: Child,
    /// The TPM's TCP port ([`Channel::Tcp`]; 0 otherwise).
    pub port: u16,
    /// The control socket ([`Channel::Unix`]).
    pub socket: Option<PathBuf>,
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        // The whole process group it leads (it was spawned with its own).
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Swtpm {
    /// Serves the TPM state in `state` (made by [`create_state`], or a VM's) with
    /// `--flags <flags>` over `channel`, its log in `log`.
    pub fn serve(
        state: &Path,
        channel: &Channel,
        flags: &str,
        log: &Path,
    ) -> Result<Swtpm, SwtpmError> {
        let io = |e: std::io::Error| SwtpmError(format!("{}: {e}", log.display()));
        for _ in 0..5 {
            let port = match channel {
                Channel::Tcp => free_port_pair()?,
                Channel::Unix(sock) => {
                    let _ = std::fs::remove_file(sock);
                    0
                }
            };
            let logf = std::fs::File::create(log).map_err(io)?;
            let mut cmd = Command::new("swtpm");
            cmd.args(["socket", "--tpm2", "--tpmstate"])
                .arg(format!("dir={}", state.display()));
            match channel {
                Channel::Tcp => {
                    cmd.arg("--server")
                        .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
                        .arg("--ctrl")
                        .arg(format!("type=tcp,port={},bindaddr=127.0.0.1", port + 1));
                }
                Channel::Unix(sock) => {
                    cmd.arg("--ctrl")
                        .arg(format!("type=unixio,path={}", sock.display()));
                }
            }
            let child = cmd
                .args(["--flags", flags])
                .stdin(Stdio::null())
                .stdout(logf.try_clone().map_err(io)?)
                .stderr(logf)
                .process_group(0)
                .spawn()
                .map_err(|e| {
                    SwtpmError(format!("cannot start swtpm: {e} (run scripts/provision)"))
                })?;
            let mut tpm = Swtpm {
                child,
                port,
                socket: match channel {
                    Channel::Tcp => None,
                    Channel::Unix(s) => Some(s.clone()),
                },
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if tpm.child.try_wait().ok().flatten().is_some() {
                    break; // port taken meanwhile: try others
                }
                let up = match channel {
                    Channel::Tcp => TcpStream::connect(tpm.addr()).is_ok(),
                    Channel::Unix(sock) => sock.exists(),
                };
                if up {
                    return Ok(tpm);
                }
                thread::sleep(Duration::from_millis(10));
            }
            drop(tpm);
        }
        Err(SwtpmError(format!(
            "swtpm did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        )))
    }

    /// Starts `swtpm socket` on free 127.0.0.1 ports with `--flags <flags>` on the state
    /// in `dir` (its log `dir/swtpm.log`); panics when it cannot.
    pub fn start(dir: &Path, flags: &str) -> Swtpm {
        match Swtpm::serve(dir, &Channel::Tcp, flags, &dir.join("swtpm.log")) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    /// The swtpm's process id (to signal it: a TPM that stops or hangs mid-test).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn connect(&self) -> Tpm<TcpTransport> {
        Tpm::new(TcpTransport::connect(self.addr(), Duration::from_secs(2)).unwrap())
    }

    /// The `TPM2TOOLS_TCTI` value that reaches this swtpm.
    pub fn tcti(&self) -> String {
        format!("swtpm:host=127.0.0.1,port={}", self.port)
    }
}

/// A free port P with P+1 free too.
pub fn free_port_pair() -> Result<u16, SwtpmError> {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| SwtpmError(format!("bind: {e}")))?;
        let p = l
            .local_addr()
            .map_err(|e| SwtpmError(format!("bind: {e}")))?
            .port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return Ok(p);
        }
    }
    Err(SwtpmError("no free pair of 127.0.0.1 ports".into()))
}

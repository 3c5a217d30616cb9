//! A swtpm (libtpms) on 127.0.0.1 for the tests that talk to a real TPM, with the TCTI
//! tpm2-tools use to reach the same TPM.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
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

/// Manufactures a TPM 2.0 state with exactly these PCR banks active.
pub fn setup_state(dir: &Path, banks: &str) {
    let out = Command::new("swtpm_setup")
        .arg("--tpm2")
        .arg("--tpmstate")
        .arg(dir)
        .args(["--pcr-banks", banks, "--overwrite"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swtpm_setup failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Manufactures a TPM 2.0 state with a SHA-256 bank and an EK certificate issued by
/// swtpm's local CA (`/var/lib/swtpm-localca/issuercert.pem`), as a TPM vendor's.
pub fn setup_state_with_ek_cert(dir: &Path) {
    let out = Command::new("swtpm_setup")
        .args(["--tpm2", "--tpmstate"])
        .arg(dir)
        .args(["--pcr-banks", "sha256", "--create-ek-cert", "--overwrite"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swtpm_setup --create-ek-cert failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running swtpm, killed when dropped (also when a test fails).
pub struct Swtpm {
    pub child: Child,
    pub port: u16,
}

impl Drop for Swtpm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Swtpm {
    /// Starts `swtpm socket` on free 127.0.0.1 ports with `--flags <flags>`.
    pub fn start(dir: &Path, flags: &str) -> Swtpm {
        for _ in 0..5 {
            // The swtpm TCTI of tpm2-tools expects the control port right after the data
            // port.
            let port = free_port_pair();
            let ctrl = port + 1;
            let log = std::fs::File::create(dir.join("swtpm.log")).unwrap();
            let child = Command::new("swtpm")
                .args(["socket", "--tpm2", "--tpmstate"])
                .arg(format!("dir={}", dir.display()))
                .arg("--server")
                .arg(format!("type=tcp,port={port},bindaddr=127.0.0.1"))
                .arg("--ctrl")
                .arg(format!("type=tcp,port={ctrl},bindaddr=127.0.0.1"))
                .args(["--flags", flags])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let mut tpm = Swtpm { child, port };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if tpm.child.try_wait().unwrap().is_some() {
                    break; // port taken meanwhile: try others
                }
                if TcpStream::connect(tpm.addr()).is_ok() {
                    return tpm;
                }
                thread::sleep(Duration::from_millis(20));
            }
            let _ = tpm.child.kill();
        }
        panic!(
            "swtpm did not start: {}",
            std::fs::read_to_string(dir.join("swtpm.log")).unwrap_or_default()
        );
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
pub fn free_port_pair() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
}

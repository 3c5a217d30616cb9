//! Moving command and response bytes: the kernel's TPM device and swtpm's TCP port.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::formats::tpm::wire::{header_size, HEADER_LEN, RESPONSE_MAX};
use crate::formats::tpm::TpmError;

/// One TPM command out, its response back, within `timeout`.
///
/// An implementation returns the whole response exactly as the TPM sent it (the size
/// field equal to its length, at least a header); the client checks the rest.
pub trait Transport {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError>;
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        (**self).transact(cmd, timeout)
    }
}

impl<T: Transport + ?Sized> Transport for &mut T {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        (**self).transact(cmd, timeout)
    }
}

/// The kernel TPM character device: `/dev/tpmrm0` (the in-kernel resource manager) or
/// `/dev/tpm0`. Opened non-blocking; the response is awaited with `poll(2)`.
#[derive(Debug)]
pub struct DeviceTransport {
    file: File,
    path: PathBuf,
    broken: Option<String>,
}

impl DeviceTransport {
    /// Opens `<dev_root>/tpmrm0`, or `<dev_root>/tpm0` when there is no `tpmrm0`.
    pub fn open(dev_root: &Path) -> Result<DeviceTransport, TpmError> {
        let rm = dev_root.join("tpmrm0");
        let raw = dev_root.join("tpm0");
        match DeviceTransport::open_path(&rm) {
            Err(TpmError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                match DeviceTransport::open_path(&raw) {
                    Err(TpmError::Io { source, .. })
                        if source.kind() == io::ErrorKind::NotFound =>
                    {
                        Err(TpmError::NoDevice { rm, raw })
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// Opens this device node.
    pub fn open_path(path: &Path) -> Result<DeviceTransport, TpmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(OFlag::O_NONBLOCK.bits())
            .open(path)
            .map_err(|source| TpmError::Io {
                endpoint: path.display().to_string(),
                what: "open",
                source,
            })?;
        Ok(DeviceTransport {
            file,
            path: path.to_path_buf(),
            broken: None,
        })
    }

    /// The device node in use.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn endpoint(&self) -> String {
        self.path.display().to_string()
    }

    fn io(&self, what: &'static str, source: io::Error) -> TpmError {
        TpmError::Io {
            endpoint: self.endpoint(),
            what,
            source,
        }
    }

    fn exchange(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        let deadline = Instant::now() + timeout;
        let n = loop {
            match self.file.write(cmd) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io("write", e)),
            }
        };
        if n != cmd.len() {
            return Err(TpmError::Channel {
                endpoint: self.endpoint(),
                why: format!("short write: {n} of {} bytes", cmd.len()),
            });
        }
        let mut buf = vec![0u8; RESPONSE_MAX];
        loop {
            wait_readable(self.file.as_fd(), deadline, timeout, &self.endpoint())?;
            match self.file.read(&mut buf) {
                Ok(n) => {
                    buf.truncate(n);
                    break;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    continue
                }
                Err(e) => return Err(self.io("read", e)),
            }
        }
        match header_size(&buf) {
            None => Err(TpmError::Channel {
                endpoint: self.endpoint(),
                why: format!("short read: {} bytes, less than a header", buf.len()),
            }),
            Some(size) if size != buf.len() => Err(TpmError::Channel {
                endpoint: self.endpoint(),
                why: format!("response size field says {size} bytes, read {}", buf.len()),
            }),
            Some(_) => Ok(buf),
        }
    }
}

impl Transport for DeviceTransport {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        if let Some(why) = &self.broken {
            return Err(TpmError::Channel {
                endpoint: self.endpoint(),
                why: format!("unusable after an earlier failure ({why}); reopen it"),
            });
        }
        let r = self.exchange(cmd, timeout);
        if let Err(e) = &r {
            self.broken = Some(e.to_string());
        }
        r
    }
}

/// Waits until `fd` is readable or `deadline` passes.
fn wait_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    deadline: Instant,
    timeout: Duration,
    endpoint: &str,
) -> Result<(), TpmError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TpmError::Timeout {
                endpoint: endpoint.to_string(),
                after: timeout,
            });
        }
        // Round up so that a sub-millisecond remainder does not spin.
        let ms = left.as_millis().saturating_add(1);
        let pt = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, pt) {
            Ok(0) => continue,
            Ok(_) => {
                let rev = fds[0].revents().unwrap_or(PollFlags::empty());
                if rev.contains(PollFlags::POLLIN) {
                    return Ok(());
                }
                return Err(TpmError::Channel {
                    endpoint: endpoint.to_string(),
                    why: format!("poll reported {rev:?} while waiting for the response"),
                });
            }
            Err(Errno::EINTR) => continue,
            Err(e) => {
                return Err(TpmError::Io {
                    endpoint: endpoint.to_string(),
                    what: "poll",
                    source: e.into(),
                })
            }
        }
    }
}

/// The raw TPM command stream over TCP, as `swtpm socket --server type=tcp,port=N`
/// serves on its data port (no simulator framing).
#[derive(Debug)]
pub struct TcpTransport {
    stream: TcpStream,
    addr: SocketAddr,
    broken: Option<String>,
}

impl TcpTransport {
    /// Connects to `addr` within `timeout`.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpTransport, TpmError> {
        let stream = TcpStream::connect_timeout(&addr, timeout).map_err(|source| TpmError::Io {
            endpoint: addr.to_string(),
            what: "connect",
            source,
        })?;
        // Commands are small and answered one at a time: send them at once.
        let _ = stream.set_nodelay(true);
        Ok(TcpTransport {
            stream,
            addr,
            broken: None,
        })
    }

    /// The peer address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn io(&self, what: &'static str, source: io::Error) -> TpmError {
        TpmError::Io {
            endpoint: self.addr.to_string(),
            what,
            source,
        }
    }

    /// Reads exactly `buf.len()` bytes before `deadline`; `total`/`got` describe the
    /// whole response for messages.
    fn read_exact_by(
        &mut self,
        buf: &mut [u8],
        deadline: Instant,
        timeout: Duration,
        got_before: usize,
        total: Option<usize>,
    ) -> Result<(), TpmError> {
        let mut got = 0;
        while got < buf.len() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(timeout));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.io("set read timeout", e))?;
            match self.stream.read(buf.get_mut(got..).unwrap_or_default()) {
                Ok(0) => {
                    let have = got_before + got;
                    return Err(TpmError::Channel {
                        endpoint: self.addr.to_string(),
                        why: match total {
                            Some(t) => {
                                format!("connection closed after {have} of {t} response bytes")
                            }
                            None => format!("connection closed after {have} response bytes"),
                        },
                    });
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return Err(self.timeout(timeout))
                }
                Err(e) => return Err(self.io("read", e)),
            }
        }
        Ok(())
    }

    fn timeout(&self, after: Duration) -> TpmError {
        TpmError::Timeout {
            endpoint: self.addr.to_string(),
            after,
        }
    }

    fn exchange(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        let deadline = Instant::now() + timeout;
        self.stream
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| self.io("set write timeout", e))?;
        self.stream.write_all(cmd).map_err(|e| {
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut {
                self.timeout(timeout)
            } else {
                self.io("write", e)
            }
        })?;
        let mut resp = vec![0u8; HEADER_LEN];
        self.read_exact_by(&mut resp, deadline, timeout, 0, None)?;
        let size = header_size(&resp).unwrap_or(0);
        if !(HEADER_LEN..=RESPONSE_MAX).contains(&size) {
            return Err(TpmError::Channel {
                endpoint: self.addr.to_string(),
                why: format!(
                    "response size field {size} out of range {HEADER_LEN}..={RESPONSE_MAX}"
                ),
            });
        }
        resp.resize(size, 0);
        self.read_exact_by(
            resp.get_mut(HEADER_LEN..).unwrap_or_default(),
            deadline,
            timeout,
            HEADER_LEN,
            Some(size),
        )?;
        Ok(resp)
    }
}

impl Transport for TcpTransport {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        if let Some(why) = &self.broken {
            return Err(TpmError::Channel {
                endpoint: self.addr.to_string(),
                why: format!("unusable after an earlier failure ({why}); reconnect"),
            });
        }
        let r = self.exchange(cmd, timeout);
        if let Err(e) = &r {
            self.broken = Some(e.to_string());
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    fn listener() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    /// A fresh directory under the workspace's `target/test-tmp/`.
    fn test_dir(name: &str) -> PathBuf {
        let d = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/test-tmp")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const CMD: [u8; 12] = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0x01, 0x44, 0, 0];

    #[test]
    fn tcp_round_trip_in_pieces() {
        let (l, addr) = listener();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut cmd = [0u8; 12];
            s.read_exact(&mut cmd).unwrap();
            assert_eq!(cmd, CMD);
            // Answer in three pieces.
            s.write_all(&[0x80, 0x01, 0, 0]).unwrap();
            thread::sleep(Duration::from_millis(20));
            s.write_all(&[0, 12, 0, 0]).unwrap();
            thread::sleep(Duration::from_millis(20));
            s.write_all(&[0, 0, 0xAA, 0xBB]).unwrap();
        });
        let mut tr = TcpTransport::connect(addr, Duration::from_secs(2)).unwrap();
        let r = tr.transact(&CMD, Duration::from_secs(2)).unwrap();
        assert_eq!(r, [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0, 0, 0xAA, 0xBB]);
        t.join().unwrap();
    }

    #[test]
    fn tcp_silent_peer_times_out_and_poisons() {
        let (l, addr) = listener();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            // Silent until the client is done.
            let _ = wait.recv();
            drop(s);
        });
        let mut tr = TcpTransport::connect(addr, Duration::from_secs(2)).unwrap();
        let start = Instant::now();
        let e = tr.transact(&CMD, Duration::from_millis(200)).unwrap_err();
        let took = start.elapsed();
        assert!(e.is_timeout(), "{e}");
        assert!(took >= Duration::from_millis(190) && took < Duration::from_secs(2));
        let e = tr.transact(&CMD, Duration::from_millis(200)).unwrap_err();
        assert!(
            e.to_string().contains("unusable after an earlier failure"),
            "{e}"
        );
        done.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn tcp_short_response_is_an_error() {
        let (l, addr) = listener();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut cmd = [0u8; 12];
            s.read_exact(&mut cmd).unwrap();
            // Claims 20 bytes, sends 12, closes.
            s.write_all(&[0x80, 0x01, 0, 0, 0, 20, 0, 0, 0, 0, 1, 2])
                .unwrap();
        });
        let mut tr = TcpTransport::connect(addr, Duration::from_secs(2)).unwrap();
        let e = tr.transact(&CMD, Duration::from_secs(2)).unwrap_err();
        assert!(
            e.to_string()
                .contains("connection closed after 12 of 20 response bytes"),
            "{e}"
        );
        t.join().unwrap();
    }

    #[test]
    fn tcp_size_field_below_header_is_an_error() {
        let (l, addr) = listener();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut cmd = [0u8; 12];
            s.read_exact(&mut cmd).unwrap();
            s.write_all(&[0x80, 0x01, 0, 0, 0, 4, 0, 0, 0, 0]).unwrap();
        });
        let mut tr = TcpTransport::connect(addr, Duration::from_secs(2)).unwrap();
        let e = tr.transact(&CMD, Duration::from_secs(2)).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn device_open_falls_back_and_reports_missing() {
        let root = test_dir("tpm-dev");
        let e = DeviceTransport::open(&root).unwrap_err();
        assert!(matches!(e, TpmError::NoDevice { .. }), "{e}");
        assert!(e.to_string().contains("tpmrm0") && e.to_string().contains("tpm0"));
        // A regular file stands in for /dev/tpm0: it is found as the fallback.
        std::fs::write(root.join("tpm0"), b"").unwrap();
        let d = DeviceTransport::open(&root).unwrap();
        assert_eq!(d.path(), root.join("tpm0"));
        std::fs::write(root.join("tpmrm0"), b"").unwrap();
        let d = DeviceTransport::open(&root).unwrap();
        assert_eq!(d.path(), root.join("tpmrm0"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn device_round_trip_through_a_fifo() {
        // A FIFO opened read-write echoes the command back: a "TPM" whose response is
        // the command, which exercises write, poll and read.
        let root = test_dir("tpm-fifo");
        let p = root.join("tpmrm0");
        nix::unistd::mkfifo(
            &p,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let mut d = DeviceTransport::open(&root).unwrap();
        assert_eq!(d.transact(&CMD, Duration::from_secs(1)).unwrap(), CMD);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn wait_readable_times_out_then_sees_data() {
        let (r, mut w) = std::io::pipe().unwrap();
        let t = Duration::from_millis(100);
        let start = Instant::now();
        let e = wait_readable(r.as_fd(), start + t, t, "pipe").unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(start.elapsed() >= t && start.elapsed() < Duration::from_secs(1));
        w.write_all(b"x").unwrap();
        let start = Instant::now();
        wait_readable(r.as_fd(), start + t, t, "pipe").unwrap();
        drop(w);
    }

    #[test]
    fn device_response_size_mismatch_is_an_error() {
        // A regular file is always readable: write the command, then the read returns
        // what follows it in the file. Pre-fill the file so the read sees a response
        // whose header lies.
        let root = test_dir("tpm-dev2");
        let p = root.join("tpmrm0");
        let mut content = vec![0u8; CMD.len()];
        content.extend_from_slice(&[0x80, 0x01, 0, 0, 0, 30, 0, 0, 0, 0]);
        std::fs::write(&p, &content).unwrap();
        let mut d = DeviceTransport::open_path(&p).unwrap();
        let e = d.transact(&CMD, Duration::from_secs(1)).unwrap_err();
        assert!(
            e.to_string()
                .contains("response size field says 30 bytes, read 10"),
            "{e}"
        );
        let e = d.transact(&CMD, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("reopen"), "{e}");

        std::fs::write(&p, vec![0u8; CMD.len() + 4]).unwrap();
        let mut d = DeviceTransport::open_path(&p).unwrap();
        let e = d.transact(&CMD, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("short read: 4 bytes"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

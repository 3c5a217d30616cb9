//! A `log` backend that writes whole records to `/dev/kmsg`, so the init's messages sit in
//! the kernel log with the kernel's own, in order, at the right level; and the reader of
//! the kernel's own records ([`read_messages`]), for the lines that say what the kernel
//! saw (a disk's I/O error, a dm-verity hash mismatch).
//!
//! Each record is one `write(2)` of `<priority>validator: message`; long messages are cut
//! into several records below the kernel's line limit. Before `/dev` exists, or if the
//! kernel refuses the write, records go to standard error (the console for PID 1).
//!
//! Reading: `/dev/kmsg` opened non-blocking gives one record per `read(2)`, oldest first,
//! as `<prefix>,<seq>,<usec>,<flags>[,...];<message>` then continuation lines (` KEY=value`)
//! the reader drops; `EPIPE` says records were overwritten before they were read (the
//! read goes on), `EAGAIN` that none is left. Limits: at most the records still in the
//! kernel's ring buffer; a message cut by the kernel's own limit stays cut.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::Mutex;

/// Longest message text per kmsg record (the kernel allows about 1 KiB per record).
const CHUNK: usize = 900;

/// The logger.
#[derive(Debug)]
pub struct KmsgLogger {
    file: Mutex<Option<File>>,
    level: log::LevelFilter,
}

impl KmsgLogger {
    fn new(level: log::LevelFilter) -> KmsgLogger {
        KmsgLogger {
            file: Mutex::new(OpenOptions::new().write(true).open("/dev/kmsg").ok()),
            level,
        }
    }
}

/// syslog priority for a level (facility `user`, as userspace writes to kmsg).
fn priority(level: log::Level) -> u8 {
    let sev = match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    };
    8 + sev
}

/// Formats one record's kmsg writes.
pub fn records(level: log::Level, msg: &str) -> Vec<String> {
    let p = priority(level);
    let mut out = Vec::new();
    for line in msg.lines() {
        let mut rest = line;
        loop {
            let mut cut = rest.len().min(CHUNK);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push(format!("<{p}>validator: {}\n", &rest[..cut]));
            rest = &rest[cut..];
            if rest.is_empty() {
                break;
            }
        }
    }
    out
}

impl log::Log for KmsgLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = r.args().to_string();
        let mut guard = match self.file.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if guard.is_none() {
            *guard = OpenOptions::new().write(true).open("/dev/kmsg").ok();
        }
        for rec in records(r.level(), &msg) {
            let written = guard.as_mut().map(|f| f.write_all(rec.as_bytes()).is_ok());
            if written != Some(true) {
                let text = rec.split_once('>').map_or(rec.as_str(), |(_, t)| t);
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once; later calls only change the level).
pub fn init(level: log::LevelFilter) {
    static LOGGER: std::sync::OnceLock<KmsgLogger> = std::sync::OnceLock::new();
    let logger = LOGGER.get_or_init(|| KmsgLogger::new(log::LevelFilter::Trace));
    let _ = log::set_logger(logger);
    log::set_max_level(level);
}

/// Writes one message straight to `/dev/kmsg` (or the console), without the `log` crate:
/// for the panic hook, which must not take locks the panicking code may hold.
pub fn emergency(msg: &str) {
    let recs = records(log::Level::Error, msg);
    match OpenOptions::new().write(true).open("/dev/kmsg") {
        Ok(mut f) => {
            for r in recs {
                let _ = f.write_all(r.as_bytes());
            }
        }
        Err(_) => {
            for r in recs {
                let text = r.split_once('>').map_or(r.as_str(), |(_, t)| t);
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_prefixed_and_cut() {
        assert_eq!(records(log::Level::Info, "hi"), vec!["<14>validator: hi\n"]);
        assert_eq!(records(log::Level::Error, "a\nb").len(), 2);
        let long = "é".repeat(1000);
        let r = records(log::Level::Warn, &long);
        assert_eq!(r.len(), 3);
        assert!(r
            .iter()
            .all(|x| x.starts_with("<12>validator: ") && x.len() < 1024));
    }
}

/// The message of one `/dev/kmsg` record: the text after the first `;` up to the end of
/// its first line (continuation lines dropped); `None` for a record without one.
pub fn message(record: &[u8]) -> Option<String> {
    let at = record.iter().position(|&b| b == b';')?;
    let rest = record.get(at + 1..)?;
    let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    Some(String::from_utf8_lossy(rest.get(..end)?).into_owned())
}

/// The messages of the kernel log's records at `path` (`/dev/kmsg`) that `keep` accepts,
/// oldest first, at most `max` of them (the newest are kept).
pub fn read_messages(
    path: &std::path::Path,
    max: usize,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<String>, super::SysError> {
    use nix::errno::Errno;
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            super::SysError::new(
                "open",
                path.display().to_string(),
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?;
    let mut out: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    // One record per read; the kernel's records are at most about 8 KiB with their
    // dictionary.
    let mut buf = vec![0u8; 16 << 10];
    // Bounded: the ring buffer holds a finite number of records, and this is the most
    // any kernel's holds (CONFIG_LOG_BUF_SHIFT 25, 32 MiB, of records of at least 16 bytes).
    for _ in 0..(1usize << 21) {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some(m) = buf.get(..n).and_then(message) {
                    if keep(&m) {
                        if out.len() == max {
                            out.pop_front();
                        }
                        out.push_back(m);
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(nix::libc::EPIPE) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => {
                return Err(super::SysError::new(
                    "read",
                    path.display().to_string(),
                    Errno::from_raw(e.raw_os_error().unwrap_or(0)),
                ))
            }
        }
    }
    Ok(out.into())
}

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn a_records_message_is_its_first_line_after_the_prefix() {
        assert_eq!(
            message(
                b"3,1234,5678901,-;I/O error, dev vda, sector 8 op 0x0:(READ)\n SUBSYSTEM=block\n"
            )
            .as_deref(),
            Some("I/O error, dev vda, sector 8 op 0x0:(READ)")
        );
        assert_eq!(
            message(b"3,9,1,-,caller=T1;device-mapper: verity: 254:0: data block 7 is corrupted\n")
                .as_deref(),
            Some("device-mapper: verity: 254:0: data block 7 is corrupted")
        );
        assert_eq!(message(b"6,1,2,-;\n").as_deref(), Some(""));
        assert_eq!(message(b"no separator"), None);
        assert_eq!(message(b""), None);
    }

    /// A regular file reads as one record (its whole content), then the end: the reader
    /// stops and filters.
    #[test]
    fn reading_stops_at_the_end_and_keeps_what_is_asked() {
        let d = std::env::temp_dir().join(format!("vld-kmsg-{}", std::process::id()));
        std::fs::write(&d, b"3,1,1,-;I/O error, dev vda, sector 8\n").unwrap();
        let all = read_messages(&d, 4, |_| true).unwrap();
        assert_eq!(all, ["I/O error, dev vda, sector 8"]);
        let none = read_messages(&d, 4, |m| m.contains("verity")).unwrap();
        assert!(none.is_empty());
        std::fs::remove_file(&d).unwrap();
        let e = read_messages(&d, 4, |_| true).unwrap_err();
        assert_eq!(e.errno, nix::errno::Errno::ENOENT);
    }
}

//! A `log` backend that writes whole records to `/dev/kmsg`, so the init's messages sit in
//! the kernel log with the kernel's own, in order, at the right level.
//!
//! Each record is one `write(2)` of `<priority>validator: message`; long messages are cut
//! into several records below the kernel's line limit. Before `/dev` exists, or if the
//! kernel refuses the write, records go to standard error (the console for PID 1).

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

//! Standard output for reports: a reader that closes the pipe early (`| head`) ends the
//! output, not the command; the exit status is still the verdict. Any other write error
//! is an unusable output, reported like an unusable input.

use std::io::{ErrorKind, Write};

use crate::Usage;

/// Buffered stdout that remembers a closed pipe.
pub struct Out {
    w: std::io::BufWriter<std::io::Stdout>,
    closed: bool,
}

impl Out {
    pub fn stdout() -> Out {
        Out {
            w: std::io::BufWriter::new(std::io::stdout()),
            closed: false,
        }
    }

    /// Writes `s` and a newline.
    pub fn line(&mut self, s: &str) -> Result<(), Usage> {
        self.bytes(s.as_bytes())?;
        self.bytes(b"\n")
    }

    /// Writes raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> Result<(), Usage> {
        if self.closed {
            return Ok(());
        }
        let r = self.w.write_all(b);
        self.settle(r)
    }

    fn settle(&mut self, r: std::io::Result<()>) -> Result<(), Usage> {
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(Usage(format!("standard output: {e}"))),
        }
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> Result<(), Usage> {
        if self.closed {
            return Ok(());
        }
        let r = self.w.flush();
        self.settle(r)
    }
}

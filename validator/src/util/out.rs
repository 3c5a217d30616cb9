//! Standard output for command-line reports: a reader that closes the pipe early
//! (`| head`) ends the output, not the command, so the exit status is still the verdict.
//! Any other write error is returned, naming standard output.

use std::io::{ErrorKind, Write};

/// Buffered stdout that remembers a closed pipe.
#[derive(Debug)]
pub struct Out {
    w: std::io::BufWriter<std::io::Stdout>,
    closed: bool,
}

impl Out {
    /// Standard output, buffered.
    pub fn stdout() -> Out {
        Out {
            w: std::io::BufWriter::new(std::io::stdout()),
            closed: false,
        }
    }

    /// Writes `s` and a newline.
    pub fn line(&mut self, s: &str) -> std::io::Result<()> {
        self.bytes(s.as_bytes())?;
        self.bytes(b"\n")
    }

    /// Writes raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.w.write_all(b);
        self.settle(r)
    }

    fn settle(&mut self, r: std::io::Result<()>) -> std::io::Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("standard output: {e}"),
            )),
        }
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let r = self.w.flush();
        self.settle(r)
    }
}

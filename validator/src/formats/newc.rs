//! A minimal writer of cpio "newc" archives (`Documentation/driver-api/early-userspace`),
//! enough for the few files the boot carries to the next kernel across a kexec: the
//! kernel unpacks every archive concatenated to an initramfs, so appending one adds files
//! without touching the slot's own image. (`mkinitramfs` has the full reader and writer.)

/// Builds an archive of directories and regular files, then the trailer.
#[derive(Debug, Default)]
pub struct Writer {
    out: Vec<u8>,
    ino: u32,
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            out: Vec::new(),
            ino: 1,
        }
    }

    fn header(&mut self, name: &str, mode: u32, size: usize) {
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            u32::try_from(size).unwrap_or(u32::MAX),
            0,
            0,
            0,
            0,
            u32::try_from(name.len() + 1).unwrap_or(u32::MAX),
            0,
        ];
        self.ino += 1;
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08X}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// A directory (mode 0755).
    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.header(path, 0o040_755, 0);
        self
    }

    /// A regular file (mode 0644).
    pub fn file(&mut self, path: &str, data: &[u8]) -> &mut Self {
        self.header(path, 0o100_644, data.len());
        self.out.extend_from_slice(data);
        self.pad();
        self
    }

    /// The archive with its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.header("TRAILER!!!", 0, 0);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GNU cpio lists what we wrote.
    #[test]
    fn gnu_cpio_reads_it() {
        let mut w = Writer::new();
        w.dir("etc")
            .file("etc/x.json", b"{\"a\":1}\n")
            .file("etc/empty", b"");
        let bytes = w.finish();
        assert_eq!(bytes.len() % 4, 0);
        let mut child = std::process::Command::new("cpio")
            .args(["-i", "-t", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "etc\netc/x.json\netc/empty\n"
        );
    }
}

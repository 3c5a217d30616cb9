//! The disk an install writes: a new image file (written beside its name, renamed into
//! place at the end), an existing image file, or a block device; what it already holds,
//! the writes at the planned offsets, the GPT by `sfdisk`, and the read-back.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::{io, InstallError, Plan, MIB};

/// Sectors of a GPT's header and entries (128 entries of 128 bytes, 512-byte sectors).
const GPT_SECTORS: u64 = 34;

#[derive(Debug)]
pub(super) struct Target {
    /// What is written: the disk, or the new image's temporary file.
    pub path: PathBuf,
    /// The name given; differs from `path` for a new image until [`Target::commit`].
    given: PathBuf,
    new_image: bool,
    block: bool,
    pub sector_size: u64,
    file: Option<File>,
    /// The size found (an image file is extended to the plan's).
    size: u64,
    /// `--force`: the old table is wiped first.
    wipe: bool,
}

fn refused(path: &Path, why: impl Into<String>) -> InstallError {
    InstallError::Target {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

impl Target {
    /// Opens `disk` for an install of `total` bytes (see the module documentation of
    /// `install` for what is refused).
    pub fn open(disk: &Path, total: u64, force: bool) -> Result<Target, InstallError> {
        let meta = match std::fs::metadata(disk) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if std::fs::symlink_metadata(disk).is_ok() {
                    return Err(refused(
                        disk,
                        "is a symbolic link to nothing: give a block device or a disk image file",
                    ));
                }
                return Target::new_image(disk, total);
            }
            Err(e) => return Err(io(disk)(e)),
            Ok(m) => m,
        };
        let t = meta.file_type();
        let block = t.is_block_device();
        if !block && !t.is_file() {
            let kind = validator::util::fs::kind_of(t).unwrap_or("not a regular file");
            return Err(refused(
                disk,
                format!("is a {kind}: give a block device or a disk image file"),
            ));
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true).write(true);
        if block {
            // The kernel refuses an exclusive open of a disk that is mounted or held.
            opts.custom_flags(nix::libc::O_EXCL);
        }
        let file = opts.open(disk).map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::EBUSY) {
                refused(
                    disk,
                    "is in use (held exclusively: mounted, or by device-mapper, RAID or another install)",
                )
            } else {
                io(disk)(e)
            }
        })?;
        let sector_size = if block {
            logical_sector(disk, &meta)?
        } else {
            512
        };
        let size = (&file).seek(SeekFrom::End(0)).map_err(io(disk))?;
        if let Some(what) = partition_table(&file, size, sector_size).map_err(io(disk))? {
            if !force {
                return Err(refused(
                    disk,
                    format!("holds a partition table ({what}); give --force to replace it"),
                ));
            }
        }
        if size < total && block {
            return Err(refused(
                disk,
                format!(
                    "{} MiB: the install needs {} MiB",
                    size / MIB,
                    total.div_ceil(MIB)
                ),
            ));
        }
        Ok(Target {
            path: disk.to_path_buf(),
            given: disk.to_path_buf(),
            new_image: false,
            block,
            sector_size,
            file: Some(file),
            size,
            wipe: force,
        })
    }

    fn new_image(disk: &Path, total: u64) -> Result<Target, InstallError> {
        let name =
            validator::util::fs::output_name(disk).map_err(|e| refused(disk, e.to_string()))?;
        let dir = validator::util::fs::output_dir(disk);
        validator::util::fs::check_output_dir(dir).map_err(|e| refused(disk, e.to_string()))?;
        let tmp = validator::util::fs::temp_name(dir, name, "install");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(io(&tmp))?;
        let t = Target {
            path: tmp.clone(),
            given: disk.to_path_buf(),
            new_image: true,
            block: false,
            sector_size: 512,
            file: Some(file),
            size: 0,
            wipe: false,
        };
        t.file()?.set_len(total).map_err(io(&tmp))?;
        Ok(t)
    }

    fn file(&self) -> Result<&File, InstallError> {
        self.file
            .as_ref()
            .ok_or_else(|| refused(&self.path, "closed while installing"))
    }

    /// Zeroes both GPT headers and the MBR, so an install that stops leaves no table.
    fn wipe_table(&mut self, size: u64) -> Result<(), InstallError> {
        let n = GPT_SECTORS * self.sector_size;
        let zeros = vec![0u8; usize::try_from(n).unwrap_or(0)];
        let f = self.file()?;
        f.write_all_at(&zeros, 0).map_err(io(&self.path))?;
        if let Some(end) = size.checked_sub(n) {
            f.write_all_at(&zeros, end).map_err(io(&self.path))?;
        }
        Ok(())
    }

    /// Each partition's content (the ESP's image, each slot's images) at its offset; the
    /// signature partitions' rest zeroed. An image file is extended first, and with
    /// `--force` the old table is wiped, so a stop from here on leaves no table.
    pub fn write_images(&mut self, plan: &Plan) -> Result<(), InstallError> {
        if self.size < plan.total && !self.new_image {
            self.file()?.set_len(plan.total).map_err(io(&self.path))?;
        }
        if self.wipe {
            self.wipe_table(self.size.max(plan.total))?;
        }
        let f = self.file()?;
        let mut buf = vec![0u8; usize::try_from(MIB).unwrap_or(1 << 20)];
        for p in &plan.parts {
            let mut written = 0;
            if let Some((src, _, len)) = &p.content {
                let mut s = validator::util::fs::open_input(src, false).map_err(|e| {
                    InstallError::Input {
                        path: src.clone(),
                        why: e.to_string(),
                    }
                })?;
                while written < *len {
                    let k = s.read(&mut buf).map_err(io(src))?;
                    if k == 0 {
                        return Err(InstallError::Input {
                            path: src.clone(),
                            why: format!("shorter than {len} bytes while it was copied"),
                        });
                    }
                    let chunk = buf.get(..k).unwrap_or_default();
                    // A new image is all zeros already: leave it sparse there.
                    if !(self.new_image && chunk.iter().all(|&b| b == 0)) {
                        f.write_all_at(chunk, p.start + written)
                            .map_err(io(&self.path))?;
                    }
                    written += k as u64;
                }
            }
            if p.name.ends_with("-sig") && !self.new_image {
                let rest = vec![0u8; usize::try_from(p.size - written).unwrap_or(0)];
                f.write_all_at(&rest, p.start + written)
                    .map_err(io(&self.path))?;
            }
        }
        f.sync_all().map_err(io(&self.path))
    }

    /// The GPT, by `sfdisk` (the kernel told of it on a block device).
    pub fn write_gpt(&mut self, plan: &Plan) -> Result<(), InstallError> {
        self.file()?.sync_all().map_err(io(&self.path))?;
        if self.block {
            // sfdisk asks the kernel to read the new table: it must not see us holding it.
            self.file = None;
        }
        let mut c = Command::new("sfdisk");
        c.args(["--quiet", "--wipe", "never", "--wipe-partitions", "never"]);
        if !self.block {
            c.args(["--no-reread", "--no-tell-kernel"]);
        }
        c.arg(&self.path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let tool = |why: String| InstallError::Tool {
            tool: "sfdisk".into(),
            why,
        };
        let mut child = c
            .spawn()
            .map_err(|e| tool(format!("{e} (install fdisk)")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(plan.sfdisk_script(self.sector_size).as_bytes())
                .map_err(|e| tool(e.to_string()))?;
        }
        let out = child.wait_with_output().map_err(|e| tool(e.to_string()))?;
        if !out.status.success() {
            return Err(tool(format!(
                "{}: {}",
                self.path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
                .map_err(io(&self.path))?;
            self.file = Some(f);
        }
        Ok(())
    }

    /// The table as the gate reads it, and every image's bytes, against the plan.
    pub fn read_back(&self, plan: &Plan) -> Result<(), InstallError> {
        let bad = |why: String| InstallError::ReadBack {
            path: self.given.clone(),
            why,
        };
        let table = validator::sys::read_gpt(&self.path, self.sector_size)
            .map_err(|e| bad(format!("GPT: {e}")))?;
        let got: Vec<_> = table
            .partitions
            .iter()
            .map(|p| {
                (
                    p.number,
                    p.name.clone(),
                    p.type_guid.to_string(),
                    p.unique_guid.to_string(),
                    p.first_lba * self.sector_size,
                    (p.last_lba + 1 - p.first_lba) * self.sector_size,
                )
            })
            .collect();
        let want: Vec<_> = plan
            .parts
            .iter()
            .map(|p| {
                (
                    p.number,
                    p.name.clone(),
                    p.type_guid.to_string(),
                    p.uuid.clone(),
                    p.start,
                    p.size,
                )
            })
            .collect();
        if got != want || table.disk_guid.to_string() != plan.disk_guid {
            return Err(bad(format!("GPT {got:?} is not the plan {want:?}")));
        }
        let f = self.file()?;
        let mut buf = vec![0u8; usize::try_from(MIB).unwrap_or(1 << 20)];
        for p in &plan.parts {
            let Some((src, digest, len)) = &p.content else {
                continue;
            };
            let mut h = Sha256::new();
            let mut off = 0;
            while off < *len {
                let want = usize::try_from((*len - off).min(MIB)).unwrap_or(0);
                let chunk = buf.get_mut(..want).unwrap_or_default();
                f.read_exact_at(chunk, p.start + off)
                    .map_err(io(&self.path))?;
                h.update(&*chunk);
                off += want as u64;
            }
            if h.finalize().as_slice() != digest {
                return Err(bad(format!(
                    "partition {} ({}) does not hold {}",
                    p.number,
                    p.name,
                    src.display()
                )));
            }
        }
        Ok(())
    }

    /// Makes the install final: a new image is renamed to its name.
    pub fn commit(mut self) -> Result<(), InstallError> {
        if let Some(f) = self.file.take() {
            f.sync_all().map_err(io(&self.path))?;
        }
        if !self.new_image {
            return Ok(());
        }
        if std::fs::symlink_metadata(&self.given).is_ok() {
            let _ = std::fs::remove_file(&self.path);
            return Err(refused(&self.given, "appeared while the install ran"));
        }
        std::fs::rename(&self.path, &self.given).map_err(|e| {
            let _ = std::fs::remove_file(&self.path);
            io(&self.given)(e)
        })?;
        if let Ok(d) = File::open(validator::util::fs::output_dir(&self.given)) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Gives up: a new image's temporary file is removed.
    pub fn abandon(mut self) {
        self.file = None;
        if self.new_image {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The logical sector size of a block device, from sysfs.
fn logical_sector(disk: &Path, meta: &std::fs::Metadata) -> Result<u64, InstallError> {
    let rdev = meta.rdev();
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    let p = PathBuf::from(format!(
        "/sys/dev/block/{major}:{minor}/queue/logical_block_size"
    ));
    let text = std::fs::read_to_string(&p).map_err(|e| {
        refused(
            disk,
            format!("{}: {e} (a partition? give the whole disk)", p.display()),
        )
    })?;
    text.trim()
        .parse()
        .map_err(|_| refused(disk, format!("{}: not a number: {text:?}", p.display())))
}

/// What partition table the disk holds, if any: a GPT header (primary or backup) or an
/// MBR with a partition entry.
fn partition_table(f: &File, size: u64, sector: u64) -> std::io::Result<Option<&'static str>> {
    let read = |off: u64, len: usize| {
        let mut b = vec![0u8; len];
        match f.read_exact_at(&mut b, off) {
            Ok(()) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    };
    if read(sector, 8)?.as_deref() == Some(b"EFI PART") {
        return Ok(Some("GPT"));
    }
    if let Some(last) = size.checked_sub(sector).filter(|&o| o >= sector) {
        if read(last - last % sector, 8)?.as_deref() == Some(b"EFI PART") {
            return Ok(Some("backup GPT"));
        }
    }
    if let Some(mbr) = read(0, 512)? {
        let signed = mbr.get(510..512) == Some(&[0x55, 0xaa][..]);
        let entry = (0..4).any(|i| mbr.get(446 + 16 * i + 4).is_some_and(|&t| t != 0));
        if signed && entry {
            return Ok(Some("MBR"));
        }
    }
    Ok(None)
}

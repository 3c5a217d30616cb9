//! Disk images in plain files, without loop devices: filesystems made from directories
//! (`mkfs.ext4 -d`), a GPT written by `sfdisk` into the image file, and each partition's
//! bytes spliced in at its offset.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::HarnessError;

/// GPT type of a generic Linux filesystem partition.
pub const LINUX_FS: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

/// What a partition holds.
#[derive(Debug, Clone)]
pub enum Content {
    /// An ext4 filesystem made from a directory, of the given size in MiB.
    Ext4Dir { dir: PathBuf, size_mib: u64 },
    /// An existing image file, copied as is (padded to whole MiB).
    Raw(PathBuf),
    /// Zeros.
    Empty { size_mib: u64 },
}

/// One partition of a disk.
#[derive(Debug, Clone)]
pub struct PartitionSpec {
    pub label: String,
    pub type_uuid: String,
    /// Fixed partition UUID (upper or lower case); random when `None`.
    pub uuid: Option<String>,
    pub content: Content,
}

impl PartitionSpec {
    /// A Linux filesystem partition labelled `label` made from `dir`.
    pub fn ext4(label: &str, dir: &Path, size_mib: u64) -> PartitionSpec {
        PartitionSpec {
            label: label.into(),
            type_uuid: LINUX_FS.into(),
            uuid: None,
            content: Content::Ext4Dir {
                dir: dir.to_path_buf(),
                size_mib,
            },
        }
    }
}

/// Runs a command, turning a failure into an error that shows its output.
pub fn run(cmd: &mut Command) -> Result<String, HarnessError> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        HarnessError::Setup(format!(
            "cannot run {shown}: {e} (is it installed? run scripts/provision)"
        ))
    })?;
    if !out.status.success() {
        return Err(HarnessError::Setup(format!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes an ext4 image of `size_mib` MiB from `dir` (files owned by root).
pub fn mkfs_ext4(dir: &Path, image: &Path, size_mib: u64, label: &str) -> Result<(), HarnessError> {
    let _ = std::fs::remove_file(image);
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", label, "-E", "root_owner=0:0", "-d"])
        .arg(dir)
        .arg(image)
        .arg(format!("{size_mib}M"))
        .env("SOURCE_DATE_EPOCH", "1"))?;
    Ok(())
}

/// Builds a GPT disk image at `out` from `parts`, in order, 1 MiB aligned.
pub fn build_disk(out: &Path, parts: &[PartitionSpec], scratch: &Path) -> Result<(), HarnessError> {
    const MIB: u64 = 1 << 20;
    let mut images = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let img = match &p.content {
            Content::Ext4Dir { dir, size_mib } => {
                let img = scratch.join(format!("part{i}.ext4"));
                mkfs_ext4(dir, &img, *size_mib, &p.label)?;
                img
            }
            Content::Raw(path) => path.clone(),
            Content::Empty { size_mib } => {
                let img = scratch.join(format!("part{i}.zero"));
                let f = std::fs::File::create(&img).map_err(|e| HarnessError::io(&img, e))?;
                f.set_len(size_mib * MIB)
                    .map_err(|e| HarnessError::io(&img, e))?;
                img
            }
        };
        let len = std::fs::metadata(&img)
            .map_err(|e| HarnessError::io(&img, e))?
            .len();
        images.push((img, len.div_ceil(MIB).max(1)));
    }
    let total_mib: u64 = 1 + images.iter().map(|(_, m)| m).sum::<u64>() + 1;
    let _ = std::fs::remove_file(out);
    let f = std::fs::File::create(out).map_err(|e| HarnessError::io(out, e))?;
    f.set_len(total_mib * MIB)
        .map_err(|e| HarnessError::io(out, e))?;
    drop(f);
    let mut script = String::from("label: gpt\n");
    let mut start = MIB / 512;
    for (p, (_, mib)) in parts.iter().zip(&images) {
        let sectors = mib * MIB / 512;
        script.push_str(&format!(
            "start={start}, size={sectors}, type={}, name=\"{}\"",
            p.type_uuid, p.label
        ));
        if let Some(u) = &p.uuid {
            script.push_str(&format!(", uuid={u}"));
        }
        script.push('\n');
        start += sectors;
    }
    let sf = scratch.join("sfdisk.script");
    std::fs::write(&sf, &script).map_err(|e| HarnessError::io(&sf, e))?;
    let stdin = std::fs::File::open(&sf).map_err(|e| HarnessError::io(&sf, e))?;
    run(Command::new("sfdisk")
        .args(["-q", "--no-reread", "--no-tell-kernel"])
        .arg(out)
        .stdin(stdin))?;
    // Splice each partition in at its offset.
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut disk = std::fs::OpenOptions::new()
        .write(true)
        .open(out)
        .map_err(|e| HarnessError::io(out, e))?;
    let mut off = MIB;
    for (img, mib) in &images {
        let mut src = std::fs::File::open(img).map_err(|e| HarnessError::io(img, e))?;
        disk.seek(SeekFrom::Start(off))
            .map_err(|e| HarnessError::io(out, e))?;
        let mut buf = vec![0u8; usize::try_from(MIB).expect("1 MiB fits usize")];
        loop {
            let n = src.read(&mut buf).map_err(|e| HarnessError::io(img, e))?;
            if n == 0 {
                break;
            }
            disk.write_all(&buf[..n])
                .map_err(|e| HarnessError::io(out, e))?;
        }
        off += mib * MIB;
    }
    disk.sync_all().map_err(|e| HarnessError::io(out, e))?;
    Ok(())
}

/// Byte offset of partition `label` in a disk image (read back with our own GPT reader).
pub fn partition_offset(disk: &Path, label: &str) -> Result<(u64, u64), HarnessError> {
    let t = validator::sys::read_gpt(disk, 512).map_err(|e| HarnessError::Setup(e.to_string()))?;
    let p = t
        .partitions
        .iter()
        .find(|p| p.name == label)
        .ok_or_else(|| HarnessError::Setup(format!("{}: no partition {label}", disk.display())))?;
    Ok((p.first_lba * 512, (p.last_lba - p.first_lba + 1) * 512))
}

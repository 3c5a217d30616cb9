//! An ESP on the host: where it is, the paths on it, and reading and writing its files.
//!
//! [`Esp`] reads and writes files of an ESP inside a disk image on the host (mtools with
//! `-i image@@offset`, the offset from the GPT), lists `grubenv` with `grub-editenv FILE
//! list`, and rewrites a file's own clusters in place as GRUB's `save_env` does.
//! [`fill_fat`] fills a FAT image to its last cluster (a full ESP). [`ESP_LABEL`] and
//! [`ESP_TYPE`] find the ESP in the test bed's disks; [`GRUBENV_PATH`],
//! [`GRUB_CFG_PATH`], [`NODE_CFG_PATH`] and [`ENTRIES_DIR`] are where the loaders read.
//!
//! Limits: paths must be absolute and name one file (no mtools wildcards);
//! [`Esp::overwrite_in_place`] only rewrites a file with bytes of its own length, over
//! the clusters `mshowfat` reports, and reads them back to check.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::disk;
use crate::HarnessError;

/// GPT type of an EFI System Partition.
pub const ESP_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
/// The PARTLABEL of the ESP on the test bed's disks.
pub const ESP_LABEL: &str = "esp";
/// The ESP paths the shipped `grub.cfg` uses.
pub const GRUBENV_PATH: &str = "/EFI/BOOT/grubenv";
pub const GRUB_CFG_PATH: &str = "/EFI/BOOT/grub.cfg";
pub const NODE_CFG_PATH: &str = "/EFI/BOOT/node.cfg";
/// Where systemd-boot reads its entries.
pub const ENTRIES_DIR: &str = "/loader/entries";

/// Fills the FAT image `image` (a partition image, mtools-readable) to its last cluster
/// with one file, so that no directory or file can be created on it.
pub fn fill_fat(image: &Path) -> Result<u64, HarnessError> {
    let free = fat_free_bytes(image)?;
    let filler = image.with_extension("filler");
    let f = std::fs::File::create(&filler).map_err(|e| HarnessError::io(&filler, e))?;
    f.set_len(free).map_err(|e| HarnessError::io(&filler, e))?;
    drop(f);
    disk::run(
        mtools("mcopy")
            .arg("-i")
            .arg(image)
            .arg(&filler)
            .arg("::/FILLER.BIN"),
    )?;
    let _ = std::fs::remove_file(&filler);
    let left = fat_free_bytes(image)?;
    if left != 0 {
        return Err(HarnessError::Setup(format!(
            "{}: {left} bytes still free after filling",
            image.display()
        )));
    }
    Ok(free)
}

/// The free bytes of a FAT image, as `mdir` counts them.
fn fat_free_bytes(image: &Path) -> Result<u64, HarnessError> {
    let out = disk::run(mtools("mdir").arg("-i").arg(image).arg("::/"))?;
    out.lines()
        .find_map(|l| {
            let l = l.trim();
            let n = l.strip_suffix("bytes free")?;
            n.trim().replace([' ', ','], "").parse().ok()
        })
        .ok_or_else(|| {
            HarnessError::Setup(format!("mdir {}: no free count: {out}", image.display()))
        })
}

pub(super) fn mtools(tool: &str) -> Command {
    let mut c = Command::new(tool);
    c.env("MTOOLS_SKIP_CHECK", "1");
    c
}

/// An ESP inside an image file (a whole disk or the partition alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Esp {
    pub image: PathBuf,
    /// Byte offset of the FAT file system in `image`.
    pub offset: u64,
}

/// FAT geometry from the boot sector (BIOS parameter block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    /// Byte offset of cluster 2 from the start of the file system.
    data_start: u64,
    cluster_bytes: u64,
    /// Byte offset of the first FAT, each FAT's length in bytes, and how many there are.
    fat_start: u64,
    fat_bytes: u64,
    fats: u64,
}

fn geometry(bpb: &[u8]) -> Option<Geometry> {
    let u16at = |o: usize| {
        Some(u64::from(u16::from_le_bytes(
            bpb.get(o..o + 2)?.try_into().ok()?,
        )))
    };
    let bytes_per_sector = u16at(11)?;
    let sectors_per_cluster = u64::from(*bpb.get(13)?);
    let reserved = u16at(14)?;
    let fats = u64::from(*bpb.get(16)?);
    let root_entries = u16at(17)?;
    let fat16 = u16at(22)?;
    let fat32 = u64::from(u32::from_le_bytes(bpb.get(36..40)?.try_into().ok()?));
    let fat_sectors = if fat16 != 0 { fat16 } else { fat32 };
    if bytes_per_sector == 0 || sectors_per_cluster == 0 || fats == 0 || fat_sectors == 0 {
        return None;
    }
    let root_dir_sectors = (root_entries * 32).div_ceil(bytes_per_sector);
    Some(Geometry {
        data_start: (reserved + fats * fat_sectors + root_dir_sectors) * bytes_per_sector,
        cluster_bytes: sectors_per_cluster * bytes_per_sector,
        fat_start: reserved * bytes_per_sector,
        fat_bytes: fat_sectors * bytes_per_sector,
        fats,
    })
}

/// The cluster runs `mshowfat` prints for a file (`::/f <7-8><20-21>`).
fn cluster_runs(out: &str) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    for part in out.split('<').skip(1) {
        let Some(inner) = part.split('>').next() else {
            continue;
        };
        let mut ends = inner.split('-').map(|x| x.trim().parse::<u64>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) => runs.push((a, b)),
            (Some(Ok(a)), None) => runs.push((a, a)),
            _ => {}
        }
    }
    runs
}

impl Esp {
    /// The ESP partition (PARTLABEL [`ESP_LABEL`]) of a disk image.
    pub fn in_disk(disk_image: &Path) -> Result<Esp, HarnessError> {
        let (offset, _) = disk::partition_offset(disk_image, ESP_LABEL)?;
        Ok(Esp {
            image: disk_image.to_path_buf(),
            offset,
        })
    }

    /// An image that is the file system alone.
    pub fn image(path: &Path) -> Esp {
        Esp {
            image: path.to_path_buf(),
            offset: 0,
        }
    }

    /// mtools' `-i` argument: `image@@offset`.
    pub(super) fn target(&self) -> OsString {
        let mut t = self.image.clone().into_os_string();
        if self.offset != 0 {
            t.push(format!("@@{}", self.offset));
        }
        t
    }

    /// `::/path` for an absolute ESP path.
    pub(super) fn mpath(&self, path: &str) -> Result<String, HarnessError> {
        if !path.starts_with('/') {
            return Err(HarnessError::Setup(format!(
                "ESP path {path:?}: must be absolute"
            )));
        }
        // mtools expands wildcards itself; a path names one file.
        if let Some(c) = path
            .chars()
            .find(|c| c.is_control() || matches!(c, '*' | '?' | '['))
        {
            return Err(HarnessError::Setup(format!(
                "ESP path {path:?}: {c:?} is not allowed"
            )));
        }
        Ok(format!("::{path}"))
    }

    /// The names in directory `dir` (not `.` and `..`), sorted.
    pub fn list(&self, dir: &str) -> Result<Vec<String>, HarnessError> {
        let out = disk::run(
            mtools("mdir")
                .args(["-b", "-i"])
                .arg(self.target())
                .arg(self.mpath(dir)?),
        )?;
        let prefix = format!("{}/", self.mpath(dir)?.trim_end_matches('/'));
        let mut names: Vec<String> = out
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(|n| n.trim_end_matches('/').to_string())
            .filter(|n| !n.is_empty() && n != "." && n != "..")
            .collect();
        names.sort();
        Ok(names)
    }

    /// The bytes of file `path`.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, HarnessError> {
        let mut c = mtools("mcopy");
        c.args(["-n", "-i"])
            .arg(self.target())
            .arg(self.mpath(path)?)
            .arg("-");
        let shown = format!("{c:?}");
        let out = c
            .output()
            .map_err(|e| HarnessError::Setup(format!("cannot run {shown}: {e}")))?;
        if !out.status.success() {
            return Err(HarnessError::Setup(format!(
                "{shown} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out.stdout)
    }

    /// Copies host file `src` to a new file `path` (an existing one is replaced).
    pub fn write_new(&self, path: &str, src: &Path) -> Result<(), HarnessError> {
        disk::run(
            mtools("mcopy")
                .args(["-o", "-D", "o", "-i"])
                .arg(self.target())
                .arg(src)
                .arg(self.mpath(path)?),
        )?;
        Ok(())
    }

    /// Renames `from` to `to` (same directory), as systemd-boot and `bootctl` do.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), HarnessError> {
        let name = to.rsplit('/').next().unwrap_or(to);
        disk::run(
            mtools("mren")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(from)?)
                .arg(name),
        )?;
        Ok(())
    }

    /// Deletes file `path`.
    pub fn remove(&self, path: &str) -> Result<(), HarnessError> {
        disk::run(
            mtools("mdel")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(path)?),
        )?;
        Ok(())
    }

    /// `mshowfat`'s line for file `path`: its cluster runs (`::/f <7-8><20-21>`).
    fn show_fat(&self, path: &str) -> Result<String, HarnessError> {
        disk::run(
            mtools("mshowfat")
                .arg("-i")
                .arg(self.target())
                .arg(self.mpath(path)?),
        )
    }

    /// The image opened for reading and writing, and the FAT's geometry from its boot
    /// sector.
    fn open_fat(&self) -> Result<(std::fs::File, Geometry), HarnessError> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.image)
            .map_err(|e| HarnessError::io(&self.image, e))?;
        let mut bpb = [0u8; 512];
        f.read_exact_at(&mut bpb, self.offset)
            .map_err(|e| HarnessError::io(&self.image, e))?;
        let g = geometry(&bpb).ok_or_else(|| {
            HarnessError::Setup(format!(
                "{}@{}: not a FAT boot sector",
                self.image.display(),
                self.offset
            ))
        })?;
        Ok((f, g))
    }

    /// Rewrites the clusters file `path` already has with `bytes` (the same length), in
    /// place, as GRUB's `save_env` does: no new allocation, no directory change.
    pub fn overwrite_in_place(&self, path: &str, bytes: &[u8]) -> Result<(), HarnessError> {
        use std::os::unix::fs::FileExt;
        let old = self.read(path)?;
        if old.len() != bytes.len() {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: {} bytes, cannot rewrite it in place with {}",
                old.len(),
                bytes.len()
            )));
        }
        let (f, g) = self.open_fat()?;
        let shown = self.show_fat(path)?;
        let mut left = bytes;
        for (first, last) in cluster_runs(&shown) {
            if left.is_empty() {
                break;
            }
            let at = self.offset + g.data_start + (first.saturating_sub(2)) * g.cluster_bytes;
            let n = usize::try_from((last + 1 - first) * g.cluster_bytes)
                .unwrap_or(usize::MAX)
                .min(left.len());
            f.write_all_at(&left[..n], at)
                .map_err(|e| HarnessError::io(&self.image, e))?;
            left = &left[n..];
        }
        if !left.is_empty() {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: mshowfat gave fewer clusters than the file needs: {shown}"
            )));
        }
        f.sync_all().map_err(|e| HarnessError::io(&self.image, e))?;
        if self.read(path)? != bytes {
            return Err(HarnessError::Setup(format!(
                "ESP {path}: read back differs after the in-place write"
            )));
        }
        Ok(())
    }

    /// Breaks the cluster chain of file `path` (FAT32, at least two clusters long) after
    /// its first cluster: that cluster's entry is marked free (0) in every FAT, as a write
    /// cut between a chain's FAT updates leaves it; the directory entry and the data stay.
    /// Returns the first cluster.
    pub fn break_chain(&self, path: &str) -> Result<u64, HarnessError> {
        use std::os::unix::fs::FileExt;
        let shown = self.show_fat(path)?;
        let runs = cluster_runs(&shown);
        let clusters: u64 = runs.iter().map(|(a, b)| b + 1 - a).sum();
        let first = match runs.first() {
            Some((a, _)) if clusters >= 2 => *a,
            _ => {
                return Err(HarnessError::Setup(format!(
                    "ESP {path}: no chain to break in {shown:?} (one cluster or none)"
                )))
            }
        };
        let (f, g) = self.open_fat()?;
        if first * 4 + 4 > g.fat_bytes {
            return Err(HarnessError::Setup(format!(
                "{}@{}: cluster {first} lies past the FAT",
                self.image.display(),
                self.offset
            )));
        }
        for i in 0..g.fats {
            let at = self.offset + g.fat_start + i * g.fat_bytes + first * 4;
            let mut e = [0u8; 4];
            f.read_exact_at(&mut e, at)
                .map_err(|e| HarnessError::io(&self.image, e))?;
            // The top four bits of a FAT32 entry are reserved and kept.
            let free = u32::from_le_bytes(e) & 0xF000_0000;
            f.write_all_at(&free.to_le_bytes(), at)
                .map_err(|e| HarnessError::io(&self.image, e))?;
        }
        f.sync_all().map_err(|e| HarnessError::io(&self.image, e))?;
        Ok(first)
    }

    /// Copies ESP file `path` to `out` on the host.
    pub fn copy_out(&self, path: &str, out: &Path) -> Result<(), HarnessError> {
        let bytes = self.read(path)?;
        std::fs::write(out, bytes).map_err(|e| HarnessError::io(out, e))
    }

    /// `grub-editenv FILE list` of the ESP's `grubenv` (copied to `scratch` first), as
    /// (name, value) pairs in the file's order.
    pub fn grubenv(&self, scratch: &Path) -> Result<Vec<(String, String)>, HarnessError> {
        let tmp = scratch.join("grubenv.read");
        self.copy_out(GRUBENV_PATH, &tmp)?;
        let out = disk::run(Command::new("grub-editenv").arg(&tmp).arg("list"))?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    /// One variable of [`Esp::grubenv`].
    pub fn grubenv_get(&self, scratch: &Path, name: &str) -> Result<Option<String>, HarnessError> {
        Ok(self
            .grubenv(scratch)?
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v))
    }

    /// Sets `vars` in the ESP's `grubenv` with `grub-editenv FILE set` on a copy, then
    /// writes the copy back over the file's own clusters.
    pub fn grubenv_set(&self, scratch: &Path, vars: &[(&str, &str)]) -> Result<(), HarnessError> {
        let tmp = scratch.join("grubenv.edit");
        self.copy_out(GRUBENV_PATH, &tmp)?;
        let mut c = Command::new("grub-editenv");
        c.arg(&tmp).arg("set");
        for (k, v) in vars {
            c.arg(format!("{k}={v}"));
        }
        disk::run(&mut c)?;
        let bytes = std::fs::read(&tmp).map_err(|e| HarnessError::io(&tmp, e))?;
        self.overwrite_in_place(GRUBENV_PATH, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_runs_of_mshowfat() {
        assert_eq!(cluster_runs("::/EFI/BOOT/grubenv <7-8>\n"), vec![(7, 8)]);
        assert_eq!(
            cluster_runs("::/x <7-8><20-21><30>"),
            vec![(7, 8), (20, 21), (30, 30)]
        );
        assert!(cluster_runs("::/x").is_empty());
    }

    #[test]
    fn fat_geometry() {
        let mut b = [0u8; 512];
        b[11..13].copy_from_slice(&512u16.to_le_bytes());
        b[13] = 1;
        b[14..16].copy_from_slice(&32u16.to_le_bytes());
        b[16] = 2;
        b[36..40].copy_from_slice(&1009u32.to_le_bytes());
        assert_eq!(
            geometry(&b),
            Some(Geometry {
                data_start: (32 + 2 * 1009) * 512,
                cluster_bytes: 512,
                fat_start: 32 * 512,
                fat_bytes: 1009 * 512,
                fats: 2,
            })
        );
        assert_eq!(geometry(&[0u8; 512]), None);
        assert_eq!(geometry(&[0u8; 10]), None);
    }
}

//! GUID Partition Table reader: pure functions over bytes and over anything that reads
//! at offsets (`FileExt`); opening a device is [`crate::sys::read_gpt`]'s. No udev, no
//! libblkid.
//!
//! Both CRCs (header and entry array) are checked; when the primary header is damaged the
//! backup header at the last LBA is used, as firmware does. Partition names are UTF-16LE,
//! GUIDs are printed in the usual mixed-endian text form, lower case.

use std::fmt;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A GPT problem, naming the disk and what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum GptError {
    #[error("{disk}: {source}")]
    Io { disk: PathBuf, source: io::Error },
    #[error("{disk}: {what}")]
    Invalid { disk: PathBuf, what: String },
}

/// What is wrong with one GPT header sector or entry array, as [`parse_header`] and
/// [`parse_entries`] find it; the caller adds the disk and LBA ([`read_table`] makes it a
/// [`GptError::Invalid`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GptParseError {
    #[error("GPT header sector too short")]
    ShortSector { len: usize },
    #[error("no GPT signature (\"EFI PART\")")]
    NoSignature,
    #[error("GPT header size {size} out of range")]
    HeaderSize { size: usize },
    #[error("GPT header CRC mismatch (stored {stored:08x}, computed {computed:08x})")]
    HeaderCrc { stored: u32, computed: u32 },
    #[error("GPT entry size {size} invalid")]
    EntrySize { size: u32 },
    #[error("GPT entry count {count} invalid")]
    EntryCount { count: u32 },
    #[error("GPT entry array truncated ({have} of {need} bytes)")]
    EntriesTruncated { have: usize, need: usize },
    #[error("GPT entry array CRC mismatch (stored {stored:08x}, computed {computed:08x})")]
    EntriesCrc { stored: u32, computed: u32 },
    #[error("GPT entry {entry}: last LBA {last} before first LBA {first}")]
    EntryRange { entry: usize, first: u64, last: u64 },
}

/// A 16-byte GUID as stored on disk.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (any case).
    pub fn parse(s: &str) -> Option<Guid> {
        let hexpart: String = s.chars().filter(|&c| c != '-').collect();
        if hexpart.len() != 32 || s.len() != 36 {
            return None;
        }
        let dashes: Vec<usize> = s.match_indices('-').map(|(i, _)| i).collect();
        if dashes != [8, 13, 18, 23] {
            return None;
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(hexpart.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        // Text order to disk order: the first three fields are little endian.
        let mut g = raw;
        g[0..4].reverse();
        g[4..6].reverse();
        g[6..8].reverse();
        Some(Guid(g))
    }

    /// Builds a GUID from 16 bytes in text order (as the systemd convention slices a root
    /// hash into partition UUIDs).
    pub fn from_text_order(raw: [u8; 16]) -> Guid {
        let mut g = raw;
        g[0..4].reverse();
        g[4..6].reverse();
        g[6..8].reverse();
        Guid(g)
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.0;
        write!(
            f,
            "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-",
            g[3], g[2], g[1], g[0], g[5], g[4], g[7], g[6], g[8], g[9]
        )?;
        for b in &g[10..] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One used partition entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// 1-based partition number, as the kernel numbers them.
    pub number: u32,
    pub type_guid: Guid,
    pub unique_guid: Guid,
    pub first_lba: u64,
    pub last_lba: u64,
    pub attributes: u64,
    pub name: String,
}

/// A parsed table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub disk_guid: Guid,
    pub sector_size: u64,
    pub partitions: Vec<Partition>,
    /// True when the primary header was damaged and the backup was used.
    pub used_backup: bool,
}

/// The header fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub current_lba: u64,
    pub backup_lba: u64,
    pub first_usable: u64,
    pub last_usable: u64,
    pub disk_guid: Guid,
    pub entries_lba: u64,
    pub entry_count: u32,
    pub entry_size: u32,
    pub entries_crc: u32,
}

/// Little-endian fields of a structure whose length was checked first: a field past the
/// end reads as 0.
fn le32(b: &[u8], o: usize) -> u32 {
    crate::util::le::u32_le(b, o).unwrap_or_default()
}
fn le64(b: &[u8], o: usize) -> u64 {
    crate::util::le::u64_le(b, o).unwrap_or_default()
}

/// The 16 bytes at `o` (zeros past the end; callers check the length first).
fn bytes16(b: &[u8], o: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    if let Some(s) = b.get(o..o + 16) {
        a.copy_from_slice(s);
    }
    a
}

/// Most entries we accept (the spec's minimum array is 128; real tools never exceed a few
/// thousand).
const ENTRIES_MAX: u32 = 16384;

/// Parses a GPT header from the sector that holds it.
pub fn parse_header(sector: &[u8]) -> Result<Header, GptParseError> {
    if sector.len() < 92 {
        return Err(GptParseError::ShortSector { len: sector.len() });
    }
    if !sector.starts_with(b"EFI PART") {
        return Err(GptParseError::NoSignature);
    }
    let header_size = le32(sector, 12) as usize;
    let Some(header) = sector.get(..header_size).filter(|_| header_size >= 92) else {
        return Err(GptParseError::HeaderSize { size: header_size });
    };
    let stored_crc = le32(sector, 16);
    let mut h = header.to_vec();
    crate::util::le::put(&mut h, 16, &[0; 4]);
    let crc = crc32fast::hash(&h);
    if crc != stored_crc {
        return Err(GptParseError::HeaderCrc {
            stored: stored_crc,
            computed: crc,
        });
    }
    let guid = bytes16(sector, 56);
    let hdr = Header {
        current_lba: le64(sector, 24),
        backup_lba: le64(sector, 32),
        first_usable: le64(sector, 40),
        last_usable: le64(sector, 48),
        disk_guid: Guid(guid),
        entries_lba: le64(sector, 72),
        entry_count: le32(sector, 80),
        entry_size: le32(sector, 84),
        entries_crc: le32(sector, 88),
    };
    if hdr.entry_size < 128 || !hdr.entry_size.is_multiple_of(8) || hdr.entry_size > 4096 {
        return Err(GptParseError::EntrySize {
            size: hdr.entry_size,
        });
    }
    if hdr.entry_count == 0 || hdr.entry_count > ENTRIES_MAX {
        return Err(GptParseError::EntryCount {
            count: hdr.entry_count,
        });
    }
    Ok(hdr)
}

/// Parses the partition entry array described by `hdr`.
pub fn parse_entries(hdr: &Header, bytes: &[u8]) -> Result<Vec<Partition>, GptParseError> {
    let len = hdr.entry_count as usize * hdr.entry_size as usize;
    let Some(arr) = bytes.get(..len) else {
        return Err(GptParseError::EntriesTruncated {
            have: bytes.len(),
            need: len,
        });
    };
    let crc = crc32fast::hash(arr);
    if crc != hdr.entries_crc {
        return Err(GptParseError::EntriesCrc {
            stored: hdr.entries_crc,
            computed: crc,
        });
    }
    let mut out = Vec::new();
    for ((i, e), number) in arr
        .chunks_exact(hdr.entry_size as usize)
        .enumerate()
        .zip(1u32..)
    {
        let type_guid = Guid(bytes16(e, 0));
        if type_guid.is_zero() {
            continue;
        }
        let u = bytes16(e, 16);
        let first_lba = le64(e, 32);
        let last_lba = le64(e, 40);
        if last_lba < first_lba {
            return Err(GptParseError::EntryRange {
                entry: i + 1,
                first: first_lba,
                last: last_lba,
            });
        }
        let units: Vec<u16> = e
            .get(56..128)
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|c| crate::util::le::u16_le(c, 0).unwrap_or_default())
            .take_while(|&c| c != 0)
            .collect();
        out.push(Partition {
            number,
            type_guid,
            unique_guid: Guid(u),
            first_lba,
            last_lba,
            attributes: le64(e, 48),
            name: String::from_utf16_lossy(&units),
        });
    }
    Ok(out)
}

/// Reads the table from anything that reads at offsets, given its size in bytes.
pub fn read_table<R: FileExt>(
    dev: &R,
    size: u64,
    sector_size: u64,
    name: &Path,
) -> Result<Table, GptError> {
    let invalid = |what: String| GptError::Invalid {
        disk: name.to_path_buf(),
        what,
    };
    let io_err = |source| GptError::Io {
        disk: name.to_path_buf(),
        source,
    };
    let sector_len = usize::try_from(sector_size)
        .ok()
        .filter(|_| (512..=65536).contains(&sector_size) && sector_size.is_power_of_two())
        .ok_or_else(|| invalid(format!("sector size {sector_size} invalid")))?;
    if size < sector_size * 3 {
        return Err(invalid(format!("{size} bytes is too small for a GPT")));
    }
    let read = |lba: u64, len: usize| -> Result<Vec<u8>, GptError> {
        let off = lba
            .checked_mul(sector_size)
            .filter(|o| o.saturating_add(len as u64) <= size)
            .ok_or_else(|| invalid(format!("LBA {lba} (+{len} bytes) is beyond the disk")))?;
        let mut buf = vec![0u8; len];
        dev.read_exact_at(&mut buf, off).map_err(io_err)?;
        Ok(buf)
    };
    let last = size / sector_size - 1;
    let try_at = |lba: u64| -> Result<(Header, Vec<Partition>), GptError> {
        let sec = read(lba, sector_len)?;
        let hdr = parse_header(&sec).map_err(|e| invalid(format!("LBA {lba}: {e}")))?;
        if hdr.current_lba != lba {
            return Err(invalid(format!(
                "LBA {lba}: header says it is at LBA {}",
                hdr.current_lba
            )));
        }
        // The kernel's is_gpt_valid(): the usable area lies on the disk.
        if hdr.first_usable > last || hdr.last_usable > last || hdr.last_usable < hdr.first_usable {
            return Err(invalid(format!(
                "LBA {lba}: usable area {}..{} is not within the disk's LBAs 0..{last}",
                hdr.first_usable, hdr.last_usable
            )));
        }
        let len = hdr.entry_count as usize * hdr.entry_size as usize;
        let arr = read(hdr.entries_lba, len)?;
        let parts = parse_entries(&hdr, &arr).map_err(|e| invalid(format!("LBA {lba}: {e}")))?;
        for p in &parts {
            if p.first_lba < hdr.first_usable || p.last_lba > hdr.last_usable {
                return Err(invalid(format!(
                    "partition {} ({}..{}) lies outside the usable area",
                    p.number, p.first_lba, p.last_lba
                )));
            }
        }
        Ok((hdr, parts))
    };
    let (hdr, parts, used_backup) = match try_at(1) {
        Ok((h, p)) => (h, p, false),
        Err(primary) => match try_at(last) {
            Ok((h, p)) => (h, p, true),
            Err(_) => return Err(primary),
        },
    };
    Ok(Table {
        disk_guid: hdr.disk_guid,
        sector_size,
        partitions: parts,
        used_backup,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a small GPT image in memory, the way `sfdisk` lays it out.
    pub(crate) fn build(parts: &[(Guid, Guid, u64, u64, &str)], sectors: u64) -> Vec<u8> {
        let ss = 512u64;
        let mut img = vec![0u8; usize::try_from(sectors * ss).unwrap()];
        let mut arr = vec![0u8; 128 * 128];
        for (i, (t, u, f, l, name)) in parts.iter().enumerate() {
            let e = &mut arr[i * 128..(i + 1) * 128];
            e[0..16].copy_from_slice(&t.0);
            e[16..32].copy_from_slice(&u.0);
            e[32..40].copy_from_slice(&f.to_le_bytes());
            e[40..48].copy_from_slice(&l.to_le_bytes());
            for (j, c) in name.encode_utf16().enumerate() {
                e[56 + 2 * j..58 + 2 * j].copy_from_slice(&c.to_le_bytes());
            }
        }
        let arr_crc = crc32fast::hash(&arr);
        let header = |cur: u64, alt: u64, entries: u64| {
            let mut h = vec![0u8; 92];
            h[0..8].copy_from_slice(b"EFI PART");
            h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
            h[12..16].copy_from_slice(&92u32.to_le_bytes());
            h[24..32].copy_from_slice(&cur.to_le_bytes());
            h[32..40].copy_from_slice(&alt.to_le_bytes());
            h[40..48].copy_from_slice(&34u64.to_le_bytes());
            h[48..56].copy_from_slice(&(sectors - 34).to_le_bytes());
            h[56..72].copy_from_slice(&[0x11; 16]);
            h[72..80].copy_from_slice(&entries.to_le_bytes());
            h[80..84].copy_from_slice(&128u32.to_le_bytes());
            h[84..88].copy_from_slice(&128u32.to_le_bytes());
            h[88..92].copy_from_slice(&arr_crc.to_le_bytes());
            let crc = crc32fast::hash(&h);
            h[16..20].copy_from_slice(&crc.to_le_bytes());
            h
        };
        let last = sectors - 1;
        let p = header(1, last, 2);
        img[512..512 + 92].copy_from_slice(&p);
        img[1024..1024 + arr.len()].copy_from_slice(&arr);
        let b = header(last, 1, last - 32);
        let bo = usize::try_from(last * ss).unwrap();
        img[bo..bo + 92].copy_from_slice(&b);
        let ao = usize::try_from((last - 32) * ss).unwrap();
        img[ao..ao + arr.len()].copy_from_slice(&arr);
        img
    }

    struct Mem(Vec<u8>);
    impl FileExt for Mem {
        fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
            let off = usize::try_from(off).unwrap();
            if off >= self.0.len() {
                return Ok(0);
            }
            let n = buf.len().min(self.0.len() - off);
            buf[..n].copy_from_slice(&self.0[off..off + n]);
            Ok(n)
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<usize> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    const LINUX: &str = "0fc63daf-8483-4772-8e79-3d69d8477de4";

    fn sample() -> Vec<u8> {
        let t = Guid::parse(LINUX).unwrap();
        let u = Guid::parse("01234567-89ab-cdef-0011-223344556677").unwrap();
        build(&[(t, u, 34, 99, "root"), (t, t, 100, 199, "rööt-b")], 300)
    }

    #[test]
    fn guid_text_round_trip() {
        let g = Guid::parse("C12A7328-F81F-11D2-BA4B-00A0C93EC93B").unwrap();
        assert_eq!(g.0[0], 0x28);
        assert_eq!(g.to_string(), "c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
        assert!(Guid::parse("c12a7328f81f11d2ba4b00a0c93ec93b").is_none());
        assert!(Guid::parse("c12a7328-f81f-11d2-ba4b-00a0c93ec93").is_none());
        assert!(Guid::parse("g12a7328-f81f-11d2-ba4b-00a0c93ec93b").is_none());
        assert!(Guid::parse("c12a732-8f81f-11d2-ba4b-00a0c93ec93b").is_none());
    }

    #[test]
    fn reads_partitions() {
        let img = Mem(sample());
        let t = read_table(&img, img.0.len() as u64, 512, Path::new("mem")).unwrap();
        assert!(!t.used_backup);
        assert_eq!(t.partitions.len(), 2);
        assert_eq!(t.partitions[0].name, "root");
        assert_eq!(
            t.partitions[0].unique_guid.to_string(),
            "01234567-89ab-cdef-0011-223344556677"
        );
        assert_eq!(t.partitions[1].number, 2);
        assert_eq!(t.partitions[1].name, "rööt-b");
        assert_eq!(t.partitions[1].first_lba, 100);
    }

    #[test]
    fn falls_back_to_backup_header() {
        let mut raw = sample();
        raw[512 + 30] ^= 1; // primary header damaged
        let img = Mem(raw);
        let t = read_table(&img, img.0.len() as u64, 512, Path::new("mem")).unwrap();
        assert!(t.used_backup);
        assert_eq!(t.partitions.len(), 2);
    }

    #[test]
    fn damage_is_reported() {
        let mut raw = sample();
        raw[1024 + 57] ^= 1; // primary entry array
        let n = raw.len();
        raw[n - 512 + 5] ^= 1; // backup header
        let img = Mem(raw);
        let e = read_table(&img, img.0.len() as u64, 512, Path::new("disk0")).unwrap_err();
        assert!(
            e.to_string()
                .contains("disk0: LBA 1: GPT entry array CRC mismatch"),
            "{e}"
        );
        let e = read_table(&Mem(vec![0; 4096]), 4096, 512, Path::new("d")).unwrap_err();
        assert!(e.to_string().contains("no GPT signature"), "{e}");
        let e = read_table(&Mem(vec![0; 100]), 100, 512, Path::new("d")).unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
    }

    /// Fuzz finding (`fuzz/regressions/gpt/`): a header whose usable area runs past the
    /// end of the disk was taken, and with it partitions the kernel does not create. Such
    /// a header is refused as the kernel refuses it, and the other copy is used.
    #[test]
    fn usable_area_must_lie_on_the_disk() {
        fn set_last_usable(raw: &mut [u8], header: usize, v: u64) {
            raw[header + 48..header + 56].copy_from_slice(&v.to_le_bytes());
            raw[header + 16..header + 20].copy_from_slice(&[0; 4]);
            let crc = crc32fast::hash(&raw[header..header + 92]);
            raw[header + 16..header + 20].copy_from_slice(&crc.to_le_bytes());
        }
        let mut raw = sample();
        let n = raw.len();
        let last = (n / 512 - 1) as u64;
        set_last_usable(&mut raw, 512, last + 1);
        let t = read_table(&Mem(raw.clone()), n as u64, 512, Path::new("m")).unwrap();
        assert!(t.used_backup);
        set_last_usable(&mut raw, n - 512, 10);
        let e = read_table(&Mem(raw), n as u64, 512, Path::new("m")).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "LBA 1: usable area 34..{} is not within the disk's LBAs 0..{last}",
                last + 1
            )),
            "{e}"
        );
        // The fuzzer's input: sfdisk's table for 64 sectors on a disk of 3.
        let input = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/regressions/gpt/usable-area-past-the-disk"
        ))
        .unwrap();
        let e = read_table(&Mem(input.clone()), input.len() as u64, 512, Path::new("m"));
        assert!(e.unwrap_err().to_string().contains("usable area 4..61"));
    }

    #[test]
    fn hostile_headers_do_not_panic() {
        let base = sample();
        // Flip every byte of the primary header and entry area in turn.
        for i in 512..(1024 + 256) {
            let mut raw = base.clone();
            raw[i] = raw[i].wrapping_add(0x5a);
            let img = Mem(raw);
            let _ = read_table(&img, img.0.len() as u64, 512, Path::new("m"));
        }
        // A header with a valid CRC but absurd fields.
        let mut h = vec![0u8; 512];
        h[0..8].copy_from_slice(b"EFI PART");
        h[12..16].copy_from_slice(&92u32.to_le_bytes());
        h[24..32].copy_from_slice(&1u64.to_le_bytes());
        h[72..80].copy_from_slice(&u64::MAX.to_le_bytes());
        h[80..84].copy_from_slice(&128u32.to_le_bytes());
        h[84..88].copy_from_slice(&128u32.to_le_bytes());
        let crc = crc32fast::hash(&h[..92]);
        h[16..20].copy_from_slice(&crc.to_le_bytes());
        let mut raw = vec![0u8; 512 * 64];
        raw[512..1024].copy_from_slice(&h);
        let img = Mem(raw);
        let e = read_table(&img, img.0.len() as u64, 512, Path::new("m")).unwrap_err();
        assert!(e.to_string().contains("beyond the disk"), "{e}");
    }
}

//! What a kernel image tells about itself: its release, its module vermagic, the symbol
//! CRCs it exports (`__ksymtab*` / `__kcrctab*`), its built-in trusted certificates
//! (the `system_certificate_list` the kernel verifies module signatures against) and the
//! memory its setup header asks for ([`init_size`]).
//!
//! Input is an x86 bzImage (`vmlinuz`: the setup header's payload, compressed with xz,
//! zstd, gzip or legacy LZ4) or an uncompressed `vmlinux` ELF. The payload inside a bzImage
//! is an ELF stripped of symbols but not of section headers, so everything here is found by
//! section name or by the layout the kernel's own build gives it.

use goblin::elf::Elf;

use crate::formats::compress;
use crate::util::le::{i32_le, u16_le, u32_le, u64_le};

/// A kernel-image problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmlinuzError {
    #[error("not a bzImage or vmlinux: {0}")]
    NotKernel(String),
    #[error("kernel payload compressed with {0}, which is not supported")]
    UnsupportedCompression(&'static str),
    #[error(transparent)]
    Decompress(#[from] compress::DecompressError),
    #[error("malformed vmlinux ELF: {0}")]
    BadElf(String),
    #[error("{0}")]
    Missing(String),
}

/// Most bytes read from one kernel image file (a bzImage or a vmlinux ELF): the CLI's
/// `--vmlinuz` and mkinitramfs's `boot/vmlinuz-<release>`.
pub const VMLINUZ_MAX: u64 = 256 << 20;

/// Largest decompressed kernel we accept.
pub const VMLINUX_MAX: usize = 1 << 30;

/// The memory a bzImage needs from its load address (the setup header's `init_size`, boot
/// protocol 2.10 on; what `kexec_file_load` loads it into), page-aligned; `None` without
/// a setup header.
pub fn init_size(image: &[u8]) -> Option<u64> {
    if image.get(0x202..0x206) != Some(b"HdrS") {
        return None;
    }
    Some(u64::from(u32_le(image, 0x260)?).next_multiple_of(4096))
}

/// Returns the uncompressed vmlinux ELF of a bzImage, or the input if it already is one;
/// a payload that decompresses to more than [`VMLINUX_MAX`] bytes is an error.
pub fn vmlinux(image: &[u8]) -> Result<Vec<u8>, VmlinuzError> {
    vmlinux_limited(image, VMLINUX_MAX)
}

/// [`vmlinux`] with the payload's decompressed size limited to `limit` bytes (the fuzz
/// target uses a small one).
pub fn vmlinux_limited(image: &[u8], limit: usize) -> Result<Vec<u8>, VmlinuzError> {
    if image.starts_with(b"\x7fELF") {
        if u16_le(image, 16) != Some(goblin::elf::header::ET_EXEC) {
            return Err(VmlinuzError::NotKernel(
                "an ELF file, but not an executable kernel (a module?)".into(),
            ));
        }
        return Ok(image.to_vec());
    }
    if image.get(0x202..0x206) != Some(b"HdrS") {
        return Err(VmlinuzError::NotKernel(
            "no \"HdrS\" setup header at 0x202".into(),
        ));
    }
    let version = u16_le(image, 0x206).ok_or_else(|| {
        VmlinuzError::NotKernel("the setup header ends before its version field".into())
    })?;
    if version < 0x208 {
        return Err(VmlinuzError::NotKernel(format!(
            "boot protocol {version:#x} has no payload fields"
        )));
    }
    let setup_sects = match image.get(0x1f1).copied() {
        Some(0) | None => 4,
        Some(n) => usize::from(n),
    };
    let pm = (setup_sects + 1) * 512;
    let field = |o: usize, what: &str| {
        u32_le(image, o)
            .map(|v| v as usize)
            .ok_or_else(|| VmlinuzError::NotKernel(format!("the setup header ends before {what}")))
    };
    let (off, len) = (
        field(0x248, "payload_offset")?,
        field(0x24c, "payload_length")?,
    );
    let payload = pm
        .checked_add(off)
        .and_then(|s| image.get(s..s.checked_add(len)?))
        .ok_or_else(|| VmlinuzError::NotKernel("payload lies outside the file".into()))?;
    // The build appends the decompressed size after the stream: the first stream is the
    // kernel, what follows it is not read.
    let elf = if payload.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        compress::xz_stream(payload, limit)?.data
    } else if payload.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        compress::zstd_frame(payload, limit)?.data
    } else if payload.starts_with(&[0x1f, 0x8b]) {
        compress::gzip_member(payload, limit)?.data
    } else if payload.starts_with(&[0x02, 0x21, 0x4c, 0x18]) {
        compress::lz4_legacy(payload, limit)?
    } else if payload.starts_with(b"BZh") {
        return Err(VmlinuzError::UnsupportedCompression("bzip2"));
    } else if payload.starts_with(&[0x89, b'L', b'Z', b'O']) {
        return Err(VmlinuzError::UnsupportedCompression("lzo"));
    } else if payload.starts_with(&[0x5d, 0x00]) {
        return Err(VmlinuzError::UnsupportedCompression("lzma"));
    } else {
        return Err(VmlinuzError::NotKernel(
            "unknown payload compression".into(),
        ));
    };
    if !elf.starts_with(b"\x7fELF") {
        return Err(VmlinuzError::NotKernel("the payload is not an ELF".into()));
    }
    Ok(elf)
}

/// The release in the `Linux version <release> (...` banner.
pub fn release(vmlinux: &[u8]) -> Option<String> {
    let needle = b"Linux version ";
    let mut from = 0;
    while let Some(i) = find(vmlinux.get(from..)?, needle) {
        let start = from + i + needle.len();
        let word: Vec<u8> = vmlinux
            .get(start..)?
            .iter()
            .take_while(|c| c.is_ascii_graphic())
            .copied()
            .take(128)
            .collect();
        if vmlinux.get(start + word.len()) == Some(&b' ')
            && word.first().is_some_and(u8::is_ascii_digit)
        {
            return String::from_utf8(word).ok();
        }
        from = start;
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The kernel's module vermagic string (`<release> SMP preempt mod_unload modversions `).
pub fn vermagic(vmlinux: &[u8], release: &str) -> Option<String> {
    let mut needle = release.as_bytes().to_vec();
    needle.push(b' ');
    let mut from = 0;
    while let Some(i) = find(vmlinux.get(from..)?, &needle) {
        let start = from + i;
        let preceded_by_nul = start == 0 || vmlinux.get(start - 1) == Some(&0);
        let s: Vec<u8> = vmlinux
            .get(start..)?
            .iter()
            .take_while(|&&c| c != 0)
            .copied()
            .take(256)
            .collect();
        if preceded_by_nul && s.iter().all(|c| c.is_ascii_graphic() || *c == b' ') {
            let text = String::from_utf8_lossy(&s).into_owned();
            if text.contains("mod_unload") || text.contains("modversions") || text.contains("SMP") {
                return Some(text);
            }
        }
        from = start + 1;
    }
    None
}

/// One exported symbol and its CRC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedCrc {
    pub symbol: String,
    pub crc: u32,
    pub gpl: bool,
    /// Symbol namespace (`EXPORT_SYMBOL_NS`), empty for none.
    pub namespace: String,
}

struct Sections<'a> {
    bytes: &'a [u8],
    list: Vec<(String, u64, u64, u64)>, // name, addr, offset, size
}

impl<'a> Sections<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Sections<'a>, VmlinuzError> {
        let elf = Elf::parse_header(bytes).map_err(|e| VmlinuzError::BadElf(e.to_string()))?;
        let ctx = goblin::container::Ctx::new(
            if elf.e_ident[goblin::elf::header::EI_CLASS] == goblin::elf::header::ELFCLASS64 {
                goblin::container::Container::Big
            } else {
                goblin::container::Container::Little
            },
            goblin::container::Endian::Little,
        );
        let shoff = usize::try_from(elf.e_shoff)
            .map_err(|_| VmlinuzError::BadElf("section header table out of range".into()))?;
        let shdrs = goblin::elf::SectionHeader::parse(bytes, shoff, elf.e_shnum as usize, ctx)
            .map_err(|e| VmlinuzError::BadElf(e.to_string()))?;
        let strtab = shdrs
            .get(elf.e_shstrndx as usize)
            .ok_or_else(|| VmlinuzError::BadElf("no section name table".into()))?;
        let names = range(bytes, strtab.sh_offset, strtab.sh_size)
            .ok_or_else(|| VmlinuzError::BadElf("section name table out of range".into()))?;
        let list = shdrs
            .iter()
            .map(|s| {
                // A name outside the table matches no section we look for.
                let n = names
                    .get(s.sh_name..)
                    .map(|r| String::from_utf8_lossy(until_nul(r)).into_owned())
                    .unwrap_or_default();
                (n, s.sh_addr, s.sh_offset, s.sh_size)
            })
            .collect();
        Ok(Sections { bytes, list })
    }

    fn get(&self, name: &str) -> Option<(u64, &'a [u8])> {
        let (_, addr, off, size) = self.list.iter().find(|s| s.0 == name)?;
        Some((*addr, range(self.bytes, *off, *size)?))
    }

    /// The NUL-terminated string at virtual address `addr`.
    fn string_at(&self, addr: u64) -> Option<String> {
        let (_, a, off, size) = self
            .list
            .iter()
            .find(|s| s.1 != 0 && addr >= s.1 && addr - s.1 < s.3)?;
        let r = range(self.bytes, *off, *size)?.get(usize::try_from(addr - a).ok()?..)?;
        let n = r.iter().position(|&c| c == 0)?;
        String::from_utf8(r.get(..n)?.to_vec()).ok()
    }
}

/// `len` bytes at `off` of `b`, if they are all inside it.
fn range(b: &[u8], off: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    b.get(start..end)
}

/// `b` up to its first NUL (all of it without one).
fn until_nul(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// The CRCs of every symbol the kernel exports (`EXPORT_SYMBOL` and `_GPL`).
pub fn exported_crcs(vmlinux: &[u8]) -> Result<Vec<ExportedCrc>, VmlinuzError> {
    let secs = Sections::parse(vmlinux)?;
    let mut out = Vec::new();
    for (tab, crcs, gpl) in [
        ("__ksymtab", "__kcrctab", false),
        ("__ksymtab_gpl", "__kcrctab_gpl", true),
    ] {
        let Some((addr, syms)) = secs.get(tab) else {
            continue;
        };
        let (_, crc) = secs.get(crcs).ok_or_else(|| {
            VmlinuzError::Missing(format!(
                "{crcs} missing: kernel built without CONFIG_MODVERSIONS?"
            ))
        })?;
        let n = crc.len() / 4;
        if n == 0 || syms.len() % n != 0 {
            return Err(VmlinuzError::BadElf(format!(
                "{tab} ({} bytes) and {crcs} ({n} CRCs) disagree",
                syms.len()
            )));
        }
        let entry = syms.len() / n;
        if !matches!(entry, 8 | 12 | 16 | 24) {
            return Err(VmlinuzError::BadElf(format!(
                "{tab}: entry size {entry} not understood"
            )));
        }
        for (i, (e, c)) in syms
            .chunks_exact(entry)
            .zip(crc.chunks_exact(4))
            .enumerate()
        {
            let name_addr = match entry {
                // PREL32: int value_offset; int name_offset; [int namespace_offset;]
                8 | 12 => i32_le(e, 4).map(|off| {
                    addr.wrapping_add((i * entry) as u64)
                        .wrapping_add(4)
                        .wrapping_add_signed(i64::from(off))
                }),
                // Absolute pointers: unsigned long value; const char *name; [namespace]
                _ => u64_le(e, 8),
            };
            let symbol = name_addr.and_then(|a| secs.string_at(a)).ok_or_else(|| {
                VmlinuzError::BadElf(format!("{tab}[{i}]: name outside the image"))
            })?;
            // The namespace: a third PREL32 (12-byte entries) or pointer (24-byte
            // entries) to a string, empty (or a null pointer) for none.
            let ns_addr = match entry {
                12 => i32_le(e, 8).map(|off| {
                    Some(
                        addr.wrapping_add((i * entry) as u64)
                            .wrapping_add(8)
                            .wrapping_add_signed(i64::from(off)),
                    )
                }),
                24 => u64_le(e, 16).map(|a| (a != 0).then_some(a)),
                _ => Some(None),
            };
            let namespace = match ns_addr {
                Some(None) => String::new(),
                Some(Some(a)) => secs.string_at(a).ok_or_else(|| {
                    VmlinuzError::BadElf(format!("{tab}[{i}]: namespace outside the image"))
                })?,
                None => return Err(VmlinuzError::BadElf(format!("{tab}[{i}]: entry cut short"))),
            };
            let c = u32_le(c, 0).unwrap_or_default();
            out.push(ExportedCrc {
                symbol,
                crc: c,
                gpl,
                namespace,
            });
        }
    }
    if out.is_empty() {
        return Err(VmlinuzError::Missing(
            "no __ksymtab sections: not a modular kernel?".into(),
        ));
    }
    Ok(out)
}

/// DER length of a certificate starting at `i` (`30 82 hi lo`), if it looks like one.
fn cert_len_at(b: &[u8], i: usize) -> Option<usize> {
    let h = b.get(i..)?;
    let [0x30, 0x82, hi, lo, 0x30, 0x82, _, _, 0xa0, 0x03, 0x02, 0x01, 0x02, ..] = *h else {
        return None;
    };
    let len = ((usize::from(hi) << 8) | usize::from(lo)) + 4;
    (len <= h.len()).then_some(len)
}

/// The kernel's built-in trusted certificates (DER), found as the kernel lays out
/// `system_certificate_list`: certificates back to back, then, 8-byte aligned, a 64-bit
/// `system_certificate_list_size` equal to their total length.
pub fn builtin_certs(vmlinux: &[u8]) -> Result<Vec<Vec<u8>>, VmlinuzError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 13 < vmlinux.len() {
        let Some(first) = cert_len_at(vmlinux, i) else {
            i += 1;
            continue;
        };
        // Collect the run of certificates starting here.
        let mut run = vec![(i, first)];
        let mut end = i + first;
        while let Some(l) = cert_len_at(vmlinux, end) {
            run.push((end, l));
            end += l;
        }
        let size = u64_le(vmlinux, end.div_ceil(8) * 8);
        let ders: Vec<&[u8]> = run
            .iter()
            .filter_map(|(s, l)| vmlinux.get(*s..s + l))
            .collect();
        if size == Some((end - i) as u64)
            && ders.len() == run.len()
            && ders.iter().all(|d| {
                use der::Decode;
                x509_cert::Certificate::from_der(d).is_ok()
            })
        {
            out.extend(ders.iter().map(|d| d.to_vec()));
        }
        i = end.max(i + 1);
    }
    if out.is_empty() {
        return Err(no_builtin_certs());
    }
    Ok(out)
}

fn no_builtin_certs() -> VmlinuzError {
    VmlinuzError::Missing(
        "no system_certificate_list (built-in trusted keys) found in the kernel".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_size_reads_the_boot_header() {
        let mut img = vec![0u8; 0x300];
        assert_eq!(init_size(&img), None, "no HdrS");
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x260..0x264].copy_from_slice(&66_682_880u32.to_le_bytes());
        assert_eq!(init_size(&img), Some(66_682_880));
        img[0x260..0x264].copy_from_slice(&4097u32.to_le_bytes());
        assert_eq!(init_size(&img), Some(8192), "page-aligned");
        assert_eq!(init_size(&img[..0x262]), None, "truncated");
    }

    #[test]
    fn rejects_non_kernels() {
        assert!(matches!(vmlinux(b"hello"), Err(VmlinuzError::NotKernel(_))));
        let mut fake = vec![0u8; 0x300];
        fake[0x202..0x206].copy_from_slice(b"HdrS");
        fake[0x206] = 0x0f;
        fake[0x207] = 0x02;
        fake[0x248..0x24c].copy_from_slice(&0x1000u32.to_le_bytes());
        fake[0x24c..0x250].copy_from_slice(&0x1000u32.to_le_bytes());
        assert!(matches!(vmlinux(&fake), Err(VmlinuzError::NotKernel(_))));
        assert!(builtin_certs(&[0u8; 100]).is_err());
        // Cut anywhere inside the setup header's fields: an error, never a panic (518 and
        // 519 bytes end inside the version field after "HdrS").
        for n in 0x200..0x250 {
            assert!(
                matches!(vmlinux(&fake[..n]), Err(VmlinuzError::NotKernel(_))),
                "{n} bytes"
            );
        }
        assert!(exported_crcs(b"\x7fELF\x02\x01\x01").is_err());
    }

    /// A payload that decompresses beyond the limit stops there (a decompression bomb).
    #[test]
    fn payload_bombs_stop_at_the_limit() {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &vec![0u8; 1 << 20]).unwrap();
        let gz = e.finish().unwrap();
        let mut img = vec![0u8; 0x400];
        img[0x1f1] = 1; // one setup sector: the payload offset counts from 0x400
        img[0x202..0x206].copy_from_slice(b"HdrS");
        img[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        img[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes());
        img[0x24c..0x250].copy_from_slice(&u32::try_from(gz.len()).unwrap().to_le_bytes());
        img.extend_from_slice(&gz);
        assert_eq!(
            vmlinux_limited(&img, 1000),
            Err(VmlinuzError::Decompress(
                compress::DecompressError::TooLarge {
                    format: "gzip",
                    limit: 1000
                }
            ))
        );
        // Within the limit it decompresses (and is then refused: zeros are no ELF).
        assert!(matches!(
            vmlinux_limited(&img, 2 << 20),
            Err(VmlinuzError::NotKernel(_))
        ));
    }

    #[test]
    fn facts_without_certificates_give_builtin_certs_error() {
        let facts = KernelFacts {
            release: "6.1.0-x".into(),
            vermagic: None,
            exports: Vec::new(),
            certs: Vec::new(),
        };
        let scanned = builtin_certs(&[0u8; 64])
            .map(|_| ())
            .map_err(|e| e.to_string());
        let kept = facts.builtin_certs().map(|_| ()).map_err(|e| e.to_string());
        assert!(kept.is_err());
        assert_eq!(kept, scanned);
        let facts = KernelFacts {
            certs: vec![vec![0x30, 0]],
            ..facts
        };
        assert_eq!(facts.builtin_certs().ok(), Some(&[vec![0x30u8, 0]][..]));
    }

    #[test]
    fn banner_and_vermagic_strings() {
        let img = b"xx\0Linux version 6.1.0-57-amd64 (debian-kernel@lists) #1 SMP\0junk\x006.1.0-57-amd64 SMP preempt mod_unload modversions \0";
        assert_eq!(release(img).as_deref(), Some("6.1.0-57-amd64"));
        assert_eq!(
            vermagic(img, "6.1.0-57-amd64").as_deref(),
            Some("6.1.0-57-amd64 SMP preempt mod_unload modversions ")
        );
        assert_eq!(vermagic(img, "6.12.0"), None);
    }
}

/// Everything the module gate takes from a kernel image.
#[derive(Debug, Clone)]
pub struct KernelFacts {
    pub release: String,
    pub vermagic: Option<String>,
    pub exports: Vec<ExportedCrc>,
    /// DER of the built-in trusted certificates (empty if none were found).
    pub certs: Vec<Vec<u8>>,
}

impl KernelFacts {
    /// Reads a bzImage or vmlinux.
    pub fn from_image(image: &[u8]) -> Result<KernelFacts, VmlinuzError> {
        let elf = vmlinux(image)?;
        let release =
            release(&elf).ok_or_else(|| VmlinuzError::Missing("no Linux version banner".into()))?;
        Ok(KernelFacts {
            vermagic: vermagic(&elf, &release),
            exports: exported_crcs(&elf)?,
            certs: builtin_certs(&elf).unwrap_or_default(),
            release,
        })
    }

    /// The built-in certificates, or [`builtin_certs`]'s error where the image has none
    /// (what a caller that needs them reports, without decoding the image again).
    pub fn builtin_certs(&self) -> Result<&[Vec<u8>], VmlinuzError> {
        if self.certs.is_empty() {
            return Err(no_builtin_certs());
        }
        Ok(&self.certs)
    }

    /// The exports as a symbol table.
    pub fn symvers(&self) -> crate::formats::kmod::symvers::Symvers {
        let mut s = crate::formats::kmod::symvers::Symvers::default();
        for e in &self.exports {
            s.insert_ns(&e.symbol, e.crc, "vmlinux", e.gpl, &e.namespace);
        }
        s
    }
}

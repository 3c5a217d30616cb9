//! Reading a kernel module file: decompression (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`) and
//! the ELF parts the gate looks at: `.modinfo` (`name`, `vermagic`, `depends`, `softdep`,
//! `license`, `intree`, `alias`), `__versions`, the undefined symbols of the symbol table
//! (what the kernel resolves at load time) and the module's own `__crc_*` exports.
//! Pure functions over bytes; every failure says what was wrong.
//!
//! A compressed module must be exactly one stream: content after the first xz stream,
//! zstd frame or gzip member is refused (see [`crate::formats::compress`]).

use goblin::elf::Elf;

/// Why a module file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModFileError {
    #[error("cannot decompress {format}: {why}")]
    Decompress { format: &'static str, why: String },
    #[error("decompressed size exceeds {limit} bytes")]
    TooLarge { limit: usize },
    #[error(transparent)]
    Trailing(crate::formats::compress::DecompressError),
    #[error("not an ELF file")]
    NotElf,
    #[error("malformed ELF: {0}")]
    BadElf(String),
    #[error("not a kernel module: {0}")]
    NotModule(String),
}

/// Compression of a module file, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Xz,
    Zstd,
    Gzip,
}

impl Compression {
    /// From the file name's suffix.
    pub fn from_name(name: &str) -> Compression {
        if name.ends_with(".xz") {
            Compression::Xz
        } else if name.ends_with(".zst") {
            Compression::Zstd
        } else if name.ends_with(".gz") {
            Compression::Gzip
        } else {
            Compression::None
        }
    }

    /// The name `/sys/module/compression` uses for it.
    pub fn sysfs_name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }
}

/// Largest decompressed module image we accept (the biggest real modules are ~100 MB); the
/// module file read from disk, compressed or not, has its own limit
/// (`gate::batch::MODULE_FILE_MAX`).
pub const MODULE_IMAGE_MAX: usize = 512 << 20;

/// Decompresses a module file's bytes as its name says.
pub fn decompress(bytes: &[u8], c: Compression) -> Result<Vec<u8>, ModFileError> {
    use crate::formats::compress;
    let r = match c {
        Compression::None => return Ok(bytes.to_vec()),
        Compression::Xz => compress::xz(bytes, MODULE_IMAGE_MAX),
        Compression::Zstd => compress::zstd(bytes, MODULE_IMAGE_MAX),
        Compression::Gzip => compress::gzip(bytes, MODULE_IMAGE_MAX),
    };
    r.map_err(|e| match e {
        compress::DecompressError::TooLarge { limit, .. } => ModFileError::TooLarge { limit },
        compress::DecompressError::Corrupt { format, why } => {
            ModFileError::Decompress { format, why }
        }
        e @ compress::DecompressError::Trailing { .. } => ModFileError::Trailing(e),
    })
}

/// `.modinfo` as `key=value` pairs, in file order (keys repeat: `alias`, `depends` ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModInfo {
    pub pairs: Vec<(String, String)>,
}

impl ModInfo {
    /// Parses the raw section: NUL-separated `key=value` strings.
    pub fn parse(section: &[u8]) -> ModInfo {
        let pairs = section
            .split(|&b| b == 0)
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                let s = String::from_utf8_lossy(s);
                s.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        ModInfo { pairs }
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `depends=`, split on commas, normalised.
    pub fn depends(&self) -> Vec<String> {
        self.all("depends")
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(crate::formats::kmod::normalize_name)
            .collect()
    }
}

/// A symbol and its CRC: an export of a module (`__crc_<symbol>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionEntry {
    pub symbol: String,
    pub crc: u32,
}

/// One `__versions` record (`struct modversion_info`): a symbol this module imports and
/// the CRC it was built against, as the kernel reads it: an `unsigned long`, compared
/// with the exporter's 32-bit CRC without truncation (so high bits must be zero).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModVersion {
    pub symbol: String,
    pub crc: u64,
}

/// An undefined symbol of the module's symbol table: the kernel resolves each one at
/// load time (`simplify_symbols`), and checks its `__versions` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undefined {
    pub name: String,
    /// `STB_WEAK`: an unresolved weak symbol is no error.
    pub weak: bool,
}

/// What the gate needs from a module's ELF.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleElf {
    pub modinfo: ModInfo,
    /// `__versions`: imported symbols with CRCs (empty without CONFIG_MODVERSIONS), in
    /// file order (the kernel takes the first record of a name).
    pub versions: Vec<ModVersion>,
    /// True when the module has a `__versions` section at all.
    pub has_versions: bool,
    /// The undefined symbols of the first `SHT_SYMTAB` section, in table order.
    pub undefined: Vec<Undefined>,
    /// `e_machine` of the ELF header.
    pub machine: u16,
    /// How many `.modinfo` sections the file has (`modinfo` is the first one's).
    pub modinfo_sections: usize,
    /// Each `.gnu.linkonce.this_module` section: `(sh_type, sh_flags, sh_size)`.
    pub this_module: Vec<(u32, u64, u64)>,
}

impl ModuleElf {
    /// The module's `__versions` record for `symbol`: the first one, as the kernel's
    /// `check_version` finds it.
    pub fn version_of(&self, symbol: &str) -> Option<&ModVersion> {
        self.versions.iter().find(|v| v.symbol == symbol)
    }
}

/// Size of one `struct modversion_info` on 64-bit kernels: `unsigned long crc; char name[56]`.
pub const MODVERSION_INFO_SIZE: usize = 64;

/// The section headers of a 64-bit little-endian relocatable ELF, with their names.
fn sections(bytes: &[u8]) -> Result<Vec<(String, goblin::elf::SectionHeader)>, ModFileError> {
    use goblin::elf::header::{self, Header};
    if !bytes.starts_with(b"\x7fELF") {
        return Err(ModFileError::NotElf);
    }
    let h = Elf::parse_header(bytes).map_err(|e| ModFileError::BadElf(e.to_string()))?;
    if h.e_ident[header::EI_CLASS] != header::ELFCLASS64 {
        return Err(ModFileError::NotModule("32-bit ELF".into()));
    }
    if h.e_ident[header::EI_DATA] != header::ELFDATA2LSB {
        return Err(ModFileError::NotModule("big-endian ELF".into()));
    }
    if h.e_type != header::ET_REL {
        return Err(ModFileError::NotModule(format!(
            "ELF type {} is not a relocatable object",
            h.e_type
        )));
    }
    let _: &Header = &h;
    let count = h.e_shnum as usize;
    let shoff = usize::try_from(h.e_shoff).map_err(|_| bad("section table offset"))?;
    let end = shoff
        .checked_add(
            count
                .checked_mul(h.e_shentsize as usize)
                .ok_or_else(|| bad("section table size"))?,
        )
        .ok_or_else(|| bad("section table offset"))?;
    if count == 0 || h.e_shentsize as usize != 64 || end > bytes.len() {
        return Err(bad("section header table out of range"));
    }
    let ctx = goblin::container::Ctx::new(
        goblin::container::Container::Big,
        goblin::container::Endian::Little,
    );
    let shdrs = goblin::elf::SectionHeader::parse(bytes, shoff, count, ctx)
        .map_err(|e| ModFileError::BadElf(e.to_string()))?;
    let strtab = shdrs
        .get(h.e_shstrndx as usize)
        .ok_or_else(|| bad("no section name table"))?;
    let names = section_data(bytes, strtab, ".shstrtab")?;
    Ok(shdrs
        .into_iter()
        .map(|sh| {
            let n = names
                .get(sh.sh_name..)
                .map(|r| String::from_utf8_lossy(until_nul(r)).into_owned())
                .unwrap_or_default();
            (n, sh)
        })
        .collect())
}

fn section_data<'a>(
    bytes: &'a [u8],
    sh: &goblin::elf::SectionHeader,
    name: &str,
) -> Result<&'a [u8], ModFileError> {
    if sh.sh_type == goblin::elf::section_header::SHT_NOBITS {
        return Ok(&[]);
    }
    let start = usize::try_from(sh.sh_offset).map_err(|_| bad("section offset"))?;
    let len = usize::try_from(sh.sh_size).map_err(|_| bad("section size"))?;
    start
        .checked_add(len)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| bad(&format!("section {name} lies beyond the end of the file")))
}

/// `b` up to its first NUL (all of it without one).
fn until_nul(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// Size of one `Elf64_Sym`.
const SYM_SIZE: usize = 24;

/// Parses what the gate needs from a (decompressed) module ELF: `.modinfo`,
/// `__versions` and the undefined symbols. Only the section headers, these sections and
/// the symbol table are read, so this is cheap for big modules.
pub fn parse_elf(bytes: &[u8]) -> Result<ModuleElf, ModFileError> {
    let mut out = ModuleElf::default();
    let secs = sections(bytes)?;
    out.machine = crate::util::le::u16_le(bytes, 0x12).unwrap_or_default();
    for (name, sh) in &secs {
        if name == ".gnu.linkonce.this_module" {
            out.this_module.push((sh.sh_type, sh.sh_flags, sh.sh_size));
        }
        if name != ".modinfo" && name != "__versions" {
            continue;
        }
        let data = section_data(bytes, sh, name)?;
        if name == ".modinfo" {
            // 6.1's find_sec takes the first one (6.12 refuses a second: the gate).
            out.modinfo_sections += 1;
            if out.modinfo_sections == 1 {
                out.modinfo = ModInfo::parse(data);
            }
        } else {
            out.has_versions = true;
            if data.len() % MODVERSION_INFO_SIZE != 0 {
                return Err(bad(&format!(
                    "__versions size {} is not a multiple of 64",
                    data.len()
                )));
            }
            for rec in data.chunks_exact(MODVERSION_INFO_SIZE) {
                let (crc, name) = rec.split_at(8);
                out.versions.push(ModVersion {
                    symbol: String::from_utf8_lossy(until_nul(name)).into_owned(),
                    crc: crate::util::le::u64_le(crc, 0).unwrap_or_default(),
                });
            }
        }
    }
    if out.modinfo_sections == 0 {
        return Err(ModFileError::NotModule("no .modinfo section".into()));
    }
    out.undefined = undefined_symbols(bytes, &secs)?;
    Ok(out)
}

/// The undefined symbols of the first `SHT_SYMTAB` section, as the kernel's loader finds
/// the table (`setup_load_info`): a module without one is refused ("module has no
/// symbols (stripped?)").
fn undefined_symbols(
    bytes: &[u8],
    secs: &[(String, goblin::elf::SectionHeader)],
) -> Result<Vec<Undefined>, ModFileError> {
    use crate::util::le::{u16_le, u32_le};
    use goblin::elf::section_header::SHT_SYMTAB;
    use goblin::elf::sym::STB_WEAK;
    let Some((name, symtab)) = secs.iter().find(|(_, s)| s.sh_type == SHT_SYMTAB) else {
        return Err(ModFileError::NotModule(
            "no symbol table (stripped?)".into(),
        ));
    };
    let (strname, strtab) = secs
        .get(symtab.sh_link as usize)
        .ok_or_else(|| bad(&format!("{name}: its string table does not exist")))?;
    let syms = section_data(bytes, symtab, name)?;
    let names = section_data(bytes, strtab, strname)?;
    let mut out = Vec::new();
    // Entry 0 is the null symbol; the kernel starts at 1.
    for (i, rec) in syms.chunks_exact(SYM_SIZE).enumerate().skip(1) {
        if u16_le(rec, 6).map(u32::from) != Some(goblin::elf::section_header::SHN_UNDEF) {
            continue;
        }
        let off = u32_le(rec, 0).unwrap_or_default() as usize;
        let n = names
            .get(off..)
            .ok_or_else(|| bad(&format!("symbol {i}: name outside {strname}")))?;
        let info = rec.get(4).copied().unwrap_or_default();
        out.push(Undefined {
            name: String::from_utf8_lossy(until_nul(n)).into_owned(),
            weak: info >> 4 == STB_WEAK,
        });
    }
    Ok(out)
}

/// The module's own exported symbol CRCs: its `__crc_<symbol>` symbols, either absolute
/// (value = CRC) or pointing into `__kcrctab` / `__kcrctab_gpl` (the CRC is stored there).
/// Reads `.symtab` directly (24-byte `Elf64_Sym` records), so it is cheap.
pub fn exports(bytes: &[u8]) -> Result<Vec<VersionEntry>, ModFileError> {
    let secs = sections(bytes)?;
    let Some((_, symtab)) = secs.iter().find(|(n, _)| n == ".symtab") else {
        return Ok(Vec::new());
    };
    let strtab = secs
        .get(symtab.sh_link as usize)
        .ok_or_else(|| bad(".symtab has no string table"))?;
    let syms = section_data(bytes, symtab, ".symtab")?;
    let names = section_data(bytes, &strtab.1, ".strtab")?;
    let mut out = Vec::new();
    use crate::util::le::{u16_le, u32_le, u64_le};
    for rec in syms.chunks_exact(SYM_SIZE) {
        let name_off = u32_le(rec, 0).unwrap_or_default() as usize;
        let Some(name) = names.get(name_off..) else {
            continue;
        };
        let Some(sym) = name.strip_prefix(b"__crc_") else {
            continue;
        };
        let symbol = String::from_utf8_lossy(until_nul(sym)).into_owned();
        let shndx = u32::from(u16_le(rec, 6).unwrap_or_default());
        let value = u64_le(rec, 8).unwrap_or_default();
        let crc = if shndx == goblin::elf::section_header::SHN_ABS {
            // The 32-bit CRC is the low half of the symbol's value (what the kernel reads).
            let [a, b, c, d, ..] = value.to_le_bytes();
            u32::from_le_bytes([a, b, c, d])
        } else {
            let (_, sh) = secs
                .get(shndx as usize)
                .ok_or_else(|| bad(&format!("__crc_{symbol}: bad section index")))?;
            let data = section_data(bytes, sh, "__kcrctab")?;
            usize::try_from(value)
                .ok()
                .and_then(|o| u32_le(data, o))
                .ok_or_else(|| bad(&format!("__crc_{symbol}: outside its section")))?
        };
        out.push(VersionEntry { symbol, crc });
    }
    Ok(out)
}

fn bad(what: &str) -> ModFileError {
    ModFileError::BadElf(what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modinfo_pairs() {
        let mi = ModInfo::parse(b"license=GPL\0depends=jbd2,crc16,mbcache\0\0alias=fs-ext4\0alias=ext3\0name=ext4\0junk\0");
        assert_eq!(mi.get("license"), Some("GPL"));
        assert_eq!(mi.depends(), vec!["jbd2", "crc16", "mbcache"]);
        assert_eq!(mi.all("alias").collect::<Vec<_>>(), vec!["fs-ext4", "ext3"]);
        assert_eq!(
            ModInfo::parse(b"depends=\0").depends(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn garbage_is_refused_cleanly() {
        assert_eq!(parse_elf(b""), Err(ModFileError::NotElf));
        assert_eq!(parse_elf(b"MZ\x90\0"), Err(ModFileError::NotElf));
        assert!(matches!(
            parse_elf(b"\x7fELF\x02\x01\x01"),
            Err(ModFileError::BadElf(_))
        ));
        let mut junk = b"\x7fELF\x02\x01\x01\0".to_vec();
        junk.extend(std::iter::repeat_n(0xff, 200));
        assert!(parse_elf(&junk).is_err());
        assert!(matches!(
            decompress(b"not xz", Compression::Xz),
            Err(ModFileError::Decompress { format: "xz", .. })
        ));
        assert!(decompress(b"not zstd", Compression::Zstd).is_err());
        assert!(decompress(b"not gz", Compression::Gzip).is_err());
    }

    #[test]
    fn compression_from_name() {
        assert_eq!(Compression::from_name("a.ko.xz"), Compression::Xz);
        assert_eq!(Compression::from_name("a.ko.zst"), Compression::Zstd);
        assert_eq!(Compression::from_name("a.ko"), Compression::None);
    }
}

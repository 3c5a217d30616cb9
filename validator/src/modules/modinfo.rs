//! Reading a kernel module file: decompression (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`) and
//! the ELF parts the gate looks at: `.modinfo` (`name`, `vermagic`, `depends`, `softdep`,
//! `license`, `intree`, `alias`), `__versions` and the module's own `__crc_*` exports.
//! Pure functions over bytes; every failure says what was wrong.

use goblin::elf::Elf;

/// Why a module file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModFileError {
    #[error("cannot decompress {format}: {why}")]
    Decompress { format: &'static str, why: String },
    #[error("decompressed size exceeds {limit} bytes")]
    TooLarge { limit: usize },
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

/// Largest decompressed module we accept (the biggest real modules are ~100 MB).
pub const MAX_MODULE: usize = 512 << 20;

/// Decompresses a module file's bytes as its name says.
pub fn decompress(bytes: &[u8], c: Compression) -> Result<Vec<u8>, ModFileError> {
    use crate::compress;
    let r = match c {
        Compression::None => return Ok(bytes.to_vec()),
        Compression::Xz => compress::xz(bytes, MAX_MODULE),
        Compression::Zstd => compress::zstd(bytes, MAX_MODULE),
        Compression::Gzip => compress::gzip(bytes, MAX_MODULE),
    };
    r.map_err(|e| match e {
        compress::DecompressError::TooLarge { limit, .. } => ModFileError::TooLarge { limit },
        compress::DecompressError::Corrupt { format, why } => {
            ModFileError::Decompress { format, why }
        }
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
            .map(crate::bom::normalize_module_name)
            .collect()
    }
}

/// One `__versions` entry: a symbol this module imports and the CRC it was built against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionEntry {
    pub symbol: String,
    pub crc: u32,
}

/// What the gate needs from a module's ELF.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleElf {
    pub modinfo: ModInfo,
    /// `__versions`: imported symbols with CRCs (empty without CONFIG_MODVERSIONS).
    pub versions: Vec<VersionEntry>,
    /// The module's own exported symbol CRCs (`__crc_<symbol>`).
    pub exports: Vec<VersionEntry>,
    /// True when the module has a `__versions` section at all.
    pub has_versions: bool,
}

/// Size of one `struct modversion_info` on 64-bit kernels: `unsigned long crc; char name[56]`.
pub const MODVERSION_INFO_SIZE: usize = 64;

/// Parses a (decompressed, signature-stripped or not) module ELF.
pub fn parse_elf(bytes: &[u8]) -> Result<ModuleElf, ModFileError> {
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return Err(ModFileError::NotElf);
    }
    let elf = Elf::parse(bytes).map_err(|e| ModFileError::BadElf(e.to_string()))?;
    if !elf.is_64 {
        return Err(ModFileError::NotModule("32-bit ELF".into()));
    }
    if elf.header.e_type != goblin::elf::header::ET_REL {
        return Err(ModFileError::NotModule(format!(
            "ELF type {} is not a relocatable object",
            elf.header.e_type
        )));
    }
    let mut out = ModuleElf::default();
    let mut found_modinfo = false;
    for sh in &elf.section_headers {
        let name = elf.shdr_strtab.get_at(sh.sh_name).unwrap_or("");
        if name != ".modinfo" && name != "__versions" {
            continue;
        }
        if sh.sh_type == goblin::elf::section_header::SHT_NOBITS {
            continue;
        }
        let start = usize::try_from(sh.sh_offset).map_err(|_| bad("section offset"))?;
        let len = usize::try_from(sh.sh_size).map_err(|_| bad("section size"))?;
        let data = start
            .checked_add(len)
            .and_then(|end| bytes.get(start..end))
            .ok_or_else(|| bad(&format!("section {name} lies beyond the end of the file")))?;
        if name == ".modinfo" {
            found_modinfo = true;
            out.modinfo = ModInfo::parse(data);
        } else {
            out.has_versions = true;
            if len % MODVERSION_INFO_SIZE != 0 {
                return Err(bad(&format!(
                    "__versions size {len} is not a multiple of 64"
                )));
            }
            for rec in data.chunks_exact(MODVERSION_INFO_SIZE) {
                let mut c = [0u8; 8];
                c.copy_from_slice(&rec[..8]);
                let name = &rec[8..];
                let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                out.versions.push(VersionEntry {
                    symbol: String::from_utf8_lossy(&name[..end]).into_owned(),
                    crc: u64::from_le_bytes(c) as u32,
                });
            }
        }
    }
    if !found_modinfo {
        return Err(ModFileError::NotModule("no .modinfo section".into()));
    }
    for sym in elf.syms.iter() {
        if sym.st_shndx != goblin::elf::section_header::SHN_ABS as usize {
            continue;
        }
        if let Some(s) = elf
            .strtab
            .get_at(sym.st_name)
            .and_then(|n| n.strip_prefix("__crc_"))
        {
            out.exports.push(VersionEntry {
                symbol: s.to_string(),
                crc: sym.st_value as u32,
            });
        }
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

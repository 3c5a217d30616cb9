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

/// `.modinfo` as `key=value` pairs, in file order (keys repeat: `alias`, `depends` ...):
/// the section's text held once (as UTF-8, invalid bytes replaced), each pair its key's
/// and value's place in it (a module has tens to hundreds of pairs; one allocation for
/// all of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModInfo {
    text: String,
    /// Per pair: the key's start, the `=`'s offset and the value's end in `text`.
    pairs: Vec<(u32, u32, u32)>,
}

impl ModInfo {
    /// Parses the raw section: NUL-separated `key=value` strings (a string without `=`
    /// is skipped).
    pub fn parse(section: &[u8]) -> ModInfo {
        let mut out = ModInfo {
            text: String::with_capacity(section.len()),
            pairs: Vec::new(),
        };
        // One pass over the whole section: a NUL is never part of a multi-byte sequence,
        // so this replaces invalid bytes exactly as string by string would.
        let all = String::from_utf8_lossy(section);
        for s in all.split('\0').filter(|s| !s.is_empty()) {
            let (Some(eq), Ok(start)) = (s.find('='), u32::try_from(out.text.len())) else {
                continue;
            };
            out.text.push_str(s);
            let (Ok(eq), Ok(end)) = (u32::try_from(eq), u32::try_from(out.text.len())) else {
                break;
            };
            out.pairs.push((start, start.saturating_add(eq), end));
        }
        out
    }

    /// Every pair, in file order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.pairs.iter().filter_map(|&(start, eq, end)| {
            let key = self.text.get(start as usize..eq as usize)?;
            let value = self.text.get(eq as usize + 1..end as usize)?;
            Some((key, value))
        })
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Every value of `key`.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs().filter(move |(k, _)| *k == key).map(|(_, v)| v)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModVersion<'a> {
    pub symbol: &'a str,
    pub crc: u64,
}

/// An undefined symbol of the module's symbol table: the kernel resolves each one at
/// load time (`simplify_symbols`), and checks its `__versions` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Undefined<'a> {
    pub name: &'a str,
    /// `STB_WEAK`: an unresolved weak symbol is no error.
    pub weak: bool,
}

/// A name's place in [`ModuleElf`]'s text: start and end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span(u32, u32);

/// What the gate needs from a module's ELF. The symbol names (of `__versions`, the
/// undefined symbols and the exports: hundreds per module) are held in one text, each
/// record its name's place in it, and read through [`ModuleElf::versions`],
/// [`ModuleElf::undefined`] and [`ModuleElf::exports`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleElf {
    pub modinfo: ModInfo,
    /// The symbol names, one after another (as UTF-8, invalid bytes replaced).
    names: String,
    versions: Vec<(Span, u64)>,
    /// True when the module has a `__versions` section at all.
    pub has_versions: bool,
    undefined: Vec<(Span, bool)>,
    /// `e_machine` of the ELF header.
    pub machine: u16,
    /// How many `.modinfo` sections the file has (`modinfo` is the first one's).
    pub modinfo_sections: usize,
    /// Each `.gnu.linkonce.this_module` section: `(sh_type, sh_flags, sh_size)`.
    pub this_module: Vec<(u32, u64, u64)>,
    exports: Vec<(Span, u32)>,
    /// Why [`exports`] refused the module's `__crc_*` records, which leaves
    /// [`ModuleElf::exports`] empty (the kernel does not read them: it takes CRCs from
    /// `__kcrctab`; a module whose records modpost could not have written exports nothing
    /// to a batch's symbol table, and what imports from it is refused naming the symbol).
    pub exports_error: Option<ModFileError>,
}

impl ModuleElf {
    fn name(&self, s: Span) -> &str {
        self.names.get(s.0 as usize..s.1 as usize).unwrap_or("")
    }

    /// The names' text from `raw`, the bytes [`push_name`] gathered: checked as UTF-8 in
    /// one pass, and only when that fails taken name by name, invalid bytes replaced
    /// (the records' places then move with the replacements).
    fn set_names(&mut self, raw: Vec<u8>) {
        let raw = match String::from_utf8(raw) {
            Ok(text) => {
                self.names = text;
                return;
            }
            Err(e) => e.into_bytes(),
        };
        let mut text = String::with_capacity(raw.len());
        let spans = (self.versions.iter_mut().map(|(s, _)| s))
            .chain(self.undefined.iter_mut().map(|(s, _)| s))
            .chain(self.exports.iter_mut().map(|(s, _)| s));
        for span in spans {
            let bytes = raw
                .get(span.0 as usize..span.1 as usize)
                .unwrap_or_default();
            let start = text.len();
            text.push_str(&String::from_utf8_lossy(bytes));
            *span = Span(at(start), at(text.len()));
        }
        self.names = text;
    }

    /// `__versions`: imported symbols with CRCs (none without CONFIG_MODVERSIONS), in
    /// file order (the kernel takes the first record of a name).
    pub fn versions(&self) -> impl ExactSizeIterator<Item = ModVersion<'_>> + '_ {
        self.versions.iter().map(|&(s, crc)| ModVersion {
            symbol: self.name(s),
            crc,
        })
    }

    /// The undefined symbols of the first `SHT_SYMTAB` section, in table order.
    pub fn undefined(&self) -> impl ExactSizeIterator<Item = Undefined<'_>> + '_ {
        self.undefined.iter().map(|&(s, weak)| Undefined {
            name: self.name(s),
            weak,
        })
    }

    /// The module's own `__crc_*` exports (symbol, CRC), as [`exports`] reads them (in
    /// the same pass over the symbol table as the undefined symbols).
    pub fn exports(&self) -> impl ExactSizeIterator<Item = (&str, u32)> + '_ {
        self.exports.iter().map(|&(s, crc)| (self.name(s), crc))
    }

    /// The module's `__versions` record for `symbol`: the first one, as the kernel's
    /// `check_version` finds it.
    pub fn version_of(&self, symbol: &str) -> Option<ModVersion<'_>> {
        self.versions().find(|v| v.symbol == symbol)
    }
}

#[cfg(test)]
impl ModuleElf {
    /// For tests elsewhere in the crate: adds `__versions` records and (non-weak)
    /// undefined symbols, as the parser would.
    pub(crate) fn push_test_symbols(&mut self, versions: &[(&[u8], u64)], undefined: &[&[u8]]) {
        let mut raw = std::mem::take(&mut self.names).into_bytes();
        for (name, crc) in versions {
            let s = push_name(&mut raw, name);
            self.versions.push((s, *crc));
        }
        for name in undefined {
            let s = push_name(&mut raw, name);
            self.undefined.push((s, false));
        }
        self.set_names(raw);
    }
}

/// Size of one `struct modversion_info` on 64-bit kernels: `unsigned long crc; char name[56]`.
pub const MODVERSION_INFO_SIZE: usize = 64;

/// A section's name (as bytes, up to its NUL) and header.
type Section<'a> = (&'a [u8], goblin::elf::SectionHeader);

/// The section headers of a 64-bit little-endian relocatable ELF, with their names.
fn sections(bytes: &[u8]) -> Result<Vec<Section<'_>>, ModFileError> {
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
    let names = section_data(bytes, strtab, b".shstrtab")?;
    Ok(shdrs
        .into_iter()
        .map(|sh| (names.get(sh.sh_name..).map_or(&[][..], until_nul), sh))
        .collect())
}

fn section_data<'a>(
    bytes: &'a [u8],
    sh: &goblin::elf::SectionHeader,
    name: &[u8],
) -> Result<&'a [u8], ModFileError> {
    if sh.sh_type == goblin::elf::section_header::SHT_NOBITS {
        return Ok(&[]);
    }
    let start = usize::try_from(sh.sh_offset).map_err(|_| bad("section offset"))?;
    let len = usize::try_from(sh.sh_size).map_err(|_| bad("section size"))?;
    start
        .checked_add(len)
        .and_then(|end| bytes.get(start..end))
        .ok_or_else(|| {
            bad(&format!(
                "section {} lies beyond the end of the file",
                String::from_utf8_lossy(name)
            ))
        })
}

/// `b` up to its first NUL (all of it without one).
fn until_nul(b: &[u8]) -> &[u8] {
    b.iter()
        .position(|&c| c == 0)
        .map_or(b, |n| b.get(..n).unwrap_or(b))
}

/// Adds `bytes` (up to a NUL) to the names' bytes `raw` ([`ModuleElf::set_names`] makes
/// them text).
fn push_name(raw: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = raw.len();
    raw.extend_from_slice(until_nul(bytes));
    Span(at(start), at(raw.len()))
}

/// An offset in the names as a [`Span`] holds it (past 4 GiB it saturates, and such a
/// name reads as empty).
fn at(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Size of one `Elf64_Sym`.
const SYM_SIZE: usize = 24;

/// Parses what the gate needs from a (decompressed) module ELF: `.modinfo`,
/// `__versions`, the undefined symbols and the module's own exports. Only the section
/// headers, these sections and the symbol table are read, in one pass each, so this is
/// cheap for big modules.
pub fn parse_elf(bytes: &[u8]) -> Result<ModuleElf, ModFileError> {
    let mut out = ModuleElf::default();
    let mut raw = Vec::with_capacity(4096);
    let secs = sections(bytes)?;
    out.machine = crate::util::le::u16_le(bytes, 0x12).unwrap_or_default();
    for (name, sh) in &secs {
        let name = *name;
        if name == b".gnu.linkonce.this_module" {
            out.this_module.push((sh.sh_type, sh.sh_flags, sh.sh_size));
        }
        if name != b".modinfo" && name != b"__versions" {
            continue;
        }
        let data = section_data(bytes, sh, name)?;
        if name == b".modinfo" {
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
            out.versions.reserve(data.len() / MODVERSION_INFO_SIZE);
            for rec in data.chunks_exact(MODVERSION_INFO_SIZE) {
                let (crc, name) = rec.split_at(8);
                let symbol = push_name(&mut raw, name);
                let crc = crate::util::le::u64_le(crc, 0).unwrap_or_default();
                out.versions.push((symbol, crc));
            }
        }
    }
    if out.modinfo_sections == 0 {
        return Err(ModFileError::NotModule("no .modinfo section".into()));
    }
    // The kernel's loader takes the first `SHT_SYMTAB` section: a module without one is
    // refused ("module has no symbols (stripped?)"); modpost's exports are `.symtab`'s,
    // the same section in any module a linker made.
    let Some(first) = secs
        .iter()
        .position(|(_, s)| s.sh_type == goblin::elf::section_header::SHT_SYMTAB)
    else {
        return Err(ModFileError::NotModule(
            "no symbol table (stripped?)".into(),
        ));
    };
    let same = secs.get(first).is_some_and(|(n, _)| *n == b".symtab");
    // The exports wait until the walk ends: a bad `__crc_` record leaves none.
    let mut exports = Vec::new();
    let found = walk_symtab(bytes, &secs, first, same, &mut |sym| match sym {
        Symbol::Undefined(name, weak) => {
            let s = push_name(&mut raw, name);
            out.undefined.push((s, weak));
        }
        Symbol::Crc(name, crc) => exports.push((name, crc)),
    })?;
    let crcs = if same {
        found
    } else {
        exports_of(bytes, &secs, &mut |name, crc| exports.push((name, crc)))
    };
    match crcs {
        Ok(()) => {
            for (name, crc) in exports {
                let s = push_name(&mut raw, name);
                out.exports.push((s, crc));
            }
        }
        Err(e) => out.exports_error = Some(e),
    }
    out.set_names(raw);
    Ok(out)
}

/// A symbol [`walk_symtab`] hands on: an undefined one (name, weak) or a `__crc_` export
/// (the symbol's name without the prefix, its CRC).
enum Symbol<'a> {
    Undefined(&'a [u8], bool),
    Crc(&'a [u8], u32),
}

/// One pass over the symbol table `secs[index]`, handing each symbol to `found`: the
/// undefined ones (from entry 1, as the kernel's `simplify_symbols`; a name outside the
/// string table is an error, the `Err`), then, when `crcs`, the `__crc_*` exports until a
/// bad record (the `Ok`'s error, as [`exports`] reports it).
fn walk_symtab<'a>(
    bytes: &'a [u8],
    secs: &[Section<'a>],
    index: usize,
    crcs: bool,
    found: &mut dyn FnMut(Symbol<'a>),
) -> Result<Result<(), ModFileError>, ModFileError> {
    use crate::util::le::{u16_le, u32_le, u64_le};
    use goblin::elf::section_header::{SHN_ABS, SHN_UNDEF};
    use goblin::elf::sym::STB_WEAK;
    let (name, symtab) = secs.get(index).ok_or_else(|| bad("symbol table index"))?;
    let (strname, strtab) = secs.get(symtab.sh_link as usize).ok_or_else(|| {
        bad(&format!(
            "{}: its string table does not exist",
            String::from_utf8_lossy(name)
        ))
    })?;
    let syms = section_data(bytes, symtab, name)?;
    let names = section_data(bytes, strtab, strname)?;
    let mut crc_error = None;
    for (i, rec) in syms.chunks_exact(SYM_SIZE).enumerate() {
        let off = u32_le(rec, 0).unwrap_or_default() as usize;
        let shndx = u32::from(u16_le(rec, 6).unwrap_or_default());
        let n = names.get(off..);
        // Entry 0 is the null symbol; the kernel starts at 1.
        if i > 0 && shndx == SHN_UNDEF {
            let n = n.ok_or_else(|| {
                bad(&format!(
                    "symbol {i}: name outside {}",
                    String::from_utf8_lossy(strname)
                ))
            })?;
            let info = rec.get(4).copied().unwrap_or_default();
            found(Symbol::Undefined(until_nul(n), info >> 4 == STB_WEAK));
        }
        if !crcs || crc_error.is_some() {
            continue;
        }
        let Some(sym) = n.and_then(|n| n.strip_prefix(b"__crc_")) else {
            continue;
        };
        let sym = until_nul(sym);
        let value = u64_le(rec, 8).unwrap_or_default();
        let what = || format!("__crc_{}", String::from_utf8_lossy(sym));
        let crc = if shndx == SHN_ABS {
            // The 32-bit CRC is the low half of the symbol's value (what the kernel reads).
            let [a, b, c, d, ..] = value.to_le_bytes();
            Ok(u32::from_le_bytes([a, b, c, d]))
        } else {
            secs.get(shndx as usize)
                .ok_or_else(|| bad(&format!("{}: bad section index", what())))
                .and_then(|(_, sh)| section_data(bytes, sh, b"__kcrctab"))
                .and_then(|data| {
                    usize::try_from(value)
                        .ok()
                        .and_then(|o| u32_le(data, o))
                        .ok_or_else(|| bad(&format!("{}: outside its section", what())))
                })
        };
        match crc {
            Ok(crc) => found(Symbol::Crc(sym, crc)),
            Err(e) => crc_error = Some(e),
        }
    }
    Ok(crc_error.map_or(Ok(()), Err))
}

/// The module's own exported symbol CRCs: its `__crc_<symbol>` symbols in `.symtab`,
/// either absolute (value = CRC) or pointing into `__kcrctab` / `__kcrctab_gpl` (the CRC
/// is stored there). Reads the 24-byte `Elf64_Sym` records directly, so it is cheap; a
/// module without `.symtab` exports nothing. [`parse_elf`] reads them too
/// ([`ModuleElf::exports`]).
pub fn exports(bytes: &[u8]) -> Result<Vec<VersionEntry>, ModFileError> {
    let mut out = Vec::new();
    exports_of(bytes, &sections(bytes)?, &mut |name, crc| {
        out.push(VersionEntry {
            symbol: String::from_utf8_lossy(name).into_owned(),
            crc,
        });
    })?;
    Ok(out)
}

/// The `__crc_*` exports of `.symtab`, handed to `found`.
fn exports_of<'a>(
    bytes: &'a [u8],
    secs: &[Section<'a>],
    found: &mut dyn FnMut(&'a [u8], u32),
) -> Result<(), ModFileError> {
    let Some(i) = secs.iter().position(|(n, _)| *n == b".symtab") else {
        return Ok(());
    };
    walk_symtab(bytes, secs, i, true, &mut |s| {
        if let Symbol::Crc(name, crc) = s {
            found(name, crc);
        }
    })?
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
    fn invalid_utf8_is_replaced_as_string_by_string() {
        let mi = ModInfo::parse(b"a=\xff\xfe\0b=\xe2\x82\0c=ok\0\xe2=d\0");
        assert_eq!(mi.get("a"), Some("\u{FFFD}\u{FFFD}"));
        assert_eq!(mi.get("b"), Some("\u{FFFD}"));
        assert_eq!(mi.get("c"), Some("ok"));
        assert_eq!(mi.get("\u{FFFD}"), Some("d"));
        // Symbol names: valid ones read as they are, and one invalid name does not move
        // the others (their places are rebuilt with the replacement).
        let mut elf = ModuleElf::default();
        elf.push_test_symbols(&[(b"good\0junk", 1), (b"b\xffd", 2)], &[b"after"]);
        let v: Vec<_> = elf.versions().map(|v| (v.symbol, v.crc)).collect();
        assert_eq!(v, [("good", 1), ("b\u{FFFD}d", 2)]);
        assert_eq!(elf.undefined().next().map(|u| u.name), Some("after"));
        let mut elf = ModuleElf::default();
        elf.push_test_symbols(&[(b"one", 1)], &[b"two"]);
        assert_eq!(elf.version_of("one").map(|v| v.crc), Some(1));
        assert_eq!(elf.undefined().next().map(|u| u.name), Some("two"));
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

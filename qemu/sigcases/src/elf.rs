//! Byte-level access to a 64-bit little-endian relocatable module: its section headers,
//! a section's bytes by name, the appended signature (`body || PKCS#7 ||
//! struct module_signature || "~Module signature appended~\n"`).

/// The marker every signed module ends with.
pub const MAGIC: &[u8] = b"~Module signature appended~\n";

/// A section header's fields this crate edits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub index: usize,
    /// File offset of this section's header.
    pub header: usize,
    pub name_off: u32,
    pub sh_type: u32,
    pub offset: usize,
    pub size: usize,
}

fn u16_at(d: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(d[o..o + 2].try_into().unwrap())
}
fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().unwrap())
}
fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().unwrap())
}
fn usize_at(d: &[u8], o: usize) -> usize {
    usize::try_from(u64_at(d, o)).expect("an ELF offset or size fits usize")
}

/// Every section header of `elf`.
pub fn sections(elf: &[u8]) -> Vec<Section> {
    let shoff = usize_at(elf, 0x28);
    let shnum = u16_at(elf, 0x3c) as usize;
    (0..shnum)
        .map(|i| {
            let h = shoff + i * 64;
            Section {
                index: i,
                header: h,
                name_off: u32_at(elf, h),
                sh_type: u32_at(elf, h + 4),
                offset: usize_at(elf, h + 0x18),
                size: usize_at(elf, h + 0x20),
            }
        })
        .collect()
}

/// The name of section `s`.
pub fn name_of(elf: &[u8], s: &Section) -> String {
    let shstrndx = u16_at(elf, 0x3e) as usize;
    let strtab = sections(elf)[shstrndx];
    let start = strtab.offset + s.name_off as usize;
    let end = elf[start..].iter().position(|b| *b == 0).unwrap() + start;
    String::from_utf8_lossy(&elf[start..end]).into_owned()
}

/// The first section named `name`.
pub fn section(elf: &[u8], name: &str) -> Section {
    sections(elf)
        .into_iter()
        .find(|s| name_of(elf, s) == name)
        .unwrap_or_else(|| panic!("no section {name}"))
}

/// The module without its signature (the whole file when unsigned).
pub fn body(module: &[u8]) -> Vec<u8> {
    match module.strip_suffix(MAGIC) {
        None => module.to_vec(),
        Some(rest) => {
            let n = rest.len();
            let sig_len = u32::from_be_bytes(rest[n - 4..].try_into().unwrap()) as usize;
            rest[..n - 12 - sig_len].to_vec()
        }
    }
}

/// The PKCS#7 of a signed module.
pub fn pkcs7(module: &[u8]) -> Vec<u8> {
    let rest = module.strip_suffix(MAGIC).expect("signed module");
    let n = rest.len();
    let sig_len = u32::from_be_bytes(rest[n - 4..].try_into().unwrap()) as usize;
    rest[n - 12 - sig_len..n - 12].to_vec()
}

/// `struct module_signature` for a PKCS#7 of `sig_len` bytes, as sign-file writes it.
pub fn trailer(sig_len: u32) -> [u8; 12] {
    let mut t = [0u8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    t[8..].copy_from_slice(&sig_len.to_be_bytes());
    t
}

/// `body || pkcs7 || trailer || marker`.
pub fn append_signature(body: &[u8], pkcs7: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(pkcs7);
    v.extend_from_slice(&trailer(
        u32::try_from(pkcs7.len()).expect("a PKCS#7 blob under 4 GiB"),
    ));
    v.extend_from_slice(MAGIC);
    v
}

/// The offset of the 12-byte trailer in a signed module.
pub fn trailer_offset(module: &[u8]) -> usize {
    module.len() - MAGIC.len() - 12
}

/// Replaces the first occurrence of `from` inside section `sec` with `to` (same length).
pub fn patch_in_section(elf: &mut [u8], sec: &str, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let s = section(elf, sec);
    let data = &mut elf[s.offset..s.offset + s.size];
    let at = data
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{} not in {sec}", String::from_utf8_lossy(from)));
    data[at..at + to.len()].copy_from_slice(to);
}

/// Renames section `from` to `to` (same length) in `.shstrtab`, where the name starts at
/// the header's own name offset (a shared suffix is left alone).
pub fn rename_section(elf: &mut [u8], from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let s = section(elf, from);
    let shstrndx = u16_at(elf, 0x3e) as usize;
    let strtab = sections(elf)[shstrndx];
    let at = strtab.offset + s.name_off as usize;
    elf[at..at + to.len()].copy_from_slice(to.as_bytes());
}

/// The 64-byte `__versions` records: (CRC, name).
pub fn versions(elf: &[u8]) -> Vec<(u64, String)> {
    let s = section(elf, "__versions");
    elf[s.offset..s.offset + s.size]
        .chunks(64)
        .map(|r| {
            let crc = u64::from_le_bytes(r[..8].try_into().unwrap());
            let end = r[8..].iter().position(|b| *b == 0).unwrap_or(56) + 8;
            (crc, String::from_utf8_lossy(&r[8..end]).into_owned())
        })
        .collect()
}

/// Offset of the `__versions` record for `symbol`.
pub fn version_record(elf: &[u8], symbol: &str) -> usize {
    let s = section(elf, "__versions");
    versions(elf)
        .iter()
        .position(|(_, n)| n == symbol)
        .map(|i| s.offset + i * 64)
        .unwrap_or_else(|| panic!("no __versions record for {symbol}"))
}

/// A 64-byte `__versions` record.
pub fn record(crc: u64, name: &str) -> [u8; 64] {
    let mut r = [0u8; 64];
    r[..8].copy_from_slice(&crc.to_le_bytes());
    r[8..8 + name.len()].copy_from_slice(name.as_bytes());
    r
}

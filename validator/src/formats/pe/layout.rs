//! The memory layout of a PE image, signed or not ([`layout`]): what a builder of a
//! Unified Kernel Image needs to place new sections after the stub's, and what a reader of
//! one needs to find a section's bytes as the loader maps them. Checked as
//! [`super::parse`] checks the headers.

use super::{
    coff_header, malformed, optional_field, optional_header, section_name, sections, usize_of,
    PeError, Section,
};
use crate::util::le::u32_le as le32;

/// What an image's headers say of its memory layout, signed or not: what a builder of a
/// Unified Kernel Image needs to place new sections after the stub's, and what a reader
/// of one needs to find them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `ImageBase`, the address the linker's virtual addresses are relative to.
    pub image_base: u64,
    /// `SectionAlignment`: every section's virtual address is a multiple of it.
    pub section_alignment: u32,
    /// `SizeOfImage`: the image's size in memory.
    pub size_of_image: u32,
    /// Every section with raw data, in table order.
    pub sections: Vec<Section>,
    /// The end of the highest section with raw data in memory (virtual address plus
    /// virtual size; `SizeOfImage` covers the others).
    pub memory_end: u64,
}

impl Layout {
    /// The first section named `name`, as the image's loader sees it in memory: its
    /// first `VirtualSize` bytes (`Ok(None)`: no such section). A section whose
    /// `VirtualSize` is larger than its raw data (zeros in memory past it) is refused
    /// rather than guessed at: no image this project builds or reads has one.
    pub fn section_bytes(&self, image: &[u8], name: &str) -> Result<Option<Vec<u8>>, PeError> {
        let Some(s) = self.sections.iter().find(|s| section_name(&s.name) == name) else {
            return Ok(None);
        };
        let raw = image
            .get(s.raw.clone())
            .ok_or_else(|| malformed(format!("section {name}: outside the file")))?;
        raw.get(..usize_of(s.virtual_size))
            .map(|b| Some(b.to_vec()))
            .ok_or_else(|| {
                malformed(format!(
                    "section {name}: VirtualSize {:#x} is larger than its {:#x} bytes of raw data",
                    s.virtual_size,
                    raw.len()
                ))
            })
    }

    /// The names of the sections in table order.
    pub fn names(&self) -> Vec<String> {
        self.sections
            .iter()
            .map(|s| section_name(&s.name))
            .collect()
    }
}

/// Reads `image`'s layout (headers and section table, checked as [`super::parse`] checks them),
/// whether or not it is signed.
pub fn layout(image: &[u8]) -> Result<Layout, PeError> {
    let (coff, opt_at) = coff_header(image)?;
    let opt = optional_header(image, opt_at)?;
    let sections = sections(image, &coff, &opt)?;
    let image_base = if opt.plus {
        le32(image, opt_at + 24)
            .zip(le32(image, opt_at + 28))
            .map(|(lo, hi)| u64::from(lo) | (u64::from(hi) << 32))
    } else {
        le32(image, opt_at + 28).map(u64::from)
    }
    .ok_or_else(|| malformed("ImageBase is past the end of the file"))?;
    let section_alignment = optional_field(image, opt_at, 32, "SectionAlignment")?;
    let size_of_image = optional_field(image, opt_at, 56, "SizeOfImage")?;
    let memory_end = sections
        .iter()
        .map(|s| u64::from(s.virtual_address) + u64::from(s.virtual_size))
        .max()
        .unwrap_or(0);
    Ok(Layout {
        image_base,
        section_alignment,
        size_of_image,
        sections,
        memory_end,
    })
}

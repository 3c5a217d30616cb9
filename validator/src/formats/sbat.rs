//! SBAT (Secure Boot Advanced Targeting), as shim applies it: an image's `.sbat` section
//! (CSV records `component,generation,vendor,...`) against the node's revocation level
//! (the `SbatLevel` variable shim keeps and mirrors as `SbatLevelRT`: a first record
//! `sbat,1,DATE`, then `component,generation` records). An image is revoked when one of
//! its components has the name of a level record and a lower generation.
//!
//! Contract: [`Level::parse`] and [`components`] parse with the `sbat` crate (Google's
//! no_std implementation of shim's SBAT.md: ASCII, fields of letters, digits and a few
//! special characters, generations positive integers, data after the first NUL ignored);
//! a section record must also have shim's six non-empty fields (`parse_sbat_section`). A
//! level or section that does not parse is an error naming which. [`judge`] is shim 16.1's
//! `verify_sbat_section`: an empty level checks nothing; an image without a `.sbat`
//! section is refused when shim loads it itself (the second stage, [`Loaded::ByShim`])
//! and passes when it is only verified through shim's protocol (the kernel GRUB starts,
//! [`Loaded::ThroughProtocol`]); otherwise each image record is compared with the first
//! level record of the same name, the first record `sbat,1` included, and the first
//! revoked component is named with both generations.
//!
//! Limits: the level shim would write at the next boot (its built-in `.sbatlevel` under
//! the `SbatPolicy` variable) is not predicted: callers pass the level in force. Stricter
//! than shim: a generation that is not a positive decimal number (shim reads it as 0)
//! does not parse.

use std::fmt;

/// How shim meets the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// Shim loads and starts it (GRUB, or shim itself in its self-check).
    ByShim,
    /// A loader asks shim to verify it (GRUB's `shim_lock` for the kernel).
    ThroughProtocol,
}

/// Why an image or a level is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbatError {
    /// The level does not parse.
    #[error("the SBAT level does not parse: {0}")]
    Level(String),
    /// The image's `.sbat` section does not parse.
    #[error("its .sbat section does not parse: {0}")]
    Section(String),
    /// No `.sbat` section, in an image shim loads itself under a level that revokes.
    #[error("it has no .sbat section, which shim requires of an image it loads")]
    Missing,
    /// A component below the level.
    #[error(
        "its SBAT component {component} is at generation {generation}, below the node's \
         level {level} (SBAT revoked)"
    )]
    Revoked {
        component: String,
        generation: u32,
        level: u32,
    },
}

/// A revocation level (the value of `SbatLevelRT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// `(component, generation)`, the `sbat` record first.
    pub records: Vec<(String, u32)>,
    /// The date of the first record, when it has one.
    pub date: Option<String>,
}

impl Level {
    /// Parses a level.
    pub fn parse(bytes: &[u8]) -> Result<Level, SbatError> {
        let l = sbat::RevocationSbat::parse(bytes).map_err(|e| SbatError::Level(e.to_string()))?;
        Ok(Level {
            records: l
                .revoked_components()
                .map(|c| (c.name.to_string(), c.generation.to_u32()))
                .collect(),
            date: l.date().map(ToString::to_string),
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r: Vec<String> = self
            .records
            .iter()
            .map(|(n, g)| format!("{n},{g}"))
            .collect();
        write!(f, "{}", r.join(" "))
    }
}

/// Shim's record width for a `.sbat` section: name, generation, vendor, package,
/// version, URL.
const SECTION_FIELDS: usize = 6;

/// The `(component, generation)` records of an image's `.sbat` section.
pub fn components(section: &[u8]) -> Result<Vec<(String, u32)>, SbatError> {
    let s = sbat::ImageSbat::parse(section).map_err(|e| SbatError::Section(e.to_string()))?;
    let text = section.split(|b| *b == 0).next().unwrap_or_default();
    for (n, line) in text
        .split(|b| *b == b'\n' || *b == b'\r')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let fields: Vec<&[u8]> = line.split(|b| *b == b',').collect();
        if fields.len() < SECTION_FIELDS || fields.iter().take(SECTION_FIELDS).any(|f| f.is_empty())
        {
            return Err(SbatError::Section(format!(
                "record {} has not shim's {SECTION_FIELDS} non-empty fields",
                n + 1
            )));
        }
    }
    Ok(s.entries()
        .map(|e| {
            (
                e.component.name.to_string(),
                e.component.generation.to_u32(),
            )
        })
        .collect())
}

/// Judges the PE image `image` by its `.sbat` section ([`judge`]); an image whose headers
/// do not parse has no section (its signature check refuses it first).
pub fn judge_pe(image: &[u8], level: &Level, loaded: Loaded) -> Result<(), SbatError> {
    let pe = crate::formats::pe::parse(image).ok();
    let section = pe.as_ref().and_then(|p| p.section(image, ".sbat"));
    judge(section, level, loaded)
}

/// Judges an image's `.sbat` section (`None`: it has none) against `level` as shim does
/// for an image it meets as `loaded` says.
pub fn judge(section: Option<&[u8]>, level: &Level, loaded: Loaded) -> Result<(), SbatError> {
    if level.records.is_empty() {
        return Ok(());
    }
    let Some(section) = section else {
        return match loaded {
            Loaded::ByShim => Err(SbatError::Missing),
            Loaded::ThroughProtocol => Ok(()),
        };
    };
    for (name, generation) in components(section)? {
        if let Some((_, min)) = level
            .records
            .iter()
            .find(|(n, _)| *n == name)
            .filter(|(_, g)| generation < *g)
        {
            return Err(SbatError::Revoked {
                component: name,
                generation,
                level: *min,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTION: &[u8] =
        b"sbat,1,SBAT Version,sbat,1,https://github.com/rhboot/shim/blob/main/SBAT.md\n\
grub,4,Free Software Foundation,grub,2.06,https://www.gnu.org/software/grub/\n\
grub.debian,5,Debian,grub2,2.06-13+deb12u1,https://tracker.debian.org/pkg/grub2\n\0\0\0";

    fn level(s: &str) -> Level {
        Level::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_component_below_the_level_is_named_with_both_generations() {
        assert_eq!(
            judge(
                Some(SECTION),
                &level("sbat,1,2024010900\ngrub,4\n"),
                Loaded::ByShim
            ),
            Ok(())
        );
        let e = judge(
            Some(SECTION),
            &level("sbat,1,2099010100\ngrub,5\n"),
            Loaded::ByShim,
        )
        .unwrap_err();
        assert_eq!(
            e,
            SbatError::Revoked {
                component: "grub".into(),
                generation: 4,
                level: 5
            }
        );
        assert_eq!(
            e.to_string(),
            "its SBAT component grub is at generation 4, below the node's level 5 (SBAT revoked)"
        );
        // A vendor's own component counts on its own.
        assert!(judge(
            Some(SECTION),
            &level("sbat,1,2099010100\ngrub.debian,6\n"),
            Loaded::ByShim
        )
        .is_err());
        // The first record is a record like the others, as shim reads it.
        assert!(matches!(
            judge(Some(SECTION), &level("sbat,2,2099010100\n"), Loaded::ByShim),
            Err(SbatError::Revoked { level: 2, .. })
        ));
        // Only the first record of a name counts.
        assert!(judge(
            Some(SECTION),
            &level("sbat,1,2099010100\ngrub,4\ngrub,9\n"),
            Loaded::ByShim
        )
        .is_ok());
        assert_eq!(
            level("sbat,1,2024010900\nshim,4\n").to_string(),
            "sbat,1 shim,4"
        );
    }

    /// A missing section: refused for what shim loads, taken through the protocol; an
    /// empty level checks nothing.
    #[test]
    fn missing_sections_and_empty_levels() {
        let l = level("sbat,1,2021030218\n");
        assert_eq!(l.date.as_deref(), Some("2021030218"));
        assert_eq!(judge(None, &l, Loaded::ByShim), Err(SbatError::Missing));
        assert_eq!(judge(None, &l, Loaded::ThroughProtocol), Ok(()));
        let empty = level("");
        assert_eq!(judge(None, &empty, Loaded::ByShim), Ok(()));
        // An all-NUL section has no record: nothing to revoke.
        assert_eq!(judge(Some(&[0; 16]), &l, Loaded::ByShim), Ok(()));
    }

    #[test]
    fn what_does_not_parse_is_named() {
        assert!(matches!(
            Level::parse(b"sbat,1\ngrub,x\n"),
            Err(SbatError::Level(_))
        ));
        let e = judge(
            Some(b"grub\n"),
            &level("sbat,1,1\ngrub,2\n"),
            Loaded::ByShim,
        )
        .unwrap_err();
        assert!(matches!(e, SbatError::Section(_)), "{e}");
        // Shim wants six non-empty fields.
        let e = judge(
            Some(b"grub,5,FSF,,2.06,u\n"),
            &level("sbat,1,1\n"),
            Loaded::ByShim,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "its .sbat section does not parse: record 1 has not shim's 6 non-empty fields"
        );
        assert!(Level::parse(&[0xff, b',', b'1']).is_err());
    }
}

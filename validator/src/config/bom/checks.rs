//! The BOM's cross-checks: every check beyond the schema's types, each error on the line
//! of the key at fault - the schema version, the measure PCR and deadline, module names
//! listed twice (`-` and `_` are the same) or in both `modules.load` and `modules.root`,
//! pins of names that are no module, `policy.trust` paths that name no file (empty,
//! NUL, `.`, `..`, a trailing `/`), the `[slot]`, `[verity]`, `[report]` and
//! `[hardware]` values the init could not boot with.
//!
//! Contract: [`check`] returns the first problem as `(line, message)`; [`super::parse`]
//! makes it a [`super::BomError`] with the file.

use super::lines::KeyLines;
use super::{
    is_module_name, Bom, ModuleName, RootHashSource, Verity, SCHEMA, VERITY_DATA_BLOCK_MAX,
};

/// Module names a list or map of the BOM holds twice (`-` and `_` are the same): the
/// first duplicate's position.
fn first_duplicate<'b>(names: impl Iterator<Item = &'b str>) -> Option<(usize, &'b str)> {
    let mut seen = std::collections::BTreeSet::new();
    names
        .enumerate()
        .find(|(_, n)| !seen.insert(crate::formats::kmod::normalize_name(n)))
}

/// Why `p` cannot name a file (a certificate the build reads), if it cannot: empty, a
/// NUL byte, or no file name at its end (`.`, `..`, a trailing `/`).
fn not_a_file_path(p: &str) -> Option<&'static str> {
    if p.is_empty() {
        Some("is an empty path")
    } else if p.contains('\0') {
        Some("holds a NUL byte")
    } else if p.ends_with('/') || std::path::Path::new(p).file_name().is_none() {
        Some("names a directory, not a file")
    } else {
        None
    }
}

/// Every check beyond the schema's types, with the line of the key at fault.
pub(super) fn check(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    check_measure(bom, lines)?;
    check_module_lists(bom, lines)?;
    check_ofed(bom, lines)?;
    check_pins_and_trust(bom, lines)?;
    check_sections(bom, lines)
}

/// The schema version, and the measure PCR and deadline.
fn check_measure(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    if bom.schema != SCHEMA {
        return Err((
            lines.of(&["schema"], None),
            format!(
                "schema {} is not supported (this build reads {SCHEMA})",
                bom.schema
            ),
        ));
    }
    if bom.measure.pcr > 23 || bom.measure.pcr == crate::formats::tpm::measurement::PHASE_PCR {
        return Err((
            lines.of(&["measure", "pcr"], None),
            format!(
                "measure.pcr {} is not usable (0-23, and not 11, which holds the boot phases)",
                bom.measure.pcr
            ),
        ));
    }
    if !(10..=60_000).contains(&bom.measure.timeout_ms) {
        return Err((
            lines.of(&["measure", "timeout_ms"], None),
            format!(
                "measure.timeout_ms {} is outside 10..60000",
                bom.measure.timeout_ms
            ),
        ));
    }
    Ok(())
}

/// Module names listed twice in a list, or in both `modules.load` and `modules.root`.
fn check_module_lists(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    for (field, names) in [
        ("modules.load", &bom.modules.load),
        ("modules.root", &bom.modules.root),
        ("policy.out_of_tree", &bom.policy.out_of_tree),
    ] {
        if let Some((i, m)) = first_duplicate(names.iter().map(ModuleName::as_str)) {
            let path: Vec<&str> = field.split('.').collect();
            return Err((
                lines.of(&path, Some(i)),
                format!("module {m} is listed twice in {field}"),
            ));
        }
    }
    // A module is loaded from the initramfs or from the root, not both.
    if let Some(m) = bom.modules.root.iter().find(|r| {
        bom.modules
            .load
            .iter()
            .any(|l| l.normalized() == r.normalized())
    }) {
        let i = bom
            .modules
            .root
            .iter()
            .position(|r| r == m)
            .unwrap_or_default();
        return Err((
            lines.of(&["modules", "root"], Some(i)),
            format!("module {m} is listed twice (in modules.load and modules.root)"),
        ));
    }
    Ok(())
}

/// MLNX_OFED's modules are out of tree: a BOM that names an OFED must allow them.
fn check_ofed(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    if bom.components.ofed.is_some() {
        for (key, names) in [("load", &bom.modules.load), ("root", &bom.modules.root)] {
            let refused = names.iter().enumerate().find(|(_, m)| {
                super::OFED_MODULES.contains(&m.normalized().as_str())
                    && !bom
                        .policy
                        .out_of_tree
                        .iter()
                        .any(|o| o.normalized() == m.normalized())
            });
            if let Some((i, m)) = refused {
                return Err((
                    lines.of(&["modules", key], Some(i)),
                    format!(
                        "components.ofed names an OFED, whose {m} is built out of tree, but \
                         policy.out_of_tree does not list {m}: the gate would refuse it"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `policy.module_sha256` keys that are no module name or pin one twice, and
/// `policy.trust` paths that name no file.
fn check_pins_and_trust(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    let pins = ["policy", "module_sha256"];
    for k in bom.policy.module_sha256.keys() {
        if !is_module_name(k) {
            return Err((
                lines.of_key(&pins, k),
                format!(
                    "policy.module_sha256 key {k:?} is not a module name (letters, digits, - and _)"
                ),
            ));
        }
    }
    if let Some((_, m)) = first_duplicate(bom.policy.module_sha256.keys().map(String::as_str)) {
        return Err((
            lines.of_key(&pins, m),
            format!(
                "module {} is pinned twice in policy.module_sha256 (- and _ are the same)",
                crate::formats::kmod::normalize_name(m)
            ),
        ));
    }
    for (i, t) in bom.policy.trust.iter().enumerate() {
        if let Some(why) = not_a_file_path(t) {
            return Err((
                lines.of(&["policy", "trust"], Some(i)),
                format!("policy.trust[{i}] {t:?} {why} (a certificate file, relative to the BOM)"),
            ));
        }
    }
    Ok(())
}

/// The `[slot]`, `[verity]`, `[report]` and `[hardware]` values the init could not boot
/// with.
fn check_sections(bom: &Bom, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    if let Some(slot) = &bom.slot {
        if let Err(why) = slot.check() {
            let line = match why.key() {
                Some(key) => lines.of(&["slot", key], None),
                None => lines.of(&["slot"], None),
            };
            return Err((line, format!("slot: {why}")));
        }
    }
    if let Some(v) = &bom.verity {
        check_verity(v, lines)?;
    }
    if let Err(why) = bom.report.check() {
        return Err((lines.of(&["report"], None), format!("report: {why}")));
    }
    if let Err(e) = super::hardware::validate(&bom.hardware) {
        return Err((lines.of(&["hardware", e.key], None), e.message));
    }
    Ok(())
}

/// The `[verity]` values the init could boot with.
fn check_verity(v: &Verity, lines: &KeyLines<'_>) -> Result<(), (usize, String)> {
    use crate::formats::verity::superblock::{self, Algorithm};
    let at = |key: &str| lines.of(&["verity", key], None);
    let algorithm = v
        .algorithm
        .as_ref()
        .and_then(|a| Algorithm::from_name(a.as_str()));
    match (&v.root_hash, v.source) {
        (None, RootHashSource::Bom) => {
            return Err((
                at("source"),
                "verity.source is \"bom\" but there is no verity.root_hash".into(),
            ))
        }
        (Some(h), _) => {
            let len = h.0.len() / 2;
            let want: Vec<usize> = match algorithm {
                Some(a) => vec![a.digest_size()],
                None => vec![20, 32, 64],
            };
            if !want.contains(&len) {
                let what = match algorithm {
                    Some(a) => format!("{} bytes for {}", a.digest_size(), a.name()),
                    None => "20 (sha1), 32 (sha256) or 64 (sha512) bytes".into(),
                };
                return Err((
                    at("root_hash"),
                    format!("verity.root_hash has {len} bytes, not {what}"),
                ));
            }
        }
        (None, RootHashSource::Signature) => {}
    }
    if let Some(s) = v.data_block_size {
        if !s.is_power_of_two() || !(512..=VERITY_DATA_BLOCK_MAX).contains(&s) {
            return Err((
                at("data_block_size"),
                format!(
                    "verity.data_block_size {s} is not a power of two from 512 to \
                     {VERITY_DATA_BLOCK_MAX} (the kernel's dm-verity takes at most the page size)"
                ),
            ));
        }
    }
    if let Some(s) = v.hash_block_size {
        if !superblock::valid_block_size(s) {
            return Err((
                at("hash_block_size"),
                format!(
                    "verity.hash_block_size {s} is not a power of two from {} to {}",
                    superblock::BLOCK_SIZES.start(),
                    superblock::BLOCK_SIZES.end()
                ),
            ));
        }
    }
    if let Some(n) = v.data_blocks {
        let bytes = n.checked_mul(u64::from(v.data_block_size.unwrap_or(512)));
        if n == 0 || bytes.is_none_or(|b| b > i64::MAX as u64) {
            return Err((
                at("data_blocks"),
                format!(
                    "verity.data_blocks {n} is not a usable count (at least 1, and the data \
                     size must fit in 63 bits; leave it out to take the superblock's)"
                ),
            ));
        }
    }
    if let Some(s) = &v.salt {
        if s.0.len() / 2 > superblock::SALT_MAX {
            return Err((
                at("salt"),
                format!(
                    "verity.salt has {} bytes; a verity superblock holds at most {}",
                    s.0.len() / 2,
                    superblock::SALT_MAX
                ),
            ));
        }
    }
    Ok(())
}

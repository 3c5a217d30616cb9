//! The partition plan of an install: the GPT `docs/INSTALL.md` describes, computed before
//! anything is written, and the `sfdisk` script that writes it.
//!
//! Partitions in order: 1 `esp`, then for A and B `root-<S>`, `root-<S>-verity`,
//! `root-<S>-sig` (numbers 2-4 and 5-7), from 1 MiB, each a whole number of MiB, the last
//! MiB of the disk left for the backup GPT. A slot not installed gets its partitions (the
//! other slot's sizes) and no content. PARTUUIDs of a root and its hash partition: the
//! halves of the root hash (the gate finds them by these); every other GUID is derived
//! from what the install writes (both root hashes), so the same inputs give the same table.

use sha2::{Digest, Sha256};
use validator::formats::verity as v;

use super::{input, InstallError, InstallSpec, SlotDir, MIB};

/// One planned partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// 1-based, as the kernel numbers it.
    pub number: u32,
    /// The PARTLABEL.
    pub name: String,
    /// Lower-case type GUID.
    pub type_guid: &'static str,
    /// Lower-case PARTUUID.
    pub uuid: String,
    /// Byte offset on the disk.
    pub start: u64,
    /// Bytes.
    pub size: u64,
    /// The slot directory's file that fills it, with its digest and length.
    pub content: Option<(std::path::PathBuf, [u8; 32], u64)>,
}

/// The whole disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Lower-case disk GUID.
    pub disk_guid: String,
    pub parts: Vec<Part>,
    /// The bytes the disk needs.
    pub total: u64,
}

impl Plan {
    /// Partition 1.
    pub fn esp(&self) -> Option<&Part> {
        self.parts.first()
    }

    /// `sfdisk`'s input for this table, in sectors of `sector` bytes.
    pub fn sfdisk_script(&self, sector: u64) -> String {
        let mut s = format!("label: gpt\nlabel-id: {}\n", self.disk_guid.to_uppercase());
        for p in &self.parts {
            s.push_str(&format!(
                "start={}, size={}, type={}, uuid={}, name=\"{}\"\n",
                p.start / sector,
                p.size / sector,
                p.type_guid.to_uppercase(),
                p.uuid.to_uppercase(),
                p.name
            ));
        }
        s
    }
}

/// A GUID derived from `what` (version 4 and variant bits set, as a random one has).
fn derived_guid(what: &str) -> String {
    let d = Sha256::digest(format!("validator install {what}"));
    let mut b: [u8; 16] = [0; 16];
    b.copy_from_slice(d.get(..16).unwrap_or(&[0; 16]));
    if let Some(x) = b.get_mut(6) {
        *x = (*x & 0x0f) | 0x40;
    }
    if let Some(x) = b.get_mut(8) {
        *x = (*x & 0x3f) | 0x80;
    }
    v::uuid_from_hash(&b).unwrap_or_default()
}

/// The largest size of one partition this plans, in MiB (16 TiB): sizes stay far from
/// overflowing a byte offset.
pub const PART_MIB_MAX: u64 = 1 << 24;

/// Whole MiB holding `bytes` (at least one).
fn mib_of(bytes: u64) -> u64 {
    bytes.div_ceil(MIB).max(1)
}

/// MiB of the hash tree (`veritysetup format`'s: superblock, then every level of
/// SHA-256 digests, 128 to a 4096-byte block) of a `data_mib` MiB data partition.
pub fn tree_mib(data_mib: u64) -> u64 {
    let mut blocks = data_mib.saturating_mul(MIB / 4096);
    let mut tree = 1; // the superblock
    while blocks > 1 {
        blocks = blocks.div_ceil(128);
        tree += blocks;
    }
    mib_of(tree.saturating_mul(4096))
}

/// Each root and hash partition's size in MiB under `spec`: given, or what the images
/// need; every size (the ESP's too) checked.
fn sizes(spec: &InstallSpec, slots: &[SlotDir]) -> Result<(u64, u64), InstallError> {
    if spec.esp_mib < 64 {
        return Err(input(
            &spec.disk,
            format!(
                "--esp-size {} MiB: FAT32 needs at least 64 MiB",
                spec.esp_mib
            ),
        ));
    }
    let mut root_img = 0;
    let mut tree_img = 0;
    for s in slots {
        root_img = root_img.max(s.len("root.img")?);
        tree_img = tree_img.max(s.len("root.verity")?);
    }
    let root_mib = spec.root_mib.unwrap_or(mib_of(root_img));
    let verity_mib = spec
        .verity_mib
        .unwrap_or(tree_mib(root_mib).max(mib_of(tree_img)));
    for (flag, mib) in [
        ("--esp-size", spec.esp_mib),
        ("--root-size", root_mib),
        ("--verity-size", verity_mib),
    ] {
        if mib == 0 || mib > PART_MIB_MAX {
            return Err(input(
                &spec.disk,
                format!("{flag} {mib} MiB: not between 1 and {PART_MIB_MAX} MiB"),
            ));
        }
    }
    for (flag, mib, need) in [
        ("--root-size", root_mib, root_img),
        ("--verity-size", verity_mib, tree_img),
    ] {
        if mib * MIB < need {
            return Err(input(
                &spec.disk,
                format!(
                    "{flag} {mib} MiB: a slot's image needs {} MiB",
                    mib_of(need)
                ),
            ));
        }
    }
    Ok((root_mib, verity_mib))
}

/// The plan for `slots` (sorted, one or two) under `spec`'s sizes.
pub fn plan(spec: &InstallSpec, slots: &[SlotDir]) -> Result<Plan, InstallError> {
    let (root_mib, verity_mib) = sizes(spec, slots)?;
    let hashes: String = slots.iter().map(|s| s.root_hash.as_str()).collect();
    let mut parts = Vec::new();
    let mut start = MIB;
    let mut push = |name: String, type_guid, uuid, mib: u64, content| {
        parts.push(Part {
            number: u32::try_from(parts.len() + 1).unwrap_or(u32::MAX),
            name,
            type_guid,
            uuid,
            start,
            size: mib * MIB,
            content,
        });
        start += mib * MIB;
    };
    push(
        "esp".into(),
        validator::config::ESP_TYPE,
        derived_guid(&format!("esp {hashes}")),
        spec.esp_mib,
        None,
    );
    for slot in ['A', 'B'] {
        let dir = slots.iter().find(|s| s.slot == slot);
        let half = |r: std::ops::Range<usize>| {
            dir.and_then(|d| validator::util::unhex(d.root_hash.get(r)?))
                .and_then(|b| v::uuid_from_hash(&b))
        };
        let content = |name: &str| {
            dir.and_then(|d| {
                let len = d.len(name).ok()?;
                Some((d.path(name), *d.digests.get(name)?, len))
            })
        };
        let own = |what: &str| derived_guid(&format!("{what} {slot} {hashes}"));
        push(
            format!("root-{slot}"),
            v::DPS_ROOT_X86_64,
            half(0..32).unwrap_or_else(|| own("root")),
            root_mib,
            content("root.img"),
        );
        push(
            format!("root-{slot}-verity"),
            v::DPS_ROOT_VERITY_X86_64,
            half(32..64).unwrap_or_else(|| own("verity")),
            verity_mib,
            content("root.verity"),
        );
        push(
            format!("root-{slot}-sig"),
            v::DPS_ROOT_VERITY_SIG_X86_64,
            own("sig"),
            1,
            content("root.verity-sig"),
        );
    }
    if let Some(d) = slots.iter().find(|d| {
        ["root.img", "root.verity", "root.verity-sig"]
            .iter()
            .any(|n| d.len(n).is_err())
    }) {
        return Err(input(
            &d.dir,
            "a root image, tree or signature cannot be read",
        ));
    }
    if let Some((p, (path, _, len))) = parts
        .iter()
        .filter_map(|p| Some((p, p.content.as_ref()?)))
        .find(|(p, (_, _, len))| *len > p.size)
    {
        return Err(input(
            path,
            format!(
                "{len} bytes: larger than partition {} ({} bytes)",
                p.name, p.size
            ),
        ));
    }
    Ok(Plan {
        disk_guid: derived_guid(&format!("disk {hashes}")),
        parts,
        total: start + MIB,
    })
}

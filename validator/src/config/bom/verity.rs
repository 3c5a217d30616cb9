//! The BOM's `[verity]` table: the verified root - where the trusted root hash comes
//! from, the parameters the superblock must agree with, the dm-verity options, and the
//! files read in full before the handover.
//!
//! Contract: values are checked by type here; the values no superblock or kernel could
//! match (block sizes, data block count, salt and root-hash lengths, `source = "bom"`
//! without a root hash) are refused by the BOM's cross-checks (`checks.rs`).

use serde::{Deserialize, Serialize};

use super::checked::checked_string;

checked_string!(
    /// Hex digits (an even number of them; empty allowed).
    HexString,
    "hex string",
    |s| s.len().is_multiple_of(2) && s.bytes().all(|c| c.is_ascii_hexdigit())
);
checked_string!(
    /// A dm-verity hash algorithm.
    VerityAlgorithm,
    "verity algorithm (sha1, sha256, sha512)",
    |s| matches!(s, "sha1" | "sha256" | "sha512")
);
checked_string!(
    /// An absolute path inside the root filesystem.
    RootPath,
    "absolute path",
    |s| s.starts_with('/') && !s.split('/').any(|c| c == "..") && !s.contains('\0')
);

/// Where the trusted root hash comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RootHashSource {
    /// The DPS `root-verity-sig` partition, checked against the trust store.
    #[default]
    Signature,
    /// `verity.root_hash` in this BOM.
    Bom,
}

/// What dm-verity does when a block does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnCorruption {
    /// The read fails with EIO (the default).
    #[default]
    Eio,
    Restart,
    Panic,
    Ignore,
}

/// The verified root (presence of `[verity]` makes it required).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verity {
    #[serde(default)]
    pub source: RootHashSource,
    pub root_hash: Option<HexString>,
    /// Trusted parameters the superblock must agree with (each optional).
    pub algorithm: Option<VerityAlgorithm>,
    pub data_block_size: Option<u32>,
    pub hash_block_size: Option<u32>,
    pub data_blocks: Option<u64>,
    pub salt: Option<HexString>,
    /// Byte offset of the superblock on the hash partition.
    #[serde(default)]
    pub hash_offset: u64,
    #[serde(default)]
    pub on_corruption: OnCorruption,
    #[serde(default)]
    pub ignore_zero_blocks: bool,
    #[serde(default)]
    pub check_at_most_once: bool,
    /// Also hand the signature to the kernel (`root_hash_sig_key_desc`); the signer must
    /// then be in the kernel's trusted keyring too.
    #[serde(default)]
    pub kernel_signature: bool,
    /// Files read in full through the verity device before the handover.
    #[serde(default)]
    pub critical: Vec<RootPath>,
}

/// The kernel's dm-verity takes data blocks of at most the page size (4096 on x86-64).
pub const VERITY_DATA_BLOCK_MAX: u32 = 4096;

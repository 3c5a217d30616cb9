//! The `veritysetup format` superblock (cryptsetup `lib/verity/verity.c`, `struct verity_sb`,
//! 512 bytes, little-endian), parsed as untrusted input.
//!
//! Contract: accepts what `veritysetup verify` accepts: version 1, hash type 0 or 1,
//! sha1/sha256/sha512, block sizes a power of two from 512 to 512 KiB, a salt of at most
//! 256 bytes, and `data_blocks` 0, which means the whole data device
//! ([`Params::resolve_data_blocks`]).
//!
//! Current limits: the kernel's dm-verity takes data blocks of at most the page size
//! (4096 on x86-64); larger ones verify here and in `veritysetup verify` but cannot be
//! activated.

use crate::util::le::{u16_le, u32_le, u64_le};

/// Size of the superblock on disk.
pub const SIZE: usize = 512;
const SIGNATURE: &[u8; 8] = b"verity\0\0";

/// Hash algorithms dm-verity trees here may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    pub fn from_name(s: &str) -> Option<Algorithm> {
        match s {
            "sha1" => Some(Algorithm::Sha1),
            "sha256" => Some(Algorithm::Sha256),
            "sha512" => Some(Algorithm::Sha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    pub fn digest_size(self) -> usize {
        match self {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Sha512 => 64,
        }
    }
}

/// The verity parameters a superblock (or a BOM) describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// 1: `H(salt || block)`; 0 (Chrome OS): `H(block || salt)`.
    pub hash_type: u32,
    pub algorithm: Algorithm,
    pub data_block_size: u32,
    pub hash_block_size: u32,
    pub data_blocks: u64,
    pub salt: Vec<u8>,
    /// The superblock's UUID (informational).
    pub uuid: [u8; 16],
}

/// Why a superblock is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    #[error("verity superblock truncated ({0} of 512 bytes)")]
    Truncated(usize),
    #[error("no verity superblock signature (\"verity\")")]
    NoSignature,
    #[error("verity superblock version {0} is not supported (only 1)")]
    Version(u32),
    #[error("verity hash type {0} is not supported (0 or 1)")]
    HashType(u32),
    #[error("verity hash algorithm {0:?} is not supported (sha1, sha256, sha512)")]
    Algorithm(String),
    #[error("verity {what} block size {size} is invalid (a power of two, 512 to 524288)")]
    BlockSize { what: &'static str, size: u32 },
    #[error("verity salt size {0} exceeds 256")]
    SaltSize(u16),
    #[error("the superblock gives no data block count and the data device ({0} bytes) holds no whole data block")]
    NoData(u64),
    #[error("verity data size overflows ({0} blocks)")]
    Overflow(u64),
}

/// The block sizes `veritysetup` accepts (cryptsetup `VERITY_BLOCK_SIZE_OK`).
pub const BLOCK_SIZES: std::ops::RangeInclusive<u32> = 512..=524_288;

/// The longest salt a superblock holds.
pub const SALT_MAX: usize = 256;

/// True for a block size `veritysetup` accepts: a power of two in [`BLOCK_SIZES`].
pub fn valid_block_size(s: u32) -> bool {
    s.is_power_of_two() && BLOCK_SIZES.contains(&s)
}

impl Params {
    /// The parameters with `data_blocks` 0 read as cryptsetup reads it: the whole data
    /// device, in whole blocks (`data_size` bytes).
    pub fn resolve_data_blocks(mut self, data_size: u64) -> Result<Params, SuperblockError> {
        if self.data_blocks == 0 {
            self.data_blocks = data_size / u64::from(self.data_block_size);
            if self.data_blocks == 0 {
                return Err(SuperblockError::NoData(data_size));
            }
        }
        Ok(self)
    }
}

/// Parses and sanity-checks a superblock.
pub fn parse(b: &[u8]) -> Result<Params, SuperblockError> {
    let (Some(head), Some(salt_area)) = (b.get(..SIZE), b.get(88..SIZE)) else {
        return Err(SuperblockError::Truncated(b.len()));
    };
    if !head.starts_with(SIGNATURE) {
        return Err(SuperblockError::NoSignature);
    }
    let le32 = |o| u32_le(head, o).unwrap_or_default();
    let version = le32(8);
    if version != 1 {
        return Err(SuperblockError::Version(version));
    }
    let hash_type = le32(12);
    if hash_type > 1 {
        return Err(SuperblockError::HashType(hash_type));
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(head.get(16..32).unwrap_or(&[0; 16]));
    let alg_raw = head.get(32..64).unwrap_or_default();
    let alg_name = String::from_utf8_lossy(alg_raw.split(|&c| c == 0).next().unwrap_or_default())
        .to_ascii_lowercase();
    let algorithm = Algorithm::from_name(&alg_name).ok_or(SuperblockError::Algorithm(alg_name))?;
    let data_block_size = le32(64);
    let hash_block_size = le32(68);
    for (what, size) in [("data", data_block_size), ("hash", hash_block_size)] {
        if !valid_block_size(size) {
            return Err(SuperblockError::BlockSize { what, size });
        }
    }
    let data_blocks = u64_le(head, 72).unwrap_or_default();
    if data_blocks
        .checked_mul(u64::from(data_block_size))
        .is_none_or(|n| n > i64::MAX as u64)
    {
        return Err(SuperblockError::Overflow(data_blocks));
    }
    let salt_size = u16_le(head, 80).unwrap_or_default();
    let salt = salt_area
        .get(..usize::from(salt_size))
        .filter(|_| usize::from(salt_size) <= SALT_MAX)
        .ok_or(SuperblockError::SaltSize(salt_size))?;
    Ok(Params {
        hash_type,
        algorithm,
        data_block_size,
        hash_block_size,
        data_blocks,
        salt: salt.to_vec(),
        uuid,
    })
}

/// Writes a superblock for `p` (used by tests and by tools that make images).
pub fn encode(p: &Params) -> Vec<u8> {
    let mut b = Vec::with_capacity(SIZE);
    b.extend_from_slice(SIGNATURE);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&p.hash_type.to_le_bytes());
    b.extend_from_slice(&p.uuid);
    let mut alg = p.algorithm.name().as_bytes().to_vec();
    alg.resize(32, 0);
    b.extend_from_slice(&alg);
    b.extend_from_slice(&p.data_block_size.to_le_bytes());
    b.extend_from_slice(&p.hash_block_size.to_le_bytes());
    b.extend_from_slice(&p.data_blocks.to_le_bytes());
    let salt = p.salt.get(..p.salt.len().min(SALT_MAX)).unwrap_or_default();
    b.extend_from_slice(&u16::try_from(salt.len()).unwrap_or(u16::MAX).to_le_bytes());
    b.resize(88, 0);
    b.extend_from_slice(salt);
    b.resize(SIZE, 0);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Params {
        Params {
            hash_type: 1,
            algorithm: Algorithm::Sha256,
            data_block_size: 4096,
            hash_block_size: 4096,
            data_blocks: 1000,
            salt: vec![0xab; 32],
            uuid: [7; 16],
        }
    }

    #[test]
    fn round_trip() {
        assert_eq!(parse(&encode(&sample())).unwrap(), sample());
    }

    /// `data_blocks` 0 is "the whole data device", as cryptsetup reads it.
    #[test]
    fn zero_data_blocks_means_the_data_device() {
        let mut p = sample();
        p.data_blocks = 0;
        let parsed = parse(&encode(&p)).unwrap();
        assert_eq!(parsed.data_blocks, 0);
        assert_eq!(
            parsed
                .clone()
                .resolve_data_blocks(4096 * 7 + 100)
                .unwrap()
                .data_blocks,
            7
        );
        assert_eq!(
            parsed.resolve_data_blocks(4095),
            Err(SuperblockError::NoData(4095))
        );
        assert_eq!(sample().resolve_data_blocks(0).unwrap(), sample());
    }

    #[test]
    fn hostile_superblocks() {
        let good = encode(&sample());
        assert_eq!(parse(&good[..100]), Err(SuperblockError::Truncated(100)));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(parse(&b), Err(SuperblockError::NoSignature));
        let mut b = good.clone();
        b[8] = 2;
        assert_eq!(parse(&b), Err(SuperblockError::Version(2)));
        let mut b = good.clone();
        b[32..38].copy_from_slice(b"md5\0\0\0");
        assert!(matches!(parse(&b), Err(SuperblockError::Algorithm(_))));
        let mut b = good.clone();
        b[64..68].copy_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(
            parse(&b),
            Err(SuperblockError::BlockSize { what: "data", .. })
        ));
        let mut b = good.clone();
        b[80..82].copy_from_slice(&300u16.to_le_bytes());
        assert_eq!(parse(&b), Err(SuperblockError::SaltSize(300)));
        let mut b = good.clone();
        b[72..80].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(parse(&b), Err(SuperblockError::Overflow(_))));
        // Block sizes: what veritysetup accepts, no more.
        for (size, ok) in [
            (256u32, false),
            (512, true),
            (524288, true),
            (1 << 20, false),
        ] {
            let mut b = good.clone();
            b[68..72].copy_from_slice(&size.to_le_bytes());
            assert_eq!(parse(&b).is_ok(), ok, "{size}");
        }
        for i in 0..SIZE {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = parse(&b);
        }
    }
}

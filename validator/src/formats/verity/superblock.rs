//! The `veritysetup format` superblock (cryptsetup `lib/verity/verity.c`, `struct verity_sb`,
//! 512 bytes, little-endian), parsed as untrusted input.

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
    #[error("verity {what} block size {size} is invalid (a power of two, 512 to 65536)")]
    BlockSize { what: &'static str, size: u32 },
    #[error("verity salt size {0} exceeds 256")]
    SaltSize(u16),
    #[error("verity superblock has no data blocks")]
    NoData,
    #[error("verity data size overflows ({0} blocks)")]
    Overflow(u64),
}

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn valid_block_size(s: u32) -> bool {
    s.is_power_of_two() && (512..=65536).contains(&s)
}

/// Parses and sanity-checks a superblock.
pub fn parse(b: &[u8]) -> Result<Params, SuperblockError> {
    if b.len() < SIZE {
        return Err(SuperblockError::Truncated(b.len()));
    }
    if &b[0..8] != SIGNATURE {
        return Err(SuperblockError::NoSignature);
    }
    let version = le32(b, 8);
    if version != 1 {
        return Err(SuperblockError::Version(version));
    }
    let hash_type = le32(b, 12);
    if hash_type > 1 {
        return Err(SuperblockError::HashType(hash_type));
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[16..32]);
    let alg_raw = &b[32..64];
    let alg_end = alg_raw.iter().position(|&c| c == 0).unwrap_or(32);
    let alg_name = String::from_utf8_lossy(&alg_raw[..alg_end]).to_ascii_lowercase();
    let algorithm = Algorithm::from_name(&alg_name).ok_or(SuperblockError::Algorithm(alg_name))?;
    let data_block_size = le32(b, 64);
    let hash_block_size = le32(b, 68);
    for (what, size) in [("data", data_block_size), ("hash", hash_block_size)] {
        if !valid_block_size(size) {
            return Err(SuperblockError::BlockSize { what, size });
        }
    }
    let mut d = [0u8; 8];
    d.copy_from_slice(&b[72..80]);
    let data_blocks = u64::from_le_bytes(d);
    if data_blocks == 0 {
        return Err(SuperblockError::NoData);
    }
    if data_blocks
        .checked_mul(data_block_size as u64)
        .is_none_or(|n| n > i64::MAX as u64)
    {
        return Err(SuperblockError::Overflow(data_blocks));
    }
    let salt_size = u16::from_le_bytes([b[80], b[81]]);
    if salt_size > 256 {
        return Err(SuperblockError::SaltSize(salt_size));
    }
    Ok(Params {
        hash_type,
        algorithm,
        data_block_size,
        hash_block_size,
        data_blocks,
        salt: b[88..88 + salt_size as usize].to_vec(),
        uuid,
    })
}

/// Writes a superblock for `p` (used by tests and by tools that make images).
pub fn encode(p: &Params) -> Vec<u8> {
    let mut b = vec![0u8; SIZE];
    b[0..8].copy_from_slice(SIGNATURE);
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&p.hash_type.to_le_bytes());
    b[16..32].copy_from_slice(&p.uuid);
    let n = p.algorithm.name().as_bytes();
    b[32..32 + n.len()].copy_from_slice(n);
    b[64..68].copy_from_slice(&p.data_block_size.to_le_bytes());
    b[68..72].copy_from_slice(&p.hash_block_size.to_le_bytes());
    b[72..80].copy_from_slice(&p.data_blocks.to_le_bytes());
    let salt = &p.salt[..p.salt.len().min(256)];
    b[80..82].copy_from_slice(&(salt.len() as u16).to_le_bytes());
    b[88..88 + salt.len()].copy_from_slice(salt);
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
        for i in 0..SIZE {
            let mut b = good.clone();
            b[i] ^= 0xff;
            let _ = parse(&b);
        }
    }
}

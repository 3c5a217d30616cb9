//! Which filesystem an image holds, and how many bytes its superblock says it spans: the
//! three root filesystems a slot image may carry (ext4, erofs, squashfs), by the magic
//! and the size fields the kernel reads. `mkinitramfs slot` uses it to refuse a file that
//! is no root filesystem, or one cut shorter than its superblock says.
//!
//! Hand-written because it is three magics and three size fields at fixed offsets: ext4's
//! `s_magic` 0xEF53 at 1024 + 0x38 with `s_blocks_count_lo`/`_hi` and
//! `s_log_block_size`; erofs's `EROFS_SUPER_MAGIC_V1` 0xE0F5E1E2 at 1024 with `blocks`
//! and `blkszbits`; squashfs's `hsqs` at 0 with `bytes_used` (little-endian, as each
//! kernel driver reads them).
//!
//! Contract: pure and total: any bytes give an answer, never a panic; a size that
//! overflows 64 bits, or a field beyond `head`, is `None`. Current limits: `head` must
//! hold the superblock (the first 4 KiB is enough for all three); ext4 without the 64-bit
//! feature still has its high block count read (zero on such filesystems).

/// A root filesystem a slot image may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filesystem {
    Ext4,
    Erofs,
    Squashfs,
}

impl Filesystem {
    /// As `mount -t` and the tools name it.
    pub fn name(self) -> &'static str {
        match self {
            Filesystem::Ext4 => "ext4",
            Filesystem::Erofs => "erofs",
            Filesystem::Squashfs => "squashfs",
        }
    }
}

/// The filesystem whose superblock magic `head` (the image's first bytes) holds.
pub fn detect(head: &[u8]) -> Option<Filesystem> {
    let at = |o: usize, n: usize| head.get(o..o + n);
    if at(1080, 2) == Some(&[0x53, 0xef]) {
        Some(Filesystem::Ext4)
    } else if at(1024, 4) == Some(&[0xe2, 0xe1, 0xf5, 0xe0]) {
        Some(Filesystem::Erofs)
    } else if at(0, 4) == Some(b"hsqs") {
        Some(Filesystem::Squashfs)
    } else {
        None
    }
}

/// The bytes the filesystem in `head` says it spans (ext4: blocks times block size;
/// erofs: blocks of 2^blkszbits; squashfs: `bytes_used`), from its superblock.
pub fn size(head: &[u8]) -> Option<u64> {
    let u32_at = |o: usize| {
        head.get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u64::from(u32::from_le_bytes(b)))
    };
    match detect(head)? {
        Filesystem::Ext4 => {
            let blocks = u32_at(1024 + 4)? | (u32_at(1024 + 0x150).unwrap_or(0) << 32);
            blocks.checked_mul(1024u64.checked_shl(u32::try_from(u32_at(1024 + 24)?).ok()?)?)
        }
        Filesystem::Erofs => {
            u32_at(1024 + 36)?.checked_mul(1u64.checked_shl(u32::from(*head.get(1024 + 12)?))?)
        }
        Filesystem::Squashfs => head
            .get(40..48)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magics_and_sizes() {
        let mut ext4 = vec![0u8; 2048];
        ext4[1080..1082].copy_from_slice(&[0x53, 0xef]);
        ext4[1028..1032].copy_from_slice(&100u32.to_le_bytes()); // blocks
        ext4[1048..1052].copy_from_slice(&2u32.to_le_bytes()); // 4096-byte blocks
        assert_eq!(detect(&ext4), Some(Filesystem::Ext4));
        assert_eq!(size(&ext4), Some(409_600));
        let mut erofs = vec![0u8; 2048];
        erofs[1024..1028].copy_from_slice(&0xE0F5_E1E2u32.to_le_bytes());
        erofs[1036] = 12;
        erofs[1060..1064].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(detect(&erofs), Some(Filesystem::Erofs));
        assert_eq!(size(&erofs), Some(3 * 4096));
        let mut sq = b"hsqs".to_vec();
        sq.resize(96, 0);
        sq[40..48].copy_from_slice(&12345u64.to_le_bytes());
        assert_eq!(
            (detect(&sq), size(&sq)),
            (Some(Filesystem::Squashfs), Some(12345))
        );
        // erofs cut before its block count, an absurd shift, or no magic: no size.
        assert_eq!(size(&erofs[..1040]), None);
        ext4[1048..1052].copy_from_slice(&70u32.to_le_bytes());
        assert_eq!(size(&ext4), None);
        assert_eq!((detect(&[0u8; 4096]), size(&[])), (None, None));
    }
}

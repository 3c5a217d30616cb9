//! dm-verity formats: the `veritysetup format` superblock ([`superblock`]), the hash tree
//! and its full userspace check ([`tree`]), and the Discoverable Partitions
//! `root-verity-sig` JSON ([`sig`]).

pub mod sig;
pub mod superblock;
pub mod tree;

/// DPS partition type of an x86-64 root partition.
pub const DPS_ROOT_X86_64: &str = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709";
/// DPS partition type of an x86-64 root verity (hash) partition.
pub const DPS_ROOT_VERITY_X86_64: &str = "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5";
/// DPS partition type of an x86-64 root verity signature partition.
pub const DPS_ROOT_VERITY_SIG_X86_64: &str = "41092b05-9fc8-4523-994f-2def0408b176";

/// The systemd convention: the PARTUUID made of 16 bytes of the root hash (the first
/// half names the data partition, the last the hash partition).
pub fn uuid_from_hash(bytes: &[u8]) -> Option<String> {
    let b: [u8; 16] = bytes.try_into().ok()?;
    Some(crate::formats::gpt::Guid::from_text_order(b).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemd_partuuid_convention() {
        let h: Vec<u8> = (0u8..32).collect();
        assert_eq!(
            uuid_from_hash(&h[..16]).unwrap(),
            "00010203-0405-0607-0809-0a0b0c0d0e0f"
        );
        assert_eq!(
            uuid_from_hash(&h[16..]).unwrap(),
            "10111213-1415-1617-1819-1a1b1c1d1e1f"
        );
        assert!(uuid_from_hash(&h[..15]).is_none());
    }
}

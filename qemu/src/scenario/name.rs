//! The scenario names: the one list the CLI, the tests and `docs/TESTBED.md` use.
//!
//! Contract: [`Name`] is every scenario the catalogue ([`crate::catalogue`]) can set up,
//! with its command-line spelling ([`Name::as_str`], [`Name::parse`]) and its place in
//! `docs/TESTBED.md`'s scenario tables ([`Name::ALL`]; a unit test holds the tables to
//! it). Nothing here builds or boots anything.

/// The scenarios, by name: the one list the CLI, the tests and `docs/TESTBED.md` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Good,
    NoRoot,
    BadModule,
    Panic,
    TamperedModule,
    Verity,
    VerityCorrupt,
    VerityBadSig,
    VerityUntrusted,
    VerityBadSuperblock,
    VerityKernelSig,
    VerityErofs,
    K612,
    Tpm,
    TpmSha384,
    NoTpm,
    TpmKilled,
    AbGood,
    AbImageFault,
    AbImageFaultReboot,
    AbCorruptRoot,
    AbDiskError,
    AbBothBad,
    AbNoTpm,
    SdbootGood,
    SdbootImageFault,
    Node,
    PreflightNvidia,
    PreflightNvidiaOpen,
    PreflightPcie,
    AbHardwareFault,
    AbGpuBothSlots,
    AbGpuSlotA,
    Modules40,
    Sha512Module,
    // The fault matrix (docs/FAULTS.md; set up in crate::faults).
    WrongPartuuid,
    VerityCorruptHash,
    VerityWrongRootHash,
    VerityEioData,
    VerityEioHash,
    VerityEioMount,
    UnsignedModule,
    WrongVermagic,
    CrcMismatch,
    TruncatedModule,
    BomMissing,
    BomCorrupt,
    GarbageCmdline,
    LowMemory,
    AbNoEsp,
    AbEspFull,
    AbEspReadOnly,
    AbCorruptGrubenv,
    AbGrubenvBrokenChain,
    SbNode,
    SbFallback,
    SbUnsignedB,
    SbUntrustedB,
    SbDbxB,
    SbDbxSignerB,
    SbSbatB,
    SbUnsignedBUnchecked,
    SbFleetDb,
    SbFleetMok,
    SbFleetMokUntrusted,
    SbFleetUnenrolled,
    SbRequiredOff,
    SbUki,
    SbUkiRefused,
    SbUkiFallback,
    SbUkiTamperedB,
    RealNode,
    RealNodeRecheck,
}

impl Name {
    /// Every scenario, in the order of `docs/TESTBED.md`'s scenario tables.
    pub const ALL: &'static [Name] = &[
        Name::Good,
        Name::NoRoot,
        Name::BadModule,
        Name::Panic,
        Name::TamperedModule,
        Name::Verity,
        Name::VerityCorrupt,
        Name::VerityBadSig,
        Name::VerityUntrusted,
        Name::VerityBadSuperblock,
        Name::VerityKernelSig,
        Name::VerityErofs,
        Name::K612,
        Name::Tpm,
        Name::TpmSha384,
        Name::NoTpm,
        Name::TpmKilled,
        Name::AbGood,
        Name::AbImageFault,
        Name::AbImageFaultReboot,
        Name::AbCorruptRoot,
        Name::AbDiskError,
        Name::AbBothBad,
        Name::AbNoTpm,
        Name::SdbootGood,
        Name::SdbootImageFault,
        Name::Node,
        Name::PreflightNvidia,
        Name::PreflightNvidiaOpen,
        Name::PreflightPcie,
        Name::AbHardwareFault,
        Name::AbGpuBothSlots,
        Name::AbGpuSlotA,
        Name::Modules40,
        Name::Sha512Module,
        Name::WrongPartuuid,
        Name::VerityCorruptHash,
        Name::VerityWrongRootHash,
        Name::VerityEioData,
        Name::VerityEioHash,
        Name::VerityEioMount,
        Name::UnsignedModule,
        Name::WrongVermagic,
        Name::CrcMismatch,
        Name::TruncatedModule,
        Name::BomMissing,
        Name::BomCorrupt,
        Name::GarbageCmdline,
        Name::LowMemory,
        Name::AbNoEsp,
        Name::AbEspFull,
        Name::AbEspReadOnly,
        Name::AbCorruptGrubenv,
        Name::AbGrubenvBrokenChain,
        Name::SbNode,
        Name::SbFallback,
        Name::SbUnsignedB,
        Name::SbUntrustedB,
        Name::SbDbxB,
        Name::SbDbxSignerB,
        Name::SbSbatB,
        Name::SbUnsignedBUnchecked,
        Name::SbFleetDb,
        Name::SbFleetMok,
        Name::SbFleetMokUntrusted,
        Name::SbFleetUnenrolled,
        Name::SbRequiredOff,
        Name::SbUki,
        Name::SbUkiRefused,
        Name::SbUkiFallback,
        Name::SbUkiTamperedB,
        Name::RealNode,
        Name::RealNodeRecheck,
    ];

    /// The name on the command line and in run directories.
    pub fn as_str(self) -> &'static str {
        match self {
            Name::Good => "good",
            Name::NoRoot => "no-root",
            Name::BadModule => "bad-module",
            Name::Panic => "panic",
            Name::TamperedModule => "tampered-module",
            Name::Verity => "verity",
            Name::VerityCorrupt => "verity-corrupt",
            Name::VerityBadSig => "verity-bad-sig",
            Name::VerityUntrusted => "verity-untrusted",
            Name::VerityBadSuperblock => "verity-bad-superblock",
            Name::VerityKernelSig => "verity-kernel-sig",
            Name::VerityErofs => "verity-erofs",
            Name::K612 => "k612",
            Name::Tpm => "tpm",
            Name::TpmSha384 => "tpm-sha384",
            Name::NoTpm => "no-tpm",
            Name::TpmKilled => "tpm-killed",
            Name::AbGood => "ab-good",
            Name::AbImageFault => "ab-image-fault",
            Name::AbImageFaultReboot => "ab-image-fault-reboot",
            Name::AbCorruptRoot => "ab-corrupt-root",
            Name::AbDiskError => "ab-disk-error",
            Name::AbBothBad => "ab-both-bad",
            Name::AbNoTpm => "ab-no-tpm",
            Name::SdbootGood => "sdboot-good",
            Name::SdbootImageFault => "sdboot-image-fault",
            Name::Node => "node",
            Name::AbHardwareFault => "ab-hardware-fault",
            Name::AbGpuBothSlots => "ab-gpu-both-slots",
            Name::AbGpuSlotA => "ab-gpu-slot-a",
            Name::PreflightNvidia => "preflight-nvidia",
            Name::PreflightNvidiaOpen => "preflight-nvidia-open",
            Name::PreflightPcie => "preflight-pcie",
            Name::Modules40 => "modules-40",
            Name::Sha512Module => "sha512-module",
            Name::WrongPartuuid => "wrong-partuuid",
            Name::VerityCorruptHash => "verity-corrupt-hash",
            Name::VerityWrongRootHash => "verity-wrong-root-hash",
            Name::VerityEioData => "verity-eio-data",
            Name::VerityEioHash => "verity-eio-hash",
            Name::VerityEioMount => "verity-eio-mount",
            Name::UnsignedModule => "unsigned-module",
            Name::WrongVermagic => "wrong-vermagic",
            Name::CrcMismatch => "crc-mismatch",
            Name::TruncatedModule => "truncated-module",
            Name::BomMissing => "bom-missing",
            Name::BomCorrupt => "bom-corrupt",
            Name::GarbageCmdline => "garbage-cmdline",
            Name::LowMemory => "low-memory",
            Name::AbNoEsp => "ab-no-esp",
            Name::AbEspFull => "ab-esp-full",
            Name::AbEspReadOnly => "ab-esp-read-only",
            Name::AbCorruptGrubenv => "ab-corrupt-grubenv",
            Name::AbGrubenvBrokenChain => "ab-grubenv-broken-chain",
            Name::SbNode => "sb-node",
            Name::SbFallback => "sb-fallback",
            Name::SbUnsignedB => "sb-unsigned-b",
            Name::SbUntrustedB => "sb-untrusted-b",
            Name::SbDbxB => "sb-dbx-b",
            Name::SbDbxSignerB => "sb-dbx-signer-b",
            Name::SbSbatB => "sb-sbat-b",
            Name::SbUnsignedBUnchecked => "sb-unsigned-b-unchecked",
            Name::SbFleetDb => "sb-fleet-db",
            Name::SbFleetMok => "sb-fleet-mok",
            Name::SbFleetMokUntrusted => "sb-fleet-mok-untrusted",
            Name::SbFleetUnenrolled => "sb-fleet-unenrolled",
            Name::SbRequiredOff => "sb-required-off",
            Name::SbUki => "sb-uki",
            Name::SbUkiRefused => "sb-uki-refused",
            Name::SbUkiFallback => "sb-uki-fallback",
            Name::SbUkiTamperedB => "sb-uki-tampered-b",
            Name::RealNode => "real-node",
            Name::RealNodeRecheck => "real-node-recheck",
        }
    }

    /// The scenario called `s`.
    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.iter().copied().find(|n| n.as_str() == s)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths;

    /// `docs/TESTBED.md`'s scenario tables are this enum, in this order: the first cell of
    /// every row of the section "Scenarios" names one scenario, each exactly once, and
    /// every row says what it shows.
    #[test]
    fn testbed_lists_every_scenario() {
        let doc = std::fs::read_to_string(paths::workspace().join("docs/TESTBED.md")).unwrap();
        let start = doc
            .find("\n## Scenarios\n")
            .expect("docs/TESTBED.md has a section \"Scenarios\"");
        let section = &doc[start + 1..];
        let section = &section[..section.find("\n## ").unwrap_or(section.len())];
        let mut listed: Vec<&str> = Vec::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            // "| `good` | what it shows |" splits into ["", "`good`", "what it shows", ""].
            let name = cells[1].trim_matches('`');
            assert!(
                cells.len() == 4 && !cells[2].is_empty(),
                "docs/TESTBED.md: the row of {name} does not say what it shows: {row}"
            );
            listed.push(name);
        }
        let want: Vec<&str> = Name::ALL.iter().map(|n| n.as_str()).collect();
        assert_eq!(
            listed, want,
            "docs/TESTBED.md scenario tables vs qemu::scenario::Name::ALL"
        );
        for n in Name::ALL {
            assert_eq!(Name::parse(n.as_str()), Some(*n));
        }
        assert_eq!(Name::parse("nope"), None);
    }
}

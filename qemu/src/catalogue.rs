//! The scenario catalogue: a scenario's name to its set-up.
//!
//! Contract: [`Scenario::named`] starts from the good boot ([`Scenario::good`]) named
//! `name` and hands it to the set-up of the name's topic: the one-root scenarios to
//! [`crate::basic`], the A/B node to [`crate::ab`], the preflight hardware to
//! [`crate::preflight`], the fault matrix to [`crate::faults`]. [`run_named`] is
//! `named` then [`Scenario::run_checked`] (for tests). This module sits above every
//! set-up; no set-up imports it.
//!
//! Limits: each name has exactly one set-up; a set-up asked for a name of another topic
//! returns [`HarnessError::Setup`].

use crate::scenario::{Name, Scenario};
use crate::vm::Outcome;
use crate::HarnessError;

impl Scenario {
    /// A scenario by name.
    pub fn named(name: Name) -> Result<Scenario, HarnessError> {
        let mut s = Scenario::good()?;
        s.name = name.as_str().to_string();
        match name {
            Name::Good
            | Name::NoRoot
            | Name::BadModule
            | Name::Verity
            | Name::VerityCorrupt
            | Name::VerityBadSig
            | Name::VerityUntrusted
            | Name::VerityBadSuperblock
            | Name::VerityKernelSig
            | Name::VerityErofs
            | Name::K612
            | Name::Tpm
            | Name::TpmSha384
            | Name::NoTpm
            | Name::TpmKilled
            | Name::TamperedModule
            | Name::Modules40
            | Name::Sha512Module
            | Name::Panic => crate::basic::setup(&mut s, name)?,
            Name::AbGood
            | Name::AbImageFault
            | Name::AbImageFaultReboot
            | Name::AbCorruptRoot
            | Name::AbDiskError
            | Name::AbBothBad
            | Name::AbNoTpm
            | Name::AbHardwareFault
            | Name::AbGpuBothSlots
            | Name::AbGpuSlotA
            | Name::Node
            | Name::SdbootGood
            | Name::SdbootImageFault => crate::ab::setup(&mut s, name)?,
            Name::SbNode
            | Name::SbFallback
            | Name::SbUnsignedB
            | Name::SbUntrustedB
            | Name::SbDbxB
            | Name::SbDbxSignerB
            | Name::SbSbatB
            | Name::SbUnsignedBUnchecked
            | Name::SbFleetDb
            | Name::SbFleetMok
            | Name::SbFleetMokUntrusted
            | Name::SbFleetUnenrolled
            | Name::SbRequiredOff
            | Name::SbUki
            | Name::SbUkiRefused
            | Name::SbUkiFallback
            | Name::SbUkiTamperedB => crate::secureboot::setup(&mut s, name)?,
            Name::RealNode => crate::debroot::setup(&mut s)?,
            Name::RealNodeRecheck => crate::debroot::setup_recheck(&mut s)?,
            Name::PreflightNvidia | Name::PreflightNvidiaOpen | Name::PreflightPcie => {
                crate::preflight::setup(&mut s, name)?
            }
            Name::WrongPartuuid
            | Name::VerityCorruptHash
            | Name::VerityWrongRootHash
            | Name::VerityEioData
            | Name::VerityEioHash
            | Name::VerityEioMount
            | Name::UnsignedModule
            | Name::WrongVermagic
            | Name::CrcMismatch
            | Name::TruncatedModule
            | Name::BomMissing
            | Name::BomCorrupt
            | Name::GarbageCmdline
            | Name::LowMemory
            | Name::AbNoEsp
            | Name::AbEspFull
            | Name::AbEspReadOnly
            | Name::AbCorruptGrubenv
            | Name::AbGrubenvBrokenChain => crate::faults::setup(&mut s, name)?,
        }
        Ok(s)
    }
}

/// [`Scenario::named`] then [`Scenario::run_checked`].
pub fn run_named(name: Name) -> Outcome {
    Scenario::named(name)
        .unwrap_or_else(|e| panic!("scenario {name}: {e}"))
        .run_checked()
}

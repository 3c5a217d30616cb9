//! What a boot loader does for the A/B scheme, as one trait, [`BootLoader`], with one
//! implementation per loader the BOM can name: GRUB's environment block
//! ([`super::grub::Grub`]) and systemd-boot's BLS boot counting ([`super::bls::Bls`]).
//!
//! Contract: [`open`] is the only place that branches on [`Bootloader`]; everything else
//! in the stage asks the trait. A loader whose state could not be read is still returned
//! (with the error): it shows an empty view, offers no slot, and refuses every write, so
//! state we could not read is never written.
//!
//! Current limits: two slots, `A` and `B`.

use std::collections::BTreeMap;
use std::path::Path;

use super::{bls::Bls, grub::Grub, same_line_for, SlotError};
use crate::config::bom::{Bootloader, Slot, SlotName};

/// A boot loader's A/B state on the mounted ESP, and the writes the gate makes to it.
pub trait BootLoader: std::fmt::Debug + Send + Sync {
    /// The loader's state as the report shows it (grubenv variables, or the slots' entry
    /// file names).
    fn view(&self) -> BTreeMap<String, String>;

    /// What the loader left in EFI variables under `sys_root` for this boot (efivarfs is
    /// mounted by then on a UEFI boot); added to the view before this boot's writes.
    fn firmware_view(&self, _sys_root: &Path) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// Whether the loader would still try slot `s` (a fallback may boot it).
    fn offers(&self, s: SlotName) -> bool;

    /// Why the loader would boot no slot at all with this state (it then halts), when
    /// it would not; `None` when a slot would boot, or the loader always boots one.
    fn unbootable(&self) -> Option<SlotError> {
        None
    }

    /// Marks slot `s` good, or bad (demoted: the loader will not boot it again).
    fn mark(&mut self, s: SlotName, good: bool) -> Result<(), SlotError>;

    /// Undoes the last write that succeeded ([`BootLoader::mark`] or
    /// [`BootLoader::use_try`]), once: the state as it was before it. `Ok(false)` when
    /// there is nothing to undo.
    fn undo(&mut self) -> Result<bool, SlotError>;

    /// Whether the loader's state marks slot `s` good (`Some(true)`), bad
    /// (`Some(false)`), or neither (tries left, unset, unreadable: `None`).
    fn marked(&self, s: SlotName) -> Option<bool>;

    /// Uses one try of slot `s`, as the loader does before it boots it (for a kexec,
    /// which bypasses the loader).
    fn use_try(&mut self, s: SlotName) -> Result<(), SlotError>;

    /// Gives back the try of slot `s` that [`BootLoader::use_try`] used for a kexec the
    /// kernel then refused, so the loader tries `s` itself after the reboot. `Ok(false)`:
    /// this loader cannot (the reboot then finds the try used).
    fn give_back_try(&mut self, _s: SlotName) -> Result<bool, SlotError> {
        Ok(false)
    }

    /// Demotes slot `x` and uses a try of slot `y`: a fallback by kexec. By default
    /// [`BootLoader::mark`] then [`BootLoader::use_try`]; a loader that can make both
    /// changes in one write does (each write to the ESP costs a flush).
    fn demote_and_use_try(&mut self, x: SlotName, y: SlotName) -> Result<(), SlotError> {
        self.mark(x, false)?;
        self.use_try(y)
    }

    /// The kernel command line for a kexec into slot `s`, given this boot's `this_boot`:
    /// by default this boot's line with `validator.slot=` naming `s` (a loader whose
    /// configuration gives every slot the same line).
    fn kexec_cmdline(&self, s: SlotName, this_boot: &str) -> String {
        same_line_for(this_boot, s)
    }
}

/// Reads the state of the loader `cfg` names from the ESP mounted at `esp_dir`. The
/// loader comes back even when its state could not be read (then with the error).
pub fn open(cfg: &Slot, esp_dir: &Path) -> (Box<dyn BootLoader>, Option<SlotError>) {
    match cfg.bootloader {
        Bootloader::Grub => {
            let (l, e) = Grub::open(cfg, esp_dir);
            (Box::new(l), e)
        }
        Bootloader::SystemdBoot => {
            let (l, e) = Bls::open(cfg, esp_dir);
            (Box::new(l), e)
        }
    }
}

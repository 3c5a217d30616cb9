//! Why slot handling failed: [`SlotError`], one enum for the whole `slot` stage, each
//! variant carrying its context (the path, the slot, the device, the underlying error).
//!
//! Contract: the messages are the ones the report's `slot.error`, the warnings and the
//! operator CLI show (tests match some of them), so a variant's text is part of the
//! public surface. Every variant is a platform fault where the `slot` stage returns it
//! (`stages::slot` classifies it): a broken slot state never blames the image or the
//! hardware.
//!
//! The operator CLI tells these apart by variant: [`SlotError::NoRecord`] (no state record
//! yet: optional with `--grubenv`), the boot loader's state
//! ([`SlotError::GrubenvRead`], [`SlotError::GrubenvParse`], [`SlotError::NoEntry`],
//! [`SlotError::TwoEntries`], [`SlotError::EntriesDir`]), and the rest.
//!
//! Current limits: [`SlotError::EspNotFound`] holds the storage stage's error type (the
//! scan is borrowed from it).

use std::path::PathBuf;

use crate::config::bom::SlotName;
use crate::formats::grubenv::GrubEnvError;
use crate::formats::slotstate::StateError;
use crate::runtime::devices::StorageError;
use crate::sys::SysError;
use crate::util::fs::InputError;

/// Why slot handling (or one write of it) failed.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The kernel command line names no slot.
    #[error("no validator.slot=A|B on the kernel command line")]
    NoSlotArg,
    /// No ESP appeared before the timeout.
    #[error(transparent)]
    EspNotFound(StorageError),
    /// More than one partition is an ESP (or matches `validator.esp=`).
    #[error("more than one ESP: {}", .devices.join(", "))]
    ManyEsps { devices: Vec<String> },
    /// The ESP could not be mounted read-write.
    #[error("cannot mount the ESP: {source}{}", read_only_note(*.read_only))]
    Mount {
        device: String,
        source: SysError,
        /// The kernel marks the device read-only (which `EACCES` alone does not say).
        read_only: bool,
    },
    /// A file or directory on the ESP (or the mountpoint) could not be made or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The grubenv could not be read.
    #[error("grubenv: {source}")]
    GrubenvRead { source: InputError },
    /// The grubenv does not parse; it is never written.
    #[error("{path}: {source} (left alone)")]
    GrubenvParse { path: PathBuf, source: GrubEnvError },
    /// A write was asked of a grubenv that could not be read or parsed.
    #[error("the grubenv is unusable; left alone")]
    GrubenvUnusable,
    /// A variable could not be set in the grubenv block.
    #[error("grubenv: {source}")]
    GrubenvSet { source: GrubEnvError },
    /// After a grubenv change (`written`: as read back from the file; else in memory,
    /// before anything was written) GRUB would not read the value set.
    #[error("{path}: GRUB would read {name}={} after this change, not {name}={want} ({})", .got.as_deref().unwrap_or("(unset)"), if *.written { "read back after the write" } else { "nothing written" })]
    GrubenvNotEffective {
        path: PathBuf,
        name: String,
        want: String,
        got: Option<String>,
        written: bool,
    },
    /// A mark changed the boot loader's state but our record could not be written; the
    /// boot loader's change was undone (`undone` is `None`) or not (why).
    #[error("slot {slot} not marked {}: the record was not written ({source}); {}", if *.good { "good" } else { "bad" }, undo_note(.undone.as_deref()))]
    MarkIncomplete {
        slot: SlotName,
        good: bool,
        source: Box<SlotError>,
        undone: Option<Box<SlotError>>,
    },
    /// The boot loader's state and our record disagree on a slot.
    #[error("slot {slot}: the boot loader marks it {}, our record {}", good_bad(*.loader), good_bad(*.record))]
    Disagree {
        slot: SlotName,
        loader: bool,
        record: bool,
    },
    /// The BLS entries directory could not be listed.
    #[error("{path}: {source}")]
    EntriesDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Two BLS entry files carry one slot's entry id.
    #[error("two entries for slot {slot}: {first} and {second}")]
    TwoEntries {
        slot: SlotName,
        first: String,
        second: String,
    },
    /// A slot's BLS entry file is missing.
    #[error("no BLS entry {id}[+N[-M]].conf for slot {slot} in {dir}")]
    NoEntry {
        slot: SlotName,
        id: String,
        dir: PathBuf,
    },
    /// A write was asked for a slot whose BLS entry was not found.
    #[error("no entry for slot {slot}")]
    NoEntryFor { slot: SlotName },
    /// Renaming a BLS entry (boot counting) failed.
    #[error("rename {from} to {to}: {source}")]
    Rename {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    /// Our state record's directory does not exist (and was not to be created).
    #[error("no state record at {dir}")]
    NoRecord { dir: PathBuf },
    /// Our state record's directory is there, but neither copy is a valid record (both
    /// fail their checksum, are missing, or the directory is not one).
    #[error("no valid state record at {dir}: state.0: {state0}; state.1: {state1}")]
    NoValidCopy {
        dir: PathBuf,
        state0: String,
        state1: String,
    },
    /// GRUB would find no slot to boot with this environment block (as the shipped
    /// `grub.cfg` picks one), and halt.
    #[error("{path}: GRUB would find no bootable slot at the next boot ({state}) and halt")]
    NoBootableSlot { path: PathBuf, state: String },
    /// Our state record could not be read or created this boot, so it is not written.
    #[error("our state record is not written (unreadable ESP directory)")]
    RecordUnusable,
    /// Our state record could not be encoded.
    #[error("{source}")]
    Encode { source: StateError },
    /// The fallback's kernel or initramfs could not be read.
    #[error("{source}")]
    KexecInput { source: InputError },
    /// The kernel refused to stage the kexec (or the memfd for it).
    #[error("{source}")]
    Kexec { source: SysError },
    /// The fallback's kernel or initramfs was not read before the report.
    #[error("the kernel and initramfs to kexec: {0}")]
    KexecPrepared(String),
    /// The BOM asks for a reboot rather than a kexec.
    #[error("the BOM asks for a reboot")]
    RebootAsked,
}

fn good_bad(good: bool) -> &'static str {
    if good {
        "good"
    } else {
        "bad"
    }
}

fn undo_note(undone: Option<&SlotError>) -> String {
    match undone {
        None => "the boot loader's change was undone: nothing changed".into(),
        Some(e) => format!(
            "the boot loader's change could NOT be undone ({e}): the boot loader marks it, the record does not"
        ),
    }
}

fn read_only_note(read_only: bool) -> &'static str {
    if read_only {
        " (the device is read-only)"
    } else {
        ""
    }
}

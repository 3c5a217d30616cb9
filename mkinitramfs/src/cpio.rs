//! The initramfs container: cpio "newc" (`070701`), written deterministically and read
//! back for `list`.
//!
//! Contract: this module is the validator's one newc writer and reader,
//! [`validator::formats::newc`], under the name mkinitramfs and its users (the QEMU test
//! bed, the fuzz targets) have always called it; see there for the byte layout (sorted
//! entries, parents first, inodes in order, owner 0:0, one mtime).
//!
//! Current limits: those of [`validator::formats::newc`].

pub use validator::formats::newc::{
    read, read_archive, Archive, Archived, CpioError, Entry, Kind, ListedEntry,
};

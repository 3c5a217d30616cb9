//! UEFI boots of the test node: OVMF with a writable copy of its variable store, and the
//! EFI System Partition (ESP) that the boot loader reads and writes.
//!
//! Contract: [`Ovmf`] is one VM's firmware and its QEMU arguments: plain OVMF, OVMF with
//! the snakeoil keys and Secure Boot off ([`Ovmf::snakeoil`]), or the Secure Boot build
//! with Microsoft's keys ([`Ovmf::secure_boot`]), each with a variable store of the VM's
//! own (`ovmf.rs`). [`build_esp`] makes a FAT32 ESP image with mkfs.vfat and mtools (no
//! loop devices, no mounts, no root) for one of three loaders, GRUB ([`Loader::Grub`]),
//! Debian's signed shim and GRUB ([`Loader::ShimGrub`]) or systemd-boot
//! ([`Loader::SystemdBoot`]), with each slot's kernel and initramfs (`build.rs`, where
//! the layout is given in full). [`Esp`] reads and writes files of an ESP inside a disk
//! image on the host, lists and sets `grubenv` with `grub-editenv`, and rewrites a file's
//! own clusters in place as GRUB's `save_env` does (`esp.rs`, with the ESP's partition
//! label and type and the paths the shipped `grub.cfg` uses).
//!
//! Limits: GRUB's and systemd-boot's output reach the serial console through the
//! firmware's console (OVMF sends it to the serial port when there is no display); the
//! GRUB image carries only [`GRUB_MODULES`] (the commands the shipped `grub.cfg` uses);
//! the ESP holds x86-64 loaders only.

mod build;
mod esp;
mod ovmf;

pub use build::{
    build_esp, default_grubenv, entry_name, make_grub_efi, EspSlot, EspSpec, Loader, Slot,
    BASE_CMDLINE, GRUB_EARLY_CFG, GRUB_MODULES, GRUB_SIGNED, SHIM_SIGNED, SYSTEMD_BOOT_EFI,
};
pub use esp::{
    fill_fat, Esp, ENTRIES_DIR, ESP_LABEL, ESP_TYPE, GRUBENV_PATH, GRUB_CFG_PATH, NODE_CFG_PATH,
};
pub use ovmf::{
    snakeoil_store, Ovmf, OVMF_CODE, OVMF_CODE_SECBOOT, OVMF_VARS, OVMF_VARS_MS, SNAKEOIL_VARS,
};

//! Layer 5: what the image and the boot loader ask for - the BOM ([`bom`]) and the kernel
//! command line ([`cmdline`]) - with every policy enum and constant the stages obey.
//!
//! Contract: parsing is strict and names the file and line (BOM) or the key (command
//! line); a value the init would refuse is refused here, by the same code, so `validator
//! bom check` and the boot agree.

pub mod bom;
pub mod cmdline;

/// Where mkinitramfs puts things inside the initramfs (relative paths): the contract
/// between the image build and the init.
pub mod layout {
    /// Trusted certificates (`*.der`, `*.pem`): the kernel's built-in keys and the BOM's.
    pub const TRUST_DIR: &str = "etc/validator/trust";
    /// How the kernel's built-in certificates are named there (`<prefix><n>.der`), apart
    /// from the BOM's.
    pub const BUILTIN_CERT_PREFIX: &str = "kernel-builtin-";
    /// Exported symbol CRCs of the kernel and the packed modules, `Module.symvers` format.
    pub const SYMVERS: &str = "etc/validator/Module.symvers";
    /// The kernel's module vermagic string.
    pub const VERMAGIC: &str = "etc/validator/kernel.vermagic";
    /// What a boot that fell back by kexec carries into the next one (an archive the init
    /// appends to the other slot's initramfs): the failed boot's report and its TPM event
    /// log (firmware events and ours, so the new boot's log still replays to the PCRs).
    pub const CARRIED_REPORT: &str = "etc/validator/carried/report.json";
    pub const CARRIED_EVENTLOG: &str = "etc/validator/carried/tpm-eventlog.bin";
}

/// The name of the device-mapper device the init makes for the verified root.
pub const VERITY_DM_NAME: &str = "root";

/// The GPT partition type of an EFI System Partition.
pub const ESP_TYPE: &str = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b";
/// The EFI variable systemd-boot sets to the entry file it renamed for this boot.
pub const LOADER_BOOT_COUNT_PATH: &str = "LoaderBootCountPath-4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";

//! Layer 5: what the image and the boot loader ask for - the BOM ([`bom`]) and the kernel
//! command line ([`cmdline`]) - with every policy enum and constant the stages obey.
//!
//! Contract: parsing is strict and names the file and line (BOM) or the key (command
//! line); a value the init would refuse is refused here, by the same code, so `validator
//! bom check` and the boot agree.

pub mod bom;
pub mod cmdline;
pub mod hardware;

/// The PCR systemd-pcrphase uses for the boot phases (`enter-initrd`, `leave-initrd`).
pub const PHASE_PCR: u32 = 11;

/// Where mkinitramfs puts things inside the initramfs (relative paths): the contract
/// between the image build and the init.
pub mod layout {
    /// Trusted certificates (`*.der`, `*.pem`): the kernel's built-in keys and the BOM's.
    pub const TRUST_DIR: &str = "etc/validator/trust";
    /// Exported symbol CRCs of the kernel and the packed modules, `Module.symvers` format.
    pub const SYMVERS: &str = "etc/validator/Module.symvers";
    /// The kernel's module vermagic string.
    pub const VERMAGIC: &str = "etc/validator/kernel.vermagic";
}

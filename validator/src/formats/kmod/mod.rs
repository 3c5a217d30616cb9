//! Kernel module files and the module index: `.modinfo` and `__versions` from the ELF
//! ([`modinfo`]), the appended signature trailer ([`sig`]), `modules.dep` /
//! `modules.softdep` / `modules.builtin` ([`index`]), `Module.symvers` ([`symvers`]) and
//! `modprobe.d` with the command line's module options ([`modprobe`]).
//!
//! Contract: pure parsers over bytes; module names are compared in the kernel's spelling
//! ([`normalize_name`]).

pub mod index;
pub mod modinfo;
pub mod modprobe;
pub mod sig;
pub mod symvers;

/// `-` to `_`: the kernel's spelling of a module name.
pub fn normalize_name(s: &str) -> String {
    s.replace('-', "_")
}

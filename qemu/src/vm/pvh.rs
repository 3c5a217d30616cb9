//! The kernel a direct boot gives QEMU's `-kernel`: the `vmlinux` ELF inside the kernel
//! image, booted through the entry point Linux builds for PVH guests (`CONFIG_PVH`: the
//! `Xen` ELF note `XEN_ELFNOTE_PHYS32_ENTRY`), which QEMU loads as it is. A bzImage's
//! decompressor would otherwise run in the guest, emulated: with Debian's xz-compressed
//! 6.1 kernel under TCG, 5.5 s from QEMU's start to `Run /init` against 2.2 s through the
//! PVH entry point (docs/PERFORMANCE.md). The kernel is the same bytes the image carries;
//! what a direct boot skips is the decompressor, and with it the choice of addresses
//! KASLR makes there. Boots through firmware (OVMF, as the VM's firmware or given with
//! `-kernel`) always take the image itself (shim, GRUB and the EFI stub are what they
//! test), and so does every kexec a guest makes.
//!
//! The initramfs does not go through QEMU's `-initrd` here: for a PVH kernel QEMU 7.2
//! puts it just under the 160 KiB it keeps for ACPI at the top of low memory, and
//! SeaBIOS's tables with a TPM's 64 KiB log area need more, so the initramfs overwrote
//! them (the kernel then found no ACPI, no TPM, no power-off). It is placed by QEMU's
//! generic loader (`-device loader`, put back at every reset) above the kernel's image,
//! and the kernel is told where with `initrdmem=`, the place kept out of its memory with
//! `memmap=<size>$<address>` ([`Direct::words`], after `console=ttyS0 panic=-1`): 6.1
//! reserves an initramfs before it reads `initrdmem=`, so without the second word its
//! first allocations overwrote it. The kernel copies it out as it does a boot loader's
//! (`Move RAMDISK`); the place stays reserved, so VMs under 512 MiB boot the image.
//!
//! Contract: [`direct`] returns the ELF, extracted once into
//! `target/qemu-cache/pvh/<SHA-256 of the image>.elf` (written under another name and
//! renamed, so processes side by side never read a partial file; read and parsed once per
//! process), with the initramfs's place; or `None` (boot the image as it is, with `-initrd`) when it is not a bzImage we
//! decode, its kernel has no PVH entry point, or the VM has less than 512 MiB.
//!
//! Limits: `VALIDATOR_DIRECT_BZIMAGE=1` boots every image as it is. A cache that cannot be
//! written is reported on stderr and the image booted.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::HarnessError;

/// `XEN_ELFNOTE_PHYS32_ENTRY`: the 32-bit physical entry point of a PVH guest.
const PHYS32_ENTRY: u32 = 18;

/// A direct boot through the PVH entry point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Direct {
    /// The extracted ELF.
    pub elf: PathBuf,
    /// Where the initramfs is loaded, and its length.
    pub initrd_addr: u64,
    pub initrd_len: u64,
}

impl Direct {
    /// The kernel command-line words that say where the initramfs is and keep the
    /// kernel's allocations out of it.
    pub fn words(&self) -> String {
        format!(
            "initrdmem={a:#x},{n} memmap={k}K${a:#x}",
            a = self.initrd_addr,
            n = self.initrd_len,
            k = self.initrd_len.div_ceil(4096) * 4,
        )
    }

    /// QEMU's arguments: the kernel and the initramfs at its place.
    pub fn args(&self, initrd: &Path) -> Vec<std::ffi::OsString> {
        let mut loader = std::ffi::OsString::from("loader,file=");
        loader.push(initrd);
        loader.push(format!(",addr={:#x},force-raw=on", self.initrd_addr));
        vec![
            "-kernel".into(),
            self.elf.clone().into(),
            "-device".into(),
            loader,
        ]
    }
}

/// How to boot `image` with `initrd` directly in a VM of `memory_mib`; `None`: as it is.
pub fn direct(image: &Path, initrd: &Path, memory_mib: u32) -> Option<Direct> {
    if std::env::var_os("VALIDATOR_DIRECT_BZIMAGE").is_some_and(|v| v == "1") {
        return None;
    }
    let (elf, end) = match extracted(image) {
        Ok(Some(x)) => x,
        Ok(None) => return None,
        Err(e) => {
            eprintln!("booting {} as it is: {e}", image.display());
            return None;
        }
    };
    let initrd_len = std::fs::metadata(initrd).ok()?.len();
    place(end, initrd_len, memory_mib).map(|initrd_addr| Direct {
        elf,
        initrd_addr,
        initrd_len,
    })
}

/// Where an initramfs of `len` bytes goes above a kernel image ending at `kernel_end`:
/// the next 2 MiB boundary after a 2 MiB gap, if the VM has 512 MiB or more and it then
/// ends 64 MiB below the top of low memory (q35 keeps RAM below 2 GiB when there is
/// 2.75 GiB or more), where the kernel's first allocations are made.
fn place(kernel_end: u64, len: u64, memory_mib: u32) -> Option<u64> {
    const MIB: u64 = 1 << 20;
    if memory_mib < 512 {
        return None;
    }
    let ram = u64::from(memory_mib) * MIB;
    let low = if ram >= 0xb000_0000 { 0x8000_0000 } else { ram };
    let addr = (kernel_end + 2 * MIB).div_ceil(2 * MIB) * (2 * MIB);
    (addr + len + 64 * MIB <= low).then_some(addr)
}

/// What this process found for each image digest ([`extracted`]): the ELF is read and
/// parsed once per process, not at every VM start.
static FOUND: Mutex<Vec<(String, Found)>> = Mutex::new(Vec::new());

/// The extracted ELF and the end of the kernel's image in memory; `None`: no PVH kernel.
type Found = Option<(PathBuf, u64)>;

/// The cached ELF of `image`, made if missing, and the end of its image in memory (the
/// highest physical address a loadable segment reaches); `None` when there is no PVH
/// kernel in it.
fn extracted(image: &Path) -> Result<Found, HarnessError> {
    let bytes = std::fs::read(image).map_err(|e| HarnessError::io(image, e))?;
    let key = validator::util::hex(&Sha256::digest(&bytes));
    let found = FOUND.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, f)) = found.iter().find(|(k, _)| *k == key) {
        return Ok(f.clone());
    }
    drop(found);
    let f = cached_or_made(&key, &bytes)?;
    FOUND
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((key, f.clone()));
    Ok(f)
}

/// [`extracted`] from the cache directory, or made there from the image's `bytes`.
fn cached_or_made(key: &str, bytes: &[u8]) -> Result<Found, HarnessError> {
    let dir = crate::paths::workspace().join("target/qemu-cache/pvh");
    let elf = dir.join(format!("{key}.elf"));
    let none = dir.join(format!("{key}.none"));
    if none.is_file() {
        return Ok(None);
    }
    if elf.is_file() {
        let v = std::fs::read(&elf).map_err(|e| HarnessError::io(&elf, e))?;
        return Ok(pvh_end(&v).map(|end| (elf, end)));
    }
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(&dir, e))?;
    let made = validator::formats::vmlinuz::vmlinux(bytes)
        .ok()
        .and_then(|v| pvh_end(&v).map(|end| (v, end)));
    let (target, out) = match &made {
        Some((v, _)) => (&elf, v.as_slice()),
        None => (&none, &[][..]),
    };
    let part = dir.join(format!(".{key}.{}", std::process::id()));
    std::fs::write(&part, out).map_err(|e| HarnessError::io(&part, e))?;
    std::fs::rename(&part, target).map_err(|e| HarnessError::io(target, e))?;
    Ok(made.map(|(_, end)| (elf, end)))
}

/// The end of the kernel's image in memory, when ELF `elf` carries the PVH entry point
/// note (one parse for both).
fn pvh_end(elf: &[u8]) -> Option<u64> {
    let e = goblin::elf::Elf::parse(elf).ok()?;
    let entry = e
        .iter_note_headers(elf)?
        .filter_map(Result::ok)
        .any(|n| n.name == "Xen" && n.n_type == PHYS32_ENTRY);
    if !entry {
        return None;
    }
    e.program_headers
        .iter()
        .filter(|p| p.p_type == goblin::elf::program_header::PT_LOAD)
        .map(|p| p.p_paddr.saturating_add(p.p_memsz))
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's 6.1 image holds a PVH kernel: the cached ELF is its `vmlinux` (the
    /// release string inside), found again by its digest, with the initramfs above the
    /// kernel's image; a file that is no bzImage is booted as it is.
    #[test]
    fn the_image_s_vmlinux_with_its_pvh_entry() {
        let Ok(k) = crate::paths::kernel("default") else {
            eprintln!("no kernel provisioned (scripts/provision)");
            return;
        };
        let dir = crate::paths::run_dir("pvh-unit").unwrap();
        let initrd = dir.join("initrd");
        std::fs::write(&initrd, vec![0u8; 3 << 20]).unwrap();
        let d = direct(&k.vmlinuz, &initrd, 1024).unwrap();
        let bytes = std::fs::read(&d.elf).unwrap();
        let end = pvh_end(&bytes).unwrap();
        assert!(d.initrd_addr >= end + (2 << 20) && d.initrd_addr.is_multiple_of(2 << 20));
        assert_eq!(d.initrd_len, 3 << 20);
        assert_eq!(
            d.words(),
            format!(
                "initrdmem={a:#x},3145728 memmap=3072K${a:#x}",
                a = d.initrd_addr
            )
        );
        assert_eq!(
            validator::formats::vmlinuz::release(&bytes).as_deref(),
            Some(k.release.as_str())
        );
        assert_eq!(direct(&k.vmlinuz, &initrd, 1024), Some(d));
        // A VM under 512 MiB boots the image.
        assert_eq!(direct(&k.vmlinuz, &initrd, 192), None);
        let junk = dir.join("junk");
        std::fs::write(&junk, b"not a kernel").unwrap();
        assert_eq!(direct(&junk, &initrd, 1024), None);
        assert_eq!(direct(&junk, &initrd, 1024), None);
        assert_eq!(pvh_end(b"\x7fELF"), None);
    }

    #[test]
    fn the_initramfs_goes_above_the_kernel_and_below_the_top() {
        const MIB: u64 = 1 << 20;
        assert_eq!(place(0x4a0_0000, 3 * MIB, 1024), Some(0x4c0_0000));
        assert_eq!(place(0x4a0_0001, MIB, 1024), Some(0x4e0_0000));
        assert_eq!(place(0x4a0_0000, 10 * MIB, 192), None);
        assert_eq!(place(0x4a0_0000, 10 * MIB, 512), Some(0x4c0_0000));
        assert_eq!(place(0x4a0_0000, 400 * MIB, 512), None);
        // 4 GiB of RAM: 2 GiB of it below 4 GiB on q35.
        assert_eq!(place(0x4a0_0000, 2000 * MIB, 4096), None);
    }
}

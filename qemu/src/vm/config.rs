//! What one VM boots and the QEMU command line for it.
//!
//! Contract: [`VmConfig`] describes the VM (a kernel and initramfs booted with `-kernel`,
//! or UEFI firmware, [`VmConfig::firmware`], that boots the loader on the first disk's
//! ESP; disks as virtio-blk, memory, vCPUs, the accelerator, a swtpm's PCR banks, reboots
//! followed, a power cut [`KillAt`], write throttling [`Throttle`]);
//! [`VmConfig::command`] turns it into `qemu-system-x86_64`'s arguments (`-no-reboot`
//! unless reboots are followed) and [`VmConfig::boot_marker`] names the console text each
//! boot starts with ([`FIRMWARE_BOOT_MARKER`] under firmware, else
//! [`KERNEL_BOOT_MARKER`]).
//!
//! Limits: x86-64 guests on a `q35` machine only; the swtpm's arguments are added by the
//! watcher (`watch.rs`), not here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The accelerator. TCG is the default: KVM guests hang on the machines we test on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Tcg,
    Kvm,
}

impl Accel {
    /// From `VALIDATOR_ACCEL` (`tcg` or `kvm`), TCG when unset.
    pub fn from_env() -> Accel {
        match std::env::var("VALIDATOR_ACCEL").as_deref() {
            Ok("kvm") => Accel::Kvm,
            _ => Accel::Tcg,
        }
    }
}

/// What to boot.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Appended to the fixed `console=ttyS0 panic=-1`.
    pub append: String,
    /// Bytes appended after `append` (and a space), for bytes that are not UTF-8.
    pub append_raw: Vec<u8>,
    /// Raw disk images, attached as virtio-blk in order (`vda`, `vdb`, ...).
    pub disks: Vec<PathBuf>,
    pub memory_mib: u32,
    /// Virtual CPUs (default 1).
    pub cpus: u32,
    pub accel: Accel,
    pub timeout: Duration,
    /// Extra QEMU arguments (devices).
    pub extra_args: Vec<String>,
    /// A TPM 2.0 (swtpm) with these PCR banks, started for this VM alone.
    pub tpm: Option<Vec<String>>,
    /// Kill the swtpm when the console shows this text (a TPM failing mid-boot).
    pub kill_tpm_on: Option<String>,
    /// Commands to QEMU's human monitor once the console shows a text (a device
    /// hot-plugged into the running node).
    pub monitor_on: Option<MonitorAt>,
    /// Boot UEFI firmware (OVMF) from the disks instead of `-kernel`; `kernel`, `initrd`
    /// and `append` are then unused (the boot loader on the ESP names them).
    pub firmware: Option<crate::firmware::Ovmf>,
    /// Follow guest reboots (no `-no-reboot`): stop when this many boots have ended, that
    /// is when boot N+1 starts, or when QEMU exits, or at the timeout.
    pub follow_reboots: Option<u32>,
    /// Kill QEMU (SIGKILL, its whole process group) at a moment set by the console.
    pub kill_at: Option<KillAt>,
    /// Throttle writes to every disk.
    pub throttle: Option<Throttle>,
    /// Sectors (512 bytes, from the start of the first disk) whose reads fail with `EIO`,
    /// every time: QEMU's `blkdebug` under the raw format, and virtio-blk without request
    /// merging so only the requests holding them fail. A request fails when it holds any
    /// of them, so one sector per 4 KiB block is enough.
    pub read_errors: Vec<u64>,
    /// The console text that starts a boot, instead of [`VmConfig::boot_marker`]'s
    /// default (e.g. [`KERNEL_BOOT_MARKER`] under firmware to count kexec'd kernels too).
    pub split_at: Option<String>,
}

/// A power cut: SIGKILL to QEMU's process group `delay` after the `nth` (1-based)
/// occurrence of `text` on the console was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillAt {
    pub text: String,
    pub nth: u32,
    pub delay: Duration,
}

impl KillAt {
    /// At the first occurrence of `text`, after `delay`.
    pub fn on(text: &str, delay: Duration) -> KillAt {
        KillAt {
            text: text.into(),
            nth: 1,
            delay,
        }
    }
}

/// Commands for QEMU's human monitor (HMP, on the socket [`MONITOR_SOCKET`] in the run
/// directory), sent in order at the first occurrence of `text` on the console; the
/// monitor's answers go to `monitor.log` beside the console log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorAt {
    pub text: String,
    pub commands: Vec<String>,
}

/// The monitor's socket, beside the console log.
pub const MONITOR_SOCKET: &str = "monitor.sock";

/// QEMU block throttling on the disks' writes (`throttling.bps-write`,
/// `throttling.iops-write` on each `-drive`); `None` leaves that limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Throttle {
    pub bps_write: Option<u64>,
    pub iops_write: Option<u64>,
}

/// The console text that starts a boot under firmware: OVMF's boot manager prints it
/// each time it starts the boot loader, after every reset.
pub const FIRMWARE_BOOT_MARKER: &str = "BdsDxe: loading Boot";
/// The console text that starts a boot without firmware: the kernel's banner.
pub const KERNEL_BOOT_MARKER: &str = "Linux version ";

/// A VM's memory unless its scenario says otherwise.
pub const DEFAULT_MEMORY_MIB: u32 = 1024;

impl VmConfig {
    pub fn new(kernel: &Path, initrd: &Path) -> VmConfig {
        VmConfig {
            kernel: kernel.to_path_buf(),
            initrd: initrd.to_path_buf(),
            append: String::new(),
            append_raw: Vec::new(),
            disks: Vec::new(),
            memory_mib: DEFAULT_MEMORY_MIB,
            cpus: 1,
            accel: Accel::from_env(),
            timeout: Duration::from_secs(
                std::env::var("VALIDATOR_VM_TIMEOUT")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(120),
            ),
            extra_args: Vec::new(),
            tpm: Some(vec!["sha1".into(), "sha256".into()]),
            kill_tpm_on: None,
            monitor_on: None,
            firmware: None,
            follow_reboots: None,
            kill_at: None,
            throttle: None,
            read_errors: Vec::new(),
            split_at: None,
        }
    }

    /// A VM that boots `firmware` (OVMF) and, through it, the boot loader on its disk.
    pub fn uefi(firmware: crate::firmware::Ovmf) -> VmConfig {
        let mut c = VmConfig::new(Path::new(""), Path::new(""));
        c.firmware = Some(firmware);
        c
    }

    /// The console text each boot starts with: [`VmConfig::split_at`], else
    /// [`FIRMWARE_BOOT_MARKER`] under firmware (a kexec is then no new boot), else
    /// [`KERNEL_BOOT_MARKER`].
    pub fn boot_marker(&self) -> &str {
        if let Some(m) = &self.split_at {
            m
        } else if self.firmware.is_some() {
            FIRMWARE_BOOT_MARKER
        } else {
            KERNEL_BOOT_MARKER
        }
    }

    /// The kernel command line of a direct boot: the fixed part, `append`, `append_raw`.
    pub fn kernel_cmdline(&self) -> std::ffi::OsString {
        self.cmdline_with(None)
    }

    /// [`VmConfig::kernel_cmdline`] with `word` after the fixed part (the initramfs's
    /// place in a PVH boot, [`super::pvh`]).
    fn cmdline_with(&self, word: Option<&str>) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStringExt;
        let fixed = match word {
            Some(w) => format!("console=ttyS0 panic=-1 {w}"),
            None => "console=ttyS0 panic=-1".to_string(),
        };
        let mut line = format!("{fixed} {}", self.append)
            .trim_end()
            .as_bytes()
            .to_vec();
        if !self.append_raw.is_empty() {
            line.push(b' ');
            line.extend_from_slice(&self.append_raw);
        }
        std::ffi::OsString::from_vec(line)
    }

    /// The full QEMU command line.
    pub fn command(&self, console: &Path) -> Command {
        let mut c = Command::new("qemu-system-x86_64");
        let accel = match self.accel {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        };
        let cpu = match self.accel {
            Accel::Tcg => "max",
            Accel::Kvm => "host",
        };
        let smm = if self.firmware.as_ref().is_some_and(|f| f.smm) {
            ",smm=on"
        } else {
            ""
        };
        c.args(["-machine", &format!("q35,accel={accel}{smm}"), "-cpu", cpu])
            .args([
                "-m",
                &self.memory_mib.to_string(),
                "-smp",
                &self.cpus.to_string(),
            ])
            .args(["-nodefaults", "-display", "none", "-monitor", "none"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()));
        if self.follow_reboots.is_none() {
            c.arg("-no-reboot");
        }
        match &self.firmware {
            Some(fw) => {
                c.args(fw.qemu_args());
            }
            None => {
                // OVMF given through the extra arguments boots `-kernel` by its EFI stub:
                // the image, always.
                let uefi = self
                    .extra_args
                    .iter()
                    .any(|a| a.contains("if=pflash") || a == "-bios");
                let pvh = (!uefi)
                    .then(|| super::pvh::direct(&self.kernel, &self.initrd, self.memory_mib))
                    .flatten();
                match pvh {
                    Some(d) => {
                        c.args(d.args(&self.initrd))
                            .arg("-append")
                            .arg(self.cmdline_with(Some(&d.words())));
                    }
                    None => {
                        c.arg("-kernel")
                            .arg(&self.kernel)
                            .arg("-initrd")
                            .arg(&self.initrd)
                            .arg("-append")
                            .arg(self.kernel_cmdline());
                    }
                }
            }
        }
        let mut throttle = String::new();
        if let Some(t) = &self.throttle {
            if let Some(b) = t.bps_write {
                throttle.push_str(&format!(",throttling.bps-write={b}"));
            }
            if let Some(n) = t.iops_write {
                throttle.push_str(&format!(",throttling.iops-write={n}"));
            }
        }
        for (i, d) in self.disks.iter().enumerate() {
            if i == 0 && !self.read_errors.is_empty() {
                let mut drive = format!(
                    "format=raw,if=none,id=d{i},cache=unsafe{throttle},file.driver=blkdebug,file.image.filename={}",
                    d.display()
                );
                for (n, sector) in self.read_errors.iter().enumerate() {
                    drive.push_str(&format!(
                        ",file.inject-error.{n}.event=read_aio,file.inject-error.{n}.errno=5,file.inject-error.{n}.sector={sector}"
                    ));
                }
                c.arg("-drive").arg(drive).args([
                    "-device",
                    &format!("virtio-blk-pci,drive=d{i},request-merging=off"),
                ]);
                continue;
            }
            c.arg("-drive")
                .arg(format!(
                    "file={},format=raw,if=none,id=d{i},cache=unsafe{throttle}",
                    d.display()
                ))
                .args(["-device", &format!("virtio-blk-pci,drive=d{i}")]);
        }
        if self.monitor_on.is_some() {
            let sock = console.with_file_name(MONITOR_SOCKET);
            c.arg("-chardev")
                .arg(format!(
                    "socket,id=hmp,path={},server=on,wait=off",
                    sock.display()
                ))
                .args(["-mon", "chardev=hmp,mode=readline"]);
        }
        c.args(&self.extra_args);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_for_firmware_reboots_and_throttling() {
        let args = |c: &VmConfig| -> Vec<String> {
            c.command(Path::new("/c.log"))
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let mut c = VmConfig::new(Path::new("/k"), Path::new("/i"));
        c.disks.push("/d.img".into());
        let a = args(&c);
        assert!(a.contains(&"-no-reboot".to_string()));
        assert!(a.contains(&"-kernel".to_string()));
        assert_eq!(c.boot_marker(), KERNEL_BOOT_MARKER);
        c.firmware = Some(crate::firmware::Ovmf {
            code: "/code.fd".into(),
            vars: "/vars.fd".into(),
            smm: false,
        });
        c.follow_reboots = Some(2);
        c.throttle = Some(Throttle {
            bps_write: Some(4096),
            iops_write: None,
        });
        let a = args(&c);
        assert!(!a.contains(&"-no-reboot".to_string()));
        assert!(!a.contains(&"-kernel".to_string()));
        assert!(a.contains(&"if=pflash,format=raw,unit=0,readonly=on,file=/code.fd".to_string()));
        assert!(a.contains(&"if=pflash,format=raw,unit=1,file=/vars.fd".to_string()));
        assert!(a.contains(
            &"file=/d.img,format=raw,if=none,id=d0,cache=unsafe,throttling.bps-write=4096"
                .to_string()
        ));
        assert_eq!(c.boot_marker(), FIRMWARE_BOOT_MARKER);
    }
}

//! The time to recover from a bad slot (`qemu-harness bench-recover`, `scripts/bench
//! recover`): the A/B node whose slot A has an image fault falls back by kexec and by a
//! reboot through OVMF + GRUB, and slot B is booted directly, in turn. The kexec path is
//! printed in parts against its floor (A's time to decide plus B's direct boot), with the
//! kernel's own share apart: what `kexec_file_load(2)` took (the init logs it), and the
//! SHA-256 the kernel does on that path: `kexec_file_load` hashes every segment it loads
//! (B's kernel to its boot-protocol `init_size`, its initramfs) and purgatory hashes them
//! again before the jump, at the rate the kernel's `tcrypt` measures in a VM of the same
//! kind in the same run ([`guest_sha256`]; also with the kernel's `sha256-ssse3` module
//! loaded, which the init does not load: the rate it would give).
//!
//! Limits: host seconds from the console under TCG by default; purgatory prints nothing,
//! so its share is the bytes it hashes over the guest kernel's measured rate (the same
//! generic C SHA-256 code), an estimate, not a reading.

use std::path::Path;

use crate::bench::{median, reached_b};
use crate::scenario::{Name, Scenario};
use crate::vm;
use crate::HarnessError;

/// One fallback by kexec, in parts (host seconds from the console): slot A's kernel start
/// to its decision, the decision to the kexec (the slot writes, staging and
/// `kexec_file_load`), the kexec to slot B's kernel start (purgatory, the jump), and B's
/// kernel start to its root's init.
#[derive(Debug, Clone, Copy, Default)]
pub struct KexecParts {
    pub a_decide: f64,
    pub to_kexec: f64,
    /// Of `to_kexec`: `kexec_file_load(2)` itself, as the init logged it.
    pub kernel_load: f64,
    pub to_b_kernel: f64,
    pub b_boot: f64,
}

impl KexecParts {
    pub fn whole(&self) -> f64 {
        self.a_decide + self.to_kexec + self.to_b_kernel + self.b_boot
    }
}

/// The times [`bench_recover`] measured, per run.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    pub kexec: Vec<KexecParts>,
    /// Slot B booted directly (OVMF + GRUB picking B): from GRUB starting to load it (its
    /// kernel and initramfs read, the kernel's EFI stub and decompression: what the kexec
    /// path does between A's decision and B's kernel) to B's root.
    pub b_direct: Vec<f64>,
    /// By a reboot through OVMF + GRUB, slot A's kernel start to B's root.
    pub reboot: Vec<f64>,
    /// What the kernel hashes on the kexec path, and how fast it hashes.
    pub hashing: Option<KernelHashing>,
}

/// The SHA-256 the kernel does on the kexec path: `kexec_file_load` digests each segment
/// to its in-memory size (`kexec_calculate_store_digests`, zeros past the file included)
/// and purgatory checks the same digest before the jump.
#[derive(Debug, Clone, Default)]
pub struct KernelHashing {
    /// B's kernel in memory: its boot protocol's `init_size`, page-aligned.
    pub kernel_bytes: u64,
    /// The initramfs given to `kexec_file_load` (B's, with A's report appended), aligned.
    pub initrd_bytes: u64,
    /// The guest kernel's SHA-256 ([`guest_sha256`]).
    pub rate: GuestSha256,
}

impl KernelHashing {
    /// Seconds of SHA-256 at the measured rate: one pass in `kexec_file_load`, one in
    /// purgatory.
    pub fn seconds(&self) -> f64 {
        2.0 * validator::util::as_f64(self.kernel_bytes + self.initrd_bytes) / self.rate.bytes_per_s
    }
}

/// The guest kernel's SHA-256 rate as its `tcrypt` module prints it.
#[derive(Debug, Clone, Default)]
pub struct GuestSha256 {
    /// The crypto driver `tcrypt` used (`sha256-generic` when no accelerated one is loaded,
    /// as on the kexec path: the init loads none).
    pub driver: String,
    /// Bytes a second over 8192-byte blocks.
    pub bytes_per_s: f64,
}

/// Slot A's text that ends its time to decide.
pub const DECISION_MARKER: &str = "validator: decision: ";
/// GRUB's words when it starts loading slot B's kernel and initramfs (the shipped
/// `grub.cfg`'s menu entry).
pub const GRUB_BOOTS_B: &str = "Booting `slot B'";
/// The kernel's last words before a kexec.
pub const KEXEC_MARKER: &str = "kexec_core: Starting new kernel";
/// The line the tcrypt VM prints before each line of `tcrypt`'s it passes on.
const TCRYPT_MARKER: &str = "TCRYPT-SHA256: ";

/// The whole number just before `words` on the first console line that holds them
/// ("(N bytes)"), or just after them (`after`: "returned in N ms").
fn number_near(console: &str, words: &str, after: bool) -> Option<u64> {
    let line = console.lines().find(|l| l.contains(words))?;
    let (before, rest) = line.split_once(words)?;
    let token = if after {
        rest.split_whitespace().next()?
    } else {
        before.split_whitespace().last()?
    };
    token
        .trim_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// Boots `kernel` (directly, one vCPU, the bench's accelerator) with a busybox initramfs
/// that loads the kernel's own `tcrypt` module (`mode=304 sec=1`: SHA-256 speed for one
/// second per block size) and passes on its first 8192-byte line; with `accelerated`, the
/// kernel's `sha256-ssse3` module (SSSE3, AVX, AVX2 and SHA-NI code, the best the CPU
/// has) is loaded first. `dir` is the run directory.
pub fn guest_sha256(
    kernel: &crate::paths::Kernel,
    accelerated: bool,
    dir: &Path,
) -> Result<GuestSha256, HarnessError> {
    let io = |p: &Path, e: std::io::Error| HarnessError::Setup(format!("{}: {e}", p.display()));
    let modules = kernel.root.join("lib/modules").join(&kernel.release);
    let read = |rel: &str| {
        let p = modules.join(rel);
        std::fs::read(&p).map_err(|e| io(&p, e))
    };
    let module = read("kernel/crypto/tcrypt.ko")?;
    let simd = if accelerated {
        Some(read("kernel/arch/x86/crypto/sha256-ssse3.ko")?)
    } else {
        None
    };
    // The last size's figures may come as a record of their own after its header line, and
    // only once the next test has started: wait for the second pass's header (or the end).
    let script = format!(
        "#!/bin/sh\n\
         export PATH=/bin\n\
         mount -t proc proc /proc\n\
         mount -t devtmpfs dev /dev\n\
         [ -e /sha256-ssse3.ko ] && insmod /sha256-ssse3.ko\n\
         insmod /tcrypt.ko mode=304 sec=1 &\n\
         p=$!\n\
         while [ $(dmesg | grep -c 'testing speed of') -lt 2 ] && kill -0 $p; do\n\
         \x20 sleep 0.2\n\
         done\n\
         dmesg | grep -m 1 'testing speed of' | while read -r l; do echo \"{TCRYPT_MARKER}$l\"; done\n\
         dmesg | grep -m 1 -A 1 '8192 bytes per update' | while read -r l; do echo \"{TCRYPT_MARKER}$l\"; done\n\
         poweroff -f\n"
    );
    let cpio_err = |e| HarnessError::Setup(format!("tcrypt initramfs: {e}"));
    let mut cpio = crate::rootfs::busybox_initramfs(
        &["proc"],
        &[
            "sh", "mount", "insmod", "dmesg", "grep", "sleep", "poweroff",
        ],
    )?;
    cpio.file("init", script.into_bytes(), 0o755)
        .map_err(cpio_err)?;
    cpio.file("tcrypt.ko", module, 0o644).map_err(cpio_err)?;
    if let Some(m) = simd {
        cpio.file("sha256-ssse3.ko", m, 0o644).map_err(cpio_err)?;
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let initrd = dir.join("tcrypt-initrd.cpio");
    std::fs::write(&initrd, cpio.write(0)).map_err(|e| io(&initrd, e))?;
    let mut cfg = vm::VmConfig::new(&kernel.vmlinuz, &initrd);
    cfg.tpm = None;
    cfg.append = "quiet".into();
    let o = vm::run(&cfg, dir)?;
    let lines: Vec<&str> = o
        .console
        .lines()
        .filter_map(|l| l.split_once(TCRYPT_MARKER).map(|(_, t)| t))
        .collect();
    let fail = || HarnessError::Setup(format!("tcrypt: no SHA-256 speed line: {}", o.describe()));
    // "testing speed of async sha256 (sha256-generic)"
    let driver = lines
        .iter()
        .find_map(|l| l.split_once("sha256 (")?.1.split(')').next())
        .ok_or_else(fail)?
        .to_string();
    // "... 8192 bytes per update, 1 updates): 11509 opers/sec, 94281728 bytes/sec", the
    // figures on that line or the next.
    let at = lines
        .iter()
        .position(|l| l.contains("8192 bytes per update"))
        .ok_or_else(fail)?;
    let bytes_per_s = lines[at..]
        .iter()
        .take(2)
        .find_map(|l| number_near(l, "bytes/sec", false))
        .filter(|r| *r > 0)
        .map(validator::util::as_f64)
        .ok_or_else(fail)?;
    Ok(GuestSha256 {
        driver,
        bytes_per_s,
    })
}

/// Boots the A/B node whose slot A has an image fault `runs` times each way, in turn, from
/// the same boot-loader state: falling back by kexec, by a reboot through OVMF + GRUB, and
/// slot B booted directly (GRUB told slot A is not good). Prints each run and the medians:
/// the kexec path in parts, against its floor: A's time to decide plus B's direct boot
/// from the moment GRUB starts loading it (so both sides load and decompress B's kernel),
/// then the kernel's share of the difference ([`KernelHashing`], measured after the runs).
pub fn bench_recover(runs: usize) -> Result<Recovery, HarnessError> {
    let scenario = Scenario::named(Name::AbImageFault)?;
    let kernel = scenario.kernel.clone();
    let kexec_bed = scenario.bed()?;
    let reboot_bed = Scenario::named(Name::AbImageFaultReboot)?.bed()?;
    let mut direct = Scenario::named(Name::AbImageFault)?;
    direct.name = "ab-b-direct".into();
    let direct_bed = direct.bed()?;
    let b_kernel = kexec_bed.esp()?.read("/B/vmlinuz")?;
    let kernel_bytes = validator::formats::vmlinuz::init_size(&b_kernel)
        .ok_or_else(|| HarnessError::Setup("slot B's vmlinuz: no boot-protocol header".into()))?;
    let mut out = Recovery::default();
    let mut initrd_bytes = 0u64;
    for i in 0..runs.max(1) {
        // Fallback by kexec.
        kexec_bed.reset_boot_state()?;
        let r = kexec_bed.boot()?;
        let at = reached_b(&r, "kexec", 2)?;
        let a_start = at(0, vm::KERNEL_BOOT_MARKER)?;
        let decided = at(0, DECISION_MARKER)?;
        let kexec = at(0, KEXEC_MARKER)?;
        let b_start = at(1, vm::KERNEL_BOOT_MARKER)?;
        let b_root = at(1, crate::rootfs::MARKER)?;
        let a = &r.boots[0].console;
        let logged = |words: &str, after: bool| {
            number_near(a, words, after).ok_or_else(|| {
                HarnessError::Setup(format!(
                    "kexec: no {words:?} in slot A's log: {}",
                    r.describe()
                ))
            })
        };
        let load_ms = logged(validator::runtime::slot::KERNEL_LOAD_LOG, true)?;
        let kernel_load = validator::util::as_f64(load_ms) / 1000.0;
        // "slot: kexec_file_load .../vmlinuz with .../initrd.img (N bytes), ..."
        initrd_bytes = logged(" bytes), command line", false)?.next_multiple_of(4096);
        let parts = KexecParts {
            a_decide: decided - a_start,
            to_kexec: kexec - decided,
            kernel_load,
            to_b_kernel: b_start - kexec,
            b_boot: b_root - b_start,
        };
        println!(
            "run {}: kexec: {:.2} s = A decides {:.2} + to the kexec {:.2} (kexec_file_load \
             {:.2}) + to B's kernel {:.2} + B to its root {:.2}",
            i + 1,
            parts.whole(),
            parts.a_decide,
            parts.to_kexec,
            parts.kernel_load,
            parts.to_b_kernel,
            parts.b_boot
        );
        out.kexec.push(parts);

        // Slot B booted directly: GRUB skips A.
        direct_bed.reset_boot_state()?;
        direct_bed
            .esp()?
            .grubenv_set(&direct_bed.dir, &[("A_OK", "0")])?;
        let r = direct_bed.boot()?;
        let at = reached_b(&r, "B direct", 1)?;
        let (start, kernel) = (at(0, GRUB_BOOTS_B)?, at(0, vm::KERNEL_BOOT_MARKER)?);
        let root = at(0, crate::rootfs::MARKER)?;
        let b = root - start;
        println!(
            "run {}: slot B directly: {b:.2} s = GRUB to B's kernel {:.2} + B to its root {:.2}",
            i + 1,
            kernel - start,
            root - kernel
        );
        out.b_direct.push(b);

        // Fallback by reboot.
        reboot_bed.reset_boot_state()?;
        let r = reboot_bed.boot()?;
        let at = reached_b(&r, "reboot", 2)?;
        let secs = at(1, crate::rootfs::MARKER)? - at(0, vm::KERNEL_BOOT_MARKER)?;
        println!(
            "run {}: reboot: {secs:.2} s from slot A's kernel to slot B's root",
            i + 1
        );
        out.reboot.push(secs);
    }
    let rate = guest_sha256(&kernel, false, &kexec_bed.dir.join("tcrypt"))?;
    let simd = guest_sha256(&kernel, true, &kexec_bed.dir.join("tcrypt-simd"))?;
    let hashing = KernelHashing {
        kernel_bytes,
        initrd_bytes,
        rate,
    };
    let med = |f: &dyn Fn(&KexecParts) -> f64| median(&out.kexec.iter().map(f).collect::<Vec<_>>());
    let whole = med(&|p| p.whole());
    let a = med(&|p| p.a_decide);
    let b_direct = median(&out.b_direct);
    let floor = a + b_direct;
    println!(
        "time to recover (bad slot's kernel start -> good slot's root init), host seconds, \
         median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!(
        "by kexec                          {whole:>7.2} s   {:>5.2} x floor",
        whole / floor
    );
    println!("  slot A: kernel to decision      {a:>7.2} s");
    println!(
        "  decision to kexec               {:>7.2} s   (kexec_file_load {:.2} s)",
        med(&|p| p.to_kexec),
        med(&|p| p.kernel_load)
    );
    println!(
        "  kexec to slot B's kernel        {:>7.2} s",
        med(&|p| p.to_b_kernel)
    );
    println!(
        "  slot B: kernel to root          {:>7.2} s",
        med(&|p| p.b_boot)
    );
    println!("floor: A's decision + B direct    {floor:>7.2} s   (B direct {b_direct:.2} s)");
    let reboot = median(&out.reboot);
    println!(
        "by reboot (OVMF + GRUB)           {reboot:>7.2} s   {:>5.2} x floor, {:.2} x kexec",
        reboot / floor,
        reboot / whole
    );
    let mib = |b: u64| validator::util::as_f64(b) / f64::from(1u32 << 20);
    let h = hashing.seconds();
    println!(
        "the kernel's SHA-256 on the kexec path: B's kernel {:.1} MiB (init_size) + initramfs \
         {:.1} MiB, hashed by kexec_file_load and again by purgatory, at {:.0} MB/s \
         ({}, tcrypt in this guest): {h:.2} s",
        mib(hashing.kernel_bytes),
        mib(hashing.initrd_bytes),
        hashing.rate.bytes_per_s / 1e6,
        hashing.rate.driver
    );
    println!(
        "by kexec less that hashing        {:>7.2} s   {:>5.2} x floor",
        whole - h,
        (whole - h) / floor
    );
    println!(
        "(with the kernel's sha256-ssse3 module loaded, tcrypt in this guest uses {} at {:.0} MB/s)",
        simd.driver,
        simd.bytes_per_s / 1e6
    );
    out.hashing = Some(hashing);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_next_to_their_words() {
        let log = "[ 3.66] validator: slot: kexec_file_load /a with /b (2828516 bytes), command line \"x\"\n\
                   [ 5.03] validator: slot: kexec_file_load returned in 1375 ms\n";
        assert_eq!(
            number_near(log, " bytes), command line", false),
            Some(2_828_516)
        );
        assert_eq!(
            number_near(log, "kexec_file_load returned in", true),
            Some(1375)
        );
        let tcrypt = "tcrypt: test 21 ( 8192 byte blocks, 8192 bytes per update,   1 updates):   11509 opers/sec,  94281728 bytes/sec";
        assert_eq!(number_near(tcrypt, "bytes/sec", false), Some(94_281_728));
        assert_eq!(number_near(log, "absent words", true), None);
    }
}

//! The Secure Boot node against today's A/B node, side by side in one run: the boot of
//! slot A to its root (`node` through OVMF and GRUB made by `grub-mkstandalone`, `sb-node`
//! through OVMF with Secure Boot on, Debian's signed shim and GRUB), and the time to
//! recover from a bad image by kexec (`ab-image-fault` and `sb-fallback`: slot A's kernel
//! start to slot B's root). The scenarios alternate within each run; medians and the
//! Secure Boot node's ratio to the A/B node are printed (`qemu-harness bench-secure-boot`).

use crate::bench::{median, reached_b};
use crate::scenario::{Name, Scenario};
use crate::vm;
use crate::HarnessError;

/// Medians, host seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecureBootBench {
    pub ab_boot: f64,
    pub sb_boot: f64,
    pub ab_recover: f64,
    pub sb_recover: f64,
}

/// Runs the comparison `runs` times.
pub fn bench_secure_boot(runs: usize) -> Result<SecureBootBench, HarnessError> {
    let boots = [
        (Name::Node, Scenario::named(Name::Node)?.bed()?),
        (Name::SbNode, Scenario::named(Name::SbNode)?.bed()?),
    ];
    let falls = [
        (
            Name::AbImageFault,
            Scenario::named(Name::AbImageFault)?.bed()?,
        ),
        (Name::SbFallback, Scenario::named(Name::SbFallback)?.bed()?),
    ];
    let mut boot_s: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut recover_s: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for i in 0..runs.max(1) {
        for (k, (name, bed)) in boots.iter().enumerate() {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let root = r.seen_at(0, crate::rootfs::MARKER).ok_or_else(|| {
                HarnessError::Setup(format!(
                    "{name}: the root was not reached: {}",
                    r.describe()
                ))
            })?;
            let secs = root.as_secs_f64();
            println!(
                "run {}: {name}: QEMU start to slot A's root {secs:.2} s",
                i + 1
            );
            boot_s[k].push(secs);
        }
        for (k, (name, bed)) in falls.iter().enumerate() {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let at = reached_b(&r, name.as_str(), 2)?;
            let secs = at(1, crate::rootfs::MARKER)? - at(0, vm::KERNEL_BOOT_MARKER)?;
            println!(
                "run {}: {name}: slot A's kernel to slot B's root by kexec {secs:.2} s",
                i + 1
            );
            recover_s[k].push(secs);
        }
    }
    let out = SecureBootBench {
        ab_boot: median(&boot_s[0]),
        sb_boot: median(&boot_s[1]),
        ab_recover: median(&recover_s[0]),
        sb_recover: median(&recover_s[1]),
    };
    println!(
        "Secure Boot node vs A/B node, host seconds, median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!("                         A/B node   Secure Boot   ratio");
    println!(
        "boot to slot A's root    {:>7.2} s   {:>9.2} s   {:>5.2}",
        out.ab_boot,
        out.sb_boot,
        out.sb_boot / out.ab_boot
    );
    println!(
        "recover by kexec         {:>7.2} s   {:>9.2} s   {:>5.2}",
        out.ab_recover,
        out.sb_recover,
        out.sb_recover / out.ab_recover
    );
    Ok(out)
}

//! The real root against the busybox root, side by side in one run: the Secure Boot node's
//! slot A booted with the busybox script as its root (`sb-node`) and with Debian 12 and
//! systemd (`real-node`), in turn. Per boot: the kernel's start to the gate's handover
//! (`switch_root`), the kernel's start to the root being up (busybox: its init's first
//! line in the kernel log; Debian: `multi-user.target` active, systemd's own
//! `ActiveEnterTimestampMonotonic`, on the same clock) and QEMU's start to that. Medians
//! and the ratio are printed (`qemu-harness bench-real-root`, `scripts/bench real-root`).

use crate::bench::median;
use crate::scenario::{Name, Scenario};
use crate::vm::{self, Outcome};
use crate::HarnessError;

/// Seconds since the kernel started when the root was up: `multi-user.target` active
/// (Debian) or the root init's first line (busybox).
fn root_up(o: &Outcome) -> Option<f64> {
    let system = o
        .console
        .lines()
        .find_map(|l| l.strip_prefix(crate::debroot::SYSTEM));
    match system {
        Some(line) => line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("at_us="))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|us| us / 1e6),
        None => o.kernel_time_of(crate::rootfs::KMSG_MARKER),
    }
}

/// Runs the comparison `runs` times; returns the medians of (kernel to handover, kernel
/// to root up) for `sb-node` and `real-node`.
pub fn bench_real_root(runs: usize) -> Result<[[f64; 3]; 2], HarnessError> {
    let names = [Name::SbNode, Name::RealNode];
    let beds = [
        Scenario::named(names[0])?.bed()?,
        Scenario::named(names[1])?.bed()?,
    ];
    let mut samples: [[Vec<f64>; 3]; 2] = Default::default();
    for i in 0..runs.max(1) {
        for (k, bed) in beds.iter().enumerate() {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let o = r.boots.first().ok_or_else(|| {
                HarnessError::Setup(format!("{}: no boot: {}", names[k], r.describe()))
            })?;
            let fail = |what: &str| {
                HarnessError::Setup(format!("{}: no {what}: {}", names[k], r.describe()))
            };
            let handover = o
                .kernel_time_of("switch_root: executing")
                .ok_or_else(|| fail("handover"))?;
            let up = root_up(o).ok_or_else(|| fail("root"))?;
            let wall = r
                .seen_at(0, crate::rootfs::MARKER)
                .ok_or_else(|| fail("root marker"))?
                .as_secs_f64();
            println!(
                "run {}: {}: kernel to handover {handover:.2} s, kernel to root up {up:.2} s, \
                 QEMU start to root up {wall:.2} s",
                i + 1,
                names[k]
            );
            for (v, s) in [handover, up, wall].into_iter().zip(samples[k].iter_mut()) {
                s.push(v);
            }
        }
    }
    let m = samples.map(|per| per.map(|s| median(&s)));
    println!(
        "real root (Debian 12, systemd to multi-user.target) vs busybox root, Secure Boot node, \
         host seconds, median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!("                                  busybox    Debian+systemd   ratio");
    for (j, what) in [
        "kernel start -> gate's handover",
        "kernel start -> root up",
        "QEMU start -> root up (wall)",
    ]
    .iter()
    .enumerate()
    {
        println!(
            "{what:<33} {:>7.2} s   {:>12.2} s   {:>5.2}",
            m[0][j],
            m[1][j],
            m[1][j] / m[0][j]
        );
    }
    Ok(m)
}

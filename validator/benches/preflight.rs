//! The preflight's wait for mlx5 ports and NVMe controllers: what one look at them costs
//! against the interval it is repeated at while the node waits
//! ([`validator::stages::preflight::LINK_POLL`]), over the HGX H200 fixture's sysfs (eight
//! InfiniBand ports, two Ethernet ports, their netdevs, the NVMe controllers), in the same
//! run. The ratio is the share of one core the wait takes; the interval is also how long a
//! port that comes up can wait to be seen.
//!
//! `cargo bench -p validator --bench preflight -- [LOOKS]` (default 2000). Not a test: it
//! prints, and a failed setup step stops it with a panic.
#![expect(
    clippy::expect_used,
    reason = "benchmark code: a failed setup step should stop the run loudly"
)]

use std::time::{Duration, Instant};
use validator::stages::preflight::{mlx5, nvme, pci, HwRoots, LINK_POLL};

/// Best of this many timed runs (the machines this runs on are shared).
const RUNS: usize = 5;

fn main() {
    let looks: u32 = test_support::bench::count_arg(2000u32).max(1);
    let ws = test_support::bench::workspace_root();
    let bom = validator::config::bom::load(&ws.join("examples/hgx-h200-training.toml"))
        .expect("the example BOM loads")
        .bom;
    let dir = ws.join("validator/tests/fixtures/hw/good");
    let roots = HwRoots {
        sys: dir.join("sys"),
        proc: dir.join("proc"),
        root: dir.join("root"),
    };
    let (devices, issues) = pci::scan(&roots.sys);
    assert!(issues.is_empty(), "{issues:?}");
    let inv = pci::Inventory::new(&devices, &bom.hardware);
    let look = || {
        let (ports, _, a) = mlx5::check(&roots, &bom.hardware, &inv);
        let (ctrls, _, b) = nvme::check(&roots, &bom.hardware);
        (ports.len(), ctrls.len(), a || b)
    };
    let (ports, ctrls, settling) = look();
    assert!(
        ports > 0 && ctrls > 0 && !settling,
        "{ports} {ctrls} {settling}"
    );
    let mut best = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        for _ in 0..looks {
            std::hint::black_box(look());
        }
        best = best.min(t.elapsed() / looks);
    }
    let look_s = best.as_secs_f64();
    println!(
        "one look at {ports} mlx5 port(s) and {ctrls} NVMe controller(s) (fixture `good`): \
         {:.0} us (best of {RUNS} x {looks})",
        look_s * 1e6
    );
    let old = Duration::from_millis(500);
    for (what, poll) in [("was", old), ("now", LINK_POLL)] {
        println!(
            "  poll every {:>3} ms ({what}): one look / interval {:.4} (share of one core while \
             waiting); a port that comes up is seen after at most {} ms, {} ms on average",
            poll.as_millis(),
            look_s / poll.as_secs_f64(),
            poll.as_millis(),
            poll.as_millis() / 2
        );
    }
}

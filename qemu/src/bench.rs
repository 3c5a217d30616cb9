//! Initramfs benchmark: the same kernel and root disk booted alternately with Debian's own
//! initramfs-tools image and with ours, timed from the kernel's "Run /init" to the root
//! init's marker, both read from kernel log timestamps (the root's init writes its marker
//! to `/dev/kmsg`), so both ends are on one clock. Medians and ratios are printed.

use std::path::{Path, PathBuf};

use crate::scenario::Scenario;
use crate::vm::{self, Outcome, Verdict};
use crate::HarnessError;

/// One boot's times, in seconds of guest uptime.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub run_init: f64,
    pub marker: f64,
}

impl Sample {
    pub fn initramfs_time(&self) -> f64 {
        self.marker - self.run_init
    }
}

fn sample(o: &Outcome) -> Result<Sample, HarnessError> {
    if o.verdict != Verdict::RootInitReached {
        return Err(HarnessError::Setup(format!(
            "benchmark boot did not reach the root: {}",
            o.describe()
        )));
    }
    let run_init = o
        .kernel_time_of("Run /init as init process")
        .ok_or_else(|| HarnessError::Setup(format!("no 'Run /init' line: {}", o.describe())))?;
    let marker = o
        .kernel_time_of(crate::rootfs::KMSG_MARKER)
        .ok_or_else(|| {
            HarnessError::Setup(format!(
                "no root marker in the kernel log: {}",
                o.describe()
            ))
        })?;
    Ok(Sample { run_init, marker })
}

/// Median of a non-empty list.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Debian's initramfs for `release` (`/boot/initrd.img-<release>`, made by installing the
/// distro kernel package; `scripts/bench` does that).
pub fn debian_initrd(release: &str) -> PathBuf {
    PathBuf::from(format!("/boot/initrd.img-{release}"))
}

/// Runs the benchmark and prints its table; returns (ours, debian) samples.
pub fn run(
    runs: usize,
    debian: Option<&Path>,
    cpus: u32,
) -> Result<(Vec<Sample>, Vec<Sample>), HarnessError> {
    let s = Scenario::good()?;
    let dir = crate::paths::run_dir("bench")?;
    let mut ours_cfg = s.prepare(&dir)?;
    ours_cfg.cpus = cpus;
    let deb = debian
        .map(Path::to_path_buf)
        .unwrap_or_else(|| debian_initrd(&s.kernel.release));
    if !deb.is_file() {
        return Err(HarnessError::Setup(format!(
            "{} not found: install the distro kernel package first (scripts/bench does)",
            deb.display()
        )));
    }
    let mut deb_cfg = ours_cfg.clone();
    deb_cfg.initrd = deb.clone();
    deb_cfg.append = "root=PARTLABEL=root ro".into();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let (ours_size, deb_size) = (size(&ours_cfg.initrd), size(&deb));
    let mut ours = Vec::new();
    let mut debs = Vec::new();
    for i in 0..runs {
        let d1 = dir.join(format!("ours-{i}"));
        let d2 = dir.join(format!("debian-{i}"));
        for d in [&d1, &d2] {
            std::fs::create_dir_all(d).map_err(|e| HarnessError::io(d, e))?;
        }
        let o = sample(&vm::run(&ours_cfg, &d1)?)?;
        let d = sample(&vm::run(&deb_cfg, &d2)?)?;
        println!(
            "run {}: ours {:.3} s (Run /init at {:.3}), debian {:.3} s (Run /init at {:.3})",
            i + 1,
            o.initramfs_time(),
            o.run_init,
            d.initramfs_time(),
            d.run_init
        );
        ours.push(o);
        debs.push(d);
    }
    let mo = median(&ours.iter().map(Sample::initramfs_time).collect::<Vec<_>>());
    let md = median(&debs.iter().map(Sample::initramfs_time).collect::<Vec<_>>());
    let mo_total = median(&ours.iter().map(|s| s.marker).collect::<Vec<_>>());
    let md_total = median(&debs.iter().map(|s| s.marker).collect::<Vec<_>>());
    println!(
        "kernel {} under {:?}, {runs} boots each, alternating",
        s.kernel.release, ours_cfg.accel
    );
    println!("                      ours        debian      ours/debian");
    println!(
        "Run /init -> root     {mo:>8.3} s  {md:>8.3} s  {:>8.3}",
        mo / md
    );
    println!(
        "boot -> root (total)  {mo_total:>8.3} s  {md_total:>8.3} s  {:>8.3}",
        mo_total / md_total
    );
    println!(
        "image size            {:>8.2} MB {:>8.2} MB {:>8.3}",
        ours_size as f64 / 1e6,
        deb_size as f64 / 1e6,
        ours_size as f64 / deb_size as f64
    );
    Ok((ours, debs))
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&[]).is_nan());
    }
}

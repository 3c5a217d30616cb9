//! Initramfs benchmark: the same kernel and root disk booted in turn with ours, with
//! Debian's own initramfs-tools image and with the floor ([`crate::floor`]: busybox doing
//! only `insmod` of the same modules, the mount and `switch_root`), timed from the
//! kernel's "Run /init" to the root init's marker, both read from kernel log timestamps
//! (the root's init writes its marker to `/dev/kmsg`), so both ends are on one clock.
//! Medians and ratios are printed: ours/debian, and ours/floor (what our checks cost over
//! what the kernel itself spends).

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

/// The samples of one benchmark run.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    pub ours: Vec<Sample>,
    pub debian: Vec<Sample>,
    pub floor: Vec<Sample>,
}

/// Runs the benchmark and prints its table.
pub fn run(runs: usize, debian: Option<&Path>, cpus: u32) -> Result<Samples, HarnessError> {
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
    let mut floor_cfg = ours_cfg.clone();
    floor_cfg.initrd = crate::floor::build(&s, &dir)?;
    floor_cfg.append = String::new();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let sizes = [size(&ours_cfg.initrd), size(&deb), size(&floor_cfg.initrd)];
    let mut all = Samples::default();
    for i in 0..runs {
        let one = |what: &str, cfg: &vm::VmConfig| -> Result<Sample, HarnessError> {
            let d = dir.join(format!("{what}-{i}"));
            std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
            sample(&vm::run(cfg, &d)?)
        };
        let o = one("ours", &ours_cfg)?;
        let d = one("debian", &deb_cfg)?;
        let f = one("floor", &floor_cfg)?;
        println!(
            "run {}: ours {:.3} s, debian {:.3} s, floor {:.3} s (Run /init at {:.3} / {:.3} / {:.3})",
            i + 1,
            o.initramfs_time(),
            d.initramfs_time(),
            f.initramfs_time(),
            o.run_init,
            d.run_init,
            f.run_init
        );
        all.ours.push(o);
        all.debian.push(d);
        all.floor.push(f);
    }
    let med = |v: &[Sample], f: fn(&Sample) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let t = |v: &[Sample]| med(v, Sample::initramfs_time);
    let total = |v: &[Sample]| med(v, |s| s.marker);
    let (mo, md, mf) = (t(&all.ours), t(&all.debian), t(&all.floor));
    let (to, td, tf) = (total(&all.ours), total(&all.debian), total(&all.floor));
    println!(
        "kernel {} under {:?}, {cpus} CPU(s), {runs} boots each, in turn",
        s.kernel.release, ours_cfg.accel
    );
    println!("                      ours        debian      floor       ours/debian ours/floor");
    println!(
        "Run /init -> root     {mo:>8.3} s  {md:>8.3} s  {mf:>8.3} s  {:>8.3}    {:>8.3}",
        mo / md,
        mo / mf
    );
    println!(
        "boot -> root (total)  {to:>8.3} s  {td:>8.3} s  {tf:>8.3} s  {:>8.3}    {:>8.3}",
        to / td,
        to / tf
    );
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "image size            {:>8.2} MB {:>8.2} MB {:>8.2} MB {:>8.3}    {:>8.3}",
        mb(sizes[0]),
        mb(sizes[1]),
        mb(sizes[2]),
        sizes[0] as f64 / sizes[1] as f64,
        sizes[0] as f64 / sizes[2] as f64
    );
    println!(
        "our checks cost       {:>8.3} s over the floor (Run /init -> root)",
        mo - mf
    );
    Ok(all)
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

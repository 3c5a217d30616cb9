//! Initramfs benchmark: the same kernel and root disk booted in turn with ours, with
//! Debian's own initramfs-tools image and with the floor ([`crate::floor`]: busybox doing
//! only `insmod` of the same modules, the mount and `switch_root`), timed from the
//! kernel's "Run /init" to the root init's marker, both read from kernel log timestamps
//! (the root's init writes its marker to `/dev/kmsg`), so both ends are on one clock.
//! Medians and ratios are printed: ours/debian, and ours/floor (what our checks cost over
//! what the kernel itself spends), then ours and the floor stage by stage
//! ([`crate::bench_split`]).
//!
//! Also here: PID 1's peak memory ([`peak_memory`]); the A/B node's boot paths, direct
//! against OVMF + GRUB and OVMF + systemd-boot ([`bench_boot_paths`]). The time to
//! recover from a bad image is [`crate::bench_recover`]; the Secure Boot node's and the
//! real root's comparisons are [`crate::bench_secure_boot`] and [`crate::bench_real_root`].
//!
//! Limits: host or guest wall-clock times under TCG by default (`VALIDATOR_ACCEL=kvm`);
//! each benchmark prints its medians and returns its samples.

use std::path::{Path, PathBuf};
use validator::util::as_f64;

use validator::config::bom::RootHashSource;

use crate::ab::{root_slot, Slot};
use crate::scenario::{BootPath, Name, Roots, Scenario};
use crate::vm::{self, Outcome, Run, Verdict};
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

/// How many times one boot of [`run`] is made again after the kernel hung before "Run
/// /init".
const KERNEL_HANG_RETRIES: usize = 2;

/// Whether a boot timed out before the kernel ran the initramfs's `/init`.
fn hung_before_init(o: &Outcome) -> bool {
    o.verdict == Verdict::Timeout && o.kernel_time_of("Run /init as init process").is_none()
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

/// The median of each part over the boots (a part missing from a boot counts as zero),
/// in the order of the first boot that has it.
pub fn split_medians(runs: &[crate::bench_split::Parts]) -> crate::bench_split::Parts {
    let mut names: Vec<String> = Vec::new();
    for p in runs.iter().flatten() {
        if !names.contains(&p.0) {
            names.push(p.0.clone());
        }
    }
    names
        .into_iter()
        .map(|n| {
            let v: Vec<f64> = runs
                .iter()
                .map(|r| r.iter().find(|(m, _)| *m == n).map_or(0.0, |(_, s)| *s))
                .collect();
            (n, median(&v))
        })
        .collect()
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
    /// Ours and the floor split by stage, per boot ([`crate::bench_split`]).
    pub ours_parts: Vec<crate::bench_split::Parts>,
    pub floor_parts: Vec<crate::bench_split::Parts>,
}

/// Runs the benchmark and prints its table.
pub fn run(runs: usize, debian: Option<&Path>, cpus: u32) -> Result<Samples, HarnessError> {
    let s = Scenario::good()?;
    let dir = crate::paths::run_dir("bench")?;
    let mut ours_cfg = s.prepare(&dir)?;
    ours_cfg.cpus = cpus;
    // Timed with the init as it ships (the test bed's also prints the full report on
    // the console, which the production init never does).
    crate::initramfs::build_with(
        &s.kernel,
        &dir.join("bom.toml"),
        &s.extras(),
        &ours_cfg.initrd,
        &dir,
        &crate::paths::production_init()?,
    )?;
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
        let one = |what: &str, cfg: &vm::VmConfig| -> Result<(Sample, Outcome), HarnessError> {
            let mut again = 0;
            loop {
                let d = match again {
                    0 => dir.join(format!("{what}-{i}")),
                    n => dir.join(format!("{what}-{i}-again-{n}")),
                };
                std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
                let o = vm::run(cfg, &d)?;
                // A kernel that hangs in its own start-up under TCG (seen on two vCPUs)
                // never ran any initramfs: no sample of what is measured, so that boot
                // is made again (said, at most twice). Any other failure ends the run.
                if again < KERNEL_HANG_RETRIES && hung_before_init(&o) {
                    again += 1;
                    println!(
                        "run {}: {what}: the kernel hung before running /init ({}); booting again",
                        i + 1,
                        o.describe()
                    );
                    continue;
                }
                return Ok((sample(&o)?, o));
            }
        };
        let (o, out) = one("ours", &ours_cfg)?;
        all.ours_parts
            .push(crate::bench_split::ours(&out, o.run_init, o.marker));
        let (d, _) = one("debian", &deb_cfg)?;
        let (f, out) = one("floor", &floor_cfg)?;
        all.floor_parts
            .push(crate::bench_split::floor(&out, f.run_init, f.marker));
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
    let mb = |b: u64| as_f64(b) / 1e6;
    println!(
        "image size            {:>8.2} MB {:>8.2} MB {:>8.2} MB {:>8.3}    {:>8.3}",
        mb(sizes[0]),
        mb(sizes[1]),
        mb(sizes[2]),
        as_f64(sizes[0]) / as_f64(sizes[1]),
        as_f64(sizes[0]) / as_f64(sizes[2])
    );
    println!(
        "our checks cost       {:>8.3} s over the floor (Run /init -> root)",
        mo - mf
    );
    println!("Run /init -> root by stage, median of {runs} boots:");
    crate::bench_split::print(
        &split_medians(&all.ours_parts),
        &split_medians(&all.floor_parts),
    );
    Ok(all)
}

/// PID 1's peak memory on one boot: the report's `peak_rss_bytes` (`VmHWM`), and what
/// the init read that bears on it.
#[derive(Debug, Clone)]
pub struct PeakSample {
    pub peak_rss: u64,
    /// Modules the init loaded.
    pub modules: usize,
    /// Their file sizes, summed, and the largest (a module is read whole).
    pub module_bytes: u64,
    pub largest_module: u64,
}

/// Boots scenario `name` once and reads PID 1's peak memory from its report (the boot
/// must reach a decision with a report; any decision will do).
pub fn peak_sample(name: Name) -> Result<PeakSample, HarnessError> {
    let s = Scenario::named(name)?;
    let tree = mkinitramfs::closure::KernelTree::open(&s.kernel.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let o = s.run()?;
    let r = o
        .report
        .as_ref()
        .ok_or_else(|| HarnessError::Setup(format!("{name}: no report: {}", o.describe())))?;
    let peak_rss = r
        .peak_rss_bytes
        .ok_or_else(|| HarnessError::Setup(format!("{name}: no peak_rss_bytes in the report")))?;
    let mut sample = PeakSample {
        peak_rss,
        modules: 0,
        module_bytes: 0,
        largest_module: 0,
    };
    // Every module the gate read: the initramfs's and the root's drivers (the preflight's),
    // loaded or refused by the kernel afterwards (`nvidia` without a GPU: ENODEV).
    use validator::runtime::modload::ModStatus;
    let root_modules = r.preflight.iter().flat_map(|p| p.modules.iter());
    for m in r.modules.iter().chain(root_modules).filter(|m| {
        matches!(
            m.status,
            ModStatus::Loaded | ModStatus::Failed | ModStatus::Rejected
        ) && m.gate_us > 0
    }) {
        sample.modules += 1;
        let Some(rel) = &m.path else { continue };
        // A root driver out of the tree (`updates/dkms/`) is one of the scenario's files.
        let dkms = s
            .root_modules
            .iter()
            .flat_map(|rm| rm.dkms.iter())
            .find(|p| {
                p.file_name()
                    .is_some_and(|f| Path::new(rel).file_name() == Some(f))
            });
        let f = match dkms {
            Some(p) if rel.starts_with("updates/") => p.clone(),
            _ => tree.moddir.join(rel),
        };
        let len = std::fs::metadata(&f)
            .map_err(|e| HarnessError::io(&f, e))?
            .len();
        sample.module_bytes += len;
        sample.largest_module = sample.largest_module.max(len);
    }
    Ok(sample)
}

/// PID 1's peak memory on each scenario of `names`, `runs` boots each, in turn; prints
/// the median, min and max peak and the modules read, with each scenario's peak as a
/// ratio of the first's (how the peak grows with the BOM).
pub fn peak_memory(names: &[Name], runs: u32) -> Result<(), HarnessError> {
    let mut rows = Vec::new();
    for _ in 0..runs.max(1) {
        for (i, n) in names.iter().enumerate() {
            let p = peak_sample(*n)?;
            eprintln!("{n}: peak {} KiB", p.peak_rss / 1024);
            rows.push((i, p));
        }
    }
    let kib = |b: f64| b / 1024.0;
    println!(
        "PID 1 peak memory (VmHWM) under {:?}, {} boot(s) each, alternating",
        vm::Accel::from_env(),
        runs.max(1)
    );
    println!(
        "scenario              peak median   min        max        modules  module bytes  largest module  peak/first"
    );
    let mut first = f64::NAN;
    for (i, n) in names.iter().enumerate() {
        let these: Vec<&PeakSample> = rows
            .iter()
            .filter(|(j, _)| *j == i)
            .map(|(_, p)| p)
            .collect();
        let peaks: Vec<f64> = these.iter().map(|p| as_f64(p.peak_rss)).collect();
        let med = median(&peaks);
        if i == 0 {
            first = med;
        }
        let min = peaks.iter().copied().fold(f64::INFINITY, f64::min);
        let max = peaks.iter().copied().fold(0.0, f64::max);
        let Some(p) = these.first() else { continue };
        println!(
            "{:<20}  {:>7.0} KiB  {:>6.0} KiB {:>6.0} KiB {:>7}  {:>9.0} KiB  {:>10.0} KiB  {:>8.3}",
            n.as_str(),
            kib(med),
            kib(min),
            kib(max),
            p.modules,
            kib(as_f64(p.module_bytes)),
            kib(as_f64(p.largest_module)),
            med / first
        );
    }
    Ok(())
}

/// One row of [`bench_boot_paths`]: host seconds from QEMU's start.
#[derive(Debug, Clone, Copy)]
pub struct PathSample {
    pub run_init: f64,
    pub root: f64,
}

/// Boots slot A of the same A/B node (verity roots pinned by each slot's BOM, so every
/// path reaches the root) directly, through OVMF + GRUB and through OVMF + systemd-boot,
/// `runs` times each in turn, and prints the median host time from QEMU's start to the
/// kernel's "Run /init" and to the root's init, with each path's ratio to the direct boot.
pub fn bench_boot_paths(runs: usize) -> Result<Vec<(BootPath, Vec<PathSample>)>, HarnessError> {
    let paths_ = [BootPath::Direct, BootPath::Grub, BootPath::SystemdBoot];
    let mut beds = Vec::new();
    for p in paths_ {
        let s = Scenario::two_slots(p, Roots::Verity(RootHashSource::Bom))?;
        beds.push((p, s.bed()?));
    }
    let mut all: Vec<(BootPath, Vec<PathSample>)> =
        paths_.iter().map(|p| (*p, Vec::new())).collect();
    for i in 0..runs {
        for (k, (p, bed)) in beds.iter().enumerate() {
            bed.reset_boot_state()?;
            let r = bed.boot()?;
            let first = r.boots.first().ok_or_else(|| {
                HarnessError::Setup(format!("{p:?}: no boot seen: {}", r.describe()))
            })?;
            if first.verdict != vm::Verdict::RootInitReached {
                return Err(HarnessError::Setup(format!(
                    "{p:?} did not reach the root: {}",
                    r.describe()
                )));
            }
            let t = |needle: &str| {
                r.seen_at(0, needle)
                    .map(|d| d.as_secs_f64())
                    .ok_or_else(|| {
                        HarnessError::Setup(format!("{p:?}: no {needle:?}: {}", r.describe()))
                    })
            };
            let sample = PathSample {
                run_init: t("Run /init as init process")?,
                root: t(crate::rootfs::MARKER)?,
            };
            println!(
                "run {}: {p:?}: Run /init at {:.2} s, root at {:.2} s",
                i + 1,
                sample.run_init,
                sample.root
            );
            all[k].1.push(sample);
        }
    }
    let med =
        |v: &[PathSample], f: fn(&PathSample) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let direct_init = med(&all[0].1, |s| s.run_init);
    let direct_root = med(&all[0].1, |s| s.root);
    println!(
        "QEMU start -> kernel's Run /init and -> root init, host seconds, median of {runs}, {:?}",
        vm::Accel::from_env()
    );
    println!("path            Run /init   ratio    root       ratio");
    for (p, v) in &all {
        let (a, b) = (med(v, |s| s.run_init), med(v, |s| s.root));
        println!(
            "{:<14}  {a:>7.2} s  {:>6.2}  {b:>7.2} s  {:>6.2}",
            format!("{p:?}"),
            a / direct_init,
            b / direct_root
        );
    }
    Ok(all)
}

/// Checks that the run `r` (`how` it went) had `boots` kernel boots and reached slot B's
/// root in the last; returns when a text was first seen in a boot (0-based), in seconds,
/// or an error naming what is missing.
pub(crate) fn reached_b<'a>(
    r: &'a Run,
    how: &'a str,
    boots: usize,
) -> Result<impl Fn(usize, &str) -> Result<f64, HarnessError> + 'a, HarnessError> {
    let fail = move |why: &str| HarnessError::Setup(format!("{how}: {why}: {}", r.describe()));
    if r.boots.len() != boots {
        return Err(fail(&format!(
            "{} kernel boot(s), not {boots}",
            r.boots.len()
        )));
    }
    if root_slot(r.boots.last().ok_or_else(|| fail("no boot"))?) != Some(Slot::B) {
        return Err(fail("slot B's root was not reached"));
    }
    Ok(move |boot: usize, text: &str| {
        r.seen_at(boot, text)
            .map(|d| d.as_secs_f64())
            .ok_or_else(|| fail(&format!("no {text:?} in boot {}", boot + 1)))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(super::median(&[]).is_nan());
    }

    /// Only a timeout before the kernel ran `/init` is a kernel hang to boot again; a
    /// timeout after it, or any other end, is the initramfs's and ends the run.
    #[test]
    fn only_a_timeout_before_run_init_is_a_kernel_hang() {
        use crate::vm::{Outcome, Verdict};
        let o = Outcome::of_console;
        let early = "[    1.215977] pnp: PnP ACPI: found 5 devices\n";
        let late = "[    1.9] Run /init as init process\n[    2.0] validator: stage start: start\n";
        assert!(super::hung_before_init(&o(Verdict::Timeout, early)));
        assert!(!super::hung_before_init(&o(Verdict::Timeout, late)));
        assert!(!super::hung_before_init(&o(
            Verdict::Exited(Some(1)),
            early
        )));
        assert!(!super::hung_before_init(&o(Verdict::RootInitReached, late)));
    }

    #[test]
    fn split_medians_take_each_part_over_the_boots() {
        let boot = |m: f64| vec![("start-up".to_string(), 0.02), ("modules".to_string(), m)];
        let m = super::split_medians(&[boot(0.4), boot(0.5), vec![("modules".into(), 1.0)]]);
        assert_eq!(m.len(), 2);
        // A part a boot lacks counts as zero there.
        assert!((m[0].1 - 0.02).abs() < 1e-9, "{m:?}");
        assert!((m[1].1 - 0.5).abs() < 1e-9, "{m:?}");
    }
}

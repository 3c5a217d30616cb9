//! `qemu-harness`: boot a scenario of the boot gate in QEMU and print its health report,
//! or run one of the test bed's benchmarks.
//!
//! Contract: the arguments are parsed by clap (`--help` on every subcommand,
//! `--version`), positional as they always were: `run [SCENARIO]`, `bench [RUNS]
//! [DEBIAN_INITRD] [CPUS]` (CPUS comma-separated), `bench-recover [RUNS]`, `peak-memory
//! [RUNS] [SCENARIO...]`, `bench-boot-paths [RUNS]`, `install-cuts [CUTS] [--first-seed
//! N] [--table PATH]`. Exit status: `run` 0 when the root's init was reached, 1 on a
//! validator decision, 3 on anything else (kernel panic, timeout); `install-cuts` 0 when
//! every cut was recovered, 1 when one was not; 2 on a test-bed error or a usage error
//! (clap's), for every subcommand.
//!
//! Limits: a number that does not parse is a usage error (before clap, it fell back to
//! the default).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use qemu::scenario::{Name, Scenario};
use qemu::vm::Verdict;

/// The scenarios and the environment, after the command list.
fn after_help() -> String {
    format!(
        "Scenarios: {}\n\nEnvironment: VALIDATOR_ACCEL=tcg|kvm, VALIDATOR_VM_TIMEOUT=seconds, VALIDATOR_INIT=path",
        Name::ALL
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A scenario name on the command line.
fn scenario(s: &str) -> Result<Name, String> {
    Name::parse(s).ok_or_else(|| format!("unknown scenario {s} (see --help for the list)"))
}

/// Boot the boot gate's scenarios in QEMU (kernels from scripts/provision) and time them.
#[derive(Debug, Parser)]
#[command(name = "qemu-harness", version, arg_required_else_help = true, after_help = after_help())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Boot a scenario (progress on stderr) and print its report for a person, the
    /// console line and where the report's JSON, its timeline (SVG) and the console log are.
    #[command(after_help = after_help())]
    Run {
        /// The scenario.
        #[arg(value_name = "SCENARIO", default_value = "good", value_parser = scenario)]
        name: Name,
    },
    /// Boot ours, Debian's initramfs and the floor alternately on the same kernel and
    /// root; print medians and ratios, for each vCPU count.
    Bench {
        /// Boots of each initramfs.
        #[arg(value_name = "RUNS", default_value_t = 5)]
        runs: usize,
        /// Debian's initramfs-tools image (default: the one of the provisioned kernel).
        #[arg(value_name = "DEBIAN_INITRD")]
        debian: Option<PathBuf>,
        /// vCPU counts, comma-separated [default: 1,2].
        #[arg(value_name = "CPUS", value_delimiter = ',', num_args = 1)]
        cpus: Vec<u32>,
    },
    /// Time to recover from a bad image on the A/B node: by kexec and by a reboot through
    /// OVMF and GRUB; print each run and the medians.
    BenchRecover {
        /// Boots of each way.
        #[arg(value_name = "RUNS", default_value_t = 3)]
        runs: usize,
    },
    /// PID 1's peak memory (VmHWM) on each scenario, alternating; print median, min, max.
    #[command(after_help = after_help())]
    PeakMemory {
        /// Boots of each scenario.
        #[arg(value_name = "RUNS", default_value_t = 3)]
        runs: u32,
        /// The scenarios [default: node modules-40].
        #[arg(value_name = "SCENARIO", value_parser = scenario)]
        names: Vec<Name>,
    },
    /// Boot one A/B node directly, via OVMF + GRUB and via OVMF + systemd-boot in turn;
    /// print medians and ratios.
    BenchBootPaths {
        /// Boots of each path.
        #[arg(value_name = "RUNS", default_value_t = 3)]
        runs: usize,
    },
    /// The Secure Boot node against the A/B node, side by side: boot to the root and time
    /// to recover by kexec; print medians and ratios.
    BenchSecureBoot {
        /// Boots of each scenario.
        #[arg(value_name = "RUNS", default_value_t = 3)]
        runs: usize,
    },
    /// The real root (Debian 12, systemd) against the busybox root on the Secure Boot
    /// node, side by side: kernel start to the handover and to the root being up.
    BenchRealRoot {
        /// Boots of each scenario.
        #[arg(value_name = "RUNS", default_value_t = 3)]
        runs: usize,
    },
    /// Power cuts during `rauc install` on the real node: an uncut install measures the
    /// install's phases, then each seed cuts the power at a point of one phase and powers
    /// the node on until it passes; prints a line per cut and a summary. Exit 0 when every
    /// cut was recovered (no unverified boot, no loop, RAUC, GRUB and our record agreeing,
    /// the install again succeeding), 1 otherwise.
    InstallCuts {
        /// Cuts (seeds FIRST, FIRST+1, ...).
        #[arg(value_name = "CUTS", default_value_t = 30)]
        cuts: u64,
        /// The first seed.
        #[arg(long, value_name = "FIRST", default_value_t = 1)]
        first_seed: u64,
        /// Also write the table (Markdown) to this file.
        #[arg(long, value_name = "PATH")]
        table: Option<PathBuf>,
    },
    /// Build what the scenarios share (the static init with and without the test hooks,
    /// the operator's CLI, the Debian root's archive) and print where each is, so tests
    /// run side by side do not wait on each other for them.
    Prebuild,
}

/// A test-bed error: printed, exit status 2.
fn harness_error(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("qemu-harness: {e}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The benchmarks time, and `run` boots, images compressed as mkinitramfs ships them
    // (the tests' own default is a faster level).
    qemu::initramfs::set_default_compression(qemu::initramfs::Compression::Product);
    match cli.command {
        Command::Run { name } => run(name),
        Command::Bench { runs, debian, cpus } => {
            let cpus = if cpus.is_empty() { vec![1, 2] } else { cpus };
            for c in cpus {
                if let Err(e) = qemu::bench::run(runs, debian.as_deref(), c) {
                    return harness_error(e);
                }
            }
            ExitCode::SUCCESS
        }
        Command::BenchRecover { runs } => match qemu::bench_recover::bench_recover(runs) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => harness_error(e),
        },
        Command::PeakMemory { runs, names } => {
            let names = if names.is_empty() {
                vec![Name::Node, Name::Modules40]
            } else {
                names
            };
            match qemu::bench::peak_memory(&names, runs) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => harness_error(e),
            }
        }
        Command::BenchBootPaths { runs } => match qemu::bench::bench_boot_paths(runs) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => harness_error(e),
        },
        Command::BenchRealRoot { runs } => match qemu::bench_real_root::bench_real_root(runs) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => harness_error(e),
        },
        Command::InstallCuts {
            cuts,
            first_seed,
            table,
        } => match qemu::install_cuts::run_campaign(cuts, first_seed, table.as_deref()) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => harness_error(e),
        },
        Command::Prebuild => match qemu::debroot::prebuild() {
            Ok(paths) => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let text: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
                match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => harness_error(format!("writing the paths to stdout: {e}")),
                }
            }
            Err(e) => harness_error(e),
        },
        Command::BenchSecureBoot { runs } => {
            match qemu::bench_secure_boot::bench_secure_boot(runs) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => harness_error(e),
            }
        }
    }
}

/// `run`: boots scenario `name` with progress on stderr; writes its report (JSON) and
/// the boot's timeline (SVG) into the run directory; prints the report for a person
/// (`validator report --brief`, the operator's CLI), the console line and where the
/// files are.
fn run(name: Name) -> ExitCode {
    qemu::show_progress();
    let t = std::time::Instant::now();
    let outcome = match Scenario::named(name).and_then(|s| s.run()) {
        Ok(o) => o,
        Err(e) => return harness_error(e),
    };
    qemu::progress(&format!(
        "{name}: {:?}, {:.0} s in all",
        outcome.verdict,
        t.elapsed().as_secs_f64()
    ));
    let dir = outcome
        .log_path
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    match &outcome.report {
        Some(r) => {
            if let Err(e) = show_report(r, &dir) {
                return harness_error(e);
            }
        }
        None => println!("(no report printed)"),
    }
    if let Some(l) = outcome
        .console
        .lines()
        .find(|l| l.starts_with("VALIDATOR: "))
    {
        println!("console   {}", l.trim_end());
    }
    let line = |prefix: &str| {
        outcome
            .console
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|s| s.trim().to_string())
    };
    match line(qemu::debroot::SYSTEM) {
        Some(sys) => println!(
            "root      systemd: {sys}; mark-good unit: {}",
            line(qemu::debroot::MARK_GOOD).unwrap_or_else(|| "-".into())
        ),
        None => {
            if let Some(m) = &outcome.marker {
                println!("root      {m}");
            }
        }
    }
    println!("console log    {}", outcome.log_path.display());
    if name != Name::SbFallback {
        println!("a fallback     scripts/demo fallback (slot A's image is bad: B takes over by kexec, then by reboot)");
    }
    match outcome.verdict {
        Verdict::RootInitReached => ExitCode::SUCCESS,
        Verdict::Decision(_) => ExitCode::from(1),
        _ => ExitCode::from(3),
    }
}

/// Writes `report.json` into `dir` and has the operator's CLI print it for a person and
/// draw `timeline.svg`.
fn show_report(r: &validator::report::Report, dir: &std::path::Path) -> Result<(), String> {
    let json = dir.join("report.json");
    let text = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    std::fs::write(&json, text).map_err(|e| format!("{}: {e}", json.display()))?;
    let svg = dir.join("timeline.svg");
    let cli = qemu::paths::validator_cli().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(&cli)
        .args(["report", "--brief", "--svg"])
        .arg(&svg)
        .arg(&json)
        .output()
        .map_err(|e| format!("{}: {e}", cli.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    println!();
    for l in text.lines().filter(|l| !l.starts_with("wrote ")) {
        println!("{l}");
    }
    if !out.stderr.is_empty() {
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
    }
    println!();
    println!("report JSON    {}", json.display());
    println!("timeline SVG   {}", svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn callers_argument_syntax_still_parses() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| format!("{:?}", c.command));
        // scripts/demo, scripts/bench, docs/PERFORMANCE.md, docs/FAULTS.md, docs/TESTBED.md.
        assert_eq!(
            parse(&["qemu-harness", "run", "node"]).unwrap(),
            "Run { name: Node }"
        );
        assert_eq!(
            parse(&["qemu-harness", "run"]).unwrap(),
            "Run { name: Good }"
        );
        assert_eq!(
            parse(&["qemu-harness", "bench", "5", "/boot/initrd.img-6.1", "1,2"]).unwrap(),
            "Bench { runs: 5, debian: Some(\"/boot/initrd.img-6.1\"), cpus: [1, 2] }"
        );
        assert_eq!(
            parse(&["qemu-harness", "bench", "3"]).unwrap(),
            "Bench { runs: 3, debian: None, cpus: [] }"
        );
        assert_eq!(
            parse(&["qemu-harness", "peak-memory", "3", "node", "modules-40"]).unwrap(),
            "PeakMemory { runs: 3, names: [Node, Modules40] }"
        );
        assert_eq!(
            parse(&["qemu-harness", "bench-recover", "1"]).unwrap(),
            "BenchRecover { runs: 1 }"
        );
        assert_eq!(
            parse(&["qemu-harness", "bench-boot-paths"]).unwrap(),
            "BenchBootPaths { runs: 3 }"
        );
        assert!(parse(&["qemu-harness", "run", "nope"]).is_err());
        assert!(parse(&["qemu-harness"]).is_err());
    }
}

//! `qemu-harness`: boot a scenario of the boot gate in QEMU and print its health report.

// The test bed is test infrastructure: a broken setup step (a missing tool, a failed
// image build) should stop the test that asked for it loudly, so the workspace's denial
// of unwrap/expect/panic/indexing (meant for the init and the library) does not apply.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::ExitCode;

use qemu::scenario::{Name, Scenario};
use qemu::vm::Verdict;

fn usage() -> String {
    format!(
        "usage:\n  qemu-harness run [SCENARIO]     boot a scenario (default: good) and print the report\n\
         \x20 qemu-harness bench [RUNS] [DEBIAN_INITRD] [CPUS,...]\n\
         \x20                                boot ours and Debian's initramfs alternately; print medians\n\
         \x20 qemu-harness peak-memory [RUNS] [SCENARIO...]\n\
         \x20                                PID 1's peak memory (default: node, modules-40)\n\
         \x20 qemu-harness bench-boot-paths [RUNS]\n\
         \x20                                boot one A/B node directly, via OVMF+GRUB and via\n\
         \x20                                OVMF+systemd-boot in turn; print medians and ratios\n\
         scenarios: {}\nenvironment: VALIDATOR_ACCEL=tcg|kvm, VALIDATOR_VM_TIMEOUT=seconds, VALIDATOR_INIT=path\n",
        Name::ALL
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let name = match a.as_slice() {
        ["run"] => "good",
        ["run", n] => n,
        ["bench", rest @ ..] => {
            let runs = rest.first().and_then(|r| r.parse().ok()).unwrap_or(5);
            let deb = rest.get(1).map(std::path::Path::new);
            let cpus: Vec<u32> = rest
                .get(2)
                .map(|c| c.split(',').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_else(|| vec![1, 2]);
            for c in cpus {
                if let Err(e) = qemu::bench::run(runs, deb, c) {
                    eprintln!("qemu-harness: {e}");
                    return ExitCode::from(2);
                }
            }
            return ExitCode::SUCCESS;
        }
        ["bench-recover", rest @ ..] => {
            let runs = rest.first().and_then(|r| r.parse().ok()).unwrap_or(3);
            if let Err(e) = qemu::bench::bench_recover(runs) {
                eprintln!("qemu-harness: {e}");
                return ExitCode::from(2);
            }
            return ExitCode::SUCCESS;
        }
        ["peak-memory", rest @ ..] => {
            let runs = rest.first().and_then(|r| r.parse().ok()).unwrap_or(3);
            let names: Vec<Name> = if rest.len() > 1 {
                match rest[1..].iter().map(|n| Name::parse(n).ok_or(n)).collect() {
                    Ok(v) => v,
                    Err(n) => {
                        eprintln!("qemu-harness: unknown scenario {n}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                vec![Name::Node, Name::Modules40]
            };
            if let Err(e) = qemu::bench::peak_memory(&names, runs) {
                eprintln!("qemu-harness: {e}");
                return ExitCode::from(2);
            }
            return ExitCode::SUCCESS;
        }
        ["bench-boot-paths", rest @ ..] => {
            let runs = rest.first().and_then(|r| r.parse().ok()).unwrap_or(3);
            if let Err(e) = qemu::bench::bench_boot_paths(runs) {
                eprintln!("qemu-harness: {e}");
                return ExitCode::from(2);
            }
            return ExitCode::SUCCESS;
        }
        _ => {
            eprint!("{}", usage());
            return ExitCode::from(2);
        }
    };
    let Some(name) = Name::parse(name) else {
        eprintln!("qemu-harness: unknown scenario {name}");
        eprint!("{}", usage());
        return ExitCode::from(2);
    };
    let outcome = match Scenario::named(name).and_then(|s| s.run()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qemu-harness: {e}");
            return ExitCode::from(2);
        }
    };
    match &outcome.report {
        Some(r) => println!("{}", serde_json::to_string_pretty(r).unwrap_or_default()),
        None => println!("(no report printed)"),
    }
    eprintln!("scenario {name}: {}", outcome.describe());
    if let Some(t) = outcome.report.as_ref().and_then(|r| r.tpm.as_ref()) {
        eprintln!(
            "tpm: {} measured events, {} TPM commands, {:.1} ms in the TPM (banks {})",
            t.events,
            t.commands,
            t.time_us as f64 / 1000.0,
            t.banks.join(", ")
        );
    }
    if let Some(m) = &outcome.marker {
        eprintln!("root: {m}");
    }
    match outcome.verdict {
        Verdict::RootInitReached => ExitCode::SUCCESS,
        Verdict::Decision(_) => ExitCode::from(1),
        _ => ExitCode::from(3),
    }
}

//! `validator`: the boot gate's checks as a command for hosts and live nodes.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage:
  validator bom check FILE          parse a BOM strictly; print its image id and digest
  validator cmdline [LINE]          show how a kernel command line (default /proc/cmdline) is read
  validator gpt DISK                list the GPT partitions of a disk or image
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match run(&a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("validator: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(a: &[&str]) -> Result<ExitCode, String> {
    match a {
        ["bom", "check", file] => {
            let b = validator::bom::load(Path::new(file)).map_err(|e| e.to_string())?;
            println!(
                "{} sha256:{} kernel {}",
                b.bom.image_id, b.sha256, b.bom.kernel.release
            );
            Ok(ExitCode::SUCCESS)
        }
        ["cmdline", rest @ ..] => {
            let line = if rest.is_empty() {
                std::fs::read_to_string("/proc/cmdline")
                    .map_err(|e| format!("/proc/cmdline: {e}"))?
            } else {
                rest.join(" ")
            };
            let s = validator::cmdline::split(line.trim_end());
            for p in &s.params {
                match &p.value {
                    Some(v) => println!("{} = {v:?}", p.name),
                    None => println!("{}", p.name),
                }
            }
            if !s.init_args.is_empty() {
                println!("-- {:?}", s.init_args);
            }
            for w in validator::cmdline::BootArgs::parse(line.trim_end()).warnings {
                println!("warning: {w}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ["gpt", disk] => {
            let t = validator::gpt::read_path(Path::new(disk), 512).map_err(|e| e.to_string())?;
            println!(
                "disk {}{}",
                t.disk_guid,
                if t.used_backup {
                    " (backup header)"
                } else {
                    ""
                }
            );
            for p in &t.partitions {
                println!(
                    "{:>3} {:>10} {:>10} {} {} {:?}",
                    p.number, p.first_lba, p.last_lba, p.type_guid, p.unique_guid, p.name
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            eprint!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    }
}

//! `mkinitramfs`: build and inspect the boot gate's initramfs.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage:
  mkinitramfs build --kernel DIR --bom FILE --init FILE -o OUT
                    [--compress none|gzip|zstd] [--module NAME]... [--file SRC=DEST]...
                    [--module-file NAME=FILE]... [--no-gate]
      DIR is an unpacked kernel package (lib/modules/<release>, boot/vmlinuz-<release>)
      or a module directory. Entry mtimes come from SOURCE_DATE_EPOCH (default 0).
      Every packed module must pass the module gate against the kernel's built-in keys
      and the BOM's policy.trust certificates (--no-gate skips that, for tests).
      --module-file packs FILE in place of module NAME's file from the tree.
  mkinitramfs list FILE          list the entries of an initramfs (gzip/zstd/none)
  mkinitramfs closure --kernel DIR NAME...
                                 print the dependency closure of modules
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mkinitramfs: {e}");
            ExitCode::from(2)
        }
    }
}

fn value<'a>(it: &mut impl Iterator<Item = &'a String>, flag: &str) -> Result<&'a String, String> {
    it.next()
        .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
}

fn run(args: &[String]) -> Result<(), String> {
    let Some(cmd) = args.first() else {
        return Err(USAGE.to_string());
    };
    let mut it = args[1..].iter();
    match cmd.as_str() {
        "build" => {
            let (mut kernel, mut bom, mut init, mut out) = (None, None, None, None);
            let mut compress = mkinitramfs::Compress::Gzip;
            let mut extra_modules = Vec::new();
            let mut extra_files = Vec::new();
            let mut module_overrides = Vec::new();
            let mut gate = true;
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--kernel" => kernel = Some(PathBuf::from(value(&mut it, a)?)),
                    "--bom" => bom = Some(PathBuf::from(value(&mut it, a)?)),
                    "--init" => init = Some(PathBuf::from(value(&mut it, a)?)),
                    "-o" | "--output" => out = Some(PathBuf::from(value(&mut it, a)?)),
                    "--compress" => compress = value(&mut it, a)?.parse()?,
                    "--module" => extra_modules.push(value(&mut it, a)?.clone()),
                    "--file" => {
                        let v = value(&mut it, a)?;
                        let (s, d) = v
                            .split_once('=')
                            .ok_or_else(|| format!("--file {v}: expected SRC=DEST"))?;
                        extra_files.push((PathBuf::from(s), d.to_string()));
                    }
                    "--module-file" => {
                        let v = value(&mut it, a)?;
                        let (n, f) = v
                            .split_once('=')
                            .ok_or_else(|| format!("--module-file {v}: expected NAME=FILE"))?;
                        module_overrides.push((n.to_string(), PathBuf::from(f)));
                    }
                    "--no-gate" => gate = false,
                    other => return Err(format!("unknown argument {other}\n{USAGE}")),
                }
            }
            let need =
                |o: Option<PathBuf>, f: &str| o.ok_or_else(|| format!("{f} is required\n{USAGE}"));
            let spec = mkinitramfs::Spec {
                kernel: need(kernel, "--kernel")?,
                bom: need(bom, "--bom")?,
                init: need(init, "--init")?,
                extra_modules,
                extra_files,
                compress,
                mtime: mkinitramfs::source_date_epoch(),
                module_overrides,
                gate,
            };
            let out = need(out, "-o")?;
            let built = mkinitramfs::build(&spec).map_err(|e| e.to_string())?;
            for s in &built.unresolved_softdeps {
                eprintln!("mkinitramfs: warning: soft dependency {s} is provided by no module (ignored, as modprobe does)");
            }
            validator::util::fs::write_atomic(&out, &built.bytes)
                .map_err(|e| format!("{}: {e}", out.display()))?;
            println!(
                "{}: {} bytes, kernel {}, {} modules: {}",
                out.display(),
                built.bytes.len(),
                built.release,
                built.modules.len(),
                built.modules.join(" ")
            );
            Ok(())
        }
        "list" => {
            let f = value(&mut it, "list")?;
            let raw = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
            let data = mkinitramfs::decompress(&raw).map_err(|e| format!("{f}: {e}"))?;
            let entries = mkinitramfs::cpio::read(&data).map_err(|e| format!("{f}: {e}"))?;
            for e in entries {
                println!("{e}");
            }
            Ok(())
        }
        "closure" => {
            let mut kernel = None;
            let mut names = Vec::new();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--kernel" => kernel = Some(PathBuf::from(value(&mut it, a)?)),
                    n => names.push(n.to_string()),
                }
            }
            let tree =
                mkinitramfs::closure::KernelTree::open(&kernel.ok_or("--kernel is required")?)
                    .map_err(|e| e.to_string())?;
            let c = mkinitramfs::closure::closure(&tree, &names).map_err(|e| e.to_string())?;
            print!("{}", c.index.dep_text());
            print!("{}", c.index.softdep_text());
            for b in c.builtin {
                println!("# {b}: built in");
            }
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    }
}

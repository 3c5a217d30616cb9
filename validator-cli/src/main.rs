//! `validator`: the boot gate's checks as a command for hosts and live nodes.

#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage:
  validator modules check [--vmlinuz PATH | --kernel-release R] [--trust CERT]...
                    [--bom FILE] [--symvers FILE] [--mode strict|kernel] [--jobs N] [--json]
                    MODULE|DIR...
                                    gate module files: vermagic, symbol CRCs, signature,
                                    BOM policy; one line per module; exit 0 only if all pass
  validator keys extract --vmlinuz PATH [-o DIR]
                                    the kernel's built-in trusted certificates (DER)
  validator kernel info --vmlinuz PATH
                                    release, vermagic and exported-symbol count of a kernel
  validator verity verify --data D --hash H [--hash-offset N]
                    (--root-hash HEX | --sig FILE --trust CERT...) [--threads N] [--json]
                                    full userspace check of a dm-verity image; names the
                                    first corrupted block; exit 0 verified, 1 corrupted
  validator tpm pcrs [--tcp HOST:PORT] [--json]
                                    read PCRs 0-23 of every active bank (/dev/tpmrm0,
                                    else /dev/tpm0; or a swtpm data port)
  validator tpm replay LOG [--json] replay a binary (TCG crypto-agile) or CEL-JSON log and
                                    print the PCR values it predicts
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
        ["modules", "check", rest @ ..] => modules_check(rest),
        ["keys", "extract", rest @ ..] => keys_extract(rest),
        ["verity", "verify", rest @ ..] => verity_verify(rest),
        ["tpm", "pcrs", rest @ ..] => tpm_pcrs(rest),
        ["tpm", "replay", rest @ ..] => tpm_replay(rest),
        ["kernel", "info", "--vmlinuz", path] => {
            let k = load_kernel(Path::new(path))?;
            println!("release {}", k.release);
            println!("vermagic {:?}", k.vermagic.as_deref().unwrap_or(""));
            println!("exported symbols {}", k.symvers().map.len());
            println!("built-in certificates {}", k.certs.len());
            Ok(ExitCode::SUCCESS)
        }
        ["bom", "check", file] => {
            let b = validator::config::bom::load(Path::new(file)).map_err(|e| e.to_string())?;
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
            let s = validator::config::cmdline::split(line.trim_end());
            for p in &s.params {
                match &p.value {
                    Some(v) => println!("{} = {v:?}", p.name),
                    None => println!("{}", p.name),
                }
            }
            if !s.init_args.is_empty() {
                println!("-- {:?}", s.init_args);
            }
            for w in validator::config::cmdline::BootArgs::parse(line.trim_end()).warnings {
                println!("warning: {w}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ["gpt", disk] => {
            let t = validator::sys::read_gpt(Path::new(disk), 512).map_err(|e| e.to_string())?;
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

fn load_kernel(path: &Path) -> Result<validator::formats::vmlinuz::KernelFacts, String> {
    let img = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    validator::formats::vmlinuz::KernelFacts::from_image(&img)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn keys_extract(a: &[&str]) -> Result<ExitCode, String> {
    let mut vmlinuz = None;
    let mut out = None;
    let mut it = a.iter();
    while let Some(x) = it.next() {
        match *x {
            "--vmlinuz" => vmlinuz = it.next().copied(),
            "-o" | "--output" => out = it.next().copied(),
            other => return Err(format!("keys extract: unknown argument {other}")),
        }
    }
    let path = vmlinuz.ok_or("keys extract: --vmlinuz PATH is required")?;
    let img = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let elf = validator::formats::vmlinuz::vmlinux(&img).map_err(|e| format!("{path}: {e}"))?;
    let certs =
        validator::formats::vmlinuz::builtin_certs(&elf).map_err(|e| format!("{path}: {e}"))?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
    }
    for (i, der) in certs.iter().enumerate() {
        let c = validator::trust::Cert::from_der(der, path).map_err(|e| e.to_string())?;
        let fp = validator::util::hex(&c.sha256);
        println!(
            "{} serial {} key {} sha256 {fp}",
            c.subject_cn,
            validator::trust::colon_hex(&c.serial),
            c.key.describe()
        );
        if let Some(dir) = out {
            let f = Path::new(dir).join(format!("builtin-{i}-{}.der", &fp[..16]));
            validator::util::fs::write_atomic(&f, der)
                .map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn modules_check(a: &[&str]) -> Result<ExitCode, String> {
    use validator::config::bom::VermagicMode;
    use validator::stages::modules::gate::{Gate, Policy};
    let mut vmlinuz = None;
    let mut release = None;
    let mut trust = Vec::new();
    let mut bom = None;
    let mut symvers_file = None;
    let mut json = false;
    let mut mode = None;
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut files = Vec::new();
    let mut it = a.iter();
    while let Some(x) = it.next() {
        let mut val = || {
            it.next()
                .copied()
                .ok_or_else(|| format!("{x} needs a value"))
        };
        match *x {
            "--vmlinuz" => vmlinuz = Some(val()?),
            "--kernel-release" => release = Some(val()?.to_string()),
            "--trust" => trust.push(val()?),
            "--bom" => bom = Some(val()?),
            "--symvers" => symvers_file = Some(val()?),
            "--jobs" => {
                jobs = val()?
                    .parse()
                    .map_err(|_| "--jobs needs a number".to_string())?
            }
            "--mode" => {
                mode = Some(match val()? {
                    "strict" => VermagicMode::Strict,
                    "kernel" => VermagicMode::Kernel,
                    m => return Err(format!("--mode {m}: strict or kernel")),
                })
            }
            "--json" => json = true,
            f if f.starts_with("--") => return Err(format!("modules check: unknown option {f}")),
            f => files.push(std::path::PathBuf::from(f)),
        }
    }
    if files.is_empty() {
        return Err("modules check: no MODULE or DIR given".into());
    }
    let mut policy = Policy {
        require_signature: true,
        ..Policy::default()
    };
    let mut gate_symvers = None;
    if let Some(v) = vmlinuz {
        let k = load_kernel(Path::new(v))?;
        gate_symvers = Some(k.symvers());
        policy.kernel_vermagic = k.vermagic;
        if release.as_deref().is_some_and(|r| r != k.release) {
            return Err(format!(
                "--kernel-release differs from the release of {v} ({})",
                k.release
            ));
        }
        release = Some(k.release);
    }
    if let Some(f) = symvers_file {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
        let t = validator::formats::kmod::symvers::Symvers::parse(&text)
            .map_err(|e| format!("{f}: {e}"))?;
        let table = gate_symvers.get_or_insert_with(Default::default);
        for (k, e) in t.map {
            table.map.insert(k, e);
        }
    }
    if let Some(b) = bom {
        let b = validator::config::bom::load(Path::new(b))
            .map_err(|e| e.to_string())?
            .bom;
        if release
            .as_deref()
            .is_some_and(|r| r != b.kernel.release.as_str())
        {
            eprintln!(
                "validator: note: the BOM's kernel.release {} is not the kernel given ({}); strict checks use the BOM's",
                b.kernel.release,
                release.as_deref().unwrap_or("")
            );
        }
        release = Some(b.kernel.release.to_string());
        policy.mode = b.policy.vermagic;
        policy.out_of_tree = Some(
            b.policy
                .out_of_tree
                .iter()
                .map(|m| m.normalized())
                .collect(),
        );
        policy.flavour = b.nvidia.as_ref().map(|n| n.flavour);
        policy.sha256 = b
            .policy
            .module_sha256
            .iter()
            .map(|(k, v)| {
                (
                    validator::formats::kmod::normalize_name(k),
                    v.0.to_ascii_lowercase(),
                )
            })
            .collect();
    }
    if let Some(m) = mode {
        policy.mode = m;
    }
    policy.release = release;
    let mut store = validator::trust::TrustStore::new();
    for t in trust {
        store.add_path(Path::new(t)).map_err(|e| e.to_string())?;
    }
    let gate = Gate {
        trust: store,
        symvers: gate_symvers,
        policy,
    };
    let files = validator::stages::modules::batch::collect(&files)?;
    let batch = validator::stages::modules::batch::check_files(&gate, &files, jobs);
    let failed = batch.verdicts.iter().filter(|v| !v.pass).count();
    let mb = batch.bytes as f64 / 1e6;
    let secs = batch.elapsed.as_secs_f64();
    if json {
        let doc = serde_json::json!({
            "modules": batch.verdicts,
            "checked": batch.verdicts.len(),
            "failed": failed,
            "bytes": batch.bytes,
            "seconds": secs,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for v in &batch.verdicts {
            let sig = match (&v.signer, &v.sig_key, &v.sig_hashalgo) {
                (Some(s), Some(k), Some(h)) => {
                    format!(" signer=\"{s}\" sig_key={k} sig_hashalgo={h}")
                }
                _ => String::new(),
            };
            let vm = v
                .vermagic
                .as_deref()
                .map(|m| format!(" vermagic=\"{}\"", m.trim_end()))
                .unwrap_or_default();
            let line = if v.pass {
                format!("PASS {}{sig}{vm}\n", v.module)
            } else {
                format!("FAIL {}: {}{sig}{vm}\n", v.module, v.summary())
            };
            let _ = out.write_all(line.as_bytes());
        }
    }
    eprintln!(
        "validator: {} modules, {} passed, {failed} failed; {mb:.1} MB in {secs:.2} s ({:.0} MB/s, {jobs} threads)",
        batch.verdicts.len(),
        batch.verdicts.len() - failed,
        mb / secs.max(1e-9)
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn verity_verify(a: &[&str]) -> Result<ExitCode, String> {
    use validator::formats::verity::{sig, superblock, tree};
    let (mut data, mut hash, mut root_hex, mut sigf) = (None, None, None, None);
    let mut trust = Vec::new();
    let mut offset = 0u64;
    let mut json = false;
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut it = a.iter();
    while let Some(x) = it.next() {
        let mut val = || {
            it.next()
                .copied()
                .ok_or_else(|| format!("{x} needs a value"))
        };
        match *x {
            "--data" => data = Some(val()?),
            "--hash" => hash = Some(val()?),
            "--hash-offset" => {
                offset = val()?
                    .parse()
                    .map_err(|_| "--hash-offset needs a number of bytes".to_string())?
            }
            "--root-hash" => root_hex = Some(val()?),
            "--sig" => sigf = Some(val()?),
            "--trust" => trust.push(val()?),
            "--threads" => {
                threads = val()?
                    .parse()
                    .map_err(|_| "--threads needs a number".to_string())?
            }
            "--json" => json = true,
            other => return Err(format!("verity verify: unknown argument {other}")),
        }
    }
    let data = data.ok_or("verity verify: --data is required")?;
    let hash = hash.ok_or("verity verify: --hash is required")?;
    let open = |p: &str| std::fs::File::open(p).map_err(|e| format!("{p}: {e}"));
    let (df, hf) = (open(data)?, open(hash)?);
    let size =
        |f: &std::fs::File, p: &str| validator::sys::file_size(f).map_err(|e| format!("{p}: {e}"));
    let (dsize, hsize) = (size(&df, data)?, size(&hf, hash)?);
    let mut sb = vec![0u8; superblock::SIZE];
    use std::os::unix::fs::FileExt;
    let n = hf
        .read_at(&mut sb, offset)
        .map_err(|e| format!("{hash}: {e}"))?;
    let params = superblock::parse(&sb[..n]).map_err(|e| format!("{hash}: {e}"))?;
    let (root, signer) = match (root_hex, sigf) {
        (Some(h), None) => (
            validator::util::unhex(h).ok_or_else(|| format!("--root-hash {h}: not hex"))?,
            None,
        ),
        (None, Some(f)) => {
            let bytes = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
            let s = sig::parse(&bytes).map_err(|e| format!("{f}: {e}"))?;
            let mut store = validator::trust::TrustStore::new();
            for t in &trust {
                store.add_path(Path::new(t)).map_err(|e| e.to_string())?;
            }
            let who =
                validator::trust::rootsig::verify(&s, &store).map_err(|e| format!("{f}: {e}"))?;
            (s.root_hash, Some(who))
        }
        _ => return Err("verity verify: give exactly one of --root-hash and --sig".into()),
    };
    if root.len() != params.algorithm.digest_size() {
        return Err(format!(
            "the root hash has {} bytes; {} digests have {}",
            root.len(),
            params.algorithm.name(),
            params.algorithm.digest_size()
        ));
    }
    let g = tree::Geometry::new(&params, offset, true).map_err(|e| e.to_string())?;
    let start = std::time::Instant::now();
    let v = tree::verify(&df, dsize, &hf, hsize, &g, &root, threads).map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();
    let gbs = v.data_bytes as f64 / 1e9 / secs.max(1e-9);
    if json {
        let doc = serde_json::json!({
            "verified": v.ok,
            "root_hash": validator::util::hex(&root),
            "signer": signer,
            "finding": v.finding.as_ref().map(|f| f.to_string()),
            "algorithm": params.algorithm.name(),
            "data_block_size": params.data_block_size,
            "hash_block_size": params.hash_block_size,
            "data_blocks": params.data_blocks,
            "seconds": secs,
        });
        println!("{doc}");
    } else if v.ok {
        println!(
            "verified: root hash {} ({} data blocks of {} bytes, {})",
            validator::util::hex(&root),
            params.data_blocks,
            params.data_block_size,
            params.algorithm.name()
        );
    } else if let Some(f) = &v.finding {
        println!("CORRUPTED: {f}");
    }
    eprintln!(
        "validator: {:.2} GB in {secs:.2} s ({gbs:.2} GB/s, {threads} threads)",
        v.data_bytes as f64 / 1e9
    );
    Ok(if v.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_pcrs(v: &validator::formats::tpm::PcrValues, json: bool) {
    if json {
        let doc: std::collections::BTreeMap<&str, std::collections::BTreeMap<String, String>> = v
            .iter()
            .map(|(b, m)| {
                (
                    b.name(),
                    m.iter()
                        .map(|(p, d)| (p.to_string(), validator::util::hex(d)))
                        .collect(),
                )
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        println!("pcrs:");
        for (b, m) in v {
            println!("  {}:", b.name());
            for (p, d) in m {
                println!("    {p:<2} : 0x{}", validator::util::hex(d));
            }
        }
    }
}

fn tpm_pcrs(a: &[&str]) -> Result<ExitCode, String> {
    use validator::sys::tpm::{DeviceTransport, TcpTransport, Tpm, Transport};
    let json = a.contains(&"--json");
    let tcp = a
        .iter()
        .position(|x| *x == "--tcp")
        .and_then(|i| a.get(i + 1));
    fn read_all<T: Transport>(mut t: Tpm<T>) -> Result<validator::formats::tpm::PcrValues, String> {
        let banks = t.get_pcr_banks().map_err(|e| e.to_string())?;
        let mut v = validator::formats::tpm::PcrValues::new();
        for pcr in 0..24 {
            for (b, d) in t.pcr_read(pcr, &banks).map_err(|e| e.to_string())? {
                v.entry(b).or_default().insert(pcr, d);
            }
        }
        eprintln!(
            "validator: {} TPM commands, {} us",
            t.stats().commands,
            t.stats().time.as_micros()
        );
        Ok(v)
    }
    let v = match tcp {
        Some(addr) => {
            let sa: std::net::SocketAddr = addr
                .parse()
                .map_err(|_| format!("--tcp {addr}: not HOST:PORT"))?;
            read_all(Tpm::new(
                TcpTransport::connect(sa, std::time::Duration::from_secs(2))
                    .map_err(|e| e.to_string())?,
            ))?
        }
        None => read_all(Tpm::new(
            DeviceTransport::open(Path::new("/dev")).map_err(|e| e.to_string())?,
        ))?,
    };
    print_pcrs(&v, json);
    Ok(ExitCode::SUCCESS)
}

fn tpm_replay(a: &[&str]) -> Result<ExitCode, String> {
    let json = a.contains(&"--json");
    let file = a
        .iter()
        .find(|x| !x.starts_with("--"))
        .ok_or("tpm replay: LOG is required")?;
    let bytes = std::fs::read(file).map_err(|e| format!("{file}: {e}"))?;
    let v = if bytes.first() == Some(&0x1e) {
        let recs =
            validator::formats::tpm::cel::parse(&bytes).map_err(|e| format!("{file}: {e}"))?;
        validator::formats::tpm::cel::replay(&recs)
    } else {
        validator::formats::tpm::eventlog::EventLog::parse(&bytes)
            .map_err(|e| format!("{file}: {e}"))?
            .replay()
    };
    print_pcrs(&v, json);
    Ok(ExitCode::SUCCESS)
}

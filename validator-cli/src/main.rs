//! `validator`: the boot gate's checks as a command for hosts, image builds and live nodes.
//!
//! Contract: every subcommand has `--help`; `--version` prints the version; exit status 0
//! means every check passed, 1 that a check failed, 2 bad usage or an unusable input (a
//! missing, unreadable, oversized or malformed file, named in the message). Paths are
//! taken as given (any bytes, not only UTF-8). Input files are checked before they are
//! read (no FIFO, directory or device where a file is expected) and read up to a
//! documented limit. A closed stdout ends the output, not the check: the exit status is
//! still the verdict. `validator completions SHELL` and `validator man` generate shell
//! completions and man pages. The PID-1 init does not link this crate.

mod preflight;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use validator::util::fs::read_limited;
use validator::util::out::Out;

/// Largest kernel image read (`--vmlinuz`).
pub(crate) const VMLINUZ_MAX: u64 = 256 << 20;
/// Largest `Module.symvers` read.
const SYMVERS_MAX: u64 = 64 << 20;
/// Largest TPM event log read.
const EVENTLOG_MAX: u64 = 64 << 20;
/// Largest `root-verity-sig` file read.
const ROOT_SIG_MAX: u64 = 64 << 10;

const EXIT_CODES: &str = "Exit status: 0 every check passed; 1 a check failed; 2 bad usage or \
an unusable input (the message names the file).";

/// The boot gate's checks for hosts, image builds and live nodes.
#[derive(Debug, Parser)]
#[command(name = "validator", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Kernel modules: the module gate.
    #[command(subcommand)]
    Modules(ModulesCmd),
    /// Trusted keys built into a kernel.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Facts about a kernel image.
    #[command(subcommand)]
    Kernel(KernelCmd),
    /// dm-verity images.
    #[command(subcommand)]
    Verity(VerityCmd),
    /// The TPM and measurement logs.
    #[command(subcommand)]
    Tpm(TpmCmd),
    /// The image's bill of materials.
    #[command(subcommand)]
    Bom(BomCmd),
    /// A/B slots: the boot loader's state and our record on the ESP.
    #[command(subcommand)]
    Slot(SlotCmd),
    /// Check the hardware the BOM promises from sysfs, procfs and the root: the boot's
    /// preflight checks, usable on a live node as a post-boot health check.
    #[command(after_help = EXIT_CODES)]
    Preflight(preflight::PreflightArgs),
    /// A boot's health report for a person, as a timeline, metrics or node labels.
    Report(report::ReportArgs),
    /// Show how a kernel command line is read (default: /proc/cmdline).
    Cmdline {
        /// The command line (its words are joined with spaces).
        line: Vec<String>,
    },
    /// List the GPT partitions of a disk or disk image.
    Gpt {
        /// A disk image or block device.
        disk: PathBuf,
    },
    /// Print a shell completion script (install: see the README).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages: validator.1 on stdout, or one page per command into DIR (all or
    /// none).
    Man {
        /// Directory for validator.1 and validator-<command>.1 pages.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum ModulesCmd {
    /// Gate module files: vermagic, symbol CRCs, signature, BOM policy. One line per
    /// module; exit 0 only if all pass.
    #[command(after_help = EXIT_CODES)]
    Check(ModulesCheck),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    /// The kernel's rule plus the exact kernel release.
    Strict,
    /// Only the kernel's own rule.
    Kernel,
}

#[derive(Debug, Args)]
struct ModulesCheck {
    /// The kernel image: release, vermagic and exported CRCs come from it.
    #[arg(long, value_name = "PATH")]
    vmlinuz: Option<PathBuf>,
    /// Check the release word only (without a kernel image).
    #[arg(long, value_name = "R")]
    kernel_release: Option<String>,
    /// Trusted certificates (files or directories, DER or PEM); repeatable.
    #[arg(long, value_name = "CERT")]
    trust: Vec<PathBuf>,
    /// The BOM: its kernel release and policy apply.
    #[arg(long, value_name = "FILE")]
    bom: Option<PathBuf>,
    /// More exported CRCs (`Module.symvers` format), e.g. of out-of-tree modules.
    #[arg(long, value_name = "FILE")]
    symvers: Option<PathBuf>,
    /// Vermagic mode (default: the BOM's, else strict).
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Worker threads (default: the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    jobs: Option<u16>,
    /// One JSON document with every verdict.
    #[arg(long)]
    json: bool,
    /// Module files or directories searched for `*.ko`, `*.ko.xz`, `*.ko.zst`, `*.ko.gz`.
    #[arg(required = true, value_name = "MODULE|DIR")]
    paths: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum KeysCmd {
    /// The kernel's built-in trusted certificates (as DER files with -o).
    Extract {
        #[arg(long, value_name = "PATH")]
        vmlinuz: PathBuf,
        /// Write each certificate to DIR (all or none).
        #[arg(short = 'o', long = "output", value_name = "DIR")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum KernelCmd {
    /// Release, vermagic, exported-symbol and built-in certificate count of a kernel.
    Info {
        #[arg(long, value_name = "PATH")]
        vmlinuz: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum VerityCmd {
    /// Full userspace check of a dm-verity image, with `veritysetup verify`'s verdict;
    /// names the first corrupted block. Exit 0 verified, 1 corrupted.
    #[command(after_help = EXIT_CODES)]
    Verify(VerityVerify),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("root").required(true).args(["root_hash", "sig"])))]
struct VerityVerify {
    /// The data device or image.
    #[arg(long, value_name = "D")]
    data: PathBuf,
    /// The hash device or image (superblock at --hash-offset).
    #[arg(long, value_name = "H")]
    hash: PathBuf,
    /// Byte offset of the superblock on the hash device.
    #[arg(long, value_name = "N", default_value_t = 0)]
    hash_offset: u64,
    /// The trusted root hash, in hex.
    #[arg(long, value_name = "HEX")]
    root_hash: Option<String>,
    /// A DPS `root-verity-sig` JSON file (needs --trust).
    #[arg(long, value_name = "FILE", requires = "trust")]
    sig: Option<PathBuf>,
    /// Certificates trusted to sign the root hash.
    #[arg(long, value_name = "CERT")]
    trust: Vec<PathBuf>,
    /// Worker threads (default: the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum TpmCmd {
    /// PCRs 0-23 of every active bank (/dev/tpmrm0, else /dev/tpm0, or a swtpm port).
    Pcrs {
        /// A swtpm data port (HOST:PORT) instead of the device.
        #[arg(long, value_name = "HOST:PORT")]
        tcp: Option<std::net::SocketAddr>,
        #[arg(long)]
        json: bool,
    },
    /// Replay a binary (TCG crypto-agile) or CEL-JSON log; print the PCR values it
    /// predicts, in `tpm2_eventlog`'s `pcrs:` layout.
    Replay {
        log: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["grubenv", "esp"])))]
struct SlotWhere {
    /// A GRUB environment block (the boot loader's state only; our record is on the ESP).
    #[arg(long, value_name = "FILE")]
    grubenv: Option<PathBuf>,
    /// The mounted ESP (e.g. /boot/efi): GRUB's grubenv or systemd-boot's entries, and
    /// our record.
    #[arg(long, value_name = "DIR")]
    esp: Option<PathBuf>,
    /// The BOM whose `[slot]` section gives the paths (default: the defaults; with --esp,
    /// systemd-boot when DIR/loader/entries exists, else GRUB).
    #[arg(long, value_name = "FILE")]
    bom: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "verbatim")]
enum SlotArg {
    A,
    B,
}

#[derive(Debug, Subcommand)]
enum SlotCmd {
    /// The slots' state: the boot loader's variables or entries, and our record.
    Status {
        #[command(flatten)]
        at: SlotWhere,
        #[arg(long)]
        json: bool,
    },
    /// Mark a slot good (the post-boot service does this once the node is healthy).
    MarkGood {
        #[command(flatten)]
        at: SlotWhere,
        /// The slot (default: validator.slot= of the running kernel's command line).
        #[arg(long, value_enum, ignore_case = true)]
        slot: Option<SlotArg>,
    },
    /// Mark a slot bad: the boot loader will not boot it again until marked good.
    MarkBad {
        #[command(flatten)]
        at: SlotWhere,
        /// The slot (default: validator.slot= of the running kernel's command line).
        #[arg(long, value_enum, ignore_case = true)]
        slot: Option<SlotArg>,
    },
}

#[derive(Debug, Subcommand)]
enum BomCmd {
    /// Parse a BOM strictly, with every check the init makes; print its image id and
    /// digest.
    Check { file: PathBuf },
}

/// A usage or input problem: exit status 2.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl<E: std::fmt::Display> From<E> for Usage {
    fn from(e: E) -> Usage {
        Usage(e.to_string())
    }
}

pub(crate) type Res = Result<bool, Usage>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = Out::stdout();
    let r = run(cli.cmd, &mut out).and_then(|ok| out.flush().map(|()| ok).map_err(Usage::from));
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Usage(e)) => {
            eprintln!("validator: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cmd: Cmd, out: &mut Out) -> Res {
    match cmd {
        Cmd::Modules(ModulesCmd::Check(a)) => modules_check(a, out),
        Cmd::Keys(KeysCmd::Extract { vmlinuz, output }) => keys_extract(&vmlinuz, output, out),
        Cmd::Kernel(KernelCmd::Info { vmlinuz }) => {
            let k = load_kernel(&vmlinuz)?;
            out.line(&format!("release {}", k.release))?;
            out.line(&format!(
                "vermagic {:?}",
                k.vermagic.as_deref().unwrap_or("")
            ))?;
            out.line(&format!("exported symbols {}", k.symvers().map.len()))?;
            out.line(&format!("built-in certificates {}", k.certs.len()))?;
            Ok(true)
        }
        Cmd::Verity(VerityCmd::Verify(a)) => verity_verify(a, out),
        Cmd::Tpm(TpmCmd::Pcrs { tcp, json }) => tpm_pcrs(tcp, json, out),
        Cmd::Tpm(TpmCmd::Replay { log, json }) => tpm_replay(&log, json, out),
        Cmd::Bom(BomCmd::Check { file }) => {
            let b = validator::config::bom::load(&file)?;
            out.line(&format!(
                "{} sha256:{} kernel {}",
                b.bom.image_id, b.sha256, b.bom.kernel.release
            ))?;
            Ok(true)
        }
        Cmd::Slot(c) => slot(c, out),
        Cmd::Preflight(a) => preflight::run(a, out),
        Cmd::Report(a) => report::run(a, out),
        Cmd::Cmdline { line } => cmdline(line, out),
        Cmd::Gpt { disk } => {
            let t = validator::sys::read_gpt(&disk, 512)?;
            out.line(&format!(
                "disk {}{}",
                t.disk_guid,
                if t.used_backup {
                    " (backup header)"
                } else {
                    ""
                }
            ))?;
            for p in &t.partitions {
                out.line(&format!(
                    "{:>3} {:>10} {:>10} {} {} {:?}",
                    p.number, p.first_lba, p.last_lba, p.type_guid, p.unique_guid, p.name
                ))?;
            }
            Ok(true)
        }
        Cmd::Completions { shell } => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "validator", &mut buf);
            out.bytes(&buf)?;
            Ok(true)
        }
        Cmd::Man { dir } => man(dir, out),
    }
}

/// Man pages: the top page on stdout, or every page into `dir` (written atomically).
fn man(dir: Option<PathBuf>, out: &mut Out) -> Res {
    fn render(cmd: clap::Command) -> Result<Vec<u8>, Usage> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        Ok(buf)
    }
    let top = Cli::command();
    let Some(dir) = dir else {
        out.bytes(&render(top)?)?;
        return Ok(true);
    };
    let mut pages = vec![("validator".to_string(), top.clone())];
    fn walk(prefix: &str, c: &clap::Command, pages: &mut Vec<(String, clap::Command)>) {
        for s in c.get_subcommands() {
            let name = format!("{prefix}-{}", s.get_name());
            let page = s.clone().name(name.clone());
            pages.push((name.clone(), page));
            walk(&name, s, pages);
        }
    }
    walk("validator", &top, &mut pages);
    let mut rendered = Vec::new();
    for (name, cmd) in pages {
        rendered.push((format!("{name}.1"), render(cmd)?));
    }
    let files: Vec<(String, &[u8])> = rendered
        .iter()
        .map(|(n, b)| (n.clone(), b.as_slice()))
        .collect();
    write_all_or_nothing(&dir, &files)?;
    for (n, _) in &files {
        out.line(&dir.join(n).display().to_string())?;
    }
    Ok(true)
}

pub(crate) fn load_kernel(path: &Path) -> Result<validator::formats::vmlinuz::KernelFacts, Usage> {
    let img = read_limited(path, VMLINUZ_MAX)?;
    validator::formats::vmlinuz::KernelFacts::from_image(&img)
        .map_err(|e| Usage(format!("{}: {e}", path.display())))
}

fn keys_extract(path: &Path, dir: Option<PathBuf>, out: &mut Out) -> Res {
    let img = read_limited(path, VMLINUZ_MAX)?;
    let name = path.display().to_string();
    let elf =
        validator::formats::vmlinuz::vmlinux(&img).map_err(|e| Usage(format!("{name}: {e}")))?;
    let certs = validator::formats::vmlinuz::builtin_certs(&elf)
        .map_err(|e| Usage(format!("{name}: {e}")))?;
    // Parse every certificate before writing any, so a bad one leaves nothing behind. A
    // key of a type the trust store cannot use is skipped, with a warning naming it.
    let mut parsed = Vec::new();
    for (i, der) in certs.iter().enumerate() {
        match validator::trust::Cert::from_der(der, &format!("{name}: built-in certificate {i}")) {
            Ok(c) => parsed.push((i, c, der)),
            Err(e @ validator::trust::TrustError::UnsupportedKey { .. }) => {
                eprintln!("validator: warning: {e}; skipped");
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut lines = Vec::new();
    let mut files = Vec::new();
    for (i, c, der) in &parsed {
        let fp = validator::util::hex(&c.sha256);
        lines.push(format!(
            "{} serial {} key {} sha256 {fp}",
            c.subject_cn,
            validator::trust::colon_hex(&c.serial),
            c.key.describe()
        ));
        files.push((
            format!("builtin-{i}-{}.der", fp.get(..16).unwrap_or(&fp)),
            der.as_slice(),
        ));
    }
    if let Some(dir) = dir {
        write_all_or_nothing(&dir, &files)?;
    }
    for l in lines {
        out.line(&l)?;
    }
    Ok(true)
}

/// Writes every `(name, bytes)` into `dir`, or none: each is first written and synced
/// under a temporary name, then all are renamed into place; on a failure the temporary
/// files, and the directories this call created, are removed again.
fn write_all_or_nothing(dir: &Path, files: &[(String, &[u8])]) -> Result<(), Usage> {
    use std::io::Write;
    let err = |p: &Path, e: std::io::Error| Usage(format!("{}: {e}", p.display()));
    // A target that exists and is not a regular file would fail the rename: refuse first.
    for (f, _) in files {
        let p = dir.join(f);
        if let Ok(m) = std::fs::symlink_metadata(&p) {
            if !m.is_file() {
                return Err(Usage(format!(
                    "{}: exists and is not a regular file",
                    p.display()
                )));
            }
        }
    }
    // The directories to create, outermost first, so they can be removed on failure.
    let mut created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
        .map(Path::to_path_buf)
        .collect();
    created.reverse();
    let undo = |temps: &[PathBuf], created: &[PathBuf]| {
        for t in temps {
            let _ = std::fs::remove_file(t);
        }
        for d in created.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    };
    if let Err(e) = std::fs::create_dir_all(dir) {
        undo(&[], &created);
        return Err(err(dir, e));
    }
    let mut temps = Vec::new();
    for (f, bytes) in files {
        let tmp = dir.join(format!(".{f}.tmp"));
        let r = std::fs::File::create(&tmp).and_then(|mut h| {
            h.write_all(bytes)?;
            h.sync_all()
        });
        temps.push(tmp.clone());
        if let Err(e) = r {
            undo(&temps, &created);
            return Err(err(&tmp, e));
        }
    }
    for (i, ((f, _), tmp)) in files.iter().zip(&temps).enumerate() {
        let p = dir.join(f);
        if let Err(e) = std::fs::rename(tmp, &p) {
            undo(temps.get(i..).unwrap_or_default(), &[]);
            return Err(err(&p, e));
        }
    }
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn modules_check(a: ModulesCheck, out: &mut Out) -> Res {
    use validator::config::bom::VermagicMode;
    use validator::gate::{self, batch};
    let mut policy = gate::Policy {
        require_signature: true,
        ..gate::Policy::default()
    };
    let mut release = a.kernel_release.clone();
    let mut table = None;
    if let Some(v) = &a.vmlinuz {
        let k = load_kernel(v)?;
        table = Some(k.symvers());
        policy.kernel_vermagic = k.vermagic;
        if release.as_deref().is_some_and(|r| r != k.release) {
            return Err(Usage(format!(
                "--kernel-release differs from the release of {} ({})",
                v.display(),
                k.release
            )));
        }
        release = Some(k.release);
    }
    if let Some(f) = &a.symvers {
        let bytes = read_limited(f, SYMVERS_MAX)?;
        let text =
            String::from_utf8(bytes).map_err(|_| Usage(format!("{}: not UTF-8", f.display())))?;
        let t = validator::formats::kmod::symvers::Symvers::parse(&text)
            .map_err(|e| Usage(format!("{}: {e}", f.display())))?;
        let tab = table.get_or_insert_with(Default::default);
        tab.map.extend(t.map);
    }
    if let Some(b) = &a.bom {
        let b = validator::config::bom::load(b)?.bom;
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
        let from_bom = gate::Policy::from_bom(&b);
        release = from_bom.release.clone();
        policy = gate::Policy {
            kernel_vermagic: policy.kernel_vermagic,
            unknown_symbols_fatal: false,
            ..from_bom
        };
    }
    if let Some(m) = a.mode {
        policy.mode = match m {
            Mode::Strict => VermagicMode::Strict,
            Mode::Kernel => VermagicMode::Kernel,
        };
    }
    policy.release = release;
    let g = gate::Gate {
        trust: trust_store(&a.trust)?,
        symvers: table,
        policy,
    };
    // A named path must be a module file or a directory to search; anything else (a FIFO,
    // a device, nothing) is unusable input.
    for p in &a.paths {
        let m = std::fs::metadata(p).map_err(|e| Usage(format!("{}: {e}", p.display())))?;
        if !m.is_dir() {
            if let Some(kind) = validator::util::fs::kind_of(m.file_type()) {
                return Err(Usage(format!(
                    "{}: is a {kind}, not a module file or directory",
                    p.display()
                )));
            }
        }
    }
    let files = batch::collect(&a.paths)?;
    if files.is_empty() {
        return Err(Usage(format!(
            "no module files (*.ko, *.ko.xz, *.ko.zst, *.ko.gz) in {}",
            a.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let jobs = a.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let b = batch::check_files(&g, &files, jobs);
    let failed = b.verdicts.iter().filter(|v| !v.pass).count();
    let mb = b.bytes as f64 / 1e6;
    let secs = b.elapsed.as_secs_f64();
    if a.json {
        let doc = serde_json::json!({
            "modules": b.verdicts,
            "checked": b.verdicts.len(),
            "failed": failed,
            "bytes": b.bytes,
            "seconds": secs,
        });
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        for v in &b.verdicts {
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
            if v.pass {
                out.line(&format!("PASS {}{sig}{vm}", v.module))?;
            } else {
                out.line(&format!("FAIL {}: {}{sig}{vm}", v.module, v.summary()))?;
            }
        }
    }
    eprintln!(
        "validator: {} modules, {} passed, {failed} failed; {mb:.1} MB in {secs:.2} s ({:.0} MB/s, {jobs} threads)",
        b.verdicts.len(),
        b.verdicts.len() - failed,
        mb / secs.max(1e-9)
    );
    Ok(failed == 0)
}

/// The trust store of `--trust` paths; a path that adds no certificate (an empty
/// directory) is an error, not silently no trust.
fn trust_store(paths: &[PathBuf]) -> Result<validator::trust::TrustStore, Usage> {
    let mut store = validator::trust::TrustStore::new();
    for t in paths {
        if store.add_path(t)? == 0 {
            return Err(Usage(format!(
                "{}: no certificate (*.der, *.pem, *.crt, *.x509) in this directory",
                t.display()
            )));
        }
    }
    Ok(store)
}

fn verity_verify(a: VerityVerify, out: &mut Out) -> Res {
    use validator::formats::verity::{sig, superblock, tree};
    let open =
        |p: &Path| validator::util::fs::open_input(p, true).map_err(|e| Usage(e.to_string()));
    let (df, hf) = (open(&a.data)?, open(&a.hash)?);
    let size = |f: &std::fs::File, p: &Path| {
        validator::sys::file_size(f).map_err(|e| Usage(format!("{}: {e}", p.display())))
    };
    let (dsize, hsize) = (size(&df, &a.data)?, size(&hf, &a.hash)?);
    let data_name = a.data.display().to_string();
    let hash_name = a.hash.display().to_string();
    // A tree error is about one of the two files: name it.
    let tree_err = |e: tree::TreeError| {
        let name = match &e {
            tree::TreeError::Read { device: "data", .. }
            | tree::TreeError::TooSmall { device: "data", .. } => &data_name,
            _ => &hash_name,
        };
        Usage(format!("{name}: {e}"))
    };
    if a.hash_offset >= hsize {
        return Err(Usage(format!(
            "{hash_name}: --hash-offset {} is beyond its end ({hsize} bytes)",
            a.hash_offset
        )));
    }
    let mut sb = vec![0u8; superblock::SIZE];
    use std::os::unix::fs::FileExt;
    let n = hf.read_at(&mut sb, a.hash_offset).map_err(|e| {
        Usage(format!(
            "{hash_name}: superblock at offset {}: {e}",
            a.hash_offset
        ))
    })?;
    // data_blocks 0 in the superblock: the whole data device, as veritysetup reads it.
    let params = superblock::parse(sb.get(..n).unwrap_or_default())
        .and_then(|p| p.resolve_data_blocks(dsize))
        .map_err(|e| Usage(format!("{hash_name}: {e}")))?;
    let (root, signer) = match (&a.root_hash, &a.sig) {
        (Some(h), None) => (
            validator::util::unhex(h).ok_or_else(|| Usage(format!("--root-hash {h}: not hex")))?,
            None,
        ),
        (None, Some(f)) => {
            let bytes = read_limited(f, ROOT_SIG_MAX)?;
            let s = sig::parse(&bytes).map_err(|e| Usage(format!("{}: {e}", f.display())))?;
            let store = trust_store(&a.trust)?;
            let who = validator::trust::rootsig::verify(&s, &store).map_err(|e| {
                let trusted: Vec<String> =
                    a.trust.iter().map(|t| t.display().to_string()).collect();
                Usage(format!(
                    "{}: {e} (trusted: {})",
                    f.display(),
                    trusted.join(", ")
                ))
            })?;
            (s.root_hash, Some(who))
        }
        _ => return Err(Usage("give exactly one of --root-hash and --sig".into())),
    };
    if root.len() != params.algorithm.digest_size() {
        return Err(Usage(format!(
            "the root hash has {} bytes; {} digests have {}",
            root.len(),
            params.algorithm.name(),
            params.algorithm.digest_size()
        )));
    }
    let g = tree::Geometry::new(&params, a.hash_offset, true).map_err(tree_err)?;
    let threads = a.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let start = std::time::Instant::now();
    let v = tree::verify(&df, dsize, &hf, hsize, &g, &root, threads).map_err(tree_err)?;
    let secs = start.elapsed().as_secs_f64();
    let gbs = v.data_bytes as f64 / 1e9 / secs.max(1e-9);
    if a.json {
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
        out.line(&doc.to_string())?;
    } else if v.ok {
        out.line(&format!(
            "verified: root hash {} ({} data blocks of {} bytes, {})",
            validator::util::hex(&root),
            params.data_blocks,
            params.data_block_size,
            params.algorithm.name()
        ))?;
    } else if let Some(f) = &v.finding {
        out.line(&format!("CORRUPTED: {f}"))?;
    }
    eprintln!(
        "validator: {:.2} GB in {secs:.2} s ({gbs:.2} GB/s, {threads} threads)",
        v.data_bytes as f64 / 1e9
    );
    Ok(v.ok)
}

fn print_pcrs(
    v: &validator::formats::tpm::PcrValues,
    json: bool,
    out: &mut Out,
) -> Result<(), Usage> {
    use std::collections::BTreeMap;
    if json {
        let doc: BTreeMap<&str, BTreeMap<String, String>> = v
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
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        out.line("pcrs:")?;
        for (b, m) in v {
            out.line(&format!("  {}:", b.name()))?;
            for (p, d) in m {
                out.line(&format!("    {p:<2} : 0x{}", validator::util::hex(d)))?;
            }
        }
    }
    Ok(())
}

fn tpm_pcrs(tcp: Option<std::net::SocketAddr>, json: bool, out: &mut Out) -> Res {
    use validator::formats::tpm::PcrValues;
    use validator::sys::tpm::{DeviceTransport, TcpTransport, Tpm, Transport};
    fn read_all<T: Transport>(mut t: Tpm<T>) -> Result<PcrValues, Usage> {
        let banks = t.get_pcr_banks()?;
        let mut v = PcrValues::new();
        for pcr in 0..24 {
            for (b, d) in t.pcr_read(pcr, &banks)? {
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
        Some(sa) => read_all(Tpm::new(TcpTransport::connect(
            sa,
            std::time::Duration::from_secs(2),
        )?))?,
        None => read_all(Tpm::new(DeviceTransport::open(Path::new("/dev"))?))?,
    };
    print_pcrs(&v, json, out)?;
    Ok(true)
}

fn tpm_replay(file: &Path, json: bool, out: &mut Out) -> Res {
    use validator::formats::tpm::{cel, eventlog};
    let bytes = read_limited(file, EVENTLOG_MAX)?;
    let name = file.display();
    // CEL-JSON is a JSON-seq (RS-prefixed records) or plain JSON lines; a binary log
    // starts with the 32-bit PCR index of its Spec ID event.
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let v = if matches!(first, Some(0x1e | b'{')) {
        cel::replay(&cel::parse(&bytes).map_err(|e| Usage(format!("{name}: {e}")))?)
    } else {
        eventlog::EventLog::parse(&bytes)
            .map_err(|e| Usage(format!("{name}: {e}")))?
            .replay()
    };
    print_pcrs(&v, json, out)?;
    Ok(true)
}

fn cmdline(words: Vec<String>, out: &mut Out) -> Res {
    use validator::config::cmdline::{split, BootArgs};
    let line = if words.is_empty() {
        let b = read_limited(
            Path::new("/proc/cmdline"),
            validator::stages::start::CMDLINE_MAX,
        )?;
        String::from_utf8_lossy(&b).into_owned()
    } else {
        words.join(" ")
    };
    let line = line.trim_end();
    let s = split(line);
    for p in &s.params {
        match &p.value {
            Some(v) => out.line(&format!("{} = {v:?}", p.name))?,
            None => out.line(&p.name)?,
        }
    }
    if !s.init_args.is_empty() {
        out.line(&format!("-- {:?}", s.init_args))?;
    }
    for w in BootArgs::parse(line).warnings {
        out.line(&format!("warning: {w}"))?;
    }
    Ok(true)
}

/// The slot configuration and the ESP directory a `slot` command works on.
fn slot_target(at: &SlotWhere) -> Result<(validator::config::bom::Slot, PathBuf, bool), Usage> {
    use validator::config::bom::{Bootloader, Slot};
    let mut cfg: Slot = match &at.bom {
        Some(b) => validator::config::bom::load(b)?
            .bom
            .slot
            .ok_or_else(|| Usage(format!("{}: no [slot] section", b.display())))?,
        None => toml_default_slot()?,
    };
    match (&at.grubenv, &at.esp) {
        (Some(f), None) => {
            // A FIFO, a directory or an oversized file is unusable input (exit 2), as for
            // every other command; what the block says is for the stage to judge.
            let file = validator::util::fs::open_input(f, false)?;
            validator::util::fs::read_file_limited(
                file,
                f,
                validator::formats::grubenv::MAX_SIZE as u64,
            )?;
            let dir = f
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            let name = f
                .file_name()
                .ok_or_else(|| Usage(format!("{}: not a file", f.display())))?;
            cfg.bootloader = Bootloader::Grub;
            let name = name.to_str().ok_or_else(|| {
                Usage(format!(
                    "{}: the file name is not UTF-8 (the slot configuration names its files as text)",
                    f.display()
                ))
            })?;
            cfg.grubenv = format!("/{name}");
            Ok((cfg, dir, false))
        }
        (None, Some(d)) => {
            if !d.is_dir() {
                return Err(Usage(format!("{}: not a directory", d.display())));
            }
            if at.bom.is_none() && d.join("loader/entries").is_dir() {
                cfg.bootloader = Bootloader::SystemdBoot;
            }
            Ok((cfg, d.clone(), true))
        }
        _ => Err(Usage("give exactly one of --grubenv and --esp".into())),
    }
}

fn toml_default_slot() -> Result<validator::config::bom::Slot, Usage> {
    validator::config::bom::Slot::from_toml("").map_err(Usage)
}

fn booted_slot(arg: Option<SlotArg>) -> Result<validator::config::bom::SlotName, Usage> {
    use validator::config::bom::SlotName;
    if let Some(a) = arg {
        return Ok(match a {
            SlotArg::A => SlotName::A,
            SlotArg::B => SlotName::B,
        });
    }
    let b = read_limited(
        Path::new("/proc/cmdline"),
        validator::stages::start::CMDLINE_MAX,
    )?;
    let args = validator::config::cmdline::BootArgs::parse(String::from_utf8_lossy(&b).trim_end());
    args.slot
        .as_deref()
        .and_then(SlotName::parse)
        .ok_or_else(|| Usage("no --slot, and no validator.slot= on /proc/cmdline".into()))
}

fn slot(c: SlotCmd, out: &mut Out) -> Res {
    use validator::config::bom::SlotName;
    use validator::stages::slot::Runtime;
    match c {
        SlotCmd::Status { at, json } => {
            let (cfg, dir, record) = slot_target(&at)?;
            let l = Runtime::load(&cfg, SlotName::A, dir, false);
            let mut problems = l.problems;
            if !record {
                problems.retain(|p| !p.starts_with("no state record"));
            }
            let st = l.runtime.status(l.view, problems);
            if json {
                out.line(&serde_json::to_string_pretty(&st)?)?;
            } else {
                out.line(&format!("bootloader {:?}", st.bootloader).to_lowercase())?;
                for (k, v) in &st.bootloader_state {
                    out.line(&format!("  {k}={v}"))?;
                }
                if let Some(r) = &st.record {
                    out.line(&format!(
                        "record generation {}, {} failed boot(s) in a row, last slot {}",
                        st.generation,
                        r.consecutive_failures,
                        r.last_slot.as_deref().unwrap_or("-")
                    ))?;
                    for (s, rec) in &r.slots {
                        out.line(&format!(
                            "  {s}: image {} attempts {} good {} last {} {}",
                            rec.image_id.as_deref().unwrap_or("-"),
                            rec.attempts,
                            rec.good.map_or("-".into(), |g| g.to_string()),
                            rec.last_decision.as_deref().unwrap_or("-"),
                            rec.last_reason.as_deref().unwrap_or("")
                        ))?;
                    }
                }
                for p in &st.problems {
                    out.line(&format!("problem: {p}"))?;
                }
            }
            Ok(st.problems.is_empty())
        }
        SlotCmd::MarkGood { at, slot } => mark(at, slot, true, out),
        SlotCmd::MarkBad { at, slot } => mark(at, slot, false, out),
    }
}

fn mark(at: SlotWhere, slot: Option<SlotArg>, good: bool, out: &mut Out) -> Res {
    let s = booted_slot(slot)?;
    let (cfg, dir, record) = slot_target(&at)?;
    let l = validator::stages::slot::Runtime::load(&cfg, s, dir, false);
    let mut rt = l.runtime;
    // The boot loader's state must have been read whole; a record is optional with
    // --grubenv, required with --esp.
    let fatal: Vec<&String> = l
        .problems
        .iter()
        .filter(|p| record || !p.starts_with("no state record"))
        .collect();
    if !fatal.is_empty() {
        return Err(Usage(
            fatal
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    let done = rt.mark_slot(s, good).map_err(Usage)?;
    out.line(&done)?;
    for (k, v) in rt.view() {
        out.line(&format!("  {k}={v}"))?;
    }
    Ok(true)
}

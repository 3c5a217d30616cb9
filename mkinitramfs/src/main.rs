//! `mkinitramfs`: build and inspect the boot gate's initramfs.
//!
//! Contract: exit status 0 on success, 2 on bad usage or any failure, with a message
//! naming the file. Paths are taken as given (any bytes, not only UTF-8); every input is
//! checked and size-limited before it is read ([`mkinitramfs::limits`]); the output is
//! written by rename, so a failed build leaves nothing behind; it replaces only a regular
//! file (a device, FIFO, directory or symbolic link at OUT, or a missing directory, is
//! refused naming the path: `validator::util::fs::write_output`). Control characters in
//! a message (from a file name) are escaped (`\u{1b}`, `\n`). A closed stdout ends the
//! listing, not the command.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use validator::util::out::Out;

/// Build and inspect the boot gate's initramfs.
#[derive(Debug, Parser)]
#[command(
    name = "mkinitramfs",
    version,
    after_help = "Exit status: 0 success; 2 bad usage or a failure (the message names the file)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

/// What every initramfs is made of.
#[derive(Debug, clap::Args)]
struct Inputs {
    /// An unpacked kernel package (lib/modules/<release>, boot/vmlinuz-<release>) or
    /// a module directory.
    #[arg(long, value_name = "DIR")]
    kernel: PathBuf,
    /// The BOM.
    #[arg(long, value_name = "FILE")]
    bom: PathBuf,
    /// The static init binary.
    #[arg(long, value_name = "FILE")]
    init: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build an initramfs: the init, the BOM, the BOM's module closure and the gate's
    /// inputs. Every packed module must pass the module gate against the kernel's
    /// built-in keys and the BOM's policy.trust certificates. Entry mtimes come from
    /// SOURCE_DATE_EPOCH (default 0).
    Build(BuildArgs),
    /// Build one A/B slot's image into a new directory: the root image (from an ext4,
    /// erofs or squashfs image, or a directory made into erofs), its dm-verity tree
    /// (veritysetup's format), the signed root hash (root-verity-sig JSON), the BOM, the
    /// kernel and initramfs where the shipped grub.cfg loads them, the systemd-boot entry
    /// and SHA256SUMS, and a RAUC bundle when asked. Timestamps from SOURCE_DATE_EPOCH; the same inputs give
    /// the same bytes (with an RSA key).
    Slot(Box<SlotArgs>),
    /// Lay out a blank disk (or a new disk image) as a node's from one or two slot
    /// directories: the GPT of docs/INSTALL.md, the ESP (FAT32: the grubenv, shim and
    /// GRUB, grub.cfg, node.cfg, each slot's kernel and initramfs) and each slot's root,
    /// dm-verity and signature partitions. Every file is checked against its slot's
    /// SHA256SUMS first and everything is read back after; the partition table is
    /// written last. A disk that holds a partition table is refused without --force.
    Install(InstallArgs),
    /// List the entries of an initramfs (plain cpio parts and gzip, zstd or xz parts,
    /// as the kernel unpacks them).
    List { file: PathBuf },
    /// Print the dependency closure of modules.
    Closure {
        #[arg(long, value_name = "DIR")]
        kernel: PathBuf,
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
}

// The options of `mkinitramfs build` (the subcommand's help is the variant's doc).
#[derive(Debug, clap::Args)]
struct BuildArgs {
    #[command(flatten)]
    inputs: Inputs,
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: PathBuf,
    /// The initramfs's compression (the kernel needs CONFIG_RD_ZSTD or CONFIG_RD_GZIP).
    #[arg(long, value_enum, default_value = "zstd")]
    compress: Compression,
    /// Another module to pack (with its dependencies); repeatable.
    #[arg(long = "module", value_name = "NAME")]
    modules: Vec<String>,
    /// Another file: SRC on this host, DEST its absolute path inside; repeatable.
    #[arg(long = "file", value_name = "SRC=DEST")]
    files: Vec<OsString>,
    /// Pack FILE in place of module NAME's file from the tree; repeatable.
    #[arg(long = "module-file", value_name = "NAME=FILE")]
    module_files: Vec<OsString>,
    /// Skip the module gate (for tests).
    #[arg(long)]
    no_gate: bool,
}

// The options of `mkinitramfs slot` (the subcommand's help is the variant's doc).
#[derive(Debug, clap::Args)]
struct SlotArgs {
    /// The root filesystem: an ext4, erofs or squashfs image, or a directory.
    #[arg(long, value_name = "IMAGE|DIR")]
    root: PathBuf,
    #[command(flatten)]
    inputs: Inputs,
    /// The root-hash signing key (PEM).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// Its certificate (PEM), the one the BOM's policy.trust names.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// The slot: A or B.
    #[arg(long, value_name = "A|B", value_parser = ["A", "B"])]
    slot: String,
    /// Kernel command-line words for the slot's systemd-boot entry.
    #[arg(long, value_name = "WORDS", default_value = "")]
    options: String,
    /// The kernel command line the slot's GRUB entry gives, as /proc/cmdline shows it
    /// (BOOT_IMAGE=/B/vmlinuz validator.slot=B ...): write reference.json, the
    /// measurements a good boot of the slot makes (validator attest verify reads it).
    #[arg(long, value_name = "LINE")]
    cmdline: Option<String>,
    /// Also package the slot as a RAUC bundle (bundle.raucb) for nodes whose RAUC
    /// system.conf says compatible=COMPATIBLE (examples/rauc/system.conf).
    #[arg(long, value_name = "COMPATIBLE", requires_all = ["rauc_key", "rauc_cert"])]
    rauc_bundle: Option<String>,
    /// The RAUC bundle's signing key (PEM).
    #[arg(long, value_name = "FILE", requires = "rauc_bundle")]
    rauc_key: Option<PathBuf>,
    /// The RAUC bundle's signing certificate (PEM), in the nodes' RAUC keyring.
    #[arg(long, value_name = "FILE", requires = "rauc_bundle")]
    rauc_cert: Option<PathBuf>,
    /// Extra mksquashfs arguments for the bundle, as `rauc bundle --mksquashfs-args`
    /// takes them (for example "-comp zstd", or "-noI -noD -noF -noX" for none; default:
    /// mksquashfs's gzip).
    #[arg(
        long,
        value_name = "ARGS",
        requires = "rauc_bundle",
        allow_hyphen_values = true
    )]
    rauc_mksquashfs_args: Option<String>,
    /// Also build the slot's Unified Kernel Image, esp/<SLOT>/linux.efi (systemd-stub,
    /// the kernel, the initramfs, an os-release and the command line
    /// "validator.slot=<SLOT> LINE" as one signed image); reference.json then predicts a
    /// boot of it (GRUB's chainloader, the stub's PCR 11 events). Needs --uki-key and
    /// --uki-cert, or --uki-unsigned.
    #[arg(long, value_name = "LINE", conflicts_with = "cmdline")]
    uki_cmdline: Option<String>,
    /// The systemd-stub the image is built on.
    #[arg(long, value_name = "FILE", default_value = mkinitramfs::uki::DEBIAN_STUB, requires = "uki_cmdline")]
    uki_stub: PathBuf,
    /// The fleet's Secure Boot signing key (PEM) for the image, as enrolled in db or as a
    /// MOK.
    #[arg(long, value_name = "FILE", requires_all = ["uki_cmdline", "uki_cert"], conflicts_with = "uki_unsigned")]
    uki_key: Option<PathBuf>,
    /// Its certificate (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["uki_cmdline", "uki_key"])]
    uki_cert: Option<PathBuf>,
    /// Leave the image unsigned, to be signed outside this tool (an HSM): see
    /// docs/INSTALL.md, "Signing the image elsewhere".
    #[arg(long, requires = "uki_cmdline")]
    uki_unsigned: bool,
    /// The new directory.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    output: PathBuf,
}

// The options of `mkinitramfs install` (the subcommand's help is the variant's doc).
#[derive(Debug, clap::Args)]
struct InstallArgs {
    /// The disk (a block device, whole) or a disk image (made when missing).
    #[arg(long, value_name = "DISK")]
    disk: PathBuf,
    /// A slot directory made by `mkinitramfs slot`; once or twice (A and B).
    #[arg(long = "slot", value_name = "DIR", required = true, num_args = 1)]
    slots: Vec<PathBuf>,
    /// The shim that starts GRUB, installed as /EFI/BOOT/BOOTX64.EFI.
    #[arg(long, value_name = "FILE", default_value = mkinitramfs::install::DEBIAN_SHIM, conflicts_with = "no_shim")]
    shim: PathBuf,
    /// The GRUB image, installed as /EFI/BOOT/grubx64.efi (with --no-shim: BOOTX64.EFI).
    #[arg(long, value_name = "FILE", default_value = mkinitramfs::install::DEBIAN_GRUB)]
    grub: PathBuf,
    /// No shim: --grub is a standalone GRUB image the firmware starts itself.
    #[arg(long)]
    no_shim: bool,
    /// The grub.cfg to install (default: the shipped examples/grub/grub.cfg).
    #[arg(long, value_name = "FILE")]
    grub_cfg: Option<PathBuf>,
    /// The kernel command line both slots' GRUB entries add, written to /EFI/BOOT/node.cfg
    /// (console=ttyS0 module.sig_enforce=1 ...).
    #[arg(long, value_name = "LINE")]
    cmdline: Option<String>,
    /// The ESP's size.
    #[arg(long, value_name = "MiB", default_value_t = 512)]
    esp_size: u64,
    /// Each root partition's size (default: the larger root image's).
    #[arg(long, value_name = "MiB")]
    root_size: Option<u64>,
    /// Each dm-verity hash partition's size (default: the tree of a full root partition).
    #[arg(long, value_name = "MiB")]
    verity_size: Option<u64>,
    /// Replace the partition table DISK holds (everything on it is lost).
    #[arg(long)]
    force: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = Out::stdout();
    match run(cli.cmd, &mut out).and_then(|()| out.flush().map_err(|e| e.to_string())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mkinitramfs: {}", validator::util::escape_controls(&e));
            ExitCode::from(2)
        }
    }
}

/// `A=B` split at the first `=`, as raw bytes (paths need not be UTF-8).
fn split_eq<'a>(v: &'a OsStr, flag: &str, want: &str) -> Result<(&'a OsStr, &'a OsStr), String> {
    let b = v.as_bytes();
    let i = b
        .iter()
        .position(|&c| c == b'=')
        .ok_or_else(|| format!("{flag} {}: expected {want}", v.to_string_lossy()))?;
    let (l, r) = b.split_at(i);
    Ok((
        OsStr::from_bytes(l),
        OsStr::from_bytes(r.get(1..).unwrap_or_default()),
    ))
}

fn run(cmd: Cmd, out: &mut Out) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    match cmd {
        Cmd::Build(a) => build(a, out),
        Cmd::Slot(a) => slot(*a, out),
        Cmd::Install(a) => install(a, out),
        Cmd::List { file } => {
            let raw = validator::util::fs::read_limited(&file, mkinitramfs::limits::INITRAMFS_MAX)
                .map_err(|e| e.to_string())?;
            let entries = mkinitramfs::unpack::unpack(&raw, mkinitramfs::limits::UNPACKED_MAX)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            for e in entries {
                out.line(&e.to_string()).map_err(io)?;
            }
            Ok(())
        }
        Cmd::Closure { kernel, names } => {
            let tree =
                mkinitramfs::closure::KernelTree::open(&kernel).map_err(|e| e.to_string())?;
            let c = mkinitramfs::closure::closure(&tree, &names).map_err(|e| e.to_string())?;
            out.bytes(c.index.dep_text().as_bytes()).map_err(io)?;
            out.bytes(c.index.softdep_text().as_bytes()).map_err(io)?;
            for b in c.builtin {
                out.line(&format!("# {b}: built in")).map_err(io)?;
            }
            Ok(())
        }
    }
}

/// `mkinitramfs build`.
fn build(a: BuildArgs, out: &mut Out) -> Result<(), String> {
    let BuildArgs {
        inputs: Inputs { kernel, bom, init },
        output,
        compress,
        modules,
        files,
        module_files,
        no_gate,
    } = a;
    let mut extra_files = Vec::new();
    for f in &files {
        let (s, d) = split_eq(f, "--file", "SRC=DEST")?;
        let d = d
            .to_str()
            .ok_or_else(|| format!("--file {}: DEST is not UTF-8", f.to_string_lossy()))?;
        extra_files.push((PathBuf::from(s), d.to_string()));
    }
    let mut module_overrides = Vec::new();
    for m in &module_files {
        let (n, f) = split_eq(m, "--module-file", "NAME=FILE")?;
        let n = n
            .to_str()
            .ok_or_else(|| format!("--module-file {}: NAME is not UTF-8", m.to_string_lossy()))?;
        module_overrides.push((n.to_string(), PathBuf::from(f)));
    }
    let spec = mkinitramfs::Spec {
        kernel,
        bom,
        init,
        extra_modules: modules,
        extra_files,
        compress: match compress {
            Compression::None => mkinitramfs::Compress::None,
            Compression::Gzip => mkinitramfs::Compress::Gzip,
            Compression::Zstd => mkinitramfs::Compress::Zstd,
        },
        mtime: mkinitramfs::source_date_epoch(),
        module_overrides,
        gate: !no_gate,
        bom_bytes: None,
    };
    // Refuse an output that will not be written before the build, not after it.
    validator::util::fs::check_output_dir(validator::util::fs::output_dir(&output))
        .and_then(|()| validator::util::fs::check_output_target(&output))
        .map_err(|e| e.to_string())?;
    let built = mkinitramfs::build(&spec).map_err(|e| e.to_string())?;
    for s in &built.unresolved_softdeps {
        let s = validator::util::escape_controls(s);
        eprintln!("mkinitramfs: warning: soft dependency {s} is provided by no module (ignored, as modprobe does)");
    }
    validator::util::fs::write_output(&output, &built.bytes).map_err(|e| e.to_string())?;
    out.line(&format!(
        "{}: {} bytes, kernel {}, {} modules: {}",
        output.display(),
        built.bytes.len(),
        built.release,
        built.modules.len(),
        built.modules.join(" ")
    ))
    .map_err(|e| e.to_string())
}

/// `mkinitramfs slot`.
fn slot(a: SlotArgs, out: &mut Out) -> Result<(), String> {
    let SlotArgs {
        root,
        inputs: Inputs { kernel, bom, init },
        key,
        cert,
        slot,
        options,
        rauc_bundle,
        rauc_key,
        rauc_cert,
        rauc_mksquashfs_args,
        cmdline,
        uki_cmdline,
        uki_stub,
        uki_key,
        uki_cert,
        uki_unsigned,
        output,
    } = a;
    let uki = match (uki_cmdline, uki_key, uki_cert, uki_unsigned) {
        (None, ..) => None,
        (Some(cmdline), Some(key), Some(cert), false) => Some(mkinitramfs::slot::UkiSlot {
            stub: uki_stub,
            cmdline,
            signing: mkinitramfs::uki::Signing::Key { key, cert },
        }),
        (Some(cmdline), None, None, true) => Some(mkinitramfs::slot::UkiSlot {
            stub: uki_stub,
            cmdline,
            signing: mkinitramfs::uki::Signing::Unsigned,
        }),
        (Some(_), ..) => {
            return Err("--uki-cmdline: give --uki-key and --uki-cert, or --uki-unsigned".into())
        }
    };
    let rauc = match (rauc_bundle, rauc_key, rauc_cert) {
        (Some(compatible), Some(key), Some(cert)) => Some(mkinitramfs::slot::RaucBundle {
            compatible,
            key,
            cert,
            mksquashfs_args: rauc_mksquashfs_args,
        }),
        _ => None,
    };
    let spec = mkinitramfs::slot::SlotSpec {
        root,
        kernel,
        bom,
        init,
        key,
        cert,
        slot,
        options,
        out: output.clone(),
        epoch: mkinitramfs::source_date_epoch(),
        rauc,
        cmdline,
        uki,
    };
    let b = mkinitramfs::slot::build(&spec).map_err(|e| e.to_string())?;
    out.line(&format!(
        "{}: slot {}, {} root ({} blocks), root hash {}, kernel {}, {} modules",
        output.display(),
        spec.slot,
        b.filesystem,
        b.data_blocks,
        b.root_hash,
        b.release,
        b.modules
    ))
    .map_err(|e| e.to_string())
}

/// `mkinitramfs install`.
fn install(a: InstallArgs, out: &mut Out) -> Result<(), String> {
    use mkinitramfs::install::{InstallSpec, Loader, MIB};
    let mut spec = InstallSpec::new(&a.disk, a.slots);
    spec.loader = if a.no_shim {
        Loader::Grub { efi: a.grub }
    } else {
        Loader::ShimGrub {
            shim: a.shim,
            grub: a.grub,
        }
    };
    spec.grub_cfg = a.grub_cfg;
    spec.cmdline = a.cmdline;
    spec.esp_mib = a.esp_size;
    spec.root_mib = a.root_size;
    spec.verity_mib = a.verity_size;
    spec.force = a.force;
    let done = mkinitramfs::install::install(&spec).map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| e.to_string();
    out.line(&format!(
        "{}: GPT {}, {} MiB",
        a.disk.display(),
        done.plan.disk_guid,
        done.plan.total / MIB
    ))
    .map_err(io)?;
    for p in &done.plan.parts {
        out.line(&format!(
            "  {} {:<16} {} at {} MiB, {} MiB",
            p.number,
            p.name,
            p.uuid,
            p.start / MIB,
            p.size / MIB
        ))
        .map_err(io)?;
    }
    out.line(&format!("boot entry: {}", done.efibootmgr))
        .map_err(io)
}

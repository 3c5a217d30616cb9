//! The command tree of `validator` (clap derive): every command, its arguments and its
//! `--help` text, and the exit-status note. The commands' code is in one file per command
//! group; `validator preflight` and `validator report` keep their arguments next to their
//! code (`preflight.rs`, `report.rs`).
//!
//! Contract: the help texts are the doc comments here; `validator man` and `validator
//! completions` render this same tree.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{preflight, report};

pub(crate) const EXIT_CODES: &str =
    "Exit status: 0 every check passed; 1 a check failed; 2 bad usage or \
an unusable input (the message names the file).";

/// The boot gate's checks for hosts, image builds and live nodes.
#[derive(Debug, Parser)]
#[command(name = "validator", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
    /// Kernel modules: the module gate.
    #[command(subcommand)]
    Modules(ModulesCmd),
    /// Trusted keys built into a kernel.
    #[command(subcommand)]
    Keys(KeysCmd),
    /// Authenticode signatures of PE images (UEFI applications, kernels).
    #[command(subcommand)]
    Pe(PeCmd),
    /// Facts about a kernel image.
    #[command(subcommand)]
    Kernel(KernelCmd),
    /// dm-verity images.
    #[command(subcommand)]
    Verity(VerityCmd),
    /// The TPM and measurement logs.
    #[command(subcommand)]
    Tpm(TpmCmd),
    /// Attestation: the node's key and quotes, the prediction of a good boot, the
    /// verifier.
    #[command(subcommand)]
    Attest(AttestCmd),
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
    /// Re-run the preflight on the running node against the BOM the boot was judged by:
    /// update the metrics and node labels, clear a quarantine whose hardware recovered
    /// or raise one (the boot's report is kept). Exit 0 pass now, 1 quarantined.
    #[command(after_help = EXIT_CODES)]
    Recheck(crate::recheck::RecheckArgs),
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
    // `<command>` is the help text's placeholder, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    Man {
        /// Directory for validator.1 and validator-<command>.1 pages.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ModulesCmd {
    /// Gate module files: vermagic, symbol CRCs, signature, BOM policy. One line per
    /// module; exit 0 only if all pass.
    #[command(after_help = EXIT_CODES)]
    Check(ModulesCheck),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Mode {
    /// The kernel's rule plus the exact kernel release.
    Strict,
    /// Only the kernel's own rule.
    Kernel,
}

#[derive(Debug, Args)]
pub(crate) struct ModulesCheck {
    /// The kernel image: release, vermagic and exported CRCs come from it.
    #[arg(long, value_name = "PATH")]
    pub(crate) vmlinuz: Option<PathBuf>,
    /// Check the release word only (without a kernel image).
    #[arg(long, value_name = "R")]
    pub(crate) kernel_release: Option<String>,
    /// Trusted certificates (files or directories, DER or PEM); repeatable.
    #[arg(long, value_name = "CERT")]
    pub(crate) trust: Vec<PathBuf>,
    /// The BOM: its kernel release and policy apply.
    #[arg(long, value_name = "FILE")]
    pub(crate) bom: Option<PathBuf>,
    /// More exported CRCs (`Module.symvers` format), e.g. of out-of-tree modules.
    #[arg(long, value_name = "FILE")]
    pub(crate) symvers: Option<PathBuf>,
    /// Vermagic mode (default: the BOM's, else strict).
    #[arg(long, value_enum)]
    pub(crate) mode: Option<Mode>,
    /// Worker threads (default: the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) jobs: Option<u16>,
    /// One JSON document with every verdict.
    #[arg(long)]
    pub(crate) json: bool,
    /// Module files or directories searched for `*.ko`, `*.ko.xz`, `*.ko.zst`, `*.ko.gz`.
    #[arg(required = true, value_name = "MODULE|DIR")]
    pub(crate) paths: Vec<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCmd {
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
pub(crate) enum PeCmd {
    /// Verify a PE image's Authenticode signature against trusted certificates, as the
    /// kernel's kexec_file_load (first signature) or the UEFI firmware (any signature)
    /// judges it. Exit 0 verified, 1 refused.
    #[command(after_help = EXIT_CODES)]
    Verify(PeVerify),
}

/// Whose rule decides which signatures count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PeRule {
    /// The first signature only, as kexec_file_load under lockdown.
    Kernel,
    /// Any signature, as UEFI firmware and shim.
    Firmware,
}

#[derive(Debug, Args)]
pub(crate) struct PeVerify {
    /// Certificates (DER or PEM files, or directories of them) trusted to sign it; a
    /// certificate authority here trusts what it issued.
    #[arg(long = "cert", value_name = "CERT", required = true)]
    pub(crate) certs: Vec<PathBuf>,
    /// A forbidden image digest (SHA-256 Authenticode, hex), as in UEFI dbx.
    #[arg(long = "forbid", value_name = "SHA256")]
    pub(crate) forbid: Vec<String>,
    /// UEFI dbx: EFI signature lists (as efi-readvar or virt-fw-vars write them, or the
    /// efivarfs file with its attribute bytes); image digests, certificates and
    /// certificate digests revoke.
    #[arg(long = "dbx", value_name = "FILE")]
    pub(crate) dbx: Option<PathBuf>,
    /// Shim's MokListX (MokListXRT), in the same forms as --dbx.
    #[arg(long = "mokx", value_name = "FILE")]
    pub(crate) mokx: Option<PathBuf>,
    /// The node's SBAT level (the text of SbatLevelRT, or its efivarfs file): the image's
    /// .sbat section is judged by shim's rule (with --rule firmware shim loads the image
    /// and a missing section refuses it; with --rule kernel it is verified through shim's
    /// protocol and may have none).
    #[arg(long = "sbat-level", value_name = "FILE")]
    pub(crate) sbat_level: Option<PathBuf>,
    /// Take dbx, MokListXRT and SbatLevelRT from the running firmware (efivarfs and
    /// shim's MOK variables under /sys), in addition to any given as files.
    #[arg(long = "running-firmware")]
    pub(crate) running_firmware: bool,
    #[arg(long, value_enum, default_value_t = PeRule::Firmware)]
    pub(crate) rule: PeRule,
    /// The PE image.
    #[arg(value_name = "IMAGE")]
    pub(crate) image: PathBuf,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KernelCmd {
    /// Release, vermagic, exported-symbol and built-in certificate count of a kernel.
    Info {
        #[arg(long, value_name = "PATH")]
        vmlinuz: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum VerityCmd {
    /// Full userspace check of a dm-verity image, with `veritysetup verify`'s verdict;
    /// names the first corrupted block. Exit 0 verified, 1 corrupted.
    #[command(after_help = EXIT_CODES)]
    Verify(VerityVerify),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("root").required(true).args(["root_hash", "sig"])))]
pub(crate) struct VerityVerify {
    /// The data device or image.
    #[arg(long, value_name = "D")]
    pub(crate) data: PathBuf,
    /// The hash device or image (superblock at --hash-offset).
    #[arg(long, value_name = "H")]
    pub(crate) hash: PathBuf,
    /// Byte offset of the superblock on the hash device.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) hash_offset: u64,
    /// The trusted root hash, in hex.
    #[arg(long, value_name = "HEX")]
    pub(crate) root_hash: Option<String>,
    /// A DPS `root-verity-sig` JSON file (needs --trust).
    #[arg(long, value_name = "FILE", requires = "trust")]
    pub(crate) sig: Option<PathBuf>,
    /// Certificates trusted to sign the root hash.
    #[arg(long, value_name = "CERT")]
    pub(crate) trust: Vec<PathBuf>,
    /// Worker threads (default: the CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) threads: Option<u16>,
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TpmCmd {
    /// PCRs 0-23 of every active bank (/dev/tpmrm0, else /dev/tpm0, or a swtpm port).
    Pcrs {
        /// A swtpm data port (HOST:PORT) instead of the device.
        #[arg(long, value_name = "HOST:PORT")]
        tcp: Option<std::net::SocketAddr>,
        #[arg(long)]
        json: bool,
    },
    /// Replay a binary (TCG crypto-agile or legacy SHA-1) or CEL-JSON log; print the PCR values it
    /// predicts, in `tpm2_eventlog`'s `pcrs:` layout.
    Replay {
        log: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("where").required(true).args(["grubenv", "esp"])))]
pub(crate) struct SlotWhere {
    /// A GRUB environment block (the boot loader's state only; our record is on the ESP).
    #[arg(long, value_name = "FILE")]
    pub(crate) grubenv: Option<PathBuf>,
    /// The mounted ESP (e.g. /boot/efi): GRUB's grubenv or systemd-boot's entries, and
    /// our record.
    #[arg(long, value_name = "DIR")]
    pub(crate) esp: Option<PathBuf>,
    /// The BOM whose `[slot]` section gives the paths (default: the defaults; with --esp,
    /// systemd-boot when DIR/loader/entries exists, else GRUB).
    #[arg(long, value_name = "FILE")]
    pub(crate) bom: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "verbatim")]
pub(crate) enum SlotArg {
    A,
    B,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SlotCmd {
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
pub(crate) enum BomCmd {
    /// Parse a BOM strictly, with every check the init makes; print its image id and
    /// digest.
    Check { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AttestCmd {
    /// Write the TPM's attestation key (the public area, TPM2B_PUBLIC) and print its
    /// name: what a fleet enrolls. The TPM derives the same key every time.
    Ak(AkArgs),
    /// Answer a verifier's challenge: quote PCRs with the nonce, write ak.pub,
    /// quote.msg, quote.sig and quote.pcrs into DIR (tpm2_checkquote's inputs).
    Quote(QuoteArgs),
    /// On the node: write the TPM's endorsement key (ek.pub, TPM2B_PUBLIC, template L-1)
    /// and its certificate from NV (ek.der), and the AK (ak.pub), for enrollment.
    Ek(EkArgs),
    /// On the verifier: check the node's EK certificate against the TPM vendor's CA and
    /// that it holds the EK, then make a credential (a random secret) that only that TPM
    /// can activate, and only for that AK. Exit 0 made, 1 the EK or AK refused.
    #[command(after_help = EXIT_CODES)]
    MakeCredential(MakeCredentialArgs),
    /// On the node: activate a credential (ours or tpm2_makecredential's) with the TPM's
    /// EK and AK, writing the secret it holds: the verifier compares it with its own.
    Activate(ActivateArgs),
    /// Predict the measurements of a good boot of an image (the reference file).
    Predict(PredictArgs),
    /// Verify a boot's report (its quote, its event log, the accepted images), or a
    /// quote answering a nonce. Exit 0 verified, 1 refused, 2 unusable input.
    #[command(after_help = EXIT_CODES)]
    Verify(VerifyArgs),
}

/// The attestation key's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    /// ECC NIST P-256, ECDSA-SHA256 (fast to make on every TPM).
    Ecc,
    /// RSA 2048, RSASSA-SHA256 (seconds to make on discrete TPMs).
    Rsa,
}

#[derive(Debug, Args)]
pub(crate) struct TpmArgs {
    /// A swtpm data port (HOST:PORT) instead of /dev/tpmrm0.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) tcp: Option<std::net::SocketAddr>,
    /// The attestation key's type (as the BOM's measure.ak).
    #[arg(long, value_enum, default_value_t = Kind::Ecc)]
    pub(crate) kind: Kind,
}

#[derive(Debug, Args)]
pub(crate) struct AkArgs {
    #[command(flatten)]
    pub(crate) tpm: TpmArgs,
    /// Where to write the TPM2B_PUBLIC.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct EkArgs {
    #[command(flatten)]
    pub(crate) tpm: TpmArgs,
    /// The directory to write ek.pub, ek.der and ak.pub into.
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct MakeCredentialArgs {
    /// The node's EK (TPM2B_PUBLIC, `validator attest ek` or `tpm2_createek -u`).
    #[arg(long, value_name = "FILE")]
    pub(crate) ek: PathBuf,
    /// The node's EK certificate (DER, from its NV index).
    #[arg(long, value_name = "FILE")]
    pub(crate) ek_cert: PathBuf,
    /// The TPM vendor's CA certificates (DER or PEM files, or directories of them).
    #[arg(long = "ca", value_name = "CERT", required = true)]
    pub(crate) cas: Vec<PathBuf>,
    /// The AK to enroll (TPM2B_PUBLIC).
    #[arg(long, value_name = "FILE")]
    pub(crate) ak: PathBuf,
    /// Where to write the credential (tpm2-tools' format).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// Where to write the secret it holds (keep it on the verifier).
    #[arg(long, value_name = "FILE")]
    pub(crate) secret_out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct ActivateArgs {
    #[command(flatten)]
    pub(crate) tpm: TpmArgs,
    /// The credential (tpm2-tools' format).
    #[arg(long = "in", value_name = "FILE")]
    pub(crate) input: PathBuf,
    /// Where to write the secret.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct QuoteArgs {
    #[command(flatten)]
    pub(crate) tpm: TpmArgs,
    /// The verifier's nonce, hex (at most 64 bytes).
    #[arg(long, value_name = "HEX")]
    pub(crate) nonce: String,
    /// The PCRs to quote, as tpm2-tools writes them.
    #[arg(
        long,
        value_name = "SELECTION",
        default_value = "sha256:0,1,2,3,4,5,6,7,8,9,11,13,14"
    )]
    pub(crate) pcrs: String,
    /// The directory to write into (created if its parent exists).
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    /// The built initramfs.
    #[arg(long, value_name = "FILE")]
    pub(crate) initramfs: PathBuf,
    /// The BOM (default: the one packed in the initramfs, etc/validator/bom.toml).
    #[arg(long, value_name = "FILE")]
    pub(crate) bom: Option<PathBuf>,
    /// The root filesystem tree (needed when the BOM names root modules).
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
    /// The verity root hash, hex (default: the BOM's).
    #[arg(long, value_name = "HEX")]
    pub(crate) root_hash: Option<String>,
    /// Predict a BIOS boot (no efivarfs first).
    #[arg(long)]
    pub(crate) bios: bool,
    /// The --file list of each slot is every record the boot loader makes in those PCRs,
    /// in order (a --file without =FILE is one record of any content: GRUB's grubenv);
    /// without it other records are replayed but not judged.
    #[arg(long)]
    pub(crate) files_complete: bool,
    /// Predict no kexec entries (by default each slot also gets the line the init gives
    /// it when the other slot falls back to it by kexec: the other slot's GRUB line with
    /// validator.slot= naming it and BOOT_IMAGE= dropped).
    #[arg(long)]
    pub(crate) no_kexec: bool,
    /// A slot and its kernel command line as /proc/cmdline will show it:
    /// `A=BOOT_IMAGE=/A/vmlinuz root=...` (repeat for each slot).
    #[arg(long = "slot", value_name = "SLOT=CMDLINE", required = true)]
    pub(crate) slots: Vec<String>,
    /// A file the boot loader measures for a slot, in the order it reads them:
    /// `A:9:/A/vmlinuz=LOCAL_FILE` (slot, PCR, the path it logs, the file's copy here);
    /// without `=FILE` (with --files-complete), one record of any content.
    #[arg(long = "file", value_name = "SLOT:PCR:PATH[=FILE]")]
    pub(crate) files: Vec<String>,
    /// A slot booted as a Unified Kernel Image, `A=FILE`: what systemd-stub measures of it
    /// into PCR 11 (its sections) is predicted before our events; the slot's --slot line
    /// must be the image's .cmdline, which a kexec into it also gives.
    #[arg(long = "uki", value_name = "SLOT=FILE", conflicts_with = "bios")]
    pub(crate) ukis: Vec<String>,
    /// Where to write the reference file.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The enrolled attestation key (TPM2B_PUBLIC, as `validator attest ak` writes it).
    #[arg(long, value_name = "FILE")]
    pub(crate) ak: PathBuf,
    /// A reference file of an accepted image (repeat for each).
    #[arg(long = "reference", value_name = "FILE")]
    pub(crate) references: Vec<PathBuf>,
    /// The boot's report (report.json); its quote is checked against its digest.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["message", "signature", "nonce"])]
    pub(crate) report: Option<PathBuf>,
    /// The boot's binary event log (/run/validator/tpm-eventlog.bin).
    #[arg(long, value_name = "FILE")]
    pub(crate) eventlog: Option<PathBuf>,
    /// A challenge's quote message (TPMS_ATTEST), with --signature and --nonce (the
    /// report's options --reference, --accept, --no-fallback and --after do not apply).
    #[arg(
        long,
        value_name = "FILE",
        requires_all = ["signature", "nonce"],
        conflicts_with_all = ["references", "accept", "no_fallback", "after"]
    )]
    pub(crate) message: Option<PathBuf>,
    /// A challenge's signature (TPMT_SIGNATURE).
    #[arg(long, value_name = "FILE")]
    pub(crate) signature: Option<PathBuf>,
    /// The nonce the challenge sent, hex.
    #[arg(long, value_name = "HEX")]
    pub(crate) nonce: Option<String>,
    /// Decisions accepted for the reported boot (comma-separated; default pass).
    #[arg(long, value_name = "DECISIONS", value_delimiter = ',')]
    pub(crate) accept: Vec<validator::formats::tpm::measurement::Decision>,
    /// Refuse a log in which an earlier boot fell back.
    #[arg(long)]
    pub(crate) no_fallback: bool,
    /// The node's last accepted quote's clock, `RESET_COUNT:CLOCK_MS`: a quote not newer
    /// is refused as replayed.
    #[arg(long, value_name = "RESET:CLOCK")]
    pub(crate) after: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

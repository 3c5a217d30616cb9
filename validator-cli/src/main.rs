//! `validator`: the boot gate's checks as a command for hosts, image builds and live nodes.
//!
//! Contract: every subcommand has `--help`; `--version` prints the version; exit status 0
//! means every check passed, 1 that a check failed, 2 bad usage or an unusable input (a
//! missing, unreadable, oversized or malformed file, named in the message). Paths are
//! taken as given (any bytes, not only UTF-8). Input files are checked before they are
//! read (no FIFO, directory or device where a file is expected) and read up to a
//! documented limit. A closed stdout ends the output, not the check: the exit status is
//! still the verdict. Control characters in a message (a file name, a value from the
//! input) are escaped (`\u{1b}`, `\n`), so a message cannot move the terminal's cursor or
//! forge a line. Outputs follow one rule (`files.rs`): only a regular file is replaced.
//! `validator completions SHELL` and `validator man` generate shell
//! completions and man pages. The PID-1 init does not link this crate.
//!
//! Layout: the command tree in `cli.rs`, each command group in its own file; this file
//! parses, dispatches and turns the verdict into the exit status.

mod attest;
mod bom;
mod cli;
mod cmdline;
mod files;
mod gpt;
mod kernel;
mod keys;
mod man;
mod modules;
mod pe;
mod preflight;
mod recheck;
mod report;
mod slot;
mod tpm;
mod verity;

use std::process::ExitCode;

use clap::Parser;

use cli::{BomCmd, Cli, Cmd, KernelCmd, KeysCmd, ModulesCmd, PeCmd, TpmCmd, VerityCmd};
use validator::util::out::Out;

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
            eprintln!("validator: {}", validator::util::escape_controls(&e));
            ExitCode::from(2)
        }
    }
}

fn run(cmd: Cmd, out: &mut Out) -> Res {
    match cmd {
        Cmd::Modules(ModulesCmd::Check(a)) => modules::check(a, out),
        Cmd::Keys(KeysCmd::Extract { vmlinuz, output }) => keys::extract(&vmlinuz, output, out),
        Cmd::Kernel(KernelCmd::Info { vmlinuz }) => kernel::info(&vmlinuz, out),
        Cmd::Pe(PeCmd::Verify(a)) => pe::verify(a, out),
        Cmd::Verity(VerityCmd::Verify(a)) => verity::verify(a, out),
        Cmd::Tpm(TpmCmd::Pcrs { tcp, json }) => tpm::pcrs(tcp, json, out),
        Cmd::Tpm(TpmCmd::Replay { log, json }) => tpm::replay(&log, json, out),
        Cmd::Attest(c) => attest::run(c, out),
        Cmd::Bom(BomCmd::Check { file }) => bom::check(&file, out),
        Cmd::Slot(c) => slot::run(c, out),
        Cmd::Preflight(a) => preflight::run(a, out),
        Cmd::Recheck(a) => recheck::run(a, out),
        Cmd::Report(a) => report::run(a, out),
        Cmd::Cmdline { line } => cmdline::show(line, out),
        Cmd::Gpt { disk } => gpt::list(&disk, out),
        Cmd::Completions { shell } => man::completions(shell, out),
        Cmd::Man { dir } => man::man(dir, out),
    }
}

//! `sigcase-load FILE [FLAGS]`: `finit_module(2)` on FILE with FLAGS (decimal, default 0)
//! and no parameters, as the init loads a module; prints `ok` or the errno's name
//! (`EKEYREJECTED`), and exits 0 either way (2 when FILE cannot be opened). Runs inside
//! the test VM only (static, built for x86_64-unknown-linux-musl).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: sigcase-load FILE [FLAGS]");
        return ExitCode::from(2);
    };
    let flags: u32 = match args.get(1).map(|f| f.parse()) {
        None => 0,
        Some(Ok(f)) => f,
        Some(Err(_)) => {
            eprintln!("sigcase-load: FLAGS must be a decimal number");
            return ExitCode::from(2);
        }
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("sigcase-load: {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let flags = nix::kmod::ModuleInitFlags::from_bits_retain(flags);
    match nix::kmod::finit_module(&file, c"", flags) {
        Ok(()) => println!("ok"),
        Err(e) => println!("{e:?}"),
    }
    ExitCode::SUCCESS
}

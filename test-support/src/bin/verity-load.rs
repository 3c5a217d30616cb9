//! `verity-load NAME DATA HASH BLOCKS ROOT_HASH SALT SIGNATURE`: hands a root-hash
//! signature to the kernel's dm-verity as the init does, with no check of ours in between:
//! the file SIGNATURE as a `user` key `sigrules:NAME` in the process keyring, a device
//! NAME, and a read-only `verity` table over DATA and HASH (4096-byte blocks, BLOCKS data
//! blocks, the hash tree after `veritysetup`'s superblock, SHA-256, ROOT_HASH and SALT in
//! hex) naming that key in `root_hash_sig_key_desc`. Prints `ok` when the kernel took the
//! table, or the errno's name (`EKEYREJECTED`); the device is removed either way. Exits 0
//! with an answer, 2 when the set-up before the table failed. Runs inside the test VM
//! only (static, built for x86_64-unknown-linux-musl), through `validator::sys`' own
//! `add_key(2)` and device-mapper ioctls.

use std::path::Path;
use std::process::ExitCode;

use validator::sys::dm::{Control, Target};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, data, hash, blocks, root_hash, salt, sig] = args.as_slice() else {
        eprintln!("usage: verity-load NAME DATA HASH BLOCKS ROOT_HASH SALT SIGNATURE");
        return ExitCode::from(2);
    };
    let Ok(blocks) = blocks.parse::<u64>() else {
        eprintln!("verity-load: BLOCKS must be a number");
        return ExitCode::from(2);
    };
    let signature = match std::fs::read(sig) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("verity-load: {sig}: {e}");
            return ExitCode::from(2);
        }
    };
    let desc = format!("sigrules:{name}");
    if let Err(e) = validator::sys::add_user_key(&desc, &signature) {
        eprintln!("verity-load: {e}");
        return ExitCode::from(2);
    }
    let control = match Control::open(Path::new("/dev"), Path::new("/sys")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("verity-load: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = control.create(name, &format!("SIGRULES-{name}")) {
        eprintln!("verity-load: {e}");
        return ExitCode::from(2);
    }
    let table = Target {
        start: 0,
        length: blocks * 8,
        kind: "verity".into(),
        params: format!(
            "1 {data} {hash} 4096 4096 {blocks} 1 sha256 {root_hash} {salt} 2 \
             root_hash_sig_key_desc {desc}"
        ),
    };
    match control.load(name, &[table], true) {
        Ok(()) => println!("ok"),
        Err(e) => println!("{:?}", e.errno),
    }
    if let Err(e) = control.remove(name) {
        eprintln!("verity-load: {e}");
    }
    ExitCode::SUCCESS
}

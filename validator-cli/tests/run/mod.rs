//! Running the `validator` binary from the process tests: exit code, stdout, stderr.

use std::process::Command;

/// Runs `validator ARGS` to its end: (exit code, or -1 on a signal; stdout; stderr).
pub fn validator(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_validator"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

//! Test keys and certificates: one maker (`openssl req -x509`) for the tests and the test
//! bed, instead of a copy of the command line in every file that needs a signer.
//!
//! Contract: [`self_signed`] writes an unencrypted PEM private key and a self-signed PEM
//! certificate, or panics with openssl's message. Limits: what `openssl req` makes; keys
//! with chains or odd extensions for the signature-rule cases are the `sigcases` crate's.

use std::path::Path;
use std::process::Command;

/// A key of `algorithm` (openssl's `-newkey` argument: `rsa:2048`, `rsa:4096`,
/// `ec -pkeyopt ec_paramgen_curve:P-256` is spelled `["ec", "-pkeyopt", ...]` through
/// `extra`) at `key`, and a self-signed certificate for `/CN=<cn>` valid `days` days at
/// `cert`; `extra` goes to `openssl req` as given (`-addext`, `-sha256`, ...).
pub fn self_signed(key: &Path, cert: &Path, cn: &str, algorithm: &str, days: u32, extra: &[&str]) {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-newkey", algorithm])
        .args(["-days", &days.to_string(), "-subj", &format!("/CN={cn}")])
        .args(extra)
        .arg("-keyout")
        .arg(key)
        .arg("-out")
        .arg(cert)
        .output()
        .expect("openssl runs (install openssl)");
    assert!(
        out.status.success(),
        "openssl req for {cn}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An RSA-2048 key and its certificate, `/CN=<cn>`, valid 30 days: the usual test signer.
pub fn rsa(key: &Path, cert: &Path, cn: &str) {
    self_signed(key, cert, cn, "rsa:2048", 30, &[]);
}

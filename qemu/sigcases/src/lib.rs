//! Test support for `docs/SIGNATURE-RULES.md`: for each rule by which the kernel refuses
//! (or accepts) a module, module files that break exactly that rule, built from real
//! Debian modules (`crc8` and a few others of the provisioned 6.1 and 6.12 kernels) with
//! real tools: `sign-file` from `linux-kbuild-6.1`, `openssl cms`, `objcopy`, and byte
//! edits of the signature trailer, the PKCS#7 ([`der`]) and ELF sections ([`elf`]).
//!
//! The same cases feed the gate's unit tests (`validator/tests/signature_rules.rs`) and
//! the QEMU test that hands them to the real kernels (`qemu/tests/signature_rules.rs`,
//! set up by `qemu::sigrules`), so both judge identical bytes. [`cases`] builds a kernel's
//! set once per process into `target/sigcases/<pid>/`; the keys ([`mod@keys`]) are made fresh
//! each time.
//!
//! The `sigcase-load` binary (built static for the test VM) is the in-VM loader: it calls
//! `finit_module` on one file with the given flags, as the init does, and prints the
//! errno's name. [`roothash`] makes root-hash signatures for dm-verity the same way.
//!
//! Limits: x86-64 little-endian modules only; the builders panic (test support) when a
//! tool is missing or a module lacks what a case edits.

// Test support: a failed build step should stop the test that asked for it loudly.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test harness: a failed step panics the test that called it"
)]

pub mod cases;
pub mod der;
pub mod elf;
pub mod keys;
pub mod roothash;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

pub use cases::{Case, Kernel, Set};
pub use keys::Keys;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// This process's directory under `target/sigcases/` (directories of processes that are
/// gone are removed on the way).
fn process_dir() -> PathBuf {
    let base = workspace().join("target/sigcases");
    if let Ok(rd) = std::fs::read_dir(&base) {
        for e in rd.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.parse::<u32>().is_ok() && !PathBuf::from(format!("/proc/{name}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    base.join(std::process::id().to_string())
}

static KEYS: OnceLock<Keys> = OnceLock::new();
static SETS: Mutex<Vec<&'static Set>> = Mutex::new(Vec::new());

/// The keys of this process.
pub fn keys() -> &'static Keys {
    KEYS.get_or_init(|| Keys::make(&process_dir().join("keys")))
}

/// The cases of `kernel`, built once per process.
pub fn set(kernel: Kernel) -> &'static Set {
    let mut sets = SETS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = sets.iter().find(|s| s.kernel == kernel) {
        return s;
    }
    let dir = process_dir().join(kernel.label());
    let s: &'static Set = Box::leak(Box::new(cases::build(
        kernel,
        &workspace().join("target/kernels"),
        keys(),
        &dir,
    )));
    sets.push(s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case of both kernels builds, and no two cases of a kernel are the same file
    /// (a case identical to another would test nothing of its own).
    #[test]
    fn every_case_builds_and_differs() {
        for k in Kernel::ALL {
            let s = set(k);
            let mut seen = std::collections::BTreeMap::new();
            for c in &s.cases {
                let bytes = std::fs::read(&c.file).unwrap();
                let same_as = seen.insert(bytes, c.id.clone());
                // Rows that give the kernel the same file in another setting.
                let groups: [&[&str]; 3] = [
                    &["S30", "S38", "S42b"],
                    &["S01", "S42a"],
                    &["S02", "S42c", "S43b"],
                ];
                let allowed = same_as.as_deref().is_some_and(|o| {
                    groups
                        .iter()
                        .any(|g| g.contains(&o) && g.contains(&c.id.as_str()))
                });
                assert!(
                    same_as.is_none() || allowed,
                    "{} {} = {:?}",
                    k.label(),
                    c.id,
                    same_as
                );
            }
            assert!(s.cases.len() > 70, "{}", s.cases.len());
        }
    }
}

//! What the integration tests share: the provisioned kernels, scratch directories and a
//! deterministic generator. (Each test crate uses a part of it.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// An unpacked kernel package fetched by `scripts/provision` (`default`, `k612`, `cloud`).
pub fn kernel_root(name: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/kernels")
        .join(name);
    assert!(
        p.join("lib/modules").is_dir(),
        "{} missing: run PROVISION_KERNELS=all scripts/provision",
        p.display()
    );
    p
}

/// The kernel image of a provisioned kernel.
pub fn vmlinuz(name: &str) -> PathBuf {
    std::fs::read_dir(kernel_root(name).join("boot"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
        .unwrap()
}

/// Every module file of a provisioned kernel, sorted.
pub fn all_modules(name: &str) -> Vec<PathBuf> {
    validator::stages::modules::batch::collect(&[kernel_root(name).join("lib/modules")]).unwrap()
}

/// The module file of a provisioned kernel whose name is `file` (`crc16.ko`).
pub fn module(kernel: &str, file: &str) -> PathBuf {
    all_modules(kernel)
        .into_iter()
        .find(|p| p.file_name().unwrap() == file)
        .unwrap()
}

/// A fresh directory `target/test-tmp/<name>-<pid>`.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-tmp")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny deterministic generator (xorshift), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

//! What the benchmarks share: reading their path and count arguments.
//!
//! Cargo runs a benchmark in its package's directory (`validator/`), while
//! `docs/PERFORMANCE.md` and `scripts/bench` give paths from the repository root: a
//! relative path that does not exist where the benchmark runs is taken from the workspace
//! root.

use std::path::{Path, PathBuf};

/// The workspace root (the repository).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// A path argument: as given when it exists (or is absolute), else against the
/// workspace root.
pub fn path_arg(arg: &str) -> PathBuf {
    let p = PathBuf::from(arg);
    if p.is_absolute() || p.exists() {
        return p;
    }
    workspace_root().join(p)
}

/// The kernel tree argument of the modules benchmark (default `target/kernels/default`).
pub fn kernel_dir(arg: Option<&str>) -> PathBuf {
    path_arg(arg.unwrap_or("target/kernels/default"))
}

/// The benchmark's first numeric argument (cargo adds `--bench`), else `default`.
pub fn count_arg<T: std::str::FromStr>(default: T) -> T {
    std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .find_map(|a| a.parse().ok())
        .unwrap_or(default)
}

//! The fuzz targets' entry points live in the workspace's `test-support` crate
//! (`test-support/src/fuzz/mod.rs`), which the stable test suite replays the committed inputs
//! through (`validator/tests/fuzz_regressions.rs`); the targets call them through this
//! re-export.
pub use test_support::fuzz::*;

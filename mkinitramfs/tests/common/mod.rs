//! What the integration tests share: the workspace, and the spec of a small initramfs
//! over the provisioned Debian 6.1 kernel.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use mkinitramfs::closure::KernelTree;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The spec of an uncompressed initramfs (mtime 0, gate on) for the default kernel: a BOM
/// named `image_id` in `dir` loading `load`, trusting `trust` (paths next to the BOM), and
/// an empty init.
pub fn small_spec(dir: &Path, image_id: &str, load: &[&str], trust: &[&str]) -> mkinitramfs::Spec {
    let root = workspace().join("target/kernels/default");
    let tree = KernelTree::open(&root).unwrap();
    let list = |v: &[&str]| {
        v.iter()
            .map(|m| format!("{m:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let bom = dir.join("bom.toml");
    std::fs::write(
        &bom,
        format!(
            "schema = 1\nimage_id = \"{image_id}\"\n\n[kernel]\nrelease = \"{}\"\n\n\
             [modules]\nload = [{}]\n\n[policy]\ntrust = [{}]\n",
            tree.release,
            list(load),
            list(trust)
        ),
    )
    .unwrap();
    let init = dir.join("init");
    std::fs::write(&init, b"#!/bin/sh\n").unwrap();
    let mut spec = mkinitramfs::Spec::new(&root, &bom, &init);
    spec.mtime = 0;
    spec.compress = mkinitramfs::Compress::None;
    spec.gate = true;
    spec
}

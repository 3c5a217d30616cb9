//! The test node's initramfs, built with the `mkinitramfs` library from a BOM file: the
//! static init, the BOM, the module closure of its `modules.load`, with module files
//! replaced (`overrides`) or tampered (one byte of the ELF body flipped) on request. With
//! any replaced or tampered module the build-time gate is off, so the boot-time gate is
//! what judges them.

use std::path::{Path, PathBuf};

use crate::paths::{self, Kernel};
use crate::HarnessError;

/// What goes into one initramfs besides the init and the BOM's module closure.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Host files packed at the given paths.
    pub files: Vec<(PathBuf, String)>,
    /// Module files packed in place of the kernel's.
    pub module_overrides: Vec<(String, PathBuf)>,
    /// Modules packed with one byte of their ELF body flipped.
    pub tampered_modules: Vec<String>,
}

/// Builds the initramfs for `kernel` and the BOM at `bom_path` into `out`; tampered
/// module copies go to `scratch`.
pub fn build(
    kernel: &Kernel,
    bom_path: &Path,
    extras: &Extras,
    out: &Path,
    scratch: &Path,
) -> Result<(), HarnessError> {
    let mut overrides = extras.module_overrides.clone();
    if !extras.tampered_modules.is_empty() {
        let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
            .map_err(|e| HarnessError::Setup(e.to_string()))?;
        for m in &extras.tampered_modules {
            let rel = tree
                .files
                .get(m)
                .ok_or_else(|| HarnessError::Setup(format!("no module {m} in the kernel")))?;
            let src = tree.moddir.join(rel);
            let mut bytes = std::fs::read(&src).map_err(|e| HarnessError::io(&src, e))?;
            let body = validator::formats::kmod::sig::split(&bytes)
                .map(|s| s.body.len())
                .unwrap_or(bytes.len());
            bytes[body / 2] ^= 0x01;
            let tampered = scratch.join(format!("tampered-{m}.ko"));
            std::fs::write(&tampered, &bytes).map_err(|e| HarnessError::io(&tampered, e))?;
            overrides.push((m.clone(), tampered));
        }
    }
    let mut spec = mkinitramfs::Spec::new(&kernel.root, bom_path, &paths::init_binary()?);
    spec.extra_files = extras.files.clone();
    spec.mtime = 0;
    // The build-time gate would refuse a tampered module; the boot-time gate is tested.
    spec.gate = overrides.is_empty();
    spec.module_overrides = overrides;
    let built = mkinitramfs::build(&spec).map_err(|e| HarnessError::Setup(e.to_string()))?;
    std::fs::write(out, &built.bytes).map_err(|e| HarnessError::io(out, e))
}

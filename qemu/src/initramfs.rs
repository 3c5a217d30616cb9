//! The test node's initramfs, built with the `mkinitramfs` library from a BOM file: the
//! static init, the BOM, the module closure of its `modules.load`, with module files
//! replaced (`overrides`), tampered (one byte of the ELF body flipped) or re-signed with
//! OVMF's snakeoil key on request. With any replaced or tampered module the build-time
//! gate is off, so the boot-time gate is what judges them; re-signed ones pass both.

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
    /// Modules packed re-signed with OVMF's snakeoil key by `sign-file <hash>`, as
    /// `(module, hash)`; the snakeoil key's files are written to the scratch directory.
    /// The build-time gate stays on for them (the BOM should trust `snake.pem`).
    pub snakeoil_signed: Vec<(String, String)>,
}

/// Writes `kernel`'s module `name` re-signed by `key` (`sign-file <hash>`) to `out`.
pub fn resign_module(
    kernel: &Kernel,
    name: &str,
    key: &sigcases::keys::Key,
    hash: &str,
    out: &Path,
) -> Result<(), HarnessError> {
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let rel = tree
        .files
        .get(name)
        .ok_or_else(|| HarnessError::Setup(format!("no module {name} in the kernel")))?;
    let src = tree.moddir.join(rel);
    let bytes = std::fs::read(&src).map_err(|e| HarnessError::io(&src, e))?;
    sigcases::cases::resign(&bytes, key, hash, out);
    Ok(())
}

/// Builds the initramfs for `kernel` and the BOM at `bom_path` into `out`, with the test
/// bed's init ([`paths::init_binary`]); tampered module copies go to `scratch`.
pub fn build(
    kernel: &Kernel,
    bom_path: &Path,
    extras: &Extras,
    out: &Path,
    scratch: &Path,
) -> Result<(), HarnessError> {
    build_with(
        kernel,
        bom_path,
        extras,
        out,
        scratch,
        &paths::init_binary()?,
    )
}

/// [`build`] with the init at `init` (the boot benchmark times the production one,
/// [`paths::production_init`]: no test hooks, so the full report is not printed on the
/// console).
pub fn build_with(
    kernel: &Kernel,
    bom_path: &Path,
    extras: &Extras,
    out: &Path,
    scratch: &Path,
    init: &Path,
) -> Result<(), HarnessError> {
    let mut overrides = extras.module_overrides.clone();
    // The build-time gate would refuse a tampered module; the boot-time gate is tested.
    let gate = overrides.is_empty() && extras.tampered_modules.is_empty();
    if !extras.snakeoil_signed.is_empty() {
        let key = sigcases::keys::snakeoil(scratch);
        for (m, hash) in &extras.snakeoil_signed {
            let signed = scratch.join(format!("{m}-{hash}.ko"));
            resign_module(kernel, m, &key, hash, &signed)?;
            overrides.push((m.clone(), signed));
        }
    }
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
            // A byte only the signature covers: e_ident's padding (EI_PAD, offset 9),
            // which neither the kernel's ELF checks nor the gate's parser read, so the
            // signature is the one reason to refuse (a byte in the symbol table would
            // also rename an import).
            bytes[9] ^= 0x01;
            let tampered = scratch.join(format!("tampered-{m}.ko"));
            std::fs::write(&tampered, &bytes).map_err(|e| HarnessError::io(&tampered, e))?;
            overrides.push((m.clone(), tampered));
        }
    }
    let mut spec = mkinitramfs::Spec::new(&kernel.root, bom_path, init);
    spec.extra_files = extras.files.clone();
    spec.mtime = 0;
    spec.gate = gate;
    spec.module_overrides = overrides;
    let built = mkinitramfs::build(&spec).map_err(|e| HarnessError::Setup(e.to_string()))?;
    std::fs::write(out, &built.bytes).map_err(|e| HarnessError::io(out, e))
}

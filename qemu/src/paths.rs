//! Where the test bed finds the workspace, the provisioned kernels and the built init.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::HarnessError;

/// The workspace root (the directory holding the top-level `Cargo.toml`).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// An unpacked kernel package fetched by `scripts/provision`.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The package root (`boot/`, `lib/modules/<release>/`).
    pub root: PathBuf,
    pub release: String,
    pub vmlinuz: PathBuf,
}

/// The kernel provisioned under `target/kernels/<name>` (`default`, `k612`, `cloud`).
pub fn kernel(name: &str) -> Result<Kernel, HarnessError> {
    let root = workspace().join("target/kernels").join(name);
    let tree = mkinitramfs::closure::KernelTree::open(&root).map_err(|e| {
        HarnessError::Setup(format!(
            "kernel {name}: {e} (run scripts/provision{})",
            if name == "default" {
                ""
            } else {
                " with PROVISION_KERNELS=all"
            }
        ))
    })?;
    let vmlinuz = tree.vmlinuz.clone().ok_or_else(|| {
        HarnessError::Setup(format!("kernel {name}: no boot/vmlinuz-{}", tree.release))
    })?;
    Ok(Kernel {
        root,
        release: tree.release,
        vmlinuz,
    })
}

/// `kernel`'s tree with the vmlinux ELF for its image ([`test_support::elf_tree`]), for
/// `mkinitramfs::build`: every build of an initramfs otherwise decodes the image's xz
/// payload again, about a second of CPU in each test process. The boots themselves are
/// given the package's bzImage ([`Kernel::vmlinuz`]).
pub fn elf_tree(kernel: &Kernel) -> Result<PathBuf, HarnessError> {
    test_support::elf_tree(&kernel.root, &kernel.release).map_err(HarnessError::Setup)
}

/// The static builds made so far in this process, by name ([`build_static`]).
static BUILT: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

/// The static init, built for `x86_64-unknown-linux-musl` in release mode with the
/// `test-hooks` feature (the production init has none). `VALIDATOR_INIT` names a
/// prebuilt one; otherwise it is (re)built once per process with cargo (`build_static`).
pub fn init_binary() -> Result<PathBuf, HarnessError> {
    if let Ok(p) = std::env::var("VALIDATOR_INIT") {
        return Ok(PathBuf::from(p));
    }
    build_static(
        "init-test-hooks",
        "init",
        "init",
        &["--features", "test-hooks"],
    )
}

/// The production init, built exactly as the README says (no features).
pub fn production_init() -> Result<PathBuf, HarnessError> {
    build_static("init-production", "init", "init", &[])
}

/// The operator's CLI (`validator`) as a node image carries it: static
/// (`x86_64-unknown-linux-musl`, release), built once per process.
pub fn validator_cli() -> Result<PathBuf, HarnessError> {
    build_static("validator", "validator-cli", "validator", &[])
}

/// Builds `package`'s binary `bin` static (`x86_64-unknown-linux-musl`, release, `extra`
/// cargo arguments) once per process, and returns a copy of it named `name` under
/// `target/harness/bin/`. Every static build of the test bed shares the target directory
/// `target/harness`, so the dependencies (AWS-LC's C above all) are compiled once for all
/// of them; a build of the same binary with other features replaces cargo's output, which
/// is why each is copied out before the next build starts: under this process's lock and
/// a file lock ([`file_lock`]) on `target/harness/.build-lock` against other processes
/// (the suite runs tests of one binary in processes of their own, side by side).
pub(crate) fn build_static(
    name: &'static str,
    package: &str,
    bin: &str,
    extra: &[&str],
) -> Result<PathBuf, HarnessError> {
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, p)) = built.iter().find(|(n, _)| *n == name) {
        return Ok(p.clone());
    }
    let ws = workspace();
    let target_dir = ws.join("target/harness");
    let _other_processes = file_lock(&target_dir.join(".build-lock"))?;
    crate::progress(&format!(
        "building {bin} (static musl release build: minutes the first time, seconds after)"
    ));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(&ws)
        .args([
            "build",
            "--release",
            "--locked",
            "-q",
            "-p",
            package,
            "--bin",
            bin,
            "--target",
            "x86_64-unknown-linux-musl",
        ])
        .args(extra)
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .map_err(|e| HarnessError::Setup(format!("cannot run cargo to build {bin}: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Setup(format!(
            "building {bin} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let from = target_dir
        .join("x86_64-unknown-linux-musl/release")
        .join(bin);
    let bin_dir = target_dir.join("bin");
    std::fs::create_dir_all(&bin_dir).map_err(|e| HarnessError::io(&bin_dir, e))?;
    let to = bin_dir.join(name);
    let part = bin_dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::copy(&from, &part).map_err(|e| HarnessError::io(&from, e))?;
    std::fs::rename(&part, &to).map_err(|e| HarnessError::io(&to, e))?;
    built.push((name, to.clone()));
    Ok(to)
}

/// An exclusive lock (`flock`) on `path`, created if missing, held until the value is
/// dropped: what keeps two test processes from building the same cache at once.
pub fn file_lock(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, HarnessError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(dir, e))?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| HarnessError::io(path, e))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| HarnessError::io(path, std::io::Error::from(e)))
}

/// This process's directory for the files scenarios are set up with (edited BOMs,
/// modules, configuration), under `target/qemu-runs/`.
pub fn edited_files_dir() -> Result<PathBuf, HarnessError> {
    let d = workspace()
        .join("target/qemu-runs")
        .join(format!("fault-files-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
    Ok(d)
}

/// A fresh working directory under `target/qemu-runs/` for one run; kept for its logs.
pub fn run_dir(name: &str) -> Result<PathBuf, HarnessError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = workspace().join("target/qemu-runs").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
    Ok(d)
}

/// Removes the disk and filesystem images of a run directory (and the root tree they were
/// made from, and those of its `slot-*` directories), keeping logs, the initramfs, the
/// TPM's state and the ESP's small files.
pub fn remove_images(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.filter_map(Result::ok) {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let image = [".img", ".ext4", ".zero", ".verity", ".data"]
            .iter()
            .any(|s| name.ends_with(s))
            && name != "initrd.img";
        if image || name == "root.sig" {
            let _ = std::fs::remove_file(&p);
        } else if name == "rootfs" || name == "tpm-state-served" || name == "image" {
            // (The TPM's state and the ESP's small files stay: a verifier's inputs, the
            // AK a node's TPM derives and the boot entry's command line.)
            let _ = std::fs::remove_dir_all(&p);
        } else if (name.starts_with("slot-") || name.starts_with("saved-")) && p.is_dir() {
            // An A/B node's slot directories (crate::ab).
            remove_images(&p);
        }
    }
}

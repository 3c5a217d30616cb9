//! What the workspace's tests share (a dev-dependency of every crate that tests; never a
//! dependency of what ships): the provisioned kernels, scratch directories, a
//! deterministic generator, processes run under a deadline, hostile inputs (a FIFO, a
//! sparse file, a name that is not UTF-8), fixture trees copied with their links, one
//! swtpm launcher ([`swtpm`]), one maker of test keys and certificates ([`keys`]), the
//! benchmarks' path arguments ([`mod@bench`]), function and file lengths ([`sizes`]), the
//! gate the signature-rule cases are judged by ([`sigrules`]), an installed disk's table
//! as docs/INSTALL.md shows it ([`install`]), the one import scanner the
//! layer and import-cycle checks read the sources with ([`imports`]), and the fuzz
//! targets' entry points ([`fuzz`]: libFuzzer's targets in `fuzz/` and the regression
//! replay call the same functions).
//!
//! Contract: test code - a helper that cannot do its job panics with what went wrong
//! (the calling test fails loudly); paths are found from the workspace root, whatever
//! crate's test calls.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a helper that cannot do its job fails the calling test"
)]

use std::path::{Path, PathBuf};

pub mod bench;
pub mod fuzz;
pub mod imports;
pub mod install;
pub mod keys;
pub mod sigrules;
pub mod sizes;
pub mod swtpm;

/// The workspace root (the repository).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An unpacked kernel package fetched by `scripts/provision` (`default`, `k612`, `cloud`).
pub fn kernel_root(name: &str) -> PathBuf {
    let p = workspace().join("target/kernels").join(name);
    assert!(
        p.join("lib/modules").is_dir(),
        "{} missing: run PROVISION_KERNELS=all scripts/provision",
        p.display()
    );
    p
}

/// The release of a provisioned kernel (its one directory under `lib/modules`).
pub fn kernel_release(name: &str) -> String {
    std::fs::read_dir(kernel_root(name).join("lib/modules"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap()
}

/// The file of an unpacked kernel package's `boot/` whose name starts with `prefix`
/// (`vmlinuz-`, `config-`), if there is one.
pub fn boot_file(root: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_dir(root.join("boot"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
}

/// The kernel image of a provisioned kernel.
pub fn vmlinuz(name: &str) -> PathBuf {
    boot_file(&kernel_root(name), "vmlinuz-")
        .unwrap_or_else(|| panic!("kernel {name} has no boot/vmlinuz-*"))
}

/// A tree of the kernel package at `root` (`boot/vmlinuz-<release>`,
/// `lib/modules/<release>/`) that reads as the package does but whose image is the
/// vmlinux ELF (which mkinitramfs and the CLI's `--vmlinuz` take as they take the
/// bzImage: the same certificates, vermagic and CRCs). For runs where the kernel image
/// is configuration, not what is tested: a bzImage costs an xz decode of tens of MB,
/// about a second of CPU, in every process given it. Kept in
/// `target/qemu-cache/elf-tree/<SHA-256 of the image's bytes and the package root>/`
/// (`lib/modules/<release>` a link to the package's), made under another name and
/// renamed into place, so a tree found there is whole.
pub fn elf_tree(root: &Path, release: &str) -> Result<PathBuf, String> {
    let root = std::fs::canonicalize(root).map_err(|e| format!("{}: {e}", root.display()))?;
    let vmlinuz = root.join(format!("boot/vmlinuz-{release}"));
    let image = std::fs::read(&vmlinuz).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    let mut keyed = validator::trust::keys::sha256(&image).to_vec();
    keyed.extend_from_slice(root.as_os_str().as_encoded_bytes());
    let key = validator::util::hex(&validator::trust::keys::sha256(&keyed));
    let cache = workspace().join("target/qemu-cache/elf-tree");
    let tree = cache.join(&key);
    let elf_at = |t: &Path| t.join(format!("boot/vmlinuz-{release}"));
    if elf_at(&tree).is_file() {
        return Ok(tree);
    }
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    // Its own scratch name: tests of one process run on threads.
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let part = cache.join(format!(".{key}.{}.{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&part);
    let modules = part.join("lib/modules");
    for d in [part.join("boot"), modules.clone()] {
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    }
    let elf = validator::formats::vmlinuz::vmlinux(&image)
        .map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    std::fs::write(elf_at(&part), elf).map_err(|e| io(&elf_at(&part), e))?;
    let link = modules.join(release);
    std::os::unix::fs::symlink(root.join("lib/modules").join(release), &link)
        .map_err(|e| io(&link, e))?;
    // Another process may have put the same tree in place first: that one is as good.
    if std::fs::rename(&part, &tree).is_err() {
        let _ = std::fs::remove_dir_all(&part);
        if !elf_at(&tree).is_file() {
            return Err(format!("cannot put the ELF tree at {}", tree.display()));
        }
    }
    Ok(tree)
}

/// [`elf_tree`] of a provisioned kernel: its package as [`kernel_root`] finds it, the
/// image the vmlinux ELF.
pub fn kernel_root_elf(name: &str) -> PathBuf {
    elf_tree(&kernel_root(name), &kernel_release(name)).unwrap()
}

/// The image of [`kernel_root_elf`]: a provisioned kernel's vmlinux ELF.
pub fn vmlinux(name: &str) -> PathBuf {
    let release = kernel_release(name);
    let tree = elf_tree(&kernel_root(name), &release).unwrap();
    tree.join(format!("boot/vmlinuz-{release}"))
}

/// Every module file of a provisioned kernel, sorted.
pub fn all_modules(name: &str) -> Vec<PathBuf> {
    validator::gate::batch::collect(&[kernel_root(name).join("lib/modules")]).unwrap()
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
    let d = workspace()
        .join("target/test-tmp")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny deterministic generator (xorshift), so failures reproduce.
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    #[expect(
        clippy::should_implement_trait,
        reason = "an endless generator, not an iterator: `next` never ends"
    )]
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
        usize::try_from(self.below(n as u64)).unwrap()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        // The low byte of each draw.
        (0..n).map(|_| self.next().to_le_bytes()[0]).collect()
    }
}

/// What a finished process left.
#[derive(Debug)]
pub struct Ran {
    /// The exit status; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Neither a Rust panic (exit 101, "panicked at") nor a signal.
    pub fn assert_no_panic(&self, what: &str) {
        assert!(
            self.code.is_some() && self.code != Some(101),
            "{what}: status {:?}\n{}",
            self.code,
            self.stderr
        );
        assert!(
            !self.stderr.contains("panicked at"),
            "{what}: {}",
            self.stderr
        );
    }
}

/// Runs `cmd` with stdin closed; kills it and fails the test if it runs past `secs`.
pub fn run_deadline(mut cmd: std::process::Command, secs: u64) -> Ran {
    use std::io::Read;
    use std::process::Stdio;
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s (hang)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
    }
}

/// Runs `cmd` with its standard output a pipe whose reader is already gone (as with
/// `| head` after it exits): returns what it left.
pub fn run_closed_stdout(mut cmd: std::process::Command) -> Ran {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = Vec::new();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let status = child.wait().unwrap();
    Ran {
        code: status.code(),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }
}

/// A FIFO nobody writes to.
pub fn fifo(path: &Path) -> PathBuf {
    let _ = std::fs::remove_file(path);
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
    path.to_path_buf()
}

/// A sparse file of `len` bytes.
pub fn sparse(path: &Path, len: u64) -> PathBuf {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(len).unwrap();
    path.to_path_buf()
}

/// `dir/<stem>\xff<ext>`: a name that is not UTF-8, holding `bytes`.
pub fn non_utf8_copy(dir: &Path, stem: &str, ext: &str, bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let mut name = stem.as_bytes().to_vec();
    name.push(0xff);
    name.extend_from_slice(ext.as_bytes());
    let p = dir.join(std::ffi::OsString::from_vec(name));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Copies a fixture tree, keeping its symlinks.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if t.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

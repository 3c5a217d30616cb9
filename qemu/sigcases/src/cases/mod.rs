//! The cases: one module file (or a few) per rule of `docs/SIGNATURE-RULES.md`, built from
//! a real Debian module of the kernel under test (`crc8`; `pcbc` for the licence and
//! namespace rules; `crc7` for `module_blacklist=`), re-signed with `sign-file` or
//! `openssl cms`, or byte-edited. Each case names its row, the test that asserts the
//! gate's verdict on it, and how the kernel is to be given it (`finit_module` flags, after
//! lockdown is raised, after another module is loaded).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::der::{self, Node, Pkcs7};
use crate::elf;
use crate::keys::{run, Key, Keys};

mod certs;
mod elf_cases;
mod signature;

/// `sign-file [-k] <hash> key cert` on the module file `m` (it appends the signature
/// there); the signed module.
fn sign_file_in_place(m: &Path, key: &Key, hash: &str, skid: bool) -> Vec<u8> {
    let mut c = Command::new(SIGN_FILE);
    if skid {
        c.arg("-k");
    }
    run(c.arg(hash).arg(&key.key).arg(&key.cert).arg(m));
    std::fs::read(m).unwrap()
}

/// `module` with its signature replaced by `sign-file <hash>` with `key`, the work file
/// being `out` (which then holds the result too).
pub fn resign(module: &[u8], key: &Key, hash: &str, out: &Path) -> Vec<u8> {
    std::fs::write(out, elf::body(module)).unwrap();
    sign_file_in_place(out, key, hash, false)
}

/// `sign-file` from Debian's `linux-kbuild-6.1`.
pub const SIGN_FILE: &str = "/usr/lib/linux-kbuild-6.1/scripts/sign-file";
/// `finit_module` flags.
pub const MODULE_INIT_IGNORE_VERMAGIC: u32 = 2;
pub const MODULE_INIT_COMPRESSED_FILE: u32 = 4;
/// The module the QEMU boots name in `module_blacklist=` (row V05).
pub const BLACKLISTED: &str = "crc7";

/// The kernels under test (`target/kernels/<dir>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kernel {
    /// Debian 12's 6.1 (`default`): RSA-4096 build key, plain `.ko`, no ECDSA.
    K61,
    /// Debian 12's 6.12 backport (`k612`): ECDSA P-384 build key, `.ko.xz`.
    K612,
}

impl Kernel {
    pub const ALL: [Kernel; 2] = [Kernel::K61, Kernel::K612];

    /// The directory under `target/kernels/`.
    pub fn dir(self) -> &'static str {
        match self {
            Kernel::K61 => "default",
            Kernel::K612 => "k612",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kernel::K61 => "6.1",
            Kernel::K612 => "6.12",
        }
    }
}

/// One module file that breaks (or keeps) one rule.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique within a kernel's set, e.g. `S25b`; the file is `<id>.ko[.xz]`.
    pub id: String,
    /// The row of `docs/SIGNATURE-RULES.md`.
    pub row: &'static str,
    /// What was done to the module.
    pub what: &'static str,
    pub file: PathBuf,
    /// The module name the kernel registers it under (for `rmmod`).
    pub module: &'static str,
    /// `finit_module` flags.
    pub flags: u32,
    /// Given to the kernel only after `lockdown=integrity` was raised.
    pub lockdown: bool,
    /// Another case (by id) loaded just before this one and unloaded after it.
    pub after: Option<&'static str>,
    /// Certificates the gate trusts for this case in addition to what the kernel trusts.
    pub extra_trust: Vec<PathBuf>,
}

/// The cases of one kernel.
#[derive(Debug, Clone)]
pub struct Set {
    pub kernel: Kernel,
    pub release: String,
    /// The kernel package root.
    pub root: PathBuf,
    pub dir: PathBuf,
    pub cases: Vec<Case>,
}

impl Set {
    pub fn get(&self, id: &str) -> &Case {
        self.cases
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no case {id} for {}", self.kernel.label()))
    }

    /// The cases of one row.
    pub fn row(&self, row: &str) -> Vec<&Case> {
        let v: Vec<&Case> = self.cases.iter().filter(|c| c.row == row).collect();
        assert!(
            !v.is_empty(),
            "no case for row {row} on {}",
            self.kernel.label()
        );
        v
    }

    /// SHA-256 of every file whose hash goes into UEFI dbx (row S40).
    pub fn dbx_hashes(&self) -> Vec<[u8; 32]> {
        use sha2::Digest;
        self.cases
            .iter()
            .filter(|c| c.row == "S40")
            .map(|c| sha2::Sha256::digest(std::fs::read(&c.file).unwrap()).into())
            .collect()
    }
}

/// `<root>/lib/modules/<release>`.
fn moddir(root: &Path) -> (PathBuf, String) {
    let base = root.join("lib/modules");
    let release = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/provision)", base.display()))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.'))
        .unwrap_or_else(|| panic!("no release under {}", base.display()));
    (base.join(&release), release)
}

/// A module of the kernel, decompressed, as shipped (Debian's signature on it), and the
/// shipped file's path.
fn shipped(root: &Path, rel: &str) -> (Vec<u8>, PathBuf) {
    let (md, _) = moddir(root);
    for ext in ["", ".xz"] {
        let p = md.join(format!("{rel}.ko{ext}"));
        if p.is_file() {
            let bytes = if ext.is_empty() {
                std::fs::read(&p).unwrap()
            } else {
                run(Command::new("xz").arg("-dc").arg(&p))
            };
            return (bytes, p);
        }
    }
    panic!("no module {rel} under {}", md.display())
}

struct Builder {
    dir: PathBuf,
    cases: Vec<Case>,
    n: u32,
}

impl Builder {
    fn tmp(&mut self, bytes: &[u8]) -> PathBuf {
        self.n += 1;
        let p = self.dir.join(format!("tmp-{}", self.n));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Adds a `crc8` case: `body` signed with the PKCS#7 `good` as `edit` changed it.
    fn add_edited(
        &mut self,
        id: &str,
        row: &'static str,
        what: &'static str,
        body: &[u8],
        good: &[u8],
        edit: impl FnOnce(&mut Pkcs7),
    ) {
        let mut t = Pkcs7::parse(good);
        edit(&mut t);
        self.add(
            id,
            row,
            what,
            "crc8",
            &elf::append_signature(body, &t.encode()),
        );
    }

    /// `sign-file [-k] <hash> key cert` over `body`: the whole signed module.
    fn sign_file(&mut self, body: &[u8], key: &Key, hash: &str, skid: bool) -> Vec<u8> {
        let m = self.tmp(body);
        sign_file_in_place(&m, key, hash, skid)
    }

    /// [`Key::cms`] over `body`.
    fn cms(&mut self, body: &[u8], key: &Key, md: &str, args: &[&str]) -> Vec<u8> {
        let m = self.tmp(body);
        key.cms(&m, md, args)
    }

    /// The usual module signature (no attributes, no certificates) as a PKCS#7 tree.
    fn plain(&mut self, body: &[u8], key: &Key, md: &str) -> Pkcs7 {
        Pkcs7::parse(&self.cms(body, key, md, &["-noattr", "-nocerts"]))
    }

    fn add(
        &mut self,
        id: &str,
        row: &'static str,
        what: &'static str,
        module: &'static str,
        bytes: &[u8],
    ) -> &mut Case {
        let file = self.dir.join(format!("{id}.ko"));
        std::fs::write(&file, bytes).unwrap();
        self.cases.push(Case {
            id: id.to_string(),
            row,
            what,
            file,
            module,
            flags: 0,
            lockdown: false,
            after: None,
            extra_trust: Vec::new(),
        });
        self.cases.last_mut().unwrap()
    }
}

fn flip_byte9(m: &[u8]) -> Vec<u8> {
    // e_ident's padding: neither the kernel's ELF checks nor the gate read it, so only
    // the signature notices.
    let mut v = m.to_vec();
    v[9] ^= 1;
    v
}

fn trailer_edit(m: &[u8], f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut v = m.to_vec();
    let t = elf::trailer_offset(&v);
    f(&mut v[t..t + 12]);
    v
}

fn replace_once(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = hay
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("pattern not found"));
    let mut v = hay[..at].to_vec();
    v.extend_from_slice(to);
    v.extend_from_slice(&hay[at + from.len()..]);
    v
}

/// What every group of cases starts from: Debian's `crc8` as shipped, its body, and that
/// body signed by `sign-file` with the snakeoil key (with and without `-k`).
struct Common<'a> {
    kernel: Kernel,
    root: PathBuf,
    release: String,
    k: &'a Keys,
    crc8: Vec<u8>,
    crc8_path: PathBuf,
    body: Vec<u8>,
    snake_signed: Vec<u8>,
    /// The PKCS#7 message of `snake_signed`.
    good: Vec<u8>,
    /// `body` signed with `sign-file -k` (the signer named by its subject key id).
    skid_signed: Vec<u8>,
}

/// Builds every case for `kernel` (package under `kernels/<dir>`) into `out`: the groups
/// in the order of `docs/SIGNATURE-RULES.md` (trailer, PKCS#7 message, digests,
/// certificates and signers, ELF and modinfo).
pub fn build(kernel: Kernel, kernels: &Path, keys: &Keys, out: &Path) -> Set {
    let root = kernels.join(kernel.dir());
    let (_, release) = moddir(&root);
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let mut b = Builder {
        dir: out.to_path_buf(),
        cases: Vec::new(),
        n: 0,
    };
    let (crc8, crc8_path) = shipped(&root, "kernel/lib/crc8");
    let body = elf::body(&crc8);
    let snake_signed = b.sign_file(&body, &keys.snake, "sha256", false);
    let good = elf::pkcs7(&snake_signed);
    let skid_signed = b.sign_file(&body, &keys.snake, "sha256", true);
    let c = Common {
        kernel,
        root,
        release,
        k: keys,
        crc8,
        crc8_path,
        body,
        snake_signed,
        good,
        skid_signed,
    };
    signature::trailer(&mut b, &c);
    signature::pkcs7(&mut b, &c);
    signature::digests(&mut b, &c);
    certs::certificates(&mut b, &c);
    elf_cases::module_file(&mut b, &c);
    // Scratch files are not cases.
    for e in std::fs::read_dir(out).unwrap().filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with("tmp-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Set {
        kernel,
        release: c.release,
        root: c.root,
        dir: out.to_path_buf(),
        cases: b.cases,
    }
}

/// A same-length change of the release in a vermagic string: the digit before the
/// release's first `-` or `+` goes up by one (`6.1.0-57-amd64` to `6.1.1-57-amd64`,
/// `6.12.117+deb12-amd64` to `6.12.118+deb12-amd64`).
fn release_edit(release: &str) -> (String, String) {
    let from = format!("vermagic={release} ");
    let mut to = from.clone().into_bytes();
    let cut = release
        .find(['-', '+'])
        .expect("a Debian release has a '-' or '+'");
    let pos = "vermagic=".len() + cut - 1;
    to[pos] = if to[pos] == b'9' { b'8' } else { to[pos] + 1 };
    (from, String::from_utf8(to).unwrap())
}

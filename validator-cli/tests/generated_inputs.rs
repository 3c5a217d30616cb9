//! Every `validator` subcommand that reads a file, run on generated bad versions of each
//! of its input files: truncated, bit-flipped, empty, a FIFO with no writer, a
//! directory, the good file under a non-UTF-8 name, and a sparse file over the input's
//! size limit. Asserted for each run: no panic (no "panicked at", never status 101 or a
//! signal), no hang (killed and failed past a deadline), exit 2 with a message naming
//! the file for unusable input, the good file's verdict under a non-UTF-8 name, and no
//! output left behind by a failed `keys extract -o` or `man --dir`. The kernel image is
//! the bzImage where it is the file under test, its vmlinux ELF where it is only
//! configuration (`test_support::vmlinux`: each bzImage costs an xz decode of about a
//! second of CPU).
//!
//! Two more classes: every path argument (input or output) given as a bare name run in
//! its directory, `./name`, an absolute path and through a symlinked directory gives the
//! good verdict; every command with two outputs given the same file twice (however
//! spelled) or one unwritable target refuses by name and leaves every file as it was.
//!
//! Module files given to `modules check` and the grubenv of `slot status` are the
//! subject of the check, not its configuration: an empty or damaged one is a verdict
//! (exit 1: a `FAIL` line naming the module, a `problem:` line naming the file), a FIFO,
//! a directory or an oversized file is unusable input (exit 2).
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    fifo, module, non_utf8_copy, run_deadline, sparse, tmpdir, vmlinux, vmlinuz, Ran, Rng,
};

const DEADLINE: u64 = 120;

fn validator(args: &[OsString]) -> Ran {
    let mut c = Command::new(env!("CARGO_BIN_EXE_validator"));
    c.args(args);
    run_deadline(c, DEADLINE)
}

/// One input file of one command line.
struct Slot {
    name: &'static str,
    /// The good file.
    good: PathBuf,
    /// The command line with `{}` standing for this slot's file.
    args: Vec<String>,
    /// The size limit the command documents for it (`None`: streamed, no limit).
    limit: Option<u64>,
    /// An empty file is unusable input (exit 2) rather than a failed check.
    empty_unusable: bool,
    /// The files are the subject of a check: bad content is a verdict (exit 1), not
    /// unusable input.
    checked: Checked,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Checked {
    /// Configuration or data: bad content is unusable input.
    No,
    /// `modules check`: a `FAIL <module>: ...` line.
    Module,
    /// `slot status`: `problem: ...` lines naming the file.
    Problems,
}

impl Slot {
    fn argv(&self, file: &Path, files: &Files) -> Vec<OsString> {
        self.args
            .iter()
            .map(|a| match a.as_str() {
                "{}" => file.as_os_str().to_os_string(),
                other => files.expand(other),
            })
            .collect()
    }
}

/// The good inputs every command line may name (`{vmlinuz}`, `{bom}` ...).
struct Files {
    map: Vec<(&'static str, PathBuf)>,
}

impl Files {
    fn expand(&self, a: &str) -> OsString {
        self.map
            .iter()
            .find(|(k, _)| *k == a)
            .map_or_else(|| OsString::from(a), |(_, p)| p.as_os_str().to_os_string())
    }

    fn get(&self, k: &str) -> PathBuf {
        self.map
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, p)| p.clone())
            .unwrap()
    }
}

fn setup(dir: &Path) -> (Files, String) {
    use validator::formats::tpm::{eventlog::EventLog, HashAlg};
    let vz = vmlinuz("default");
    let elf = vmlinux("default");
    let facts = validator::formats::vmlinuz::KernelFacts::from_image(&std::fs::read(&elf).unwrap())
        .unwrap();
    let cert = dir.join("kernel.der");
    std::fs::write(&cert, &facts.certs[0]).unwrap();
    let bom = dir.join("bom.toml");
    std::fs::write(
        &bom,
        format!(
            "schema = 1\nimage_id = \"generated\"\n\n[kernel]\nrelease = \"{}\"\n\n\
             [modules]\nload = [\"crc8\"]\n",
            facts.release
        ),
    )
    .unwrap();
    let symvers = dir.join("Module.symvers");
    std::fs::write(
        &symvers,
        "0x12345678\tfleet_symbol\tfleet\tEXPORT_SYMBOL\t\n0x9abcdef0\tfleet_gpl\tfleet\tEXPORT_SYMBOL_GPL\t\n",
    )
    .unwrap();
    let mut log = EventLog::new(&[HashAlg::Sha1, HashAlg::Sha256]);
    for (pcr, what) in [(0, "crtm"), (4, "loader"), (13, "bom")] {
        log.measure(pcr, what.as_bytes()).unwrap();
    }
    let evlog = dir.join("eventlog.bin");
    std::fs::write(&evlog, log.to_bytes()).unwrap();
    let cel = dir.join("cel.log");
    let rec = validator::formats::tpm::cel::CelRecord::systemd(
        11,
        "phase",
        "enter-initrd",
        &[HashAlg::Sha256],
    );
    std::fs::write(&cel, [rec.to_bytes(), rec.to_bytes()].concat()).unwrap();
    // A verity image, its root hash, and a root-verity-sig signed with our key.
    let data = dir.join("data.img");
    let mut rng = Rng(7);
    std::fs::write(&data, rng.bytes(256 << 10)).unwrap();
    let hash = dir.join("hash.img");
    let out = Command::new("veritysetup")
        .arg("format")
        .arg(&data)
        .arg(&hash)
        .output()
        .expect("veritysetup");
    assert!(out.status.success());
    let root = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:").map(|r| r.trim().to_string()))
        .unwrap();
    let key = dir.join("sig.key");
    let pem = dir.join("sig.pem");
    common::keys::self_signed(
        &key,
        &pem,
        "root signer",
        "ec",
        2,
        &["-pkeyopt", "ec_paramgen_curve:prime256v1"],
    );
    let rh = dir.join("rh.txt");
    std::fs::write(&rh, &root).unwrap();
    let p7 = dir.join("rh.p7s");
    let st = Command::new("openssl")
        .args([
            "smime", "-sign", "-binary", "-noattr", "-nocerts", "-outform", "DER", "-in",
        ])
        .arg(&rh)
        .arg("-signer")
        .arg(&pem)
        .arg("-inkey")
        .arg(&key)
        .arg("-out")
        .arg(&p7)
        .output()
        .unwrap();
    assert!(st.status.success());
    let fp = {
        use sha2::Digest;
        let der = Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&pem)
            .output()
            .unwrap()
            .stdout;
        validator::util::hex(&sha2::Sha256::digest(der))
    };
    let sig = dir.join("root.sig.json");
    std::fs::write(
        &sig,
        serde_json::json!({
            "rootHash": root,
            "certificateFingerprint": fp,
            "signature": base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                std::fs::read(&p7).unwrap()
            ),
        })
        .to_string(),
    )
    .unwrap();
    // A GPT disk image.
    let disk = dir.join("disk.img");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let mut sf = Command::new("sfdisk")
        .arg("-q")
        .arg(&disk)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("sfdisk");
    {
        use std::io::Write;
        sf.stdin
            .take()
            .unwrap()
            .write_all(b"label: gpt\nsize=1MiB, name=root\n")
            .unwrap();
    }
    assert!(sf.wait().unwrap().success());
    // A GRUB environment block as grub-editenv writes it.
    let grubenv = dir.join("grubenv");
    for args in [
        vec!["create"],
        vec!["set", "ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=1", "B_TRY=0"],
    ] {
        let st = Command::new("grub-editenv")
            .arg(&grubenv)
            .args(&args)
            .status()
            .expect("grub-editenv (grub-common)");
        assert!(st.success());
    }
    (
        Files {
            map: vec![
                ("{vmlinuz}", vz),
                ("{vmlinux}", elf),
                ("{cert}", cert),
                ("{bom}", bom),
                ("{symvers}", symvers),
                ("{module}", module("default", "crc8.ko")),
                ("{eventlog}", evlog),
                ("{cel}", cel),
                ("{data}", data),
                ("{hash}", hash),
                ("{sig}", sig),
                ("{sigcert}", pem),
                ("{disk}", disk),
                ("{grubenv}", grubenv),
            ],
        },
        root,
    )
}

fn slots(files: &Files, root: &str) -> Vec<Slot> {
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The kernel image as configuration: its ELF, unless it is the slot's file.
    let modules = |slot: &str| {
        let kernel = if slot == "{vmlinuz}" {
            "{vmlinuz}"
        } else {
            "{vmlinux}"
        };
        let mut v = a(&[
            "modules",
            "check",
            "--vmlinuz",
            kernel,
            "--trust",
            "{cert}",
            "--bom",
            "{bom}",
            "--symvers",
            "{symvers}",
            "--mode",
            "kernel",
            "{module}",
        ]);
        for x in v.iter_mut() {
            if x == slot {
                *x = "{}".into();
            }
        }
        v
    };
    let verity_root = |slot: &str| {
        let mut v = a(&[
            "verity",
            "verify",
            "--data",
            "{data}",
            "--hash",
            "{hash}",
            "--root-hash",
            root,
        ]);
        for x in v.iter_mut() {
            if x == slot {
                *x = "{}".into();
            }
        }
        v
    };
    let verity_sig = |slot: &str| {
        let mut v = a(&[
            "verity",
            "verify",
            "--data",
            "{data}",
            "--hash",
            "{hash}",
            "--sig",
            "{sig}",
            "--trust",
            "{sigcert}",
        ]);
        for x in v.iter_mut() {
            if x == slot {
                *x = "{}".into();
            }
        }
        v
    };
    let s = |name, good: &str, args, limit, empty_unusable| Slot {
        name,
        good: files.get(good),
        args,
        limit,
        empty_unusable,
        checked: Checked::No,
    };
    let bom_max = validator::config::bom::BOM_MAX;
    let vz_max = 256 << 20;
    let log_max = validator::runtime::measure::EVENT_LOG_MAX;
    let cert_max = validator::trust::CERT_FILE_MAX;
    vec![
        s(
            "bom check",
            "{bom}",
            a(&["bom", "check", "{}"]),
            Some(bom_max),
            true,
        ),
        s(
            "tpm replay (TCG)",
            "{eventlog}",
            a(&["tpm", "replay", "{}"]),
            Some(log_max),
            true,
        ),
        s(
            "tpm replay (CEL)",
            "{cel}",
            a(&["tpm", "replay", "{}", "--json"]),
            Some(log_max),
            true,
        ),
        s(
            "kernel info",
            "{vmlinuz}",
            a(&["kernel", "info", "--vmlinuz", "{}"]),
            Some(vz_max),
            true,
        ),
        s(
            "keys extract",
            "{vmlinuz}",
            a(&["keys", "extract", "--vmlinuz", "{}", "-o", "{keys_out}"]),
            Some(vz_max),
            true,
        ),
        s(
            "modules check --vmlinuz",
            "{vmlinuz}",
            modules("{vmlinuz}"),
            Some(vz_max),
            true,
        ),
        s(
            "modules check --trust",
            "{cert}",
            modules("{cert}"),
            Some(cert_max),
            true,
        ),
        s(
            "modules check --bom",
            "{bom}",
            modules("{bom}"),
            Some(bom_max),
            true,
        ),
        s(
            "modules check --symvers",
            "{symvers}",
            modules("{symvers}"),
            Some(validator::gate::SYMVERS_MAX),
            false,
        ),
        Slot {
            checked: Checked::Module,
            ..s(
                "modules check MODULE",
                "{module}",
                modules("{module}"),
                Some(1 << 30),
                false,
            )
        },
        Slot {
            checked: Checked::Problems,
            ..s(
                "slot status --grubenv",
                "{grubenv}",
                a(&["slot", "status", "--grubenv", "{}"]),
                Some(validator::formats::grubenv::BLOCK_SIZE_MAX as u64),
                false,
            )
        },
        s(
            "verity verify --data",
            "{data}",
            verity_root("{data}"),
            None,
            true,
        ),
        s(
            "verity verify --hash",
            "{hash}",
            verity_root("{hash}"),
            None,
            true,
        ),
        s(
            "verity verify --sig",
            "{sig}",
            verity_sig("{sig}"),
            Some(64 << 10),
            true,
        ),
        s(
            "verity verify --trust",
            "{sigcert}",
            verity_sig("{sigcert}"),
            Some(cert_max),
            true,
        ),
        s("gpt", "{disk}", a(&["gpt", "{}"]), None, true),
    ]
}

#[test]
fn every_input_file_of_every_subcommand() {
    let dir = tmpdir("generated");
    let (mut files, root) = setup(&dir);
    let keys_out = dir.join("keys-out");
    files.map.push(("{keys_out}", keys_out.clone()));
    let mut rng = Rng(0x6e6e);
    let mut runs = 0;
    for slot in slots(&files, &root) {
        let good_bytes = std::fs::read(&slot.good).unwrap();
        let _ = std::fs::remove_dir_all(&keys_out);
        let good = validator(&slot.argv(&slot.good, &files));
        good.assert_no_panic(slot.name);
        assert_eq!(
            good.code,
            Some(0),
            "{}: the good input: {}",
            slot.name,
            good.stderr
        );
        let tag = slot.name.replace(' ', "_");
        // A checked file keeps its name (a module's name comes from it; the slot
        // configuration names the grubenv as text): each case gets its own directory,
        // and the non-UTF-8 byte goes into a directory name.
        let keep =
            (slot.checked != Checked::No).then(|| slot.good.file_name().unwrap().to_os_string());
        let file = |what: &str| match &keep {
            Some(name) => {
                let d = dir.join(format!("{tag}-{what}"));
                std::fs::create_dir_all(&d).unwrap();
                d.join(name)
            }
            None => dir.join(format!("{tag}-{what}")),
        };
        // (what, path, unusable input)
        let mut cases: Vec<(String, PathBuf, bool)> = Vec::new();
        let len = good_bytes.len();
        for n in [0, 1, 519, len / 2, len.saturating_sub(1)] {
            if n >= len {
                continue;
            }
            let p = file(&format!("cut{n}"));
            std::fs::write(&p, &good_bytes[..n]).unwrap();
            cases.push((
                format!("truncated to {n} bytes"),
                p,
                n == 0 && slot.empty_unusable,
            ));
        }
        for k in 0..3 {
            let mut b = good_bytes.clone();
            let at = rng.index(b.len());
            b[at] ^= 1 << rng.below(8);
            let p = file(&format!("flip{k}"));
            std::fs::write(&p, &b).unwrap();
            cases.push((format!("bit {at} flipped"), p, false));
        }
        cases.push(("a FIFO with no writer".into(), fifo(&file("fifo")), true));
        let d = file("dir");
        std::fs::create_dir_all(&d).unwrap();
        // A directory of modules to search is a valid `modules check` argument: there,
        // an empty one is the unusable input.
        cases.push(("a directory".into(), d, true));
        if let Some(limit) = slot.limit {
            cases.push((
                "oversized".into(),
                sparse(&file("big"), limit + 1),
                slot.checked != Checked::Module,
            ));
        }
        let odd = match &keep {
            Some(name) => {
                use std::os::unix::ffi::OsStrExt;
                let d = dir
                    .join(format!("{tag}-odd"))
                    .join(OsStr::from_bytes(b"\xff"));
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(name), &good_bytes).unwrap();
                d.join(name)
            }
            None => non_utf8_copy(&dir, &tag, "", &good_bytes),
        };
        for (what, path, unusable) in &cases {
            let label = format!("{}: {what}", slot.name);
            let _ = std::fs::remove_dir_all(&keys_out);
            let r = validator(&slot.argv(path, &files));
            runs += 1;
            r.assert_no_panic(&label);
            let named = r.stderr.contains(&path.display().to_string());
            if *unusable {
                assert_eq!(r.code, Some(2), "{label}: {}", r.stderr);
                assert!(
                    named,
                    "{label}: the message does not name the file: {}",
                    r.stderr
                );
            } else if slot.checked != Checked::No {
                // A changed module never passes (its signature covers every byte); a
                // shorter grubenv can still be a valid block.
                let ok = match slot.checked {
                    Checked::Module => matches!(r.code, Some(1 | 2)),
                    _ => matches!(r.code, Some(0..=2)),
                };
                assert!(ok, "{label}: {:?} {}", r.code, r.stderr);
                if r.code == Some(1) && slot.checked == Checked::Module {
                    assert!(r.stdout.starts_with("FAIL crc8: "), "{label}: {}", r.stdout);
                }
                if r.code == Some(1) && slot.checked == Checked::Problems {
                    assert!(
                        r.stdout.contains("problem: ")
                            && r.stdout.contains(&path.display().to_string()),
                        "{label}: {}",
                        r.stdout
                    );
                }
            } else {
                assert!(matches!(r.code, Some(0..=2)), "{label}: {:?}", r.code);
                if r.code == Some(2) {
                    assert!(
                        named,
                        "{label}: the message does not name the file: {}",
                        r.stderr
                    );
                }
            }
            if r.code != Some(0) {
                assert!(
                    !keys_out.exists(),
                    "{label}: a failed keys extract left {}",
                    keys_out.display()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&keys_out);
        let r = validator(&slot.argv(&odd, &files));
        r.assert_no_panic(&format!("{}: non-UTF-8 name", slot.name));
        assert_eq!(
            r.code, good.code,
            "{}: non-UTF-8 name: {}",
            slot.name, r.stderr
        );
        runs += 1;
    }
    assert!(runs > 150, "{runs}");
}

/// `man --dir` writes all pages or none.
#[test]
fn man_pages_all_or_none() {
    let dir = tmpdir("generated-man");
    let args = |d: &Path| vec![OsString::from("man"), "--dir".into(), d.as_os_str().into()];
    // The directory is a file: nothing is written, the file is unchanged.
    let f = dir.join("not-a-dir");
    std::fs::write(&f, "keep").unwrap();
    let r = validator(&args(&f));
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("not-a-dir"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep");
    // One page's place is taken by a directory: no other page is written.
    let d = dir.join("pages");
    std::fs::create_dir_all(d.join("validator-tpm-replay.1")).unwrap();
    let r = validator(&args(&d));
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("validator-tpm-replay.1"), "{}", r.stderr);
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    // A directory that does not exist yet and cannot be made: nothing is left.
    let r = validator(&args(&f.join("sub")));
    assert_eq!(r.code, Some(2));
    assert!(!f.join("sub").exists());
    // Under a non-UTF-8 name it works.
    use std::os::unix::ffi::OsStrExt;
    let odd = dir.join(OsStr::from_bytes(b"man\xffpages"));
    let r = validator(&args(&odd));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(odd.join("validator.1").is_file());
}

/// What a directory holds, recursively, without following links: each entry's name,
/// type, and a regular file's bytes or a link's target.
fn snapshot(dir: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
    use std::os::unix::fs::FileTypeExt;
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let t = std::fs::symlink_metadata(&p).unwrap().file_type();
        let (kind, data) = if t.is_symlink() {
            (
                "link",
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes(),
            )
        } else if t.is_dir() {
            all.extend(snapshot(&p));
            ("dir", Vec::new())
        } else if t.is_file() {
            ("file", std::fs::read(&p).unwrap())
        } else if t.is_fifo() {
            ("fifo", Vec::new())
        } else if t.is_char_device() {
            ("chardev", Vec::new())
        } else {
            ("other", Vec::new())
        };
        all.push((p, kind.to_string(), data));
    }
    all.sort();
    all
}

/// Makes `p` a character device (`/dev/null`'s numbers) with `mknod`: the tests run as
/// root. `false` where this user cannot (the case is then skipped, saying so).
fn chardev(p: &Path) -> bool {
    let ok = Command::new("mknod")
        .arg(p)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "{}: mknod failed (not root?): character-device case skipped",
            p.display()
        );
    }
    ok
}

/// Sets or clears the immutable attribute (`chattr +i`): a directory nobody, root
/// included, can create a file in. Root ignores permission bits, so a `chmod`-read-only
/// directory would not stop the write; `false` where the filesystem has no such
/// attribute (the case is then skipped, saying so).
fn immutable(p: &Path, on: bool) -> bool {
    let ok = Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    if !ok && on {
        eprintln!(
            "{}: chattr +i failed: read-only-directory case skipped",
            p.display()
        );
    }
    ok
}

/// One command that writes: `{out}` stands for OUT. `into`: OUT is a directory the
/// command writes files into, and this is the name of one of them.
struct Writer {
    what: &'static str,
    args: Vec<OsString>,
    into: Option<String>,
    good: i32,
}

impl Writer {
    fn run(&self, out: &Path) -> Ran {
        let argv: Vec<OsString> = self
            .args
            .iter()
            .map(|a| {
                if a == "{out}" {
                    out.as_os_str().to_os_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        validator(&argv)
    }

    /// Runs with `out`, expecting a refusal naming `named` and `case` unchanged.
    fn refused(&self, what: &str, case: &Path, out: &Path, named: &Path) {
        let before = snapshot(case);
        let r = self.run(out);
        r.assert_no_panic(&format!("{}: {what}", self.what));
        assert_eq!(r.code, Some(2), "{}: {what}: {}", self.what, r.stderr);
        assert!(
            r.stderr.contains(&named.display().to_string()),
            "{}: {what}: the message does not name {}: {}",
            self.what,
            named.display(),
            r.stderr
        );
        assert_eq!(
            snapshot(case),
            before,
            "{}: {what}: something changed",
            self.what
        );
    }
}

/// Every command that writes a file, with OUT (or, for a command writing into a
/// directory, one of the files it writes there) a character device, a FIFO, a symbolic
/// link to a file, a directory, in a missing directory, in a read-only (immutable)
/// directory: each is refused, exit 2, with a message naming the path, and nothing is
/// replaced, written through or left behind. A regular file at OUT is replaced.
#[test]
fn outputs_replace_only_regular_files() {
    let dir = tmpdir("generated-outputs");
    let report = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/report-good.json");
    let os = |s: &str| OsString::from(s);
    // The kernel image is input here, the outputs the subject: its ELF.
    let vz = vmlinux("default");
    // The name of one certificate `keys extract` writes.
    let probe = dir.join("probe");
    let r = validator(&[
        os("keys"),
        os("extract"),
        os("--vmlinuz"),
        vz.clone().into(),
        os("-o"),
        probe.clone().into(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let cert = std::fs::read_dir(&probe)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let mut writers = Vec::new();
    for flag in ["--svg", "--prometheus", "--nfd"] {
        writers.push(Writer {
            what: flag,
            args: vec![os("report"), report.clone().into(), os(flag), os("{out}")],
            into: None,
            good: 0,
        });
    }
    writers.push(Writer {
        what: "keys extract -o",
        args: vec![
            os("keys"),
            os("extract"),
            os("--vmlinuz"),
            vz.clone().into(),
            os("-o"),
            os("{out}"),
        ],
        into: Some(cert.to_str().unwrap().to_string()),
        good: 0,
    });
    writers.push(Writer {
        what: "man --dir",
        args: vec![os("man"), os("--dir"), os("{out}")],
        into: Some("validator.1".to_string()),
        good: 0,
    });
    for (n, w) in writers.iter().enumerate() {
        let case = dir.join(format!("case{n}"));
        std::fs::create_dir(&case).unwrap();
        // OUT (the directory for `into`) and the path that is blocked.
        let out = case.join("out");
        let blocked = match &w.into {
            Some(f) => {
                std::fs::create_dir(&out).unwrap();
                out.join(f)
            }
            None => out.clone(),
        };
        // A regular file is replaced.
        std::fs::write(&blocked, "old").unwrap();
        let r = w.run(&out);
        assert_eq!(r.code, Some(w.good), "{}: {}", w.what, r.stderr);
        assert_ne!(std::fs::read(&blocked).unwrap(), b"old", "{}", w.what);
        std::fs::remove_file(&blocked).unwrap();
        if w.into.is_some() {
            std::fs::remove_dir_all(&out).unwrap();
            std::fs::create_dir(&out).unwrap();
        }
        // A character device.
        if chardev(&blocked) {
            w.refused("a character device", &case, &out, &blocked);
            std::fs::remove_file(&blocked).unwrap();
        }
        // A FIFO.
        fifo(&blocked);
        w.refused("a FIFO", &case, &out, &blocked);
        std::fs::remove_file(&blocked).unwrap();
        // A symbolic link to a file: neither the link nor its target changes.
        let target = case.join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, &blocked).unwrap();
        w.refused("a symbolic link", &case, &out, &blocked);
        std::fs::remove_file(&blocked).unwrap();
        // A dangling link: nothing is created where it points.
        std::os::unix::fs::symlink(case.join("nowhere"), &blocked).unwrap();
        w.refused("a dangling symbolic link", &case, &out, &blocked);
        std::fs::remove_file(&blocked).unwrap();
        std::fs::remove_file(&target).unwrap();
        // A directory.
        std::fs::create_dir(&blocked).unwrap();
        w.refused("a directory", &case, &out, &blocked);
        std::fs::remove_dir(&blocked).unwrap();
        if w.into.is_some() {
            // The directory itself a FIFO.
            std::fs::remove_dir(&out).unwrap();
            fifo(&out);
            w.refused("a FIFO for the directory", &case, &out, &out);
            std::fs::remove_file(&out).unwrap();
        } else {
            std::fs::remove_dir_all(&out).ok();
        }
        // In a missing directory: named, not created.
        let missing = case.join("missing");
        w.refused(
            "a missing directory",
            &case,
            &missing.join("sub/out"),
            &missing.join("sub"),
        );
        // In a read-only directory.
        let ro = case.join("ro");
        std::fs::create_dir(&ro).unwrap();
        let ro_out = if w.into.is_some() {
            ro.clone()
        } else {
            ro.join("out")
        };
        if immutable(&ro, true) {
            w.refused("a read-only directory", &case, &ro_out, &ro_out);
            assert!(immutable(&ro, false));
        }
        assert!(
            snapshot(&ro).is_empty(),
            "{}: read-only: left behind",
            w.what
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `man --dir` is all or none when a page cannot be replaced (an immutable file, which
/// even root cannot rename over): exit 2 naming it, no page written, the pages already
/// there unchanged.
#[test]
fn man_pages_all_or_none_with_one_page_blocked() {
    let dir = tmpdir("generated-man-blocked");
    let pages = dir.join("pages");
    std::fs::create_dir(&pages).unwrap();
    std::fs::write(pages.join("validator.1"), "old top page").unwrap();
    let blocked = pages.join("validator-tpm-replay.1");
    std::fs::write(&blocked, "old page").unwrap();
    if !immutable(&blocked, true) {
        return;
    }
    let before = snapshot(&pages);
    let r = validator(&[OsString::from("man"), "--dir".into(), pages.clone().into()]);
    assert!(immutable(&blocked, false));
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(&blocked.display().to_string()),
        "{}",
        r.stderr
    );
    assert_eq!(snapshot(&pages), before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `validator ARGS` in `cwd`.
fn validator_in(cwd: &Path, args: &[OsString]) -> Ran {
    let mut c = Command::new(env!("CARGO_BIN_EXE_validator"));
    c.current_dir(cwd).args(args);
    run_deadline(c, DEADLINE)
}

/// The four spellings of the file `path` an operator may type, each with the directory
/// to run in: a bare name (run where it is), `./name`, the absolute path, and a path
/// through a symbolic link to its directory (made in `scratch`).
fn spellings(path: &Path, scratch: &Path, tag: &str) -> Vec<(&'static str, PathBuf, OsString)> {
    let dir = path.parent().unwrap().to_path_buf();
    let name = path.file_name().unwrap();
    let link = scratch.join(format!("link-{tag}"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let mut dot = OsString::from("./");
    dot.push(name);
    vec![
        ("a bare name", dir.clone(), name.to_os_string()),
        ("./name", dir.clone(), dot),
        (
            "an absolute path",
            scratch.to_path_buf(),
            path.as_os_str().into(),
        ),
        (
            "a path through a symlinked directory",
            scratch.to_path_buf(),
            link.join(name).into_os_string(),
        ),
    ]
}

/// Every path argument of every command, input or output, given as a bare name (run in
/// its directory), `./name`, an absolute path and through a symlinked directory: each
/// gives the good verdict (an output lands in the file named, the only file written).
/// A file output named `.`, `..` or with a trailing `/` is refused by name, nothing
/// created.
#[test]
fn every_path_argument_in_every_spelling() {
    let dir = tmpdir("generated-spellings");
    let (mut files, root) = setup(&dir);
    let keys_out = dir.join("keys-out");
    files.map.push(("{keys_out}", keys_out.clone()));
    let scratch = dir.join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let mut runs = 0;
    for (n, slot) in slots(&files, &root).iter().enumerate() {
        let want = validator(&slot.argv(&slot.good, &files)).code;
        for (how, cwd, arg) in spellings(&slot.good, &scratch, &n.to_string()) {
            let _ = std::fs::remove_dir_all(&keys_out);
            let argv = slot.argv(Path::new(&arg), &files);
            let r = validator_in(&cwd, &argv);
            r.assert_no_panic(&format!("{}: {how}", slot.name));
            assert_eq!(
                r.code,
                want,
                "{}: {how} ({arg:?} in {}): {}",
                slot.name,
                cwd.display(),
                r.stderr
            );
            runs += 1;
        }
    }
    // Outputs: the report's three files, and the directories of keys extract and man.
    let report = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/report-good.json");
    let os = |s: &str| OsString::from(s);
    let vz = files.get("{vmlinux}");
    let outputs: Vec<(&str, Vec<OsString>, bool)> = vec![
        (
            "--svg",
            vec![os("report"), report.clone().into(), os("--svg")],
            false,
        ),
        (
            "--prometheus",
            vec![os("report"), report.clone().into(), os("--prometheus")],
            false,
        ),
        (
            "--nfd",
            vec![os("report"), report.clone().into(), os("--nfd")],
            false,
        ),
        (
            "keys extract -o",
            vec![
                os("keys"),
                os("extract"),
                os("--vmlinuz"),
                vz.into(),
                os("-o"),
            ],
            true,
        ),
        ("man --dir", vec![os("man"), os("--dir")], true),
    ];
    for (i, (what, args, is_dir)) in outputs.iter().enumerate() {
        let case = dir.join(format!("out{i}"));
        std::fs::create_dir(&case).unwrap();
        let target = case.join("out");
        for (how, cwd, arg) in spellings(&target, &scratch, &format!("out{i}")) {
            let mut argv = args.clone();
            argv.push(arg.clone());
            let r = validator_in(&cwd, &argv);
            r.assert_no_panic(&format!("{what}: {how}"));
            assert_eq!(r.code, Some(0), "{what}: {how} ({arg:?}): {}", r.stderr);
            let m = std::fs::symlink_metadata(&target).unwrap();
            assert!(
                if *is_dir { m.is_dir() } else { m.is_file() },
                "{what}: {how}: not written at {}",
                target.display()
            );
            let names: Vec<_> = std::fs::read_dir(&case).unwrap().collect();
            assert_eq!(names.len(), 1, "{what}: {how}: other files written");
            if *is_dir {
                std::fs::remove_dir_all(&target).unwrap();
            } else {
                std::fs::remove_file(&target).unwrap();
            }
            runs += 1;
        }
        if !is_dir {
            for bad in [".", "..", "out/", "sub/"] {
                let mut argv = args.clone();
                argv.push(os(bad));
                let r = validator_in(&case, &argv);
                r.assert_no_panic(&format!("{what} {bad}"));
                assert_eq!(r.code, Some(2), "{what} {bad}: {}", r.stderr);
                assert!(r.stderr.contains(bad), "{what} {bad}: {}", r.stderr);
                assert_eq!(std::fs::read_dir(&case).unwrap().count(), 0, "{what} {bad}");
                runs += 1;
            }
        }
    }
    assert!(runs > 60, "{runs}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Makes something (a directory, a FIFO, a link) at a path.
type MakeAt = fn(&Path);

/// One command with two outputs: `{1}` and `{2}` stand for them.
struct TwoOutputs {
    what: &'static str,
    args: Vec<OsString>,
}

impl TwoOutputs {
    fn run(&self, one: &Path, two: &Path) -> Ran {
        let argv: Vec<OsString> = self
            .args
            .iter()
            .map(|a| match a.to_str() {
                Some("{1}") => one.as_os_str().into(),
                Some("{2}") => two.as_os_str().into(),
                _ => a.clone(),
            })
            .collect();
        let r = validator(&argv);
        r.assert_no_panic(self.what);
        r
    }
}

/// The inputs of `attest make-credential` from a real (software) TPM: its EK public
/// area and certificate, and an AK, made by `attest ek` against swtpm with its local CA.
fn credential_inputs(dir: &Path) -> PathBuf {
    assert!(common::swtpm::have_tools(&[]));
    let state = dir.join("tpm-state");
    std::fs::create_dir_all(&state).unwrap();
    common::swtpm::setup_state_with_ek_cert(&state);
    let swtpm = common::swtpm::Swtpm::start(&state, "not-need-init,startup-clear");
    let node = dir.join("node");
    let r = validator(&[
        "attest".into(),
        "ek".into(),
        "--tcp".into(),
        swtpm.addr().to_string().into(),
        "--out-dir".into(),
        node.clone().into(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    drop(swtpm);
    node
}

/// Every command with two outputs (`report` with any two of `--svg`, `--prometheus`,
/// `--nfd`; `attest make-credential`'s `--out` and `--secret-out`), tried with the same
/// path twice (and the same file spelled two ways) and with one target unwritable (a
/// directory, a FIFO, a missing directory, a symbolic link) while the other is an
/// existing file: exit 2 naming the path, and every file exactly as it was.
#[test]
fn two_outputs_are_never_one_file_and_fail_together() {
    let dir = tmpdir("generated-two-outputs");
    let report = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/report-good.json");
    let os = |s: &str| OsString::from(s);
    let node = credential_inputs(&dir);
    let mut commands = Vec::new();
    let flags = ["--svg", "--prometheus", "--nfd"];
    for (i, a) in flags.iter().enumerate() {
        for b in flags.iter().skip(i + 1) {
            commands.push(TwoOutputs {
                what: "report",
                args: vec![
                    os("report"),
                    report.clone().into(),
                    os(a),
                    os("{1}"),
                    os(b),
                    os("{2}"),
                ],
            });
        }
    }
    commands.push(TwoOutputs {
        what: "attest make-credential",
        args: vec![
            os("attest"),
            os("make-credential"),
            os("--ek"),
            node.join("ek.pub").into(),
            os("--ek-cert"),
            node.join("ek.der").into(),
            os("--ca"),
            os("/var/lib/swtpm-localca/issuercert.pem"),
            os("--ak"),
            node.join("ak.pub").into(),
            os("--out"),
            os("{1}"),
            os("--secret-out"),
            os("{2}"),
        ],
    });
    let mut runs = 0;
    for (n, c) in commands.iter().enumerate() {
        let case = dir.join(format!("case{n}"));
        std::fs::create_dir(&case).unwrap();
        let (one, two) = (case.join("one"), case.join("two"));
        // Both good: both written.
        let r = c.run(&one, &two);
        assert_eq!(r.code, Some(0), "{}: {}", c.what, r.stderr);
        assert!(one.is_file() && two.is_file(), "{}", c.what);
        std::fs::write(&one, "OLD").unwrap();
        std::fs::remove_file(&two).unwrap();
        let expect_refused =
            |what: &str, r: Ran, named: &Path, before: &[(PathBuf, String, Vec<u8>)]| {
                assert_eq!(r.code, Some(2), "{}: {what}: {}", c.what, r.stderr);
                assert!(
                    r.stderr.contains(&named.display().to_string()),
                    "{}: {what}: does not name {}: {}",
                    c.what,
                    named.display(),
                    r.stderr
                );
                assert_eq!(
                    snapshot(&case),
                    before,
                    "{}: {what}: something changed",
                    c.what
                );
            };
        // The same path twice, and the same file spelled another way.
        let before = snapshot(&case);
        for other in [
            one.clone(),
            case.join(".").join("one"),
            case.join("../").join(format!("case{n}/one")),
        ] {
            let r = c.run(&one, &other);
            assert!(
                r.stderr.contains("the same file named twice"),
                "{}: {}",
                c.what,
                r.stderr
            );
            expect_refused("the same file twice", r, &one, &before);
            runs += 1;
        }
        // One target unwritable, the other an existing file (in either order).
        let blocked = case.join("blocked");
        let makers: [(&str, MakeAt); 3] = [
            ("a directory", |p| std::fs::create_dir(p).unwrap()),
            ("a FIFO", |p| {
                fifo(p);
            }),
            ("a symbolic link", |p| {
                std::os::unix::fs::symlink("one", p).unwrap()
            }),
        ];
        for (what, make) in &makers {
            make(&blocked);
            let before = snapshot(&case);
            expect_refused(what, c.run(&one, &blocked), &blocked, &before);
            expect_refused(what, c.run(&blocked, &one), &blocked, &before);
            runs += 2;
            if std::fs::symlink_metadata(&blocked).unwrap().is_dir() {
                std::fs::remove_dir(&blocked).unwrap();
            } else {
                std::fs::remove_file(&blocked).unwrap();
            }
        }
        let missing = case.join("missing/x");
        let before = snapshot(&case);
        expect_refused(
            "a missing directory",
            c.run(&one, &missing),
            &case.join("missing"),
            &before,
        );
        expect_refused(
            "a missing directory",
            c.run(&missing, &one),
            &case.join("missing"),
            &before,
        );
        runs += 2;
        assert_eq!(std::fs::read(&one).unwrap(), b"OLD", "{}", c.what);
    }
    assert!(runs >= 36, "{runs}");
    std::fs::remove_dir_all(&dir).unwrap();
}

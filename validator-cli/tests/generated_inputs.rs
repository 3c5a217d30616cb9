//! Every `validator` subcommand that reads a file, run on generated bad versions of each
//! of its input files: truncated, bit-flipped, empty, a FIFO with no writer, a
//! directory, the good file under a non-UTF-8 name, and a sparse file over the input's
//! size limit. Asserted for each run: no panic (no "panicked at", never status 101 or a
//! signal), no hang (killed and failed past a deadline), exit 2 with a message naming
//! the file for unusable input, the good file's verdict under a non-UTF-8 name, and no
//! output left behind by a failed `keys extract -o` or `man --dir`.
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

#[path = "../../validator/tests/common/mod.rs"]
mod common;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fifo, module, non_utf8_copy, run_deadline, sparse, tmpdir, vmlinuz, Ran, Rng};

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
    let facts =
        validator::formats::vmlinuz::KernelFacts::from_image(&std::fs::read(&vz).unwrap()).unwrap();
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
    let st = Command::new("openssl")
        .args([
            "req",
            "-new",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=root signer",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&pem)
        .output()
        .unwrap();
    assert!(st.status.success());
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
    let modules = |slot: &str| {
        let mut v = a(&[
            "modules",
            "check",
            "--vmlinuz",
            "{vmlinuz}",
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

//! `mkinitramfs` against hostile inputs: non-UTF-8 paths, a closed stdout, FIFOs,
//! devices, directories, oversized files, decompression bombs, and generated mutations
//! (truncated, bit-flipped, empty) of every input file of `list` and `build`. Nothing
//! may panic or hang, unusable input exits 2 naming the file, a failed build writes no
//! output, and the layouts the kernel accepts are listed.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    fifo, kernel_root_elf, non_utf8_copy, run_closed_stdout, run_deadline, sparse, tmpdir, Ran,
};
use mkinitramfs::cpio::Archive;

const DEADLINE: u64 = 120;

fn mkinitramfs<S: AsRef<OsStr>>(args: &[S]) -> Ran {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"));
    c.args(args);
    run_deadline(c, DEADLINE)
}

fn archive(name: &str) -> Vec<u8> {
    let mut a = Archive::new();
    a.file(name, name.as_bytes().to_vec(), 0o644).unwrap();
    a.write(0)
}

fn list(path: &Path) -> Ran {
    mkinitramfs(&[OsStr::new("list"), path.as_os_str()])
}

/// Unusable input: exit 2, the file named, no panic.
fn assert_refused(r: &Ran, path: &Path, what: &str) {
    r.assert_no_panic(what);
    assert_eq!(r.code, Some(2), "{what}: {}", r.stderr);
    assert!(
        r.stderr.contains(&path.display().to_string()),
        "{what}: the message does not name {}: {}",
        path.display(),
        r.stderr
    );
}

/// The kernel's layouts, through the command: an early-microcode cpio before a gzip
/// part, and zero padding after a gzip member.
#[test]
fn list_reads_the_layouts_the_kernel_accepts() {
    let dir = tmpdir("mk-layouts");
    let micro = archive("kernel/x86/microcode/GenuineIntel.bin");
    let main = mkinitramfs::compress(&archive("init"), mkinitramfs::Compress::Gzip).unwrap();
    for (name, bytes) in [
        ("micro+gzip", [micro.clone(), main.clone()].concat()),
        ("gzip+zeros", [main.clone(), vec![0; 4096]].concat()),
        (
            "micro+zstd",
            [
                micro,
                mkinitramfs::compress(&archive("init"), mkinitramfs::Compress::Zstd).unwrap(),
            ]
            .concat(),
        ),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, bytes).unwrap();
        let r = list(&f);
        assert_eq!(r.code, Some(0), "{name}: {}", r.stderr);
        assert!(
            r.stdout.lines().any(|l| l.ends_with(" init")),
            "{name}: {}",
            r.stdout
        );
    }
}

#[test]
fn non_utf8_paths_closed_stdout_and_usage() {
    let dir = tmpdir("mk-args");
    let img = mkinitramfs::compress(&archive("init"), mkinitramfs::Compress::Gzip).unwrap();
    let odd = non_utf8_copy(&dir, "initrd", ".img", &img);
    let r = list(&odd);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains(" init"), "{}", r.stdout);
    // A reader that went away: the listing ends quietly, status 0.
    let mut c = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"));
    c.arg("list").arg(&odd);
    let r = run_closed_stdout(c);
    r.assert_no_panic("list | closed");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("failed printing"), "{}", r.stderr);
    // Unknown options and missing values are usage errors naming them.
    let r = mkinitramfs(&["list", "--bogus", "x"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("--bogus"), "{}", r.stderr);
    let r = mkinitramfs(&["build", "--kernel", "k", "--bom", "b", "--init", "i", "-o"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("-o"), "{}", r.stderr);
    let r = mkinitramfs(&["--version"]);
    assert_eq!(r.code, Some(0));
}

#[test]
fn fifos_devices_directories_oversized_and_bombs_are_refused() {
    let dir = tmpdir("mk-inputs");
    let f = fifo(&dir.join("fifo"));
    assert_refused(&list(&f), &f, "FIFO");
    assert!(list(&f).stderr.contains("FIFO"));
    let zero = Path::new("/dev/zero");
    assert_refused(&list(zero), zero, "/dev/zero");
    assert_refused(&list(&dir), &dir, "directory");
    let big = sparse(&dir.join("big.img"), mkinitramfs::limits::INITRAMFS_MAX + 1);
    let r = list(&big);
    assert_refused(&r, &big, "oversized");
    assert!(r.stderr.contains("larger than the limit"), "{}", r.stderr);
    // A gzip part that unpacks past the limit: stopped there.
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..(mkinitramfs::limits::UNPACKED_MAX >> 20) + 1 {
        std::io::Write::write_all(&mut e, &chunk).unwrap();
    }
    let bomb = dir.join("bomb.img");
    std::fs::write(&bomb, e.finish().unwrap()).unwrap();
    let r = list(&bomb);
    assert_refused(&r, &bomb, "bomb");
    assert!(r.stderr.contains("unpack to more than"), "{}", r.stderr);
}

/// What `build` needs: the provisioned kernel, a BOM for it, an init.
struct BuildInputs {
    kernel: PathBuf,
    bom: PathBuf,
    init: PathBuf,
    extra: PathBuf,
}

fn build_inputs(dir: &Path) -> BuildInputs {
    // The kernel is configuration here: its tree with the vmlinux ELF (no xz decode in
    // each of the builds).
    let kernel = kernel_root_elf("default");
    let release = std::fs::read_dir(kernel.join("lib/modules"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .next()
        .unwrap();
    let bom = dir.join("bom.toml");
    std::fs::write(
        &bom,
        format!(
            "schema = 1\nimage_id = \"hostile-test\"\n\n[kernel]\nrelease = \"{release}\"\n\n\
             [modules]\nload = [\"crc16\"]\n"
        ),
    )
    .unwrap();
    let init = dir.join("init");
    std::fs::write(&init, b"#!/bin/sh\necho not really an init\n").unwrap();
    let extra = dir.join("extra.txt");
    std::fs::write(&extra, b"extra file\n").unwrap();
    BuildInputs {
        kernel,
        bom,
        init,
        extra,
    }
}

fn build(i: &BuildInputs, bom: &Path, init: &Path, extra: &Path, out: &Path) -> Ran {
    let mut file_arg = extra.as_os_str().to_os_string();
    file_arg.push("=/etc/extra.txt");
    mkinitramfs(&[
        OsStr::new("build"),
        "--kernel".as_ref(),
        i.kernel.as_os_str(),
        "--bom".as_ref(),
        bom.as_os_str(),
        "--init".as_ref(),
        init.as_os_str(),
        "--file".as_ref(),
        &file_arg,
        "-o".as_ref(),
        out.as_os_str(),
    ])
}

/// Every input file of `build` (the BOM, the init, an extra file) and of `list`,
/// truncated, bit-flipped, empty, a FIFO, a directory, under a non-UTF-8 name and
/// oversized: no panic, no hang, unusable input exits 2 naming the file, and a failed
/// build leaves no output file.
#[test]
fn generated_inputs_for_every_input_file() {
    let dir = tmpdir("mk-generated");
    let i = build_inputs(&dir);
    let out = dir.join("out.img");
    let r = build(&i, &i.bom, &i.init, &i.extra, &out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let good_img = std::fs::read(&out).unwrap();
    std::fs::remove_file(&out).unwrap();

    // (slot, a good input, its size limit, whether an empty one is unusable)
    type Slot = (&'static str, Vec<u8>, u64, bool);
    let slots: Vec<Slot> = vec![
        (
            "bom",
            std::fs::read(&i.bom).unwrap(),
            validator::config::bom::BOM_MAX,
            true,
        ),
        (
            "init",
            std::fs::read(&i.init).unwrap(),
            mkinitramfs::limits::INIT_MAX,
            true,
        ),
        (
            "extra",
            std::fs::read(&i.extra).unwrap(),
            mkinitramfs::limits::EXTRA_FILE_MAX,
            false,
        ),
        (
            "list",
            good_img.clone(),
            mkinitramfs::limits::INITRAMFS_MAX,
            true,
        ),
    ];
    let mut rng = common::Rng(0x5eed);
    for (slot, good, limit, empty_unusable) in &slots {
        let mut cases: Vec<(String, PathBuf, bool)> = Vec::new();
        let write = |name: String, bytes: &[u8]| {
            let p = dir.join(format!("{slot}-{name}"));
            std::fs::write(&p, bytes).unwrap();
            p
        };
        for n in [0, 1, good.len() / 2, good.len().saturating_sub(1)] {
            let p = write(format!("cut{n}"), &good[..n]);
            cases.push((format!("truncated to {n}"), p, n == 0 && *empty_unusable));
        }
        for k in 0..4 {
            let mut b = good.clone();
            let at = rng.index(b.len());
            b[at] ^= 1 << (k % 8);
            let p = write(format!("flip{k}"), &b);
            cases.push((format!("bit flipped at {at}"), p, false));
        }
        cases.push(("FIFO".into(), fifo(&dir.join(format!("{slot}-fifo"))), true));
        let d = dir.join(format!("{slot}-dir"));
        std::fs::create_dir_all(&d).unwrap();
        cases.push(("directory".into(), d, true));
        cases.push((
            "oversized".into(),
            sparse(&dir.join(format!("{slot}-big")), limit + 1),
            true,
        ));
        cases.push((
            "non-UTF-8 name".into(),
            non_utf8_copy(&dir, slot, "", good),
            false,
        ));
        for (what, path, unusable) in cases {
            let label = format!("{slot}: {what}");
            let r = if *slot == "list" {
                list(&path)
            } else {
                let pick = |s: &str, own: &Path| {
                    if *slot == s {
                        path.clone()
                    } else {
                        own.to_path_buf()
                    }
                };
                build(
                    &i,
                    &pick("bom", &i.bom),
                    &pick("init", &i.init),
                    &pick("extra", &i.extra),
                    &out,
                )
            };
            r.assert_no_panic(&label);
            if unusable {
                assert_refused(&r, &path, &label);
            } else if r.code == Some(2) {
                assert!(
                    r.stderr.contains(&path.display().to_string()),
                    "{label}: the message does not name the file: {}",
                    r.stderr
                );
            }
            if r.code != Some(0) && *slot != "list" {
                assert!(
                    !out.exists(),
                    "{label}: a failed build left {}",
                    out.display()
                );
            }
            let _ = std::fs::remove_file(&out);
        }
    }
}

/// Every build error names its file: `policy.trust = [""]` is refused where the BOM is
/// read (the key, its line and the BOM named; it used to end in "mkinitramfs: : No such
/// file or directory"), a certificate that is not one names its path (it used to name
/// only "bom-<name>", the entry in the initramfs), and a `--file` whose destination
/// clashes names its source.
#[test]
fn build_errors_name_their_file() {
    let dir = tmpdir("mk-names-file");
    let i = build_inputs(&dir);
    let out = dir.join("out.img");
    let base = std::fs::read_to_string(&i.bom).unwrap();
    let with_trust = |name: &str, trust: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("{base}\n[policy]\ntrust = {trust}\n")).unwrap();
        p
    };

    let empty = with_trust("empty-trust.toml", "[\"\"]");
    let r = build(&i, &empty, &i.init, &i.extra, &out);
    assert_refused(&r, &empty, "policy.trust = [\"\"]");
    assert!(r.stderr.contains("policy.trust[0]"), "{}", r.stderr);
    // Relative to the current directory too (the BOM's parent is then "").
    let mut c = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"));
    c.current_dir(&dir).args([
        OsStr::new("build"),
        "--kernel".as_ref(),
        i.kernel.as_os_str(),
        "--bom".as_ref(),
        "empty-trust.toml".as_ref(),
        "--init".as_ref(),
        i.init.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let r = run_deadline(c, DEADLINE);
    assert_refused(
        &r,
        Path::new("empty-trust.toml"),
        "relative BOM, trust [\"\"]",
    );
    assert!(r.stderr.contains("policy.trust[0]"), "{}", r.stderr);

    let junk = dir.join("junk.pem");
    std::fs::write(&junk, b"-----BEGIN CERTIFICATE-----\nnot base64 !!\n").unwrap();
    let bom = with_trust("junk-trust.toml", "[\"junk.pem\"]");
    let r = build(&i, &bom, &i.init, &i.extra, &out);
    assert_refused(&r, &junk, "a trust file that is no certificate");

    // An extra file whose destination clashes with an entry of the build names its
    // source (it used to name only the entry).
    let mut file_arg = i.extra.as_os_str().to_os_string();
    file_arg.push("=/init");
    let r = mkinitramfs(&[
        OsStr::new("build"),
        "--kernel".as_ref(),
        i.kernel.as_os_str(),
        "--bom".as_ref(),
        i.bom.as_os_str(),
        "--init".as_ref(),
        i.init.as_os_str(),
        "--file".as_ref(),
        &file_arg,
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert_refused(&r, &i.extra, "--file onto /init");
    assert!(!out.exists(), "a failed build wrote {}", out.display());
}

/// `build -o OUT` replaces only a regular file: OUT a character device, a FIFO, a
/// symbolic link (to a file, or dangling), a directory, in a missing directory or in a
/// read-only (immutable: root ignores permission bits) directory is refused, exit 2,
/// naming the path, and nothing is replaced, written through or left behind.
#[test]
fn build_output_replaces_only_a_regular_file() {
    let dir = tmpdir("mk-outputs");
    let i = build_inputs(&dir);
    let case = dir.join("case");
    std::fs::create_dir(&case).unwrap();
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let m = std::fs::symlink_metadata(&p).unwrap();
                let data = if m.is_file() {
                    std::fs::read(&p).unwrap()
                } else {
                    Vec::new()
                };
                (p, format!("{:?}", m.file_type()), data)
            })
            .collect();
        v.sort();
        v
    };
    let refused = |what: &str, out: &Path, named: &Path| {
        let before = listing(&case);
        let r = build(&i, &i.bom, &i.init, &i.extra, out);
        assert_refused(&r, named, what);
        assert_eq!(listing(&case), before, "{what}: something changed");
    };
    let out = case.join("initrd.img");
    // A regular file is replaced.
    std::fs::write(&out, "old").unwrap();
    let r = build(&i, &i.bom, &i.init, &i.extra, &out);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_ne!(std::fs::read(&out).unwrap(), b"old");
    std::fs::remove_file(&out).unwrap();
    if Command::new("mknod")
        .arg(&out)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success())
    {
        refused("a character device", &out, &out);
        std::fs::remove_file(&out).unwrap();
    } else {
        eprintln!("mknod failed (not root?): character-device case skipped");
    }
    fifo(&out);
    refused("a FIFO", &out, &out);
    std::fs::remove_file(&out).unwrap();
    let target = case.join("target");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, &out).unwrap();
    refused("a symbolic link", &out, &out);
    std::fs::remove_file(&out).unwrap();
    std::fs::remove_file(&target).unwrap();
    std::os::unix::fs::symlink(case.join("nowhere"), &out).unwrap();
    refused("a dangling symbolic link", &out, &out);
    std::fs::remove_file(&out).unwrap();
    std::fs::create_dir(&out).unwrap();
    refused("a directory", &out, &out);
    std::fs::remove_dir(&out).unwrap();
    let missing = case.join("missing/sub");
    refused("a missing directory", &missing.join("initrd.img"), &missing);
    let ro = case.join("ro");
    std::fs::create_dir(&ro).unwrap();
    if Command::new("chattr")
        .arg("+i")
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success())
    {
        refused(
            "a read-only directory",
            &ro.join("initrd.img"),
            &ro.join("initrd.img"),
        );
        assert!(Command::new("chattr")
            .arg("-i")
            .arg(&ro)
            .status()
            .unwrap()
            .success());
    } else {
        eprintln!("chattr +i failed: read-only-directory case skipped");
    }
    assert_eq!(std::fs::read_dir(&ro).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

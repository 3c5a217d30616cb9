//! The built artifacts themselves: a static init and a reproducible initramfs that GNU
//! cpio reads the same way we do.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::process::Command;

use qemu::paths;

fn tool(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn init_is_static() {
    for init in [
        paths::init_binary().unwrap(),
        paths::production_init().unwrap(),
    ] {
        is_static(init.to_str().unwrap());
    }
}

/// The production init carries no test hook; the test bed's does (so the check can fail).
#[test]
fn production_init_has_no_test_hook() {
    let strings = |p: std::path::PathBuf| tool("strings", &[p.to_str().unwrap()]);
    let prod = strings(paths::production_init().unwrap());
    assert!(
        !prod.contains("test_panic"),
        "test_panic in the production init"
    );
    // A real init: the panic hook's message is there. (Short key names such as
    // `validator.on_panic` may be compared as immediates and leave no string.)
    assert!(prod.contains("PANIC in PID 1"));
    let hooked = strings(paths::init_binary().unwrap());
    assert!(
        hooked.contains("test_panic"),
        "the test bed's init has its hook"
    );
    // Only the test bed's init prints the whole report on the console.
    let full = validator::report::console::FULL_PREFIX.trim_end();
    assert!(!prod.contains(full), "{full} in the production init");
    assert!(hooked.contains(full), "the test bed's init prints {full}");
    assert!(prod.contains(validator::report::console::PREFIX.trim_end()));
}

fn is_static(p: &str) {
    let l = tool("readelf", &["-lW", p]);
    assert!(l.contains("LOAD"), "{l}");
    assert!(
        !l.contains("INTERP"),
        "init has a program interpreter:\n{l}"
    );
    let d = tool("readelf", &["-dW", p]);
    assert!(!d.contains("(NEEDED)"), "init needs shared libraries:\n{d}");
}

fn build(dir: &std::path::Path, name: &str, compress: mkinitramfs::Compress) -> Vec<u8> {
    let kernel = paths::kernel("default").unwrap();
    let bom = qemu::scenario::example_bom(&kernel).unwrap();
    let bom_path = dir.join("bom.toml");
    std::fs::write(&bom_path, bom.to_toml().unwrap()).unwrap();
    let mut spec = mkinitramfs::Spec::new(&kernel.root, &bom_path, &paths::init_binary().unwrap());
    spec.compress = compress;
    spec.mtime = 1_700_000_000;
    let b = mkinitramfs::build(&spec).unwrap();
    std::fs::write(dir.join(name), &b.bytes).unwrap();
    b.bytes
}

#[test]
fn initramfs_is_byte_identical_across_builds_and_gnu_cpio_agrees() {
    let dir = paths::run_dir("repro").unwrap();
    for c in [mkinitramfs::Compress::Gzip, mkinitramfs::Compress::Zstd] {
        let a = build(&dir, "a.img", c);
        let b = build(&dir, "b.img", c);
        let sha = |f: &str| {
            tool("sha256sum", &[dir.join(f).to_str().unwrap()])
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(sha("a.img"), sha("b.img"), "{c:?} builds differ");
        assert_eq!(a, b);
    }
    // Uncompressed: GNU cpio lists the same entries with the same modes and sizes.
    let raw = build(&dir, "raw.cpio", mkinitramfs::Compress::None);
    let ours = mkinitramfs::cpio::read(&raw).unwrap();
    let out = Command::new("cpio")
        .args([
            "-itv",
            "--quiet",
            "-F",
            dir.join("raw.cpio").to_str().unwrap(),
        ])
        .output()
        .expect("GNU cpio");
    assert!(out.status.success());
    let gnu = String::from_utf8_lossy(&out.stdout);
    let gnu_lines: Vec<&str> = gnu.lines().collect();
    assert_eq!(gnu_lines.len(), ours.len());
    for (g, o) in gnu_lines.iter().zip(&ours) {
        let f: Vec<&str> = g.split_whitespace().collect();
        // e.g. "crw-------   1 root     root       5,   1 Nov 14  2023 dev/console"
        let ours_mode = o.to_string();
        assert_eq!(f[0], &ours_mode[..10], "mode of {}", o.path);
        assert_eq!(*f.last().unwrap(), o.path.as_str(), "{g}");
        if !f[0].starts_with('c') {
            assert_eq!(f[4], o.size.to_string(), "size of {}", o.path);
        } else {
            assert_eq!(o.rdev, (5, 1));
        }
    }
    assert!(ours
        .iter()
        .any(|e| e.path == "dev/console" && e.mode == 0o020600));
    assert!(ours.iter().any(|e| e.path == "init" && e.mode == 0o100755));
    // GNU cpio extracts our archive into the files we put in.
    let x = dir.join("extract");
    std::fs::create_dir_all(&x).unwrap();
    let st = Command::new("cpio")
        .args([
            "-id",
            "--quiet",
            "--no-absolute-filenames",
            "-F",
            dir.join("raw.cpio").to_str().unwrap(),
        ])
        .current_dir(&x)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read(x.join("init")).unwrap(),
        std::fs::read(paths::init_binary().unwrap()).unwrap()
    );
    // And our `list` command reads GNU cpio's own newc output.
    let listfile = dir.join("list.txt");
    std::fs::write(&listfile, "init\netc/validator/bom.toml\n").unwrap();
    let gnu_made = Command::new("cpio")
        .args(["-o", "-H", "newc", "--quiet"])
        .current_dir(&x)
        .stdin(std::fs::File::open(&listfile).unwrap())
        .output()
        .unwrap();
    assert!(gnu_made.status.success());
    let back = mkinitramfs::cpio::read(&gnu_made.stdout).unwrap();
    assert_eq!(
        back.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        ["init", "etc/validator/bom.toml"]
    );
    assert_eq!(back[0].data, std::fs::read(x.join("init")).unwrap());
}

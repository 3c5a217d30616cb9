//! `mkinitramfs list` reads what the writer wrote (gzip, zstd, none), and names the same
//! entries as GNU cpio.

use std::process::Command;

use mkinitramfs::cpio::{Archive, Entry, Kind};

#[test]
fn list_command_round_trips_with_gnu_cpio() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../target/test-tmp/list-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = Archive::new();
    a.file("init", b"\x7fELF-ish".to_vec(), 0o755).unwrap();
    a.add(
        "dev/console",
        Entry {
            kind: Kind::CharDev { major: 5, minor: 1 },
            perm: 0o600,
        },
    )
    .unwrap();
    a.add(
        "bin/sh",
        Entry {
            kind: Kind::Symlink("busybox".into()),
            perm: 0o777,
        },
    )
    .unwrap();
    a.file("etc/validator/bom.toml", b"schema = 1\n".to_vec(), 0o644)
        .unwrap();
    let raw = a.write(0);
    let raw_path = dir.join("a.cpio");
    std::fs::write(&raw_path, &raw).unwrap();
    let gnu = Command::new("cpio")
        .args(["-it", "--quiet", "-F"])
        .arg(&raw_path)
        .output()
        .expect("GNU cpio");
    assert!(gnu.status.success());
    let gnu_names: Vec<String> = String::from_utf8_lossy(&gnu.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    for c in [
        mkinitramfs::Compress::None,
        mkinitramfs::Compress::Gzip,
        mkinitramfs::Compress::Zstd,
    ] {
        let f = dir.join(format!("a-{c:?}.img"));
        std::fs::write(&f, mkinitramfs::compress(&raw, c).unwrap()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"))
            .arg("list")
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let names: Vec<String> = text
            .lines()
            .map(|l| {
                l.split(" -> ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(names, gnu_names, "{c:?}");
        assert!(
            text.contains("crw------- 0/0      5, 1 dev/console"),
            "{text}"
        );
        assert!(
            text.contains("lrwxrwxrwx 0/0         7 bin/sh -> busybox"),
            "{text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"))
        .arg("list")
        .arg(dir.join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::write(dir.join("junk"), "not an archive at all ".repeat(10)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"))
        .arg("list")
        .arg(dir.join("junk"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a newc header"));
}

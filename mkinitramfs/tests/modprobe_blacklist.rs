//! The initramfs's own module configuration at build time: a BOM whose `modules.load`
//! names a module that a `modprobe.d` file packed into the initramfs blacklists is refused
//! (the init would refuse that module at boot), naming the module and the file and line;
//! the same file without the blacklist builds, and carries the file for the init to read.
#![expect(
    clippy::unwrap_used,
    reason = "test code: the helper outside the test unwraps as the test does"
)]

use std::path::Path;

mod common;
use common::workspace;

fn build(dir: &Path, conf: &str) -> Result<Vec<String>, mkinitramfs::BuildError> {
    let f = dir.join("node.conf");
    std::fs::write(&f, conf).unwrap();
    let mut spec = common::small_spec(dir, "blacklist-test", &["crc-itu-t"], &[]);
    spec.extra_files = vec![(f, "/etc/modprobe.d/node.conf".into())];
    let built = mkinitramfs::build(&spec)?;
    let entries = mkinitramfs::unpack::unpack(&built.bytes, 1 << 30).unwrap();
    Ok(entries.into_iter().map(|e| e.path).collect())
}

#[test]
fn a_blacklisted_module_in_modules_load_is_refused_at_build_time() {
    let dir = workspace().join(format!(
        "target/test-tmp/modprobe-blacklist-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let e = build(&dir, "options crc_itu_t x=1\n\nblacklist crc-itu-t\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "modules.load names crc_itu_t, which the initramfs's module configuration \
             blacklists (/etc/modprobe.d/node.conf:3)"
        ),
        "{e}"
    );
    let paths = build(&dir, "options crc_itu_t x=1\n").unwrap();
    assert!(
        paths
            .iter()
            .any(|p| p.ends_with("etc/modprobe.d/node.conf")),
        "{paths:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

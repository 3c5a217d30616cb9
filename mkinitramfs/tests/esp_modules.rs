//! A BOM with `[slot]` makes the init mount the ESP, so the initramfs must carry what that
//! takes (`vfat` and the two character sets of its default mount options), unless the
//! kernel builds them in: `mkinitramfs` refuses such a BOM naming what is missing, and
//! builds it once `modules.load` names them (the provisioned Debian 6.1 kernel builds all
//! three as modules).
#![expect(
    clippy::unwrap_used,
    reason = "test code: the helper outside the test unwraps as the test does"
)]

use std::path::Path;

mod common;
use common::workspace;

fn build(dir: &Path, load: &[&str]) -> Result<(), mkinitramfs::BuildError> {
    let spec = common::small_spec(dir, "esp-test", load, &[]);
    let mut bom = std::fs::read_to_string(&spec.bom).unwrap();
    bom.push_str("\n[slot]\n");
    std::fs::write(&spec.bom, bom).unwrap();
    mkinitramfs::build(&spec).map(|_| ())
}

#[test]
fn a_slot_bom_without_the_esp_modules_is_refused() {
    let dir = workspace().join(format!(
        "target/test-tmp/esp-modules-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let e = build(&dir, &["crc-itu-t", "vfat"]).unwrap_err().to_string();
    assert!(
        e.contains("the BOM has [slot]") && e.contains("does not name nls_cp437, nls_ascii"),
        "{e}"
    );
    build(&dir, &["crc-itu-t", "vfat", "nls_cp437", "nls-ascii"]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

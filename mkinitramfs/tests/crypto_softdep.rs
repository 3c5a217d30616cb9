//! A module whose signature needs a digest Debian 6.1 has only as a module: `crc8` re-signed
//! by `sign-file sha512`. mkinitramfs packs the crypto module that provides sha512
//! (`sha512_generic`, gated like any other), lists it as `crc8`'s `pre:` soft dependency so
//! the init loads it first, and its build-time gate passes `crc8`; the same build of a
//! module signed as Debian signs (sha256) packs no crypto module. The boot that loads such
//! a module with signatures enforced is QEMU scenario `sha512-module`.
#![expect(
    clippy::unwrap_used,
    reason = "test code: the helper outside `#[test]` unwraps as the test does"
)]

use std::path::Path;

use mkinitramfs::closure::KernelTree;

mod common;
use common::workspace;

struct Built {
    modules: Vec<String>,
    softdep: String,
}

fn build(dir: &Path, override_crc8: Option<&Path>) -> Result<Built, mkinitramfs::BuildError> {
    let mut spec = common::small_spec(dir, "sha512-test", &["crc8"], &["snake.pem"]);
    if let Some(p) = override_crc8 {
        spec.module_overrides = vec![("crc8".into(), p.to_path_buf())];
    }
    let built = mkinitramfs::build(&spec)?;
    let entries = mkinitramfs::unpack::unpack(&built.bytes, 1 << 30).unwrap();
    let softdep = entries
        .iter()
        .find(|e| e.path.ends_with("/modules.softdep"))
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .unwrap();
    Ok(Built {
        modules: built.modules,
        softdep,
    })
}

#[test]
fn a_sha512_signed_module_brings_the_module_that_provides_sha512() {
    let dir = workspace().join(format!(
        "target/test-tmp/crypto-softdep-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let key = sigcases::keys::snakeoil(&dir);
    let tree = KernelTree::open(&workspace().join("target/kernels/default")).unwrap();
    assert!(
        tree.release.starts_with("6.1."),
        "{}: the default kernel is Debian 6.1",
        tree.release
    );
    let original = std::fs::read(tree.moddir.join(&tree.files["crc8"])).unwrap();
    let signed = dir.join("crc8.ko");
    sigcases::cases::resign(&original, &key, "sha512", &signed);

    // Signed as Debian signs: nothing added.
    let plain = build(&dir, None).unwrap();
    assert_eq!(plain.modules, ["crc8", "efivarfs"]);
    assert!(!plain.softdep.contains("crc8"), "{}", plain.softdep);

    // Signed with sha512: sha512_generic packed, and loaded first.
    let b = build(&dir, Some(&signed)).unwrap();
    assert_eq!(b.modules, ["crc8", "efivarfs", "sha512_generic"]);
    assert!(
        b.softdep
            .lines()
            .any(|l| l == "softdep crc8 pre: sha512_generic"),
        "{}",
        b.softdep
    );
    // Only the generic implementation: sha512_ssse3 needs a CPU feature.
    assert!(tree.files.contains_key("sha512_ssse3"));
    assert_eq!(
        tree.digest_providers(validator::trust::HashAlg::Sha512)
            .unwrap(),
        ["sha512_generic"]
    );
    assert_eq!(
        tree.digest_providers(validator::trust::HashAlg::Sha384)
            .unwrap(),
        ["sha512_generic"]
    );
}

//! What a build takes from the kernel image (its built-in certificates, vermagic and
//! exported CRCs) is kept for the process, keyed by the image's bytes: a second build
//! from the same image gives the same archive, and an image changed between two builds
//! in one process is read afresh (a truncated one is refused by name, a different one
//! gives its own answer), never served from what the first build saw.
#![expect(
    clippy::unwrap_used,
    reason = "test code: the helper outside `#[test]` unwraps as the test does"
)]

use std::path::Path;

mod common;
use common::{small_spec, workspace};

/// A kernel tree whose `lib/modules` is the provisioned Debian 6.1 kernel's and whose
/// `boot/vmlinuz-<release>` is a copy of its image, so the image can be changed.
fn tree_with_own_image(dir: &Path) -> std::path::PathBuf {
    let real = workspace().join("target/kernels/default");
    let root = dir.join("kernel");
    std::fs::create_dir_all(root.join("boot")).unwrap();
    std::os::unix::fs::symlink(real.join("lib"), root.join("lib")).unwrap();
    for e in std::fs::read_dir(real.join("boot")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), root.join("boot").join(e.file_name())).unwrap();
    }
    root
}

#[test]
fn a_changed_kernel_image_is_read_again_in_the_same_process() {
    let dir = workspace().join(format!("target/test-tmp/kfacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = tree_with_own_image(&dir);
    let mut spec = small_spec(&dir, "kernel-facts", &["crc16"], &[]);
    spec.kernel = root.clone();
    let first = mkinitramfs::build(&spec).unwrap();
    let again = mkinitramfs::build(&spec).unwrap();
    assert_eq!(first.bytes, again.bytes, "same image, same archive");

    let image = std::fs::read_dir(root.join("boot"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("vmlinuz-"))
        .unwrap();
    let bytes = std::fs::read(&image).unwrap();
    std::fs::write(&image, &bytes[..bytes.len() / 2]).unwrap();
    let err = mkinitramfs::build(&spec).unwrap_err().to_string();
    assert!(err.starts_with(&image.display().to_string()), "{err}");

    // Another kernel's image under this release's name: its vermagic does not name the
    // release, and the build says so instead of answering from the first image.
    let other = workspace().join("target/kernels/k612/boot");
    let other = std::fs::read_dir(&other)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("vmlinuz-"))
        .unwrap();
    std::fs::copy(&other, &image).unwrap();
    let err = mkinitramfs::build(&spec).unwrap_err().to_string();
    assert!(err.contains("no vermagic string for"), "{err}");

    std::fs::write(&image, &bytes).unwrap();
    let back = mkinitramfs::build(&spec).unwrap();
    assert_eq!(first.bytes, back.bytes);
    let _ = std::fs::remove_dir_all(&dir);
}

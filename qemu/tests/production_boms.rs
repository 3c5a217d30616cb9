//! The shipped production BOMs (`examples/hgx-h100-training.toml`,
//! `examples/hgx-h200-training.toml`) build A/B slot images as an operator builds them
//! (`mkinitramfs slot`'s library, which the command calls): the real Debian kernel, a
//! root holding the drivers `modules.root` names (the kernel's mlx5 and the real NVIDIA
//! driver built from Debian's sources, signed with the fleet key), the BOM's own
//! `policy.trust` certificate signing the root hash, and the command line with the words
//! `[hardware] cmdline` asks for, so the slot's `reference.json` is predicted from those
//! drivers. Each image verifies with `veritysetup verify` and carries the BOM byte for
//! byte. (The preflight runs the H200 BOM against the hardware fixtures:
//! `validator/tests/preflight_fixtures.rs`.)
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap and panic as the tests do"
)]

use std::process::Command;

use qemu::hw::{install_root_modules, nvidia_fleet, nvidia_module, RootModules};
use qemu::paths::{kernel, workspace};

fn builds_a_slot(example: &str) {
    let tag = example.trim_end_matches(".toml");
    let d = workspace().join(format!(
        "target/test-tmp/prod-bom-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("certs")).unwrap();
    let k = kernel("default").unwrap();
    assert_eq!(
        k.release, "6.1.0-57-amd64",
        "the examples name the provisioned kernel"
    );
    // The root the BOM describes: its critical files and its drivers.
    let root = d.join("root");
    for f in ["sbin/init", "usr/bin/nv-fabricmanager"] {
        std::fs::create_dir_all(root.join(f).parent().unwrap()).unwrap();
        std::fs::write(root.join(f), "#!/bin/sh\n").unwrap();
    }
    let dkms = [
        "nvidia.ko",
        "nvidia-uvm.ko",
        "nvidia-modeset.ko",
        "nvidia-peermem.ko",
    ]
    .iter()
    .map(|f| nvidia_module("open", &k.release, f).unwrap())
    .collect();
    install_root_modules(
        &root,
        &k,
        &RootModules {
            in_tree: vec!["mlx5_core".into(), "mlx5_ib".into()],
            dkms,
            modprobe_conf: None,
        },
    )
    .unwrap();
    // The fleet key signs the NVIDIA modules and the root hash; the BOM trusts it.
    let (cert, _) = nvidia_fleet("open", &k.release).unwrap();
    std::fs::copy(&cert, d.join("certs/fleet.pem")).unwrap();
    let key = cert.with_file_name("fleet.key");
    let bom = std::fs::read(workspace().join("examples").join(example)).unwrap();
    std::fs::write(d.join("bom.toml"), &bom).unwrap();
    std::fs::write(d.join("init"), b"\x7fELF stand-in").unwrap();
    let out = d.join("slot-A");
    let built = mkinitramfs::slot::build(&mkinitramfs::slot::SlotSpec {
        root: root.clone(),
        kernel: k.root.clone(),
        bom: d.join("bom.toml"),
        init: d.join("init"),
        key,
        cert: d.join("certs/fleet.pem"),
        slot: "A".into(),
        options: "ro intel_iommu=on iommu=pt".into(),
        out: out.clone(),
        epoch: 1_700_000_000,
        rauc: None,
        cmdline: Some("BOOT_IMAGE=/A/vmlinuz validator.slot=A ro intel_iommu=on iommu=pt".into()),
        uki: None,
    });
    let built = built.unwrap_or_else(|e| panic!("{example}: {e}"));
    assert_eq!(std::fs::read(out.join("bom.toml")).unwrap(), bom);
    let hash = std::fs::read_to_string(out.join("root.roothash")).unwrap();
    assert_eq!(hash.trim(), built.root_hash);
    let o = Command::new("veritysetup")
        .arg("verify")
        .arg(out.join("root.img"))
        .arg(out.join("root.verity"))
        .arg(hash.trim())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The reference names the root's drivers (predicted from the files in the root).
    let reference = std::fs::read_to_string(out.join("reference.json")).unwrap();
    for m in ["mlx5_core", "mlx5_ib", "nvidia", "nvidia_peermem"] {
        assert!(
            reference.contains(&format!("\"module:{m} sha256:")),
            "{m}: {reference}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_hgx_h100_bom_builds_a_slot() {
    builds_a_slot("hgx-h100-training.toml");
}

#[test]
fn the_hgx_h200_bom_builds_a_slot() {
    builds_a_slot("hgx-h200-training.toml");
}

//! The preflight's root-module gate over the real NVIDIA driver: Debian 12's
//! `nvidia-kernel-dkms` (proprietary, licence "NVIDIA") and `nvidia-open-kernel-dkms` (open,
//! "Dual MIT/GPL"), built against the kernel under test and signed with the test fleet key
//! by `scripts/build-nvidia` (`target/nvidia/`, see docs/NVIDIA.md).
//!
//! Each test lays out a root the way Debian's DKMS does (`lib/modules/<release>/updates/
//! dkms/*.ko` next to the kernel's own tree, `modules.dep` written by the real `depmod`) and
//! gates the BOM's `modules.root` from it with the boot's gate: the kernel's built-in keys
//! plus the fleet certificate, the kernel's full CRC table plus the root's own exports.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};

use validator::config::bom::{Bom, Flavour, ModuleName};
use validator::formats::vmlinuz::KernelFacts;
use validator::gate::{Gate, Policy, Verdict};
use validator::stages::preflight::drivers;
use validator::trust::TrustStore;

fn nvidia_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nvidia")
}

fn kernel(name: &str) -> KernelFacts {
    // The kernel is configuration here: its vmlinux ELF, no xz decode in each test.
    KernelFacts::from_image(&std::fs::read(common::vmlinux(name)).unwrap()).unwrap()
}

/// The built modules of one flavour for `release`, `signed` or `unsigned`.
fn built(flavour: &str, release: &str, which: &str) -> PathBuf {
    let d = nvidia_dir().join(flavour).join(release).join(which);
    assert!(
        d.join("nvidia.ko").is_file(),
        "{} missing: run scripts/build-nvidia (docs/NVIDIA.md)",
        d.display()
    );
    d
}

const ROOT_MODULES: [&str; 5] = [
    "nvidia",
    "nvidia-uvm",
    "nvidia-modeset",
    "nvidia-drm",
    "nvidia-peermem",
];

/// A root with the kernel's module tree and the NVIDIA modules under `updates/dkms`, and
/// `depmod`'s index. Links, not copies: the trees are hundreds of MB.
fn make_root(tag: &str, release: &str, kernel_name: &str, modules: &Path) -> PathBuf {
    let root = common::tmpdir(tag);
    let dir = root.join("lib/modules").join(release);
    std::fs::create_dir_all(dir.join("updates/dkms")).unwrap();
    let ktree = common::kernel_root(kernel_name)
        .join("lib/modules")
        .join(release);
    std::os::unix::fs::symlink(
        std::fs::canonicalize(ktree.join("kernel")).unwrap(),
        dir.join("kernel"),
    )
    .unwrap();
    for f in [
        "modules.builtin",
        "modules.order",
        "modules.builtin.modinfo",
    ] {
        if ktree.join(f).exists() {
            std::fs::copy(ktree.join(f), dir.join(f)).unwrap();
        }
    }
    for e in std::fs::read_dir(modules).unwrap() {
        let p = e.unwrap().path();
        std::os::unix::fs::symlink(
            std::fs::canonicalize(&p).unwrap(),
            dir.join("updates/dkms").join(p.file_name().unwrap()),
        )
        .unwrap();
    }
    let out = std::process::Command::new("depmod")
        .arg("-b")
        .arg(&root)
        .arg(release)
        .output()
        .expect("depmod (kmod) runs: scripts/provision installs it");
    assert!(
        out.status.success(),
        "depmod: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    root
}

fn bom(release: &str, flavour: Flavour) -> Bom {
    let mut b = validator::config::bom::load(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hgx-h200-training.toml"),
    )
    .unwrap()
    .bom;
    b.kernel.release = validator::config::bom::Version(release.to_string());
    b.nvidia.as_mut().unwrap().flavour = flavour;
    b.modules.root = ROOT_MODULES
        .iter()
        .map(|m| ModuleName(m.to_string()))
        .collect();
    b.policy.out_of_tree = ROOT_MODULES
        .iter()
        .map(|m| ModuleName(m.to_string()))
        .collect();
    b
}

/// The boot's gate for `k`: its built-in keys (and the fleet key when `fleet`), its full
/// CRC table and vermagic, the BOM's policy.
fn gate(k: &KernelFacts, vmlinuz: &Path, bom: &Bom, fleet: bool) -> Gate {
    let img = std::fs::read(vmlinuz).unwrap();
    let elf = validator::formats::vmlinuz::vmlinux(&img).unwrap();
    let mut trust = TrustStore::new();
    for (i, der) in validator::formats::vmlinuz::builtin_certs(&elf)
        .unwrap()
        .iter()
        .enumerate()
    {
        trust.add_bytes(der, &format!("builtin-{i}")).unwrap();
    }
    if fleet {
        trust
            .add_path(&nvidia_dir().join("fleet-key/fleet.crt"))
            .unwrap();
    }
    let mut policy = Policy::from_bom(bom);
    policy.kernel_vermagic = k.vermagic.clone();
    Gate {
        trust,
        symvers: Some(k.symvers()),
        policy,
    }
}

fn names() -> Vec<String> {
    ROOT_MODULES.iter().map(|m| m.to_string()).collect()
}

fn by_name<'a>(v: &'a [Verdict], name: &str) -> &'a Verdict {
    v.iter()
        .find(|x| x.module == name)
        .unwrap_or_else(|| panic!("no verdict for {name}"))
}

fn codes(v: &Verdict) -> Vec<&'static str> {
    let mut c: Vec<_> = v.reasons.iter().map(|r| r.code.as_str()).collect();
    c.dedup();
    c
}

#[test]
fn both_flavours_pass_with_the_fleet_key_and_their_flavour() {
    let k = kernel("default");
    for (flavour, f, licence) in [
        ("proprietary", Flavour::Proprietary, "NVIDIA"),
        ("open", Flavour::Open, "Dual MIT/GPL"),
    ] {
        let root = make_root(
            &format!("nvgate-{flavour}"),
            &k.release,
            "default",
            &built(flavour, &k.release, "signed"),
        );
        let b = bom(&k.release, f);
        let dir = root.join("lib/modules").join(&k.release);
        let v = drivers::gate_root_modules(
            gate(&k, &common::vmlinux("default"), &b, true),
            &dir,
            &names(),
        )
        .unwrap();
        for x in &v {
            assert!(x.pass, "{flavour}: {} refused: {}", x.module, x.summary());
        }
        // The closure brings in what the NVIDIA modules import from the kernel's tree.
        for m in [
            "nvidia",
            "nvidia_uvm",
            "nvidia_modeset",
            "nvidia_drm",
            "nvidia_peermem",
            "drm",
            "drm_kms_helper",
        ] {
            by_name(&v, m);
        }
        let nv = by_name(&v, "nvidia");
        assert_eq!(nv.license.as_deref(), Some(licence));
        assert_eq!(
            nv.signer.as_deref(),
            Some("Boot gate test fleet module signing key")
        );
        assert!(nv
            .file
            .as_deref()
            .unwrap()
            .ends_with("updates/dkms/nvidia.ko"));
        // In-tree dependencies are signed by Debian's build key.
        assert_ne!(by_name(&v, "drm").signer, nv.signer);
        std::fs::remove_dir_all(&root).unwrap();
    }
}

#[test]
fn nvidia_uvm_is_checked_against_nvidia_s_own_exports() {
    let k = kernel("default");
    let release = k.release.clone();
    let root = make_root(
        "nvgate-uvm",
        &release,
        "default",
        &built("proprietary", &release, "signed"),
    );
    let b = bom(&release, Flavour::Proprietary);
    let dir = root.join("lib/modules").join(&release);
    let g = gate(&k, &common::vmlinux("default"), &b, true);
    let index = validator::runtime::modload::load_index(&dir).unwrap();
    let uvm_path = dir.join(&index.entries["nvidia_uvm"].path);
    let raw = std::fs::read(&uvm_path).unwrap();
    // With the kernel's table alone, nvidia_uvm's imports from nvidia are unknown.
    let (v, _) = g.check("nvidia_uvm", "nvidia-uvm.ko", &raw);
    assert_eq!(codes(&v), ["unknown-symbol"], "{}", v.summary());
    let unknown = &v.reasons[0].message;
    assert!(unknown.contains("nvUvmInterface"), "{unknown}");
    // With the root's exports (what the preflight adds) they are known and agree.
    let mut with = g.clone();
    let read = drivers::add_root_exports(
        &mut with,
        &dir,
        &index,
        &drivers::closure(&index, &["nvidia_uvm".into()]),
    );
    assert!(read.contains(&"nvidia".to_string()), "{read:?}");
    let (v, _) = with.check("nvidia_uvm", "nvidia-uvm.ko", &raw);
    assert!(v.pass, "{}", v.summary());
    // An nvidia built from other sources (one export's CRC differs) is caught.
    let sym = unknown
        .trim_start_matches("unknown symbol(s) ")
        .split(", ")
        .next()
        .unwrap()
        .to_string();
    let table = with.symvers.as_mut().unwrap();
    let e = table.map.get_mut(&sym).unwrap();
    e.crc ^= 1;
    let (v, _) = with.check("nvidia_uvm", "nvidia-uvm.ko", &raw);
    assert_eq!(codes(&v), ["crc"], "{}", v.summary());
    assert!(
        v.summary()
            .contains(&format!("disagrees about version of symbol {sym}")),
        "{}",
        v.summary()
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn refused_wrong_flavour_unsigned_untrusted() {
    let k = kernel("default");
    let release = k.release.clone();
    let vmlinuz = common::vmlinux("default");
    // The BOM names the other flavour: nvidia is refused by its licence.
    for (flavour, wrong) in [
        ("proprietary", Flavour::Open),
        ("open", Flavour::Proprietary),
    ] {
        let root = make_root(
            &format!("nvgate-wrong-{flavour}"),
            &release,
            "default",
            &built(flavour, &release, "signed"),
        );
        let b = bom(&release, wrong);
        let dir = root.join("lib/modules").join(&release);
        let v = drivers::gate_root_modules(gate(&k, &vmlinuz, &b, true), &dir, &names()).unwrap();
        let nv = by_name(&v, "nvidia");
        assert_eq!(codes(nv), ["flavour"], "{flavour}: {}", nv.summary());
        assert!(nv.summary().contains("is not the"), "{}", nv.summary());
        std::fs::remove_dir_all(&root).unwrap();
    }
    // Unsigned builds: every NVIDIA module refused as unsigned.
    let root = make_root(
        "nvgate-unsigned",
        &release,
        "default",
        &built("proprietary", &release, "unsigned"),
    );
    let b = bom(&release, Flavour::Proprietary);
    let dir = root.join("lib/modules").join(&release);
    let v = drivers::gate_root_modules(gate(&k, &vmlinuz, &b, true), &dir, &names()).unwrap();
    for m in [
        "nvidia",
        "nvidia_uvm",
        "nvidia_modeset",
        "nvidia_drm",
        "nvidia_peermem",
    ] {
        assert_eq!(codes(by_name(&v, m)), ["unsigned"], "{m}");
    }
    assert!(by_name(&v, "drm").pass);
    std::fs::remove_dir_all(&root).unwrap();
    // Signed, but the fleet key is not trusted.
    let root = make_root(
        "nvgate-untrusted",
        &release,
        "default",
        &built("proprietary", &release, "signed"),
    );
    let dir = root.join("lib/modules").join(&release);
    let v = drivers::gate_root_modules(gate(&k, &vmlinuz, &b, false), &dir, &names()).unwrap();
    let nv = by_name(&v, "nvidia");
    assert_eq!(codes(nv), ["untrusted-signer"], "{}", nv.summary());
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn refused_for_another_kernel_release() {
    // The same files judged for Debian's 6.12 kernel: its vermagic, its CRCs, its keys.
    let k612 = kernel("k612");
    let k = kernel("default");
    let b = bom(&k612.release, Flavour::Proprietary);
    let g = gate(&k612, &common::vmlinux("k612"), &b, true);
    for flavour in ["proprietary", "open"] {
        let dir = built(flavour, &k.release, "signed");
        let files: Vec<PathBuf> = ["nvidia.ko", "nvidia-uvm.ko"]
            .iter()
            .map(|f| dir.join(f))
            .collect();
        let batch = validator::gate::batch::check_files(&g, &files, 2);
        for v in &batch.verdicts {
            let c = codes(v);
            assert!(!v.pass, "{flavour} {}", v.module);
            assert!(
                c.contains(&"vermagic-release"),
                "{flavour} {}: {}",
                v.module,
                v.summary()
            );
            assert!(
                c.contains(&"crc"),
                "{flavour} {}: {}",
                v.module,
                v.summary()
            );
            assert!(
                v.summary().contains(&format!(
                    "built for kernel {}, the image's kernel is {}",
                    k.release, k612.release
                )),
                "{}",
                v.summary()
            );
        }
    }
}

//! Every parser of untrusted input, fed mutations of real inputs and random bytes: they
//! may refuse, never panic. (Deterministic, so a failure reproduces; the parsers are pure
//! functions over bytes and ready for coverage-guided fuzzing as they are.)
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};

use common::Rng;

/// Mutations of `seed`: flips, overwrites with interesting values, truncations, inserts.
fn mutations(seed: &[u8], n: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut m = seed.to_vec();
        if m.is_empty() {
            let n = rng.index(64);
            out.push(rng.bytes(n));
            continue;
        }
        match i % 5 {
            0 => {
                let p = rng.index(m.len());
                m[p] ^= 1 << rng.index(8);
            }
            1 => {
                let p = rng.index(m.len());
                m[p] = [0x00, 0xff, 0x7f, 0x80, 0x30, 0x82, b'"', b'='][rng.index(8)];
            }
            2 => m.truncate(rng.index(m.len())),
            3 => {
                let p = rng.index(m.len());
                let n = rng.index(16) + 1;
                let extra = rng.bytes(n);
                m.splice(p..p, extra);
            }
            _ => {
                for _ in 0..8 {
                    let p = rng.index(m.len());
                    m[p] = rng.next().to_le_bytes()[0];
                }
            }
        }
        out.push(m);
    }
    out
}

fn kernel_file(kernel: &str, suffix: &str) -> PathBuf {
    common::all_modules(kernel)
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap()
}

#[test]
fn cmdline_and_bom() {
    let mut rng = Rng(1);
    for _ in 0..5000 {
        let len = rng.index(80);
        let s: String = (0..len)
            .map(|_| b" =\"-_.a9\t"[rng.index(9)] as char)
            .collect();
        let _ = validator::config::cmdline::BootArgs::parse(&s);
    }
    let bom = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hgx-h100-training.toml"),
    )
    .unwrap();
    for m in mutations(&bom, 3000, &mut rng) {
        let _ = validator::config::bom::parse(&m, Path::new("m.toml"));
    }
}

#[test]
fn module_files() {
    let mut rng = Rng(2);
    let raw = std::fs::read(kernel_file("default", "/crc16.ko")).unwrap();
    let g = validator::gate::Gate {
        policy: validator::gate::Policy {
            require_signature: true,
            ..Default::default()
        },
        ..Default::default()
    };
    // The ELF header and section table are where parsers trip: aim half the mutations there.
    let shoff = usize::try_from(u64::from_le_bytes(raw[0x28..0x30].try_into().unwrap())).unwrap();
    for (i, mut m) in mutations(&raw, 3000, &mut rng).into_iter().enumerate() {
        if i % 2 == 0 && m.len() > shoff + 64 {
            let p = if i % 4 == 0 {
                rng.index(64)
            } else {
                shoff + rng.index(m.len() - shoff)
            };
            m[p] = rng.next().to_le_bytes()[0];
        }
        let _ = g.check("crc16", "crc16.ko", &m);
        let _ = validator::formats::kmod::modinfo::parse_elf(&m);
        let _ = validator::formats::kmod::modinfo::exports(&m);
        let _ = validator::formats::kmod::sig::split(&m);
    }
    let xz = std::fs::read(kernel_file("k612", "/crc16.ko.xz")).unwrap();
    for m in mutations(&xz, 300, &mut rng) {
        let _ = validator::formats::kmod::modinfo::decompress(
            &m,
            validator::formats::kmod::modinfo::Compression::Xz,
        );
    }
}

#[test]
fn pkcs7_and_certificates() {
    let mut rng = Rng(3);
    let raw = std::fs::read(kernel_file("default", "/crc16.ko")).unwrap();
    let p7 = validator::formats::kmod::sig::split(&raw)
        .unwrap()
        .pkcs7
        .to_vec();
    for m in mutations(&p7, 4000, &mut rng) {
        let _ = validator::formats::pkcs7::parse(&m);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kernels/default/boot");
    let vmlinuz = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("vmlinuz-")
        })
        .unwrap();
    let img = std::fs::read(&vmlinuz).unwrap();
    let facts = validator::formats::vmlinuz::KernelFacts::from_image(&img).unwrap();
    for m in mutations(&facts.certs[0], 3000, &mut rng) {
        let _ = validator::trust::Cert::from_der(&m, "m");
    }
    // bzImage headers: mutate the setup header of a truncated image (fast error paths).
    let head = img[..64 * 1024].to_vec();
    for m in mutations(&head, 2000, &mut rng) {
        let _ = validator::formats::vmlinuz::vmlinux(&m);
        let _ = validator::formats::vmlinuz::builtin_certs(&m);
        let _ = validator::formats::vmlinuz::exported_crcs(&m);
        let _ = validator::formats::vmlinuz::release(&m);
    }
}

#[test]
fn verity_signature_json_index_files_and_random_bytes() {
    let mut rng = Rng(4);
    let json = br#"{"rootHash":"7f2a84461b51447d6b4cf73858361503c1904bed5dffecc516211eeec089990a","certificateFingerprint":"3f778caa36b90cc85732ae3d6f1b09a51fd475ddb13c6ec7667385d2cb1447f3","signature":"MIIBdgYJKoZIhvcNAQcCoIIBZzCCAWMCAQExDTALBglghkgBZQMEAgEwCwYJKoZIhvcNAQcB"}"#;
    for m in mutations(json, 3000, &mut rng) {
        if let Ok(s) = validator::formats::verity::sig::parse(&m) {
            let _ = validator::trust::rootsig::verify(&s, &validator::trust::TrustStore::new());
        }
    }
    let dep = b"kernel/fs/ext4/ext4.ko: kernel/fs/jbd2/jbd2.ko kernel/lib/crc16.ko\nkernel/lib/crc16.ko:\n";
    let soft = b"softdep ext4 pre: crc32c post: x\n";
    for m in mutations(dep, 2000, &mut rng) {
        let _ = validator::formats::kmod::index::parse_dep(
            &String::from_utf8_lossy(&m),
            Path::new("d"),
        );
    }
    for m in mutations(soft, 2000, &mut rng) {
        let _ = validator::formats::kmod::index::parse_softdep(
            &String::from_utf8_lossy(&m),
            Path::new("s"),
        );
    }
    for _ in 0..3000 {
        let n = rng.index(700);
        let b = rng.bytes(n);
        let _ = validator::formats::pe::parse(&b);
        let _ = validator::formats::efisiglist::parse(&b);
        let _ = validator::formats::pkcs7::parse_authenticode(&b);
        let _ = validator::formats::pe::indirect_digest(&b);
        let _ = validator::formats::verity::superblock::parse(&b);
        let _ = validator::formats::gpt::parse_header(&b);
        let _ = validator::formats::tpm::eventlog::EventLog::parse(&b);
        let _ = validator::formats::tpm::cel::parse(&b);
        let _ = validator::formats::pkcs7::parse(&b);
        let _ = validator::formats::kmod::modinfo::parse_elf(&b);
        let _ = validator::formats::compress::lz4_legacy(&b, 1 << 20);
        let _ = validator::formats::compress::zstd(&b, 1 << 20);
        let _ = validator::formats::compress::gzip(&b, 1 << 20);
    }
}

/// PE images and their Authenticode signatures: mutations of Debian's signed GRUB
/// (parsed, hashed and verified against an empty store, which never passes) and of its
/// signature (parsed as Authenticode PKCS#7, its content read).
#[test]
fn pe_images_and_authenticode_signatures() {
    let mut rng = Rng(11);
    let grub = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/secureboot/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed"),
    )
    .unwrap();
    let pe = validator::formats::pe::parse(&grub).unwrap();
    let sig = grub[pe.signatures[0].der.clone()].to_vec();
    let store = validator::trust::TrustStore::new();
    for m in mutations(&grub[..4096], 3000, &mut rng) {
        let mut image = m;
        image.extend_from_slice(&grub[4096.min(grub.len())..]);
        if let Ok(p) = validator::formats::pe::parse(&image) {
            let _ = p.digest(
                &image,
                validator::formats::pkcs7::HashAlg::Sha1,
                validator::formats::pe::SectionOrder::Kernel,
            );
        }
    }
    for m in mutations(&grub, 40, &mut rng) {
        let r = validator::trust::authenticode::verify(
            &m,
            &store,
            &[],
            validator::trust::authenticode::Rule::Firmware,
        );
        assert!(r.is_err(), "verified against an empty store");
    }
    for m in mutations(&sig, 3000, &mut rng) {
        if let Ok((_, content)) = validator::formats::pkcs7::parse_authenticode(&m) {
            let _ = validator::formats::pe::indirect_digest(&content);
        }
    }
}

#[test]
fn sysfs_values() {
    // Every sysfs/procfs/dpkg parser the preflight uses, over mutations of the real
    // values of the fixture node (tests/fixtures/hw/good).
    use validator::formats::sysfs;
    let mut rng = Rng(7);
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hw/good");
    let read = |rel: &str| std::fs::read(good.join(rel)).unwrap();
    let gpu = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0";
    let port = "sys/class/infiniband/mlx5_0/ports/1";
    let seeds: Vec<(Vec<u8>, &str)> = vec![
        (read(&format!("{gpu}/vendor")), "id"),
        (read(&format!("{gpu}/class")), "class"),
        (read(&format!("{gpu}/current_link_speed")), "speed"),
        (b"32 GT/s\n".to_vec(), "speed"),
        (read(&format!("{gpu}/current_link_width")), "width"),
        (read(&format!("{gpu}/aer_dev_correctable")), "aer"),
        (read(&format!("{gpu}/aer_dev_fatal")), "aer"),
        (read(&format!("{port}/state")), "ib"),
        (read(&format!("{port}/rate")), "rate"),
        (read("sys/class/nvme/nvme0/model"), "padded"),
        (read("proc/driver/nvidia/version"), "version"),
        (
            read("proc/driver/nvidia/gpus/0000:1b:00.0/information"),
            "gpu",
        ),
        (
            read("proc/driver/nvidia-nvswitch/devices/0000:07:00.0/information"),
            "switch",
        ),
        (read("sys/kernel/security/lockdown"), "lockdown"),
        (read("sys/module/nvidia/taint"), "taint"),
        (read("root/var/lib/dpkg/status"), "dpkg"),
        (
            read("sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"),
            "efi",
        ),
    ];
    for (seed, kind) in seeds {
        for m in mutations(&seed, 1500, &mut rng) {
            if kind == "efi" {
                let _ = sysfs::efi_bool(&m);
                continue;
            }
            let t = String::from_utf8_lossy(&m);
            let _ = match kind {
                "id" => sysfs::pci_id(&t).map(|_| ()),
                "class" => sysfs::pci_class(&t).map(|_| ()),
                "speed" => sysfs::link_speed(&t).map(|_| ()),
                "width" => sysfs::link_width(&t).map(|_| ()),
                "aer" => sysfs::aer_counters(&t).map(|_| ()),
                "ib" => sysfs::ib_enum(&t).map(|_| ()),
                "rate" => sysfs::ib_rate(&t).map(|_| ()),
                "padded" => sysfs::padded(&t, "a model").map(|_| ()),
                "version" => sysfs::nvidia_version(&t).map(|_| ()),
                "gpu" => sysfs::gpu_information(&t).map(|_| ()),
                "switch" => sysfs::nvswitch_information(&t).map(|_| ()),
                "lockdown" => sysfs::lockdown(&t).map(|_| ()),
                "taint" => sysfs::module_taint(&t).map(|_| ()),
                _ => sysfs::dpkg_status(&t).map(|_| ()),
            };
        }
    }
}

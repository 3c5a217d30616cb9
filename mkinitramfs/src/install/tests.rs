//! The plan, the grubenv and the checks of a slot directory, without writing a disk (the
//! install itself, onto image files and a loop device: `tests/install.rs`).

use std::path::{Path, PathBuf};

use super::*;

fn scratch(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../target/test-tmp/install-unit-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A slot directory's image files (only what the plan reads: their sizes).
fn slot_dir(d: &Path, slot: char, root_hash: &str, root_len: u64) -> SlotDir {
    std::fs::create_dir_all(d).unwrap();
    for (name, len) in [
        ("root.img", root_len),
        ("root.verity", 8192),
        ("root.verity-sig", 900),
    ] {
        let f = std::fs::File::create(d.join(name)).unwrap();
        f.set_len(len).unwrap();
    }
    let digests = ["root.img", "root.verity", "root.verity-sig"]
        .iter()
        .map(|n| (n.to_string(), file_digest(&d.join(n)).unwrap().0))
        .collect();
    SlotDir {
        dir: d.to_path_buf(),
        slot,
        root_hash: root_hash.into(),
        digests,
    }
}

const HASH_A: &str = "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210";
const HASH_B: &str = "ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef";

#[test]
fn plan_is_the_documented_layout_aligned_and_named_by_the_root_hashes() {
    let d = scratch("plan");
    let a = slot_dir(&d.join("a"), 'A', HASH_A, 3 * MIB + 5);
    let b = slot_dir(&d.join("b"), 'B', HASH_B, 2 * MIB);
    let mut spec = InstallSpec::new(&d.join("disk.img"), vec![]);
    spec.esp_mib = 64;
    let p = plan::plan(&spec, &[a.clone(), b.clone()]).unwrap();
    let names: Vec<_> = p.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "esp",
            "root-A",
            "root-A-verity",
            "root-A-sig",
            "root-B",
            "root-B-verity",
            "root-B-sig"
        ]
    );
    let mut next = MIB;
    for (i, part) in p.parts.iter().enumerate() {
        assert_eq!(part.number as usize, i + 1);
        assert_eq!(part.start, next, "{} follows the one before it", part.name);
        assert_eq!(part.start % MIB, 0);
        assert_eq!(part.size % MIB, 0);
        next = part.start + part.size;
    }
    assert_eq!(p.total, next + MIB, "the last MiB holds the backup GPT");
    // The root partition holds the larger image: 4 MiB for 3 MiB and 5 bytes.
    let size = |n: &str| p.parts.iter().find(|x| x.name == n).unwrap().size;
    assert_eq!(size("esp"), 64 * MIB);
    assert_eq!(size("root-A"), 4 * MIB);
    assert_eq!(size("root-B"), 4 * MIB);
    assert_eq!(size("root-A-verity"), MIB);
    assert_eq!(size("root-A-sig"), MIB);
    // systemd's rule (and the gate's): the root's PARTUUID is the first half of the
    // root hash, the hash partition's the second.
    let uuid = |n: &str| p.parts.iter().find(|x| x.name == n).unwrap().uuid.clone();
    assert_eq!(uuid("root-A"), "00112233-4455-6677-8899-aabbccddeeff");
    assert_eq!(
        uuid("root-A-verity"),
        "01234567-89ab-cdef-fedc-ba9876543210"
    );
    assert_eq!(uuid("root-B"), "ffeeddcc-bbaa-9988-7766-554433221100");
    // Every GUID differs, and the same inputs give the same table.
    let mut all: Vec<_> = p.parts.iter().map(|x| x.uuid.clone()).collect();
    all.push(p.disk_guid.clone());
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 8);
    assert_eq!(plan::plan(&spec, &[a.clone(), b]).unwrap(), p);
    // Another root hash, another disk GUID.
    let other = slot_dir(&d.join("c"), 'B', HASH_A, MIB);
    assert_ne!(
        plan::plan(&spec, &[a, other]).unwrap().disk_guid,
        p.disk_guid
    );
    let script = p.sfdisk_script(512);
    assert!(script.starts_with("label: gpt\nlabel-id: "));
    assert!(script
        .contains("start=2048, size=131072, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid="));
}

#[test]
fn one_slot_gets_both_slots_partitions_and_content_in_its_own_only() {
    let d = scratch("one");
    let b = slot_dir(&d.join("b"), 'B', HASH_B, MIB);
    let mut spec = InstallSpec::new(&d.join("disk.img"), vec![]);
    spec.esp_mib = 64;
    spec.root_mib = Some(10);
    let p = plan::plan(&spec, &[b]).unwrap();
    assert_eq!(p.parts.len(), 7);
    for part in &p.parts {
        assert_eq!(
            part.content.is_some(),
            part.name.starts_with("root-B"),
            "{}",
            part.name
        );
    }
    // A full 10 MiB root's tree: 2560 data blocks, 20 + 1 tree blocks and the superblock;
    // 4 GiB: 8192 + 64 + 1 and the superblock, 33 MiB.
    assert_eq!(plan::tree_mib(10), 1);
    assert_eq!(plan::tree_mib(4096), 33);
}

#[test]
fn sizes_that_do_not_fit_are_refused_by_flag() {
    let d = scratch("sizes");
    let a = slot_dir(&d.join("a"), 'A', HASH_A, 5 * MIB);
    let mut spec = InstallSpec::new(&d.join("disk.img"), vec![]);
    for (esp, root, verity, want) in [
        (
            63,
            None,
            None,
            "--esp-size 63 MiB: FAT32 needs at least 64 MiB",
        ),
        (
            64,
            Some(4),
            None,
            "--root-size 4 MiB: a slot's image needs 5 MiB",
        ),
        (64, Some(0), None, "--root-size 0 MiB: not between 1 and"),
        (
            64,
            Some(u64::MAX),
            None,
            "--root-size 18446744073709551615 MiB: not between",
        ),
        (
            u64::MAX,
            None,
            None,
            "--esp-size 18446744073709551615 MiB: not between",
        ),
        (64, None, Some(0), "--verity-size 0 MiB"),
    ] {
        spec.esp_mib = esp;
        spec.root_mib = root;
        spec.verity_mib = verity;
        let e = plan::plan(&spec, std::slice::from_ref(&a))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    }
    // A signature larger than its 1 MiB partition.
    std::fs::File::create(d.join("a/root.verity-sig"))
        .unwrap()
        .set_len(MIB + 1)
        .unwrap();
    spec.esp_mib = 64;
    spec.root_mib = None;
    spec.verity_mib = None;
    let e = plan::plan(&spec, &[a]).unwrap_err().to_string();
    assert!(
        e.contains("root.verity-sig: 1048577 bytes: larger than partition root-A-sig"),
        "{e}"
    );
}

#[test]
fn grubenv_is_the_block_grub_editenv_writes() {
    let d = scratch("grubenv");
    let f = d.join("grubenv");
    let ok = std::process::Command::new("grub-editenv")
        .arg(&f)
        .arg("create")
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = std::process::Command::new("grub-editenv")
        .arg(&f)
        .args(["set", "ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=0", "B_TRY=0"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let a = SlotDir {
        dir: d.clone(),
        slot: 'A',
        root_hash: HASH_A.into(),
        digests: Default::default(),
    };
    let ours = esp::grubenv_bytes(&initial_grubenv(&[a])).unwrap();
    assert_eq!(ours.len(), 1024);
    assert_eq!(ours, std::fs::read(&f).unwrap());
}

#[test]
fn node_cfg_quotes_for_grub_and_refuses_a_line_break() {
    assert_eq!(
        esp::grub_quote(r#"a "b" $c \d"#).unwrap(),
        r#""a \"b\" \$c \\d""#
    );
    assert!(esp::grub_quote("a\nb").is_none());
    let e = esp::node_cfg("console=ttyS0\ninit=/bin/sh")
        .unwrap_err()
        .to_string();
    assert!(e.contains("a line break cannot go into node.cfg"), "{e}");
    let cfg = String::from_utf8(esp::node_cfg(" console=ttyS0 ").unwrap()).unwrap();
    assert!(cfg.ends_with("set CMDLINE=\"console=ttyS0\"\n"), "{cfg}");
}

#[test]
fn sha256sums_lines_that_are_not_sums_are_refused_by_line() {
    let d = scratch("sums");
    let f = d.join("SHA256SUMS");
    for (text, want) in [
        ("zz  root.img\n", "line 1: not"),
        (&format!("{HASH_A}  a\n{HASH_A} b\n"), "line 2: not"),
        (&format!("{}  a\n", &HASH_A[..62]), "line 1: not"),
    ] {
        std::fs::write(&f, text).unwrap();
        let e = parse_sums(&f).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
    std::fs::write(&f, format!("{HASH_A}  esp/A/vmlinuz\n")).unwrap();
    assert_eq!(parse_sums(&f).unwrap().len(), 1);
}

#[test]
fn the_esp_cluster_size_leaves_fat32_its_clusters() {
    assert_eq!(esp::cluster_size(64 * MIB, 512), Some(512));
    assert_eq!(esp::cluster_size(200 * MIB, 512), Some(2048));
    assert_eq!(esp::cluster_size(512 * MIB, 512), Some(4096));
    assert_eq!(esp::cluster_size(512 * MIB, 4096), Some(4096));
    assert_eq!(esp::cluster_size(64 * MIB, 4096), None);
    assert_eq!(esp::cluster_size(64 * MIB, 0), None);
}

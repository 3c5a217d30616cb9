//! `mkinitramfs install`: two slots made by `mkinitramfs slot` (the real Debian kernel,
//! RSA-signed root hashes) onto a new disk image, judged by Debian's tools: `sfdisk --dump`
//! is the table docs/INSTALL.md shows, `veritysetup verify` accepts each root with its
//! hash partition and the root hash its PARTUUIDs spell, `grub-editenv list` reads the
//! grubenv, mtools reads back every ESP file and `fsck.vfat` finds the ESP clean; then onto
//! a loop device, whose partitions the kernel reads and which is refused while one is
//! mounted. Hostile disks and slot directories are refused by name with nothing written.
//! (The boot of a disk this command writes is QEMU scenario `real-node`.)
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

use test_support::workspace;

fn scratch(tag: &str) -> PathBuf {
    test_support::tmpdir(&format!("install-{tag}"))
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The BOM of both slots: GRUB, signed root hashes found by PARTLABEL.
fn bom(release: &str) -> String {
    format!(
        "schema = 1\nimage_id = \"install-test\"\n\n[kernel]\nrelease = \"{release}\"\n\n\
         [modules]\nload = [\"virtio_blk\", \"dm_verity\", \"erofs\", \"vfat\", \"nls_cp437\", \"nls_ascii\"]\n\n[verity]\n\
         source = \"signature\"\ncritical = [\"/sbin/init\"]\n\n[policy]\n\
         trust = [\"cert.pem\"]\n\n[slot]\nbootloader = \"grub\"\n\
         verity_sig = \"PARTLABEL=root-{{slot}}-sig\"\n"
    )
}

/// Slot directories `a` and `b` (different roots, so different root hashes) in `d`.
fn slots(d: &Path) {
    test_support::keys::rsa(&d.join("key.pem"), &d.join("cert.pem"), "fleet");
    let kernel = workspace().join("target/kernels/default");
    let tree = mkinitramfs::closure::KernelTree::open(&kernel).unwrap();
    std::fs::write(d.join("bom.toml"), bom(&tree.release)).unwrap();
    std::fs::write(d.join("init"), b"\x7fELF stand-in").unwrap();
    for slot in ["A", "B"] {
        let root = d.join(format!("root-{slot}"));
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::create_dir_all(root.join("sbin")).unwrap();
        std::fs::write(root.join("etc/hostname"), format!("node-{slot}\n")).unwrap();
        std::fs::write(root.join("sbin/init"), "#!/bin/sh\n").unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"))
            .current_dir(d)
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .args(["slot", "--root"])
            .arg(&root)
            .args(["--bom", "bom.toml", "--init", "init", "--key", "key.pem"])
            .args(["--cert", "cert.pem", "--slot", slot, "-o"])
            .arg(slot.to_lowercase())
            .arg("--kernel")
            .arg(&kernel)
            .output()
            .unwrap();
        ok(&o, "mkinitramfs slot");
    }
}

/// `mkinitramfs install` of slot directories `a` and `b` under `d` onto `disk`, with the
/// test bed's copies of Debian's signed shim and GRUB.
fn install(d: &Path, disk: &Path, slot_dirs: &[&str], more: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mkinitramfs"));
    c.current_dir(d).arg("install").arg("--disk").arg(disk);
    for s in slot_dirs {
        c.arg("--slot").arg(s);
    }
    c.args(more);
    let lib = workspace().join("target/secureboot/usr/lib");
    for (flag, value) in [
        ("--shim", lib.join("shim/shimx64.efi.signed")),
        (
            "--grub",
            lib.join("grub/x86_64-efi-signed/grubx64.efi.signed"),
        ),
        ("--esp-size", "64".into()),
        ("--cmdline", "console=ttyS0,115200 panic=-1".into()),
    ] {
        if !more.contains(&flag) {
            c.arg(flag).arg(value);
        }
    }
    c.output().unwrap()
}

fn refused(o: &Output, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(want), "expected {want:?} in {err:?}");
}

fn digest(p: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(p).unwrap()).to_vec()
}

/// Copies `sectors` 512-byte sectors of `disk` from `start_sector` into `out`.
fn partition(disk: &Path, start_sector: u64, sectors: u64, out: &Path) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(disk).unwrap();
    let mut buf = vec![0u8; usize::try_from(sectors * 512).unwrap()];
    f.read_exact_at(&mut buf, start_sector * 512).unwrap();
    std::fs::write(out, buf).unwrap();
}

/// The sizes docs/INSTALL.md's example gives.
const DOC_SIZES: [&str; 6] = [
    "--esp-size",
    "512",
    "--root-size",
    "8192",
    "--verity-size",
    "128",
];

#[test]
fn two_slots_onto_a_new_image_as_debians_tools_read_it() {
    let d = scratch("image");
    slots(&d);
    let disk = d.join("disk.img");
    let o = install(&d, &disk, &["a", "b"], &DOC_SIZES);
    let stdout = ok(&o, "mkinitramfs install");
    assert!(
        stdout.contains("boot entry: efibootmgr --create --disk"),
        "{stdout}"
    );
    let hashes: Vec<(String, String)> = ["A", "B"]
        .iter()
        .map(|s| {
            let h =
                std::fs::read_to_string(d.join(s.to_lowercase()).join("root.roothash")).unwrap();
            (s.to_string(), h.trim().to_string())
        })
        .collect();
    assert_eq!(
        test_support::install::dump(&disk, &hashes),
        test_support::install::documented_table(),
        "docs/INSTALL.md's table"
    );
    // Sparse: two small slots in 8 GiB partitions take a few MiB of the image.
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&disk).unwrap();
    assert_eq!(m.len(), (1 + 512 + 2 * (8192 + 128 + 1) + 1) << 20);
    assert!(
        m.blocks() * 512 < 200 << 20,
        "{} of {}",
        m.blocks() * 512,
        m.len()
    );

    // Each root verifies against its hash partition with the root hash its PARTUUIDs spell.
    let table = validator::sys::read_gpt(&disk, 512).unwrap();
    for (slot, h) in &hashes {
        let part = |n: &str| {
            table
                .partitions
                .iter()
                .find(|p| p.name == n)
                .unwrap()
                .clone()
        };
        let (root, hash) = (
            part(&format!("root-{slot}")),
            part(&format!("root-{slot}-verity")),
        );
        assert_eq!(
            format!("{}{}", root.unique_guid, hash.unique_guid).replace('-', ""),
            *h
        );
        // As much of each partition as its image fills (the rest of an 8 GiB partition is
        // never read by dm-verity: the tree names the data blocks).
        let (rf, hf) = (d.join("root.part"), d.join("hash.part"));
        let sectors = |f: &str| {
            std::fs::metadata(d.join(slot.to_lowercase()).join(f))
                .unwrap()
                .len()
                .div_ceil(512)
        };
        partition(&disk, root.first_lba, sectors("root.img"), &rf);
        partition(&disk, hash.first_lba, sectors("root.verity"), &hf);
        let st = Command::new("veritysetup")
            .arg("verify")
            .args([&rf, &hf])
            .arg(h)
            .output()
            .unwrap();
        ok(&st, &format!("veritysetup verify of slot {slot}"));
        // One flipped byte of the root and veritysetup refuses it.
        let mut raw = std::fs::read(&rf).unwrap();
        raw[1100] ^= 1;
        std::fs::write(&rf, raw).unwrap();
        let st = Command::new("veritysetup")
            .arg("verify")
            .args([&rf, &hf])
            .arg(h)
            .output()
            .unwrap();
        assert!(!st.status.success(), "veritysetup accepted a flipped root");
    }

    // The ESP: clean for fsck.vfat, every file as its source, the grubenv as grub-editenv
    // lists it.
    let esp = table.partitions.iter().find(|p| p.name == "esp").unwrap();
    let espf = d.join("esp.part");
    partition(
        &disk,
        esp.first_lba,
        esp.last_lba + 1 - esp.first_lba,
        &espf,
    );
    ok(
        &Command::new("fsck.vfat")
            .arg("-n")
            .arg(&espf)
            .output()
            .unwrap(),
        "fsck.vfat -n",
    );
    let mcopy = |path: &str| {
        let o = Command::new("mcopy")
            .env("MTOOLS_SKIP_CHECK", "1")
            .arg("-i")
            .arg(&espf)
            .arg(format!("::{path}"))
            .arg("-")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    };
    for (path, src) in [
        (
            "/EFI/BOOT/BOOTX64.EFI",
            "target/secureboot/usr/lib/shim/shimx64.efi.signed",
        ),
        (
            "/EFI/BOOT/grubx64.efi",
            "target/secureboot/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed",
        ),
        ("/EFI/BOOT/grub.cfg", "examples/grub/grub.cfg"),
    ] {
        assert_eq!(
            mcopy(path),
            std::fs::read(workspace().join(src)).unwrap(),
            "{path}"
        );
    }
    for s in ["A", "B"] {
        for f in ["vmlinuz", "initrd.img"] {
            let want =
                std::fs::read(d.join(s.to_lowercase()).join(format!("esp/{s}/{f}"))).unwrap();
            assert_eq!(mcopy(&format!("/{s}/{f}")), want, "/{s}/{f}");
        }
    }
    assert_eq!(
        String::from_utf8(mcopy("/EFI/BOOT/node.cfg")).unwrap(),
        "# The kernel command line of both slots (sourced by grub.cfg).\n\
         set CMDLINE=\"console=ttyS0,115200 panic=-1\"\n"
    );
    let env = d.join("grubenv");
    std::fs::write(&env, mcopy("/EFI/BOOT/grubenv")).unwrap();
    let listed = ok(
        &Command::new("grub-editenv")
            .arg(&env)
            .arg("list")
            .output()
            .unwrap(),
        "grub-editenv list",
    );
    assert_eq!(listed, "ORDER=A B\nA_OK=1\nA_TRY=0\nB_OK=1\nB_TRY=0\n");

    // The same inputs, the same bytes; a disk with a table is refused without --force and
    // left as it was; with --force it is rewritten to the same bytes (a small disk: the
    // whole image is compared).
    let disk = d.join("small.img");
    ok(&install(&d, &disk, &["a", "b"], &[]), "small install");
    let again = d.join("again.img");
    ok(&install(&d, &again, &["b", "a"], &[]), "second install");
    assert_eq!(digest(&again), digest(&disk));
    let before = digest(&disk);
    refused(
        &install(&d, &disk, &["a", "b"], &[]),
        "holds a partition table (GPT); give --force to replace it (nothing was written)",
    );
    assert_eq!(digest(&disk), before);
    ok(
        &install(&d, &disk, &["a", "b"], &["--force"]),
        "install --force",
    );
    assert_eq!(digest(&disk), before);
}

#[test]
fn hostile_disks_and_slot_directories_are_refused_by_name_with_nothing_written() {
    let d = scratch("hostile");
    slots(&d);
    let disk = d.join("disk.img");
    let nothing = |d: &Path| {
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("disk.img"))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    };
    // Disks that are no disk.
    std::fs::create_dir(d.join("dir")).unwrap();
    refused(
        &install(&d, &d.join("dir"), &["a"], &[]),
        "dir: is a directory",
    );
    nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    refused(
        &install(&d, &d.join("fifo"), &["a"], &[]),
        "fifo: is a FIFO",
    );
    refused(
        &install(&d, Path::new("/dev/null"), &["a"], &[]),
        "/dev/null: is a character device",
    );
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
    refused(
        &install(&d, &d.join("dangling"), &["a"], &[]),
        "dangling: is a symbolic link to nothing",
    );
    refused(
        &install(&d, &d.join("no/such/dir/disk.img"), &["a"], &[]),
        "no/such/dir",
    );
    // An image with an MBR partition (a disk someone uses) is refused.
    let mbr = d.join("mbr.img");
    std::fs::File::create(&mbr)
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    let mut c = Command::new("sfdisk");
    c.arg("--quiet")
        .arg(&mbr)
        .stdin(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"label: dos\nstart=2048, type=83\n")
        .unwrap();
    assert!(child.wait().unwrap().success());
    refused(
        &install(&d, &mbr, &["a"], &[]),
        "holds a partition table (MBR)",
    );

    // Slot directories that are not what install needs.
    refused(
        &install(&d, &disk, &["a", "a"], &[]),
        "a second directory for slot A",
    );
    std::fs::create_dir(d.join("empty")).unwrap();
    refused(
        &install(&d, &disk, &["empty"], &[]),
        "holds neither esp/A nor esp/B",
    );
    refused(
        &install(&d, &disk, &["bom.toml"], &[]),
        "bom.toml: not a directory",
    );
    refused(
        &install(&d, &disk, &["a"], &["--esp-size", "8"]),
        "FAT32 needs at least 64 MiB",
    );
    refused(
        &install(&d, &disk, &["a"], &["--root-size", "0"]),
        "--root-size 0 MiB: not between 1 and 16777216 MiB",
    );
    refused(
        &install(&d, &disk, &["a"], &["--cmdline", "ro\ninit=/bin/sh"]),
        "a line break cannot go into node.cfg",
    );
    nothing(&d);
    // A damaged image: one flipped byte of a copy of slot A's root.
    let copy = |name: &str| {
        let to = d.join(name);
        let st = Command::new("cp")
            .arg("-a")
            .arg(d.join("a"))
            .arg(&to)
            .status()
            .unwrap();
        assert!(st.success());
        to
    };
    let bad = copy("bad");
    let mut raw = std::fs::read(bad.join("root.img")).unwrap();
    raw[100] ^= 1;
    std::fs::write(bad.join("root.img"), raw).unwrap();
    refused(
        &install(&d, &disk, &["bad"], &[]),
        "bad/root.img: does not match its SHA-256 in SHA256SUMS",
    );
    // A missing initramfs; a SHA256SUMS that does not list it.
    let gone = copy("gone");
    std::fs::remove_file(gone.join("esp/A/initrd.img")).unwrap();
    refused(&install(&d, &disk, &["gone"], &[]), "esp/A/initrd.img");
    let sums = std::fs::read_to_string(gone.join("SHA256SUMS")).unwrap();
    let kept: String = sums
        .lines()
        .filter(|l| !l.contains("initrd"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(gone.join("SHA256SUMS"), kept).unwrap();
    refused(
        &install(&d, &disk, &["gone"], &[]),
        "SHA256SUMS: does not list esp/A/initrd.img",
    );
    // A BOM this layout does not serve (systemd-boot), its sum updated as an operator
    // who edited it would.
    let sdb = copy("sdb");
    let text = std::fs::read_to_string(sdb.join("bom.toml")).unwrap();
    let edited = text.replace("bootloader = \"grub\"", "bootloader = \"systemd-boot\"");
    assert_ne!(edited, text);
    std::fs::write(sdb.join("bom.toml"), &edited).unwrap();
    let old = hex(&Sha256::digest(text.as_bytes()));
    let new = hex(&Sha256::digest(edited.as_bytes()));
    let sums = std::fs::read_to_string(sdb.join("SHA256SUMS"))
        .unwrap()
        .replace(&old, &new);
    std::fs::write(sdb.join("SHA256SUMS"), sums).unwrap();
    refused(
        &install(&d, &disk, &["sdb"], &[]),
        "bom.toml: [slot] bootloader is not \"grub\"",
    );
    // A missing shim.
    refused(
        &install(&d, &disk, &["a"], &["--shim", "/nonexistent/shim.efi"]),
        "/nonexistent/shim.efi",
    );
    nothing(&d);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A loop device over an image: install writes a block device as it writes an image (the
/// same table and files, read back through the device), refuses one that is too small
/// before it writes, and refuses one held exclusively, as a mount or device-mapper holds
/// it (the kernel's answer to install's exclusive open). (The kernel reading the table is the QEMU real node's: this host's
/// kernel reads no GPT.)
#[test]
fn onto_a_loop_device_as_onto_an_image_and_a_held_disk_is_refused() {
    let d = scratch("loop");
    slots(&d);
    let img = d.join("loop.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(200 << 20)
        .unwrap();
    let o = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&img)
        .output()
        .unwrap();
    let dev = ok(&o, "losetup").trim().to_string();
    let result = std::panic::catch_unwind(|| {
        ok(
            &install(&d, Path::new(&dev), &["a", "b"], &[]),
            "install onto a loop device",
        );
        let file = d.join("file.img");
        ok(
            &install(&d, &file, &["a", "b"], &[]),
            "install onto an image",
        );
        // The same partitions (the backup GPT sits at each disk's end) and the same bytes
        // up to the last partition's end.
        let parts = |disk: &Path| {
            let o = Command::new("sfdisk")
                .arg("--dump")
                .arg(disk)
                .output()
                .unwrap();
            ok(&o, "sfdisk --dump")
                .lines()
                .filter_map(|l| l.split_once(" : ").map(|(_, r)| r.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(parts(Path::new(&dev)), parts(&file));
        let end = 71 << 20;
        let head = |p: &Path| {
            use std::os::unix::fs::FileExt;
            let mut b = vec![0u8; end];
            std::fs::File::open(p)
                .unwrap()
                .read_exact_at(&mut b, 0)
                .unwrap();
            // The protective MBR's size, and the primary header's CRC, backup and last
            // usable LBA, differ with the disk's size.
            b[446..1024].fill(0);
            Sha256::digest(&b).to_vec()
        };
        assert_eq!(head(&img), head(&file));
        // A 200 MiB disk is too small for a 512 MiB ESP: refused before anything is written.
        let before = head(&img);
        let o = install(
            &d,
            Path::new(&dev),
            &["a"],
            &["--force", "--esp-size", "512"],
        );
        refused(
            &o,
            "200 MiB: the install needs 520 MiB (nothing was written)",
        );
        assert_eq!(head(&img), before);
        // Held (as a mount, device-mapper or RAID holds it: an exclusive open, here this
        // test's): the kernel refuses install's exclusive open.
        use std::os::unix::fs::OpenOptionsExt;
        let held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_EXCL)
            .open(&dev)
            .unwrap();
        let o = install(&d, Path::new(&dev), &["a", "b"], &["--force"]);
        refused(
            &o,
            "is in use (held exclusively: mounted, or by device-mapper, RAID or another install)",
        );
        drop(held);
        assert_eq!(head(&img), before);
    });
    let _ = Command::new("losetup").arg("-d").arg(&dev).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

//! The module options the init gives, judged by Debian's `modprobe` (kmod 30): for the
//! same `modprobe.d` files and kernel command line, `modprobe --showconfig` lists the same
//! `options` and `blacklist` entries in the same order as
//! `validator::runtime::modload::read_config` reads, and `modprobe --show-depends` gives
//! each module of the real Debian kernel the same option string the loader hands
//! `init_module` (less the separator space modprobe appends for options of its own
//! command line, which the kernel skips). `modprobe` reads fixed paths (`/etc/modprobe.d`, `/lib/modprobe.d`,
//! `/proc/cmdline`), so it runs in a mount namespace of its own (`unshare -m`) with the
//! test's files bind-mounted over them; the host's are untouched. Needs root, as the
//! suite does.

#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap as the tests do"
)]

use test_support as common;

use std::path::Path;
use std::process::Command;

use validator::runtime::modload::read_config;

const ETC: &[(&str, &str)] = &[
    // Hides /lib's file of the same name.
    ("gpu.conf", "options nvidia NVreg_EnableGpuFirmware=0\n"),
    (
        "nic.conf",
        "# the fabric\n\
         options\tmlx5-core prof_sel=2\tprobe_vf=0\n\
         options virtio_blk queue_depth=64 \\\n  num_request_queues=2\n\
         blacklist nouveau\n\
         options ext4\n\
         frobnicate x\n\
         options jbd2  \n",
    ),
    ("notes.txt", "options virtio_blk ignored=1\n"),
    (".hidden.conf", "options virtio_blk ignored=2\n"),
];
const LIB: &[(&str, &str)] = &[
    ("gpu.conf", "options nvidia hidden=1\n"),
    // /etc has a directory of this name: left out, so this file is read.
    (
        "dir.conf",
        "options virtio_ring from_lib=1\noptions mbcache a=1\0junk=2\n",
    ),
    (
        "00-first.conf",
        "options virtio_blk poll_queues=1\nblacklist bochs\n",
    ),
    ("zz.alias", "options virtio_ring zz=1\n"),
];
const CMDLINE: &str = "BOOT_IMAGE=/A/vmlinuz-6.1.0-57-amd64 root=PARTLABEL=root-a ro \
                       virtio_blk.queue_depth=128 nvidia.NVreg_X=\"a b\" \
                       \"mbcache.dyndbg=file x.c +p\" a.b.c=1 jbd2.flag \
                       modprobe.blacklist=floppy,nvidia-drm quiet\n";

fn fill(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// `modprobe ARGS` with `root`'s modprobe.d directories and `cmdline` in place of the
/// host's.
fn modprobe(root: &Path, cmdline: &Path, args: &str) -> String {
    let script = format!(
        "mount --bind {etc} /etc/modprobe.d && mount --bind {lib} /lib/modprobe.d && \
         mount --bind {cmd} /proc/cmdline && modprobe {args}",
        etc = root.join("etc/modprobe.d").display(),
        lib = root.join("lib/modprobe.d").display(),
        cmd = cmdline.display(),
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "modprobe {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn options_and_blacklist_are_modprobes() {
    let root = common::tmpdir("modprobe-kmod");
    fill(&root.join("etc/modprobe.d"), ETC);
    fill(&root.join("lib/modprobe.d"), LIB);
    std::fs::create_dir(root.join("etc/modprobe.d/dir.conf")).unwrap();
    let cmdline = root.join("cmdline");
    std::fs::write(&cmdline, CMDLINE).unwrap();
    let ours = read_config(&root, Some(CMDLINE.as_bytes())).unwrap();

    // The whole configuration, in order.
    let shown = modprobe(&root, &cmdline, "--showconfig");
    let theirs: Vec<&str> = shown
        .lines()
        .filter(|l| l.starts_with("options ") || l.starts_with("blacklist "))
        .collect();
    let mut mine: Vec<String> = ours
        .blacklist
        .iter()
        .map(|(m, _)| format!("blacklist {m}"))
        .collect();
    mine.extend(
        ours.options
            .iter()
            .map(|e| format!("options {} {}", e.module, e.options)),
    );
    let mut theirs_sorted: Vec<String> = theirs.iter().map(|s| s.to_string()).collect();
    // modprobe lists blacklists before options; within each kind, in reading order.
    theirs_sorted.sort_by_key(|l| !l.starts_with("blacklist "));
    assert_eq!(mine, theirs_sorted, "ours {ours:#?}");
    assert!(mine.contains(&"options nvidia NVreg_X=\"a b\"".to_string()));
    assert!(mine.contains(&"options mbcache dyndbg=\"file x.c +p\"".to_string()));
    assert!(ours.options("nvidia").contains("NVreg_EnableGpuFirmware=0"));
    assert!(!ours.options("nvidia").contains("hidden"));
    assert!(ours.options("virtio_ring").contains("from_lib=1"));
    assert!(ours.options("mbcache").starts_with("a=1 "));

    // What each module of the real kernel is given, dependencies included: a module
    // tree of the modules involved, indexed by `depmod` as an install indexes it.
    let kernel = common::kernel_root("default");
    let release = common::kernel_release("default");
    let tree = root.join("kernel");
    let mods = tree.join("lib/modules").join(&release);
    for m in [
        "virtio_blk",
        "virtio",
        "virtio_ring",
        "ext4",
        "jbd2",
        "mbcache",
        "crc16",
    ] {
        let src = common::module("default", &format!("{m}.ko"));
        let rel = src
            .strip_prefix(kernel.join("lib/modules").join(&release))
            .unwrap();
        std::fs::create_dir_all(mods.join(rel).parent().unwrap()).unwrap();
        std::fs::copy(&src, mods.join(rel)).unwrap();
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        std::fs::copy(
            kernel.join("lib/modules").join(&release).join(f),
            mods.join(f),
        )
        .unwrap();
    }
    let depmod = Command::new("depmod")
        .arg("-b")
        .arg(&tree)
        .arg(&release)
        .status()
        .unwrap();
    assert!(depmod.success());
    let deps = modprobe(
        &root,
        &cmdline,
        &format!(
            "-a --show-depends -S {release} -d {} virtio_blk ext4",
            tree.display()
        ),
    );
    let mut seen = 0;
    for line in deps.lines() {
        let Some(rest) = line.strip_prefix("insmod ") else {
            continue;
        };
        let (path, options) = rest.split_once(' ').unwrap();
        let file = Path::new(path).file_name().unwrap().to_string_lossy();
        let name = validator::formats::kmod::normalize_name(file.split('.').next().unwrap());
        // modprobe puts one space between a module's options and the options given on
        // its own command line (none here), so a module with options gets a trailing
        // space, which the kernel's parser skips.
        let options = options.strip_suffix(' ').unwrap_or(options);
        assert_eq!(ours.options(&name), options, "{name}: {line}");
        seen += 1;
    }
    assert!(seen >= 5, "{deps}");
    assert_eq!(
        ours.options("virtio_blk"),
        "poll_queues=1 queue_depth=64   num_request_queues=2 queue_depth=128"
    );
    assert_eq!(ours.options("jbd2"), "  flag");
    std::fs::remove_dir_all(&root).unwrap();
}

//! The real root of the test node: a tiny filesystem whose `/sbin/init` (busybox sh from
//! Debian's busybox-static) proves it was reached as PID 1 after `switch_root`, shows the
//! report the validator left in `/run` and the metrics and NFD files it wrote (the image
//! links both directories into `/run`, as a read-only image does), runs any extra
//! commands, and powers off.
//!
//! Also the base of the test bed's other busybox images ([`busybox_initramfs`]: the floor,
//! the signature-rule cases, the kernel's own speed test).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use mkinitramfs::cpio::{Archive, Entry, Kind};

use crate::HarnessError;

/// Debian's static busybox (`busybox-static`), which every busybox image of the test bed
/// carries.
pub const BUSYBOX: &str = "/bin/busybox";

fn busybox_missing(e: std::io::Error) -> HarnessError {
    HarnessError::Setup(format!(
        "{BUSYBOX}: {e} (install busybox-static: scripts/provision)"
    ))
}

/// A newc archive to build a busybox initramfs on: the directories `dirs`, `/dev/console`
/// (the kernel opens it for the first process), [`BUSYBOX`] as `/bin/busybox` and a link
/// to it in `/bin` for each of `applets`.
pub fn busybox_initramfs(dirs: &[&str], applets: &[&str]) -> Result<Archive, HarnessError> {
    let cpio = |e: mkinitramfs::cpio::CpioError| HarnessError::Setup(e.to_string());
    let mut a = Archive::new();
    for d in ["bin", "dev"].iter().chain(dirs) {
        a.dir(d).map_err(cpio)?;
    }
    a.add(
        "dev/console",
        Entry {
            kind: Kind::CharDev { major: 5, minor: 1 },
            perm: 0o600,
        },
    )
    .map_err(cpio)?;
    let bytes = std::fs::read(BUSYBOX).map_err(busybox_missing)?;
    a.file("bin/busybox", bytes, 0o755).map_err(cpio)?;
    for applet in applets {
        a.add(
            &format!("bin/{applet}"),
            Entry {
                kind: Kind::Symlink("busybox".into()),
                perm: 0o777,
            },
        )
        .map_err(cpio)?;
    }
    Ok(a)
}

/// Printed by the root's init, with `uptime=` (seconds since boot) and `pid=`.
pub const MARKER: &str = "ROOT-INIT-MARKER";
/// Written by the root's init to `/dev/kmsg` first thing, so the kernel log timestamps it
/// on the same clock as "Run /init".
pub const KMSG_MARKER: &str = "root-init: reached";
/// Printed by the root's init before the report it found in `/run/validator/report.json`.
pub const ROOT_REPORT: &str = "ROOT-REPORT ";

/// Where the image keeps node_exporter's textfile directory: a link into `/run`, as a
/// read-only image does (the init writes the file into the `/run` the root inherits).
pub const TEXTFILE_DIR: &str = "var/lib/prometheus/node-exporter";
/// Where the image keeps NFD's local features directory (also a link into `/run`).
pub const NFD_DIR: &str = "etc/kubernetes/node-feature-discovery/features.d";

/// The text the root's init printed between `ROOT-<name>-BEGIN` and `ROOT-<name>-END`
/// (`METRICS`: the Prometheus textfile, `NFD`: the features file, `LINKS`: where the two
/// directories point), without kernel log lines that got in between.
pub fn section(console: &str, name: &str) -> Option<String> {
    let begin = format!("ROOT-{name}-BEGIN");
    let end = format!("ROOT-{name}-END");
    let mut lines = console.lines().skip_while(|l| l.trim_end() != begin);
    lines.next()?;
    let mut out = String::new();
    for l in lines {
        let l = l.trim_end_matches('\r');
        if l == end {
            return Some(out);
        }
        let kernel = l
            .strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .is_some_and(|(t, _)| t.trim().parse::<f64>().is_ok());
        if !kernel {
            out.push_str(l);
            out.push('\n');
        }
    }
    None
}

/// Builds the root directory at `dir`. `extra` is shell run after the marker.
pub fn build(dir: &Path, extra: &str) -> Result<(), HarnessError> {
    let io = |p: &Path, e| HarnessError::io(p, e);
    let _ = std::fs::remove_dir_all(dir);
    for d in [
        "bin", "sbin", "dev", "proc", "sys", "run", "tmp", "etc", "usr/bin", "lib", "lib64",
    ] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| io(&dir.join(d), e))?;
    }
    for (link, target) in [
        (TEXTFILE_DIR, "/run/validator/textfile"),
        (NFD_DIR, "/run/validator/nfd"),
    ] {
        let l = dir.join(link);
        if let Some(parent) = l.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::os::unix::fs::symlink(target, &l).map_err(|e| io(&l, e))?;
    }
    let bb = Path::new(BUSYBOX);
    let target = dir.join("bin/busybox");
    std::fs::copy(bb, &target).map_err(busybox_missing)?;
    let list = crate::disk::run(std::process::Command::new(bb).arg("--list"))?;
    for applet in list
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox")
    {
        let link = dir.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link).map_err(|e| io(&link, e))?;
        }
    }
    let init = dir.join("sbin/init");
    let script = format!(
        "#!/bin/sh\n\
         export PATH=/usr/bin:/bin\n\
         echo \"{KMSG_MARKER}\" > /dev/kmsg\n\
         echo \"{MARKER} uptime=$(cut -d' ' -f1 /proc/uptime) pid=$$\"\n\
         printf '%s%s\\n' \"{ROOT_REPORT}\" \"$(cat /run/validator/report.json 2>/dev/null)\"\n\
         echo ROOT-METRICS-BEGIN; cat /{TEXTFILE_DIR}/validator.prom; echo ROOT-METRICS-END\n\
         echo ROOT-NFD-BEGIN; cat /{NFD_DIR}/validator; echo ROOT-NFD-END\n\
         echo ROOT-LINKS-BEGIN; readlink /{TEXTFILE_DIR}; readlink /{NFD_DIR}; echo ROOT-LINKS-END\n\
         {extra}\n\
         sync\n\
         poweroff -f\n"
    );
    std::fs::write(&init, script).map_err(|e| io(&init, e))?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| io(&init, e))?;
    Ok(())
}

/// An ext4 image of `dir` at `out` (4096-byte blocks, label `root`, owned by root), as
/// `mkfs.ext4 -d` makes it, sized to its content by [`ext4_fit`]: a read-only verity root
/// (or the update disk) gets no journal and the inodes it needs, not the ratio mke2fs
/// picks for a file system that will be written to. Every byte of it is hashed, copied by
/// RAUC and read through verity, so the free space kept is small.
pub fn ext4_image(dir: &Path, out: &Path) -> Result<(), HarnessError> {
    let (size_mib, inodes) = ext4_fit(dir);
    crate::disk::run(
        std::process::Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-b",
                "4096",
                "-L",
                "root",
                "-O",
                "^has_journal",
                "-N",
                &inodes.to_string(),
                "-E",
                "root_owner=0:0",
                "-d",
            ])
            .arg(dir)
            .arg(out)
            .arg(format!("{size_mib}M")),
    )?;
    Ok(())
}

/// Size in MiB and inode count of a journal-less ext4 image of `dir` with 4 KiB blocks:
/// a quarter more inodes than entries (256 bytes each), the content in 4 KiB blocks plus
/// a twentieth, and 8 MiB for the rest of the metadata.
pub fn ext4_fit(dir: &Path) -> (u64, u64) {
    let (bytes, entries) = usage(dir);
    let inodes = entries + entries / 4 + 256;
    let size = bytes + bytes / 20 + inodes * 256;
    ((size >> 20) + 8, inodes)
}

/// Bytes in 4 KiB blocks (a directory one block) and the number of entries under `dir`,
/// `dir` included; what cannot be read counts nothing.
fn usage(p: &Path) -> (u64, u64) {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return (0, 0);
    };
    if !m.is_dir() {
        return (m.len().div_ceil(4096) * 4096, 1);
    }
    let mut total = (4096, 1);
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.filter_map(Result::ok) {
            let (b, n) = usage(&e.path());
            total = (total.0 + b, total.1 + n);
        }
    }
    total
}

/// tpm2-tools in a busybox root: `tpm2` with its `tpm2_pcrread` and `tpm2_eventlog` links
/// and the device TCTI it loads at run time (what [`crate::scenario::TPM_ROOT_SCRIPT`] runs).
pub fn add_tpm_tools(dir: &Path) -> Result<(), HarnessError> {
    add_host_programs(
        dir,
        &["/usr/bin/tpm2"],
        &[("tpm2_pcrread", "tpm2"), ("tpm2_eventlog", "tpm2")],
        &["/usr/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0"],
    )
}

/// Copies host programs into the root with the shared libraries `ldd` names (and the
/// dynamic loader), plus `extra_libs` that are loaded at run time (`dlopen`), and makes
/// `links` (name in /usr/bin -> program file name).
pub fn add_host_programs(
    dir: &Path,
    programs: &[&str],
    links: &[(&str, &str)],
    extra_libs: &[&str],
) -> Result<(), HarnessError> {
    let io = |p: &Path, e| HarnessError::io(p, e);
    let mut libs: Vec<String> = extra_libs.iter().map(|s| s.to_string()).collect();
    for prog in programs {
        let dst = dir
            .join("usr/bin")
            .join(Path::new(prog).file_name().unwrap_or_default());
        std::fs::copy(prog, &dst).map_err(|e| io(Path::new(prog), e))?;
        let out = crate::disk::run(std::process::Command::new("ldd").arg(prog))?;
        for l in out.lines() {
            // "libx.so => /lib/x86_64-linux-gnu/libx.so (0x...)" or "/lib64/ld-linux... (0x...)"
            let path = l
                .split("=>")
                .nth(1)
                .unwrap_or(l)
                .split_whitespace()
                .next()
                .unwrap_or("");
            if path.starts_with('/') {
                libs.push(path.to_string());
            }
        }
    }
    libs.sort();
    libs.dedup();
    for lib in libs {
        let rel = lib.trim_start_matches('/');
        let dst = dir.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        // Follow symlinks: the root gets the library under the name the program asks for.
        std::fs::copy(&lib, &dst).map_err(|e| io(Path::new(&lib), e))?;
    }
    for (name, target) in links {
        let l = dir.join("usr/bin").join(name);
        let _ = std::fs::remove_file(&l);
        std::os::unix::fs::symlink(target, &l).map_err(|e| io(&l, e))?;
    }
    Ok(())
}

/// Size in MiB for an ext4 image holding `dir` with room to spare (the writable roots
/// of the busybox scenarios, made by [`crate::disk::mkfs_ext4`]).
pub fn image_size_mib(dir: &Path) -> u64 {
    (usage(dir).0 * 3 / 2 / (1 << 20) + 8).max(16)
}

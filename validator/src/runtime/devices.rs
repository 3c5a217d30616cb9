//! Finding block devices the stages share (`storage`, `slot`): every partition on every
//! GPT disk, read by us from the partition tables (no udev, no blkid), matched by GPT
//! partition label, partition UUID or path, and waited for with a deadline.
//!
//! Contract: disks are taken from `<sys>/block`; device nodes from `<dev>` (devtmpfs),
//! created with `mknod` from the sysfs `dev` numbers when devtmpfs has not made them. A
//! wait scans every interval until found or the timeout, then fails naming what was seen
//! on each disk, and what could not be read (a `block` directory that cannot be listed, a
//! disk's size or sector size, a partition's device node). Current limits: GPT disks
//! only; sysfs values are read with [`SYSFS_VALUE_MAX`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::cmdline::RootSpec;
use crate::formats::gpt;
use crate::util::fs::SYSFS_VALUE_MAX;

/// A storage problem.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error(
        "{spec} not found after {waited:.1} s ({woken} scan(s) on a block device event); \
         disks seen: {seen}"
    )]
    NotFound {
        spec: String,
        waited: f64,
        /// Scans made at once on a block device event rather than at the interval.
        woken: u32,
        seen: String,
    },
    #[error("{spec} matches more than one partition: {}", .devices.join(", "))]
    Ambiguous { spec: String, devices: Vec<String> },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A partition we found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FoundPartition {
    /// Device node (`/dev/vda1`).
    pub device: String,
    pub disk: String,
    pub number: u32,
    pub label: String,
    pub partuuid: String,
    pub type_uuid: String,
}

/// What one scan saw on one disk (for the "not found" report).
#[derive(Debug, Clone)]
pub struct DiskSeen {
    pub disk: String,
    pub note: String,
}

fn read_trim(p: &Path) -> Option<String> {
    crate::util::fs::read_text_limited(p, SYSFS_VALUE_MAX)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Makes sure `<dev>/<name>` exists, creating it from `<sysdir>/dev` (`MAJ:MIN`) if not.
pub fn ensure_node(dev_root: &Path, name: &str, sysdir: &Path) -> Result<PathBuf, StorageError> {
    let node = dev_root.join(name);
    if node.exists() {
        return Ok(node);
    }
    let devfile = sysdir.join("dev");
    let mm = read_trim(&devfile).ok_or_else(|| StorageError::Io {
        path: devfile.clone(),
        source: std::io::ErrorKind::NotFound.into(),
    })?;
    let (maj, min) = mm
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or_else(|| StorageError::Io {
            path: devfile.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad dev {mm:?}")),
        })?;
    crate::sys::mknod_block(&node, maj, min).map_err(|e| StorageError::Io {
        path: node.clone(),
        source: e.into(),
    })?;
    Ok(node)
}

/// Every partition on every GPT disk, with what was seen on each disk.
pub fn scan(sys_root: &Path, dev_root: &Path) -> (Vec<FoundPartition>, Vec<DiskSeen>) {
    let mut found = Vec::new();
    let mut seen = Vec::new();
    let block = sys_root.join("block");
    let mut disks = Vec::new();
    let listed = std::fs::read_dir(&block).and_then(|rd| {
        for e in rd {
            disks.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(())
    });
    if let Err(e) = listed {
        // What was listed is still scanned; the wait goes on and names this.
        seen.push(DiskSeen {
            disk: block.display().to_string(),
            note: format!("cannot be listed: {e}"),
        });
    }
    disks.sort();
    for disk in disks {
        let sysdir = block.join(&disk);
        let number = |name: &str| -> Result<u64, String> {
            let path = sysdir.join(name);
            let text = crate::util::fs::read_text_limited(&path, SYSFS_VALUE_MAX)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            text.trim()
                .parse()
                .map_err(|_| format!("{}: not a number: {:?}", path.display(), text.trim()))
        };
        let sizes = number("size").and_then(|sectors| match sectors {
            0 => Ok(None), // empty loop/ram devices, ejected media
            _ => number("queue/logical_block_size").map(Some),
        });
        let ss = match sizes {
            Ok(None) => continue,
            Ok(Some(ss)) => ss,
            Err(note) => {
                seen.push(DiskSeen { disk, note });
                continue;
            }
        };
        let node = match ensure_node(dev_root, &disk, &sysdir) {
            Ok(n) => n,
            Err(e) => {
                seen.push(DiskSeen {
                    disk,
                    note: e.to_string(),
                });
                continue;
            }
        };
        let table = match crate::sys::read_gpt(&node, ss) {
            Ok(t) => t,
            Err(e) => {
                let note = match &e {
                    gpt::GptError::Invalid { what, .. } => what.clone(),
                    other => other.to_string(),
                };
                seen.push(DiskSeen { disk, note });
                continue;
            }
        };
        let labels: Vec<String> = table.partitions.iter().map(|p| p.name.clone()).collect();
        seen.push(DiskSeen {
            disk: disk.clone(),
            note: format!("GPT partitions [{}]", labels.join(", ")),
        });
        for p in &table.partitions {
            let Some(pname) = partition_name(&sysdir, p.number) else {
                continue; // the kernel has not (yet) created this partition
            };
            let device = match ensure_node(dev_root, &pname, &sysdir.join(&pname)) {
                Ok(n) => n.display().to_string(),
                Err(e) => {
                    seen.push(DiskSeen {
                        disk: pname,
                        note: e.to_string(),
                    });
                    continue;
                }
            };
            found.push(FoundPartition {
                device,
                disk: disk.clone(),
                number: p.number,
                label: p.name.clone(),
                partuuid: p.unique_guid.to_string(),
                type_uuid: p.type_guid.to_string(),
            });
        }
    }
    (found, seen)
}

/// The kernel's name for partition `number` of the disk at `sysdir`.
fn partition_name(sysdir: &Path, number: u32) -> Option<String> {
    let rd = std::fs::read_dir(sysdir).ok()?;
    for e in rd.filter_map(Result::ok) {
        let p = e.path();
        if read_trim(&p.join("partition")).and_then(|s| s.parse::<u32>().ok()) == Some(number) {
            return Some(e.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

/// Whether a partition matches a root spec.
pub fn matches(spec: &RootSpec, p: &FoundPartition) -> bool {
    match spec {
        RootSpec::PartLabel(l) => &p.label == l,
        RootSpec::PartUuid(u) => p.partuuid.eq_ignore_ascii_case(u),
        RootSpec::Path(d) => &p.device == d,
    }
}

/// The one partition of `parts` that `spec` names; more than one is an error.
pub fn pick(
    spec: &RootSpec,
    parts: &[FoundPartition],
) -> Result<Option<FoundPartition>, StorageError> {
    let hits: Vec<&FoundPartition> = parts.iter().filter(|p| matches(spec, p)).collect();
    if hits.len() > 1 {
        return Err(StorageError::Ambiguous {
            spec: spec.to_string(),
            devices: hits.iter().map(|h| h.device.clone()).collect(),
        });
    }
    Ok(hits.first().map(|h| (*h).clone()))
}

/// One look for the device named by `spec`.
pub fn find(
    spec: &RootSpec,
    sys_root: &Path,
    dev_root: &Path,
) -> Result<(Option<FoundPartition>, Vec<DiskSeen>), StorageError> {
    let (parts, seen) = scan(sys_root, dev_root);
    Ok((pick(spec, &parts)?, seen))
}

/// Scans every `interval` until `found` returns a value or `timeout` passes; the error
/// then lists what was seen on each disk. `found` may also fail the wait at once. Once a
/// scan has not found it, it listens for the kernel's block device events
/// (`sys::uevent`) and scans again at once: a disk or partition that appears is scanned
/// for at once, not at the next interval; without the socket (it could not be opened, or
/// failed) the wait is the interval alone.
#[expect(
    clippy::too_many_arguments,
    reason = "the roots, timings and callbacks of one scan are separate inputs"
)]
pub fn wait_scan<T, E>(
    what: &str,
    sys_root: &Path,
    dev_root: &Path,
    timeout: Duration,
    interval: Duration,
    mut tick: impl FnMut(),
    mut found: impl FnMut(&[FoundPartition]) -> Result<Option<T>, E>,
    on_timeout: impl FnOnce(StorageError) -> E,
) -> Result<T, E> {
    let start = Instant::now();
    let mut listen = Listen::NotYet;
    let mut woken = 0;
    loop {
        let (parts, seen) = scan(sys_root, dev_root);
        if let Some(t) = found(&parts)? {
            return Ok(t);
        }
        // Opened once a scan has not found it (a boot whose disks are there never opens
        // it), then scanned again at once: what appeared before it listened is not missed.
        if let Listen::NotYet = listen {
            listen = match crate::sys::uevent::Uevents::open() {
                Ok(u) => Listen::On(u),
                Err(e) => Listen::off(what, interval, &e),
            };
            continue;
        }
        if start.elapsed() >= timeout {
            let seen = if seen.is_empty() {
                "none".to_string()
            } else {
                seen.iter()
                    .map(|d| format!("{} ({})", d.disk, d.note))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            return Err(on_timeout(StorageError::NotFound {
                spec: what.to_string(),
                waited: start.elapsed().as_secs_f64(),
                woken,
                seen,
            }));
        }
        tick();
        let left = timeout.saturating_sub(start.elapsed());
        if listen.pause(interval.min(left), interval, what) {
            woken += 1;
        }
    }
}

/// [`wait_scan`]'s block device events: not listened for yet, listened for, or not
/// (the socket could not be opened, or failed: the interval alone).
enum Listen {
    NotYet,
    On(crate::sys::uevent::Uevents),
    Off,
}

impl Listen {
    /// [`Listen::Off`], saying why.
    fn off(what: &str, interval: Duration, e: &crate::sys::SysError) -> Listen {
        log::warn!("{what}: scanning every {interval:?} only: {e}");
        Listen::Off
    }

    /// Waits `wait` or until a block device event comes; whether one came. A socket
    /// that fails is given up and the rest of the wait slept.
    fn pause(&mut self, wait: Duration, interval: Duration, what: &str) -> bool {
        use crate::sys::uevent::{is_block, Wake};
        let start = Instant::now();
        if let Listen::On(u) = self {
            match u.wait(wait, is_block) {
                Wake::Event => return true,
                Wake::Timeout => return false,
                Wake::Failed(e) => *self = Listen::off(what, interval, &e),
            }
        }
        std::thread::sleep(wait.saturating_sub(start.elapsed()));
        false
    }
}

/// The root device `spec` names among `parts`: a device path that exists (whatever the
/// scan saw), else the one partition the spec matches; for [`wait_scan`].
pub fn find_root(
    spec: &RootSpec,
    parts: &[FoundPartition],
) -> Result<Option<FoundPartition>, StorageError> {
    if let RootSpec::Path(p) = spec {
        if Path::new(p).exists() {
            return Ok(Some(FoundPartition {
                device: p.clone(),
                disk: String::new(),
                number: 0,
                label: String::new(),
                partuuid: String::new(),
                type_uuid: String::new(),
            }));
        }
    }
    pick(spec, parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::gpt::{tests::build, Guid};

    /// A sysfs/devfs fixture with one GPT disk image standing in for `/dev/vda`.
    #[test]
    fn finds_by_label_and_uuid_in_a_fixture() {
        let tmp = std::env::temp_dir().join(format!("vld-stor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let sys = tmp.join("sys");
        let dev = tmp.join("dev");
        std::fs::create_dir_all(sys.join("block/vda/vda1")).unwrap();
        std::fs::create_dir_all(sys.join("block/vda/vda2")).unwrap();
        std::fs::create_dir_all(sys.join("block/vda/queue")).unwrap();
        std::fs::create_dir_all(sys.join("block/loop0")).unwrap();
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(sys.join("block/loop0/size"), "0\n").unwrap();
        std::fs::write(sys.join("block/vda/size"), "300\n").unwrap();
        std::fs::write(sys.join("block/vda/queue/logical_block_size"), "512\n").unwrap();
        std::fs::write(sys.join("block/vda/vda1/partition"), "1\n").unwrap();
        std::fs::write(sys.join("block/vda/vda2/partition"), "2\n").unwrap();
        let t = Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap();
        let u1 = Guid::parse("11111111-2222-3333-4444-555555555555").unwrap();
        let u2 = Guid::parse("aaaaaaaa-2222-3333-4444-555555555555").unwrap();
        std::fs::write(
            dev.join("vda"),
            build(&[(t, u1, 34, 99, "root"), (t, u2, 100, 199, "data")], 300),
        )
        .unwrap();
        std::fs::write(dev.join("vda1"), b"").unwrap();
        std::fs::write(dev.join("vda2"), b"").unwrap();

        let (hit, _) = find(&RootSpec::PartLabel("data".into()), &sys, &dev).unwrap();
        let hit = hit.unwrap();
        assert_eq!(hit.number, 2);
        assert_eq!(hit.device, dev.join("vda2").display().to_string());
        let (hit, _) = find(
            &RootSpec::PartUuid("11111111-2222-3333-4444-555555555555".into()),
            &sys,
            &dev,
        )
        .unwrap();
        assert_eq!(hit.unwrap().label, "root");

        let spec = RootSpec::PartLabel("nope".into());
        let e = wait_scan(
            &format!("root device {spec}"),
            &sys,
            &dev,
            Duration::from_millis(30),
            Duration::from_millis(10),
            || {},
            |parts| find_root(&spec, parts),
            |e| e,
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("root device PARTLABEL=nope not found after"),
            "{msg}"
        );
        assert!(msg.contains("vda (GPT partitions [root, data])"), "{msg}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// A disk whose size cannot be read, or a `block` directory that cannot be listed, is
    /// named in what the scan saw, not taken for an empty disk or for no disks.
    #[test]
    fn what_cannot_be_read_is_named() {
        let tmp = test_support::tmpdir("devices-unreadable");
        let (sys, dev) = (tmp.join("sys"), tmp.join("dev"));
        std::fs::create_dir_all(sys.join("block/vdb/queue")).unwrap();
        std::fs::create_dir_all(sys.join("block/vdc/size")).unwrap();
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(sys.join("block/vdb/size"), "lots\n").unwrap();
        let (found, seen) = scan(&sys, &dev);
        assert!(found.is_empty());
        let notes: Vec<String> = seen
            .iter()
            .map(|s| format!("{}: {}", s.disk, s.note))
            .collect();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("vdb: ")
                && notes[0].ends_with("/block/vdb/size: not a number: \"lots\""),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("vdc: ") && notes[1].contains("/block/vdc/size: "),
            "{notes:?}"
        );

        std::fs::remove_dir_all(sys.join("block")).unwrap();
        std::fs::write(sys.join("block"), b"").unwrap();
        let (found, seen) = scan(&sys, &dev);
        assert!(found.is_empty());
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].disk, sys.join("block").display().to_string());
        assert!(
            seen[0].note.starts_with("cannot be listed: "),
            "{}",
            seen[0].note
        );
    }

    /// A block device event ends the wait between scans: with a one-minute interval, the
    /// third scan (after the first, and the one made at once as the socket opens) comes
    /// as soon as the kernel reports a block device (root writes
    /// `change` to a real disk's `uevent`, which with no udev running changes nothing),
    /// not a minute later. A wait that finds nothing ends at its timeout, saying how
    /// many of its scans an event caused.
    #[test]
    fn a_block_device_event_scans_again_at_once() {
        let tmp = test_support::tmpdir("stor-uevent");
        let (sys, dev) = (tmp.join("sys"), tmp.join("dev"));
        std::fs::create_dir_all(sys.join("block")).unwrap();
        std::fs::create_dir_all(&dev).unwrap();
        let mut disks: Vec<_> = std::fs::read_dir("/sys/block")
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        disks.sort_by_key(|d| (!d.starts_with("loop"), d.clone()));
        let disk = disks
            .first()
            .expect("a block device on this machine")
            .clone();
        let start = Instant::now();
        let mut scans = 0;
        let woken = wait_scan(
            "a partition",
            &sys,
            &dev,
            Duration::from_secs(120),
            Duration::from_secs(60),
            || {
                let d = disk.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(200));
                    std::fs::write(format!("/sys/block/{d}/uevent"), "change").unwrap();
                });
            },
            |_| {
                scans += 1;
                Ok::<_, StorageError>((scans == 3).then_some(()))
            },
            |e| e,
        );
        assert!(woken.is_ok(), "{woken:?}");
        // The first scan, the one at once when the socket opened, the one on the event.
        assert_eq!(scans, 3);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
        let e = wait_scan(
            "nothing",
            &sys,
            &dev,
            Duration::from_millis(250),
            Duration::from_millis(100),
            || {},
            |_| Ok::<Option<()>, StorageError>(None),
            |e| e,
        )
        .unwrap_err();
        // (How many of its scans events caused depends on what else this machine's
        // disks do meanwhile.)
        let msg = e.to_string();
        assert!(msg.starts_with("nothing not found after 0."), "{msg}");
        assert!(
            msg.ends_with(" scan(s) on a block device event); disks seen: none"),
            "{msg}"
        );
    }
}

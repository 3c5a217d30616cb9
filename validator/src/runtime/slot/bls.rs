//! systemd-boot's A/B state ([`Bls`]): each slot's BLS entry in `loader/entries` on the
//! ESP, with boot counters in its file name (`id+LEFT-DONE.conf`, systemd's automatic
//! boot assessment).
//!
//! Contract: a slot is found by its entry id whatever its counters say, exactly one file
//! per slot; marking good or bad renames the file as `systemd-bless-boot` does (then
//! fsyncs the directory), using a try renames it as systemd-boot does before booting it.
//! A slot is offered while its entry is not bad (`+0`). The kexec command line is the
//! entry's `options`, else this boot's line. The loader's `LoaderBootCountPath` EFI
//! variable is read from efivarfs, which is mounted for it.
//!
//! Current limits: two slots, `A` and `B`; entries whose file name does not parse are
//! left alone and ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{loader::BootLoader, same_line_for, SlotError};
use crate::config::bom::{Slot, SlotName};
use crate::config::LOADER_BOOT_COUNT_PATH;
use crate::formats::bls::{self, EntryName};
use crate::util::fs::read_limited;

/// The entries' directory below the ESP.
const ENTRIES: &str = "loader/entries";

/// The slots' BLS entry files.
#[derive(Debug)]
pub struct Bls {
    /// `loader/entries` on the ESP.
    dir: PathBuf,
    /// The ESP (renames happen in `loader/entries` below it, following no symlink).
    esp: PathBuf,
    /// The entry file of each slot; empty when they could not be read (then nothing is
    /// renamed).
    entries: BTreeMap<SlotName, EntryName>,
    /// The slot and its entry's name before the last rename (for [`BootLoader::undo`]).
    prev: Option<(SlotName, EntryName)>,
}

impl Bls {
    /// Finds the slots' entries `cfg` names on the ESP mounted at `esp_dir`.
    pub fn open(cfg: &Slot, esp_dir: &Path) -> (Bls, Option<SlotError>) {
        let dir = esp_dir.join(ENTRIES);
        match read_entries(cfg, &dir) {
            Ok(entries) => (
                Bls {
                    dir,
                    esp: esp_dir.to_path_buf(),
                    entries,
                    prev: None,
                },
                None,
            ),
            Err(e) => (
                Bls {
                    dir,
                    esp: esp_dir.to_path_buf(),
                    entries: BTreeMap::new(),
                    prev: None,
                },
                Some(e),
            ),
        }
    }

    fn entry(&self, s: SlotName) -> Result<EntryName, SlotError> {
        self.entries
            .get(&s)
            .cloned()
            .ok_or(SlotError::NoEntryFor { slot: s })
    }

    fn rename(&mut self, s: SlotName, to: EntryName) -> Result<(), SlotError> {
        let from = self.entry(s)?;
        if from == to {
            return Ok(());
        }
        let (a, b) = (
            self.dir.join(from.file_name()),
            self.dir.join(to.file_name()),
        );
        crate::sys::beneath::rename_beneath(
            &self.esp,
            Path::new(ENTRIES),
            &from.file_name(),
            &to.file_name(),
        )
        .map_err(|e| SlotError::Rename {
            from: a.clone(),
            to: b.clone(),
            source: e.errno.into(),
        })?;
        self.entries.insert(s, to);
        self.prev = Some((s, from));
        Ok(())
    }
}

/// The slots' BLS entry files in `dir` (exactly one per slot id, any counters).
fn read_entries(cfg: &Slot, dir: &Path) -> Result<BTreeMap<SlotName, EntryName>, SlotError> {
    let rd = std::fs::read_dir(dir).map_err(|source| SlotError::EntriesDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut found: BTreeMap<SlotName, EntryName> = BTreeMap::new();
    for e in rd {
        // An entry the directory could not list is an error: a slot's entry (or a second
        // one for the same slot) must not be missed silently.
        let e = e.map_err(|source| SlotError::EntriesDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(n) = EntryName::parse(&name) else {
            continue; // not ours to judge; left alone
        };
        for (s, id) in &cfg.entries {
            if &n.id == id {
                if let Some(prev) = found.insert(*s, n.clone()) {
                    return Err(SlotError::TwoEntries {
                        slot: *s,
                        first: prev.file_name(),
                        second: n.file_name(),
                    });
                }
            }
        }
    }
    for s in [SlotName::A, SlotName::B] {
        if !found.contains_key(&s) {
            return Err(SlotError::NoEntry {
                slot: s,
                id: cfg.entries.get(&s).map_or("?", String::as_str).to_string(),
                dir: dir.to_path_buf(),
            });
        }
    }
    Ok(found)
}

/// systemd-boot's `LoaderBootCountPath` EFI variable (the entry it counted this boot).
fn loader_boot_count_path(sys_root: &Path) -> Option<String> {
    let p = crate::runtime::uefi_keys::efivar_file(sys_root, LOADER_BOOT_COUNT_PATH);
    let bytes = read_limited(&p, 4096).ok()?;
    bls::efivar_utf16(&bytes, LOADER_BOOT_COUNT_PATH).ok()
}

impl BootLoader for Bls {
    fn view(&self) -> BTreeMap<String, String> {
        self.entries
            .iter()
            .map(|(s, n)| (s.as_str().to_string(), n.file_name()))
            .collect()
    }

    fn firmware_view(&self, sys_root: &Path) -> BTreeMap<String, String> {
        loader_boot_count_path(sys_root)
            .map(|p| ("LoaderBootCountPath".to_string(), p))
            .into_iter()
            .collect()
    }

    fn offers(&self, s: SlotName) -> bool {
        self.entries.get(&s).is_some_and(|n| !n.bad())
    }

    fn mark(&mut self, s: SlotName, good: bool) -> Result<(), SlotError> {
        let n = self.entry(s)?;
        let to = if good {
            n.marked_good()
        } else {
            n.marked_bad()
        };
        self.rename(s, to)
    }

    fn undo(&mut self) -> Result<bool, SlotError> {
        let Some((s, name)) = self.prev.take() else {
            return Ok(false);
        };
        self.rename(s, name)?;
        self.prev = None;
        Ok(true)
    }

    fn marked(&self, s: SlotName) -> Option<bool> {
        let n = self.entries.get(&s)?;
        if n.bad() {
            Some(false)
        } else {
            n.left.is_none().then_some(true)
        }
    }

    fn use_try(&mut self, s: SlotName) -> Result<(), SlotError> {
        let n = self.entry(s)?;
        match n.left {
            Some(l) if l > 0 => {
                let to = EntryName {
                    id: n.id.clone(),
                    left: Some(l - 1),
                    done: Some(n.done.unwrap_or(0).saturating_add(1)),
                };
                self.rename(s, to)
            }
            _ => Ok(()),
        }
    }

    /// The entry's `options`; this boot's line when the entry cannot be read.
    fn kexec_cmdline(&self, s: SlotName, this_boot: &str) -> String {
        if let Some(n) = self.entries.get(&s) {
            let p = self.dir.join(n.file_name());
            if let Ok(bytes) = read_limited(&p, bls::ENTRY_FILE_MAX as u64) {
                if let Ok(e) = bls::Entry::parse(&bytes, &n.file_name()) {
                    return e.options;
                }
            }
        }
        same_line_for(this_boot, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esp(tag: &str, files: &[(&str, &str)]) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vld-slot-bls-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("loader/entries")).unwrap();
        for (name, body) in files {
            std::fs::write(d.join("loader/entries").join(name), body).unwrap();
        }
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d.join("loader/entries"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Boot counting through the trait, on entry files as systemd-boot leaves them: a try
    /// used renames with one left fewer and one done more, a bad slot is `+0` and no longer
    /// offered, a good one loses its counters; the kexec line is the entry's `options`.
    #[test]
    fn boot_counting_renames_entries() {
        let cfg: Slot = toml::from_str("bootloader = \"systemd-boot\"").unwrap();
        let d = esp(
            "count",
            &[
                (
                    "slot-a+2-1.conf",
                    "title A\noptions root=PARTLABEL=root-A ro\n",
                ),
                (
                    "slot-b+3.conf",
                    "title B\noptions root=PARTLABEL=root-B\noptions quiet\n",
                ),
                ("other.conf", "title other\n"),
            ],
        );
        let (mut l, e) = Bls::open(&cfg, &d);
        assert!(e.is_none(), "{e:?}");
        assert_eq!(
            l.view().get("A").map(String::as_str),
            Some("slot-a+2-1.conf")
        );
        assert!(l.offers(SlotName::A) && l.offers(SlotName::B));
        l.use_try(SlotName::B).unwrap();
        l.mark(SlotName::A, false).unwrap();
        assert!(!l.offers(SlotName::A));
        assert_eq!(
            names(&d),
            ["other.conf", "slot-a+0-1.conf", "slot-b+2-1.conf"]
        );
        l.mark(SlotName::B, true).unwrap();
        assert_eq!(names(&d), ["other.conf", "slot-a+0-1.conf", "slot-b.conf"]);
        assert_eq!(
            l.kexec_cmdline(SlotName::B, "validator.slot=A ro"),
            "root=PARTLABEL=root-B quiet"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A missing or doubled entry is reported by its own variant; the loader then offers
    /// nothing and renames nothing, and the kexec line is this boot's.
    #[test]
    fn missing_and_doubled_entries() {
        let cfg: Slot = toml::from_str("bootloader = \"systemd-boot\"").unwrap();
        let d = esp("missing", &[("slot-a.conf", "")]);
        let (mut l, e) = Bls::open(&cfg, &d);
        let e = e.unwrap();
        assert!(
            matches!(
                e,
                SlotError::NoEntry {
                    slot: SlotName::B,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e
            .to_string()
            .starts_with("no BLS entry slot-b[+N[-M]].conf for slot B in "));
        assert!(!l.offers(SlotName::A));
        assert!(matches!(
            l.mark(SlotName::A, true),
            Err(SlotError::NoEntryFor { slot: SlotName::A })
        ));
        assert_eq!(
            l.kexec_cmdline(SlotName::B, "BOOT_IMAGE=/A/vmlinuz validator.slot=A ro"),
            "validator.slot=B ro"
        );
        assert_eq!(names(&d), ["slot-a.conf"]);
        std::fs::write(d.join("loader/entries/slot-a+1.conf"), "").unwrap();
        let (_, e) = Bls::open(&cfg, &d);
        assert!(
            matches!(
                e,
                Some(SlotError::TwoEntries {
                    slot: SlotName::A,
                    ..
                })
            ),
            "{e:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
        let (_, e) = Bls::open(&cfg, &d);
        assert!(matches!(e, Some(SlotError::EntriesDir { .. })), "{e:?}");
    }
}

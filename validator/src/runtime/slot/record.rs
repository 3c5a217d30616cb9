//! Our own A/B record on the ESP ([`Store`]): the two fixed-size copies of
//! [`crate::formats::slotstate`] under the BOM's `state_dir`, read and written so that a
//! power cut at any moment leaves one whole copy.
//!
//! Contract: [`Store::open`] reads both copies (creating them, zero-filled and fixed
//! size, only when asked and missing) and keeps the newest valid one; [`Store::write`]
//! writes the next generation in place to the copy that does not hold the newest valid
//! record, then flips to the other copy. Both copies are read and written following no
//! symlink below the ESP ([`crate::sys::beneath`]); [`Store::check_writable`] tells
//! before a change elsewhere whether the write can be made. A record that could not be opened is never
//! written ([`SlotError::RecordUnusable`]). A record too large for a copy drops the
//! carried reports' bodies rather than the facts.
//!
//! Current limits: the layout is `slotstate`'s (two copies of `FILE_SIZE` bytes); the
//! directory must already exist unless `create`; creating it (first boot) follows the
//! directories on the way, the copies themselves are created with `O_EXCL`.

use std::path::{Path, PathBuf};

use super::SlotError;
use crate::formats::slotstate::{self, Record, State, StateError};
use crate::sys::beneath;
use std::os::unix::fs::OpenOptionsExt;

/// Our record, as read from (and written back to) its directory on the ESP.
#[derive(Debug)]
pub struct Store {
    /// `root/rel`: the record's directory; the copies are opened below `root` (the ESP)
    /// following no symlink.
    root: PathBuf,
    rel: PathBuf,
    dir: PathBuf,
    /// The newest valid copy's state (default when none is valid).
    pub state: State,
    /// Its generation (0 when none is valid).
    pub generation: u64,
    next_copy: usize,
    /// The record could be read or created: only then is it written.
    pub ok: bool,
    /// The directory was there but neither copy is a valid record
    /// ([`SlotError::NoValidCopy`]; the state is then the default one).
    pub damaged: Option<SlotError>,
}

impl Store {
    /// Reads the record in `dir`, creating its two copies when `create` and they are
    /// missing. Returns it, whether it was created just now, and why it is unusable.
    pub fn open(dir: PathBuf, create: bool) -> (Store, bool, Option<SlotError>) {
        Store::open_in(dir, PathBuf::new(), create)
    }

    /// [`Store::open`] of the directory `rel` below `root` (the ESP).
    pub fn open_in(root: PathBuf, rel: PathBuf, create: bool) -> (Store, bool, Option<SlotError>) {
        let mut st = Store {
            dir: root.join(&rel),
            root,
            rel,
            state: State::default(),
            generation: 0,
            next_copy: 0,
            ok: false,
            damaged: None,
        };
        match read_state(&st, create) {
            Ok((copies, created)) => {
                match slotstate::newest(&copies) {
                    Some((_, r)) => {
                        st.state = r.state.clone();
                        st.generation = r.generation;
                    }
                    // Copies made just now are zero-filled until the first write.
                    None if !created => {
                        let why = |c: &Result<_, StateError>| match c {
                            Err(e) => e.to_string(),
                            Ok(_) => String::new(),
                        };
                        let [c0, c1] = &copies;
                        st.damaged = Some(SlotError::NoValidCopy {
                            dir: st.dir.clone(),
                            state0: why(c0),
                            state1: why(c1),
                        });
                    }
                    None => {}
                }
                st.next_copy = slotstate::next_copy(&copies);
                st.ok = true;
                (st, created, None)
            }
            Err(e) => (st, false, Some(e)),
        }
    }

    /// Whether [`Store::write`] can write: the record is usable and the copy it writes
    /// next is a regular file of the record's size, open for writing. Checked before the
    /// boot loader's state changes, so a record that cannot be written changes nothing.
    pub fn check_writable(&self) -> Result<(), SlotError> {
        if !self.ok {
            return Err(SlotError::RecordUnusable);
        }
        let p = copy_path(&self.dir, self.next_copy);
        let io = |source| SlotError::Io {
            path: p.clone(),
            source,
        };
        let f = beneath::open_beneath(&self.root, &self.copy_rel(self.next_copy), true)
            .map_err(|e| io(e.errno.into()))?;
        let meta = f.metadata().map_err(io)?;
        if !meta.is_file() || meta.len() != slotstate::FILE_SIZE as u64 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not a regular file of {} bytes (the record's copy)",
                    slotstate::FILE_SIZE
                ),
            )));
        }
        Ok(())
    }

    /// Writes the state as the next generation to the other copy.
    pub fn write(&mut self) -> Result<(), SlotError> {
        if !self.ok {
            return Err(SlotError::RecordUnusable);
        }
        let mut rec = Record {
            generation: slotstate::next_generation(self.generation),
            state: self.state.clone(),
        };
        let bytes = match slotstate::encode(&rec, slotstate::FILE_SIZE) {
            Ok(b) => b,
            Err(StateError::TooLarge { .. }) => {
                // Keep the facts, drop the reports' bodies rather than the record.
                for r in rec.state.slots.values_mut() {
                    r.last_report = None;
                }
                slotstate::encode(&rec, slotstate::FILE_SIZE)
                    .map_err(|source| SlotError::Encode { source })?
            }
            Err(source) => return Err(SlotError::Encode { source }),
        };
        let p = copy_path(&self.dir, self.next_copy);
        log::info!(
            "slot: writing state generation {} to {}",
            rec.generation,
            p.display()
        );
        beneath::write_in_place(&self.root, &self.copy_rel(self.next_copy), &bytes).map_err(
            |source| SlotError::Io {
                path: p.clone(),
                source,
            },
        )?;
        log::info!("slot: state written");
        self.generation = rec.generation;
        self.next_copy = 1 - self.next_copy.min(1);
        Ok(())
    }
}

impl Store {
    /// Copy `i`'s path below `root`.
    fn copy_rel(&self, i: usize) -> PathBuf {
        copy_path(&self.rel, i)
    }
}

fn copy_path(dir: &Path, i: usize) -> PathBuf {
    let name = slotstate::COPIES.get(i).copied().unwrap_or("state.0");
    dir.join(name)
}

/// Reads both copies, creating them (zero-filled, fixed size) when the directory is new.
fn read_state(
    st: &Store,
    create: bool,
) -> Result<([Result<Record, StateError>; 2], bool), SlotError> {
    let dir = st.dir.as_path();
    let mut created = false;
    if !dir.exists() && !create {
        return Err(SlotError::NoRecord {
            dir: dir.to_path_buf(),
        });
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|source| SlotError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        created = true;
    }
    let read = |i: usize| -> Result<Record, StateError> {
        match beneath::read_limited(&st.root, &st.copy_rel(i), slotstate::FILE_SIZE as u64) {
            Ok(b) => slotstate::decode(&b),
            Err(e) => Err(StateError::Invalid(e.to_string())),
        }
    };
    for i in 0..2 {
        let p = copy_path(dir, i);
        // `symlink_metadata`: a dangling symlink is not a missing copy.
        if create && std::fs::symlink_metadata(&p).is_err() {
            let io = |source| SlotError::Io {
                path: p.clone(),
                source,
            };
            // O_EXCL: never through a symlink that appeared since.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(&p)
                .map_err(io)?;
            f.set_len(slotstate::FILE_SIZE as u64)
                .and_then(|()| f.sync_all())
                .map_err(io)?;
            created = true;
        }
    }
    Ok(([read(0), read(1)], created))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `create`, a missing directory is [`SlotError::NoRecord`] (the operator CLI
    /// tells it apart) and the record is never written; with it, both copies are made and
    /// writes alternate between them, the newest generation winning on the next open.
    #[test]
    fn missing_record_then_created_and_alternating() {
        let d = std::env::temp_dir().join(format!("vld-slot-record-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (mut st, created, e) = Store::open(d.clone(), false);
        let e = e.unwrap();
        assert!(matches!(e, SlotError::NoRecord { .. }), "{e:?}");
        assert!(e.to_string().starts_with("no state record at "), "{e}");
        assert!(!created && !st.ok);
        assert!(matches!(st.write(), Err(SlotError::RecordUnusable)));
        assert!(!d.exists());
        let (mut st, created, e) = Store::open(d.clone(), true);
        assert!(e.is_none() && created && st.ok && st.generation == 0);
        st.state.consecutive_failures = 2;
        st.write().unwrap();
        st.state.consecutive_failures = 3;
        st.write().unwrap();
        let (st, created, e) = Store::open(d.clone(), false);
        assert!(e.is_none() && !created);
        assert_eq!((st.generation, st.state.consecutive_failures), (2, 3));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

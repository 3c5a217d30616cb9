//! GRUB's A/B state ([`Grub`]): RAUC's variables `ORDER`, `A_OK`, `A_TRY`, `B_OK`, `B_TRY`
//! in the grubenv (`examples/grub/grub.cfg`), read and rewritten in place as GRUB's
//! `save_env` does.
//!
//! Contract: a grubenv that cannot be read or does not parse is never written (every
//! write then fails with [`SlotError::GrubenvUnusable`]); a slot is offered while
//! `X_OK=1` and `X_TRY=0`, as GRUB's `load_env` reads them (the last definition of a
//! variable wins). A write rewrites every definition of the variables it sets, is made
//! only when the new block gives them the wanted values as GRUB reads it, and is read
//! back from the file and compared the same way
//! ([`SlotError::GrubenvNotEffective`] otherwise). The grubenv is read and written
//! following no symlink on the ESP ([`crate::sys::beneath`]). The kexec command line is this boot's, since the configuration
//! gives every slot the same line.
//!
//! Current limits: two slots, `A` and `B`; the block keeps its size (no allocation).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{esp_path, loader::BootLoader, SlotError};
use crate::config::bom::{Slot, SlotName};
use crate::formats::grubenv::{self, GrubEnv};
use crate::sys::beneath;

/// The grubenv on the ESP.
#[derive(Debug)]
pub struct Grub {
    /// The ESP, and the grubenv's path below it (opened following no symlink).
    esp: PathBuf,
    rel: PathBuf,
    path: PathBuf,
    /// The parsed block; `None` when unusable (then never written).
    env: Option<GrubEnv>,
    /// The block before the last write (for [`BootLoader::undo`]).
    prev: Option<GrubEnv>,
}

impl Grub {
    /// Reads the grubenv `cfg` names on the ESP mounted at `esp_dir`.
    pub fn open(cfg: &Slot, esp_dir: &Path) -> (Grub, Option<SlotError>) {
        let path = esp_path(esp_dir, &cfg.grubenv);
        let (esp, rel) = (
            esp_dir.to_path_buf(),
            PathBuf::from(cfg.grubenv.trim_start_matches('/')),
        );
        match read_grubenv(&esp, &rel, &path) {
            Ok(env) => (
                Grub {
                    esp,
                    rel,
                    path,
                    env: Some(env),
                    prev: None,
                },
                None,
            ),
            Err(e) => (
                Grub {
                    esp,
                    rel,
                    path,
                    env: None,
                    prev: None,
                },
                Some(e),
            ),
        }
    }

    /// Sets `vars` (every definition of each, see [`GrubEnv::set`]) and writes the block
    /// back in place, only if GRUB's `load_env` would then read exactly these values; the
    /// file is read back and its effective values compared after the write.
    fn set(&mut self, vars: &[(String, &str)]) -> Result<(), SlotError> {
        let mut env = self.env.clone().ok_or(SlotError::GrubenvUnusable)?;
        for (k, v) in vars {
            env.set(k, v)
                .map_err(|source| SlotError::GrubenvSet { source })?;
        }
        // Before writing: the new block must say what we set, as GRUB reads it.
        effective(&self.path, &env, vars, false)?;
        log::info!("slot: writing {}", self.path.display());
        beneath::write_in_place(&self.esp, &self.rel, env.as_bytes()).map_err(|source| {
            SlotError::Io {
                path: self.path.clone(),
                source,
            }
        })?;
        // After: the file as GRUB will read it at the next boot.
        let back = read_grubenv(&self.esp, &self.rel, &self.path)?;
        effective(&self.path, &back, vars, true)?;
        self.prev = self.env.replace(env);
        Ok(())
    }
}

/// Whether `env` gives every variable in `vars` its value as GRUB's `load_env` reads it
/// (the last definition wins).
fn effective(
    path: &Path,
    env: &GrubEnv,
    vars: &[(String, &str)],
    written: bool,
) -> Result<(), SlotError> {
    for (k, v) in vars {
        let got = env.get(k);
        if got.as_deref() != Some(*v) {
            return Err(SlotError::GrubenvNotEffective {
                path: path.to_path_buf(),
                name: k.clone(),
                want: (*v).to_string(),
                got,
                written,
            });
        }
    }
    Ok(())
}

fn read_grubenv(esp: &Path, rel: &Path, p: &Path) -> Result<GrubEnv, SlotError> {
    let bytes = beneath::read_limited(esp, rel, grubenv::BLOCK_SIZE_MAX as u64)
        .map_err(|source| SlotError::GrubenvRead { source })?;
    GrubEnv::parse(&bytes).map_err(|source| SlotError::GrubenvParse {
        path: p.to_path_buf(),
        source,
    })
}

/// The slot the shipped `grub.cfg` boots next with `env`: the first word of `ORDER`
/// (default `A B`) that is `A` or `B` with `X_OK=1` and `X_TRY=0` (unset variables are
/// the configuration's defaults: `0`).
pub fn next_slot(env: &GrubEnv) -> Option<SlotName> {
    let order = env.get("ORDER").unwrap_or_else(|| "A B".to_string());
    order.split_whitespace().find_map(|w| {
        let s = match w {
            "A" => SlotName::A,
            "B" => SlotName::B,
            _ => return None,
        };
        let ok = env.get(&format!("{s}_OK"));
        let tried = env.get(&format!("{s}_TRY"));
        (ok.as_deref() == Some("1") && tried.as_deref().unwrap_or("0") == "0").then_some(s)
    })
}

fn grub_view(env: &GrubEnv) -> BTreeMap<String, String> {
    env.vars()
        .into_iter()
        .filter(|(k, _)| matches!(k.as_str(), "ORDER" | "A_OK" | "A_TRY" | "B_OK" | "B_TRY"))
        .collect()
}

impl BootLoader for Grub {
    fn view(&self) -> BTreeMap<String, String> {
        self.env.as_ref().map(grub_view).unwrap_or_default()
    }

    fn offers(&self, s: SlotName) -> bool {
        self.env.as_ref().is_some_and(|env| {
            env.get(&format!("{s}_OK")).as_deref() == Some("1")
                && env.get(&format!("{s}_TRY")).as_deref() == Some("0")
        })
    }

    fn mark(&mut self, s: SlotName, good: bool) -> Result<(), SlotError> {
        self.set(&[
            (format!("{s}_OK"), if good { "1" } else { "0" }),
            (format!("{s}_TRY"), "0"),
        ])
    }

    fn undo(&mut self) -> Result<bool, SlotError> {
        let Some(prev) = self.prev.take() else {
            return Ok(false);
        };
        log::info!("slot: restoring {}", self.path.display());
        beneath::write_in_place(&self.esp, &self.rel, prev.as_bytes()).map_err(|source| {
            SlotError::Io {
                path: self.path.clone(),
                source,
            }
        })?;
        self.env = Some(prev);
        Ok(true)
    }

    fn unbootable(&self) -> Option<SlotError> {
        let env = self.env.as_ref()?;
        if next_slot(env).is_some() {
            return None;
        }
        let v = |k: &str, default: &str| env.get(k).unwrap_or_else(|| default.to_string());
        Some(SlotError::NoBootableSlot {
            path: self.path.clone(),
            state: format!(
                "ORDER={:?} A_OK={} A_TRY={} B_OK={} B_TRY={}",
                v("ORDER", "A B"),
                v("A_OK", "0"),
                v("A_TRY", "0"),
                v("B_OK", "0"),
                v("B_TRY", "0")
            ),
        })
    }

    fn marked(&self, s: SlotName) -> Option<bool> {
        match self.env.as_ref()?.get(&format!("{s}_OK"))?.as_str() {
            "1" => Some(true),
            "0" => Some(false),
            _ => None,
        }
    }

    fn use_try(&mut self, s: SlotName) -> Result<(), SlotError> {
        self.set(&[(format!("{s}_TRY"), "1")])
    }

    fn give_back_try(&mut self, s: SlotName) -> Result<bool, SlotError> {
        self.set(&[(format!("{s}_TRY"), "0")]).map(|()| true)
    }

    fn demote_and_use_try(&mut self, x: SlotName, y: SlotName) -> Result<(), SlotError> {
        self.set(&[
            (format!("{x}_OK"), "0"),
            (format!("{x}_TRY"), "0"),
            (format!("{y}_TRY"), "1"),
        ])
    }
}

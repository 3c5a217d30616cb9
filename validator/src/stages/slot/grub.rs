//! GRUB's A/B state ([`Grub`]): RAUC's variables `ORDER`, `A_OK`, `A_TRY`, `B_OK`, `B_TRY`
//! in the grubenv (`examples/grub/grub.cfg`), read and rewritten in place as GRUB's
//! `save_env` does.
//!
//! Contract: a grubenv that cannot be read or does not parse is never written (every
//! write then fails with [`SlotError::GrubenvUnusable`]); a slot is offered while
//! `X_OK=1` and `X_TRY=0`. The kexec command line is this boot's, since the configuration
//! gives every slot the same line.
//!
//! Current limits: two slots, `A` and `B`; the block keeps its size (no allocation).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{esp, loader::BootLoader, SlotError};
use crate::config::bom::{Slot, SlotName};
use crate::formats::grubenv::{self, GrubEnv};
use crate::util::fs::{read_limited, write_in_place};

/// The grubenv on the ESP.
#[derive(Debug)]
pub struct Grub {
    path: PathBuf,
    /// The parsed block; `None` when unusable (then never written).
    env: Option<GrubEnv>,
}

impl Grub {
    /// Reads the grubenv `cfg` names on the ESP mounted at `esp_dir`.
    pub fn open(cfg: &Slot, esp_dir: &Path) -> (Grub, Option<SlotError>) {
        let path = esp::esp_path(esp_dir, &cfg.grubenv);
        match read_grubenv(&path) {
            Ok(env) => (
                Grub {
                    path,
                    env: Some(env),
                },
                None,
            ),
            Err(e) => (Grub { path, env: None }, Some(e)),
        }
    }

    fn set(&mut self, vars: &[(String, &str)]) -> Result<(), SlotError> {
        let env = self.env.as_mut().ok_or(SlotError::GrubenvUnusable)?;
        for (k, v) in vars {
            env.set(k, v)
                .map_err(|source| SlotError::GrubenvSet { source })?;
        }
        log::info!("slot: writing {}", self.path.display());
        write_in_place(&self.path, env.as_bytes()).map_err(|source| SlotError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

fn read_grubenv(p: &Path) -> Result<GrubEnv, SlotError> {
    let bytes = read_limited(p, grubenv::BLOCK_SIZE_MAX as u64)
        .map_err(|source| SlotError::GrubenvRead { source })?;
    GrubEnv::parse(&bytes).map_err(|source| SlotError::GrubenvParse {
        path: p.to_path_buf(),
        source,
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

    fn use_try(&mut self, s: SlotName) -> Result<(), SlotError> {
        self.set(&[(format!("{s}_TRY"), "1")])
    }
}

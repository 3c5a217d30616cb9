//! The BOM's `[report]` table: where the report goes besides the console and `/run`
//! (node_exporter's textfile directory, NFD's features directory and label namespace,
//! the pool label).
//!
//! Contract: [`ReportCfg::check`] refuses directories that are not absolute (or empty,
//! which turns an output off), a namespace NFD would not publish and a pool that is no
//! label value, each as a [`ReportCfgError`] variant naming the key and value; the BOM's
//! cross-checks put it on the `[report]` line.

use serde::{Deserialize, Serialize};

/// A `[report]` value the init could not use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportCfgError {
    #[error("{key} {value:?} is not an absolute path (or \"\")")]
    NotAbsolute { key: &'static str, value: String },
    #[error(
        "nfd_namespace {0:?} is not a label namespace NFD publishes (a lower-case DNS \
         subdomain outside kubernetes.io)"
    )]
    Namespace(String),
    #[error("pool {0:?} is not a label value (letters, digits, -_. inside, at most 63)")]
    Pool(String),
}

fn default_textfile_dir() -> String {
    "/var/lib/prometheus/node-exporter".into()
}
fn default_nfd_dir() -> String {
    "/etc/kubernetes/node-feature-discovery/features.d".into()
}
fn default_nfd_namespace() -> String {
    "validator.gpu-fleet.example".into()
}

/// Where the report goes besides the console and `/run` (`[report]`): directories are
/// paths in the new root, resolved as it will see them after `switch_root` (a directory
/// that is, or links into, `/run` is written in the `/run` the new root inherits); an
/// empty directory turns that output off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportCfg {
    /// node_exporter's textfile collector directory (`validator.prom`).
    #[serde(default = "default_textfile_dir")]
    pub textfile_dir: String,
    /// Node Feature Discovery's local features directory (`validator`).
    #[serde(default = "default_nfd_dir")]
    pub nfd_dir: String,
    /// The label namespace of the features (a DNS subdomain the fleet owns).
    #[serde(default = "default_nfd_namespace")]
    pub nfd_namespace: String,
    /// The node pool this image is built for: the `pool` label of the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

impl Default for ReportCfg {
    fn default() -> ReportCfg {
        ReportCfg {
            textfile_dir: default_textfile_dir(),
            nfd_dir: default_nfd_dir(),
            nfd_namespace: default_nfd_namespace(),
            pool: None,
        }
    }
}

impl ReportCfg {
    /// The checks the init relies on: absolute directories without `..`, a namespace NFD
    /// publishes, a pool that is a label value.
    pub fn check(&self) -> Result<(), ReportCfgError> {
        for (key, d) in [
            ("textfile_dir", &self.textfile_dir),
            ("nfd_dir", &self.nfd_dir),
        ] {
            if !d.is_empty()
                && (!d.starts_with('/')
                    || d.split('/').any(|c| c == "..")
                    || d.contains('\0')
                    || d.len() > 255)
            {
                return Err(ReportCfgError::NotAbsolute {
                    key,
                    value: d.clone(),
                });
            }
        }
        if !crate::formats::nfd::valid_namespace(&self.nfd_namespace) {
            return Err(ReportCfgError::Namespace(self.nfd_namespace.clone()));
        }
        if let Some(p) = &self.pool {
            if !crate::formats::nfd::valid_label_part(p) {
                return Err(ReportCfgError::Pool(p.clone()));
            }
        }
        Ok(())
    }
}

//! Layer 9: the one health report of a boot and the ways it leaves the node.
//!
//! - [`schema`]: the typed report, schema `validator.report/v2` ([`SCHEMA`]), built from
//!   the stages' [`crate::stages::Facts`] and outcomes; it derives `Serialize`,
//!   `Deserialize` and `JsonSchema` (the committed `docs/report.schema.json` is generated
//!   from these types). Fields are only ever added within a version; a v1 report reads
//!   into these types too (the new fields take their defaults).
//! - [`checks`]: the flat list of checks, derived from what each stage contributed.
//! - [`json`]: the JSON text, the file in `/run/validator/report.json` and its digest.
//! - [`console`]: the one short console line (at most [`console::LINE_MAX`] bytes, prefix
//!   [`console::PREFIX`]) and its parser for serial-console capture.
//! - [`prometheus`]: the text exposition file for node_exporter's textfile collector.
//! - [`nfd`]: the Node Feature Discovery local features file, and a parser of that format.
//! - [`publish`]: what the init does with all of these at the end of a boot.
//! - [`recheck`]: the node's report now, from the boot's and the preflight run again on
//!   the running node (`validator recheck`).
//! - [`timeline`]: the boot as an SVG timeline, for a person (the CLI; not the init).
//!
//! Only `boot` (and the CLI) use this layer.

pub mod checks;
pub mod console;
#[cfg(test)]
mod examples;
pub mod json;
pub mod nfd;
pub mod prometheus;
pub mod publish;
pub mod recheck;
pub mod schema;
pub mod timeline;

pub use crate::stages::{Decision, Fault};
pub use schema::{
    Check, CheckStatus, GpuCounts, Recheck, Report, StageReport, StageStatus, SCHEMA,
};

//! Judging one module before the kernel sees it: open it (a regular file only), map it
//! once, run the [`crate::gate::Gate`] over the mapped bytes (releasing the pages it has
//! hashed), and keep what the kernel is then given: the same open file (`finit_module`)
//! or, for a compression the kernel cannot read, the image the gate decompressed from the
//! judged bytes (`init_module`; with a gate, every compressed module: decompressed once).
//! A module can be judged ahead of its dependencies ([`Loader::judge_ahead`]): only an
//! uncompressed one, so nothing but the open file is held until its load.

use std::fs::File;
use std::time::Instant;

use super::{Loader, ModStatus, ModuleReport};
use crate::formats::kmod::modinfo::{self, Compression};
use crate::gate::batch::MODULE_FILE_MAX;
use crate::sys;
use crate::util::fs::{open_input, InputError};

/// A module ready for the kernel: the open file that was judged and, for a compressed
/// module, the image decompressed from the judged bytes (by the gate, or without one for
/// a compression the kernel cannot read).
#[derive(Debug)]
pub(super) struct Judged {
    pub file: File,
    pub image: Option<Vec<u8>>,
    /// The file is compressed (`finit_module`'s flag when the kernel is given it).
    pub compressed: bool,
    /// The kernel reads the file as it is (uncompressed, or a compression it has).
    pub kernel_reads: bool,
}

/// A module the gate passed ahead of its turn: the open file it judged and the report so
/// far (its start, the gate's time, signer and digest).
#[derive(Debug)]
pub(crate) struct Ahead {
    pub(super) judged: Judged,
    pub(super) report: ModuleReport,
}

/// `r` as a failure: the module could not be read or the kernel did not load it.
pub(super) fn failed(r: &mut ModuleReport, errno: Option<String>, message: String) {
    r.status = ModStatus::Failed;
    r.errno = errno;
    r.message = Some(message);
}

fn errno_of(e: &InputError) -> Option<String> {
    match e {
        InputError::Io { source, .. } => sys::io_errno_name(source),
        _ => None,
    }
}

impl Loader {
    /// Opens, maps and judges `rel` (for module `name`), filling in `r` what the gate
    /// found. Returns the module ready for the kernel, or `None` with `r` final: the file
    /// could not be read (`failed`) or the gate refused it (`rejected`, with its
    /// `duration_us` since `start`).
    pub(super) fn judge(
        &self,
        name: &str,
        rel: &str,
        r: &mut ModuleReport,
        start: Instant,
    ) -> Option<Judged> {
        let path = self.dir.join(rel);
        // A regular file only: a FIFO would block the open, a directory or a device is
        // no module.
        let file = match open_input(&path, false) {
            Ok(f) => f,
            Err(e) => {
                failed(r, errno_of(&e), format!("open {e}"));
                return None;
            }
        };
        let comp = Compression::from_name(rel);
        let kernel_reads = comp == Compression::None
            || self.kernel_compression().as_deref() == Some(comp.sysfs_name());
        let mut judged = Judged {
            file,
            image: None,
            compressed: comp != Compression::None,
            kernel_reads,
        };
        if self.gate.is_none() && kernel_reads {
            return Some(judged);
        }
        // Map the file once: the gate judges exactly the bytes the kernel is then given,
        // the same open file (`finit_module` on it) or, for a compressed module, the image
        // the gate decompressed from these bytes (`init_module`: decompressed once, and
        // the kernel does not decompress it again). Pages already hashed are released as
        // the gate goes, so PID 1's memory does not grow with the module.
        let map = match sys::mmap::Mapped::of(&judged.file, &path, MODULE_FILE_MAX) {
            Ok(m) => m,
            Err(e) => {
                failed(r, errno_of(&e), format!("read {e}"));
                return None;
            }
        };
        // A page that cannot be read must be an error here, not a SIGBUS in PID 1 when
        // the gate touches it.
        if let Err(e) = map.check_readable() {
            failed(
                r,
                Some("EIO".into()),
                format!("read {}: {e}", path.display()),
            );
            return None;
        }
        let raw = map.bytes();
        let release = |part: &[u8]| map.release(part);
        let Some(gate) = &self.gate else {
            match modinfo::decompress(raw, comp) {
                Ok(i) => judged.image = Some(i),
                Err(e) => {
                    failed(r, None, format!("{}: {e}", path.display()));
                    return None;
                }
            }
            return Some(judged);
        };
        let t = Instant::now();
        let (mut v, mut img) = gate.check_releasing(name, rel, raw, &release);
        if !v.pass && self.kernel_gained_digests(gate) {
            (v, img) = gate.check_releasing(name, rel, raw, &release);
        }
        r.gate_us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        r.signer = v.signer.clone();
        r.sig_key = v.sig_key.clone();
        r.sig_hashalgo = v.sig_hashalgo.clone();
        r.sha256 = v.image_sha256.clone();
        if !v.pass {
            r.status = ModStatus::Rejected;
            r.message = Some(v.summary());
            r.reasons = v.reasons;
            r.duration_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            return None;
        }
        if comp != Compression::None {
            judged.image = img.map(std::borrow::Cow::into_owned);
        }
        Some(judged)
    }

    /// Judges `rel` ahead of its dependencies (when the schedule says so): the module the
    /// gate passed, ready for its load, or `None` - no gate, a module already live, a
    /// compressed one (its image would be held until the load), a file that cannot be
    /// read or a refusal, each judged again when its turn comes (a refusal for a digest
    /// the kernel gains from an earlier module included).
    pub(super) fn judge_ahead(&self, name: &str, rel: &str) -> Option<Box<Ahead>> {
        self.gate.as_ref()?;
        if Compression::from_name(rel) != Compression::None {
            return None;
        }
        if self.is_live(name) {
            return None;
        }
        let mut report = ModuleReport::new(name, ModStatus::Loaded);
        report.start_us = sys::boottime_us().unwrap_or(0);
        report.path = Some(rel.to_string());
        let judged = self.judge(name, rel, &mut report, Instant::now())?;
        Some(Box::new(Ahead { judged, report }))
    }
}

//! `validator kernel info`, and the kernel image every command reads (`--vmlinuz`):
//! release, vermagic, exported symbols and built-in certificates of a kernel image.
//!
//! Contract: the image is read up to [`VMLINUZ_MAX`]; an unreadable or unparsable image
//! is unusable input (exit 2), named in the message.

use std::path::Path;

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::{Res, Usage};

/// Largest kernel image read (`--vmlinuz`).
pub(crate) use validator::formats::vmlinuz::VMLINUZ_MAX;

/// `validator kernel info --vmlinuz PATH`.
pub(crate) fn info(vmlinuz: &Path, out: &mut Out) -> Res {
    let k = load_kernel(vmlinuz)?;
    out.line(&format!("release {}", k.release))?;
    out.line(&format!(
        "vermagic {:?}",
        k.vermagic.as_deref().unwrap_or("")
    ))?;
    out.line(&format!("exported symbols {}", k.symvers().map.len()))?;
    out.line(&format!("built-in certificates {}", k.certs.len()))?;
    Ok(true)
}

pub(crate) fn load_kernel(path: &Path) -> Result<validator::formats::vmlinuz::KernelFacts, Usage> {
    let img = read_limited(path, VMLINUZ_MAX)?;
    validator::formats::vmlinuz::KernelFacts::from_image(&img)
        .map_err(|e| Usage(format!("{}: {e}", path.display())))
}

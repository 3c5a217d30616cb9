//! `validator bom check`: parse a BOM with every check the init makes
//! (`validator::config::bom::load`) and print its image id, digest and kernel.
//!
//! Contract: exit 0 when the BOM parses; a refused BOM is exit 2 with the file and line.

use std::path::Path;

use validator::util::out::Out;

use crate::Res;

/// `validator bom check FILE`.
pub(crate) fn check(file: &Path, out: &mut Out) -> Res {
    let b = validator::config::bom::load(file)?;
    out.line(&format!(
        "{} sha256:{} kernel {}",
        b.bom.image_id, b.sha256, b.bom.kernel.release
    ))?;
    Ok(true)
}

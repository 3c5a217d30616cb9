//! `validator keys extract`: the kernel's built-in trusted certificates, and the trust
//! store every command builds from `--trust` paths.
//!
//! Contract: every certificate is parsed before any is written (all or none); a key of
//! a type the trust store cannot use is skipped with a warning naming it. A `--trust`
//! path that adds no certificate is unusable input.

use std::path::{Path, PathBuf};

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::files::write_all_or_nothing;
use crate::kernel::VMLINUZ_MAX;
use crate::{Res, Usage};

/// `validator keys extract --vmlinuz PATH [-o DIR]`.
pub(crate) fn extract(path: &Path, dir: Option<PathBuf>, out: &mut Out) -> Res {
    let img = read_limited(path, VMLINUZ_MAX)?;
    let name = path.display().to_string();
    let elf =
        validator::formats::vmlinuz::vmlinux(&img).map_err(|e| Usage(format!("{name}: {e}")))?;
    let certs = validator::formats::vmlinuz::builtin_certs(&elf)
        .map_err(|e| Usage(format!("{name}: {e}")))?;
    // Parse every certificate before writing any, so a bad one leaves nothing behind. A
    // key of a type the trust store cannot use is skipped, with a warning naming it.
    let mut parsed = Vec::new();
    for (i, der) in certs.iter().enumerate() {
        match validator::trust::Cert::from_der(der, &format!("{name}: built-in certificate {i}")) {
            Ok(c) => parsed.push((i, c, der)),
            Err(e @ validator::trust::TrustError::UnsupportedKey { .. }) => {
                let e = validator::util::escape_controls(&e.to_string());
                eprintln!("validator: warning: {e}; skipped");
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut lines = Vec::new();
    let mut files = Vec::new();
    for (i, c, der) in &parsed {
        let fp = validator::util::hex(&c.sha256);
        lines.push(format!(
            "{} serial {} key {} sha256 {fp}",
            c.subject_cn,
            validator::trust::colon_hex(&c.serial),
            c.key.describe()
        ));
        files.push((
            format!("builtin-{i}-{}.der", fp.get(..16).unwrap_or(&fp)),
            der.as_slice(),
        ));
    }
    if let Some(dir) = dir {
        write_all_or_nothing(&dir, &files)?;
    }
    for l in lines {
        out.line(&l)?;
    }
    Ok(true)
}

/// The trust store of `--trust` paths; a path that adds no certificate (an empty
/// directory) is an error, not silently no trust.
pub(crate) fn trust_store(paths: &[PathBuf]) -> Result<validator::trust::TrustStore, Usage> {
    let mut store = validator::trust::TrustStore::new();
    for t in paths {
        if store.add_path(t)? == 0 {
            return Err(Usage(format!(
                "{}: no certificate (*.der, *.pem, *.crt, *.x509) in this directory",
                t.display()
            )));
        }
    }
    Ok(store)
}

//! `validator pe verify`: a PE image's Authenticode signature against given certificates
//! (`validator::trust::authenticode`), with the kernel's rule (`kexec_file_load`: the
//! first signature) or the firmware's (any signature).
//!
//! Contract: the image is read up to [`PE_MAX`]; one that is not a PE image, or whose
//! certificate table is malformed, is unusable input (exit 2); an unsigned image, a
//! signature that does not verify, an untrusted signer, a digest mismatch, a
//! forbidden digest or (`--rule firmware`) a certificate table whose entries do not end
//! exactly at its end, as EDK2 walks them (trailing bytes, an unpadded last entry: the
//! firmware refuses to start such an image), is a refusal (exit 1) with the reason.
//! `--cert` paths that add no certificate are unusable input.
//!
//! Revocation: `--forbid` digests, `--dbx` and `--mokx` signature lists and
//! `--running-firmware`'s `dbx`/`MokListXRT` refuse as [`validator::trust::revocation`]
//! says (exit 1, naming the list); `--sbat-level` (or the running firmware's
//! `SbatLevelRT`) judges the image's `.sbat` by shim's rule
//! ([`validator::formats::sbat`]). A list or level file that does not parse is unusable
//! input (exit 2) naming the file; so is `--running-firmware` when the firmware's lists
//! could not be read.

use std::path::Path;

use validator::formats::{efisiglist, sbat};
use validator::trust::authenticode::{self, AuthenticodeError, Rule};
use validator::trust::revocation::Revocations;
use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::cli::{PeRule, PeVerify};
use crate::{Res, Usage};

/// The largest image read (a kernel with an embedded initramfs fits).
pub(crate) const PE_MAX: u64 = 256 << 20;

/// `validator pe verify --cert CERT... [--forbid SHA256]... [--rule R] IMAGE`.
pub(crate) fn verify(a: PeVerify, out: &mut Out) -> Res {
    let store = crate::keys::trust_store(&a.certs)?;
    let mut forbidden = Revocations {
        name: "--forbid".into(),
        ..Revocations::default()
    };
    for f in &a.forbid {
        let b = validator::util::unhex(f)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| Usage(format!("--forbid {f:?}: not a SHA-256 digest in hex")))?;
        forbidden.image_sha256.push(b);
    }
    let mut lists = vec![forbidden];
    for (flag, path) in [("--dbx", &a.dbx), ("--mokx", &a.mokx)] {
        if let Some(p) = path {
            lists.push(signature_list(flag, p)?);
        }
    }
    let mut level = match &a.sbat_level {
        Some(p) => Some(sbat_level(p)?),
        None => None,
    };
    if a.running_firmware {
        let keys = validator::runtime::uefi_keys::read(Path::new("/sys"));
        if !keys.notes.is_empty() {
            return Err(Usage(format!(
                "--running-firmware: {}",
                keys.notes.join("; ")
            )));
        }
        lists.push(keys.dbx);
        lists.push(keys.mokx);
        if level.is_none() {
            level = keys.sbat_level;
        }
    }
    let image = read_limited(&a.image, PE_MAX)?;
    let name = a.image.display().to_string();
    let rule = match a.rule {
        PeRule::Kernel => Rule::Kernel,
        PeRule::Firmware => Rule::Firmware,
    };
    match authenticode::verify(&image, &store, &lists, rule) {
        Ok(c) => {
            let mut line = format!(
                "{name}: signature {} verified ({}), trusted through {}",
                c.index,
                c.digest.name(),
                c.anchor
            );
            if let Some(level) = &level {
                let loaded = match rule {
                    Rule::Kernel => sbat::Loaded::ThroughProtocol,
                    Rule::Firmware => sbat::Loaded::ByShim,
                };
                if let Err(e) = sbat::judge_pe(&image, level, loaded) {
                    out.line(&format!("{name}: refused: {e}"))?;
                    return Ok(false);
                }
                line.push_str(&format!("; SBAT passes the level {level}"));
            }
            out.line(&line)?;
            Ok(true)
        }
        Err(AuthenticodeError::Pe(e @ validator::formats::pe::PeError::Unsigned)) => {
            out.line(&format!("{name}: refused: {e}"))?;
            Ok(false)
        }
        Err(AuthenticodeError::Pe(e)) => Err(Usage(format!("{name}: {e}"))),
        Err(e) => {
            out.line(&format!("{name}: refused: {e}"))?;
            Ok(false)
        }
    }
}

/// The largest signature list or level file read.
const LIST_MAX: u64 = 1 << 20;

/// A revocation list from `path`: EFI signature lists, or an efivarfs file (four
/// attribute bytes, then the lists).
fn signature_list(flag: &str, path: &Path) -> Result<Revocations, Usage> {
    let b = read_limited(path, LIST_MAX)?;
    let db = efisiglist::parse(&b)
        .or_else(|first| {
            b.get(4..)
                .filter(|_| b.len() > 4)
                .ok_or(first.clone())
                .and_then(|rest| efisiglist::parse(rest).map_err(|_| first))
        })
        .map_err(|e| Usage(format!("{flag} {}: {e}", path.display())))?;
    let r = Revocations::from_database(&format!("{flag} {}", path.display()), &db);
    if let Some(n) = r.notes.first() {
        return Err(Usage(format!("{flag} {}: {n}", path.display())));
    }
    Ok(r)
}

/// An SBAT level from `path`: its text, or an efivarfs file (four attribute bytes, then
/// the text).
fn sbat_level(path: &Path) -> Result<sbat::Level, Usage> {
    let b = read_limited(path, LIST_MAX)?;
    let text = match b.get(4..) {
        Some(rest) if !b.starts_with(b"sbat,") && rest.starts_with(b"sbat,") => rest,
        _ => b.as_slice(),
    };
    let level = sbat::Level::parse(text)
        .map_err(|e| Usage(format!("--sbat-level {}: {e}", path.display())))?;
    if level.records.is_empty() {
        // Shim never holds an empty level; an empty file is a mistake, not "no revocation".
        return Err(Usage(format!(
            "--sbat-level {}: holds no SBAT record (a level starts with sbat,1,DATE)",
            path.display()
        )));
    }
    Ok(level)
}

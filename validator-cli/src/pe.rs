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

use validator::trust::authenticode::{self, AuthenticodeError, Rule};
use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::cli::{PeRule, PeVerify};
use crate::{Res, Usage};

/// The largest image read (a kernel with an embedded initramfs fits).
pub(crate) const PE_MAX: u64 = 256 << 20;

/// `validator pe verify --cert CERT... [--forbid SHA256]... [--rule R] IMAGE`.
pub(crate) fn verify(a: PeVerify, out: &mut Out) -> Res {
    let store = crate::keys::trust_store(&a.certs)?;
    let mut forbidden = Vec::new();
    for f in &a.forbid {
        let b = validator::util::unhex(f)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| Usage(format!("--forbid {f:?}: not a SHA-256 digest in hex")))?;
        forbidden.push(b);
    }
    let image = read_limited(&a.image, PE_MAX)?;
    let name = a.image.display().to_string();
    let rule = match a.rule {
        PeRule::Kernel => Rule::Kernel,
        PeRule::Firmware => Rule::Firmware,
    };
    match authenticode::verify(&image, &store, &forbidden, rule) {
        Ok(c) => {
            out.line(&format!(
                "{name}: signature {} verified ({}), trusted through {}",
                c.index,
                c.digest.name(),
                c.anchor
            ))?;
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

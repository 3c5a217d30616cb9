//! The appended module signature: `body || signature || struct module_signature ||
//! "~Module signature appended~\n"`, as `scripts/sign-file` writes it and
//! `kernel/module/signing.c` reads it. Pure parsing; the PKCS#7 check is in [`crate::formats::pkcs7`].

/// The trailer every signed module ends with.
pub const MAGIC: &[u8] = b"~Module signature appended~\n";
/// `PKEY_ID_PKCS7`: the only signature type the kernel accepts.
pub const PKEY_ID_PKCS7: u8 = 2;

/// `struct module_signature` (12 bytes, `sig_len` big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleSignature {
    pub algo: u8,
    pub hash: u8,
    pub id_type: u8,
    pub signer_len: u8,
    pub key_id_len: u8,
    pub sig_len: u32,
}

/// A signed module split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split<'a> {
    /// What the signature covers (the module without the signature).
    pub body: &'a [u8],
    /// The DER PKCS#7 signature.
    pub pkcs7: &'a [u8],
    pub info: ModuleSignature,
}

/// Why a signature trailer is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("module is not signed (no \"~Module signature appended~\" trailer)")]
    Unsigned,
    #[error("signature trailer truncated")]
    Truncated,
    #[error(
        "signature length {sig_len} exceeds the module ({available} bytes before the trailer)"
    )]
    BadLength { sig_len: u32, available: usize },
    #[error("signature type {0} is not PKCS#7")]
    NotPkcs7(u8),
    #[error("PKCS#7 signature trailer has non-zero algo/hash/signer/key-id/padding fields")]
    BadFields,
}

/// Splits a module as the kernel's `mod_check_sig` does.
pub fn split(module: &[u8]) -> Result<Split<'_>, SigError> {
    let Some(rest) = module.strip_suffix(MAGIC) else {
        return Err(SigError::Unsigned);
    };
    if rest.len() < 12 {
        return Err(SigError::Truncated);
    }
    let (head, ms) = rest.split_at(rest.len() - 12);
    let info = ModuleSignature {
        algo: ms[0],
        hash: ms[1],
        id_type: ms[2],
        signer_len: ms[3],
        key_id_len: ms[4],
        sig_len: u32::from_be_bytes([ms[8], ms[9], ms[10], ms[11]]),
    };
    let sig_len = info.sig_len as usize;
    if sig_len == 0 || sig_len > head.len() {
        return Err(SigError::BadLength {
            sig_len: info.sig_len,
            available: head.len(),
        });
    }
    if info.id_type != PKEY_ID_PKCS7 {
        return Err(SigError::NotPkcs7(info.id_type));
    }
    if info.algo != 0
        || info.hash != 0
        || info.signer_len != 0
        || info.key_id_len != 0
        || ms[5..8] != [0, 0, 0]
    {
        return Err(SigError::BadFields);
    }
    let (body, pkcs7) = head.split_at(head.len() - sig_len);
    Ok(Split { body, pkcs7, info })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(body: &[u8], sig: &[u8]) -> Vec<u8> {
        let mut v = body.to_vec();
        v.extend_from_slice(sig);
        v.extend_from_slice(&[0, 0, 2, 0, 0, 0, 0, 0]);
        v.extend_from_slice(&(sig.len() as u32).to_be_bytes());
        v.extend_from_slice(MAGIC);
        v
    }

    #[test]
    fn splits_and_refuses() {
        let m = signed(b"ELFBODY", b"SIG");
        let s = split(&m).unwrap();
        assert_eq!((s.body, s.pkcs7), (&b"ELFBODY"[..], &b"SIG"[..]));
        assert_eq!(split(b"ELFBODY"), Err(SigError::Unsigned));
        assert_eq!(split(MAGIC), Err(SigError::Truncated));
        let mut bad = m.clone();
        let n = bad.len() - MAGIC.len() - 1;
        bad[n] = 200; // sig_len low byte
        assert!(matches!(split(&bad), Err(SigError::BadLength { .. })));
        let mut bad = m.clone();
        let n = bad.len() - MAGIC.len() - 10;
        bad[n] = 1; // id_type
        assert_eq!(split(&bad), Err(SigError::NotPkcs7(1)));
        let mut bad = m;
        let n = bad.len() - MAGIC.len() - 12;
        bad[n] = 1; // algo
        assert_eq!(split(&bad), Err(SigError::BadFields));
    }
}

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
        "signature length {sig_len} leaves no module body ({available} bytes before the trailer)"
    )]
    BadLength { sig_len: u32, available: usize },
    #[error("signature length is 0: the trailer announces no PKCS#7 signature")]
    EmptySignature,
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
    let Some((head, ms)) = rest.split_last_chunk::<12>() else {
        return Err(SigError::Truncated);
    };
    let [algo, hash, id_type, signer_len, key_id_len, p0, p1, p2, l0, l1, l2, l3] = *ms;
    let info = ModuleSignature {
        algo,
        hash,
        id_type,
        signer_len,
        key_id_len,
        sig_len: u32::from_be_bytes([l0, l1, l2, l3]),
    };
    let sig_len = info.sig_len as usize;
    // mod_check_sig: the signature may not take the whole body (`>=`).
    if sig_len >= head.len() {
        return Err(SigError::BadLength {
            sig_len: info.sig_len,
            available: head.len(),
        });
    }
    if info.id_type != PKEY_ID_PKCS7 {
        return Err(SigError::NotPkcs7(info.id_type));
    }
    if algo != 0 || hash != 0 || signer_len != 0 || key_id_len != 0 || [p0, p1, p2] != [0; 3] {
        return Err(SigError::BadFields);
    }
    // Passes mod_check_sig; the kernel's PKCS#7 parser then refuses 0 bytes.
    if sig_len == 0 {
        return Err(SigError::EmptySignature);
    }
    let Some((body, pkcs7)) = head.split_at_checked(head.len() - sig_len) else {
        return Err(SigError::Truncated);
    };
    Ok(Split { body, pkcs7, info })
}

/// `body` signed with `sig` as `sign-file` appends it (for tests).
#[cfg(test)]
pub(crate) fn signed(body: &[u8], sig: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(sig);
    v.extend_from_slice(&[0, 0, 2, 0, 0, 0, 0, 0]);
    v.extend_from_slice(&u32::try_from(sig.len()).unwrap_or(u32::MAX).to_be_bytes());
    v.extend_from_slice(MAGIC);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut bad = m.clone();
        let n = bad.len() - MAGIC.len() - 12;
        bad[n] = 1; // algo
        assert_eq!(split(&bad), Err(SigError::BadFields));
        // sig_len 0: its own message, not "exceeds".
        let empty = signed(b"ELFBODY", b"");
        assert_eq!(split(&empty), Err(SigError::EmptySignature));
        assert_eq!(
            SigError::EmptySignature.to_string(),
            "signature length is 0: the trailer announces no PKCS#7 signature"
        );
        // sig_len equal to everything before the trailer leaves no body (kernel: >=).
        let whole = signed(b"", b"SIG");
        assert!(matches!(
            split(&whole),
            Err(SigError::BadLength {
                sig_len: 3,
                available: 3
            })
        ));
    }
}

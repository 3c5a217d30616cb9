//! TPM 2.0 wire format: the fixed header (zerocopy), a command builder, a response
//! reader, response-code names. Everything is big-endian (TPM 2.0 Part 1 §18).

use std::fmt;

use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::TpmError;

/// `TPM_ST_NO_SESSIONS`.
pub(crate) const ST_NO_SESSIONS: u16 = 0x8001;
/// `TPM_ST_SESSIONS`.
pub(crate) const ST_SESSIONS: u16 = 0x8002;
/// `TPM_ST_RSP_COMMAND`: the TPM 1.2 tag a TPM 2.0 uses to answer `TPM_RC_BAD_TAG`.
const ST_RSP_COMMAND: u16 = 0x00C4;

/// Header size of every command and response.
pub(crate) const HEADER_LEN: usize = 10;
/// Largest response we accept (TPM buffers are 4 KiB; leave room).
pub(crate) const RESPONSE_MAX: usize = 64 * 1024;

/// The 10-byte header: tag, size of the whole command or response, command or response
/// code.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub(crate) struct Header {
    pub tag: U16,
    pub size: U32,
    pub code: U32,
}

/// Size field of a complete response or command; `None` if shorter than a header.
pub(crate) fn header_size(bytes: &[u8]) -> Option<usize> {
    let (h, _) = Header::read_from_prefix(bytes).ok()?;
    usize::try_from(h.size.get()).ok()
}

/// Builds one command: header first, size filled in by [`CommandBuf::finish`].
#[derive(Debug)]
pub(crate) struct CommandBuf {
    buf: Vec<u8>,
}

impl CommandBuf {
    pub fn new(tag: u16, command_code: u32) -> CommandBuf {
        let h = Header {
            tag: U16::new(tag),
            size: U32::new(0),
            code: U32::new(command_code),
        };
        CommandBuf {
            buf: h.as_bytes().to_vec(),
        }
    }

    /// A builder for a structure on its own (no header): [`CommandBuf::into_bytes`].
    pub fn structure() -> CommandBuf {
        CommandBuf { buf: Vec::new() }
    }

    /// The bytes of a [`CommandBuf::structure`].
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    #[cfg(test)]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A `TPM2B_*`: u16 size, then the bytes. The callers' buffers are TPM-sized (a
    /// few KiB at most); a longer one saturates the size and fails at the TPM.
    pub fn tpm2b(&mut self, v: &[u8]) -> &mut Self {
        self.u16(u16::try_from(v.len()).unwrap_or(u16::MAX));
        self.bytes(v)
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    pub fn finish(mut self) -> Vec<u8> {
        // Commands are a few hundred bytes at most; saturate rather than wrap.
        let size = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        if let Some(field) = self.buf.get_mut(2..6) {
            field.copy_from_slice(&size.to_be_bytes());
        }
        self.buf
    }
}

/// Checks a response's framing and code: at least a header, size field equal to the
/// bytes received, success with the `expect_tag`, or an error code (any valid tag).
/// Returns the bytes after the header.
pub(crate) fn check_response<'a>(
    command: &'static str,
    expect_tag: u16,
    resp: &'a [u8],
) -> Result<&'a [u8], TpmError> {
    let bad = |why: String| TpmError::BadResponse { command, why };
    let Ok((h, rest)) = Header::read_from_prefix(resp) else {
        return Err(bad(format!(
            "{} bytes, shorter than the {HEADER_LEN}-byte header",
            resp.len()
        )));
    };
    let size = h.size.get();
    if usize::try_from(size).ok() != Some(resp.len()) {
        return Err(bad(format!(
            "size field says {size} bytes, received {}",
            resp.len()
        )));
    }
    let tag = h.tag.get();
    let rc = h.code.get();
    if rc != 0 {
        if ![ST_NO_SESSIONS, ST_SESSIONS, ST_RSP_COMMAND].contains(&tag) {
            return Err(bad(format!(
                "tag {tag:#06x} with response code {}",
                ResponseCode(rc)
            )));
        }
        return Err(TpmError::Rc {
            command,
            rc: ResponseCode(rc),
        });
    }
    if tag != expect_tag {
        return Err(bad(format!(
            "tag {tag:#06x}, expected {expect_tag:#06x} ({})",
            if expect_tag == ST_SESSIONS {
                "TPM_ST_SESSIONS"
            } else {
                "TPM_ST_NO_SESSIONS"
            }
        )));
    }
    Ok(rest)
}

/// Reads the parameters of a response, naming the command and offset on truncation.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    command: &'static str,
    buf: &'a [u8],
    pos: usize,
    /// Added to offsets in messages: the header's length for a response, 0 for a
    /// structure read on its own ([`Reader::structure`]).
    base: usize,
    /// Whether errors are [`TpmError::BadResponse`] (a response) or
    /// [`TpmError::Malformed`] (a structure from a file or another party).
    response: bool,
}

impl<'a> Reader<'a> {
    /// `body` is what follows the header; offsets are reported from the response start.
    pub fn new(command: &'static str, body: &'a [u8]) -> Reader<'a> {
        Reader {
            command,
            buf: body,
            pos: 0,
            base: HEADER_LEN,
            response: true,
        }
    }

    /// Reads a structure on its own (a quote, a public area from a file): offsets count
    /// from its first byte and errors are [`TpmError::Malformed`] naming `what`.
    pub fn structure(what: &'static str, bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            command: what,
            buf: bytes,
            pos: 0,
            base: 0,
            response: false,
        }
    }

    /// The error for this reader's input.
    pub fn error(&self, why: String) -> TpmError {
        if self.response {
            TpmError::BadResponse {
                command: self.command,
                why,
            }
        } else {
            TpmError::Malformed {
                what: self.command,
                why,
            }
        }
    }

    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], TpmError> {
        let left = self.buf.len().saturating_sub(self.pos);
        let Some(s) = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
        else {
            return Err(self.error(format!(
                "truncated at byte {}: {what} needs {n} bytes, {left} left",
                self.offset()
            )));
        };
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], TpmError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, what)?);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, TpmError> {
        let [b] = self.array(what)?;
        Ok(b)
    }

    pub fn u16(&mut self, what: &str) -> Result<u16, TpmError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, TpmError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &str) -> Result<u64, TpmError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// A `TPM2B_*`: u16 size, then the bytes.
    pub fn tpm2b(&mut self, what: &str) -> Result<&'a [u8], TpmError> {
        let n = self.u16(what)?;
        self.bytes(usize::from(n), what)
    }

    /// Offset from the response's (or the structure's) start, for messages.
    pub fn offset(&self) -> usize {
        self.pos + self.base
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Bytes read so far.
    pub fn consumed(&self) -> &'a [u8] {
        self.buf.get(..self.pos).unwrap_or_default()
    }

    /// Every byte must have been consumed.
    pub fn finish(&self) -> Result<(), TpmError> {
        let left = self.buf.len() - self.pos;
        if left != 0 {
            return Err(self.error(format!("{left} unexpected bytes at byte {}", self.offset())));
        }
        Ok(())
    }
}

/// A TPM response code (`TPM_RC`), shown by name and hex: `TPM_RC_LOCALITY (0x907)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResponseCode(pub u32);

impl ResponseCode {
    pub const SUCCESS: ResponseCode = ResponseCode(0);
    pub const INITIALIZE: ResponseCode = ResponseCode(0x100);
    pub const FAILURE: ResponseCode = ResponseCode(0x101);
    pub const LOCALITY: ResponseCode = ResponseCode(0x907);
    pub const YIELDED: ResponseCode = ResponseCode(0x908);
    pub const TESTING: ResponseCode = ResponseCode(0x90A);
    pub const RETRY: ResponseCode = ResponseCode(0x922);

    /// Whether the TPM asks to send the same command again later.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::RETRY | Self::YIELDED | Self::TESTING)
    }

    /// The name from TPM 2.0 Part 2 §6.6, with the handle, parameter or session number
    /// of format-1 codes (`TPM_RC_VALUE (parameter 1)`); a generic description for codes
    /// without a name.
    pub fn name(self) -> String {
        let rc = self.0;
        let layer = (rc >> 16) & 0xFF;
        let low = rc & 0xFFFF;
        let base = if rc >> 24 != 0 {
            return "unknown response code".to_string();
        } else if low & 0x080 != 0 {
            // Format 1: error number in bits 0-5, then P (bit 6), N (bits 8-11).
            let n = (low >> 8) & 0xF;
            let name = fmt1_name(0x080 | (low & 0x3F));
            let which = if low & 0x040 != 0 {
                format!(" (parameter {n})")
            } else if n & 0x8 != 0 {
                format!(" (session {})", n & 0x7)
            } else if n != 0 {
                format!(" (handle {n})")
            } else {
                String::new()
            };
            format!("{}{which}", name.unwrap_or("TPM_RC format-1 error"))
        } else if low == 0 {
            "TPM_RC_SUCCESS".to_string()
        } else if low & 0x100 == 0 {
            match low {
                0x01E => "TPM_RC_BAD_TAG".to_string(),
                _ => "TPM 1.2 response code".to_string(),
            }
        } else if low & 0x400 != 0 {
            "vendor-defined response code".to_string()
        } else {
            fmt0_name(low)
                .unwrap_or(if low & 0x800 != 0 {
                    "TPM_RC warning"
                } else {
                    "TPM_RC error"
                })
                .to_string()
        };
        match layer {
            0 => base,
            11 => format!("resource manager: {base}"),
            12 => format!("resource manager (TPM): {base}"),
            l => format!("TSS layer {l}: {base}"),
        }
    }
}

impl fmt::Display for ResponseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#05x})", self.name(), self.0)
    }
}

fn fmt0_name(rc: u32) -> Option<&'static str> {
    Some(match rc {
        0x100 => "TPM_RC_INITIALIZE",
        0x101 => "TPM_RC_FAILURE",
        0x103 => "TPM_RC_SEQUENCE",
        0x10B => "TPM_RC_PRIVATE",
        0x119 => "TPM_RC_HMAC",
        0x120 => "TPM_RC_DISABLED",
        0x121 => "TPM_RC_EXCLUSIVE",
        0x124 => "TPM_RC_AUTH_TYPE",
        0x125 => "TPM_RC_AUTH_MISSING",
        0x126 => "TPM_RC_POLICY",
        0x127 => "TPM_RC_PCR",
        0x128 => "TPM_RC_PCR_CHANGED",
        0x12D => "TPM_RC_UPGRADE",
        0x12E => "TPM_RC_TOO_MANY_CONTEXTS",
        0x12F => "TPM_RC_AUTH_UNAVAILABLE",
        0x130 => "TPM_RC_REBOOT",
        0x131 => "TPM_RC_UNBALANCED",
        0x142 => "TPM_RC_COMMAND_SIZE",
        0x143 => "TPM_RC_COMMAND_CODE",
        0x144 => "TPM_RC_AUTHSIZE",
        0x145 => "TPM_RC_AUTH_CONTEXT",
        0x146 => "TPM_RC_NV_RANGE",
        0x147 => "TPM_RC_NV_SIZE",
        0x148 => "TPM_RC_NV_LOCKED",
        0x149 => "TPM_RC_NV_AUTHORIZATION",
        0x14A => "TPM_RC_NV_UNINITIALIZED",
        0x14B => "TPM_RC_NV_SPACE",
        0x14C => "TPM_RC_NV_DEFINED",
        0x150 => "TPM_RC_BAD_CONTEXT",
        0x151 => "TPM_RC_CPHASH",
        0x152 => "TPM_RC_PARENT",
        0x153 => "TPM_RC_NEEDS_TEST",
        0x154 => "TPM_RC_NO_RESULT",
        0x155 => "TPM_RC_SENSITIVE",
        0x901 => "TPM_RC_CONTEXT_GAP",
        0x902 => "TPM_RC_OBJECT_MEMORY",
        0x903 => "TPM_RC_SESSION_MEMORY",
        0x904 => "TPM_RC_MEMORY",
        0x905 => "TPM_RC_SESSION_HANDLES",
        0x906 => "TPM_RC_OBJECT_HANDLES",
        0x907 => "TPM_RC_LOCALITY",
        0x908 => "TPM_RC_YIELDED",
        0x909 => "TPM_RC_CANCELED",
        0x90A => "TPM_RC_TESTING",
        0x910 => "TPM_RC_REFERENCE_H0",
        0x911 => "TPM_RC_REFERENCE_H1",
        0x912 => "TPM_RC_REFERENCE_H2",
        0x913 => "TPM_RC_REFERENCE_H3",
        0x914 => "TPM_RC_REFERENCE_H4",
        0x915 => "TPM_RC_REFERENCE_H5",
        0x916 => "TPM_RC_REFERENCE_H6",
        0x918 => "TPM_RC_REFERENCE_S0",
        0x919 => "TPM_RC_REFERENCE_S1",
        0x91A => "TPM_RC_REFERENCE_S2",
        0x91B => "TPM_RC_REFERENCE_S3",
        0x91C => "TPM_RC_REFERENCE_S4",
        0x91D => "TPM_RC_REFERENCE_S5",
        0x91E => "TPM_RC_REFERENCE_S6",
        0x920 => "TPM_RC_NV_RATE",
        0x921 => "TPM_RC_LOCKOUT",
        0x922 => "TPM_RC_RETRY",
        0x923 => "TPM_RC_NV_UNAVAILABLE",
        0x97F => "TPM_RC_NOT_USED",
        _ => return None,
    })
}

fn fmt1_name(rc: u32) -> Option<&'static str> {
    Some(match rc {
        0x081 => "TPM_RC_ASYMMETRIC",
        0x082 => "TPM_RC_ATTRIBUTES",
        0x083 => "TPM_RC_HASH",
        0x084 => "TPM_RC_VALUE",
        0x085 => "TPM_RC_HIERARCHY",
        0x087 => "TPM_RC_KEY_SIZE",
        0x088 => "TPM_RC_MGF",
        0x089 => "TPM_RC_MODE",
        0x08A => "TPM_RC_TYPE",
        0x08B => "TPM_RC_HANDLE",
        0x08C => "TPM_RC_KDF",
        0x08D => "TPM_RC_RANGE",
        0x08E => "TPM_RC_AUTH_FAIL",
        0x08F => "TPM_RC_NONCE",
        0x090 => "TPM_RC_PP",
        0x092 => "TPM_RC_SCHEME",
        0x095 => "TPM_RC_SIZE",
        0x096 => "TPM_RC_SYMMETRIC",
        0x097 => "TPM_RC_TAG",
        0x098 => "TPM_RC_SELECTOR",
        0x09A => "TPM_RC_INSUFFICIENT",
        0x09B => "TPM_RC_SIGNATURE",
        0x09C => "TPM_RC_KEY",
        0x09D => "TPM_RC_POLICY_FAIL",
        0x09F => "TPM_RC_INTEGRITY",
        0x0A0 => "TPM_RC_TICKET",
        0x0A1 => "TPM_RC_RESERVED_BITS",
        0x0A2 => "TPM_RC_BAD_AUTH",
        0x0A3 => "TPM_RC_EXPIRED",
        0x0A4 => "TPM_RC_POLICY_CC",
        0x0A5 => "TPM_RC_BINDING",
        0x0A6 => "TPM_RC_CURVE",
        0x0A7 => "TPM_RC_ECC_POINT",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        assert_eq!(std::mem::size_of::<Header>(), HEADER_LEN);
        let mut c = CommandBuf::new(ST_NO_SESSIONS, 0x144);
        c.u16(0);
        assert_eq!(
            c.finish(),
            [0x80, 0x01, 0, 0, 0, 0x0C, 0, 0, 0x01, 0x44, 0, 0]
        );
        assert_eq!(header_size(&[0x80, 1, 0, 0, 0, 10, 0, 0, 0, 0]), Some(10));
        assert_eq!(header_size(&[0x80, 1, 0]), None);
    }

    #[test]
    fn response_code_names() {
        let cases: &[(u32, &str)] = &[
            (0x000, "TPM_RC_SUCCESS (0x000)"),
            (0x100, "TPM_RC_INITIALIZE (0x100)"),
            (0x101, "TPM_RC_FAILURE (0x101)"),
            (0x922, "TPM_RC_RETRY (0x922)"),
            (0x908, "TPM_RC_YIELDED (0x908)"),
            (0x90A, "TPM_RC_TESTING (0x90a)"),
            (0x907, "TPM_RC_LOCALITY (0x907)"),
            (0x084, "TPM_RC_VALUE (0x084)"),
            (0x1C4, "TPM_RC_VALUE (parameter 1) (0x1c4)"),
            (0x2C4, "TPM_RC_VALUE (parameter 2) (0x2c4)"),
            (0x18B, "TPM_RC_HANDLE (handle 1) (0x18b)"),
            (0x98E, "TPM_RC_AUTH_FAIL (session 1) (0x98e)"),
            (0x9A2, "TPM_RC_BAD_AUTH (session 1) (0x9a2)"),
            (0x1C3, "TPM_RC_HASH (parameter 1) (0x1c3)"),
            (0x01E, "TPM_RC_BAD_TAG (0x01e)"),
            (0x143, "TPM_RC_COMMAND_CODE (0x143)"),
            (0x17F, "TPM_RC error (0x17f)"),
            (0x97E, "TPM_RC warning (0x97e)"),
            (0x500, "vendor-defined response code (0x500)"),
            (0x0B_0922, "resource manager: TPM_RC_RETRY (0xb0922)"),
            (0x0A_000A, "TSS layer 10: TPM 1.2 response code (0xa000a)"),
        ];
        for &(rc, want) in cases {
            assert_eq!(ResponseCode(rc).to_string(), want, "{rc:#x}");
        }
        assert!(ResponseCode(0x922).is_retryable());
        assert!(ResponseCode(0x908).is_retryable());
        assert!(ResponseCode(0x90A).is_retryable());
        assert!(!ResponseCode(0x907).is_retryable());
        assert!(!ResponseCode(0x0B_0922).is_retryable());
    }

    #[test]
    fn check_response_framing() {
        let ok = [0x80, 0x01, 0, 0, 0, 12, 0, 0, 0, 0, 0xAB, 0xCD];
        assert_eq!(
            check_response("X", ST_NO_SESSIONS, &ok).unwrap(),
            &[0xAB, 0xCD]
        );
        // Wrong tag for a success.
        let e = check_response("X", ST_SESSIONS, &ok).unwrap_err();
        assert!(e.to_string().contains("tag 0x8001"), "{e}");
        // Size field lies (both ways).
        let mut lie = ok;
        lie[5] = 13;
        let e = check_response("X", ST_NO_SESSIONS, &lie).unwrap_err();
        assert_eq!(
            e.to_string(),
            "X: malformed response: size field says 13 bytes, received 12"
        );
        lie[5] = 11;
        assert!(check_response("X", ST_NO_SESSIONS, &lie).is_err());
        // Shorter than a header.
        let e = check_response("X", ST_NO_SESSIONS, &ok[..9]).unwrap_err();
        assert!(e.to_string().contains("shorter than the 10-byte header"));
        assert!(check_response("X", ST_NO_SESSIONS, &[]).is_err());
        // An error code, with the sessions tag of the command: still the code.
        let err = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x09, 0x07];
        let e = check_response("TPM2_PCR_Extend", ST_SESSIONS, &err).unwrap_err();
        assert_eq!(
            e.to_string(),
            "TPM2_PCR_Extend failed: TPM_RC_LOCALITY (0x907)"
        );
        // An error code with a nonsense tag.
        let err = [0x12, 0x34, 0, 0, 0, 10, 0, 0, 0x09, 0x07];
        let e = check_response("X", ST_SESSIONS, &err).unwrap_err();
        assert!(matches!(e, TpmError::BadResponse { .. }), "{e}");
    }

    #[test]
    fn reader_reports_offsets() {
        let mut r = Reader::new("X", &[0, 1, 0, 0, 0]);
        assert_eq!(r.u16("a").unwrap(), 1);
        let e = r.u32("count").unwrap_err();
        assert_eq!(
            e.to_string(),
            "X: malformed response: truncated at byte 12: count needs 4 bytes, 3 left"
        );
        let r = Reader::new("X", &[0]);
        assert!(r.finish().is_err());
    }
}

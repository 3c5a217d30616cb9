//! In-process decompression of the formats kernels and modules come in: xz (with the x86
//! BCJ filter vmlinuz uses), zstd, gzip and the kernel's legacy LZ4 framing. Pure Rust, so
//! the static init can use it; every decoder stops at `limit` bytes of output.
//!
//! Contract: [`xz`], [`zstd`] and [`gzip`] take exactly one stream (one xz stream, one
//! zstd frame, one gzip member) and refuse anything after it: a second stream or trailing
//! bytes are read differently by different decompressors (`xz -dc` concatenates streams,
//! the kernel stops at the first), so a file with more than one stream has no single
//! meaning. [`xz_stream`], [`zstd_frame`] and [`gzip_member`] decode the first stream
//! and say how much input it took, for containers that put something after it (a bzImage
//! appends the decompressed size; an initramfs may hold several archives). Errors are
//! sentences, never a decoder's type names.
//!
//! Current limits: no bzip2, lzma or lzo; LZ4 only in the kernel's legacy framing.

use std::io::Read;

use crate::util::le::u32_le;

/// Why data could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("cannot decompress {format}: {why}")]
    Corrupt { format: &'static str, why: String },
    #[error("{format} output exceeds {limit} bytes")]
    TooLarge { format: &'static str, limit: usize },
    #[error(
        "{extra} bytes follow the first {format} stream (a second stream or trailing data, \
         which decompressors read differently)"
    )]
    Trailing { format: &'static str, extra: usize },
}

fn corrupt(format: &'static str, why: impl ToString) -> DecompressError {
    DecompressError::Corrupt {
        format,
        why: why.to_string(),
    }
}

/// The first stream of a compressed input: its output and the input bytes it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub data: Vec<u8>,
    pub consumed: usize,
}

/// The decoded data if the stream took the whole input.
fn whole(d: Decoded, input: &[u8], format: &'static str) -> Result<Vec<u8>, DecompressError> {
    match input.len().checked_sub(d.consumed) {
        Some(0) => Ok(d.data),
        Some(extra) => Err(DecompressError::Trailing { format, extra }),
        None => Err(corrupt(format, "the decoder read past the input")),
    }
}

/// Decompresses exactly one xz stream (nothing may follow it).
pub fn xz(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    whole(xz_stream(input, limit)?, input, "xz")
}

/// Decompresses exactly one zstd frame (nothing may follow it).
pub fn zstd(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    whole(zstd_frame(input, limit)?, input, "zstd")
}

/// Decompresses exactly one gzip member (nothing may follow it).
pub fn gzip(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    whole(gzip_member(input, limit)?, input, "gzip")
}

/// What an xz decoder error means, in words.
fn xz_reason(e: &xz4rust::XzError) -> String {
    use xz4rust::XzError as E;
    match e {
        E::StreamHeaderMagicNumberMismatch => "no xz stream header".into(),
        E::StreamHeaderCrc32Mismatch(..) => "the stream header's CRC32 does not match".into(),
        E::BlockHeaderCrc32Mismatch(..) => "a block header's CRC32 does not match".into(),
        E::FooterMagicNumberMismatch => "no xz stream footer".into(),
        E::FooterCrc32Mismatch(..) => "the stream footer's CRC32 does not match".into(),
        E::FooterCheckTypeMismatch(..) | E::FooterDecoderIndexMismatch(..) => {
            "the stream footer does not match the stream".into()
        }
        E::ContentCrc32Mismatch(..) | E::ContentCrc64Mismatch(..) => {
            "the data's checksum does not match (corrupted data)".into()
        }
        E::IndexCrc32Mismatch(..) | E::CorruptedDataInBlockIndex => {
            "the block index is corrupted".into()
        }
        E::DictionaryOverflow => {
            "corrupted data (a match refers to data before the start of the output)".into()
        }
        E::DictionaryTooLarge(_) => "the stream needs a dictionary larger than 1 GiB".into(),
        E::UnsupportedCheckType(t) => format!("unsupported integrity check type {t}"),
        E::UnsupportedBcjFilter(f) => format!("unsupported filter {f:#x}"),
        E::UnsupportedStreamHeaderOption | E::UnsupportedBlockHeaderOption => {
            "the stream uses options this decoder does not support".into()
        }
        E::UnsupportedLzmaProperties(_)
        | E::LzmaPropertiesTooLarge
        | E::LzmaPropertiesInvalid
        | E::LzmaPropertiesMissing => "invalid LZMA2 properties".into(),
        E::MoreDataInBlockBodyThanHeaderIndicated | E::LessDataInBlockBodyThanHeaderIndicated => {
            "a block's size does not match its header".into()
        }
        E::NeedsLargerInputBuffer => "truncated stream".into(),
        _ => "corrupted data".into(),
    }
}

/// Decompresses the first xz stream of `input`.
pub fn xz_stream(input: &[u8], limit: usize) -> Result<Decoded, DecompressError> {
    use xz4rust::{XzDecoder, XzError, XzNextBlockResult};
    let mut dec = XzDecoder::in_heap_with_alloc_dict_size(1 << 20, 1 << 30);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0usize;
    loop {
        let rest = input.get(pos..).unwrap_or_default();
        match dec.decode(rest, &mut buf) {
            Ok(XzNextBlockResult::NeedMoreData(used, produced)) => {
                out.extend_from_slice(buf.get(..produced).unwrap_or_default());
                pos = pos.saturating_add(used);
                if used == 0 && produced == 0 && pos >= input.len() {
                    return Err(corrupt("xz", "truncated stream"));
                }
            }
            Ok(XzNextBlockResult::EndOfStream(used, produced)) => {
                out.extend_from_slice(buf.get(..produced).unwrap_or_default());
                pos = pos.saturating_add(used);
                break;
            }
            Err(XzError::NeedsLargerInputBuffer) if pos >= input.len() => {
                return Err(corrupt("xz", "truncated stream"))
            }
            Err(e) => return Err(corrupt("xz", xz_reason(&e))),
        }
        if out.len() > limit {
            return Err(DecompressError::TooLarge {
                format: "xz",
                limit,
            });
        }
    }
    if out.len() > limit {
        return Err(DecompressError::TooLarge {
            format: "xz",
            limit,
        });
    }
    Ok(Decoded {
        data: out,
        consumed: pos,
    })
}

/// Reads everything `r` gives, at most `limit` bytes, in chunks. The buffer grows by
/// doubling but never past `limit` (`read_to_end` would double a full 1 GiB buffer to
/// 2 GiB to find out that a bomb goes on), so what a decompression holds is bounded by
/// the limit it was given.
fn read_limited<R: Read>(
    mut r: R,
    format: &'static str,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    const CHUNK: usize = 64 << 10;
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(corrupt(format, e)),
        };
        let len = out.len().saturating_add(n);
        if len > limit {
            return Err(DecompressError::TooLarge { format, limit });
        }
        if len > out.capacity() {
            // `len <= limit`, so `want` is at least `len` and at most `limit`.
            let want = out
                .capacity()
                .saturating_mul(2)
                .max(CHUNK)
                .min(limit)
                .max(len);
            out.try_reserve_exact(want - out.len())
                .map_err(|e| corrupt(format, e))?;
        }
        out.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
    Ok(out)
}

/// The length of the zstd frame at the start of `input` (RFC 8878 section 3.1.1: the
/// frame header, then blocks until the last one, then the optional checksum), read from
/// the headers alone. Hand-written because the decoder reads through a `Read` and does
/// not tell where the frame ended.
fn zstd_frame_len(input: &[u8]) -> Result<usize, DecompressError> {
    const MAGIC: u32 = 0xFD2F_B528;
    let truncated = || corrupt("zstd", "truncated frame");
    if u32_le(input, 0) != Some(MAGIC) {
        return Err(corrupt("zstd", "no zstd frame magic"));
    }
    let fhd = *input.get(4).ok_or_else(truncated)?;
    let single_segment = fhd & 0x20 != 0;
    let fcs_size = match fhd >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let did_size = match fhd & 3 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let mut pos = 5 + usize::from(!single_segment) + did_size + fcs_size;
    loop {
        let h = input
            .get(pos..pos + 3)
            .ok_or_else(truncated)?
            .iter()
            .rev()
            .fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
        let last = h & 1 != 0;
        let size = (h >> 3) as usize;
        pos += 3 + match (h >> 1) & 3 {
            0 | 2 => size, // raw, compressed
            1 => 1,        // RLE: one byte
            _ => return Err(corrupt("zstd", "reserved block type")),
        };
        if pos > input.len() {
            return Err(truncated());
        }
        if last {
            break;
        }
    }
    if fhd & 4 != 0 {
        pos += 4;
    }
    if pos > input.len() {
        return Err(truncated());
    }
    Ok(pos)
}

/// Decompresses the first zstd frame of `input`.
pub fn zstd_frame(input: &[u8], limit: usize) -> Result<Decoded, DecompressError> {
    let len = zstd_frame_len(input)?;
    let frame = input.get(..len).unwrap_or_default();
    let dec = ruzstd::decoding::StreamingDecoder::new(frame).map_err(|e| corrupt("zstd", e))?;
    Ok(Decoded {
        data: read_limited(dec, "zstd", limit)?,
        consumed: len,
    })
}

/// Decompresses the first gzip member of `input`.
pub fn gzip_member(input: &[u8], limit: usize) -> Result<Decoded, DecompressError> {
    let mut dec = flate2::bufread::GzDecoder::new(input);
    let data = read_limited(&mut dec, "gzip", limit)?;
    let rest = dec.into_inner().len();
    Ok(Decoded {
        data,
        consumed: input.len().saturating_sub(rest),
    })
}

/// Decompresses the kernel's legacy LZ4 format (magic `02 21 4c 18`, then blocks of a
/// little-endian length and LZ4 block data, each decompressing to at most 8 MiB).
pub fn lz4_legacy(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    const MAGIC: [u8; 4] = [0x02, 0x21, 0x4c, 0x18];
    const BLOCK: usize = 8 << 20;
    if !input.starts_with(&MAGIC) {
        return Err(corrupt("lz4", "no legacy LZ4 magic"));
    }
    let mut pos = 4;
    let mut out = Vec::new();
    while let Some(len) = u32_le(input, pos) {
        pos += 4;
        if len == u32::from_le_bytes(MAGIC) {
            continue; // concatenated stream
        }
        let len = len as usize;
        let Some(block) = pos.checked_add(len).and_then(|end| input.get(pos..end)) else {
            // The kernel appends the decompressed size: a short tail ends the data.
            break;
        };
        let b = lz4_flex::block::decompress(block, BLOCK)
            .map_err(|e| corrupt("lz4", format!("corrupted block at offset {pos}: {e}")))?;
        out.extend_from_slice(&b);
        if out.len() > limit {
            return Err(DecompressError::TooLarge {
                format: "lz4",
                limit,
            });
        }
        pos += len;
        if b.len() < BLOCK {
            break;
        }
    }
    if out.is_empty() {
        return Err(corrupt("lz4", "no data"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, data).unwrap();
        e.finish().unwrap()
    }

    /// A bomb (1 MiB of zeros, a few KiB compressed) against limits around its size: the
    /// buffer never holds more than the limit (`read_to_end` doubled a full buffer past
    /// it before finding the stream went on), and the limit is exact.
    #[test]
    fn a_bomb_never_takes_more_than_its_limit() {
        let n = 1 << 20;
        let bomb = gz(&vec![0u8; n]);
        assert!(bomb.len() < 8 << 10);
        for limit in [n, n + 1, n + 100_000, 3 * n / 2] {
            let d = gzip_member(&bomb, limit).unwrap();
            assert_eq!(d.data.len(), n);
            assert!(d.data.capacity() <= limit, "{limit}: {}", d.data.capacity());
        }
        for limit in [0, 1, 100, n - 1, n / 2 + 3] {
            assert!(matches!(
                gzip_member(&bomb, limit),
                Err(DecompressError::TooLarge { .. })
            ));
        }
        assert_eq!(gzip_member(&gz(b"abc"), 3).unwrap().data, b"abc");
    }

    /// A real zstd frame (libzstd), with or without its content checksum.
    fn zst(data: &[u8], checksum: bool) -> Vec<u8> {
        let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        e.include_checksum(checksum).unwrap();
        std::io::Write::write_all(&mut e, data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn garbage_and_truncation_are_errors() {
        assert!(xz(b"", 100).is_err());
        assert!(xz(b"\xfd7zXZ\0garbage", 100).is_err());
        assert!(zstd(b"nope", 100).is_err());
        assert!(gzip(b"nope", 100).is_err());
        assert!(lz4_legacy(b"nope", 100).is_err());
        assert!(lz4_legacy(&[2, 0x21, 0x4c, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5], 100).is_err());
        for checksum in [false, true] {
            let z = zst(b"hello world", checksum);
            for n in 0..z.len() {
                assert!(zstd(&z[..n], 100).is_err(), "{n}");
            }
            assert_eq!(zstd(&z, 100).unwrap(), b"hello world");
        }
        let g = gz(b"hello world");
        for n in 0..g.len() {
            assert!(gzip(&g[..n], 100).is_err(), "{n}");
        }
    }

    #[test]
    fn limits_hold() {
        let gz = gz(&[0u8; 10000]);
        assert_eq!(gzip(&gz, 10000).unwrap().len(), 10000);
        assert!(matches!(
            gzip(&gz, 9999),
            Err(DecompressError::TooLarge { .. })
        ));
        let z = zst(&[1u8; 5000], false);
        assert_eq!(zstd(&z, 5000).unwrap(), vec![1u8; 5000]);
        assert!(matches!(
            zstd(&z, 4999),
            Err(DecompressError::TooLarge { .. })
        ));
        let b = lz4_flex::block::compress(&[7u8; 5000]);
        let mut l = vec![2, 0x21, 0x4c, 0x18];
        l.extend_from_slice(&u32::try_from(b.len()).unwrap().to_le_bytes());
        l.extend_from_slice(&b);
        l.extend_from_slice(&5000u32.to_le_bytes()); // the kernel's size trailer
        assert_eq!(lz4_legacy(&l, 1 << 20).unwrap(), vec![7u8; 5000]);
        assert!(matches!(
            lz4_legacy(&l, 100),
            Err(DecompressError::TooLarge { .. })
        ));
    }

    /// A second gzip member, a second zstd frame or trailing bytes: refused by the
    /// one-stream decoders, reported as the consumed length by the stream decoders.
    #[test]
    fn content_after_the_first_stream_is_refused() {
        let (a, b) = (gz(b"first"), gz(b"second"));
        let two = [a.clone(), b].concat();
        assert_eq!(
            gzip(&two, 100),
            Err(DecompressError::Trailing {
                format: "gzip",
                extra: two.len() - a.len()
            })
        );
        let m = gzip_member(&two, 100).unwrap();
        assert_eq!((m.data.as_slice(), m.consumed), (&b"first"[..], a.len()));
        let junk = [a.clone(), b"x".to_vec()].concat();
        let e = gzip(&junk, 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1 bytes follow the first gzip stream (a second stream or trailing data, which \
             decompressors read differently)"
        );
        let (z1, z2) = (zst(b"first", true), zst(&[9u8; 3000], false));
        let two = [z1.clone(), z2].concat();
        assert!(matches!(
            zstd(&two, 100),
            Err(DecompressError::Trailing { format: "zstd", .. })
        ));
        let m = zstd_frame(&two, 100).unwrap();
        assert_eq!((m.data.as_slice(), m.consumed), (&b"first"[..], z1.len()));
        assert!(matches!(
            zstd(&[z1, vec![0]].concat(), 100),
            Err(DecompressError::Trailing { extra: 1, .. })
        ));
    }
}

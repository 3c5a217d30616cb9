//! In-process decompression of the formats kernels and modules come in: xz (with the x86
//! BCJ filter vmlinuz uses), zstd, gzip and the kernel's legacy LZ4 framing. Pure Rust, so
//! the static init can use it; every decoder stops at `limit` bytes of output.

use std::io::Read;

/// Why data could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("cannot decompress {format}: {why}")]
    Corrupt { format: &'static str, why: String },
    #[error("{format} output exceeds {limit} bytes")]
    TooLarge { format: &'static str, limit: usize },
}

fn corrupt(format: &'static str, why: impl ToString) -> DecompressError {
    DecompressError::Corrupt {
        format,
        why: why.to_string(),
    }
}

/// Decompresses one xz stream; bytes after the end of the stream are ignored (vmlinuz
/// appends the decompressed size).
pub fn xz(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    use xz4rust::{XzDecoder, XzError, XzNextBlockResult};
    let mut dec = XzDecoder::in_heap_with_alloc_dict_size(1 << 20, 1 << 30);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0;
    loop {
        match dec.decode(&input[pos..], &mut buf) {
            Ok(XzNextBlockResult::NeedMoreData(used, produced)) => {
                out.extend_from_slice(&buf[..produced]);
                pos += used;
                if used == 0 && produced == 0 && pos >= input.len() {
                    return Err(corrupt("xz", "truncated stream"));
                }
            }
            Ok(XzNextBlockResult::EndOfStream(_, produced)) => {
                out.extend_from_slice(&buf[..produced]);
                break;
            }
            Err(XzError::NeedsLargerInputBuffer) if pos >= input.len() => {
                return Err(corrupt("xz", "truncated stream"))
            }
            Err(e) => return Err(corrupt("xz", format!("{e:?}"))),
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
    Ok(out)
}

fn read_limited<R: Read>(
    r: R,
    format: &'static str,
    limit: usize,
) -> Result<Vec<u8>, DecompressError> {
    let mut out = Vec::new();
    r.take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| corrupt(format, e))?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge { format, limit });
    }
    Ok(out)
}

/// Decompresses a zstd frame.
pub fn zstd(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let dec = ruzstd::decoding::StreamingDecoder::new(input).map_err(|e| corrupt("zstd", e))?;
    read_limited(dec, "zstd", limit)
}

/// Decompresses gzip.
pub fn gzip(input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    read_limited(flate2::read::GzDecoder::new(input), "gzip", limit)
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
    while pos + 4 <= input.len() {
        let len = u32::from_le_bytes([input[pos], input[pos + 1], input[pos + 2], input[pos + 3]])
            as usize;
        if len == u32::from_le_bytes(MAGIC) as usize {
            pos += 4; // concatenated stream
            continue;
        }
        pos += 4;
        let Some(block) = input.get(pos..pos + len) else {
            // The kernel appends the decompressed size: a short tail ends the data.
            break;
        };
        let b = lz4_flex::block::decompress(block, BLOCK).map_err(|e| corrupt("lz4", e))?;
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

    #[test]
    fn garbage_and_truncation_are_errors() {
        assert!(xz(b"", 100).is_err());
        assert!(xz(b"\xfd7zXZ\0garbage", 100).is_err());
        assert!(zstd(b"nope", 100).is_err());
        assert!(gzip(b"nope", 100).is_err());
        assert!(lz4_legacy(b"nope", 100).is_err());
        assert!(lz4_legacy(&[2, 0x21, 0x4c, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5], 100).is_err());
    }

    #[test]
    fn limits_hold() {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, &[0u8; 10000]).unwrap();
        let gz = e.finish().unwrap();
        assert_eq!(gzip(&gz, 10000).unwrap().len(), 10000);
        assert!(matches!(
            gzip(&gz, 9999),
            Err(DecompressError::TooLarge { .. })
        ));
        let b = lz4_flex::block::compress(&[7u8; 5000]);
        let mut l = vec![2, 0x21, 0x4c, 0x18];
        l.extend_from_slice(&(b.len() as u32).to_le_bytes());
        l.extend_from_slice(&b);
        l.extend_from_slice(&5000u32.to_le_bytes()); // the kernel's size trailer
        assert_eq!(lz4_legacy(&l, 1 << 20).unwrap(), vec![7u8; 5000]);
        assert!(matches!(
            lz4_legacy(&l, 100),
            Err(DecompressError::TooLarge { .. })
        ));
    }
}

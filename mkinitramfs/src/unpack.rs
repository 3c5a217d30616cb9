//! Reading an initramfs the way the kernel does (`init/initramfs.c`, `unpack_to_rootfs`),
//! for `mkinitramfs list`.
//!
//! Contract: the input is a sequence of parts, each either a plain newc archive (starting
//! with `0` at a 4-byte aligned offset, as early microcode is prepended) or one
//! compressed stream (gzip member, zstd frame or xz stream) holding newc archives; zero
//! bytes between parts are padding. Inside a compressed stream the archives may be
//! separated by zero padding, a new archive must start at a 4-byte aligned offset, and
//! the stream must end after a trailer (the kernel: "junk at the end of compressed
//! archive"). The decompressed total is limited; a larger one is an error, never an
//! unbounded allocation.
//!
//! Current limits: bzip2, lzma, lzo and lz4 parts are recognised by their magic and
//! refused by name (the kernels we ship use gzip or zstd).

use validator::formats::compress::{self, Decoded, DecompressError};

use crate::cpio::{self, CpioError, ListedEntry};

/// Why an initramfs could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnpackError {
    #[error("byte {offset}: {source}")]
    Cpio { offset: usize, source: CpioError },
    #[error("byte {offset}: {source}")]
    Decompress {
        offset: usize,
        source: DecompressError,
    },
    #[error("byte {offset}: compressed with {format}, which this tool does not read")]
    Unsupported { offset: usize, format: &'static str },
    #[error("byte {offset}: not a newc header (magic 070701) nor a known compression magic")]
    BadMagic { offset: usize },
    #[error("byte {offset}: the {format} stream ends inside an archive (no trailer)")]
    NoTrailer { offset: usize, format: &'static str },
    #[error("byte {offset} of the {format} stream: {what}")]
    Junk {
        offset: usize,
        format: &'static str,
        what: &'static str,
    },
    #[error("the archives unpack to more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("no archive in it (empty, or only zero bytes)")]
    Empty,
}

/// Reads every archive of an initramfs image; `limit` bounds the decompressed total. An
/// input with no archive at all (empty, or zeros) is an error.
pub fn unpack(bytes: &[u8], limit: usize) -> Result<Vec<ListedEntry>, UnpackError> {
    if bytes.iter().all(|&b| b == 0) {
        return Err(UnpackError::Empty);
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut unpacked = 0usize;
    while let Some(&b) = bytes.get(pos) {
        if b == 0 {
            pos += 1;
            continue;
        }
        if b == b'0' && pos.is_multiple_of(4) {
            let a = cpio::read_archive(bytes, pos).map_err(|source| UnpackError::Cpio {
                offset: pos,
                source,
            })?;
            out.extend(a.entries);
            pos = a.end.max(pos + 1);
            continue;
        }
        let rest = bytes.get(pos..).unwrap_or_default();
        let budget = limit.saturating_sub(unpacked);
        let decode = |r: Result<Decoded, DecompressError>| {
            r.map_err(|e| match e {
                DecompressError::TooLarge { .. } => UnpackError::TooLarge { limit },
                source => UnpackError::Decompress {
                    offset: pos,
                    source,
                },
            })
        };
        let (format, d) = if rest.starts_with(&[0x1f, 0x8b]) {
            ("gzip", decode(compress::gzip_member(rest, budget))?)
        } else if rest.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            ("zstd", decode(compress::zstd_frame(rest, budget))?)
        } else if rest.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            ("xz", decode(compress::xz_stream(rest, budget))?)
        } else {
            let format = if rest.starts_with(b"BZh") {
                "bzip2"
            } else if rest.starts_with(&[0x5d, 0x00]) {
                "lzma"
            } else if rest.starts_with(&[0x89, b'L', b'Z', b'O']) {
                "lzo"
            } else if rest.starts_with(&[0x02, 0x21, 0x4c, 0x18]) {
                "lz4"
            } else {
                return Err(UnpackError::BadMagic { offset: pos });
            };
            return Err(UnpackError::Unsupported {
                offset: pos,
                format,
            });
        };
        unpacked = unpacked.saturating_add(d.data.len());
        out.extend(archives_in(&d.data, pos, format)?);
        pos += d.consumed.max(1);
    }
    Ok(out)
}

/// The archives inside one decompressed stream (what the kernel's `flush_buffer` takes).
fn archives_in(
    data: &[u8],
    at: usize,
    format: &'static str,
) -> Result<Vec<ListedEntry>, UnpackError> {
    let mut out = Vec::new();
    let mut off = 0usize;
    let mut after_trailer = true;
    while let Some(&b) = data.get(off) {
        if b == 0 {
            off += 1;
            continue;
        }
        if !off.is_multiple_of(4) {
            let what = if b == b'0' {
                "an archive does not start at a 4-byte boundary (broken padding)"
            } else {
                "junk between archives"
            };
            return Err(UnpackError::Junk {
                offset: off,
                format,
                what,
            });
        }
        let a = cpio::read_archive(data, off)
            .map_err(|source| UnpackError::Cpio { offset: at, source })?;
        out.extend(a.entries);
        after_trailer = a.trailer;
        off = a.end.max(off + 1);
    }
    if !after_trailer {
        return Err(UnpackError::NoTrailer { offset: at, format });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::Archive;
    use crate::{compress, Compress};

    fn archive(name: &str) -> Vec<u8> {
        let mut a = Archive::new();
        a.file(name, name.as_bytes().to_vec(), 0o644).unwrap();
        a.write(0)
    }

    fn names(e: &[ListedEntry]) -> Vec<&str> {
        e.iter().map(|e| e.path.as_str()).collect()
    }

    /// The layouts the kernel accepts: zero padding after a gzip member, a plain
    /// archive (early microcode) before a compressed one, several compressed parts.
    #[test]
    fn kernel_layouts_are_read() {
        let (micro, main) = (archive("kernel/x86/microcode/a.bin"), archive("init"));
        let gz = compress(&main, Compress::Gzip).unwrap();
        let zst = compress(&main, Compress::Zstd).unwrap();
        for (what, img) in [
            ("gzip + zero padding", [gz.clone(), vec![0; 512]].concat()),
            ("plain + gzip", [micro.clone(), gz.clone()].concat()),
            (
                "plain + padding + zstd",
                [micro.clone(), vec![0; 12], zst.clone()].concat(),
            ),
            ("gzip + gzip", [gz.clone(), gz.clone()].concat()),
            ("plain", main.clone()),
        ] {
            let e = unpack(&img, 1 << 20).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(names(&e).contains(&"init"), "{what}: {:?}", names(&e));
        }
        let e = unpack(&[micro, gz].concat(), 1 << 20).unwrap();
        assert_eq!(
            names(&e),
            [
                "kernel",
                "kernel/x86",
                "kernel/x86/microcode",
                "kernel/x86/microcode/a.bin",
                "init"
            ]
        );
    }

    #[test]
    fn what_the_kernel_refuses_is_refused() {
        let main = archive("init");
        let gz = compress(&main, Compress::Gzip).unwrap();
        // Junk after a gzip member.
        let e = unpack(&[gz.clone(), b"junk".to_vec()].concat(), 1 << 20).unwrap_err();
        assert_eq!(e, UnpackError::BadMagic { offset: gz.len() });
        // A compressed stream that ends inside an archive.
        let cut = compress(&main[..main.len() - 200], Compress::Gzip).unwrap();
        assert!(matches!(
            unpack(&cut, 1 << 20),
            Err(UnpackError::NoTrailer { .. } | UnpackError::Cpio { .. })
        ));
        // An archive at an unaligned offset inside a stream.
        let odd = compress(
            &[main.clone(), vec![0; 3], main.clone()].concat(),
            Compress::Gzip,
        )
        .unwrap();
        assert!(matches!(
            unpack(&odd, 1 << 20),
            Err(UnpackError::Junk { .. })
        ));
        // Unsupported compressions are named.
        assert_eq!(
            unpack(b"BZh91AY", 100).unwrap_err().to_string(),
            "byte 0: compressed with bzip2, which this tool does not read"
        );
        // A decompression bomb stops at the limit.
        let bomb = compress(&vec![0u8; 1 << 20], Compress::Gzip).unwrap();
        assert_eq!(
            unpack(&bomb, 1000),
            Err(UnpackError::TooLarge { limit: 1000 })
        );
        // Every truncation is an error or a prefix; none panics.
        let img = [archive("a"), gz].concat();
        for n in 0..img.len() {
            let _ = unpack(&img[..n], 1 << 20);
        }
    }
}

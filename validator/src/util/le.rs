//! Fixed-width integers at an offset in untrusted bytes, through zerocopy's byte-order
//! types: `None` when the bytes end first, never a panic or an unaligned read.

use zerocopy::byteorder::{big_endian as be, little_endian as le, native_endian as ne};
use zerocopy::FromBytes;

fn at<T: FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
    b: &[u8],
    off: usize,
) -> Option<T> {
    let rest = b.get(off..)?;
    T::read_from_prefix(rest).ok().map(|(v, _)| v)
}

/// Little-endian `u16` at `off`.
pub fn u16_le(b: &[u8], off: usize) -> Option<u16> {
    at::<le::U16>(b, off).map(|v| v.get())
}

/// Little-endian `u32` at `off`.
pub fn u32_le(b: &[u8], off: usize) -> Option<u32> {
    at::<le::U32>(b, off).map(|v| v.get())
}

/// Little-endian `i32` at `off`.
pub fn i32_le(b: &[u8], off: usize) -> Option<i32> {
    at::<le::I32>(b, off).map(|v| v.get())
}

/// Little-endian `u64` at `off`.
pub fn u64_le(b: &[u8], off: usize) -> Option<u64> {
    at::<le::U64>(b, off).map(|v| v.get())
}

/// Native-endian `u32` at `off` (kernel ABI structures).
pub fn u32_ne(b: &[u8], off: usize) -> Option<u32> {
    at::<ne::U32>(b, off).map(|v| v.get())
}

/// Native-endian `u64` at `off` (kernel ABI structures).
pub fn u64_ne(b: &[u8], off: usize) -> Option<u64> {
    at::<ne::U64>(b, off).map(|v| v.get())
}

/// Copies `src` into `dst` at `off`; `None` (and nothing written) when it does not fit.
pub fn put(dst: &mut [u8], off: usize, src: &[u8]) -> Option<()> {
    dst.get_mut(off..off.checked_add(src.len())?)?
        .copy_from_slice(src);
    Some(())
}

/// Big-endian `u16` at `off`.
pub fn u16_be(b: &[u8], off: usize) -> Option<u16> {
    at::<be::U16>(b, off).map(|v| v.get())
}

/// Big-endian `u32` at `off`.
pub fn u32_be(b: &[u8], off: usize) -> Option<u32> {
    at::<be::U32>(b, off).map(|v| v.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_stops_at_the_end() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(u16_le(&b, 0), Some(0x0201));
        assert_eq!(u32_le(&b, 1), Some(0x0504_0302));
        assert_eq!(u64_le(&b, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u16_be(&b, 0), Some(0x0102));
        assert_eq!(u32_be(&b, 5), Some(0x0607_0809));
        assert_eq!(i32_le(&[0xff; 4], 0), Some(-1));
        assert_eq!(u32_le(&b, 6), None);
        assert_eq!(u64_le(&b, 2), None);
        assert_eq!(u16_le(&b, usize::MAX), None);
        assert_eq!(u32_ne(&1u32.to_ne_bytes(), 0), Some(1));
        assert_eq!(
            u64_ne(&b, 1),
            Some(u64::from_ne_bytes([2, 3, 4, 5, 6, 7, 8, 9]))
        );
        let mut d = [0u8; 4];
        assert_eq!(put(&mut d, 1, &[7, 8]), Some(()));
        assert_eq!(d, [0, 7, 8, 0]);
        assert_eq!(put(&mut d, 3, &[1, 2]), None);
        assert_eq!(put(&mut d, usize::MAX, &[1]), None);
        assert_eq!(d, [0, 7, 8, 0]);
    }
}

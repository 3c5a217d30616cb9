//! A module image's digests, computed in steps: the body's SHA-256 (what a sha256
//! signature covers) and then the whole image's (the module's digest), in one pass over
//! the image.
//!
//! Contract: [`Stream::new`] plans the pass from where the image's signature trailer
//! (split by the gate) says its body ends (a signed image: its body, then the rest; an
//! unsigned one: the whole). [`Stream::step`] feeds the next bytes, stopping at the body's
//! end to take its digest; [`Stream::finish`] feeds what is left and returns
//! [`Digests`]. Feeding two streams in turn, a few blocks each ([`STEP`]), lets one
//! thread hash two modules at once: the SHA-NI rounds of one run while the other's wait on
//! their own results (`gate::batch` does this; measured in `scripts/bench modules`).
//! Nothing cryptographic is written here: the hashing is the `sha2` crate's, called in
//! parts.

use sha2::Digest;

/// Bytes fed to one stream before the other's turn, when two are fed in turn: two SHA-256
/// blocks (measured best among 64 to 4096 on the development machine).
pub const STEP: usize = 128;

/// A module image's digests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    /// The body's SHA-256, for a signed image.
    pub body: Option<[u8; 32]>,
    /// The whole image's SHA-256 (signature included).
    pub image: [u8; 32],
}

/// Where a stream is in its pass.
#[derive(Debug, Clone)]
enum Phase {
    /// In the body of a signed image, which ends at `end`.
    Body { end: usize },
    /// Past the body, whose digest this is.
    Tail { body: [u8; 32] },
    /// An unsigned image: the whole.
    Whole,
}

/// One image's pass (see the module's doc).
#[derive(Debug, Clone)]
pub struct Stream {
    h: sha2::Sha256,
    /// Bytes fed so far.
    pos: usize,
    len: usize,
    phase: Phase,
}

impl Stream {
    /// The pass over an image of `len` bytes: a signed one's body ends at `body_end`
    /// (its signature trailer split by the caller), an unsigned one has none.
    pub fn new(len: usize, body_end: Option<usize>) -> Stream {
        let mut s = Stream {
            h: sha2::Sha256::new(),
            pos: 0,
            len,
            phase: body_end.map_or(Phase::Whole, |end| Phase::Body { end: end.min(len) }),
        };
        s.leave_body();
        s
    }

    /// Whether every byte has been fed.
    pub fn done(&self) -> bool {
        self.pos >= self.len
    }

    /// Feeds up to `n` more bytes of `image` (the image the stream was planned for),
    /// stopping at the body's end; returns the part fed.
    pub fn step<'a>(&mut self, image: &'a [u8], n: usize) -> &'a [u8] {
        let limit = match self.phase {
            Phase::Body { end } => end,
            Phase::Tail { .. } | Phase::Whole => self.len,
        };
        let end = self.pos.saturating_add(n).min(limit).min(image.len());
        let part = image.get(self.pos..end).unwrap_or_default();
        self.h.update(part);
        self.pos = end;
        self.leave_body();
        part
    }

    /// Feeds what is left of `image`, in parts of at most `n` bytes, and returns the
    /// digests. Each part of a signed image's body, or of an unsigned image, is handed to
    /// `release` once hashed; a signed image's signature is not (the gate reads it next).
    pub fn finish(mut self, image: &[u8], n: usize, release: &dyn Fn(&[u8])) -> Digests {
        let n = n.max(1);
        while !self.done() {
            let tail = matches!(self.phase, Phase::Tail { .. });
            let part = self.step(image, n);
            if part.is_empty() {
                break;
            }
            if !tail {
                release(part);
            }
        }
        let image_digest: [u8; 32] = self.h.clone().finalize().into();
        let body = match self.phase {
            Phase::Tail { body } => Some(body),
            // Only an image shorter than its plan stops in its body: its body is what
            // was fed.
            Phase::Body { .. } => Some(image_digest),
            Phase::Whole => None,
        };
        Digests {
            body,
            image: image_digest,
        }
    }

    /// At the body's end, takes the body's digest.
    fn leave_body(&mut self) {
        if let Phase::Body { end } = self.phase {
            if self.pos >= end {
                self.phase = Phase::Tail {
                    body: self.h.clone().finalize().into(),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::kmod::sig::{self, signed};

    /// The pass the gate plans for `image` (`None`: a damaged trailer).
    fn plan(image: &[u8]) -> Option<Stream> {
        match sig::split(image) {
            Ok(s) => Some(Stream::new(image.len(), Some(s.body.len()))),
            Err(sig::SigError::Unsigned) => Some(Stream::new(image.len(), None)),
            Err(_) => None,
        }
    }

    fn sha(b: &[u8]) -> [u8; 32] {
        sha2::Sha256::digest(b).into()
    }

    #[test]
    fn any_steps_give_the_digests_of_one_pass() {
        let body: Vec<u8> = (0..1000u32)
            .map(|i| (i.wrapping_mul(7) % 251).to_le_bytes()[0])
            .collect();
        let image = signed(&body, &[0x30; 77]);
        for n in [1, 63, 64, STEP, 999, 1000, 4096] {
            let mut s = plan(&image).unwrap();
            let mut fed = 0;
            while !s.done() {
                let part = s.step(&image, n);
                assert!(!part.is_empty() && part.len() <= n);
                fed += part.len();
            }
            assert_eq!(fed, image.len());
            let d = s.finish(&image, n, &|_| {});
            assert_eq!(d.body, Some(sha(&body)), "step {n}");
            assert_eq!(d.image, sha(&image), "step {n}");
        }
        // Two streams fed in turn give what each gives alone.
        let other = signed(&body[..333], &[0x30; 20]);
        let (mut a, mut b) = (plan(&image).unwrap(), plan(&other).unwrap());
        while !a.done() && !b.done() {
            a.step(&image, STEP);
            b.step(&other, STEP);
        }
        let (a, b) = (a.finish(&image, 7, &|_| {}), b.finish(&other, 7, &|_| {}));
        assert_eq!((a.body, a.image), (Some(sha(&body)), sha(&image)));
        assert_eq!((b.body, b.image), (Some(sha(&body[..333])), sha(&other)));
    }

    #[test]
    fn unsigned_and_empty_images_and_what_is_released() {
        let plain = b"\x7fELF and nothing else".to_vec();
        let d = plan(&plain).unwrap().finish(&plain, 5, &|_| {});
        assert_eq!((d.body, d.image), (None, sha(&plain)));
        let d = plan(b"").unwrap().finish(b"", STEP, &|_| {});
        assert_eq!((d.body, d.image), (None, sha(b"")));
        // Each part of the body is handed to release once, in order, and nothing of the
        // signature; all of an unsigned image.
        let image = signed(&[1u8; 300], &[2u8; 30]);
        let seen = std::cell::RefCell::new(Vec::new());
        let d = plan(&image)
            .unwrap()
            .finish(&image, 100, &|p| seen.borrow_mut().extend_from_slice(p));
        assert_eq!(seen.take(), [1u8; 300]);
        assert_eq!(d.body, Some(sha(&[1u8; 300])));
        plan(&plain)
            .unwrap()
            .finish(&plain, 3, &|p| seen.borrow_mut().extend_from_slice(p));
        assert_eq!(seen.take(), plain);
    }
}

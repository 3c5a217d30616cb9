//! The dm-verity hash tree: its geometry exactly as the kernel computes it
//! (`drivers/md/dm-verity-target.c`), and a full userspace check that hashes every data
//! block, rebuilds every hash block and compares them with the stored tree and the root
//! hash, streaming (no image is held in memory) and on several threads.
//!
//! The verdict matches `veritysetup verify`: every stored hash block must equal the one
//! rebuilt from below (zero padding included), and the top block must hash to the root.

use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::Digest;

use super::superblock::{Algorithm, Params};

/// A tree problem (not a verification failure: those are [`Finding`]s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("{device}: read of {len} bytes at offset {offset} failed: {why}")]
    Read {
        device: &'static str,
        offset: u64,
        len: usize,
        why: String,
        /// The OS error number, when the read failed in the OS (`EIO`: the disk).
        os_error: Option<i32>,
    },
    #[error("hash block size {hbs} is too small for {alg} digests")]
    Geometry { hbs: u32, alg: &'static str },
    #[error("no data blocks (resolve a superblock's 0 against the data device first)")]
    NoData,
    #[error("hash offset {0} is too large for the hash tree to follow it")]
    Offset(u64),
    #[error("{device} device is {have} bytes; the verity parameters need {need}")]
    TooSmall {
        device: &'static str,
        have: u64,
        need: u64,
    },
}

/// Where the tree lives on the hash device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    pub params: Params,
    /// log2 of the hashes per hash block.
    pub bits: u32,
    /// Bytes per hash entry in a hash block (the digest, zero padded).
    pub stride: usize,
    pub levels: u32,
    /// First hash block (in hash-block units, from the start of the hash device).
    pub hash_start: u64,
    /// First block of each level (level 0 hashes the data blocks).
    pub level_start: Vec<u64>,
    /// Number of blocks of each level.
    pub level_blocks: Vec<u64>,
}

impl Geometry {
    /// The geometry for `p` with the tree after a superblock at `hash_offset` bytes
    /// (`with_superblock`), or starting right at `hash_offset`.
    pub fn new(p: &Params, hash_offset: u64, with_superblock: bool) -> Result<Geometry, TreeError> {
        let hbs = u64::from(p.hash_block_size);
        let ds = p.algorithm.digest_size() as u64;
        if hbs < 2 * ds {
            return Err(TreeError::Geometry {
                hbs: p.hash_block_size,
                alg: p.algorithm.name(),
            });
        }
        let last = p.data_blocks.checked_sub(1).ok_or(TreeError::NoData)?;
        let bits = 63 - (hbs / ds).leading_zeros();
        let stride = usize::try_from(hbs >> bits).map_err(|_| TreeError::Geometry {
            hbs: p.hash_block_size,
            alg: p.algorithm.name(),
        })?;
        let mut levels = 0u32;
        while bits * levels < 64 && last >> (bits * levels) != 0 {
            levels += 1;
        }
        let sb = if with_superblock {
            super::superblock::SIZE as u64
        } else {
            0
        };
        let hash_start = hash_offset
            .checked_add(sb)
            .and_then(|end| end.checked_add(hbs - 1))
            .map(|end| {
                if with_superblock {
                    end / hbs
                } else {
                    hash_offset / hbs
                }
            })
            .ok_or(TreeError::Offset(hash_offset))?;
        // Level sizes, top level first (the top is stored first).
        let mut level_start = Vec::with_capacity(levels as usize);
        let mut level_blocks = Vec::with_capacity(levels as usize);
        let mut pos = hash_start;
        for i in (0..levels).rev() {
            let shift = (i + 1) * bits;
            let s = if shift >= 64 {
                1
            } else {
                // ceil(data_blocks / 2^shift) without overflow.
                (last >> shift) + 1
            };
            level_start.push(pos);
            level_blocks.push(s);
            pos = pos.checked_add(s).ok_or(TreeError::Offset(hash_offset))?;
        }
        level_start.reverse();
        level_blocks.reverse();
        if pos.checked_mul(hbs).is_none() {
            return Err(TreeError::Offset(hash_offset));
        }
        Ok(Geometry {
            params: p.clone(),
            bits,
            stride,
            levels,
            hash_start,
            level_start,
            level_blocks,
        })
    }

    /// Bytes of the hash device the tree uses (superblock and tree).
    pub fn hash_end(&self) -> u64 {
        let end = self
            .level_start
            .iter()
            .zip(&self.level_blocks)
            .map(|(s, n)| s + n)
            .max()
            .unwrap_or(self.hash_start);
        end * u64::from(self.params.hash_block_size)
    }

    /// Bytes of the data device the tree covers.
    pub fn data_end(&self) -> u64 {
        self.params.data_blocks * u64::from(self.params.data_block_size)
    }
}

/// One block's digest as dm-verity computes it (salt first for hash type 1, last for 0).
pub fn block_digest(p: &Params, block: &[u8]) -> Vec<u8> {
    fn run<D: Digest>(p: &Params, block: &[u8]) -> Vec<u8> {
        let mut h = D::new();
        if p.hash_type == 1 {
            h.update(&p.salt);
            h.update(block);
        } else {
            h.update(block);
            h.update(&p.salt);
        }
        h.finalize().to_vec()
    }
    match p.algorithm {
        Algorithm::Sha1 => run::<sha1::Sha1>(p, block),
        Algorithm::Sha256 => run::<sha2::Sha256>(p, block),
        Algorithm::Sha512 => run::<sha2::Sha512>(p, block),
    }
}

/// The first place the tree disagrees with the data or the root hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Data block `index` does not hash to its entry in the level-0 hash block.
    DataBlock { index: u64, hash_block: u64 },
    /// A stored hash block differs from the one rebuilt from the level below.
    HashBlock { level: u32, block: u64 },
    /// The top of the tree does not hash to the trusted root hash.
    RootHash { computed: String },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::DataBlock { index, hash_block } => write!(
                f,
                "data block {index} does not match its hash (hash block {hash_block})"
            ),
            Finding::HashBlock { level, block } => {
                write!(f, "hash block {block} (level {level}) is corrupted")
            }
            Finding::RootHash { computed } => {
                write!(f, "the tree's root hash is {computed}, not the trusted one")
            }
        }
    }
}

/// The result of a full check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub ok: bool,
    pub finding: Option<Finding>,
    /// The root hash rebuilt from the data (when the data and tree agree).
    pub computed_root: Option<Vec<u8>>,
    pub data_bytes: u64,
}

fn read_at<F: FileExt>(
    f: &F,
    device: &'static str,
    buf: &mut [u8],
    offset: u64,
) -> Result<(), TreeError> {
    f.read_exact_at(buf, offset).map_err(|e| TreeError::Read {
        device,
        offset,
        len: buf.len(),
        why: e.to_string(),
        os_error: e.raw_os_error(),
    })
}

/// Builds the hash block holding `digests` (zero padded).
fn build_block(g: &Geometry, digests: &[Vec<u8>]) -> Vec<u8> {
    let mut b = vec![0u8; g.params.hash_block_size as usize];
    for (slot, d) in b.chunks_exact_mut(g.stride).zip(digests) {
        if let Some(dst) = slot.get_mut(..d.len()) {
            dst.copy_from_slice(d);
        }
    }
    b
}

/// At most this many bytes of data are read at once per worker.
const READ_CHUNK: usize = 4 << 20;

/// Level-0 hash blocks a worker takes at once.
const RUN: u64 = 8;

/// Checks the whole tree: data blocks, every hash block, the root. `threads` workers
/// share level 0 (the data), the upper levels are small and checked in order.
pub fn verify<D: FileExt + Sync, H: FileExt + Sync>(
    data: &D,
    data_size: u64,
    hash: &H,
    hash_size: u64,
    g: &Geometry,
    root: &[u8],
    threads: usize,
) -> Result<Verification, TreeError> {
    check_sizes(g, data_size, hash_size)?;
    if g.levels == 0 {
        return verify_single_block(data, &g.params, root);
    }
    let level0 = Level0::new(data, hash, g)?;
    std::thread::scope(|s| {
        for _ in 1..threads.max(1) {
            s.spawn(|| level0.work());
        }
        level0.work();
    });
    let per_len = level0.per_len;
    let data_bytes = g.data_end();
    match level0.finish()? {
        Ok(below) => verify_upper(hash, g, below, per_len, root, data_bytes),
        Err(f) => Ok(Verification {
            ok: false,
            finding: Some(f),
            computed_root: None,
            data_bytes,
        }),
    }
}

/// Refuses a data or hash device smaller than the geometry needs.
fn check_sizes(g: &Geometry, data_size: u64, hash_size: u64) -> Result<(), TreeError> {
    if data_size < g.data_end() {
        return Err(TreeError::TooSmall {
            device: "data",
            have: data_size,
            need: g.data_end(),
        });
    }
    if hash_size < g.hash_end() {
        return Err(TreeError::TooSmall {
            device: "hash",
            have: hash_size,
            need: g.hash_end(),
        });
    }
    Ok(())
}

/// Checks a tree without levels: the single data block must hash to `root`.
fn verify_single_block<D: FileExt>(
    data: &D,
    p: &Params,
    root: &[u8],
) -> Result<Verification, TreeError> {
    let dbs = p.data_block_size as usize;
    let mut b = vec![0u8; dbs];
    read_at(data, "data", &mut b, 0)?;
    let d = block_digest(p, &b);
    let ok = d == root;
    Ok(Verification {
        ok,
        finding: (!ok).then_some(Finding::DataBlock {
            index: 0,
            hash_block: 0,
        }),
        computed_root: Some(d),
        data_bytes: dbs as u64,
    })
}

/// Level 0 after the workers: the first disagreement, or every level-0 block's digest.
type Level0Result = Result<Vec<Vec<u8>>, Finding>;

/// The check of level 0, shared by the workers: each job is a run of [`RUN`] level-0
/// hash blocks and the data they cover.
struct Level0<'a, D, H> {
    data: &'a D,
    hash: &'a H,
    g: &'a Geometry,
    /// Data and hash block sizes.
    dbs: usize,
    hbs: usize,
    /// Data blocks per level-0 hash block.
    per: u64,
    per_len: usize,
    /// Level 0's number of blocks and first block.
    l0: u64,
    l0_start: u64,
    /// Data blocks read at once: a hash block's worth, capped at [`READ_CHUNK`] bytes.
    batch: usize,
    /// The first hash block of the next job.
    next: AtomicU64,
    /// The earliest disagreement found, and the data block it is at.
    first_bad: Mutex<Option<Finding>>,
    first_bad_at: AtomicU64,
    /// A read failure, which stops the workers.
    error: Mutex<Option<TreeError>>,
    /// The digest of each level-0 block, as rebuilt.
    digests: Vec<Mutex<Vec<u8>>>,
    done: AtomicUsize,
}

impl<'a, D: FileExt, H: FileExt> Level0<'a, D, H> {
    /// The level-0 check of `g`'s tree over `data` and `hash`, no job taken yet.
    fn new(data: &'a D, hash: &'a H, g: &'a Geometry) -> Result<Self, TreeError> {
        let dbs = g.params.data_block_size as usize;
        let hbs = g.params.hash_block_size as usize;
        let per = 1u64 << g.bits;
        // `bits` < 64: on x86-64 (the only target) this never saturates.
        let per_len = usize::try_from(per).unwrap_or(usize::MAX);
        let (Some(&l0), Some(&l0_start)) = (g.level_blocks.first(), g.level_start.first()) else {
            return Err(TreeError::NoData);
        };
        Ok(Level0 {
            data,
            hash,
            g,
            dbs,
            hbs,
            per,
            per_len,
            l0,
            l0_start,
            batch: per_len.min((READ_CHUNK / dbs).max(1)),
            next: AtomicU64::new(0),
            first_bad: Mutex::new(None),
            first_bad_at: AtomicU64::new(u64::MAX),
            error: Mutex::new(None),
            digests: (0..l0).map(|_| Mutex::new(Vec::new())).collect(),
            done: AtomicUsize::new(0),
        })
    }

    /// One worker: takes jobs until none is left, one lies past the first disagreement
    /// found, or a read fails.
    fn work(&self) {
        let mut dbuf = vec![0u8; self.batch * self.dbs];
        let mut stored = vec![0u8; self.hbs];
        loop {
            let start = self.next.fetch_add(RUN, Ordering::Relaxed);
            if start >= self.l0 || start > self.first_bad_at.load(Ordering::Relaxed) {
                return;
            }
            for j in start..(start + RUN).min(self.l0) {
                if self.check_block(j, &mut dbuf, &mut stored).is_break() {
                    return;
                }
            }
        }
    }

    /// Checks level-0 hash block `j` against the data it covers and keeps its digest;
    /// `Break` when the worker must stop.
    #[inline]
    fn check_block(&self, j: u64, dbuf: &mut [u8], stored: &mut [u8]) -> ControlFlow<()> {
        let p = &self.g.params;
        let first = j * self.per;
        let n = self
            .per_len
            .min(usize::try_from(p.data_blocks - first).unwrap_or(usize::MAX));
        let ds = self.data_digests(first, n, dbuf)?;
        let built = build_block(self.g, &ds);
        let at = (self.l0_start + j) * self.hbs as u64;
        if let Err(e) = read_at(self.hash, "hash", stored, at) {
            return self.fail(e);
        }
        if *built != *stored {
            self.note_mismatch(j, first, n, &built, stored);
        }
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.digests.get(j)) {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = block_digest(p, &built);
        }
        self.done.fetch_add(1, Ordering::Relaxed);
        ControlFlow::Continue(())
    }

    /// The digests of the `n` data blocks from `first`, read [`Level0::batch`] blocks at
    /// a time into `dbuf`; `Break` when the worker must stop.
    #[inline]
    fn data_digests(&self, first: u64, n: usize, dbuf: &mut [u8]) -> ControlFlow<(), Vec<Vec<u8>>> {
        let dbs = self.dbs;
        let mut ds: Vec<Vec<u8>> = Vec::with_capacity(n);
        while ds.len() < n {
            let k = (n - ds.len()).min(self.batch);
            let Some(chunk) = dbuf.get_mut(..k * dbs) else {
                return ControlFlow::Break(());
            };
            let at = (first + ds.len() as u64) * dbs as u64;
            if let Err(e) = read_at(self.data, "data", chunk, at) {
                return self.fail(e);
            }
            ds.extend(
                chunk
                    .chunks_exact(dbs)
                    .map(|b| block_digest(&self.g.params, b)),
            );
        }
        ControlFlow::Continue(ds)
    }

    /// Keeps the read failure `e` and stops the worker.
    fn fail<T>(&self, e: TreeError) -> ControlFlow<(), T> {
        *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        ControlFlow::Break(())
    }

    /// Keeps the disagreement of level-0 hash block `j` (covering `n` data blocks from
    /// `first`; `built` from the data, `stored` read) when it is the earliest so far.
    fn note_mismatch(&self, j: u64, first: u64, n: usize, built: &[u8], stored: &[u8]) {
        // Which entry? A differing entry names its data block; a difference only in the
        // padding names the hash block.
        let entry = built
            .chunks_exact(self.g.stride)
            .zip(stored.chunks_exact(self.g.stride))
            .take(n)
            .position(|(a, b)| a != b);
        let (pos, f) = match entry {
            Some(k) => (
                first + k as u64,
                Finding::DataBlock {
                    index: first + k as u64,
                    hash_block: self.l0_start + j,
                },
            ),
            None => (
                first + n as u64,
                Finding::HashBlock {
                    level: 0,
                    block: self.l0_start + j,
                },
            ),
        };
        let mut fb = self.first_bad.lock().unwrap_or_else(|p| p.into_inner());
        if pos < self.first_bad_at.load(Ordering::Relaxed) {
            self.first_bad_at.store(pos, Ordering::Relaxed);
            *fb = Some(f);
        }
    }

    /// After the workers: the read failure, else the earliest disagreement, else every
    /// level-0 block's digest.
    fn finish(self) -> Result<Level0Result, TreeError> {
        if let Some(e) = self.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        if let Some(f) = self
            .first_bad
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
        {
            return Ok(Err(f));
        }
        Ok(Ok(self
            .digests
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect()))
    }
}

/// Checks the levels above level 0, in order, from `below` (level 0's digests; `per_len`
/// of them to a block), then the root.
fn verify_upper<H: FileExt>(
    hash: &H,
    g: &Geometry,
    mut below: Vec<Vec<u8>>,
    per_len: usize,
    root: &[u8],
    data_bytes: u64,
) -> Result<Verification, TreeError> {
    let p = &g.params;
    let hbs = p.hash_block_size as usize;
    let mut stored = vec![0u8; hbs];
    for (level, &level_start) in (1..g.levels).zip(g.level_start.iter().skip(1)) {
        let mut next_digests = Vec::with_capacity(below.len().div_ceil(per_len));
        for (j, group) in below.chunks(per_len).enumerate() {
            let built = build_block(g, group);
            let blk = level_start + j as u64;
            read_at(hash, "hash", &mut stored, blk * hbs as u64)?;
            if built != stored {
                return Ok(Verification {
                    ok: false,
                    finding: Some(Finding::HashBlock { level, block: blk }),
                    computed_root: None,
                    data_bytes,
                });
            }
            next_digests.push(block_digest(p, &built));
        }
        below = next_digests;
    }
    let computed = below.into_iter().next().unwrap_or_default();
    let ok = computed == root;
    Ok(Verification {
        ok,
        finding: (!ok).then(|| Finding::RootHash {
            computed: crate::util::hex(&computed),
        }),
        computed_root: Some(computed),
        data_bytes,
    })
}

/// Cheap check before any device exists: the stored top block hashes to `root`.
pub fn top_matches<H: FileExt>(hash: &H, g: &Geometry, root: &[u8]) -> Result<bool, TreeError> {
    let Some(&top) = g.level_start.last() else {
        return Ok(true); // nothing stored: the kernel checks the single data block
    };
    let mut b = vec![0u8; g.params.hash_block_size as usize];
    read_at(
        hash,
        "hash",
        &mut b,
        top * u64::from(g.params.hash_block_size),
    )?;
    Ok(block_digest(&g.params, &b) == root)
}

/// Builds a whole tree in memory (for tests and small images): returns the hash area
/// (without superblock, starting at `hash_start`) and the root.
pub fn build(p: &Params, data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let dbs = p.data_block_size as usize;
    let below: Vec<Vec<u8>> = data
        .chunks(dbs)
        .take(usize::try_from(p.data_blocks).unwrap_or(usize::MAX))
        .map(|b| block_digest(p, b))
        .collect();
    build_from_digests(p, below)
}

/// Builds the tree above the data blocks' digests (`level0`: one [`block_digest`] per
/// data block, in order, `p.data_blocks` of them), so a caller can hash the data
/// streaming: returns the hash area (without superblock, starting at `hash_start`) and
/// the root. Empty vectors when `p` has no valid geometry.
pub fn build_from_digests(p: &Params, level0: Vec<Vec<u8>>) -> (Vec<u8>, Vec<u8>) {
    let g = match Geometry::new(p, 0, false) {
        Ok(g) => g,
        Err(_) => return (Vec::new(), Vec::new()),
    };
    let hbs = p.hash_block_size as usize;
    let per = 1usize << g.bits;
    let mut below = level0;
    if g.levels == 0 {
        return (Vec::new(), below.into_iter().next().unwrap_or_default());
    }
    let Ok(area_len) = usize::try_from(g.hash_end() - g.hash_start * hbs as u64) else {
        return (Vec::new(), Vec::new());
    };
    let mut area = vec![0u8; area_len];
    for &start in &g.level_start {
        let mut next = Vec::new();
        for (j, group) in below.chunks(per).enumerate() {
            let b = build_block(&g, group);
            let Ok(level_at) = usize::try_from(start - g.hash_start) else {
                return (Vec::new(), Vec::new());
            };
            let at = level_at + j;
            if let Some(dst) = area.get_mut(at * hbs..(at + 1) * hbs) {
                dst.copy_from_slice(&b);
            }
            next.push(block_digest(p, &b));
        }
        below = next;
    }
    (area, below.into_iter().next().unwrap_or_default())
}

#[cfg(test)]
mod tests;

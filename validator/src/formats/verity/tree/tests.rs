//! The hash tree's unit tests: trees built here, checked against the format's rules.

use super::*;

fn params(alg: Algorithm, dbs: u32, hbs: u32, blocks: u64, salt: &[u8]) -> Params {
    Params {
        hash_type: 1,
        algorithm: alg,
        data_block_size: dbs,
        hash_block_size: hbs,
        data_blocks: blocks,
        salt: salt.to_vec(),
        uuid: [0; 16],
    }
}

#[test]
fn geometry_like_the_kernel() {
    // 1 GiB of 4 KiB blocks, sha256: 128 hashes per block, 3 levels.
    let g = Geometry::new(&params(Algorithm::Sha256, 4096, 4096, 262144, b""), 0, true).unwrap();
    assert_eq!((g.bits, g.stride, g.levels), (7, 32, 3));
    assert_eq!(g.hash_start, 1);
    assert_eq!(g.level_blocks, vec![2048, 16, 1]);
    assert_eq!(g.level_start, vec![18, 2, 1]);
    // sha1 entries are padded to 32 bytes; sha512 use 64.
    let g = Geometry::new(&params(Algorithm::Sha1, 4096, 4096, 10, b""), 0, true).unwrap();
    assert_eq!((g.bits, g.stride), (7, 32));
    let g = Geometry::new(&params(Algorithm::Sha512, 512, 512, 10, b""), 4096, true).unwrap();
    assert_eq!((g.bits, g.stride, g.hash_start), (3, 64, 9));
    // One data block: no tree, the root is its hash.
    let g = Geometry::new(&params(Algorithm::Sha256, 4096, 4096, 1, b""), 0, true).unwrap();
    assert_eq!(g.levels, 0);
    assert!(Geometry::new(&params(Algorithm::Sha512, 4096, 64, 10, b""), 0, true).is_err());
}

struct Mem(Vec<u8>);
impl FileExt for Mem {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        let off = usize::try_from(off).unwrap();
        if off >= self.0.len() {
            return Ok(0);
        }
        let n = buf.len().min(self.0.len() - off);
        buf[..n].copy_from_slice(&self.0[off..off + n]);
        Ok(n)
    }
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<usize> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

#[test]
fn built_trees_verify_and_corruption_is_named() {
    for (alg, dbs, hbs, blocks, salt) in [
        (Algorithm::Sha256, 4096u32, 4096u32, 300u64, &b"salty"[..]),
        (Algorithm::Sha1, 512, 1024, 5000, b""),
        (Algorithm::Sha512, 1024, 512, 77, &[1u8; 64][..]),
        (Algorithm::Sha256, 4096, 4096, 1, b"s"),
    ] {
        let p = params(alg, dbs, hbs, blocks, salt);
        let data: Vec<u8> = (0..usize::try_from(blocks).unwrap() * dbs as usize)
            .map(|i| u8::try_from(i * 31 % 251).unwrap())
            .collect();
        let (area, root) = build(&p, &data);
        let g = Geometry::new(&p, 0, false).unwrap();
        let check = |d: &[u8], a: &[u8], threads| {
            verify(
                &Mem(d.to_vec()),
                d.len() as u64,
                &Mem(a.to_vec()),
                a.len() as u64,
                &g,
                &root,
                threads,
            )
            .unwrap()
        };
        for t in [1, 3] {
            let v = check(&data, &area, t);
            assert!(v.ok, "{alg:?} {t}: {:?}", v.finding);
            assert_eq!(v.computed_root.as_deref(), Some(root.as_slice()));
        }
        let mut d2 = data.clone();
        let victim = (blocks / 2) as usize * dbs as usize + 7;
        d2[victim] ^= 1;
        let v = check(&d2, &area, 2);
        assert!(!v.ok);
        if blocks > 1 {
            assert_eq!(
                v.finding,
                Some(Finding::DataBlock {
                    index: blocks / 2,
                    hash_block: g.level_start[0] + blocks / 2 / (1 << g.bits)
                })
            );
            let mut a2 = area.clone();
            let last = a2.len() - 1;
            a2[last] ^= 1; // padding of the last block of the lowest level
            let v = check(&data, &a2, 2);
            assert!(!v.ok, "{alg:?}: padding corruption missed");
            assert!(top_matches(&Mem(area.clone()), &g, &root).unwrap());
            let mut a3 = area.clone();
            a3[0] ^= 1; // the top block
            assert!(!top_matches(&Mem(a3), &g, &root).unwrap());
        }
    }
}

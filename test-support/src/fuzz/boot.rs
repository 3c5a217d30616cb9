//! The boot's own inputs: the kernel command line, the BOM, the GPT, dm-verity's superblock,
//! root-hash signature and hash tree, the root image's filesystem, the GRUB environment
//! block, BLS entry names and our slot record.

use super::*;

/// Kernel command line: the kernel's splitting and our keys.
pub fn cmdline(data: &[u8]) {
    let line = String::from_utf8_lossy(data);
    let split = validator::config::cmdline::split(&line);
    let args = validator::config::cmdline::BootArgs::parse(&line);
    // The arguments after `--` are the same whichever way the line is read.
    assert_eq!(args.init_args, split.init_args);
}

/// BOM: parse, and a parsed BOM written back as TOML parses to the same BOM.
pub fn bom(data: &[u8]) {
    let Ok(loaded) = validator::config::bom::parse(data, Path::new("fuzz.toml")) else {
        return;
    };
    let text = loaded
        .bom
        .to_toml()
        .unwrap_or_else(|e| panic!("a parsed BOM does not serialise: {e}"));
    match validator::config::bom::parse(text.as_bytes(), Path::new("again.toml")) {
        Ok(again) => assert_eq!(again.bom, loaded.bom, "BOM changed through TOML:\n{text}"),
        Err(e) => panic!("a parsed BOM written back does not parse: {e}\n{text}"),
    }
}

/// Bytes read at offsets, as a disk image in memory.
struct Mem<'a>(&'a [u8]);

impl FileExt for Mem<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let start = usize::try_from(offset)
            .ok()
            .filter(|o| *o <= self.0.len())
            .unwrap_or(self.0.len());
        let rest = self.0.get(start..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> std::io::Result<usize> {
        Err(std::io::Error::other("read-only"))
    }
}

/// GPT: a header from the first two sectors, its entries, and the whole table read from
/// the input as a disk of 512- and 4096-byte sectors.
pub fn gpt(data: &[u8]) {
    for sector in [512usize, 4096] {
        if let Some(s) = data.get(sector..) {
            if let Ok(h) = formats::gpt::parse_header(s.get(..sector).unwrap_or(s)) {
                let _ = formats::gpt::parse_entries(&h, data);
            }
        }
        let size = data.len() as u64;
        if let Ok(t) = formats::gpt::read_table(&Mem(data), size, sector as u64, Path::new("fuzz"))
        {
            // Every partition the table gives lies on the disk (the kernel's is_pte_valid).
            let last = size / sector as u64 - 1;
            for p in &t.partitions {
                assert!(
                    p.first_lba <= p.last_lba && p.last_lba <= last,
                    "partition {} ({}..{}) on a disk of LBAs 0..={last}",
                    p.number,
                    p.first_lba,
                    p.last_lba
                );
            }
        }
    }
}

/// A dm-verity superblock: parse, encode back (same parameters), the tree geometry, and a
/// verification of the input as both data and hash device when small enough.
pub fn verity_superblock(data: &[u8]) {
    use formats::verity::{superblock, tree};
    let Ok(p) = superblock::parse(data) else {
        return;
    };
    let again = superblock::parse(&superblock::encode(&p))
        .unwrap_or_else(|e| panic!("an encoded superblock does not parse: {e}"));
    assert_eq!(again, p, "superblock changed through encode");
    for (offset, with_sb) in [(0, true), (4096, false)] {
        let Ok(g) = tree::Geometry::new(&p, offset, with_sb) else {
            continue;
        };
        if g.hash_end() <= data.len() as u64 && g.data_end() <= 1 << 20 {
            let dev = Mem(data);
            let root = vec![0u8; p.algorithm.digest_size()];
            let _ = tree::verify(
                &dev,
                data.len() as u64,
                &dev,
                data.len() as u64,
                &g,
                &root,
                1,
            );
            let _ = tree::top_matches(&dev, &g, &root);
        }
    }
}

/// `root-verity-sig` JSON with `[u16 len][certificate DER]` in front: parse, and verify
/// against a store holding that certificate.
pub fn verity_sig(data: &[u8]) {
    let (store, json) = framed_store(data);
    if let Ok(sig) = formats::verity::sig::parse(json) {
        let _ = validator::trust::rootsig::verify(&sig, &store);
    }
}

/// The dm-verity hash tree (`formats::verity::tree`) over data of the fuzzer's choosing:
/// `[algorithm][hash type][data block size][hash block size][salt length][salt][data]`
/// (each size byte picks 512 << (b % 4); the algorithm b % 3 of SHA-1, SHA-256, SHA-512;
/// the salt at most 64 bytes; the data cut to whole blocks, at most 1 MiB). A tree built
/// over the data verifies and matches its root; with one data byte changed it does not.
pub fn verity_tree(data: &[u8]) {
    use formats::verity::superblock::{Algorithm, Params};
    use formats::verity::tree;
    let Some(([alg, hash_type, dbs, hbs, salt_len], rest)) = data.split_first_chunk::<5>() else {
        return;
    };
    let Some((salt, rest)) = rest.split_at_checked(usize::from(*salt_len % 65)) else {
        return;
    };
    let dbs = 512u32 << (dbs % 4);
    let blocks = rest.len().min(1 << 20) / dbs as usize;
    if blocks == 0 {
        return;
    }
    let Some(body) = rest.get(..blocks * dbs as usize) else {
        return;
    };
    let p = Params {
        hash_type: u32::from(hash_type & 1),
        algorithm: match alg % 3 {
            0 => Algorithm::Sha1,
            1 => Algorithm::Sha256,
            _ => Algorithm::Sha512,
        },
        data_block_size: dbs,
        hash_block_size: 512u32 << (hbs % 4),
        data_blocks: blocks as u64,
        salt: salt.to_vec(),
        uuid: [0; 16],
    };
    let Ok(g) = tree::Geometry::new(&p, 0, false) else {
        return;
    };
    let (area, root) = tree::build(&p, body);
    let check = |d: &[u8]| {
        tree::verify(
            &Mem(d),
            d.len() as u64,
            &Mem(&area),
            area.len() as u64,
            &g,
            &root,
            1,
        )
        .unwrap_or_else(|e| panic!("a built tree does not read: {e}"))
    };
    let v = check(body);
    assert!(v.ok, "a built tree does not verify: {:?}", v.finding);
    assert_eq!(v.computed_root.as_deref(), Some(root.as_slice()));
    assert!(
        tree::top_matches(&Mem(&area), &g, &root).unwrap_or(false),
        "a built tree's top block does not match its root"
    );
    let mut changed = body.to_vec();
    let at = usize::from(*alg) * 257 % changed.len();
    if let Some(b) = changed.get_mut(at) {
        *b ^= 1;
    }
    assert!(!check(&changed).ok, "a changed data byte {at} verifies");
}

/// A root filesystem image's first bytes (`formats::fsimage`): the filesystem and the
/// size its superblock claims. A size comes only with a filesystem; more bytes after the
/// superblock never change either answer.
pub fn fsimage(data: &[u8]) {
    use formats::fsimage::{detect, size};
    let (fs, n) = (detect(data), size(data));
    assert!(n.is_none() || fs.is_some(), "a size without a filesystem");
    if data.len() >= 4096 {
        let mut longer = data.to_vec();
        longer.extend_from_slice(b"trailing bytes");
        assert_eq!(
            (detect(&longer), size(&longer)),
            (fs, n),
            "trailing bytes changed it"
        );
    }
}

/// The GRUB environment block, then edits: the input is the block, a NUL byte, and edit
/// lines (`sNAME=VALUE` sets, `dNAME` deletes). After each edit the block keeps its size
/// and parses again; an edit that succeeds reads back as it says (the first line of that
/// name changed, appended or removed, every other variable as it was; `get` returns the
/// value set), a refused one leaves the variables as they were.
pub fn grubenv(data: &[u8]) {
    use formats::grubenv::GrubEnv;
    let (block, edits) = match data.iter().rposition(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(mut env) = GrubEnv::parse(block) else {
        return;
    };
    let size = env.as_bytes().len();
    assert_eq!(env.as_bytes(), block);
    for line in String::from_utf8_lossy(edits).split('\n') {
        let before = env.vars();
        let mut expect = before.clone();
        let result = if let Some(set) = line.strip_prefix('s') {
            let (name, value) = set.split_once('=').unwrap_or((set, ""));
            match expect.iter_mut().find(|(n, _)| n == name) {
                Some(v) => v.1 = value.to_string(),
                None => expect.push((name.to_string(), value.to_string())),
            }
            env.set(name, value).map(|()| Some((name, value)))
        } else if let Some(name) = line.strip_prefix('d') {
            if let Some(i) = expect.iter().position(|(n, _)| n == name) {
                expect.remove(i);
            }
            env.delete(name).map(|()| None)
        } else {
            continue;
        };
        assert_eq!(env.as_bytes().len(), size, "the block changed size");
        let again = GrubEnv::parse(env.as_bytes())
            .unwrap_or_else(|e| panic!("an edited block does not parse: {e}"));
        assert_eq!(again, env);
        // A name that is not UTF-8 reads (lossily) like U+FFFD: the model by text cannot
        // tell such names apart, the block's bytes can.
        let lossy = before.iter().any(|(n, _)| n.contains('\u{fffd}'));
        match result {
            Ok(set) => {
                if !lossy {
                    assert_eq!(env.vars(), expect, "edit {line:?}");
                }
                if let Some((name, value)) = set {
                    assert_eq!(env.get(name).as_deref(), Some(value), "edit {line:?}");
                }
            }
            // A refused edit leaves the block as it was.
            Err(_) => assert_eq!(
                env.vars(),
                before,
                "refused edit {line:?} changed the block"
            ),
        }
    }
}

/// Boot Loader Specification entries: the file name with its boot counters (the input's
/// first line), the entry file, and the EFI variable holding the booted entry's path.
pub fn bls(data: &[u8]) {
    use formats::bls::{efivar_utf16, Entry, EntryName};
    let _ = efivar_utf16(data, "fuzz");
    let _ = Entry::parse(data, "fuzz.conf");
    let text = String::from_utf8_lossy(data);
    let first = text.split('\n').next().unwrap_or("");
    let Ok(name) = EntryName::parse(first) else {
        return;
    };
    let again = EntryName::parse(&name.file_name())
        .unwrap_or_else(|e| panic!("{:?} does not parse again: {e}", name.file_name()));
    assert_eq!(again, name, "entry name changed through file_name");
    let bad = EntryName::parse(&name.marked_bad().file_name())
        .unwrap_or_else(|e| panic!("the bad mark of {first:?} does not parse: {e}"));
    assert!(bad.bad() && bad.id == name.id && bad.done == name.done);
    // Marking good drops the counters and keeps the id.
    let good = EntryName::parse(&name.marked_good().file_name())
        .unwrap_or_else(|e| panic!("the good mark of {first:?} does not parse: {e}"));
    assert!(
        !good.counting() && good.id == name.id,
        "{first:?} marked good: {good:?}"
    );
}

/// Our A/B state record: decode, encode back, decode again to the same record; the
/// choice between two copies.
pub fn slotstate(data: &[u8]) {
    use formats::slotstate::{decode, encode, newest, next_copy, FILE_SIZE};
    let r = decode(data);
    if let Ok(rec) = &r {
        let bytes = encode(rec, FILE_SIZE)
            .unwrap_or_else(|e| panic!("a decoded record does not encode: {e}"));
        let again =
            decode(&bytes).unwrap_or_else(|e| panic!("an encoded record does not decode: {e}"));
        assert_eq!(&again, rec, "state record changed through encode");
    }
    let copies = [r, decode(data.get(data.len() / 2..).unwrap_or_default())];
    let n = next_copy(&copies);
    if let Some((i, _)) = newest(&copies) {
        assert_ne!(i, n, "the next write would overwrite the newest copy");
    }
}

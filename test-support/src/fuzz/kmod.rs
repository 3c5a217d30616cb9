//! Modules and the initramfs: the cpio archive, `.modinfo`, the appended signature,
//! modprobe.d, kernel images, the decompressors, kmod's index and `Module.symvers`.

use super::*;

/// The initramfs readers: `mkinitramfs list`'s unpack (plain and compressed parts, as the
/// kernel's `unpack_to_rootfs`, output limited to [`OUTPUT_LIMIT`]) and the plain newc
/// reader, which agree where both read; then what was read, written again through both
/// front ends of the one newc writer (`formats::newc`: mkinitramfs' sorted [`Archive`] and
/// the kexec stage's streaming `Writer`) and read back.
///
/// [`Archive`]: mkinitramfs::cpio::Archive
pub fn cpio(data: &[u8]) {
    let unpacked = mkinitramfs::unpack::unpack(data, OUTPUT_LIMIT);
    let read = mkinitramfs::cpio::read(data);
    if let (Ok(u), Ok(r)) = (&unpacked, &read) {
        assert_eq!(u, r, "unpack and read disagree");
    }
    let entries = match (unpacked, read) {
        (Ok(e), _) | (_, Ok(e)) => e,
        _ => return,
    };
    // mkinitramfs' writer: every entry with a clean path and a kind it writes.
    let mut archive = mkinitramfs::cpio::Archive::new();
    let mut newc = formats::newc::Writer::new();
    let mut files = std::collections::BTreeMap::new();
    for e in &entries {
        use mkinitramfs::cpio::{Entry, Kind};
        let kind = match e.mode & 0o170000 {
            0o040000 => Kind::Dir,
            0o100000 => Kind::File(e.data.clone()),
            0o120000 => match String::from_utf8(e.data.clone()) {
                Ok(t) => Kind::Symlink(t),
                Err(_) => continue,
            },
            0o020000 => Kind::CharDev {
                major: e.rdev.0,
                minor: e.rdev.1,
            },
            0o060000 => Kind::BlockDev {
                major: e.rdev.0,
                minor: e.rdev.1,
            },
            _ => continue,
        };
        let regular = matches!(kind, Kind::File(_));
        if archive
            .add(
                &e.path,
                Entry {
                    kind,
                    perm: e.mode & 0o7777,
                },
            )
            .is_ok()
            && regular
        {
            files.insert(e.path.trim_start_matches('/').to_string(), e.data.clone());
        }
    }
    let written = archive.write(0);
    let back = mkinitramfs::cpio::read(&written)
        .unwrap_or_else(|e| panic!("mkinitramfs' own archive does not read back: {e}"));
    let mut got = std::collections::BTreeMap::new();
    for e in &back {
        if e.mode & 0o170000 == 0o100000 {
            got.insert(e.path.clone(), e.data.clone());
        }
    }
    assert_eq!(
        got, files,
        "regular files changed through mkinitramfs' writer"
    );
    // The validator's writer: the same regular files.
    for (path, data) in &files {
        newc.file(path, data);
    }
    let back = mkinitramfs::cpio::read(&newc.finish())
        .unwrap_or_else(|e| panic!("the kexec newc archive does not read back: {e}"));
    let got: std::collections::BTreeMap<String, Vec<u8>> =
        back.into_iter().map(|e| (e.path, e.data)).collect();
    assert_eq!(got, files, "regular files changed through the kexec writer");
}

/// A module's ELF: `.modinfo`, `__versions`, the exports, and the gate's whole check with
/// an empty trust store, which must never pass a module when signatures are required.
pub fn modinfo(data: &[u8]) {
    use validator::gate::{Gate, Policy};
    let _ = formats::kmod::modinfo::parse_elf(data);
    let _ = formats::kmod::modinfo::exports(data);
    let gate = Gate {
        policy: Policy {
            require_signature: true,
            ..Policy::default()
        },
        symvers: Some(formats::kmod::symvers::Symvers::default()),
        ..Gate::default()
    };
    let (v, _) = gate.check("fuzz", "fuzz.ko", data);
    assert!(!v.pass, "a module passed with an empty trust store: {v:?}");
}

/// A signed module with `[u16 len][certificate DER]` in front: the trailer, the PKCS#7,
/// the detached verification against a store holding that certificate, and the gate's
/// check with that store. What the gate passes must rest on the trust and on the body:
/// with an empty store it fails, and with one body byte changed it fails.
pub fn modsig(data: &[u8]) {
    use validator::gate::{Gate, Policy};
    let (store, module) = framed_store(data);
    let body_len = match formats::kmod::sig::split(module) {
        Ok(s) => {
            let _ = formats::pkcs7::parse(s.pkcs7);
            let _ = validator::trust::pkcs7::verify_detached(s.pkcs7, s.body, &store);
            Some(s.body.len())
        }
        Err(_) => None,
    };
    let policy = Policy {
        require_signature: true,
        ..Policy::default()
    };
    let gate = Gate {
        trust: store,
        policy: policy.clone(),
        ..Gate::default()
    };
    let (v, _) = gate.check("fuzz", "fuzz.ko", module);
    if !v.pass {
        return;
    }
    let untrusting = Gate {
        policy,
        ..Gate::default()
    };
    let (u, _) = untrusting.check("fuzz", "fuzz.ko", module);
    assert!(
        !u.pass,
        "the gate passed a module with no trusted key: {u:?}"
    );
    let body_len = body_len.unwrap_or_else(|| panic!("the gate passed an unsigned module: {v:?}"));
    let mut changed = module.to_vec();
    if let Some(b) = changed.get_mut(body_len / 2) {
        *b ^= 0x01;
    }
    let (c, _) = gate.check("fuzz", "fuzz.ko", &changed);
    assert!(
        !c.pass,
        "the gate passed a module after a body byte changed: {c:?}"
    );
}

/// `modprobe.d` text and a kernel command line, split at the first NUL: the directives
/// and the command line's options and blacklist as kmod reads them. Module names are
/// kept in the kernel's spelling (respelling one changes nothing).
pub fn modprobe(data: &[u8]) {
    use formats::kmod::modprobe::{underscores, Config};
    let (conf, cmdline) = match data.iter().position(|&b| b == 0) {
        Some(i) => (
            data.get(..i).unwrap_or_default(),
            data.get(i + 1..).unwrap_or_default(),
        ),
        None => (data, &[][..]),
    };
    let mut c = Config::default();
    c.add_file("fuzz.conf", conf);
    c.add_cmdline(cmdline);
    for e in &c.options {
        assert_eq!(
            underscores(&e.module).as_deref(),
            Some(e.module.as_str()),
            "a module name not in the kernel's spelling"
        );
        let _ = c.options(&e.module);
    }
    for (m, _) in &c.blacklist {
        let _ = c.blacklisted(m);
    }
}

/// A kernel image: bzImage or vmlinux, payload decompressed up to [`OUTPUT_LIMIT`], then
/// release, vermagic, exported CRCs and built-in certificates.
pub fn vmlinuz(data: &[u8]) {
    let Ok(elf) = formats::vmlinuz::vmlinux_limited(data, OUTPUT_LIMIT) else {
        return;
    };
    assert!(elf.len() <= OUTPUT_LIMIT.max(data.len()));
    // `from_image` of an ELF does not decompress: the same reads the gate makes.
    let _ = formats::vmlinuz::KernelFacts::from_image(&elf);
    let _ = formats::vmlinuz::builtin_certs(&elf);
}

/// Decompression: the first byte picks the decoder (xz, zstd, gzip, legacy LZ4, then one
/// xz stream, zstd frame or gzip member, then the module file formats), the rest is the
/// input; output is limited to [`OUTPUT_LIMIT`].
pub fn compress(data: &[u8]) {
    use formats::compress as c;
    use formats::kmod::modinfo::Compression;
    let Some((&which, input)) = data.split_first() else {
        return;
    };
    let out = match which % 7 {
        0 => c::xz(input, OUTPUT_LIMIT),
        1 => c::zstd(input, OUTPUT_LIMIT),
        2 => c::gzip(input, OUTPUT_LIMIT),
        3 => c::lz4_legacy(input, OUTPUT_LIMIT),
        // One stream, frame or member and where it ends (the initramfs and vmlinuz
        // readers continue after it).
        n => {
            let one = match n {
                4 => c::xz_stream(input, OUTPUT_LIMIT),
                5 => c::zstd_frame(input, OUTPUT_LIMIT),
                _ => c::gzip_member(input, OUTPUT_LIMIT),
            };
            if let Ok(d) = &one {
                assert!(
                    d.consumed <= input.len(),
                    "consumed {} of {}",
                    d.consumed,
                    input.len()
                );
            }
            one.map(|d| d.data)
        }
    };
    if let Ok(o) = out {
        assert!(o.len() <= OUTPUT_LIMIT, "{} bytes out", o.len());
    }
    // What a module file's name selects (the gate's path for .ko.xz/.zst/.gz), only for
    // inputs too small to expand past the limit.
    if input.len() < 4096 {
        let comp = [Compression::Xz, Compression::Zstd, Compression::Gzip][usize::from(which) % 3];
        let _ = formats::kmod::modinfo::decompress(input, comp);
    }
}

/// The module index (`modules.dep`, `modules.softdep`, `modules.builtin`, a `softdep=`
/// value), and the texts we write back read as the index they came from.
pub fn kmod_index(data: &[u8]) {
    use formats::kmod::index::{self, Index};
    let text = String::from_utf8_lossy(data);
    let _ = index::parse_builtin(&text);
    let _ = index::parse_softdep_value(&text);
    for line in text.lines() {
        let _ = index::name_of_path(line);
    }
    if let Ok(entries) = index::parse_dep(&text, Path::new("modules.dep")) {
        let ix = Index {
            entries: entries.clone(),
            ..Index::default()
        };
        let again = index::parse_dep(&ix.dep_text(), Path::new("again.dep"))
            .unwrap_or_else(|e| panic!("written modules.dep does not parse: {e}"));
        assert_eq!(again.len(), entries.len());
        for (name, e) in &entries {
            let a = again
                .get(name)
                .unwrap_or_else(|| panic!("{name} lost through dep_text"));
            assert_eq!(a.path, e.path);
            let known: Vec<&String> = e.deps.iter().filter(|d| entries.contains_key(*d)).collect();
            assert_eq!(a.deps.iter().collect::<Vec<_>>(), known, "deps of {name}");
        }
    }
    if let Ok(soft) = index::parse_softdep(&text, Path::new("modules.softdep")) {
        let ix = Index {
            softdeps: soft.clone(),
            ..Index::default()
        };
        let again = index::parse_softdep(&ix.softdep_text(), Path::new("again.softdep"))
            .unwrap_or_else(|e| panic!("written modules.softdep does not parse: {e}"));
        let kept: std::collections::BTreeMap<_, _> = soft
            .into_iter()
            .filter(|(_, s)| !s.pre.is_empty() || !s.post.is_empty())
            .collect();
        assert_eq!(again, kept);
    }
}

/// `Module.symvers`: parse, and the table written back parses to the same table.
pub fn symvers(data: &[u8]) {
    use formats::kmod::symvers::Symvers;
    let Ok(table) = Symvers::parse(&String::from_utf8_lossy(data)) else {
        return;
    };
    let text = table.to_text();
    let again = Symvers::parse(&text)
        .unwrap_or_else(|e| panic!("written Module.symvers does not parse: {e}"));
    assert_eq!(again, table, "symbol table changed through to_text");
}

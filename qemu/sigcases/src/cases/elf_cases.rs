//! The module itself: ELF, vermagic, CRCs and licence (`main.c`, `version.c`), each case
//! re-signed with a db key.

use super::*;

/// The cases of ELF, vermagic, CRCs, licence (main.c, version.c), each re-signed with a db key.
pub(super) fn module_file(b: &mut Builder, c: &Common) {
    let Common {
        root,
        release,
        k,
        crc8_path,
        body,
        ..
    } = c;
    let kernel = c.kernel;
    let sha256 = "sha256";
    let resign = |b: &mut Builder,
                  id: &str,
                  row: &'static str,
                  what: &'static str,
                  module: &'static str,
                  edited: Vec<u8>| {
        let m = b.sign_file(&edited, &k.snake, sha256, false);
        b.add(id, row, what, module, &m);
    };
    let mut e = body.clone();
    e[0x12] = 0xb7;
    e[0x13] = 0;
    resign(b, "V01a", "V01", "e_machine aarch64", "crc8", e);
    let mut e = body.clone();
    let past = (body.len() as u64 + 0x1000).to_le_bytes();
    e[0x28..0x30].copy_from_slice(&past);
    resign(
        b,
        "V01b",
        "V01",
        "section headers beyond the end of the file",
        "crc8",
        e,
    );
    let mut e = body.clone();
    let s = elf::section(&e, ".symtab");
    e[s.header + 4..s.header + 8].copy_from_slice(&1u32.to_le_bytes());
    resign(
        b,
        "V02",
        "V02",
        "the symbol table's type changed to PROGBITS",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::rename_section(
        &mut e,
        ".gnu.linkonce.this_module",
        ".gnu.linkonce.this_modulX",
    );
    resign(
        b,
        "V03",
        "V03",
        ".gnu.linkonce.this_module renamed",
        "crc8",
        e,
    );
    // A second .modinfo after the first, with another vermagic.
    let mi = b.tmp(b"");
    let src = b.tmp(body);
    run(Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.modinfo"])
        .arg(&src)
        .arg(&mi));
    let bad_mi = replace_once(&std::fs::read(&mi).unwrap(), b" preempt ", b" preemPt ");
    std::fs::write(&mi, bad_mi).unwrap();
    let dup = b.tmp(b"");
    run(Command::new("objcopy")
        .arg(format!("--add-section=.modinfX={}", mi.display()))
        .args(["--set-section-flags", ".modinfX=alloc,readonly,data"])
        .arg(&src)
        .arg(&dup));
    let mut e = std::fs::read(&dup).unwrap();
    let first = elf::section(&e, ".modinfo");
    let second = elf::section(&e, ".modinfX");
    e[second.header..second.header + 4].copy_from_slice(&first.name_off.to_le_bytes());
    resign(
        b,
        "V04",
        "V04",
        "a second .modinfo (with another vermagic) after the first",
        "crc8",
        e,
    );
    let (crc7, _) = shipped(root, "kernel/lib/crc7");
    b.add(
        "V05",
        "V05",
        "Debian's crc7, named in module_blacklist=",
        BLACKLISTED,
        &crc7,
    );
    let mut e = body.clone();
    let r = elf::version_record(&e, "module_layout");
    e[r] = e[r].wrapping_add(1);
    resign(b, "V06", "V06", "module_layout's CRC changed", "crc8", e);
    let mut e = body.clone();
    let thunk = elf::versions(&e)
        .into_iter()
        .find(|(_, n)| n == "__x86_return_thunk")
        .unwrap();
    let r = elf::version_record(&e, "module_layout");
    e[r..r + 64].copy_from_slice(&elf::record(thunk.0, &thunk.1));
    resign(
        b,
        "V07",
        "V07",
        "module_layout's record replaced by another symbol's",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"vermagic=", b"vermagiX=");
    resign(b, "V08", "V08", "no vermagic= in .modinfo", "crc8", e);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b" preempt ", b" preemPt ");
    resign(b, "V09a", "V09", "vermagic preemPt", "crc8", e);
    let (rel_from, rel_to) = release_edit(release);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", rel_from.as_bytes(), rel_to.as_bytes());
    elf::rename_section(&mut e, "__versions", "__versionz");
    resign(
        b,
        "V09b",
        "V09",
        "another release in vermagic and no __versions",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", rel_from.as_bytes(), rel_to.as_bytes());
    resign(
        b,
        "V10",
        "V10",
        "another release in vermagic (with __versions)",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::rename_section(&mut e, "__versions", "__versionz");
    resign(b, "V11", "V11", "no __versions section", "crc8", e);
    let mut e = body.clone();
    let r = elf::version_record(&e, "__x86_return_thunk");
    e[r] = e[r].wrapping_add(1);
    resign(
        b,
        "V12",
        "V12",
        "an imported symbol's CRC changed",
        "crc8",
        e,
    );
    let mut e = body.clone();
    let layout = elf::versions(&e)
        .into_iter()
        .find(|(_, n)| n == "module_layout")
        .unwrap();
    let r = elf::version_record(&e, "__x86_return_thunk");
    e[r..r + 64].copy_from_slice(&elf::record(layout.0, &layout.1));
    resign(
        b,
        "V13",
        "V13",
        "an imported symbol's record replaced by module_layout's",
        "crc8",
        e,
    );
    let s = elf::section(body, "__versions");
    let mut grown = body[s.offset..s.offset + s.size].to_vec();
    grown.extend_from_slice(&elf::record(0x1234_5678, "sigcases_unused_symbol"));
    let vers = b.tmp(&grown);
    let src = b.tmp(body);
    let upd = b.tmp(b"");
    run(Command::new("objcopy")
        .arg(format!("--update-section=__versions={}", vers.display()))
        .arg(&src)
        .arg(&upd));
    resign(
        b,
        "V14",
        "V14",
        "an extra __versions record for a symbol the module does not use",
        "crc8",
        std::fs::read(&upd).unwrap(),
    );
    let mut e = body.clone();
    elf::patch_in_section(
        &mut e,
        ".strtab",
        b"__x86_return_thunk\0",
        b"__x86_return_thunX\0",
    );
    resign(
        b,
        "V15",
        "V15",
        "an undefined symbol renamed to one nothing exports",
        "crc8",
        e,
    );
    let (pcbc, _) = shipped(root, "kernel/crypto/pcbc");
    let pcbc_body = elf::body(&pcbc);
    resign(
        b,
        "V16a",
        "V16",
        "pcbc re-signed, unchanged (GPL, uses GPL-only exports)",
        "pcbc",
        pcbc_body.clone(),
    );
    let mut e = pcbc_body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"license=GPL\0", b"license=XYZ\0");
    resign(b, "V16b", "V16", "pcbc with a non-GPL licence", "pcbc", e);
    let mut e = pcbc_body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"import_ns=", b"import_nX=");
    resign(b, "V17", "V17", "pcbc without its import_ns=", "pcbc", e);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"name=crc8\0", b"name=crc9\0");
    elf::patch_in_section(&mut e, ".gnu.linkonce.this_module", b"crc8\0", b"crc9\0");
    resign(
        b,
        "V19",
        "V19",
        "crc8 renamed crc9: exports crc8's symbols again (after crc8)",
        "crc9",
        e,
    );
    b.cases.last_mut().unwrap().after = Some("S43b");
    let mut e = body.clone();
    elf::rename_section(&mut e, ".modinfo", ".modinfX");
    resign(b, "V20", "V20", "no .modinfo section", "crc8", e);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"intree=", b"intreX=");
    resign(b, "V22", "V22", "no intree=Y", "crc8", e);
    if kernel == Kernel::K612 {
        let bytes = std::fs::read(crc8_path).unwrap();
        let cut = &bytes[..bytes.len() / 2];
        let file = b.dir.join("V24.ko.xz");
        std::fs::write(&file, cut).unwrap();
        b.cases.push(Case {
            id: "V24".into(),
            row: "V24",
            what: "Debian's .ko.xz cut in half (decompressed by the kernel)",
            file,
            module: "crc8",
            flags: MODULE_INIT_COMPRESSED_FILE,
            lockdown: false,
            after: None,
            extra_trust: Vec::new(),
        });
    }
}

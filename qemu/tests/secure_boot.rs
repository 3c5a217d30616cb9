//! The firmware as the judge where `sbverify` and `validator pe verify` disagree: OVMF
//! with Secure Boot on and only an unrelated self-signed certificate in `db` refuses to
//! start Debian's shim (which `sbverify --cert` with that certificate calls verified and
//! we refuse, `validator-cli/tests/pe.rs`); with Microsoft's `db` it starts it, and our
//! verdict against the certificates of that same `db` is "verified". And the firmware's
//! walk of the attribute certificate table: OVMF refuses shim with bytes appended inside
//! its table, as our firmware rule does on the same bytes; shim, which walks the table its
//! own way, starts GRUB whose table ends with an unpadded entry, which our firmware rule
//! (EDK2's walk) refuses.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::Path;

use qemu::secureboot::{
    change_cert_table, firmware_starts_chain, firmware_starts_shim, TableChange,
};
use validator::formats::pe::{self, SectionOrder, TableEnd};
use validator::formats::pkcs7::HashAlg;
use validator::trust::authenticode::{self, AuthenticodeError, Rule};
use validator::trust::{Cert, TrustStore};

fn shim() -> Vec<u8> {
    std::fs::read(qemu::paths::workspace().join(qemu::firmware::SHIM_SIGNED)).unwrap()
}

fn grub() -> Vec<u8> {
    std::fs::read(qemu::paths::workspace().join(qemu::firmware::GRUB_SIGNED)).unwrap()
}

/// The certificates of the `db` of OVMF's Microsoft store.
fn microsoft_db() -> TrustStore {
    let vars = qemu::efivars::VarStore::open(Path::new(qemu::firmware::OVMF_VARS_MS)).unwrap();
    let db = vars
        .get("db", qemu::efivars::IMAGE_SECURITY_DATABASE)
        .unwrap();
    let db = validator::formats::efisiglist::parse(vars.bytes.get(db.data).unwrap()).unwrap();
    let mut store = TrustStore::new();
    for der in db.certs() {
        store.add(Cert::from_der(der, "db").unwrap());
    }
    store
}

/// The Debian Secure Boot CA, as shim carries it (and trusts it for GRUB).
fn debian_ca() -> TrustStore {
    let mut store = TrustStore::new();
    store.add(Cert::from_der(&qemu::sigrules::debian_ca().unwrap(), "vendor_cert").unwrap());
    store
}

fn sha256(image: &[u8], order: SectionOrder) -> Vec<u8> {
    pe::parse(image)
        .unwrap()
        .digest(image, HashAlg::Sha256, order)
}

/// A self-signed certificate nothing trusts, as DER.
fn unrelated(dir: &Path) -> Vec<u8> {
    sigcases::keys::self_signed(dir, "unrelated", &["rsa:2048"], &[]).cert_der()
}

#[test]
fn firmware_refuses_shim_under_an_unrelated_db_and_starts_it_under_microsofts() {
    let dir = qemu::paths::run_dir("firmware-judge").unwrap();
    let cert = unrelated(&dir);
    // Our verdict with only that certificate: refused.
    let mut store = TrustStore::new();
    store.add(Cert::from_der(&cert, "unrelated").unwrap());
    let e = authenticode::verify(&shim(), &store, &[], Rule::Firmware).unwrap_err();
    assert!(e.to_string().contains("is not in the trust store"), "{e}");
    // The firmware's: refused too.
    let v = firmware_starts_shim(&dir.join("unrelated-db"), Some(&[cert])).unwrap();
    assert!(v.refused && !v.started, "{}", v.console);
    // Microsoft's db: the firmware starts shim (which starts GRUB), and our verdict
    // against the certificates of that db is verified, through Microsoft's UEFI CA.
    let v = firmware_starts_shim(&dir.join("microsoft-db"), None).unwrap();
    assert!(v.started && !v.refused, "{}", v.console);
    let ok = authenticode::verify(&shim(), &microsoft_db(), &[], Rule::Firmware).unwrap();
    assert!(
        ok.anchor.starts_with("Microsoft Corporation UEFI CA 2011"),
        "{ok:?}"
    );
}

/// EDK2's walk of the certificate table, which OVMF applies to shim: shim with 64 zero
/// bytes appended inside its table (the security directory's size grown; its signatures
/// and Authenticode digest unchanged) is refused by the firmware under Microsoft's `db`,
/// which starts the unchanged shim (the test above); our firmware rule refuses those
/// same bytes, naming the entry of length 0 at the old end of the table.
#[test]
fn firmware_refuses_shim_with_trailing_bytes_in_its_certificate_table() {
    let dir = qemu::paths::run_dir("firmware-table-end").unwrap();
    let shipped = shim();
    let changed = change_cert_table(&shipped, TableChange::Trailing(64)).unwrap();
    assert_eq!(
        sha256(&changed, SectionOrder::Firmware),
        sha256(&shipped, SectionOrder::Firmware)
    );
    let path = dir.join("shimx64-trailing.efi");
    std::fs::write(&path, &changed).unwrap();
    // Ours, on those bytes: refused for the table, whose end is where the bytes begin.
    let e = authenticode::verify(&changed, &microsoft_db(), &[], Rule::Firmware).unwrap_err();
    assert!(
        matches!(
            &e,
            AuthenticodeError::TableEnd {
                source: TableEnd::TooShort { at, len: 0, .. },
                ..
            } if *at == shipped.len()
        ),
        "{e}"
    );
    // The firmware's: refused.
    let v = firmware_starts_chain(&dir.join("boot"), None, Some(&path), None).unwrap();
    assert!(v.refused && !v.started, "{}", v.console);
}

/// Where shim's walk differs from EDK2's: shim (which checks GRUB itself, not through
/// the firmware) steps to the next entry by the length rounded up to 8 and stops at or
/// past the table's end, so it takes a table ending with an unpadded entry. GRUB whose one
/// entry is grown by a byte (its length 1473, the table 1473 bytes) starts under shim;
/// our firmware rule, EDK2's walk, refuses it, and the kernel's rule (the first entry
/// must fit in the table) verifies it.
#[test]
fn shim_starts_grub_whose_table_ends_unpadded_which_edk2s_walk_refuses() {
    let dir = qemu::paths::run_dir("shim-table-end").unwrap();
    let shipped = grub();
    let changed = change_cert_table(&shipped, TableChange::UnpaddedLast).unwrap();
    assert_eq!(
        sha256(&changed, SectionOrder::Firmware),
        sha256(&shipped, SectionOrder::Firmware)
    );
    let path = dir.join("grubx64-unpadded.efi");
    std::fs::write(&path, &changed).unwrap();
    let ca = debian_ca();
    authenticode::verify(&shipped, &ca, &[], Rule::Firmware).unwrap();
    let e = authenticode::verify(&changed, &ca, &[], Rule::Firmware).unwrap_err();
    assert!(
        matches!(
            &e,
            AuthenticodeError::TableEnd {
                source: TableEnd::Unpadded { .. },
                ..
            }
        ),
        "{e}"
    );
    let ok = authenticode::verify(&changed, &ca, &[], Rule::Kernel).unwrap();
    assert!(ok.anchor.starts_with("Debian Secure Boot CA"), "{ok:?}");
    // Shim's verdict: GRUB starts.
    let v = firmware_starts_chain(&dir.join("boot"), None, None, Some(&path)).unwrap();
    assert!(v.started && !v.refused, "{}", v.console);
}

/// The SBAT level shim applies when none newer is set: the "previous" (automatic) level
/// of its `.sbatlevel` section (a 32-bit format version, then the offsets of the previous
/// and latest levels from the end of that version, each a NUL-terminated string), taken
/// out by `objcopy` (the section's name is longer than a section header holds).
fn shim_shipped_level(dir: &Path) -> String {
    let out = dir.join("sbatlevel.bin");
    let st = std::process::Command::new("objcopy")
        .args(["-O", "binary", "--only-section=.sbatlevel"])
        .arg(qemu::paths::workspace().join(qemu::firmware::SHIM_SIGNED))
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let s = std::fs::read(&out).unwrap();
    let at = u32::from_le_bytes(s.get(4..8).unwrap().try_into().unwrap()) as usize + 4;
    let text = s.get(at..).unwrap().split(|b| *b == 0).next().unwrap();
    String::from_utf8(text.to_vec()).unwrap()
}

/// SBAT with shim as the judge (shim 16.1 under OVMF with Secure Boot on and Microsoft's
/// keys): at the level Debian's shim ships (its `.sbatlevel`, set as `SbatLevel`) shim
/// starts Debian's GRUB; at one generation above GRUB's `grub` component (a later date, so
/// shim keeps it) shim refuses GRUB. `validator pe verify --sbat-level` (the operator's CLI,
/// with the Debian CA shim trusts GRUB by) gives the same verdicts on GRUB, verifying its
/// signature either way, so the refusal is SBAT's alone; the gate's SBAT rule
/// (`formats::sbat::judge`, which the fallback check runs) passes shim's own self-check at
/// both levels, as shim did.
#[test]
fn shim_refuses_grub_above_its_sbat_generation_as_the_gate_does() {
    use validator::formats::sbat::{self, Level, Loaded};
    let (shim, grub) = (shim(), grub());
    let dir = qemu::paths::run_dir("sb-sbat-level").unwrap();
    let shipped = shim_shipped_level(&dir);
    assert!(shipped.starts_with("sbat,1,"), "{shipped:?}");
    let section = |image: &[u8]| {
        pe::parse(image)
            .unwrap()
            .section(image, ".sbat")
            .unwrap()
            .to_vec()
    };
    let grub_gen = sbat::components(&section(&grub))
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == "grub")
        .unwrap()
        .1;
    let mut above = String::from("sbat,1,2099010100\n");
    for line in shipped.lines().skip(1) {
        match line.split_once(',') {
            Some(("grub", _)) => above.push_str(&format!("grub,{}\n", grub_gen + 1)),
            _ => above.push_str(&format!("{line}\n")),
        }
    }
    if !above.contains("\ngrub,") {
        above.push_str(&format!("grub,{}\n", grub_gen + 1));
    }
    let ca = dir.join("debian-ca.der");
    std::fs::write(&ca, qemu::sigrules::debian_ca().unwrap()).unwrap();
    let cli = qemu::paths::validator_cli().unwrap();
    for (name, level, starts) in [("shipped", &shipped, true), ("above", &above, false)] {
        let l = Level::parse(level.as_bytes()).unwrap();
        sbat::judge(Some(&section(&shim)), &l, Loaded::ByShim).unwrap();
        let file = dir.join(format!("level-{name}"));
        std::fs::write(&file, level).unwrap();
        let out = std::process::Command::new(&cli)
            .args(["pe", "verify", "--rule", "firmware", "--cert"])
            .arg(&ca)
            .arg("--sbat-level")
            .arg(&file)
            .arg(qemu::paths::workspace().join(qemu::firmware::GRUB_SIGNED))
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = qemu::secureboot::shim_starts_grub_at_sbat_level(&dir.join(name), level).unwrap();
        assert_eq!(v.started, starts, "{level:?}: {}", v.console);
        assert_eq!(v.refused, !starts, "{level:?}: {}", v.console);
        assert_eq!(
            out.status.code(),
            Some(if starts { 0 } else { 1 }),
            "{line}"
        );
        if starts {
            assert!(line.contains("signature 0 verified"), "{line}");
        } else {
            assert!(v.console.contains("Security Violation"), "{}", v.console);
            assert!(
                line.ends_with(&format!(
                    "refused: its SBAT component grub is at generation {grub_gen}, below the \
                     node's level {} (SBAT revoked)\n",
                    grub_gen + 1
                )),
                "{line}"
            );
        }
    }
}

/// The fallback check (issue 36) on the chain a reboot into slot B goes through, with the
/// images shim judged above: Debian's shim and GRUB on an ESP, Debian's kernel as B's,
/// the firmware's keys as the init reads them (Secure Boot on, Microsoft's `db`, shim's
/// vendor CA as `MokListRT`). At the shipped SBAT level B would start; at the level one
/// generation above GRUB's `grub` (where shim refused GRUB under OVMF) and at one above
/// shim's own `shim` (shim's self-check) B would not be reached, and the reason names the
/// image and the component; so does a `dbx` revoking the CA that signed GRUB.
#[test]
fn the_fallback_check_refuses_a_chain_shim_would_refuse() {
    use validator::formats::efisiglist::{Database, Entry};
    use validator::formats::sbat::Level;
    use validator::runtime::slot::bootable::{check, Chain};
    use validator::runtime::uefi_keys::UefiKeys;
    use validator::trust::revocation::Revocations;
    let dir = qemu::paths::run_dir("sbat-fallback-check").unwrap();
    let boot = dir.join("esp/EFI/BOOT");
    std::fs::create_dir_all(&boot).unwrap();
    let chain = Chain {
        shim: boot.join("BOOTX64.EFI"),
        second_stage: boot.join("grubx64.efi"),
    };
    std::fs::write(&chain.shim, shim()).unwrap();
    std::fs::write(&chain.second_stage, grub()).unwrap();
    let kernel = qemu::paths::kernel("default").unwrap().vmlinuz;
    let initramfs = dir.join("initramfs");
    std::fs::create_dir_all(&initramfs).unwrap();
    let shipped = shim_shipped_level(&dir);
    let keys = |level: &str, dbx: Revocations| UefiKeys {
        secure_boot: Some(true),
        db: microsoft_db().certs,
        mok: debian_ca().certs,
        dbx,
        sbat_level: Some(Level::parse(level.as_bytes()).unwrap()),
        ..UefiKeys::default()
    };
    let v = check(
        &keys(&shipped, Revocations::default()),
        &initramfs,
        &kernel,
        Some(&chain),
    );
    assert_eq!(v.refused, None, "{}", v.note);
    assert!(
        v.note.contains("grubx64.efi: signature 0 trusted"),
        "{}",
        v.note
    );
    let reached = format!("{} would not be reached: ", kernel.display());
    for (level, image, says) in [
        (
            "sbat,1,2099010100\nshim,4\ngrub,6\n",
            &chain.second_stage,
            "its SBAT component grub is at generation 5, below the node's level 6",
        ),
        (
            "sbat,1,2099010100\nshim,5\n",
            &chain.shim,
            "its SBAT component shim is at generation 4, below the node's level 5",
        ),
    ] {
        let v = check(
            &keys(level, Revocations::default()),
            &initramfs,
            &kernel,
            Some(&chain),
        );
        let why = v.refused.unwrap_or_else(|| panic!("{level:?}: {}", v.note));
        assert!(
            why.starts_with(&format!(
                "{reached}{} would not start under Secure Boot: {says}",
                image.display()
            )),
            "{why}"
        );
    }
    let ca = qemu::sigrules::debian_ca().unwrap();
    let dbx = Revocations::from_database(
        "dbx",
        &Database {
            entries: vec![Entry::X509(ca)],
            other: 0,
        },
    );
    let v = check(&keys(&shipped, dbx), &initramfs, &kernel, Some(&chain));
    let why = v.refused.unwrap();
    assert!(why.contains("grubx64.efi would not start"), "{why}");
    assert!(why.contains("is revoked (dbx)"), "{why}");
}

/// A slot's Unified Kernel Image changed after signing, or not signed by a key the node
/// trusts, is refused by shim before any of it runs (issue 31): GRUB's `chainloader`
/// fails with shim's refusal, the shipped grub.cfg halts, and each power-on tries the
/// next slot whose try is not used, until none is left: no kernel, no loop.
/// `sb-uki-refused`: A's `.initrd` one byte off, B's `.cmdline` edited to `init=/bin/sh`;
/// then, the boot state reset, A's image unsigned and B's signed by a key in neither `db`
/// nor the MOK list. The fleet's key is enrolled as a MOK (the same images signed by it
/// boot: `sb-uki`, `qemu/tests/tpm.rs`).
#[test]
fn shim_refuses_a_changed_or_untrusted_uki_and_grub_falls_to_b_then_halts() {
    use qemu::ab::{Slot, GRUB_NO_SLOT};
    use qemu::scenario::{Name, Scenario, UkiForm};
    let bed = Scenario::named(Name::SbUkiRefused).unwrap().bed().unwrap();
    for round in ["changed after signing", "unsigned, a stranger's key"] {
        if round != "changed after signing" {
            bed.replace_uki(Slot::A, UkiForm::Unsigned).unwrap();
            bed.replace_uki(Slot::B, UkiForm::ForeignKey).unwrap();
            bed.reset_boot_state().unwrap();
        }
        for slot in ["A", "B"] {
            let run = bed.boot().unwrap();
            let c = &run.console;
            assert!(
                c.contains(&format!("boot gate: slot {slot} (")),
                "{round}: GRUB picks {slot}: {}",
                run.describe()
            );
            assert!(
                c.contains("bad shim signature"),
                "{round}, slot {slot}: shim's refusal: {}",
                run.describe()
            );
            assert!(
                c.contains(&format!(
                    "boot gate: slot {slot}: its image did not load; halting"
                )),
                "{round}, slot {slot}: {}",
                run.describe()
            );
            assert!(
                !c.contains("Linux version"),
                "{round}, slot {slot}: a kernel started"
            );
        }
    }
    let halted = bed.boot().unwrap();
    assert!(
        halted.console.contains(GRUB_NO_SLOT),
        "{}",
        halted.describe()
    );
    assert!(!halted.console.contains("Linux version"));
}

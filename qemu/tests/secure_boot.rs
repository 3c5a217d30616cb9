//! The firmware as the judge where `sbverify` and `validator pe verify` disagree: OVMF
//! with Secure Boot on and only an unrelated self-signed certificate in `db` refuses to
//! start Debian's shim (which `sbverify --cert` with that certificate calls verified and
//! we refuse, `validator-cli/tests/pe.rs`); with Microsoft's `db` it starts it, and our
//! verdict against the certificates of that same `db` is "verified".
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::Path;

use qemu::secureboot::firmware_starts_shim;
use validator::trust::authenticode::{self, Rule};
use validator::trust::{Cert, TrustStore};

fn shim() -> Vec<u8> {
    std::fs::read(qemu::paths::workspace().join(qemu::firmware::SHIM_SIGNED)).unwrap()
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
    let vars = qemu::efivars::VarStore::open(Path::new(qemu::firmware::OVMF_VARS_MS)).unwrap();
    let db = vars
        .get("db", qemu::efivars::IMAGE_SECURITY_DATABASE)
        .unwrap();
    let db = validator::formats::efisiglist::parse(&vars.bytes[db.data]).unwrap();
    let mut store = TrustStore::new();
    for der in db.certs() {
        store.add(Cert::from_der(der, "db").unwrap());
    }
    let ok = authenticode::verify(&shim(), &store, &[], Rule::Firmware).unwrap();
    assert!(
        ok.anchor.starts_with("Microsoft Corporation UEFI CA 2011"),
        "{ok:?}"
    );
}

//! Root-hash signatures for dm-verity's `root_hash_sig_key_desc`, each breaking (or
//! keeping) one rule of the kernel's `verify_pkcs7_signature` as dm-verity calls it
//! (`VERIFYING_UNSPECIFIED_SIGNATURE`: signed attributes allowed): the same
//! `root-verity-sig` rules the init applies (`validator::trust::rootsig`). All are over
//! one content, the hex root hash the caller made, and signed by `snake`, whose
//! certificate is in the judge's UEFI `db` (so in the kernel's `.platform` keyring, which
//! Debian's 6.12 lets dm-verity use and 6.1 does not).
//!
//! | id | the signature |
//! |----|---------------|
//! | R01 | no signed attributes, no certificate embedded |
//! | R02 | signed attributes (no S/MIME capabilities), the certificate embedded |
//! | R03 | as R02, the signing time a second before the certificate's `notBefore` (a UTCTime) |
//! | R04 | as R02, the signing time a second after its `notAfter` |
//! | R05 | as R03, the certificate not embedded (nothing to hold the time against) |
//! | R06 | signed attributes with S/MIME capabilities (`openssl cms`'s default) |
//! | R07 | two signers, an untrusted one (`fleet`) first, then `snake` |
//! | R08 | as R02, the signing time inside the validity but a GeneralizedTime in 2020 |

use std::path::Path;
use std::process::Command;

use crate::keys::{run, with_signing_time, Keys};

/// One root-hash signature case.
#[derive(Debug, Clone)]
pub struct RootCase {
    pub id: &'static str,
    pub what: &'static str,
    /// The detached PKCS#7 (DER) over the hex root hash.
    pub p7: Vec<u8>,
}

/// `snake`'s certificate's `notBefore` or `notAfter` (`field`) moved by `by` seconds, as
/// the kernel takes it: a UTCTime (`YYMMDDHHMMSSZ`) for 1950 to 2049, else a
/// GeneralizedTime (`YYYYMMDDHHMMSSZ`), or a GeneralizedTime always when `generalized`;
/// by `openssl x509` and `date`.
fn shifted(cert: &Path, field: &str, by: i64, generalized: bool) -> String {
    let out = run(Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-dateopt",
            "iso_8601",
            &format!("-{field}"),
        ])
        .arg("-in")
        .arg(cert));
    let text = String::from_utf8(out).unwrap();
    let iso = text.trim().split_once('=').unwrap().1.to_string();
    let secs: i64 = String::from_utf8(run(Command::new("date").args(["-u", "-d", &iso, "+%s"])))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let at = format!("@{}", secs + by);
    let t = run(Command::new("date").args(["-u", "-d", &at, "+%Y%m%d%H%M%SZ"]));
    let t = String::from_utf8(t).unwrap().trim().to_string();
    let year: u32 = t[..4].parse().unwrap();
    if generalized || !(1950..=2049).contains(&year) {
        t
    } else {
        t[2..].to_string()
    }
}

/// The cases over the hex root hash in the file `content`, made in `dir`.
pub fn cases(k: &Keys, content: &Path, dir: &Path) -> Vec<RootCase> {
    std::fs::create_dir_all(dir).unwrap();
    let s = &k.snake;
    let attrs = s.cms(content, "sha256", &["-nosmimecap"]);
    let alone = s.cms(content, "sha256", &["-nosmimecap", "-nocerts"]);
    let before = shifted(&s.cert, "startdate", -1, false);
    let after = shifted(&s.cert, "enddate", 1, false);
    let inside_generalized = shifted(&s.cert, "startdate", 60, true);
    // Two signers: `fleet`'s SignerInfo put before `snake`'s (both sign the same content
    // with SHA-256, so the message's digest algorithms stay right).
    let mut two = crate::der::Pkcs7::parse(&s.cms(content, "sha256", &["-noattr", "-nocerts"]));
    let fleet = crate::der::Pkcs7::parse(&k.fleet.cms(content, "sha256", &["-noattr", "-nocerts"]))
        .signer(0)
        .clone();
    two.signer_infos().insert(0, fleet);
    vec![
        RootCase {
            id: "R01",
            what: "no signed attributes, no certificate embedded",
            p7: s.cms(content, "sha256", &["-noattr", "-nocerts"]),
        },
        RootCase {
            id: "R02",
            what: "signed attributes, the signer's certificate embedded",
            p7: attrs.clone(),
        },
        RootCase {
            id: "R03",
            what: "as R02, signed a second before the certificate's notBefore",
            p7: with_signing_time(&attrs, &s.key, dir, &before),
        },
        RootCase {
            id: "R04",
            what: "as R02, signed a second after the certificate's notAfter",
            p7: with_signing_time(&attrs, &s.key, dir, &after),
        },
        RootCase {
            id: "R05",
            what: "as R03, the certificate not embedded",
            p7: with_signing_time(&alone, &s.key, dir, &before),
        },
        RootCase {
            id: "R06",
            what: "signed attributes with S/MIME capabilities",
            p7: s.cms(content, "sha256", &["-nocerts"]),
        },
        RootCase {
            id: "R07",
            what: "two signers, an untrusted one first",
            p7: two.encode(),
        },
        RootCase {
            id: "R08",
            what: "as R02, the signing time inside the validity but a GeneralizedTime for a \
                   year UTCTime holds",
            p7: with_signing_time(&attrs, &s.key, dir, &inside_generalized),
        },
    ]
}

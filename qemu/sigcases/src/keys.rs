//! The keys the cases are signed with, made with `openssl` into a directory:
//!
//! | name     | key           | the kernel trusts it when booted with [`Keys::db_certs`] in UEFI db |
//! |----------|---------------|------------------------------------------------------|
//! | `snake`  | RSA-2048, OVMF's snakeoil test key (`ovmf` package), self-signed CA | yes |
//! | `db2`    | RSA-3072      | yes |
//! | `leaf`   | RSA-2048 issued by `snake` (never in db itself) | through `snake` |
//! | `mid`    | RSA-2048 CA issued by `snake` (never in db itself) | through `snake` |
//! | `leaf2`  | RSA-2048 issued by `mid` | through `mid` and `snake` |
//! | `leaf2560` | RSA-2560 issued by `snake` | no: its key is a size the kernel's RSA refuses |
//! | `mid2560` | RSA-2560 CA issued by `snake` (never in db itself) | no: as `leaf2560` |
//! | `leaf3`  | RSA-2048 issued by `mid2560` | no: its issuer's key cannot check it |
//! | `p384`   | ECDSA P-384   | 6.12 only (6.1 has no ECDSA) |
//! | `p521`   | ECDSA P-521   | 6.12 only |
//! | `rsa2560`| RSA-2560      | no: the kernel's RSA takes 512/1024/1536/2048/3072/4096 bits |
//! | `rsa2047`| RSA-2047      | yes: the kernel counts a modulus in 64-bit words (2048) |
//! | `rsa512` | RSA-512       | yes (the kernel has no lower bound outside FIPS mode) |
//! | `revoked`| RSA-2048, in db and its certificate's TBS hash in dbx | see the cases |
//! | `fleet`  | RSA-2048, in no keyring | no |
//! | `ed25519`| Ed25519 certificate (only ever embedded) | — |
//! | `big`    | RSA-2048 with a 70 000-byte comment extension (only ever embedded) | — |

use std::path::{Path, PathBuf};
use std::process::Command;

/// The snakeoil certificate and its (passphrase `snakeoil`) key from Debian's `ovmf`.
pub const SNAKEOIL_CERT: &str = "/usr/share/ovmf/PkKek-1-snakeoil.pem";
pub const SNAKEOIL_KEY: &str = "/usr/share/ovmf/PkKek-1-snakeoil.key";

/// Runs a command; panics with its stderr when it fails. Returns stdout.
pub fn run(c: &mut Command) -> Vec<u8> {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e} (run scripts/provision)"));
    assert!(
        out.status.success(),
        "{c:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// One key pair: PEM private key and PEM certificate.
#[derive(Debug, Clone)]
pub struct Key {
    pub name: &'static str,
    pub key: PathBuf,
    pub cert: PathBuf,
}

impl Key {
    /// The certificate in DER.
    pub fn cert_der(&self) -> Vec<u8> {
        run(Command::new("openssl")
            .args(["x509", "-outform", "DER", "-in"])
            .arg(&self.cert))
    }

    /// A detached PKCS#7 (DER) of `content` by this key, by `openssl cms -sign` with
    /// digest `md`, then `extra` (`-noattr`, `-nocerts`, more signers...): by default
    /// with signed attributes (content type, signing time, message digest, S/MIME
    /// capabilities) and the signer's certificate embedded.
    pub fn cms(&self, content: &Path, md: &str, extra: &[&str]) -> Vec<u8> {
        run(Command::new("openssl")
            .args(["cms", "-sign", "-binary", "-outform", "DER", "-md", md])
            .arg("-signer")
            .arg(&self.cert)
            .arg("-inkey")
            .arg(&self.key)
            .args(extra)
            .arg("-in")
            .arg(content))
    }
}

/// Every key of the table above.
#[derive(Debug, Clone)]
pub struct Keys {
    pub dir: PathBuf,
    pub snake: Key,
    pub db2: Key,
    pub leaf: Key,
    pub mid: Key,
    pub leaf2: Key,
    pub leaf2560: Key,
    pub mid2560: Key,
    pub leaf3: Key,
    pub p384: Key,
    pub p521: Key,
    pub rsa2560: Key,
    pub rsa2047: Key,
    pub rsa512: Key,
    pub revoked: Key,
    pub fleet: Key,
    pub ed25519: Key,
    pub big: Key,
}

/// A self-signed key pair `name` made in `dir` (`openssl req -newkey <newkey>`, subject
/// `CN=sigcases <name>`, a leaf for digital signatures), with `extra` arguments.
pub fn self_signed(dir: &Path, name: &'static str, newkey: &[&str], extra: &[&str]) -> Key {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.pem"));
    run(Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "36500", "-newkey"])
        .args(newkey)
        .args(["-subj", &format!("/CN=sigcases {name}")])
        .args([
            "-addext",
            "keyUsage=digitalSignature",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ])
        .args(extra)
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    Key { name, key, cert }
}

/// A key with a certificate issued by `ca` (serial `serial`), carrying its own subject
/// key identifier and its issuer's as authority key identifier; a CA when `is_ca`.
fn issue(dir: &Path, name: &'static str, ca: &Key, is_ca: bool, serial: u32, bits: u32) -> Key {
    let k = Key {
        name,
        key: dir.join(format!("{name}.key")),
        cert: dir.join(format!("{name}.pem")),
    };
    let csr = dir.join(format!("{name}.csr"));
    let ext = dir.join(format!("{name}.ext"));
    let basic = if is_ca {
        "basicConstraints=critical,CA:TRUE\nkeyUsage=keyCertSign,digitalSignature\n"
    } else {
        "basicConstraints=critical,CA:FALSE\nkeyUsage=digitalSignature\n"
    };
    std::fs::write(
        &ext,
        format!("{basic}subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"),
    )
    .unwrap();
    run(Command::new("openssl")
        .args(["req", "-new", "-nodes", "-newkey", &format!("rsa:{bits}")])
        .args(["-subj", &format!("/CN=sigcases {name}")])
        .arg("-keyout")
        .arg(&k.key)
        .arg("-out")
        .arg(&csr));
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "36500", "-set_serial"])
        .arg(serial.to_string())
        .arg("-in")
        .arg(&csr)
        .arg("-CA")
        .arg(&ca.cert)
        .arg("-CAkey")
        .arg(&ca.key)
        .arg("-extfile")
        .arg(&ext)
        .arg("-out")
        .arg(&k.cert));
    k
}

/// OVMF's snakeoil key pair (`snake`), its key decrypted into `dir`: its certificate is
/// in `db` of OVMF's snakeoil variable store, so a kernel booted through that store
/// trusts what it signs.
pub fn snakeoil(dir: &Path) -> Key {
    std::fs::create_dir_all(dir).unwrap();
    let snake = Key {
        name: "snake",
        key: dir.join("snake.key"),
        cert: dir.join("snake.pem"),
    };
    run(Command::new("openssl")
        .args([
            "pkey",
            "-passin",
            "pass:snakeoil",
            "-in",
            SNAKEOIL_KEY,
            "-out",
        ])
        .arg(&snake.key));
    std::fs::copy(SNAKEOIL_CERT, &snake.cert)
        .unwrap_or_else(|e| panic!("{SNAKEOIL_CERT}: {e} (install ovmf: scripts/provision)"));
    snake
}

impl Keys {
    /// Makes every key in `dir` (fresh ones each time; about two seconds).
    pub fn make(dir: &Path) -> Keys {
        let snake = snakeoil(dir);
        let rsa = |bits: u32| format!("rsa:{bits}");
        let ec = |curve: &str| {
            ["ec", "-pkeyopt", &format!("ec_paramgen_curve:{curve}")].map(str::to_string)
        };
        let mk = |name, newkey: Vec<String>| {
            let nk: Vec<&str> = newkey.iter().map(String::as_str).collect();
            self_signed(dir, name, &nk, &[])
        };
        let db2 = mk("db2", vec![rsa(3072)]);
        let p384 = mk("p384", ec("P-384").to_vec());
        let p521 = mk("p521", ec("P-521").to_vec());
        let rsa2560 = mk("rsa2560", vec![rsa(2560)]);
        let rsa2047 = mk("rsa2047", vec![rsa(2047)]);
        let rsa512 = mk("rsa512", vec![rsa(512)]);
        let revoked = mk("revoked", vec![rsa(2048)]);
        let fleet = mk("fleet", vec![rsa(2048)]);
        let ed25519 = mk("ed25519", vec!["ed25519".into()]);
        let comment = format!("nsComment={}", "A".repeat(70_000));
        let big = self_signed(dir, "big", &["rsa:2048"], &["-addext", &comment]);
        // A leaf issued by the snakeoil CA, named by its issuer's key identifier; an
        // intermediate CA issued by it, and a leaf of that intermediate.
        let leaf = issue(dir, "leaf", &snake, false, 4242, 2048);
        let mid = issue(dir, "mid", &snake, true, 4243, 2048);
        let leaf2 = issue(dir, "leaf2", &mid, false, 4244, 2048);
        let leaf2560 = issue(dir, "leaf2560", &snake, false, 4245, 2560);
        // An intermediate whose key the kernel's RSA refuses, and a leaf of it.
        let mid2560 = issue(dir, "mid2560", &snake, true, 4246, 2560);
        let leaf3 = issue(dir, "leaf3", &mid2560, false, 4247, 2048);
        Keys {
            dir: dir.to_path_buf(),
            snake,
            db2,
            leaf,
            mid,
            leaf2,
            leaf2560,
            mid2560,
            leaf3,
            p384,
            p521,
            rsa2560,
            rsa2047,
            rsa512,
            revoked,
            fleet,
            ed25519,
            big,
        }
    }

    /// The certificates that go into UEFI `db` for the QEMU runs (and into the gate's
    /// trust store, which should trust what the kernel trusts).
    pub fn db_certs(&self) -> Vec<&Key> {
        vec![
            &self.snake,
            &self.db2,
            &self.p384,
            &self.p521,
            &self.rsa2560,
            &self.rsa2047,
            &self.rsa512,
            &self.revoked,
        ]
    }

    /// SHA-256 of the `revoked` certificate's TBSCertificate (a dbx
    /// `EFI_CERT_X509_SHA256` entry).
    pub fn revoked_tbs_sha256(&self) -> [u8; 32] {
        use sha2::Digest;
        let der = self.revoked.cert_der();
        let cert = crate::der::parse(&der);
        let tbs = cert.kids()[0].encode();
        sha2::Sha256::digest(&tbs).into()
    }
}

/// `p7` (DER, signed attributes on its first signer) with that signer's signed attributes
/// in reverse order, out of DER's sorted order, and signed again over them as they now
/// lie ([`resign_attrs`]). What a signer that keeps the attributes in its own order
/// makes: the kernel hashes them as they lie (`pkcs7_digest`), so the signature holds.
pub fn attrs_out_of_order(p7: &[u8], key: &Path, dir: &Path) -> Vec<u8> {
    resign_attrs(p7, key, dir, |attrs| {
        assert!(attrs.len() >= 2, "fewer than two signed attributes");
        attrs.reverse();
    })
}

/// `p7` (DER, signed attributes on its first signer) with that signer's signed attributes
/// changed by `edit` and signed again over them as they then lie (SHA-256 with the PEM
/// `key`, by `openssl dgst`; `dir` holds the files).
pub fn resign_attrs(
    p7: &[u8],
    key: &Path,
    dir: &Path,
    edit: impl FnOnce(&mut Vec<crate::der::Node>),
) -> Vec<u8> {
    let mut t = crate::der::Pkcs7::parse(p7);
    let si = t.signer(0).kids_mut();
    assert_eq!(
        si[3].tag,
        crate::der::CTX0,
        "the first signer has no signed attributes"
    );
    let attrs = si[3].kids_mut();
    edit(attrs);
    let tbs = crate::der::Node::cons(crate::der::SET, attrs.clone()).encode();
    let (tbs_path, sig_path) = (dir.join("attrs.der"), dir.join("attrs.sig"));
    std::fs::write(&tbs_path, &tbs).unwrap();
    run(Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(key)
        .arg("-out")
        .arg(&sig_path)
        .arg(&tbs_path));
    let sig = std::fs::read(&sig_path).unwrap();
    *si.iter_mut()
        .rfind(|n| n.tag == crate::der::OCTETS)
        .unwrap()
        .bytes_mut() = sig;
    t.encode()
}

/// `p7` with its first signer's signing time (a signed attribute it must have) set to
/// `time`, a UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) by its
/// length, and signed again ([`resign_attrs`]).
pub fn with_signing_time(p7: &[u8], key: &Path, dir: &Path, time: &str) -> Vec<u8> {
    let tag = if time.len() == 13 { 0x17 } else { 0x18 };
    resign_attrs(p7, key, dir, |attrs| {
        let at = crate::der::oid("1.2.840.113549.1.9.5");
        let a = attrs
            .iter_mut()
            .find(|a| *a.kids()[0].bytes() == at)
            .expect("the first signer has no signing time");
        a.kids_mut()[1].kids_mut()[0] = crate::der::Node::prim(tag, time.as_bytes());
    })
}

/// `k`'s self-signed certificate (DER) with its `notBefore` written as the
/// GeneralizedTime `time` (`YYYYMMDDHHMMSSZ`) and signed again by its own key (SHA-256,
/// `openssl dgst`; `dir` holds the files), so only the time's encoding is changed.
pub fn with_generalized_not_before(k: &Key, dir: &Path, time: &str) -> Vec<u8> {
    let mut cert = crate::der::parse(&k.cert_der());
    let tbs = &mut cert.kids_mut()[0];
    // TBSCertificate: [0] version (when not v1), serial, signature, issuer, validity...
    let validity = if tbs.kids()[0].tag == crate::der::CTX0 {
        4
    } else {
        3
    };
    tbs.kids_mut()[validity].kids_mut()[0] = crate::der::Node::prim(0x18, time.as_bytes());
    let (tbs_path, sig_path) = (dir.join("tbs.der"), dir.join("tbs.sig"));
    std::fs::write(&tbs_path, tbs.encode()).unwrap();
    run(Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(&k.key)
        .arg("-out")
        .arg(&sig_path)
        .arg(&tbs_path));
    let mut bits = vec![0u8];
    bits.extend(std::fs::read(&sig_path).unwrap());
    cert.kids_mut()[2] = crate::der::Node::prim(0x03, &bits);
    cert.encode()
}

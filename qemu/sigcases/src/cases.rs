//! The cases: one module file (or a few) per rule of `docs/SIGNATURE-RULES.md`, built from
//! a real Debian module of the kernel under test (`crc8`; `pcbc` for the licence and
//! namespace rules; `crc7` for `module_blacklist=`), re-signed with `sign-file` or
//! `openssl cms`, or byte-edited. Each case names its row, the test that asserts the
//! gate's verdict on it, and how the kernel is to be given it (`finit_module` flags, after
//! lockdown is raised, after another module is loaded).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::der::{self, Node, Pkcs7};
use crate::elf;
use crate::keys::{run, Key, Keys};

/// `sign-file [-k] <hash> key cert` on the module file `m` (it appends the signature
/// there); the signed module.
fn sign_file_in_place(m: &Path, key: &Key, hash: &str, skid: bool) -> Vec<u8> {
    let mut c = Command::new(SIGN_FILE);
    if skid {
        c.arg("-k");
    }
    run(c.arg(hash).arg(&key.key).arg(&key.cert).arg(m));
    std::fs::read(m).unwrap()
}

/// `module` with its signature replaced by `sign-file <hash>` with `key`, the work file
/// being `out` (which then holds the result too).
pub fn resign(module: &[u8], key: &Key, hash: &str, out: &Path) -> Vec<u8> {
    std::fs::write(out, elf::body(module)).unwrap();
    sign_file_in_place(out, key, hash, false)
}

/// `sign-file` from Debian's `linux-kbuild-6.1`.
pub const SIGN_FILE: &str = "/usr/lib/linux-kbuild-6.1/scripts/sign-file";
/// `finit_module` flags.
pub const MODULE_INIT_IGNORE_VERMAGIC: u32 = 2;
pub const MODULE_INIT_COMPRESSED_FILE: u32 = 4;
/// The module the QEMU boots name in `module_blacklist=` (row V05).
pub const BLACKLISTED: &str = "crc7";

/// The kernels under test (`target/kernels/<dir>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kernel {
    /// Debian 12's 6.1 (`default`): RSA-4096 build key, plain `.ko`, no ECDSA.
    K61,
    /// Debian 12's 6.12 backport (`k612`): ECDSA P-384 build key, `.ko.xz`.
    K612,
}

impl Kernel {
    pub const ALL: [Kernel; 2] = [Kernel::K61, Kernel::K612];

    /// The directory under `target/kernels/`.
    pub fn dir(self) -> &'static str {
        match self {
            Kernel::K61 => "default",
            Kernel::K612 => "k612",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kernel::K61 => "6.1",
            Kernel::K612 => "6.12",
        }
    }
}

/// One module file that breaks (or keeps) one rule.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique within a kernel's set, e.g. `S25b`; the file is `<id>.ko[.xz]`.
    pub id: String,
    /// The row of `docs/SIGNATURE-RULES.md`.
    pub row: &'static str,
    /// What was done to the module.
    pub what: &'static str,
    pub file: PathBuf,
    /// The module name the kernel registers it under (for `rmmod`).
    pub module: &'static str,
    /// `finit_module` flags.
    pub flags: u32,
    /// Given to the kernel only after `lockdown=integrity` was raised.
    pub lockdown: bool,
    /// Another case (by id) loaded just before this one and unloaded after it.
    pub after: Option<&'static str>,
    /// Certificates the gate trusts for this case in addition to what the kernel trusts.
    pub extra_trust: Vec<PathBuf>,
}

/// The cases of one kernel.
#[derive(Debug, Clone)]
pub struct Set {
    pub kernel: Kernel,
    pub release: String,
    /// The kernel package root.
    pub root: PathBuf,
    pub dir: PathBuf,
    pub cases: Vec<Case>,
}

impl Set {
    pub fn get(&self, id: &str) -> &Case {
        self.cases
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no case {id} for {}", self.kernel.label()))
    }

    /// The cases of one row.
    pub fn row(&self, row: &str) -> Vec<&Case> {
        let v: Vec<&Case> = self.cases.iter().filter(|c| c.row == row).collect();
        assert!(
            !v.is_empty(),
            "no case for row {row} on {}",
            self.kernel.label()
        );
        v
    }

    /// SHA-256 of every file whose hash goes into UEFI dbx (row S40).
    pub fn dbx_hashes(&self) -> Vec<[u8; 32]> {
        use sha2::Digest;
        self.cases
            .iter()
            .filter(|c| c.row == "S40")
            .map(|c| sha2::Sha256::digest(std::fs::read(&c.file).unwrap()).into())
            .collect()
    }
}

/// `<root>/lib/modules/<release>`.
fn moddir(root: &Path) -> (PathBuf, String) {
    let base = root.join("lib/modules");
    let release = std::fs::read_dir(&base)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/provision)", base.display()))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !n.starts_with('.'))
        .unwrap_or_else(|| panic!("no release under {}", base.display()));
    (base.join(&release), release)
}

/// A module of the kernel, decompressed, as shipped (Debian's signature on it), and the
/// shipped file's path.
fn shipped(root: &Path, rel: &str) -> (Vec<u8>, PathBuf) {
    let (md, _) = moddir(root);
    for ext in ["", ".xz"] {
        let p = md.join(format!("{rel}.ko{ext}"));
        if p.is_file() {
            let bytes = if ext.is_empty() {
                std::fs::read(&p).unwrap()
            } else {
                run(Command::new("xz").arg("-dc").arg(&p))
            };
            return (bytes, p);
        }
    }
    panic!("no module {rel} under {}", md.display())
}

struct Builder {
    dir: PathBuf,
    cases: Vec<Case>,
    n: u32,
}

impl Builder {
    fn tmp(&mut self, bytes: &[u8]) -> PathBuf {
        self.n += 1;
        let p = self.dir.join(format!("tmp-{}", self.n));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Adds a `crc8` case: `body` signed with the PKCS#7 `good` as `edit` changed it.
    fn add_edited(
        &mut self,
        id: &str,
        row: &'static str,
        what: &'static str,
        body: &[u8],
        good: &[u8],
        edit: impl FnOnce(&mut Pkcs7),
    ) {
        let mut t = Pkcs7::parse(good);
        edit(&mut t);
        self.add(
            id,
            row,
            what,
            "crc8",
            &elf::append_signature(body, &t.encode()),
        );
    }

    /// `sign-file [-k] <hash> key cert` over `body`: the whole signed module.
    fn sign_file(&mut self, body: &[u8], key: &Key, hash: &str, skid: bool) -> Vec<u8> {
        let m = self.tmp(body);
        sign_file_in_place(&m, key, hash, skid)
    }

    /// `openssl cms -sign -binary -outform DER` over `body`; `args` adds `-noattr`,
    /// `-nocerts`, more signers...
    fn cms(&mut self, body: &[u8], key: &Key, md: &str, args: &[&str]) -> Vec<u8> {
        let m = self.tmp(body);
        let out = self.tmp(b"");
        run(Command::new("openssl")
            .args(["cms", "-sign", "-binary", "-outform", "DER", "-md", md])
            .arg("-signer")
            .arg(&key.cert)
            .arg("-inkey")
            .arg(&key.key)
            .args(args)
            .arg("-in")
            .arg(&m)
            .arg("-out")
            .arg(&out));
        std::fs::read(&out).unwrap()
    }

    /// The usual module signature (no attributes, no certificates) as a PKCS#7 tree.
    fn plain(&mut self, body: &[u8], key: &Key, md: &str) -> Pkcs7 {
        Pkcs7::parse(&self.cms(body, key, md, &["-noattr", "-nocerts"]))
    }

    fn add(
        &mut self,
        id: &str,
        row: &'static str,
        what: &'static str,
        module: &'static str,
        bytes: &[u8],
    ) -> &mut Case {
        let file = self.dir.join(format!("{id}.ko"));
        std::fs::write(&file, bytes).unwrap();
        self.cases.push(Case {
            id: id.to_string(),
            row,
            what,
            file,
            module,
            flags: 0,
            lockdown: false,
            after: None,
            extra_trust: Vec::new(),
        });
        self.cases.last_mut().unwrap()
    }
}

fn flip_byte9(m: &[u8]) -> Vec<u8> {
    // e_ident's padding: neither the kernel's ELF checks nor the gate read it, so only
    // the signature notices.
    let mut v = m.to_vec();
    v[9] ^= 1;
    v
}

fn trailer_edit(m: &[u8], f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut v = m.to_vec();
    let t = elf::trailer_offset(&v);
    f(&mut v[t..t + 12]);
    v
}

fn replace_once(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = hay
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("pattern not found"));
    let mut v = hay[..at].to_vec();
    v.extend_from_slice(to);
    v.extend_from_slice(&hay[at + from.len()..]);
    v
}

/// Builds every case for `kernel` (package under `kernels/<dir>`) into `out`.
pub fn build(kernel: Kernel, kernels: &Path, keys: &Keys, out: &Path) -> Set {
    let root = kernels.join(kernel.dir());
    let (_, release) = moddir(&root);
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let mut b = Builder {
        dir: out.to_path_buf(),
        cases: Vec::new(),
        n: 0,
    };
    let k = keys;
    let (crc8, crc8_path) = shipped(&root, "kernel/lib/crc8");
    let body = elf::body(&crc8);
    let snake_signed = b.sign_file(&body, &k.snake, "sha256", false);
    let (sha256, sha384, sha512) = ("sha256", "sha384", "sha512");

    // ---- the trailer (module_signature.c, signing.c) ----
    b.add("S01", "S01", "the signature cut off", "crc8", &body);
    b.add(
        "S02",
        "S02",
        "valid db-key signature, loaded with MODULE_INIT_IGNORE_VERMAGIC",
        "crc8",
        &snake_signed,
    )
    .flags = MODULE_INIT_IGNORE_VERMAGIC;
    let mut tiny = b"\x7fELF\x02".to_vec();
    tiny.extend_from_slice(elf::MAGIC);
    b.add("S03a", "S03", "5 bytes then the marker", "crc8", &tiny);
    let mut twelve = b"\x7fELF\x02\x01\x01\0\0\0\0\0".to_vec();
    twelve.extend_from_slice(elf::MAGIC);
    b.add("S03b", "S03", "12 bytes then the marker", "crc8", &twelve);
    let avail =
        u32::try_from(snake_signed.len() - elf::MAGIC.len() - 12).expect("a module under 4 GiB");
    let m = trailer_edit(&snake_signed, |t| {
        t[8..].copy_from_slice(&avail.to_be_bytes())
    });
    b.add(
        "S04a",
        "S04",
        "sig_len equal to every byte before the trailer",
        "crc8",
        &m,
    );
    let m = trailer_edit(&snake_signed, |t| {
        t[8..].copy_from_slice(&(avail + 1000).to_be_bytes())
    });
    b.add(
        "S04b",
        "S04",
        "sig_len beyond the start of the file",
        "crc8",
        &m,
    );
    let m = trailer_edit(&snake_signed, |t| {
        t[8..].copy_from_slice(&0u32.to_be_bytes())
    });
    b.add("S05", "S05", "sig_len 0", "crc8", &m);
    let m = trailer_edit(&snake_signed, |t| t[2] = 1);
    b.add("S06", "S06", "id_type 1 (PGP)", "crc8", &m);
    let m = trailer_edit(&snake_signed, |t| {
        t[2] = 1;
        t[0] = 1;
    });
    b.add("S07", "S07", "id_type 1 and algo 1", "crc8", &m);
    let m = trailer_edit(&snake_signed, |t| t[0] = 1);
    b.add("S08a", "S08", "algo 1", "crc8", &m);
    let m = trailer_edit(&snake_signed, |t| t[5] = 1);
    b.add("S08b", "S08", "__pad[0] 1", "crc8", &m);

    // ---- the PKCS#7 message (asn1_decoder.c, pkcs7_parser.c) ----
    let big = b.cms(
        &body,
        &k.snake,
        sha256,
        &[
            "-noattr",
            "-nocerts",
            "-certfile",
            k.big.cert.to_str().unwrap(),
        ],
    );
    assert!(big.len() > 65535, "{}", big.len());
    b.add(
        "S09",
        "S09",
        "PKCS#7 of more than 65535 bytes (a large certificate embedded)",
        "crc8",
        &elf::append_signature(&body, &big),
    );
    let good = elf::pkcs7(&snake_signed);
    let mut p = good.clone();
    p[0] = 0x31;
    b.add(
        "S10a",
        "S10",
        "PKCS#7 starting with a SET tag",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let p = good[..good.len() - 1].to_vec();
    b.add(
        "S10b",
        "S10",
        "PKCS#7 with its last byte dropped",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let mut p = good.clone();
    p.extend_from_slice(&[0u8; 16]);
    b.add(
        "S11",
        "S11",
        "16 zero bytes after the PKCS#7, inside sig_len",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let p = Pkcs7::parse(&good).0.encode_indefinite();
    b.add(
        "S12",
        "S12",
        "the ContentInfo with a BER indefinite length",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    b.add_edited(
        "S13",
        "S13",
        "outer contentType envelopedData",
        &body,
        &good,
        |t| {
            *t.content_type().last_mut().unwrap() = 3;
        },
    );
    b.add_edited("S14", "S14", "SignedData version 2", &body, &good, |t| {
        *t.version() = vec![2];
    });
    b.add_edited("S15", "S15", "SignerInfo version 2", &body, &good, |t| {
        *t.signer(0).kids_mut()[0].bytes_mut() = vec![2];
    });
    b.add_edited(
        "S16",
        "S16",
        "SignedData version 3 around a SignerInfo version 1",
        &body,
        &good,
        |t| {
            *t.version() = vec![3];
        },
    );
    let skid_signed = b.sign_file(&body, &k.snake, sha256, true);
    let mut t = Pkcs7::parse(&elf::pkcs7(&skid_signed));
    *t.version() = vec![1];
    *t.signer(0).kids_mut()[0].bytes_mut() = vec![1];
    b.add(
        "S17",
        "S17",
        "signer named by key identifier, both versions 1",
        "crc8",
        &elf::append_signature(&body, &t.encode()),
    );
    let p = b.cms(
        &body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-nodetach"],
    );
    b.add(
        "S18",
        "S18",
        "the content inside the PKCS#7 (not detached)",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    b.add_edited(
        "S19a",
        "S19",
        "eContentType signedData",
        &body,
        &good,
        |t| {
            *t.encap().kids_mut()[0].bytes_mut() = der::oid("1.2.840.113549.1.7.2");
        },
    );
    b.add_edited(
        "S19b",
        "S19",
        "eContentType msIndirectData without signed attributes",
        &body,
        &good,
        |t| {
            *t.encap().kids_mut()[0].bytes_mut() = der::oid("1.3.6.1.4.1.311.2.1.4");
        },
    );
    b.add_edited("S20a", "S20", "no SignerInfo", &body, &good, |t| {
        t.signer_infos().clear();
    });
    let mut t = Pkcs7::parse(&good);
    let mut with_attrs = Pkcs7::parse(&b.cms(&body, &k.db2, sha256, &["-nocerts", "-nosmimecap"]));
    let second = with_attrs.signer(0).clone();
    t.signer_infos().push(second);
    b.add(
        "S20b",
        "S20",
        "two signers, only the second with signed attributes",
        "crc8",
        &elf::append_signature(&body, &t.encode()),
    );
    let p = b.cms(&body, &k.snake, sha256, &["-nocerts", "-nosmimecap"]);
    b.add(
        "S21",
        "S21",
        "signed attributes (openssl cms without -noattr)",
        "crc8",
        &elf::append_signature(&body, &p),
    );

    // ---- digests and algorithms ----
    let md5 = b.plain(&body, &k.snake, "md5").encode();
    let sha3 = b.plain(&body, &k.snake, "sha3-256").encode();
    let (unknown, extra) = match kernel {
        Kernel::K61 => (&sha3, &md5),
        Kernel::K612 => (&md5, &sha3),
    };
    b.add(
        "S22",
        "S22",
        "a digest this kernel's PKCS#7 parser does not know (6.1: sha3-256, 6.12: md5)",
        "crc8",
        &elf::append_signature(&body, unknown),
    );
    let m = b.sign_file(&body, &k.snake, sha384, false);
    b.add(
        "S23a",
        "S23",
        "sha384 (6.1 builds sha512 as a module)",
        "crc8",
        &m,
    );
    let m = b.sign_file(&body, &k.snake, sha512, false);
    b.add("S23b", "S23", "sha512", "crc8", &m);
    b.add(
        "S24",
        "S24",
        "the digest only this kernel accepts (6.1: md5, 6.12: sha3-256) by a db key",
        "crc8",
        &elf::append_signature(&body, extra),
    );
    b.add_edited(
        "S25a",
        "S25",
        "signatureAlgorithm sha256WithRSAEncryption",
        &body,
        &good,
        |t| {
            let si = t.signer(0);
            let i = der::signer_sig_alg_index(si);
            si.kids_mut()[i] = der::alg("1.2.840.113549.1.1.11", true);
        },
    );
    let p = b.cms(
        &body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-keyopt", "rsa_padding_mode:pss"],
    );
    b.add(
        "S25b",
        "S25",
        "RSASSA-PSS",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let mut t = b.plain(&body, &k.p384, sha256);
    let si = t.signer(0);
    let i = der::signer_sig_alg_index(si);
    si.kids_mut()[i] = der::alg("1.2.840.10045.2.1", false);
    b.add(
        "S25c",
        "S25",
        "signatureAlgorithm id-ecPublicKey (P-384 key)",
        "crc8",
        &elf::append_signature(&body, &t.encode()),
    );
    let mut t = b.plain(&body, &k.p384, sha256);
    let si = t.signer(0);
    let i = der::signer_sig_alg_index(si);
    si.kids_mut()[i] = der::alg("1.2.840.10045.4.3.3", false);
    b.add(
        "S26",
        "S26",
        "ECDSA over sha256 named ecdsa-with-SHA384 (P-384 key)",
        "crc8",
        &elf::append_signature(&body, &t.encode()),
    );
    b.add_edited(
        "S27a",
        "S27",
        "empty SignedData digestAlgorithms",
        &body,
        &good,
        |t| {
            t.digest_algorithms().clear();
        },
    );
    b.add_edited(
        "S27b",
        "S27",
        "md5 added to the SignedData digestAlgorithms",
        &body,
        &good,
        |t| {
            t.digest_algorithms()
                .insert(0, der::alg("1.2.840.113549.2.5", true));
        },
    );
    b.add_edited(
        "S27c",
        "S27",
        "the signer's digest algorithm with an INTEGER parameter",
        &body,
        &good,
        |t| {
            t.signer(0).kids_mut()[2] = Node::cons(
                der::SEQ,
                vec![
                    Node::prim(der::OID, &der::oid("2.16.840.1.101.3.4.2.1")),
                    Node::prim(der::INT, &[5]),
                ],
            );
        },
    );

    // ---- certificates in the message, signers, keys ----
    let p = b.cms(
        &body,
        &k.snake,
        sha256,
        &[
            "-noattr",
            "-nocerts",
            "-certfile",
            k.ed25519.cert.to_str().unwrap(),
        ],
    );
    b.add(
        "S28a",
        "S28",
        "an Ed25519 certificate embedded (db-key signer)",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    b.add_edited(
        "S28b",
        "S28",
        "a malformed certificate embedded (db-key signer)",
        &body,
        &good,
        |t| {
            t.certificates()
                .push(Node::cons(der::SEQ, vec![Node::prim(der::INT, &[0])]));
        },
    );
    let db2 = k.db2.cert.to_str().unwrap().to_string();
    let p = b.cms(
        &body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-certfile", &db2],
    );
    b.add_edited(
        "S28c",
        "S28",
        "a self-signed certificate embedded with its self-signature broken (db-key signer)",
        &body,
        &p,
        |t| {
            let cert = &mut t.certificates()[0];
            *cert.kids_mut()[2].bytes_mut().last_mut().unwrap() ^= 1;
        },
    );
    let p = b.cms(&body, &k.fleet, sha256, &["-noattr"]);
    b.add(
        "S29a",
        "S29",
        "untrusted signer's certificate embedded, body changed after signing",
        "crc8",
        &flip_byte9(&elf::append_signature(&body, &p)),
    );
    let p = b.cms(&body, &k.snake, sha256, &["-noattr"]);
    b.add(
        "S29b",
        "S29",
        "db-key signer's certificate embedded, body changed after signing",
        "crc8",
        &flip_byte9(&elf::append_signature(&body, &p)),
    );
    let fleet_signed = b.sign_file(&body, &k.fleet, sha256, false);
    b.add(
        "S30",
        "S30",
        "signed by a key in no keyring",
        "crc8",
        &fleet_signed,
    );
    b.add(
        "S31",
        "S31",
        "signed by a key in no keyring, body changed after signing",
        "crc8",
        &flip_byte9(&fleet_signed),
    );
    b.add(
        "S32",
        "S32",
        "signed by a db key, body changed after signing",
        "crc8",
        &flip_byte9(&snake_signed),
    );
    let fleet_p = Pkcs7::parse(&elf::pkcs7(&fleet_signed));
    let two = |first: &Pkcs7, second: &Pkcs7| {
        let mut t = Pkcs7(first.0.clone());
        let s = Pkcs7(second.0.clone()).signer(0).clone();
        t.signer_infos().push(s);
        t
    };
    let snake_p = Pkcs7::parse(&good);
    b.add(
        "S33a",
        "S33",
        "two signers: untrusted first, db key second",
        "crc8",
        &elf::append_signature(&body, &two(&fleet_p, &snake_p).encode()),
    );
    b.add(
        "S33b",
        "S33",
        "two signers: db key first, untrusted second",
        "crc8",
        &elf::append_signature(&body, &two(&snake_p, &fleet_p).encode()),
    );
    // A second signer whose own certificate is embedded and whose signature is broken.
    let mut fleet_cert = Pkcs7::parse(&b.cms(&body, &k.fleet, sha256, &["-noattr"]));
    let cert = fleet_cert.certificates()[0].clone();
    let mut t = two(&snake_p, &fleet_cert);
    t.certificates().push(cert);
    let si = t.signer(1);
    let i = der::signer_sig_alg_index(si) + 1;
    *si.kids_mut()[i].bytes_mut().last_mut().unwrap() ^= 1;
    b.add(
        "S34a",
        "S34",
        "two signers: db key valid, then an embedded-certificate signer whose signature is broken",
        "crc8",
        &elf::append_signature(&body, &t.encode()),
    );
    let mut db2_p = b.plain(&body, &k.db2, sha256);
    let si = db2_p.signer(0);
    let i = der::signer_sig_alg_index(si) + 1;
    *si.kids_mut()[i].bytes_mut().last_mut().unwrap() ^= 1;
    b.add(
        "S34b",
        "S34",
        "two signers: db key valid, then another db key whose signature is broken",
        "crc8",
        &elf::append_signature(&body, &two(&snake_p, &db2_p).encode()),
    );
    let p = b.cms(&body, &k.leaf, sha256, &["-noattr"]);
    b.add(
        "S35a",
        "S35",
        "signed by a leaf of the db CA, the leaf embedded",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let p = b.cms(&body, &k.leaf, sha256, &["-noattr", "-nocerts"]);
    b.add(
        "S35b",
        "S35",
        "signed by a leaf of the db CA, the leaf not embedded",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    let good = b.cms(&body, &k.leaf, sha256, &["-noattr"]);
    b.add_edited(
        "S35c",
        "S35",
        "signed by a leaf of the db CA, the leaf embedded with its certificate's signature broken",
        &body,
        &good,
        |t| {
            let cert = &mut t.certificates()[0];
            *cert.kids_mut()[2].bytes_mut().last_mut().unwrap() ^= 1;
        },
    );
    let mid = k.mid.cert.to_str().unwrap().to_string();
    let good = b.cms(&body, &k.leaf2, sha256, &["-noattr", "-certfile", &mid]);
    b.add(
        "S35d",
        "S35",
        "signed by a leaf of an intermediate of the db CA, leaf and intermediate embedded",
        "crc8",
        &elf::append_signature(&body, &good),
    );
    b.add_edited(
        "S35e",
        "S35",
        "as S35d, the leaf's certificate signature (by the embedded intermediate) broken",
        &body,
        &good,
        |t| {
            let certs = t.certificates();
            let leaf = certs
                .iter_mut()
                .find(|c| String::from_utf8_lossy(&c.kids()[0].encode()).contains("sigcases leaf2"))
                .unwrap();
            *leaf.kids_mut()[2].bytes_mut().last_mut().unwrap() ^= 1;
        },
    );
    let m = b.sign_file(&body, &k.rsa2560, sha256, false);
    b.add("S36a", "S36", "signed by an RSA-2560 key in db", "crc8", &m);
    let m = b.sign_file(&body, &k.p384, sha384, false);
    b.add(
        "S36b",
        "S36",
        "signed by an ECDSA P-384 key in db",
        "crc8",
        &m,
    );
    let m = b.sign_file(&body, &k.p521, sha512, false);
    b.add(
        "S37a",
        "S37",
        "signed by an ECDSA P-521 key in db",
        "crc8",
        &m,
    );
    let m = b.sign_file(&body, &k.rsa512, sha256, false);
    b.add("S37b", "S37", "signed by an RSA-512 key in db", "crc8", &m);
    b.add(
        "S38",
        "S38",
        "signed by a key the gate trusts and no keyring holds",
        "crc8",
        &fleet_signed,
    )
    .extra_trust = vec![k.fleet.cert.clone()];
    let m = b.sign_file(&body, &k.snake, "sha224", false);
    b.add(
        "S40",
        "S40",
        "signed by a db key, the file's SHA-256 in dbx",
        "crc8",
        &m,
    );
    let m = b.sign_file(&body, &k.revoked, sha256, false);
    b.add(
        "S41a",
        "S41",
        "signed by a db key whose certificate's TBS hash is in dbx",
        "crc8",
        &m,
    );
    let p = b.cms(&body, &k.revoked, sha256, &["-noattr"]);
    b.add(
        "S41b",
        "S41",
        "the same, that certificate embedded",
        "crc8",
        &elf::append_signature(&body, &p),
    );
    b.add(
        "S42a",
        "S42",
        "unsigned, under lockdown=integrity",
        "crc8",
        &body,
    )
    .lockdown = true;
    b.add(
        "S42b",
        "S42",
        "untrusted key, under lockdown=integrity",
        "crc8",
        &fleet_signed,
    )
    .lockdown = true;
    b.add(
        "S42c",
        "S42",
        "db key, under lockdown=integrity",
        "crc8",
        &snake_signed,
    )
    .lockdown = true;
    match kernel {
        Kernel::K61 => {
            b.add(
                "S43a",
                "S43",
                "Debian's own module as shipped",
                "crc8",
                &crc8,
            );
        }
        Kernel::K612 => {
            let bytes = std::fs::read(&crc8_path).unwrap();
            let file = b.dir.join("S43a.ko.xz");
            std::fs::write(&file, bytes).unwrap();
            b.cases.push(Case {
                id: "S43a".into(),
                row: "S43",
                what: "Debian's own module as shipped (.ko.xz, decompressed by the kernel)",
                file,
                module: "crc8",
                flags: MODULE_INIT_COMPRESSED_FILE,
                lockdown: false,
                after: None,
                extra_trust: Vec::new(),
            });
        }
    }
    b.add(
        "S43b",
        "S43",
        "signed by a db key with sign-file",
        "crc8",
        &snake_signed,
    );
    b.add(
        "S44",
        "S44",
        "signer named by subjectKeyIdentifier (sign-file -k)",
        "crc8",
        &skid_signed,
    );
    let m = b.sign_file(&body, &k.snake, "sha1", false);
    b.add("S45", "S45", "sha1", "crc8", &m);

    // ---- ELF, vermagic, CRCs, licence (main.c, version.c), each re-signed with a db key ----
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
    resign(&mut b, "V01a", "V01", "e_machine aarch64", "crc8", e);
    let mut e = body.clone();
    let past = (body.len() as u64 + 0x1000).to_le_bytes();
    e[0x28..0x30].copy_from_slice(&past);
    resign(
        &mut b,
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
        &mut b,
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
        &mut b,
        "V03",
        "V03",
        ".gnu.linkonce.this_module renamed",
        "crc8",
        e,
    );
    // A second .modinfo after the first, with another vermagic.
    let mi = b.tmp(b"");
    let src = b.tmp(&body);
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
        &mut b,
        "V04",
        "V04",
        "a second .modinfo (with another vermagic) after the first",
        "crc8",
        e,
    );
    let (crc7, _) = shipped(&root, "kernel/lib/crc7");
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
    resign(
        &mut b,
        "V06",
        "V06",
        "module_layout's CRC changed",
        "crc8",
        e,
    );
    let mut e = body.clone();
    let thunk = elf::versions(&e)
        .into_iter()
        .find(|(_, n)| n == "__x86_return_thunk")
        .unwrap();
    let r = elf::version_record(&e, "module_layout");
    e[r..r + 64].copy_from_slice(&elf::record(thunk.0, &thunk.1));
    resign(
        &mut b,
        "V07",
        "V07",
        "module_layout's record replaced by another symbol's",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"vermagic=", b"vermagiX=");
    resign(&mut b, "V08", "V08", "no vermagic= in .modinfo", "crc8", e);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b" preempt ", b" preemPt ");
    resign(&mut b, "V09a", "V09", "vermagic preemPt", "crc8", e);
    let (rel_from, rel_to) = release_edit(&release);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", rel_from.as_bytes(), rel_to.as_bytes());
    elf::rename_section(&mut e, "__versions", "__versionz");
    resign(
        &mut b,
        "V09b",
        "V09",
        "another release in vermagic and no __versions",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", rel_from.as_bytes(), rel_to.as_bytes());
    resign(
        &mut b,
        "V10",
        "V10",
        "another release in vermagic (with __versions)",
        "crc8",
        e,
    );
    let mut e = body.clone();
    elf::rename_section(&mut e, "__versions", "__versionz");
    resign(&mut b, "V11", "V11", "no __versions section", "crc8", e);
    let mut e = body.clone();
    let r = elf::version_record(&e, "__x86_return_thunk");
    e[r] = e[r].wrapping_add(1);
    resign(
        &mut b,
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
        &mut b,
        "V13",
        "V13",
        "an imported symbol's record replaced by module_layout's",
        "crc8",
        e,
    );
    let s = elf::section(&body, "__versions");
    let mut grown = body[s.offset..s.offset + s.size].to_vec();
    grown.extend_from_slice(&elf::record(0x1234_5678, "sigcases_unused_symbol"));
    let vers = b.tmp(&grown);
    let src = b.tmp(&body);
    let upd = b.tmp(b"");
    run(Command::new("objcopy")
        .arg(format!("--update-section=__versions={}", vers.display()))
        .arg(&src)
        .arg(&upd));
    resign(
        &mut b,
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
        &mut b,
        "V15",
        "V15",
        "an undefined symbol renamed to one nothing exports",
        "crc8",
        e,
    );
    let (pcbc, _) = shipped(&root, "kernel/crypto/pcbc");
    let pcbc_body = elf::body(&pcbc);
    resign(
        &mut b,
        "V16a",
        "V16",
        "pcbc re-signed, unchanged (GPL, uses GPL-only exports)",
        "pcbc",
        pcbc_body.clone(),
    );
    let mut e = pcbc_body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"license=GPL\0", b"license=XYZ\0");
    resign(
        &mut b,
        "V16b",
        "V16",
        "pcbc with a non-GPL licence",
        "pcbc",
        e,
    );
    let mut e = pcbc_body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"import_ns=", b"import_nX=");
    resign(
        &mut b,
        "V17",
        "V17",
        "pcbc without its import_ns=",
        "pcbc",
        e,
    );
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"name=crc8\0", b"name=crc9\0");
    elf::patch_in_section(&mut e, ".gnu.linkonce.this_module", b"crc8\0", b"crc9\0");
    resign(
        &mut b,
        "V19",
        "V19",
        "crc8 renamed crc9: exports crc8's symbols again (after crc8)",
        "crc9",
        e,
    );
    b.cases.last_mut().unwrap().after = Some("S43b");
    let mut e = body.clone();
    elf::rename_section(&mut e, ".modinfo", ".modinfX");
    resign(&mut b, "V20", "V20", "no .modinfo section", "crc8", e);
    let mut e = body.clone();
    elf::patch_in_section(&mut e, ".modinfo", b"intree=", b"intreX=");
    resign(&mut b, "V22", "V22", "no intree=Y", "crc8", e);
    if kernel == Kernel::K612 {
        let bytes = std::fs::read(&crc8_path).unwrap();
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
    // Scratch files are not cases.
    for e in std::fs::read_dir(out).unwrap().filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with("tmp-") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    Set {
        kernel,
        release,
        root,
        dir: out.to_path_buf(),
        cases: b.cases,
    }
}

/// A same-length change of the release in a vermagic string: the digit before the
/// release's first `-` or `+` goes up by one (`6.1.0-57-amd64` to `6.1.1-57-amd64`,
/// `6.12.117+deb12-amd64` to `6.12.118+deb12-amd64`).
fn release_edit(release: &str) -> (String, String) {
    let from = format!("vermagic={release} ");
    let mut to = from.clone().into_bytes();
    let cut = release
        .find(['-', '+'])
        .expect("a Debian release has a '-' or '+'");
    let pos = "vermagic=".len() + cut - 1;
    to[pos] = if to[pos] == b'9' { b'8' } else { to[pos] + 1 };
    (from, String::from_utf8(to).unwrap())
}

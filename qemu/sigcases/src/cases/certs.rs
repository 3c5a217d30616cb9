//! Certificates in the message, signers and keys: which key a signature reaches, and what
//! the kernel's keyrings trust.

use super::*;

/// The cases of certificates in the message, signers, keys.
pub(super) fn certificates(b: &mut Builder, c: &Common) {
    let Common {
        k,
        crc8,
        crc8_path,
        body,
        snake_signed,
        good,
        skid_signed,
        ..
    } = c;
    let kernel = c.kernel;
    let (sha256, sha384, sha512) = ("sha256", "sha384", "sha512");
    let p = b.cms(
        body,
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
        &elf::append_signature(body, &p),
    );
    b.add_edited(
        "S28b",
        "S28",
        "a malformed certificate embedded (db-key signer)",
        body,
        good,
        |t| {
            t.certificates()
                .push(Node::cons(der::SEQ, vec![Node::prim(der::INT, &[0])]));
        },
    );
    let db2 = k.db2.cert.to_str().unwrap().to_string();
    let p = b.cms(
        body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-certfile", &db2],
    );
    b.add_edited(
        "S28c",
        "S28",
        "a self-signed certificate embedded with its self-signature broken (db-key signer)",
        body,
        &p,
        |t| {
            let cert = &mut t.certificates()[0];
            *cert.kids_mut()[2].bytes_mut().last_mut().unwrap() ^= 1;
        },
    );
    for (id, key, what) in [
        (
            "S28d",
            &k.rsa2560,
            "a self-signed RSA-2560 certificate embedded (db-key signer)",
        ),
        (
            "S28e",
            &k.p384,
            "a self-signed ECDSA P-384 certificate embedded (db-key signer)",
        ),
    ] {
        let cert = key.cert.to_str().unwrap().to_string();
        let p = b.cms(
            body,
            &k.snake,
            sha256,
            &["-noattr", "-nocerts", "-certfile", &cert],
        );
        b.add(id, "S28", what, "crc8", &elf::append_signature(body, &p));
    }
    let p = b.cms(body, &k.leaf2560, sha256, &["-noattr"]);
    b.add(
        "S28f",
        "S28",
        "signed by an RSA-2560 leaf of the db CA, the leaf embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let mid2560 = k.mid2560.cert.to_str().unwrap().to_string();
    let p = b.cms(body, &k.leaf3, sha256, &["-noattr", "-certfile", &mid2560]);
    b.add(
        "S28g",
        "S28",
        "signed by a leaf of an RSA-2560 intermediate of the db CA, leaf and intermediate \
         embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let late = crate::keys::with_generalized_not_before(&k.fleet, &k.dir, "20200101000000Z");
    let p = b.cms(body, &k.snake, sha256, &["-noattr"]);
    b.add_edited(
        "S28h",
        "S28",
        "a certificate embedded whose notBefore is a GeneralizedTime in 2020 (db-key signer)",
        body,
        &p,
        |t| t.certificates().push(crate::der::parse(&late)),
    );
    let p = b.cms(body, &k.fleet, sha256, &["-noattr"]);
    b.add(
        "S29a",
        "S29",
        "untrusted signer's certificate embedded, body changed after signing",
        "crc8",
        &flip_byte9(&elf::append_signature(body, &p)),
    );
    let p = b.cms(body, &k.snake, sha256, &["-noattr"]);
    b.add(
        "S29b",
        "S29",
        "db-key signer's certificate embedded, body changed after signing",
        "crc8",
        &flip_byte9(&elf::append_signature(body, &p)),
    );
    let fleet_signed = b.sign_file(body, &k.fleet, sha256, false);
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
        &flip_byte9(snake_signed),
    );
    let fleet_p = Pkcs7::parse(&elf::pkcs7(&fleet_signed));
    let two = |first: &Pkcs7, second: &Pkcs7| {
        let mut t = Pkcs7(first.0.clone());
        let s = Pkcs7(second.0.clone()).signer(0).clone();
        t.signer_infos().push(s);
        t
    };
    let snake_p = Pkcs7::parse(good);
    b.add(
        "S33a",
        "S33",
        "two signers: untrusted first, db key second",
        "crc8",
        &elf::append_signature(body, &two(&fleet_p, &snake_p).encode()),
    );
    b.add(
        "S33b",
        "S33",
        "two signers: db key first, untrusted second",
        "crc8",
        &elf::append_signature(body, &two(&snake_p, &fleet_p).encode()),
    );
    // A second signer whose own certificate is embedded and whose signature is broken.
    let mut fleet_cert = Pkcs7::parse(&b.cms(body, &k.fleet, sha256, &["-noattr"]));
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
        &elf::append_signature(body, &t.encode()),
    );
    let mut db2_p = b.plain(body, &k.db2, sha256);
    let si = db2_p.signer(0);
    let i = der::signer_sig_alg_index(si) + 1;
    *si.kids_mut()[i].bytes_mut().last_mut().unwrap() ^= 1;
    b.add(
        "S34b",
        "S34",
        "two signers: db key valid, then another db key whose signature is broken",
        "crc8",
        &elf::append_signature(body, &two(&snake_p, &db2_p).encode()),
    );
    let p = b.cms(body, &k.leaf, sha256, &["-noattr"]);
    b.add(
        "S35a",
        "S35",
        "signed by a leaf of the db CA, the leaf embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let p = b.cms(body, &k.leaf, sha256, &["-noattr", "-nocerts"]);
    b.add(
        "S35b",
        "S35",
        "signed by a leaf of the db CA, the leaf not embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let good = b.cms(body, &k.leaf, sha256, &["-noattr"]);
    b.add_edited(
        "S35c",
        "S35",
        "signed by a leaf of the db CA, the leaf embedded with its certificate's signature broken",
        body,
        &good,
        |t| {
            let cert = &mut t.certificates()[0];
            *cert.kids_mut()[2].bytes_mut().last_mut().unwrap() ^= 1;
        },
    );
    let mid = k.mid.cert.to_str().unwrap().to_string();
    let good = b.cms(body, &k.leaf2, sha256, &["-noattr", "-certfile", &mid]);
    b.add(
        "S35d",
        "S35",
        "signed by a leaf of an intermediate of the db CA, leaf and intermediate embedded",
        "crc8",
        &elf::append_signature(body, &good),
    );
    b.add_edited(
        "S35e",
        "S35",
        "as S35d, the leaf's certificate signature (by the embedded intermediate) broken",
        body,
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
    let p = b.cms(body, &k.leaf, sha256, &["-noattr", "-keyid"]);
    b.add(
        "S35f",
        "S35",
        "signed by a leaf of the db CA named by key identifier, the leaf embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let m = b.sign_file(body, &k.rsa2560, sha256, false);
    b.add("S36a", "S36", "signed by an RSA-2560 key in db", "crc8", &m);
    let m = b.sign_file(body, &k.rsa2047, sha256, false);
    b.add("S36c", "S36", "signed by an RSA-2047 key in db", "crc8", &m);
    let m = b.sign_file(body, &k.p384, sha384, false);
    b.add(
        "S36b",
        "S36",
        "signed by an ECDSA P-384 key in db",
        "crc8",
        &m,
    );
    let m = b.sign_file(body, &k.p521, sha512, false);
    b.add(
        "S37a",
        "S37",
        "signed by an ECDSA P-521 key in db",
        "crc8",
        &m,
    );
    let m = b.sign_file(body, &k.rsa512, sha256, false);
    b.add("S37b", "S37", "signed by an RSA-512 key in db", "crc8", &m);
    b.add(
        "S38",
        "S38",
        "signed by a key the gate trusts and no keyring holds",
        "crc8",
        &fleet_signed,
    )
    .extra_trust = vec![k.fleet.cert.clone()];
    let m = b.sign_file(body, &k.snake, "sha224", false);
    b.add(
        "S40",
        "S40",
        "signed by a db key, the file's SHA-256 in dbx",
        "crc8",
        &m,
    );
    let m = b.sign_file(body, &k.revoked, sha256, false);
    b.add(
        "S41a",
        "S41",
        "signed by a db key whose certificate's TBS hash is in dbx",
        "crc8",
        &m,
    );
    let p = b.cms(body, &k.revoked, sha256, &["-noattr"]);
    b.add(
        "S41b",
        "S41",
        "the same, that certificate embedded",
        "crc8",
        &elf::append_signature(body, &p),
    );
    b.add(
        "S42a",
        "S42",
        "unsigned, under lockdown=integrity",
        "crc8",
        body,
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
        snake_signed,
    )
    .lockdown = true;
    match kernel {
        Kernel::K61 => {
            b.add(
                "S43a",
                "S43",
                "Debian's own module as shipped",
                "crc8",
                crc8,
            );
        }
        Kernel::K612 => {
            let bytes = std::fs::read(crc8_path).unwrap();
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
        snake_signed,
    );
    b.add(
        "S44",
        "S44",
        "signer named by subjectKeyIdentifier (sign-file -k)",
        "crc8",
        skid_signed,
    );
    let m = b.sign_file(body, &k.snake, "sha1", false);
    b.add("S45", "S45", "sha1", "crc8", &m);
}

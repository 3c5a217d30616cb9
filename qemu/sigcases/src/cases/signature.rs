//! The signature's container: the trailer (`module_signature.c`, `signing.c`), the PKCS#7
//! message (`asn1_decoder.c`, `pkcs7_parser.c`), digests and algorithms.

use super::*;

/// The cases of the trailer (module_signature.c, signing.c).
pub(super) fn trailer(b: &mut Builder, c: &Common) {
    let Common {
        body, snake_signed, ..
    } = c;
    b.add("S01", "S01", "the signature cut off", "crc8", body);
    b.add(
        "S02",
        "S02",
        "valid db-key signature, loaded with MODULE_INIT_IGNORE_VERMAGIC",
        "crc8",
        snake_signed,
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
    let m = trailer_edit(snake_signed, |t| {
        t[8..].copy_from_slice(&avail.to_be_bytes())
    });
    b.add(
        "S04a",
        "S04",
        "sig_len equal to every byte before the trailer",
        "crc8",
        &m,
    );
    let m = trailer_edit(snake_signed, |t| {
        t[8..].copy_from_slice(&(avail + 1000).to_be_bytes())
    });
    b.add(
        "S04b",
        "S04",
        "sig_len beyond the start of the file",
        "crc8",
        &m,
    );
    let m = trailer_edit(snake_signed, |t| {
        t[8..].copy_from_slice(&0u32.to_be_bytes())
    });
    b.add("S05", "S05", "sig_len 0", "crc8", &m);
    let m = trailer_edit(snake_signed, |t| t[2] = 1);
    b.add("S06", "S06", "id_type 1 (PGP)", "crc8", &m);
    let m = trailer_edit(snake_signed, |t| {
        t[2] = 1;
        t[0] = 1;
    });
    b.add("S07", "S07", "id_type 1 and algo 1", "crc8", &m);
    let m = trailer_edit(snake_signed, |t| t[0] = 1);
    b.add("S08a", "S08", "algo 1", "crc8", &m);
    let m = trailer_edit(snake_signed, |t| t[5] = 1);
    b.add("S08b", "S08", "__pad[0] 1", "crc8", &m);
}

/// The cases of the PKCS#7 message (asn1_decoder.c, pkcs7_parser.c).
pub(super) fn pkcs7(b: &mut Builder, c: &Common) {
    let Common {
        k,
        body,
        good,
        skid_signed,
        ..
    } = c;
    let sha256 = "sha256";
    let big = b.cms(
        body,
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
        &elf::append_signature(body, &big),
    );
    let mut p = good.clone();
    p[0] = 0x31;
    b.add(
        "S10a",
        "S10",
        "PKCS#7 starting with a SET tag",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let p = good[..good.len() - 1].to_vec();
    b.add(
        "S10b",
        "S10",
        "PKCS#7 with its last byte dropped",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let mut p = good.clone();
    p.extend_from_slice(&[0u8; 16]);
    b.add(
        "S11",
        "S11",
        "16 zero bytes after the PKCS#7, inside sig_len",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let p = Pkcs7::parse(good).0.encode_indefinite();
    b.add(
        "S12",
        "S12",
        "the ContentInfo with a BER indefinite length",
        "crc8",
        &elf::append_signature(body, &p),
    );
    b.add_edited(
        "S13",
        "S13",
        "outer contentType envelopedData",
        body,
        good,
        |t| {
            *t.content_type().last_mut().unwrap() = 3;
        },
    );
    b.add_edited("S14", "S14", "SignedData version 2", body, good, |t| {
        *t.version() = vec![2];
    });
    b.add_edited("S15", "S15", "SignerInfo version 2", body, good, |t| {
        *t.signer(0).kids_mut()[0].bytes_mut() = vec![2];
    });
    b.add_edited(
        "S16",
        "S16",
        "SignedData version 3 around a SignerInfo version 1",
        body,
        good,
        |t| {
            *t.version() = vec![3];
        },
    );
    let mut t = Pkcs7::parse(&elf::pkcs7(skid_signed));
    *t.version() = vec![1];
    *t.signer(0).kids_mut()[0].bytes_mut() = vec![1];
    b.add(
        "S17",
        "S17",
        "signer named by key identifier, both versions 1",
        "crc8",
        &elf::append_signature(body, &t.encode()),
    );
    let p = b.cms(
        body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-nodetach"],
    );
    b.add(
        "S18",
        "S18",
        "the content inside the PKCS#7 (not detached)",
        "crc8",
        &elf::append_signature(body, &p),
    );
    b.add_edited("S19a", "S19", "eContentType signedData", body, good, |t| {
        *t.encap().kids_mut()[0].bytes_mut() = der::oid("1.2.840.113549.1.7.2");
    });
    b.add_edited(
        "S19b",
        "S19",
        "eContentType msIndirectData without signed attributes",
        body,
        good,
        |t| {
            *t.encap().kids_mut()[0].bytes_mut() = der::oid("1.3.6.1.4.1.311.2.1.4");
        },
    );
    b.add_edited("S20a", "S20", "no SignerInfo", body, good, |t| {
        t.signer_infos().clear();
    });
    let mut t = Pkcs7::parse(good);
    let mut with_attrs = Pkcs7::parse(&b.cms(body, &k.db2, sha256, &["-nocerts", "-nosmimecap"]));
    let second = with_attrs.signer(0).clone();
    t.signer_infos().push(second);
    b.add(
        "S20b",
        "S20",
        "two signers, only the second with signed attributes",
        "crc8",
        &elf::append_signature(body, &t.encode()),
    );
    let p = b.cms(body, &k.snake, sha256, &["-nocerts", "-nosmimecap"]);
    b.add(
        "S21",
        "S21",
        "signed attributes (openssl cms without -noattr)",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let smime = b.cms(body, &k.snake, sha256, &["-nocerts"]);
    attribute_rules(b, body, &p, smime);
}

/// The parser's rules for signed attributes (`pkcs7_sig_note_authenticated_attr`), which
/// refuse before the module rule of S21: `attrs` is S21's PKCS#7, `smime` the same with
/// S/MIME capabilities (`openssl cms` without `-nosmimecap`).
fn attribute_rules(b: &mut Builder, body: &[u8], attrs: &[u8], smime: Vec<u8>) {
    b.add(
        "S21b",
        "S21",
        "signed attributes with S/MIME capabilities (openssl cms without -nosmimecap)",
        "crc8",
        &elf::append_signature(body, &smime),
    );
    let is = |a: &der::Node, oid: &str| a.kids()[0].bytes() == &der::oid(oid);
    b.add_edited(
        "S21c",
        "S21",
        "signed attributes without the content type",
        body,
        attrs,
        |t| {
            t.signer(0).kids_mut()[3]
                .kids_mut()
                .retain(|a| !is(a, "1.2.840.113549.1.9.3"));
        },
    );
    b.add_edited(
        "S21d",
        "S21",
        "signed attributes with a second message digest",
        body,
        attrs,
        |t| {
            let attrs = t.signer(0).kids_mut()[3].kids_mut();
            let mut second = attrs
                .iter()
                .find(|a| is(a, "1.2.840.113549.1.9.4"))
                .unwrap()
                .clone();
            second.kids_mut()[1].kids_mut()[0].bytes_mut()[0] ^= 0xff;
            attrs.push(second);
        },
    );
}

/// The cases of digests and algorithms.
pub(super) fn digests(b: &mut Builder, c: &Common) {
    let Common { k, body, good, .. } = c;
    let kernel = c.kernel;
    let (sha256, sha384, sha512) = ("sha256", "sha384", "sha512");
    let md5 = b.plain(body, &k.snake, "md5").encode();
    let sha3 = b.plain(body, &k.snake, "sha3-256").encode();
    let (unknown, extra) = match kernel {
        Kernel::K61 => (&sha3, &md5),
        Kernel::K612 => (&md5, &sha3),
    };
    b.add(
        "S22",
        "S22",
        "a digest this kernel's PKCS#7 parser does not know (6.1: sha3-256, 6.12: md5)",
        "crc8",
        &elf::append_signature(body, unknown),
    );
    let m = b.sign_file(body, &k.snake, sha384, false);
    b.add(
        "S23a",
        "S23",
        "sha384 (6.1 builds sha512 as a module)",
        "crc8",
        &m,
    );
    let m = b.sign_file(body, &k.snake, sha512, false);
    b.add("S23b", "S23", "sha512", "crc8", &m);
    b.add(
        "S24",
        "S24",
        "the digest only this kernel accepts (6.1: md5, 6.12: sha3-256) by a db key",
        "crc8",
        &elf::append_signature(body, extra),
    );
    b.add_edited(
        "S25a",
        "S25",
        "signatureAlgorithm sha256WithRSAEncryption",
        body,
        good,
        |t| {
            let si = t.signer(0);
            let i = der::signer_sig_alg_index(si);
            si.kids_mut()[i] = der::alg("1.2.840.113549.1.1.11", true);
        },
    );
    let p = b.cms(
        body,
        &k.snake,
        sha256,
        &["-noattr", "-nocerts", "-keyopt", "rsa_padding_mode:pss"],
    );
    b.add(
        "S25b",
        "S25",
        "RSASSA-PSS",
        "crc8",
        &elf::append_signature(body, &p),
    );
    let mut t = b.plain(body, &k.p384, sha256);
    let si = t.signer(0);
    let i = der::signer_sig_alg_index(si);
    si.kids_mut()[i] = der::alg("1.2.840.10045.2.1", false);
    b.add(
        "S25c",
        "S25",
        "signatureAlgorithm id-ecPublicKey (P-384 key)",
        "crc8",
        &elf::append_signature(body, &t.encode()),
    );
    let mut t = b.plain(body, &k.p384, sha256);
    let si = t.signer(0);
    let i = der::signer_sig_alg_index(si);
    si.kids_mut()[i] = der::alg("1.2.840.10045.4.3.3", false);
    b.add(
        "S26",
        "S26",
        "ECDSA over sha256 named ecdsa-with-SHA384 (P-384 key)",
        "crc8",
        &elf::append_signature(body, &t.encode()),
    );
    b.add_edited(
        "S27a",
        "S27",
        "empty SignedData digestAlgorithms",
        body,
        good,
        |t| {
            t.digest_algorithms().clear();
        },
    );
    b.add_edited(
        "S27b",
        "S27",
        "md5 added to the SignedData digestAlgorithms",
        body,
        good,
        |t| {
            t.digest_algorithms()
                .insert(0, der::alg("1.2.840.113549.2.5", true));
        },
    );
    b.add_edited(
        "S27c",
        "S27",
        "the signer's digest algorithm with an INTEGER parameter",
        body,
        good,
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
}

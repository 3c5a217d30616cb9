use super::*;
use crate::formats::tpm::PcrValues;

fn quote_bytes(magic: u32, ty: u16, extra: &[u8]) -> Vec<u8> {
    let mut c = CommandBuf::structure();
    c.u32(magic)
        .u16(ty)
        .tpm2b(&[0x00, 0x0b, 1, 2, 3])
        .tpm2b(extra)
        .u64(123_456)
        .u32(7)
        .u32(0)
        .u8(1)
        .u64(0x2023_0000_0001);
    write_selection(
        &mut c,
        &[(HashAlg::Sha256, vec![0, 7, 13]), (HashAlg::Sha1, vec![11])],
    );
    c.tpm2b(&[0xAA; 32]);
    c.into_bytes()
}

#[test]
fn a_quote_parses_with_every_field() {
    let b = quote_bytes(TPM_GENERATED, ST_ATTEST_QUOTE, b"nonce");
    let a = Attest::parse(&b).unwrap();
    assert_eq!(a.bytes, b);
    assert_eq!(a.qualified_signer, [0x00, 0x0b, 1, 2, 3]);
    assert_eq!(a.extra_data, b"nonce");
    assert_eq!(
        a.clock,
        ClockInfo {
            clock: 123_456,
            reset_count: 7,
            restart_count: 0,
            safe: true
        }
    );
    assert_eq!(a.firmware_version, 0x2023_0000_0001);
    assert_eq!(
        a.pcr_select,
        vec![(HashAlg::Sha256, vec![0, 7, 13]), (HashAlg::Sha1, vec![11])]
    );
    assert_eq!(a.pcr_digest, [0xAA; 32]);
}

#[test]
fn a_quote_that_is_not_one_is_named() {
    let e = Attest::parse(&quote_bytes(0xff54_4348, ST_ATTEST_QUOTE, b"")).unwrap_err();
    assert!(e.to_string().contains("not TPM_GENERATED_VALUE"), "{e}");
    let e = Attest::parse(&quote_bytes(TPM_GENERATED, 0x8017, b"")).unwrap_err();
    assert!(e.to_string().contains("is not TPM_ST_ATTEST_QUOTE"), "{e}");
    let b = quote_bytes(TPM_GENERATED, ST_ATTEST_QUOTE, b"n");
    for cut in 0..b.len() {
        let e = Attest::parse(&b[..cut]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("TPMS_ATTEST: malformed: truncated at byte"),
            "{cut}: {e}"
        );
    }
    let mut long = b.clone();
    long.push(0);
    let e = Attest::parse(&long).unwrap_err();
    assert!(e.to_string().contains("1 unexpected bytes at byte"), "{e}");
}

#[test]
fn templates_parse_and_say_what_they_are() {
    for kind in [KeyKind::EccP256, KeyKind::Rsa2048] {
        let ak = Public::parse(&ak_template(kind)).unwrap();
        assert!(ak.is_attestation_key(), "{kind:?}");
        assert_eq!(ak.kind(), Some(kind));
        // fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, noDA, restricted, sign.
        assert_eq!(ak.attributes, 0x0005_0472);
        assert_eq!(ak.scheme.hash, HashAlg::Sha256.alg_id());
        let ek = Public::parse(&ek_template(kind)).unwrap();
        assert!(!ek.is_attestation_key());
        assert_eq!(ek.attributes, 0x0003_00B2);
        assert_eq!(ek.auth_policy, EK_POLICY);
        assert_eq!(ek.symmetric, (alg::AES, 128, alg::CFB));
        let name = ek.name();
        assert_eq!(&name[..2], &[0x00, 0x0b]);
        assert_eq!(name.len(), 34);
        let two = ek.to_2b();
        assert_eq!(Public::parse_2b(&two).unwrap(), ek);
    }
    // The RSA EK template's unique field is 256 zero bytes; the ECC one two 32-byte zeros.
    assert_eq!(
        ek_template(KeyKind::Rsa2048).len(),
        2 + 2 + 4 + 34 + 6 + 2 + 2 + 4 + 258
    );
    assert_eq!(
        ek_template(KeyKind::EccP256).len(),
        2 + 2 + 4 + 34 + 6 + 2 + 2 + 2 + 34 + 34
    );
}

#[test]
fn a_public_area_of_another_type_or_cut_short_is_refused() {
    let mut t = ak_template(KeyKind::EccP256);
    t[1] = 0x08; // TPM_ALG_KEYEDHASH
    let e = Public::parse(&t).unwrap_err();
    assert!(e.to_string().contains("not an RSA or ECC key"), "{e}");
    let t = ak_template(KeyKind::Rsa2048);
    for cut in 0..t.len() {
        assert!(Public::parse(&t[..cut]).is_err(), "{cut}");
    }
    let e = Public::parse_2b(&[0, 5, 1]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("TPM2B_PUBLIC: malformed: truncated"),
        "{e}"
    );
}

#[test]
fn signatures_round_trip_and_unknown_schemes_are_named() {
    let s = Signature::Ecdsa {
        hash: HashAlg::Sha256,
        r: vec![1; 32],
        s: vec![2; 31],
    };
    assert_eq!(Signature::parse(&s.to_bytes()).unwrap(), s);
    let s = Signature::RsaSsa {
        hash: HashAlg::Sha384,
        sig: vec![3; 256],
    };
    assert_eq!(Signature::parse(&s.to_bytes()).unwrap(), s);
    let e = Signature::parse(&[0x00, 0x16, 0x00, 0x0b, 0, 0]).unwrap_err();
    assert!(
        e.to_string().contains("0x0016 is not RSASSA or ECDSA"),
        "{e}"
    );
    let e = Signature::parse(&[0x00, 0x18, 0x00, 0x12, 0, 0, 0, 0]).unwrap_err();
    assert!(e.to_string().contains("hash 0x0012 at byte 2"), "{e}");
}

#[test]
fn selections_parse_format_and_digest() {
    let sel = parse_selection("sha256:13,0,7+sha1:11").unwrap();
    assert_eq!(
        sel,
        vec![(HashAlg::Sha256, vec![0, 7, 13]), (HashAlg::Sha1, vec![11])]
    );
    assert_eq!(format_selection(&sel), "sha256:0,7,13+sha1:11");
    for bad in ["sha256", "md5:1", "sha256:x", "sha256:24", "sha1:1+sha1:2"] {
        assert!(parse_selection(bad).is_err(), "{bad}");
    }
    let mut values = PcrValues::new();
    for p in [0u8, 7, 13] {
        values
            .entry(HashAlg::Sha256)
            .or_default()
            .insert(u32::from(p), vec![p; 32]);
    }
    values
        .entry(HashAlg::Sha1)
        .or_default()
        .insert(11, vec![9; 20]);
    let cat = selected_values(&sel, &values).unwrap();
    assert_eq!(cat.len(), 3 * 32 + 20);
    assert_eq!(&cat[32..64], &[7; 32]);
    assert_eq!(
        pcr_digest(HashAlg::Sha256, &sel, &values).unwrap(),
        HashAlg::Sha256.digest(&cat)
    );
    values.get_mut(&HashAlg::Sha1).unwrap().clear();
    assert_eq!(
        pcr_digest(HashAlg::Sha256, &sel, &values)
            .unwrap_err()
            .to_string(),
        "no value for PCR 11 of bank sha1"
    );
    // The selection written and read back is the same.
    let mut c = CommandBuf::structure();
    write_selection(&mut c, &sel);
    let b = c.into_bytes();
    let mut r = Reader::structure("sel", &b);
    assert_eq!(read_selection(&mut r).unwrap(), sel);
    r.finish().unwrap();
}

//! Attestation against a real TPM (swtpm) judged by tpm2-tools: our AK and quotes are
//! accepted by `tpm2_checkquote`, quotes made by `tpm2_createak` + `tpm2_quote` are
//! accepted by our check, and one changed byte is refused by both. The EK template gives
//! the key in the EK certificate `swtpm_setup --create-ek-cert` wrote.
//!
//! Needs swtpm and tpm2-tools (scripts/provision installs them). Temporary files go under
//! `target/test-tmp/`.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use common::swtpm::{have_tools, setup_state, Swtpm};
use validator::formats::tpm::attest::{
    ak_template, ek_template, parse_selection, pcr_digest, selected_values, Attest, CredentialFile,
    KeyKind, Public, PublicKey, Signature, EK_CERT_NV_RSA,
};
use validator::formats::tpm::{to_hex, HashAlg, PcrValues};
use validator::sys::tpm::{Tpm, Transport, RH_ENDORSEMENT};
use validator::trust::credential::{check_ek_cert, make_credential};
use validator::trust::quote::{verify_signature, QuoteSigError};

const TOOLS: &[&str] = &[
    "tpm2_checkquote",
    "tpm2_createek",
    "tpm2_createak",
    "tpm2_quote",
    "tpm2_flushcontext",
    "tpm2_makecredential",
    "tpm2_activatecredential",
    "tpm2_startauthsession",
    "tpm2_policysecret",
];

fn work_dir(name: &str) -> PathBuf {
    common::tmpdir(&format!("attest-swtpm-{name}"))
}

fn tool(swtpm: &Swtpm, dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .env("TPM2TOOLS_TCTI", swtpm.tcti())
        .output()
        .unwrap();
    out
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a tool, then flushes transient objects and sessions: there is no resource
/// manager between tpm2-tools and swtpm, so each tool's objects would stay loaded.
fn flushed(swtpm: &Swtpm, dir: &Path, args: &[&str]) {
    ok(&tool(swtpm, dir, args), args[0]);
    for f in ["-t", "-s"] {
        ok(
            &tool(swtpm, dir, &["tpm2_flushcontext", f]),
            "tpm2_flushcontext",
        );
    }
}

/// tpm2-tools' EK (RSA) in `ek.ctx` and an ECC AK under it in `ak.ctx`, with their
/// public areas and the AK's name written to the files named.
fn tpm2_tools_ek_and_ak(swtpm: &Swtpm, dir: &Path, ek_pub: &str, ak_pub: &str, ak_name: &str) {
    flushed(
        swtpm,
        dir,
        &["tpm2_createek", "-c", "ek.ctx", "-G", "rsa", "-u", ek_pub],
    );
    flushed(
        swtpm,
        dir,
        &[
            "tpm2_createak",
            "-C",
            "ek.ctx",
            "-c",
            "ak.ctx",
            "-G",
            "ecc",
            "-g",
            "sha256",
            "-s",
            "ecdsa",
            "-u",
            ak_pub,
            "-n",
            ak_name,
        ],
    );
}

/// A fresh TPM with SHA-1 and SHA-256 banks, started, PCR 13 extended once.
fn fresh(dir: &Path, ek_cert: bool) -> Swtpm {
    if ek_cert {
        let out = Command::new("swtpm_setup")
            .args(["--tpm2", "--tpmstate"])
            .arg(dir)
            .args([
                "--pcr-banks",
                "sha1,sha256",
                "--create-ek-cert",
                "--overwrite",
            ])
            .output()
            .unwrap();
        ok(&out, "swtpm_setup --create-ek-cert");
    } else {
        setup_state(dir, "sha1,sha256");
    }
    let swtpm = Swtpm::start(dir, "not-need-init,startup-clear");
    let mut tpm = swtpm.connect();
    let banks = tpm.get_pcr_banks().unwrap();
    let digests: Vec<(HashAlg, Vec<u8>)> = banks.iter().map(|b| (*b, b.digest(b"x"))).collect();
    tpm.pcr_extend(13, &digests).unwrap();
    swtpm
}

/// The selected PCRs, read over `tpm` (swtpm serves one connection at a time).
fn read<T: Transport>(tpm: &mut Tpm<T>, sel: &[(HashAlg, Vec<u32>)]) -> PcrValues {
    let mut v = PcrValues::new();
    for (bank, pcrs) in sel {
        for p in pcrs {
            for (b, d) in tpm.pcr_read(*p, &[*bank]).unwrap() {
                v.entry(b).or_default().insert(*p, d);
            }
        }
    }
    v
}

/// Our AK and quote, then `tpm2_checkquote` on the files we write.
fn ours_judged_by_checkquote(kind: KeyKind) {
    if !have_tools(TOOLS) {
        return;
    }
    let dir = work_dir(&format!("ours-{}", kind.name()));
    let swtpm = fresh(&dir, false);
    let mut tpm = swtpm.connect();
    let t0 = Instant::now();
    let ak = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(kind))
        .unwrap();
    let made = t0.elapsed();
    let (public, name, qualified) = tpm.read_public(ak.handle).unwrap();
    assert_eq!(public, ak.public);
    assert_eq!(name, ak.public.name());
    // The same template under the same seed: the same key, nothing stored.
    let again = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(kind))
        .unwrap();
    assert_eq!(again.public, ak.public);
    tpm.flush_context(again.handle).unwrap();

    let sel = parse_selection("sha256:0,7,13+sha1:13").unwrap();
    let nonce = b"verifier's nonce 0123456789abcdef";
    let (attest, sig) = tpm.quote(ak.handle, nonce, &sel).unwrap();
    tpm.flush_context(ak.handle).unwrap();
    let values = read(&mut tpm, &sel);
    drop(tpm);
    eprintln!("{kind:?}: AK made in {made:?}");
    assert_eq!(attest.extra_data, nonce);
    assert_eq!(attest.qualified_signer, qualified);
    assert_eq!(attest.pcr_select, sel);
    assert_eq!(
        attest.pcr_digest,
        pcr_digest(sig.hash(), &sel, &values).unwrap()
    );
    verify_signature(&ak.public, &attest.bytes, &sig).unwrap();

    std::fs::write(dir.join("ak.pub"), ak.public.to_2b()).unwrap();
    std::fs::write(dir.join("quote.msg"), &attest.bytes).unwrap();
    std::fs::write(dir.join("quote.sig"), sig.to_bytes()).unwrap();
    std::fs::write(
        dir.join("quote.pcrs"),
        selected_values(&sel, &values).unwrap(),
    )
    .unwrap();
    let check = |msg: &str, q: &str| {
        tool(
            &swtpm,
            &dir,
            &[
                "tpm2_checkquote",
                "-u",
                "ak.pub",
                "-m",
                msg,
                "-s",
                "quote.sig",
                "-f",
                "quote.pcrs",
                "-l",
                "sha256:0,7,13+sha1:13",
                "-g",
                "sha256",
                "-q",
                q,
            ],
        )
    };
    let hex_nonce = to_hex(nonce);
    ok(
        &check("quote.msg", &hex_nonce),
        "tpm2_checkquote of our quote",
    );
    // Another nonce: refused by tpm2_checkquote.
    assert!(!check("quote.msg", "00").status.success());
    // One byte of the message changed: refused by both.
    let mut bad = attest.bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(dir.join("bad.msg"), &bad).unwrap();
    assert!(!check("bad.msg", &hex_nonce).status.success());
    assert_eq!(
        verify_signature(&ak.public, &bad, &sig),
        Err(QuoteSigError::Mismatch)
    );
}

#[test]
fn our_ecc_quote_is_accepted_by_tpm2_checkquote() {
    ours_judged_by_checkquote(KeyKind::EccP256);
}

#[test]
fn our_rsa_quote_is_accepted_by_tpm2_checkquote() {
    ours_judged_by_checkquote(KeyKind::Rsa2048);
}

/// `tpm2_createek`, `tpm2_createak`, `tpm2_quote`; then our parsers and check.
#[test]
fn tpm2_quote_is_accepted_by_our_check_and_a_changed_byte_is_not() {
    if !have_tools(TOOLS) {
        return;
    }
    let dir = work_dir("theirs");
    let swtpm = fresh(&dir, false);
    let t = |args: &[&str]| flushed(&swtpm, &dir, args);
    tpm2_tools_ek_and_ak(&swtpm, &dir, "ek.pub", "ak.pub", "ak.name");
    t(&[
        "tpm2_quote",
        "-c",
        "ak.ctx",
        "-l",
        "sha256:0,13",
        "-q",
        "abcdef01",
        "-m",
        "q.msg",
        "-s",
        "q.sig",
        "-g",
        "sha256",
    ]);
    let ak = Public::parse_2b(&std::fs::read(dir.join("ak.pub")).unwrap()).unwrap();
    assert_eq!(ak.name(), std::fs::read(dir.join("ak.name")).unwrap());
    let msg = std::fs::read(dir.join("q.msg")).unwrap();
    let sig = Signature::parse(&std::fs::read(dir.join("q.sig")).unwrap()).unwrap();
    let attest = Attest::parse(&msg).unwrap();
    assert_eq!(attest.extra_data, [0xab, 0xcd, 0xef, 0x01]);
    let sel = parse_selection("sha256:0,13").unwrap();
    assert_eq!(attest.pcr_select, sel);
    assert_eq!(
        attest.pcr_digest,
        pcr_digest(HashAlg::Sha256, &sel, &read(&mut swtpm.connect(), &sel)).unwrap()
    );
    verify_signature(&ak, &msg, &sig).unwrap();
    for i in [0, 7, msg.len() / 2, msg.len() - 1] {
        let mut bad = msg.clone();
        bad[i] ^= 0x80;
        assert_eq!(
            verify_signature(&ak, &bad, &sig),
            Err(QuoteSigError::Mismatch),
            "byte {i}"
        );
    }
    let mut bad_sig = sig.to_bytes();
    let last = bad_sig.len() - 1;
    bad_sig[last] ^= 1;
    assert!(verify_signature(&ak, &msg, &Signature::parse(&bad_sig).unwrap()).is_err());
    // The EK is no attestation key: its "quote" is refused before any arithmetic.
    let ek = Public::parse_2b(&std::fs::read(dir.join("ek.pub")).unwrap()).unwrap();
    assert!(matches!(
        verify_signature(&ek, &msg, &sig),
        Err(QuoteSigError::NotAnAk(_))
    ));
    // And tpm2_createek made the key our EK template makes.
    let mut tpm = swtpm.connect();
    let ours = tpm
        .create_primary(RH_ENDORSEMENT, &ek_template(KeyKind::Rsa2048))
        .unwrap();
    tpm.flush_context(ours.handle).unwrap();
    assert_eq!(ours.public, ek);
}

/// The EK certificate in NV, read by us, holds the key our EK template makes.
#[test]
fn the_ek_certificate_holds_the_key_our_template_makes() {
    if !have_tools(TOOLS) {
        return;
    }
    let dir = work_dir("ekcert");
    let swtpm = fresh(&dir, true);
    let mut tpm = swtpm.connect();
    let cert = tpm.nv_read(EK_CERT_NV_RSA).unwrap();
    let ek = tpm
        .create_primary(RH_ENDORSEMENT, &ek_template(KeyKind::Rsa2048))
        .unwrap();
    tpm.flush_context(ek.handle).unwrap();
    let PublicKey::Rsa { modulus, .. } = &ek.public.key else {
        panic!("RSA EK expected");
    };
    use der::Decode;
    let c = x509_cert::Certificate::from_der(&cert).unwrap();
    let spki = c
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    let key = pkcs1::RsaPublicKey::from_der(spki).unwrap();
    let n = key.modulus.as_bytes();
    assert_eq!(n.strip_prefix(&[0]).unwrap_or(n), modulus.as_slice());
}

/// Enrollment through the EK: a credential we make (in software) for our AK is
/// activated by our node side and returns the secret; one made for another name is
/// refused by the TPM; `tpm2_activatecredential` activates ours and we activate
/// `tpm2_makecredential`'s. The EK certificate swtpm's CA wrote is accepted against that
/// CA and refused against another.
#[test]
fn credentials_made_by_us_or_tpm2_tools_are_activated_by_either() {
    if !have_tools(TOOLS) {
        return;
    }
    let dir = work_dir("credential");
    let swtpm = fresh(&dir, true);
    let secret = b"fleet enrollment secret 12345678";
    let mut tpm = swtpm.connect();
    let ek = tpm
        .create_primary(RH_ENDORSEMENT, &ek_template(KeyKind::Rsa2048))
        .unwrap();
    let ak = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(KeyKind::EccP256))
        .unwrap();
    let cred = make_credential(&ek.public, &ak.public.name(), secret).unwrap();
    let got = tpm
        .activate_credential(
            ak.handle,
            ek.handle,
            &cred.id_object,
            &cred.encrypted_secret,
        )
        .unwrap();
    assert_eq!(got, secret);
    // Made for another key's name: the TPM refuses (TPM_RC_INTEGRITY).
    let mut other = ak.public.name();
    other[5] ^= 1;
    let bad = make_credential(&ek.public, &other, secret).unwrap();
    let e = tpm
        .activate_credential(ak.handle, ek.handle, &bad.id_object, &bad.encrypted_secret)
        .unwrap_err();
    assert!(e.to_string().contains("TPM_RC_INTEGRITY"), "{e}");
    // The EK certificate: issued by swtpm's local CA, holding the EK's key.
    let cert = tpm.nv_read(EK_CERT_NV_RSA).unwrap();
    let mut ca = validator::trust::TrustStore::default();
    ca.add_bytes(
        &std::fs::read("/var/lib/swtpm-localca/issuercert.pem").unwrap(),
        "swtpm-localca",
    )
    .unwrap();
    let chain = check_ek_cert(&cert, &ek.public, &ca.certs).unwrap();
    assert_eq!(chain.len(), 2);
    let mut root = validator::trust::TrustStore::default();
    root.add_bytes(
        &std::fs::read("/var/lib/swtpm-localca/swtpm-localca-rootca-cert.pem").unwrap(),
        "root",
    )
    .unwrap();
    let e = check_ek_cert(&cert, &ek.public, &root.certs).unwrap_err();
    assert!(
        e.to_string().contains("none of the CAs given issued"),
        "{e}"
    );
    let e = check_ek_cert(&cert, &ak.public, &ca.certs).unwrap_err();
    assert!(
        e.to_string().contains("RSA") || e.to_string().contains("ECC"),
        "{e}"
    );
    // tpm2-tools' credential for our AK: activated by us.
    std::fs::write(dir.join("ek.pub"), ek.public.to_2b()).unwrap();
    std::fs::write(dir.join("secret.bin"), secret).unwrap();
    let name = to_hex(&ak.public.name());
    let (ek_h, ak_h) = (ek.handle, ak.handle);
    drop(tpm);
    let out = tool(
        &swtpm,
        &dir,
        &[
            "tpm2_makecredential",
            "-T",
            "none",
            "-e",
            "ek.pub",
            "-s",
            "secret.bin",
            "-n",
            &name,
            "-o",
            "theirs.cred",
        ],
    );
    ok(&out, "tpm2_makecredential");
    let theirs = CredentialFile::parse(&std::fs::read(dir.join("theirs.cred")).unwrap()).unwrap();
    assert_eq!(CredentialFile::parse(&theirs.to_bytes()).unwrap(), theirs);
    let mut tpm = swtpm.connect();
    let got = tpm
        .activate_credential(ak_h, ek_h, &theirs.id_object, &theirs.encrypted_secret)
        .unwrap();
    assert_eq!(got, secret);
    tpm.flush_context(ak_h).unwrap();
    tpm.flush_context(ek_h).unwrap();
    drop(tpm);
    // Our credential for tpm2-tools' AK: activated by tpm2_activatecredential.
    tpm2_tools_ek_and_ak(&swtpm, &dir, "ek2.pub", "ak2.pub", "ak2.name");
    let ek2 = Public::parse_2b(&std::fs::read(dir.join("ek2.pub")).unwrap()).unwrap();
    let cred =
        make_credential(&ek2, &std::fs::read(dir.join("ak2.name")).unwrap(), secret).unwrap();
    std::fs::write(
        dir.join("ours.cred"),
        CredentialFile {
            id_object: cred.id_object,
            encrypted_secret: cred.encrypted_secret,
        }
        .to_bytes(),
    )
    .unwrap();
    // The EK's policy: PolicySecret of the endorsement hierarchy, in a policy session.
    for args in [
        &[
            "tpm2_startauthsession",
            "--policy-session",
            "-S",
            "session.ctx",
        ][..],
        &["tpm2_policysecret", "-S", "session.ctx", "-c", "e"][..],
        &[
            "tpm2_activatecredential",
            "-c",
            "ak.ctx",
            "-C",
            "ek.ctx",
            "-i",
            "ours.cred",
            "-o",
            "activated.bin",
            "-P",
            "session:session.ctx",
        ][..],
    ] {
        ok(&tool(&swtpm, &dir, args), args[0]);
    }
    assert_eq!(std::fs::read(dir.join("activated.bin")).unwrap(), secret);
}

/// A quote checked against a legacy SHA-1 log: over the SHA-1 bank it verifies; over
/// SHA-256 too it cannot (the log holds no SHA-256 digest) and is refused, naming the
/// replay.
#[test]
fn a_legacy_sha1_log_proves_the_sha1_bank_alone() {
    use validator::attest::verify::{verify_quote, VerifyError};
    use validator::formats::tpm::eventlog::EventLog;
    if !have_tools(TOOLS) {
        return;
    }
    let dir = work_dir("legacy-quote");
    let swtpm = fresh(&dir, false);
    let mut tpm = swtpm.connect();
    let banks = tpm.get_pcr_banks().unwrap();
    // `fresh` extended PCR 13 with "x": the firmware's first record, as a legacy log.
    let mut first = 13u32.to_le_bytes().to_vec();
    first.extend_from_slice(&13u32.to_le_bytes());
    first.extend_from_slice(&HashAlg::Sha1.digest(b"x"));
    first.extend_from_slice(&1u32.to_le_bytes());
    first.push(b'x');
    let mut log = EventLog::parse(&first).unwrap();
    assert!(log.is_legacy());
    log.measure(13, b"decision:pass").unwrap();
    let digests: Vec<(HashAlg, Vec<u8>)> = banks
        .iter()
        .map(|b| (*b, b.digest(b"decision:pass")))
        .collect();
    tpm.pcr_extend(13, &digests).unwrap();
    let ak = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(KeyKind::EccP256))
        .unwrap();
    let nonce = b"legacy";
    let sha1 = parse_selection("sha1:0,13").unwrap();
    let (a, s) = tpm.quote(ak.handle, nonce, &sha1).unwrap();
    verify_quote(
        &ak.public,
        &a.bytes,
        &s.to_bytes(),
        nonce,
        "the nonce",
        Some(&log),
    )
    .unwrap();
    let both = parse_selection("sha1:13+sha256:13").unwrap();
    let (a, s) = tpm.quote(ak.handle, nonce, &both).unwrap();
    let e = verify_quote(
        &ak.public,
        &a.bytes,
        &s.to_bytes(),
        nonce,
        "the nonce",
        Some(&log),
    )
    .unwrap_err();
    assert!(matches!(e, VerifyError::PcrDigest { .. }), "{e}");
    tpm.flush_context(ak.handle).unwrap();
}

/// A TPM in dictionary-attack lockout (after failed guesses at another key's password)
/// still quotes with our AK, which has `noDA`; the same AK without `noDA` is refused by
/// the TPM (`TPM_RC_LOCKOUT`), which is why the template sets it.
#[test]
fn a_tpm_in_lockout_still_quotes_with_our_ak() {
    if !have_tools(&[
        "tpm2_dictionarylockout",
        "tpm2_createprimary",
        "tpm2_create",
    ]) {
        return;
    }
    let dir = work_dir("lockout");
    let swtpm = fresh(&dir, false);
    flushed(
        &swtpm,
        &dir,
        &[
            "tpm2_dictionarylockout",
            "-s",
            "-n",
            "1",
            "-t",
            "600",
            "-l",
            "600",
        ],
    );
    flushed(
        &swtpm,
        &dir,
        &[
            "tpm2_createprimary",
            "-C",
            "o",
            "-c",
            "p.ctx",
            "-p",
            "secret",
        ],
    );
    // One wrong password for that key: the TPM locks out.
    let out = tool(
        &swtpm,
        &dir,
        &[
            "tpm2_create",
            "-C",
            "p.ctx",
            "-P",
            "wrong",
            "-u",
            "k.pub",
            "-r",
            "k.priv",
        ],
    );
    assert!(!out.status.success(), "a wrong password was taken");
    ok(
        &tool(&swtpm, &dir, &["tpm2_flushcontext", "-t"]),
        "tpm2_flushcontext",
    );
    ok(
        &tool(&swtpm, &dir, &["tpm2_flushcontext", "-s"]),
        "tpm2_flushcontext",
    );
    let sel = parse_selection("sha256:0,13").unwrap();
    let mut tpm = swtpm.connect();
    // The AK without noDA: refused while the TPM is locked out.
    let mut da = ak_template(KeyKind::EccP256);
    let attrs = u32::from_be_bytes(da[4..8].try_into().unwrap());
    assert_ne!(attrs & validator::formats::tpm::attest::attr::NO_DA, 0);
    da[4..8]
        .copy_from_slice(&(attrs & !validator::formats::tpm::attest::attr::NO_DA).to_be_bytes());
    let key = tpm.create_primary(RH_ENDORSEMENT, &da).unwrap();
    let e = tpm.quote(key.handle, b"nonce", &sel).unwrap_err();
    tpm.flush_context(key.handle).unwrap();
    assert_eq!(
        e.response_code().map(|c| c.0 & 0xfff),
        Some(0x921),
        "TPM_RC_LOCKOUT expected: {e}"
    );
    // Ours: quotes.
    let key = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(KeyKind::EccP256))
        .unwrap();
    let (attest, sig) = tpm.quote(key.handle, b"nonce", &sel).unwrap();
    tpm.flush_context(key.handle).unwrap();
    verify_signature(&key.public, &attest.bytes, &sig).unwrap();
}

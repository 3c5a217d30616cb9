//! Signatures and certificates: PKCS#7, Authenticode, EFI signature lists, SBAT, X.509.

use super::*;

/// A PKCS#7 signature on its own: parse, and verify it over empty content with no trust.
pub fn pkcs7(data: &[u8]) {
    if let Ok(signers) = formats::pkcs7::parse(data) {
        for s in &signers {
            let _ = s.key_id();
        }
    }
    assert!(
        validator::trust::pkcs7::verify_detached(data, b"", &TrustStore::new()).is_err(),
        "a signature verified against an empty trust store"
    );
}

/// A PE image and its Authenticode signatures, framed `[u16 LE length][certificate
/// DER][image]`: the image's hashed ranges and digest, each signature as Authenticode
/// PKCS#7 and its `SpcIndirectDataContent`, and the verdict against a store holding that
/// certificate, which must refuse when the store is empty; the image's layout and, read
/// as a Unified Kernel Image, the events systemd-stub would log of it.
pub fn authenticode(data: &[u8]) {
    use validator::trust::authenticode::{verify, Rule};
    let (store, image) = framed_store(data);
    if let Ok(pe) = formats::pe::parse(image) {
        for order in [
            formats::pe::SectionOrder::Kernel,
            formats::pe::SectionOrder::Firmware,
        ] {
            for r in pe.hashed(order) {
                assert!(r.end <= image.len(), "a hashed range past the end: {r:?}");
            }
            let _ = pe.digest(image, formats::pkcs7::HashAlg::Sha256, order);
        }
        for s in &pe.signatures {
            if let Some(der) = image.get(s.der.clone()) {
                if let Ok((_, content)) = formats::pkcs7::parse_authenticode(der) {
                    let _ = formats::pe::indirect_digest(&content);
                }
            }
        }
    }
    // The same image read as a Unified Kernel Image: its layout, the stub's events, and
    // every event's data read back to its section.
    if let Ok(layout) = formats::pe::layout(image) {
        for n in layout.names() {
            if let Ok(Some(b)) = layout.section_bytes(image, &n) {
                assert!(b.len() <= image.len(), "section {n} larger than the image");
            }
        }
    }
    if let Ok(events) = formats::uki::events(image) {
        for e in &events {
            let data = formats::uki::event_data(e.section);
            assert_eq!(formats::uki::section_of(&data), Some(e.section));
        }
    }
    let _ = formats::uki::cmdline(image);
    let _ = verify(image, &store, &[], Rule::Firmware);
    assert!(
        verify(image, &TrustStore::new(), &[], Rule::Kernel).is_err(),
        "an image verified against an empty trust store"
    );
}

/// UEFI signature databases (`db`, `dbx`, MOK lists).
pub fn efisiglist(data: &[u8]) {
    if let Ok(db) = formats::efisiglist::parse(data) {
        let n = db.entries.len() + db.other;
        assert!(n * 16 <= data.len(), "more entries than the bytes hold");
        let _ = db.certs().count();
        let _ = db.sha256s().count();
    }
}

/// SBAT: the bytes as an image's `.sbat` section and as a level, and the one judged
/// against the other both ways shim meets an image.
pub fn sbat(data: &[u8]) {
    use formats::sbat::{components, judge, Level, Loaded};
    let parsed = components(data);
    if let Ok(level) = Level::parse(data) {
        let _ = level.to_string();
        for loaded in [Loaded::ByShim, Loaded::ThroughProtocol] {
            let verdict = judge(Some(data), &level, loaded);
            // A section that does not parse is refused, whatever the level.
            if parsed.is_err() {
                assert!(verdict.is_err(), "an unparsed section passed");
            }
        }
    }
}

/// X.509: a DER certificate, PEM text, and a trust store's reading of either.
pub fn x509(data: &[u8]) {
    if let Ok(c) = Cert::from_der(data, "fuzz") {
        let _ = c.label();
        // The kernel parser's self-signed check, and a certificate as its own issuer.
        if validator::trust::pkcs7::self_signed(&c, |_| true, |_| None).unwrap_or(false) {
            assert!(
                validator::trust::pkcs7::verify_cert(&c, &c, |_| true).is_ok(),
                "a self-signed certificate whose self-signature does not verify"
            );
        }
    }
    let _ = validator::trust::pem_certificates(&String::from_utf8_lossy(data));
    let mut store = TrustStore::new();
    let _ = store.add_bytes(data, "fuzz");
}

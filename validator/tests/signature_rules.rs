//! The gate's verdict on every case of `docs/SIGNATURE-RULES.md`: one test per row, named in
//! the table's Test column, over the module files the `sigcases` crate builds from the
//! provisioned Debian 6.1 and 6.12 modules. The same files go to the real kernels in
//! `qemu/tests/signature_rules.rs`. `the_table_names_only_tests_that_exist` keeps the
//! table and the tests together.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::sync::OnceLock;

use sigcases::{Case, Kernel, Set};
use validator::gate::{Gate, Verdict};

/// The gate for one kernel ([`test_support::sigrules::gate`], with no hash blacklist: the
/// S40 test adds its own).
struct Judge {
    set: &'static Set,
    gate: Gate,
    /// db certificates the trust store refused, with its message.
    refused: Vec<(&'static str, String)>,
}

fn judge(k: Kernel) -> &'static Judge {
    static J: [OnceLock<Judge>; 2] = [OnceLock::new(), OnceLock::new()];
    J[k as usize].get_or_init(|| {
        let set = sigcases::set(k);
        let (gate, refused) = test_support::sigrules::gate(set, Vec::new()).unwrap();
        Judge { set, gate, refused }
    })
}

/// The gate's verdict on one case.
fn verdict(k: Kernel, c: &Case) -> Verdict {
    let j = judge(k);
    let mut gate = j.gate.clone();
    for extra in &c.extra_trust {
        gate.trust.add_path(extra).unwrap();
    }
    let raw = std::fs::read(&c.file).unwrap();
    let name = c.file.file_name().unwrap().to_string_lossy().into_owned();
    gate.check(c.module, &name, &raw).0
}

fn codes(v: &Verdict) -> Vec<&'static str> {
    let mut c: Vec<&'static str> = v.reasons.iter().map(|r| r.code.as_str()).collect();
    c.sort_unstable();
    c.dedup();
    c
}

/// Asserts the gate's reason codes for each `(case, kernel, codes)`: on that kernel
/// only, or on every kernel whose set has the case (`None`). An empty list: the gate
/// passes the module. Whether this agrees with the kernel is the table's Verdict column,
/// and `qemu/tests/signature_rules.rs` shows it against the real kernels.
fn expect(want: &[(&str, Option<Kernel>, &[&str])]) {
    let mut checked = 0;
    for (id, only, codes_want) in want {
        for k in Kernel::ALL {
            if only.is_some_and(|o| o != k) {
                continue;
            }
            let Some(c) = judge(k).set.cases.iter().find(|c| c.id == *id) else {
                assert!(only.is_none(), "no case {id} on {}", k.label());
                continue;
            };
            let v = verdict(k, c);
            assert_eq!(
                codes(&v),
                codes_want.to_vec(),
                "{} {id} ({}): {}",
                k.label(),
                c.what,
                v.summary()
            );
            assert_eq!(v.pass, codes_want.is_empty());
            checked += 1;
        }
    }
    assert!(checked > 0);
}

/// Rows S01.
#[test]
fn sigrule_unsigned() {
    expect(&[("S01", None, &["unsigned"])]);
}

/// Rows S02.
#[test]
fn sigrule_ignore_flags() {
    expect(&[("S02", None, &[])]);
}

/// Rows S03.
#[test]
fn sigrule_trailer_truncated() {
    expect(&[
        ("S03a", None, &["bad-signature-trailer", "unreadable"]),
        ("S03b", None, &["bad-signature-trailer", "unreadable"]),
    ]);
}

/// Rows S04.
#[test]
fn sigrule_siglen_too_big() {
    expect(&[
        ("S04a", None, &["bad-signature-trailer"]),
        ("S04b", None, &["bad-signature-trailer"]),
    ]);
}

/// Rows S05.
#[test]
fn sigrule_siglen_zero() {
    expect(&[("S05", None, &["bad-signature-trailer"])]);
}

/// Rows S06.
#[test]
fn sigrule_id_type() {
    expect(&[("S06", None, &["bad-signature-trailer"])]);
}

/// Rows S07.
#[test]
fn sigrule_id_type_and_algo() {
    expect(&[("S07", None, &["bad-signature-trailer"])]);
}

/// Rows S08.
#[test]
fn sigrule_nonzero_params() {
    expect(&[
        ("S08a", None, &["bad-signature-trailer"]),
        ("S08b", None, &["bad-signature-trailer"]),
    ]);
}

/// Rows S09.
#[test]
fn sigrule_pkcs7_too_big() {
    expect(&[("S09", None, &["bad-pkcs7"])]);
}

/// Rows S10.
#[test]
fn sigrule_asn1_malformed() {
    expect(&[
        ("S10a", None, &["bad-pkcs7"]),
        ("S10b", None, &["bad-pkcs7"]),
    ]);
}

/// Rows S11.
#[test]
fn sigrule_trailing_data() {
    expect(&[("S11", None, &["bad-pkcs7"])]);
}

/// Rows S12.
#[test]
fn sigrule_ber_indefinite() {
    expect(&[("S12", None, &["bad-pkcs7"])]);
}

/// Rows S13.
#[test]
fn sigrule_not_signed_data() {
    expect(&[("S13", None, &["bad-pkcs7"])]);
}

/// Rows S14.
#[test]
fn sigrule_sd_version() {
    expect(&[("S14", None, &["bad-pkcs7"])]);
}

/// Rows S15.
#[test]
fn sigrule_si_version() {
    expect(&[("S15", None, &["bad-pkcs7"])]);
}

/// Rows S16.
#[test]
fn sigrule_version_mismatch() {
    expect(&[("S16", None, &["bad-pkcs7"])]);
}

/// Rows S17.
#[test]
fn sigrule_sid_version_mismatch() {
    expect(&[("S17", None, &["bad-pkcs7"])]);
}

/// Rows S18.
#[test]
fn sigrule_not_detached() {
    expect(&[("S18", None, &["bad-pkcs7"])]);
}

/// Rows S19.
#[test]
fn sigrule_content_type() {
    expect(&[
        ("S19a", None, &["bad-pkcs7"]),
        ("S19b", None, &["bad-pkcs7"]),
    ]);
}

/// Rows S20.
#[test]
fn sigrule_no_signer() {
    expect(&[
        ("S20a", None, &["bad-pkcs7"]),
        ("S20b", None, &["bad-pkcs7"]),
    ]);
}

/// Rows S21.
#[test]
fn sigrule_authattrs() {
    expect(&[
        ("S21", None, &["signed-attributes"]),
        ("S21b", None, &["bad-pkcs7"]),
        ("S21c", None, &["bad-pkcs7"]),
        ("S21d", None, &["bad-pkcs7"]),
    ]);
}

/// Rows S22.
#[test]
fn sigrule_digest_unknown() {
    expect(&[("S22", None, &["bad-pkcs7"])]);
}

/// Rows S23.
#[test]
fn sigrule_digest_unavailable() {
    expect(&[
        ("S23a", Some(Kernel::K61), &["unsupported-crypto"]),
        ("S23b", Some(Kernel::K61), &["unsupported-crypto"]),
        ("S23a", Some(Kernel::K612), &[]),
        ("S23b", Some(Kernel::K612), &[]),
    ]);
}

/// Rows S23 once the module that provides the digest has loaded (the init loads
/// `sha512_generic` first, as its initramfs lists it as a `pre:` soft dependency): 6.1
/// then checks the signature and passes it, and so does the gate; the refusal before it
/// names the module it lacks.
#[test]
fn sigrule_digest_from_a_module() {
    use validator::trust::HashAlg;
    for (id, alg) in [("S23a", HashAlg::Sha384), ("S23b", HashAlg::Sha512)] {
        let j = judge(Kernel::K61);
        let c = j.set.get(id);
        let raw = std::fs::read(&c.file).unwrap();
        let name = c.file.file_name().unwrap().to_string_lossy().into_owned();
        let mut gate = j.gate.clone();
        gate.policy.module_digests = validator::gate::ModuleDigests::default();
        let before = gate.check(c.module, &name, &raw).0;
        assert!(!before.pass);
        let summary = before.summary();
        assert!(
            summary.contains(&format!("digest {} is not built into kernel", alg.name()))
                && summary.contains(&format!("(crypto-{})", alg.name())),
            "{summary}"
        );
        gate.policy.module_digests.add(alg);
        let after = gate.check(c.module, &name, &raw).0;
        assert!(after.pass, "{id}: {}", after.summary());
        assert_eq!(after.sig_hashalgo.as_deref(), Some(alg.name()));
    }
}

/// Rows S24.
#[test]
fn sigrule_digest_md5_sha3() {
    expect(&[("S24", None, &["bad-pkcs7"])]);
}

/// Rows S25.
#[test]
fn sigrule_sigalg_oid() {
    expect(&[
        ("S25a", None, &["unsupported-crypto"]),
        ("S25b", None, &["bad-pkcs7"]),
        ("S25c", None, &["unsupported-crypto"]),
    ]);
}

/// Rows S26.
#[test]
fn sigrule_ecdsa_oid_hash() {
    expect(&[
        ("S26", Some(Kernel::K61), &["unusable-key"]),
        ("S26", Some(Kernel::K612), &["bad-signature"]),
    ]);
}

/// Rows S27.
#[test]
fn sigrule_digest_set() {
    expect(&[
        ("S27a", None, &["bad-pkcs7"]),
        ("S27b", None, &[]),
        ("S27c", None, &[]),
    ]);
}

/// Rows S28.
#[test]
fn sigrule_extra_cert() {
    expect(&[
        ("S28a", None, &["unsupported-crypto"]),
        ("S28b", None, &["bad-pkcs7"]),
        ("S28c", None, &["bad-signature"]),
        ("S28d", None, &["bad-signature"]),
        ("S28e", Some(Kernel::K61), &["bad-signature"]),
        ("S28e", Some(Kernel::K612), &[]),
        ("S28f", None, &["bad-signature"]),
        ("S28g", None, &["bad-signature"]),
        ("S28h", None, &["bad-pkcs7"]),
    ]);
}

/// Rows S29.
#[test]
fn sigrule_embedded_cert_bad() {
    expect(&[
        ("S29a", None, &["bad-signature"]),
        ("S29b", None, &["bad-signature"]),
    ]);
}

/// Rows S30.
#[test]
fn sigrule_untrusted() {
    expect(&[("S30", None, &["untrusted-signer"])]);
}

/// Rows S31.
#[test]
fn sigrule_untrusted_tampered() {
    expect(&[("S31", None, &["untrusted-signer"])]);
}

/// Rows S32.
#[test]
fn sigrule_trusted_bad_sig() {
    expect(&[("S32", None, &["bad-signature"])]);
}

/// Rows S33.
#[test]
fn sigrule_two_signers_first_untrusted() {
    expect(&[("S33a", None, &[]), ("S33b", None, &[])]);
}

/// Rows S34.
#[test]
fn sigrule_two_signers_one_bad() {
    expect(&[
        ("S34a", None, &["bad-signature"]),
        ("S34b", None, &["bad-signature"]),
    ]);
}

/// Rows S35.
#[test]
fn sigrule_chain() {
    expect(&[
        ("S35a", None, &[]),
        ("S35b", None, &["untrusted-signer"]),
        ("S35c", None, &["bad-signature"]),
        ("S35d", None, &[]),
        ("S35e", None, &["bad-signature"]),
        ("S35f", None, &["untrusted-signer"]),
    ]);
}

/// Rows S36, S37.
#[test]
fn sigrule_key_size_type() {
    expect(&[
        ("S36a", None, &["unusable-key"]),
        ("S36c", None, &[]),
        // 6.1 has neither sha384/sha512 built in nor ECDSA; the digest is checked first.
        ("S36b", Some(Kernel::K61), &["unsupported-crypto"]),
        ("S37a", Some(Kernel::K61), &["unsupported-crypto"]),
        ("S36b", Some(Kernel::K612), &[]),
        ("S37a", Some(Kernel::K612), &[]),
        ("S37b", None, &["untrusted-signer"]),
    ]);
    // S37b is untrusted because the store cannot hold its RSA-512 certificate at all.
    for k in Kernel::ALL {
        let r = &judge(k).refused;
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].0, "rsa512");
        assert!(
            r[0].1.contains("RSA modulus of 512 bits is not supported"),
            "{r:?}"
        );
    }
}

/// Rows S38.
#[test]
fn sigrule_trust_sources() {
    expect(&[("S38", None, &[])]);
}

/// Rows S40: the case passes the gate until its SHA-256 (the whole file) is in the
/// kernel's `bin:` blacklist, which the init fills from UEFI `dbx` (and `MokListXRT` under
/// Secure Boot); then `hash-blacklisted`, as the kernel (`qemu/tests/signature_rules.rs`
/// boots both kernels with the same `dbx`).
#[test]
fn sigrule_hash_blacklist() {
    expect(&[("S40", None, &[])]);
    let mut checked = 0;
    for k in Kernel::ALL {
        let set = sigcases::set(k);
        let Some(c) = set.cases.iter().find(|c| c.id == "S40") else {
            continue;
        };
        let mut gate = judge(k).gate.clone();
        gate.policy.hash_blacklist = set.dbx_hashes();
        let raw = std::fs::read(&c.file).unwrap();
        let name = c.file.file_name().unwrap().to_string_lossy().into_owned();
        let v = gate.check(c.module, &name, &raw).0;
        assert_eq!(
            codes(&v),
            ["hash-blacklisted"],
            "{}: {}",
            k.label(),
            v.summary()
        );
        let hex: String = {
            use sha2::Digest;
            sha2::Sha256::digest(&raw)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        assert!(
            v.summary()
                .contains(&format!("Module hash {hex} is blacklisted")),
            "{}",
            v.summary()
        );
        checked += 1;
    }
    assert!(checked > 0);
}

/// Rows S41.
#[test]
fn sigrule_cert_blacklist() {
    expect(&[("S41a", None, &[]), ("S41b", None, &[])]);
}

/// Rows S42.
#[test]
fn sigrule_lockdown() {
    expect(&[
        ("S42a", None, &["unsigned"]),
        ("S42b", None, &["untrusted-signer"]),
        ("S42c", None, &[]),
    ]);
}

/// Rows S43.
#[test]
fn sigrule_valid_trusted() {
    expect(&[("S43a", None, &[]), ("S43b", None, &[])]);
}

/// Rows S44.
#[test]
fn sigrule_skid() {
    expect(&[("S44", None, &[])]);
}

/// Rows S45.
#[test]
fn sigrule_sha1() {
    expect(&[("S45", None, &[])]);
}

/// Rows V01.
#[test]
fn sigrule_elf_invalid() {
    expect(&[
        ("V01a", None, &["unreadable"]),
        ("V01b", None, &["unreadable"]),
    ]);
}

/// Rows V02.
#[test]
fn sigrule_no_symtab() {
    expect(&[("V02", None, &["unreadable"])]);
}

/// Rows V03.
#[test]
fn sigrule_this_module() {
    expect(&[("V03", None, &["unreadable"])]);
}

/// Rows V04.
#[test]
fn sigrule_dup_modinfo() {
    expect(&[
        ("V04", Some(Kernel::K61), &[]),
        ("V04", Some(Kernel::K612), &["unreadable"]),
    ]);
}

/// Rows V05.
#[test]
fn sigrule_module_blacklist_param() {
    expect(&[("V05", None, &["blacklisted"])]);
}

/// Rows V06.
#[test]
fn sigrule_layout_crc() {
    expect(&[("V06", None, &["crc"])]);
}

/// Rows V07.
#[test]
fn sigrule_layout_missing() {
    expect(&[("V07", None, &["no-symbol-version"])]);
}

/// Rows V08.
#[test]
fn sigrule_vermagic_missing() {
    expect(&[("V08", None, &["vermagic"])]);
}

/// Rows V09.
#[test]
fn sigrule_vermagic_mismatch() {
    expect(&[
        ("V09a", None, &["vermagic"]),
        ("V09b", None, &["no-versions", "vermagic"]),
    ]);
}

/// Rows V10.
#[test]
fn sigrule_vermagic_release() {
    expect(&[("V10", None, &[])]);
}

/// Rows V11.
#[test]
fn sigrule_no_versions() {
    expect(&[("V11", None, &["no-versions"])]);
}

/// Rows V12.
#[test]
fn sigrule_crc_mismatch() {
    expect(&[("V12", None, &["crc"])]);
}

/// Rows V13.
#[test]
fn sigrule_version_entry_missing() {
    expect(&[("V13", None, &["no-symbol-version"])]);
}

/// Rows V14.
#[test]
fn sigrule_version_entry_extra() {
    expect(&[("V14", None, &[])]);
}

/// Rows V15.
#[test]
fn sigrule_unknown_symbol() {
    expect(&[("V15", None, &["unknown-symbol"])]);
}

/// Rows V16.
#[test]
fn sigrule_gpl_only() {
    expect(&[("V16a", None, &[]), ("V16b", None, &["gpl-only-symbol"])]);
}

/// Rows V17.
#[test]
fn sigrule_namespace() {
    expect(&[("V17", None, &["namespace-not-imported"])]);
}

/// Rows V19.
#[test]
fn sigrule_dup_export() {
    expect(&[("V19", None, &[])]);
}

/// Rows V20.
#[test]
fn sigrule_no_modinfo() {
    expect(&[("V20", None, &["unreadable"])]);
}

/// Rows V22.
#[test]
fn sigrule_out_of_tree() {
    expect(&[("V22", None, &[])]);
}

/// Rows V24.
#[test]
fn sigrule_decompress() {
    expect(&[("V24", Some(Kernel::K612), &["unreadable"])]);
}

/// Row S39: the revocation list is compiled out of both kernels, so no module is judged
/// by it (the gate has no such list either).
#[test]
fn sigrule_revocation_list() {
    for k in Kernel::ALL {
        let root = &judge(k).set.root;
        let config = test_support::boot_file(root, "config-").unwrap();
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(
            text.lines()
                .any(|l| l == "# CONFIG_SYSTEM_REVOCATION_LIST is not set"),
            "{}",
            config.display()
        );
    }
}

/// Row V18: a GPL module (pcbc, using GPL-only exports) whose imports come from a
/// proprietary module. The kernel refuses it (`inherit_taint`); the gate's symbol table
/// does not record an exporter's licence, so it passes (GAP).
#[test]
fn sigrule_gpl_uses_proprietary() {
    for k in Kernel::ALL {
        let j = judge(k);
        let c = j.set.get("V16a");
        let mut gate = j.gate.clone();
        let table = gate.symvers.as_mut().unwrap();
        let moved: Vec<(String, u32)> = table
            .map
            .iter()
            .filter(|(_, e)| e.gpl)
            .map(|(n, e)| (n.clone(), e.crc))
            .collect();
        assert!(!moved.is_empty());
        for (n, crc) in moved {
            table.insert(&n, crc, "nvidia", false);
        }
        let raw = std::fs::read(&c.file).unwrap();
        let v = gate.check("pcbc", "pcbc.ko", &raw).0;
        assert!(v.pass, "{}: {}", k.label(), v.summary());
        assert_eq!(v.license.as_deref(), Some("GPL"));
    }
}

/// Row V21 (policy, no kernel rule): the file holds another module than the one asked
/// for.
#[test]
fn sigrule_name_policy() {
    for k in Kernel::ALL {
        let j = judge(k);
        let c = j.set.get("S43b");
        let raw = std::fs::read(&c.file).unwrap();
        let v = j.gate.check("crc9", "crc9.ko", &raw).0;
        assert_eq!(codes(&v), ["name"], "{}", v.summary());
        assert!(v.summary().contains("holds module crc8, not crc9"));
    }
}

/// Row V23 (policy, no kernel rule): the SHA-256 allowlist and the NVIDIA flavour.
#[test]
fn sigrule_flavour_sha256() {
    use validator::config::bom::Flavour;
    for k in Kernel::ALL {
        let j = judge(k);
        let c = j.set.get("S43b");
        let raw = std::fs::read(&c.file).unwrap();
        let mut gate = j.gate.clone();
        gate.policy.sha256.insert("crc8".into(), "00".repeat(32));
        let v = gate.check("crc8", "crc8.ko", &raw).0;
        assert_eq!(codes(&v), ["sha256"], "{}", v.summary());
        let mut gate = j.gate.clone();
        gate.policy.flavour = Some(Flavour::Proprietary);
        // The flavour is judged by the `nvidia` module's licence (crc8's is not NVIDIA).
        let v = gate.check("nvidia", "nvidia.ko", &raw).0;
        assert_eq!(codes(&v), ["flavour", "name"], "{}", v.summary());
        assert!(v
            .summary()
            .contains("is not the Proprietary flavour the BOM names"));
    }
}

/// The rows of the tables in `docs/SIGNATURE-RULES.md`: (ID, test name).
fn table_rows() -> Vec<(String, String)> {
    let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/SIGNATURE-RULES.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let mut rows = Vec::new();
    for l in text.lines() {
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        // `| ID | ... | Test |`: empty first and last cells around the row.
        let (Some(id), Some(test)) = (cells.get(1), cells.iter().rev().nth(1)) else {
            continue;
        };
        let is_id = id.len() == 3
            && (id.starts_with('S') || id.starts_with('V'))
            && id[1..].bytes().all(|b| b.is_ascii_digit());
        if !is_id {
            continue;
        }
        let name = test.trim_matches('`');
        assert!(
            test.starts_with('`') && test.ends_with('`') && !name.is_empty(),
            "row {id}: the Test column is not one `test_name`: {test:?}"
        );
        rows.push((id.to_string(), name.to_string()));
    }
    rows
}

/// `#[test] fn name()` in one of the two test files of the table.
fn test_exists(name: &str) -> bool {
    [
        "validator/tests/signature_rules.rs",
        "qemu/tests/signature_rules.rs",
    ]
    .iter()
    .any(|f| {
        let p = format!("{}/../{f}", env!("CARGO_MANIFEST_DIR"));
        let src = std::fs::read_to_string(p).unwrap();
        let lines: Vec<&str> = src.lines().map(str::trim).collect();
        lines.windows(2).any(|w| {
            w[0].starts_with("#[test]")
                && (w[1] == format!("fn {name}() {{") || w[1].starts_with(&format!("fn {name}() ")))
        })
    })
}

/// Every row of the table names a test that exists, every row ID is unique and in
/// order, and every case of `sigcases` belongs to a row of the table.
#[test]
fn the_table_names_only_tests_that_exist() {
    let rows = table_rows();
    assert!(rows.len() >= 69, "{} rows", rows.len());
    let ids: Vec<&str> = rows.iter().map(|(i, _)| i.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "duplicate row IDs");
    let missing: Vec<String> = rows
        .iter()
        .filter(|(_, t)| !test_exists(t))
        .map(|(i, t)| format!("{i}: {t}"))
        .collect();
    assert!(missing.is_empty(), "rows naming no test: {missing:?}");
    for k in Kernel::ALL {
        for c in &sigcases::set(k).cases {
            assert!(
                ids.contains(&c.row),
                "case {} names row {} not in the table",
                c.id,
                c.row
            );
        }
    }
}

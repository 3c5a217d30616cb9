//! The gate's verdict on every case of `docs/SIGNATURE-RULES.md`: one test per row, named in
//! the table's Test column, over the module files the `sigcases` crate builds from the
//! provisioned Debian 6.1 and 6.12 modules. The same files go to the real kernels in
//! `qemu/tests/signature_rules.rs`. `the_table_names_only_tests_that_exist` keeps the
//! table and the tests together.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::sync::OnceLock;

use sigcases::{Case, Kernel, Set};
use validator::config::bom::VermagicMode;
use validator::formats::vmlinuz::KernelFacts;
use validator::stages::modules::gate::{Gate, Policy, Verdict};
use validator::trust::TrustStore;

/// The gate for one kernel, as the init builds it but in kernel mode: the kernel's
/// vermagic and exports, its built-in certificate plus every test certificate the
/// kernel gets in UEFI db that the trust store can load.
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
        let vmlinuz = std::fs::read_dir(set.root.join("boot"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("vmlinuz-")
            })
            .unwrap();
        let facts = KernelFacts::from_image(&std::fs::read(vmlinuz).unwrap()).unwrap();
        let mut trust = TrustStore::new();
        for c in &facts.certs {
            trust.add_bytes(c, "kernel").unwrap();
        }
        let mut refused = Vec::new();
        for key in sigcases::keys().db_certs() {
            if let Err(e) = trust.add_bytes(&key.cert_der(), key.name) {
                refused.push((key.name, e.to_string()));
            }
        }
        let gate = Gate {
            trust,
            symvers: Some(facts.symvers()),
            policy: Policy {
                release: Some(facts.release.clone()),
                kernel_vermagic: facts.vermagic.clone(),
                mode: VermagicMode::Kernel,
                require_signature: true,
                unknown_symbols_fatal: true,
                ..Policy::default()
            },
        };
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

#[test]
fn dump() {
    let mut out = String::new();
    for k in Kernel::ALL {
        let j = judge(k);
        out.push_str(&format!("=== {} refused {:?}\n", k.label(), j.refused));
        for c in &j.set.cases {
            let v = verdict(k, c);
            out.push_str(&format!("{} {:?} {}\n", c.id, codes(&v), v.summary()));
        }
    }
    std::fs::write("/tmp/wt12s/gate-dump.txt", out).unwrap();
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

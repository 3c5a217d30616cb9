//! The kernel as the judge of module signatures (`docs/SIGNATURE-RULES.md`): every case
//! of the `sigcases` crate handed to the real Debian 6.1 and 6.12 kernels, one OVMF boot
//! each (`qemu::sigrules`: without enforcement, under `lockdown=integrity`, then with
//! `sig_enforce` on), no gate in between. Each test checks the kernel's answer (errno or
//! load with taint, and its log line) against the table's, and that the gate's verdict on
//! the same file agrees with the enforcing kernel on every row but the documented
//! disagreements, which must still disagree (a fixed gap fails the test until the table
//! and [`DISAGREE`] say so).
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use qemu::sigrules::{self, Mode};
use sigcases::Kernel;
use validator::trust::TrustStore;

/// The errno of an RSA signature whose bytes were changed, checked outside the trust
/// lookup (against an embedded certificate): the crypto layer's own, and it depends on the
/// value the changed signature decrypts to. A leading byte that is not zero is EINVAL
/// (pkcs1pad on 6.1, rsassa-pkcs1 on 6.12: "no leading 0 byte"), a zero one followed by
/// anything but 0x01 EBADMSG; with fresh keys each run the second happens now and then
/// (seen once on 6.12 for S34a). Both are a refusal; `|` separates the answers a row
/// takes.
const GARBLED: &str = "EINVAL|EBADMSG";

/// The kernel's answer per case: id, without enforcement, with enforcement (lockdown for
/// the S42 cases, which run only there), and a line the enforcing (or lockdown) load logs
/// (`""`: none expected). `ok E` is a load with taint E, `ok -` one without taint.
/// Answers that differ on 6.12 are in [`ON_612`].
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    (
        "S01",
        "ok E",
        "EKEYREJECTED",
        "Loading of unsigned module is rejected",
    ),
    (
        "S02",
        "ok EF",
        "EKEYREJECTED",
        "Loading of unsigned module is rejected",
    ),
    ("S03a", "EBADMSG", "EBADMSG", ""),
    ("S03b", "EBADMSG", "EBADMSG", ""),
    ("S04a", "EBADMSG", "EBADMSG", ""),
    ("S04b", "EBADMSG", "EBADMSG", ""),
    ("S05", "EBADMSG", "EBADMSG", ""),
    (
        "S06",
        "ok E",
        "EKEYREJECTED",
        "not signed with expected PKCS#7 message",
    ),
    (
        "S07",
        "ok E",
        "EKEYREJECTED",
        "not signed with expected PKCS#7 message",
    ),
    (
        "S08a",
        "EBADMSG",
        "EBADMSG",
        "PKCS#7 signature info has unexpected non-zero params",
    ),
    (
        "S08b",
        "EBADMSG",
        "EBADMSG",
        "PKCS#7 signature info has unexpected non-zero params",
    ),
    ("S09", "EMSGSIZE", "EMSGSIZE", ""),
    ("S10a", "EBADMSG", "EBADMSG", ""),
    ("S10b", "EBADMSG", "EBADMSG", ""),
    ("S11", "ok -", "ok -", ""),
    ("S12", "ok -", "ok -", ""),
    (
        "S13",
        "EINVAL",
        "EINVAL",
        "PKCS7: Unknown OID: [6] 1.2.840.113549.1.7.3",
    ),
    (
        "S14",
        "EINVAL",
        "EINVAL",
        "PKCS7: Unsupported SignedData version",
    ),
    (
        "S15",
        "EINVAL",
        "EINVAL",
        "PKCS7: Unsupported SignerInfo version",
    ),
    (
        "S16",
        "EBADMSG",
        "EBADMSG",
        "PKCS7: SignedData-SignerInfo version mismatch",
    ),
    ("S17", "EINVAL", "EINVAL", ""),
    ("S18", "EBADMSG", "EBADMSG", "PKCS7: Data already supplied"),
    ("S19a", "EINVAL", "EINVAL", "PKCS7: Unsupported data type"),
    (
        "S19b",
        "EBADMSG",
        "EBADMSG",
        "PKCS7: Authenticode requires AuthAttrs",
    ),
    ("S20a", "EBADMSG", "EBADMSG", ""),
    (
        "S20b",
        "EINVAL",
        "EINVAL",
        "PKCS7: Inconsistently supplied authAttrs",
    ),
    (
        "S21",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "PKCS7: Invalid module sig (has authattrs)",
    ),
    (
        "S21b",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "PKCS7: S/MIME Caps only allowed with Authenticode",
    ),
    (
        "S21c",
        "EBADMSG",
        "EBADMSG",
        "PKCS7: Missing required AuthAttr",
    ),
    (
        "S21d",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "PKCS7: Repeated/multivalue AuthAttrs not permitted",
    ),
    ("S22", "ok E", "EKEYREJECTED", "PKCS7: Unknown OID"),
    (
        "S23a",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unsupported crypto is rejected",
    ),
    (
        "S23b",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unsupported crypto is rejected",
    ),
    ("S24", "ok -", "ok -", ""),
    ("S25a", "ok E", "EKEYREJECTED", "Unsupported pkey algo"),
    (
        "S25b",
        "ok E",
        "EKEYREJECTED",
        "PKCS7: Unknown OID: [182] 1.2.840.113549.1.1.10",
    ),
    ("S25c", "ok E", "EKEYREJECTED", "Unsupported pkey algo"),
    (
        "S26",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    ("S27a", "EBADMSG", "EBADMSG", ""),
    ("S27b", "ok -", "ok -", ""),
    ("S27c", "ok -", "ok -", ""),
    (
        "S28a",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unsupported crypto is rejected",
    ),
    ("S28b", "EBADMSG", "EBADMSG", ""),
    ("S28c", GARBLED, GARBLED, ""),
    ("S28d", "EINVAL", "EINVAL", ""),
    ("S28e", "ENOENT", "ENOENT", ""),
    ("S28f", "EINVAL", "EINVAL", ""),
    ("S28g", "EINVAL", "EINVAL", ""),
    ("S28h", "EBADMSG", "EBADMSG", ""),
    ("S29a", "EKEYREJECTED", "EKEYREJECTED", ""),
    ("S29b", "EKEYREJECTED", "EKEYREJECTED", ""),
    (
        "S30",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    (
        "S31",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    ("S32", "EKEYREJECTED", "EKEYREJECTED", ""),
    ("S33a", "ok -", "ok -", ""),
    ("S33b", "ok -", "ok -", ""),
    ("S34a", GARBLED, GARBLED, ""),
    ("S34b", "EKEYREJECTED", "EKEYREJECTED", ""),
    ("S35a", "ok -", "ok -", ""),
    ("S35c", "EKEYREJECTED", "EKEYREJECTED", ""),
    ("S35d", "ok -", "ok -", ""),
    ("S35e", GARBLED, GARBLED, ""),
    (
        "S35b",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    (
        "S35f",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    (
        "S36a",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    (
        "S36b",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unsupported crypto is rejected",
    ),
    ("S36c", "ok -", "ok -", ""),
    (
        "S37a",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unsupported crypto is rejected",
    ),
    ("S37b", "ok -", "ok -", ""),
    (
        "S38",
        "ok E",
        "EKEYREJECTED",
        "Loading of module with unavailable key is rejected",
    ),
    ("S40", "EKEYREJECTED", "EKEYREJECTED", "is blacklisted"),
    ("S41a", "ok -", "ok -", ""),
    ("S41b", "ok -", "ok -", ""),
    ("S42a", "", "EPERM", "unsigned module loading is restricted"),
    ("S42b", "", "EPERM", "unsigned module loading is restricted"),
    ("S42c", "", "ok -", ""),
    ("S43a", "ok -", "ok -", ""),
    ("S43b", "ok -", "ok -", ""),
    ("S44", "ok -", "ok -", ""),
    ("S45", "ok -", "ok -", ""),
    (
        "V01a",
        "ENOEXEC",
        "ENOEXEC",
        "Invalid architecture in ELF header: 183",
    ),
    (
        "V01b",
        "ENOEXEC",
        "ENOEXEC",
        "Invalid ELF section header overflow",
    ),
    ("V02", "ENOEXEC", "ENOEXEC", ""),
    ("V03", "ENOEXEC", "ENOEXEC", ""),
    ("V04", "ok -", "ok -", ""),
    ("V05", "EPERM", "EPERM", "Module crc7 is blacklisted"),
    (
        "V06",
        "ENOEXEC",
        "ENOEXEC",
        "disagrees about version of symbol module_layout",
    ),
    (
        "V07",
        "ENOEXEC",
        "ENOEXEC",
        "no symbol version for module_layout",
    ),
    ("V08", "ok F", "ok F", ""),
    ("V09a", "ENOEXEC", "ENOEXEC", "version magic"),
    ("V09b", "ENOEXEC", "ENOEXEC", "version magic"),
    ("V10", "ok -", "ok -", ""),
    ("V11", "ok F", "ok F", ""),
    (
        "V12",
        "EINVAL",
        "EINVAL",
        "disagrees about version of symbol __x86_return_thunk",
    ),
    (
        "V13",
        "EINVAL",
        "EINVAL",
        "no symbol version for __x86_return_thunk",
    ),
    ("V14", "ok -", "ok -", ""),
    (
        "V15",
        "ENOENT",
        "ENOENT",
        "Unknown symbol __x86_return_thunX (err -2)",
    ),
    ("V16a", "ok -", "ok -", ""),
    ("V16b", "ENOENT", "ENOENT", "Unknown symbol"),
    (
        "V17",
        "EINVAL",
        "EINVAL",
        "from namespace CRYPTO_INTERNAL, but does not import it",
    ),
    (
        "V19",
        "ENOEXEC",
        "ENOEXEC",
        "exports duplicate symbol crc8 (owned by crc8)",
    ),
    ("V20", "ok FOP", "ok FOP", ""),
    ("V22", "ok O", "ok O", ""),
];

/// Where 6.12 answers otherwise (same columns).
const ON_612: &[(&str, &str, &str, &str)] = &[
    // sha512 is built in on 6.12.
    ("S23a", "ok -", "ok -", ""),
    ("S23b", "ok -", "ok -", ""),
    // 6.12 uses the digestAlgorithm and ignores the OID's hash; P-384 and P-521 load.
    ("S26", "ok -", "ok -", ""),
    ("S36b", "ok -", "ok -", ""),
    ("S28e", "ok -", "ok -", ""),
    ("S37a", "ok -", "ok -", ""),
    (
        "V04",
        "ENOEXEC",
        "ENOEXEC",
        "Only one .modinfo section must exist.",
    ),
    ("V24", "EINVAL", "EINVAL", ""),
];

/// Cases where the gate's verdict differs from the enforcing kernel's, by design or as a
/// known gap (the table's Verdict column): `true` where the gate passes what the kernel
/// refuses (GAP), `false` where it refuses what the kernel loads (STRICTER); the kernel
/// (`None`: both).
const DISAGREE: &[(&str, bool, Option<Kernel>)] = &[
    // The file is well signed; the kernel ignores the signature when asked to ignore
    // vermagic. The init never passes that flag (`sys::finit_module`).
    ("S02", true, None),
    ("S11", false, None),
    ("S12", false, None),
    ("S24", false, None),
    ("S26", false, Some(Kernel::K612)),
    ("S37b", false, None),
    ("S38", true, None),
    ("V08", false, None),
    ("V11", false, None),
    ("V19", true, None),
    ("V20", false, None),
];

/// The kernel's dm-verity answer per root-hash case (`sigcases::roothash`): id, on 6.1,
/// on 6.12, a line its refusal logs (`""`: none expected), and whether our
/// `root-verity-sig` check takes it (the judge's `db` certificates trusted, the signer
/// named `snake`). Debian's 6.1 lets dm-verity use its built-in and secondary keyrings
/// only (ENOKEY for a `db` signer: the signature passed every check before the trust
/// search); 6.12 the platform keyring too (`ok`).
const ROOTHASH: &[(&str, &str, &str, &str, bool)] = &[
    ("R01", "ENOKEY", "ok", "", true),
    ("R02", "ENOKEY", "ok", "", true),
    (
        "R03",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "Message signed outside of X.509 validity window",
        false,
    ),
    (
        "R04",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "Message signed outside of X.509 validity window",
        false,
    ),
    ("R05", "ENOKEY", "ok", "", true),
    (
        "R06",
        "EKEYREJECTED",
        "EKEYREJECTED",
        "S/MIME Caps only allowed with Authenticode",
        false,
    ),
    ("R07", "ENOKEY", "ok", "", true),
    ("R08", "EBADMSG", "EBADMSG", "", false),
];

/// The root-hash pass of `boot` against [`ROOTHASH`], and our verdict on each case
/// against the kernel's: a refusal before the trust search (anything but `ok` and
/// ENOKEY) is ours too, and what the kernel takes (`ok`) we take. Returns the failures
/// and a table of the answers.
fn judge_root_hashes(
    k: Kernel,
    boot: &sigrules::Boot,
    store: &TrustStore,
) -> (Vec<String>, String) {
    let root = boot.root.as_ref().unwrap();
    let (mut failures, mut table) = (Vec::new(), String::new());
    for c in &root.cases {
        let (id, on61, on612, line, ours) = *ROOTHASH
            .iter()
            .find(|e| e.0 == c.id)
            .unwrap_or_else(|| panic!("no expected answer for {}", c.id));
        let want = if k == Kernel::K612 { on612 } else { on61 };
        let Some(got) = boot.roothash.get(id) else {
            failures.push(format!(
                "{id}: no answer (set-up: {:?})",
                boot.roothash_setup
            ));
            continue;
        };
        let verdict = root.verdict(c, store);
        table.push_str(&format!(
            "{id} ({}): kernel {} | ours {verdict:?}\n",
            c.what, got.result
        ));
        if got.result != want {
            failures.push(format!(
                "{id}: kernel {} but the table says {want}",
                got.result
            ));
        }
        if !line.is_empty() && !got.logged(line) {
            failures.push(format!("{id}: no log line {line:?} in {:?}", got.log));
        }
        if verdict.is_ok() != ours {
            failures.push(format!("{id}: ours {verdict:?} but the table says {ours}"));
        }
        let kernel_refuses = got.result != "ok" && got.result != "ENOKEY";
        if kernel_refuses == verdict.is_ok() {
            failures.push(format!("{id}: kernel {}, ours {verdict:?}", got.result));
        }
    }
    (failures, table)
}

/// Whether the kernel's answer `got` is one the table's `want` allows (`A|B`: either).
fn fits(got: &str, want: &str) -> bool {
    want.split('|').any(|w| w == got)
}

/// `ok taint=E` as the table writes it: `ok E`; no taint: `ok -`.
fn short(a: &sigrules::Answer) -> String {
    if !a.loaded() {
        return a.result.clone();
    }
    let mut t: Vec<char> = a.taint.as_deref().unwrap_or("").chars().collect();
    t.sort_unstable();
    let t: String = t.into_iter().collect();
    format!(
        "ok {}",
        if t.is_empty() || a.taint.as_deref() == Some("none") {
            "-".into()
        } else {
            t
        }
    )
}

fn judge(k: Kernel) {
    let set = sigcases::set(k);
    let (gate, refused) = sigrules::gate(set).unwrap();
    let boot = sigrules::boot(set).unwrap();
    assert!(
        boot.ended,
        "{}: the script did not finish: {}",
        k.label(),
        boot.outcome.describe()
    );
    assert!(boot.rmmod_failed.is_empty(), "{:?}", boot.rmmod_failed);
    // The setting each pass ran in, as the kernel reports it.
    let state = boot.state.join(" | ");
    for want in [
        "noenforce sig_enforce=N lockdown=[none]",
        "lockdown sig_enforce=N lockdown=none [integrity]",
        "enforce sig_enforce=Y lockdown=none [integrity]",
    ] {
        assert!(state.contains(want), "{}: {state}", k.label());
    }
    // Secure Boot off, the test keys in .platform.
    assert!(boot
        .boot_log
        .iter()
        .any(|l| l.contains("Secure boot disabled")));
    assert!(boot
        .boot_log
        .iter()
        .any(|l| l.contains("Loaded X.509 cert 'SnakeOil")));
    let mut failures = Vec::new();
    let mut table = String::new();
    for c in &set.cases {
        let exp = ON_612
            .iter()
            .filter(|_| k == Kernel::K612)
            .chain(EXPECTED)
            .find(|e| e.0 == c.id)
            .unwrap_or_else(|| panic!("{}: no expected answer for {}", k.label(), c.id));
        let (id, no_enf, enf, line) = *exp;
        let enf_mode = if c.lockdown {
            Mode::Lockdown
        } else {
            Mode::Enforce
        };
        let got_enf = boot.answer(enf_mode, id);
        let got_no = boot.answer(Mode::NoEnforce, id);
        let v = sigrules::verdict(&gate, c).unwrap();
        let gs = if v.pass {
            "passes".to_string()
        } else {
            v.summary()
        };
        let Some(ge) = got_enf else {
            failures.push(format!("{id}: no answer in {enf_mode:?}"));
            continue;
        };
        table.push_str(&format!(
            "{id}: kernel no-enf {} / {} {} | gate {gs}\n",
            got_no.map(short).unwrap_or_default(),
            enf_mode.label(),
            short(ge)
        ));
        if !fits(&short(ge), enf) {
            failures.push(format!(
                "{id} {}: kernel {} but the table says {enf}",
                enf_mode.label(),
                short(ge)
            ));
        }
        if !line.is_empty() && !ge.logged(line) {
            failures.push(format!("{id}: no log line {line:?} in {:?}", ge.log));
        }
        if !c.lockdown {
            match got_no {
                Some(a) if fits(&short(a), no_enf) => {}
                Some(a) => failures.push(format!(
                    "{id} noenforce: kernel {} but the table says {no_enf}",
                    short(a)
                )),
                None => failures.push(format!("{id}: no answer without enforcement")),
            }
        }
        // The gate against the enforcing kernel.
        let kernel_refuses = !ge.loaded();
        let disagree = DISAGREE
            .iter()
            .find(|d| d.0 == id && d.2.is_none_or(|o| o == k))
            .map(|d| d.1);
        match (kernel_refuses, v.pass, disagree) {
            (true, false, None) | (false, true, None) => {}
            (true, true, Some(true)) | (false, false, Some(false)) => {}
            _ => failures.push(format!(
                "{id}: kernel {} ({}), gate {gs}; the documented disagreement is {disagree:?}",
                short(ge),
                enf_mode.label()
            )),
        }
    }
    let (root_failures, root_table) = judge_root_hashes(k, &boot, &gate.trust);
    failures.extend(root_failures);
    eprintln!(
        "{} (db certificates the gate refused: {refused:?}):\n{table}root-hash signatures, \
         dm-verity:\n{root_table}",
        k.label()
    );
    assert!(
        failures.is_empty(),
        "{}:\n{}",
        k.label(),
        failures.join("\n")
    );
}

/// The same cases with Secure Boot on (OVMF's snakeoil keys, `db` the test keys and
/// Debian's Secure Boot CA, so OVMF starts Debian's signed kernel): the kernel is locked
/// down from the start, so every pass enforces; its verdict on each case, the ones whose
/// verdict depends on trust (`db` keys in the platform keyring, untrusted and revoked
/// signers) included, equals the gate's (or the documented disagreement).
#[test]
fn kernel_6_1_agrees_with_the_gate_under_secure_boot() {
    let k = Kernel::K61;
    let set = sigcases::set(k);
    let (gate, _) = sigrules::gate(set).unwrap();
    let boot = sigrules::boot_with(set, true).unwrap();
    assert!(boot.ended, "{}", boot.outcome.describe());
    for want in [
        "Secure boot enabled",
        "Kernel is locked down from EFI Secure Boot",
    ] {
        assert!(
            boot.outcome.console.contains(want),
            "{want}: {}",
            boot.outcome.describe()
        );
    }
    let mut failures = Vec::new();
    let mut compared = 0;
    for c in &set.cases {
        let mode = if c.lockdown {
            Mode::Lockdown
        } else {
            Mode::Enforce
        };
        let Some(ge) = boot.answer(mode, &c.id) else {
            failures.push(format!("{}: no answer in {mode:?}", c.id));
            continue;
        };
        let v = sigrules::verdict(&gate, c).unwrap();
        let disagree = DISAGREE
            .iter()
            .find(|d| d.0 == c.id && d.2.is_none_or(|o| o == k))
            .map(|d| d.1);
        compared += 1;
        match (!ge.loaded(), v.pass, disagree) {
            (true, false, None) | (false, true, None) => {}
            (true, true, Some(true)) | (false, false, Some(false)) => {}
            _ => failures.push(format!(
                "{}: kernel {} under Secure Boot, gate {}; documented disagreement {disagree:?}",
                c.id,
                short(ge),
                if v.pass {
                    "passes".to_string()
                } else {
                    v.summary()
                }
            )),
        }
    }
    assert_eq!(compared, set.cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kernel_6_1_judges_every_case_as_the_table_says() {
    judge(Kernel::K61);
}

#[test]
fn kernel_6_12_judges_every_case_as_the_table_says() {
    judge(Kernel::K612);
}

//! Attestation costs, each against a reference measured in the same run:
//! - the verifier's throughput on one core (`verify_report` on the evidence of a real
//!   boot, `tests/fixtures/attest/`) against `tpm2_checkquote` on the same quote (which
//!   checks only the signature and the nonce, one process per quote);
//! - the quote the init makes at the end of a boot (CreatePrimary of the AK, Quote,
//!   FlushContext) on a swtpm over TCP, ECC P-256 and RSA 2048, against tpm2-tools making
//!   the same primary key and quote (`tpm2_createprimary -C e`, `tpm2_quote`,
//!   `tpm2_flushcontext`) on the same swtpm.
//!
//! `cargo bench -p validator --bench attest -- [RUNS]` (default 200; `scripts/bench
//! attest`). Needs swtpm and tpm2-tools. Not a test.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "benchmark code: a failed setup step should stop the run loudly"
)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use test_support::swtpm;

use base64::Engine as _;
use validator::attest::reference::Reference;
use validator::attest::verify::{verify_report, Policy};
use validator::formats::tpm::attest::{ak_template, parse_selection, KeyKind, Public};
use validator::sys::tpm::{TcpTransport, Tpm, RH_ENDORSEMENT};
use validator::util::as_f64;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/attest")
            .join(name),
    )
    .unwrap()
}

fn tool(addr: SocketAddr, dir: &Path, args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .current_dir(dir)
        .env(
            "TPM2TOOLS_TCTI",
            format!("swtpm:host=127.0.0.1,port={}", addr.port()),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runs: usize = test_support::bench::count_arg(200);
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-attest");
    std::fs::create_dir_all(&dir).unwrap();

    // The verifier, one core.
    let ak = Public::parse_2b(&fixture("ak.pub")).unwrap();
    let reference =
        Reference::parse(&String::from_utf8(fixture("reference.json")).unwrap()).unwrap();
    let report = fixture("report.json");
    let log = fixture("tpm-eventlog.bin");
    let policy = Policy::default();
    let t = Instant::now();
    for _ in 0..runs {
        verify_report(
            &ak,
            std::slice::from_ref(&reference),
            &report,
            &log,
            &policy,
        )
        .unwrap();
    }
    let ours = as_f64(runs as u64) / t.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_slice(&report).unwrap();
    let q = &v["attestation"]["quote"];
    let b64 = |f: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(q[f].as_str().unwrap())
            .unwrap()
    };
    std::fs::write(dir.join("ak.pub"), ak.to_2b()).unwrap();
    std::fs::write(dir.join("q.msg"), b64("attest")).unwrap();
    std::fs::write(dir.join("q.sig"), b64("signature")).unwrap();
    let qual = validator::util::hex(&validator::report::json::quoted_digest_of(&v));
    let n_ref = runs.min(50);
    let t = Instant::now();
    for _ in 0..n_ref {
        let out = Command::new("tpm2_checkquote")
            .current_dir(&dir)
            .args([
                "-u", "ak.pub", "-m", "q.msg", "-s", "q.sig", "-g", "sha256", "-q", &qual,
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let theirs = as_f64(n_ref as u64) / t.elapsed().as_secs_f64();
    println!("verifier, one core, the evidence of a real boot (report {} B, log {} B, {} reference events):", report.len(), log.len(), reference.slots[0].events.len());
    println!(
        "  validator verify_report (everything)   {ours:>9.0} reports/s   {:>8.1} us each",
        1e6 / ours
    );
    println!(
        "  tpm2_checkquote (signature + nonce)    {theirs:>9.0} quotes/s    {:>8.1} us each",
        1e6 / theirs
    );
    println!(
        "  ratio ours/tpm2_checkquote             {:>9.2}",
        ours / theirs
    );

    // The quote at the end of a boot, on a swtpm.
    let sel = parse_selection("sha256:0,1,2,3,4,5,6,7,8,9,11,13,14").unwrap();
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    std::fs::create_dir_all(&state).unwrap();
    swtpm::setup_state(&state, "sha256");
    let s = swtpm::Swtpm::start(&state, "not-need-init,startup-clear");
    let addr = s.addr();
    let quote_runs = runs.min(50);
    println!("quote on swtpm (TCP), {quote_runs} runs, median:");
    for kind in [KeyKind::EccP256, KeyKind::Rsa2048] {
        let mut tpm = Tpm::new(TcpTransport::connect(addr, Duration::from_secs(10)).unwrap());
        let mut ms = Vec::new();
        let mut cmds = 0;
        for _ in 0..quote_runs {
            let before = tpm.stats().commands;
            let t = Instant::now();
            let key = tpm
                .create_primary(RH_ENDORSEMENT, &ak_template(kind))
                .unwrap();
            tpm.quote(key.handle, b"nonce", &sel).unwrap();
            tpm.flush_context(key.handle).unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            cmds = tpm.stats().commands - before;
        }
        drop(tpm);
        let ours = median(ms);
        // tpm2-tools: the same primary key (tpm2_createprimary's ecc/rsa defaults with
        // our attributes and scheme), a quote, a flush; one process each.
        let (alg, scheme) = match kind {
            KeyKind::EccP256 => ("ecc256:ecdsa-sha256:null", "ecdsa"),
            KeyKind::Rsa2048 => ("rsa2048:rsassa-sha256:null", "rsassa"),
        };
        let _ = scheme;
        let mut ms = Vec::new();
        for _ in 0..quote_runs.min(20) {
            let t = Instant::now();
            tool(
                addr,
                &dir,
                &[
                    "tpm2_createprimary",
                    "-C",
                    "e",
                    "-g",
                    "sha256",
                    "-G",
                    alg,
                    "-a",
                    "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign",
                    "-c",
                    "ak.ctx",
                ],
            );
            tool(
                addr,
                &dir,
                &[
                    "tpm2_quote",
                    "-c",
                    "ak.ctx",
                    "-l",
                    "sha256:0,1,2,3,4,5,6,7,8,9,11,13,14",
                    "-q",
                    "6e6f6e6365",
                    "-m",
                    "t.msg",
                    "-s",
                    "t.sig",
                ],
            );
            tool(addr, &dir, &["tpm2_flushcontext", "-t"]);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let theirs = median(ms);
        println!(
            "  {:<4} AK: ours {ours:>7.2} ms ({cmds} commands)   tpm2-tools {theirs:>7.2} ms   ratio ours/tpm2-tools {:.2}",
            kind.name(),
            ours / theirs
        );
    }
}

//! Full verity check of a 1 GiB image: ours on one thread and on all threads against
//! `veritysetup verify` and the machine's single-core SHA-256, in the same run.
//!
//! `cargo bench -p validator --bench verity -- [SIZE_MIB]` (default 1024). Not a test.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "benchmark code: a failed setup step should stop the run loudly"
)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;
use validator::util::as_f64;

use sha2::Digest;
use validator::formats::verity::{superblock, tree};

fn main() {
    let mib: usize = test_support::bench::count_arg(1024);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-verity");
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("data.img");
    let hash = dir.join("hash.img");
    // Non-repeating content, written once.
    if std::fs::metadata(&data).map(|m| m.len()).unwrap_or(0) != (mib as u64) << 20 {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&data).unwrap());
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for c in block.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes());
            }
            f.write_all(&block).unwrap();
        }
    }
    let out = Command::new("veritysetup")
        .arg("format")
        .arg(&data)
        .arg(&hash)
        .output()
        .expect("veritysetup");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let root = text
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .unwrap()
        .trim()
        .to_string();
    let gb = as_f64(mib as u64) * 1048576.0 / 1e9;
    // Warm the page cache, and measure single-core SHA-256 over the same bytes.
    let bytes = std::fs::read(&data).unwrap();
    let t = Instant::now();
    let mut acc = 0u8;
    for b in bytes.chunks(4096) {
        acc ^= sha2::Sha256::digest(b)[0];
    }
    let sha = gb / t.elapsed().as_secs_f64();
    drop(bytes);
    let best = |f: &mut dyn FnMut() -> f64| (0..3).map(|_| f()).fold(f64::MAX, f64::min);
    let vs = best(&mut || {
        let t = Instant::now();
        let st = Command::new("veritysetup")
            .arg("verify")
            .arg(&data)
            .arg(&hash)
            .arg(&root)
            .status()
            .unwrap();
        assert!(st.success());
        t.elapsed().as_secs_f64()
    });
    let df = std::fs::File::open(&data).unwrap();
    let hf = std::fs::File::open(&hash).unwrap();
    let dsize = df.metadata().unwrap().len();
    let hsize = hf.metadata().unwrap().len();
    let mut sb = vec![0u8; 512];
    std::os::unix::fs::FileExt::read_exact_at(&hf, &mut sb, 0).unwrap();
    let p = superblock::parse(&sb).unwrap();
    let g = tree::Geometry::new(&p, 0, true).unwrap();
    let rootb = validator::util::unhex(&root).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("verity check of {mib} MiB (sha256, 4096-byte blocks), {cores} cores   [{acc}]");
    println!(
        "sha256 of 4 KiB blocks, 1 core:   {sha:>6.2} GB/s  ({:.2}x veritysetup)",
        sha / (gb / vs)
    );
    println!(
        "veritysetup verify:               {:>6.2} GB/s  (1.00)  {vs:.2} s",
        gb / vs
    );
    for threads in [1, cores] {
        let s = best(&mut || {
            let t = Instant::now();
            let v = tree::verify(&df, dsize, &hf, hsize, &g, &rootb, threads).unwrap();
            assert!(v.ok);
            t.elapsed().as_secs_f64()
        });
        println!(
            "validator verity verify, {threads} thr:  {:>6.2} GB/s  ({:.2}x)  {s:.2} s",
            gb / s,
            vs / s
        );
    }
}

//! `scripts/bench modules` gives the kernel tree relative to the repository root, while
//! cargo runs benchmarks (and this test) in `validator/`: the benchmark's argument must
//! still find the tree.

use test_support::bench as bench_common;

#[test]
fn bench_paths_resolve_from_the_repository_root() {
    // This test runs where cargo runs benchmarks: the package directory.
    let cwd = std::env::current_dir().unwrap();
    assert!(cwd.ends_with("validator"), "{}", cwd.display());
    assert!(!std::path::Path::new("target/kernels/default").exists());
    let k = bench_common::kernel_dir(Some("target/kernels/default"));
    assert!(k.join("boot").is_dir(), "{}", k.display());
    assert_eq!(bench_common::kernel_dir(None), k);
    // An existing or absolute path is taken as given.
    let abs = k.canonicalize().unwrap();
    assert_eq!(bench_common::path_arg(abs.to_str().unwrap()), abs);
    assert_eq!(
        bench_common::path_arg("src"),
        std::path::PathBuf::from("src")
    );
}

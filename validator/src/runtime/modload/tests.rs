//! The load plan's order, softdeps and skipping, and the limits on reading module
//! files.
use super::schedule::critical_path;
use super::*;
use crate::formats::kmod::index::{Entry, SoftDeps};
use crate::gate::batch::MODULE_FILE_MAX;

fn idx() -> Index {
    let mut i = Index::default();
    let mut add = |n: &str, deps: &[&str]| {
        i.entries.insert(
            n.into(),
            Entry {
                path: format!("kernel/{n}.ko"),
                deps: deps.iter().map(|s| s.to_string()).collect(),
            },
        );
    };
    add("ext4", &["jbd2", "mbcache", "crc16"]);
    add("jbd2", &[]);
    add("mbcache", &[]);
    add("crc16", &[]);
    add("crc32c_generic", &[]);
    i.softdeps.insert(
        "jbd2".into(),
        SoftDeps {
            pre: vec![],
            post: vec!["crc32c_generic".into(), "never_reached".into()],
        },
    );
    i.softdeps.insert(
        "ext4".into(),
        SoftDeps {
            pre: vec!["crc32c_generic".into(), "crc32c".into()],
            post: vec![],
        },
    );
    i.builtin.insert("crc16".into());
    i
}

/// The digests the kernel lists in `<proc>/crypto` reach the gate's
/// `module_digests` only when the gate's kernel lacks them built in, and only when
/// the list says so (an unreadable list adds nothing).
#[test]
fn digests_the_kernel_gained_from_proc_crypto() {
    use crate::trust::HashAlg;
    let tmp = std::env::temp_dir().join(format!("vld-crypto-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut l = Loader::new(&tmp, Index::default(), &tmp.join("sys"));
    let mut gate = Gate::default();
    gate.policy.release = Some("6.1.0-57-amd64".into());
    // No procfs root, or no crypto file: nothing learnt.
    assert!(!l.kernel_gained_digests(&gate));
    l.proc_root = Some(tmp.clone());
    assert!(!l.kernel_gained_digests(&gate));
    std::fs::write(
        tmp.join("crypto"),
        "name : sha256
type : shash
selftest : passed
",
    )
    .unwrap();
    assert!(!l.kernel_gained_digests(&gate));
    std::fs::write(
        tmp.join("crypto"),
        "name : sha512
driver : sha512-generic
module : sha512_generic
         selftest : passed
type : shash

name : sha384
type : shash
         selftest : passed
",
    )
    .unwrap();
    assert!(l.kernel_gained_digests(&gate));
    let d = &gate.policy.module_digests;
    assert!(d.has(HashAlg::Sha512) && d.has(HashAlg::Sha384));
    // Known now: the list is not read again.
    assert!(!l.kernel_gained_digests(&gate));
    // 6.12 has them built in: nothing to learn.
    let mut g612 = Gate::default();
    g612.policy.release = Some("6.12.117+deb12-amd64".into());
    assert!(!l.kernel_gained_digests(&g612));
    assert!(!g612.policy.module_digests.has(HashAlg::Sha512));
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// Without root or real modules: every file is missing, so loads fail with ENOENT at
/// open, and the order, softdeps, builtins and skipping are what we check.
#[test]
fn order_and_failures_without_files() {
    let tmp = std::env::temp_dir().join(format!("vld-mod-{}", std::process::id()));
    std::fs::create_dir_all(tmp.join("sys/module/mbcache")).unwrap();
    std::fs::write(tmp.join("sys/module/mbcache/initstate"), "live\n").unwrap();
    for jobs in [1, 4] {
        let mut l = Loader::new(&tmp.join("lib"), idx(), &tmp.join("sys"));
        l.jobs = jobs;
        let r = l.load_all(&["ext4".into(), "jbd2".into()]);
        let names: Vec<_> = r.iter().map(|m| (m.name.as_str(), m.status)).collect();
        // Plan order: pre-softdeps, then hard deps (modules.dep lists the one to load
        // first last), then the module; a post-softdep of a failed module is dropped.
        assert_eq!(
            names,
            vec![
                ("crc32c_generic", ModStatus::Failed),
                ("crc32c", ModStatus::Skipped),
                ("crc16", ModStatus::Builtin),
                ("mbcache", ModStatus::AlreadyLoaded),
                ("jbd2", ModStatus::Failed),
                ("ext4", ModStatus::Skipped),
            ],
            "jobs={jobs}"
        );
        assert_eq!(r[0].errno.as_deref(), Some("ENOENT"));
        assert!(r[0].softdep && r[1].softdep && !r[2].softdep);
        assert_eq!(
            r[5].message.as_deref(),
            Some("dependency jbd2 did not load")
        );
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A module file is read with a limit and only when it is a regular file: a FIFO fails
/// at once (an open for reading would wait for a writer forever), a directory and a
/// file over [`MODULE_FILE_MAX`] (sparse here) fail with a message naming them; none
/// reaches the kernel.
#[test]
fn module_files_are_opened_and_read_with_limits() {
    let tmp = std::env::temp_dir().join(format!("vld-mod-lim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("lib/kernel")).unwrap();
    std::fs::create_dir_all(tmp.join("sys/module")).unwrap();
    let dir = tmp.join("lib");
    let mut index = Index::default();
    for n in ["fifo", "dir", "big"] {
        index.entries.insert(
            n.into(),
            Entry {
                path: format!("kernel/{n}.ko"),
                deps: Vec::new(),
            },
        );
    }
    nix::unistd::mkfifo(
        &dir.join("kernel/fifo.ko"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("kernel/dir.ko")).unwrap();
    let big = std::fs::File::create(dir.join("kernel/big.ko")).unwrap();
    big.set_len(MODULE_FILE_MAX + 1).unwrap();
    let mut l = Loader::new(&dir, index, &tmp.join("sys"));
    l.gate = Some(Gate::default());
    let r = l.load_all(&["fifo".into(), "dir".into(), "big".into()]);
    let get = |n: &str| r.iter().find(|m| m.name == n).unwrap();
    for (n, want) in [
        ("fifo", "is a FIFO, not a regular file".to_string()),
        ("dir", "is a directory, not a regular file".to_string()),
        (
            "big",
            format!("larger than the limit of {MODULE_FILE_MAX} bytes"),
        ),
    ] {
        let m = get(n);
        assert_eq!(m.status, ModStatus::Failed, "{m:?}");
        let msg = m.message.as_deref().unwrap();
        assert!(msg.ends_with(&want), "{n}: {msg}");
        assert!(msg.contains(&format!("kernel/{n}.ko")), "{n}: {msg}");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// The order of work: each node's rank is its weight plus the heaviest chain waiting on
/// it, so ext4's helpers (hard dependencies and a `post:` softdep of one of them) outrank
/// an independent chain of smaller modules, and a node nothing waits on ranks by itself.
#[test]
fn ready_modules_heading_the_heaviest_chain_go_first() {
    let node = |name: &str, hard: &[usize], post_of: Option<usize>| Node {
        name: name.into(),
        path: format!("kernel/{name}.ko"),
        softdep: post_of.is_some(),
        hard: hard.to_vec(),
        pre: vec![],
        post_of,
        preset: None,
    };
    let nodes = vec![
        node("crc16", &[], None),
        node("jbd2", &[], None),
        node("mbcache", &[], None),
        node("ext4", &[1, 2, 0], None),
        node("virtio_ring", &[], None),
        node("virtio_blk", &[4], None),
        node("crc32c_generic", &[], Some(1)),
    ];
    let weights = [6, 365, 26, 2064, 77, 58, 10];
    let rank = critical_path(&nodes, &weights);
    assert_eq!(rank, vec![2070, 2429, 2090, 2064, 135, 58, 10]);
    // Every helper of ext4 outranks the virtio chain's head.
    for i in [0, 1, 2] {
        assert!(rank[i] > rank[4], "{} before virtio_ring", nodes[i].name);
    }
    // Out-of-range indexes (a bad plan) and missing weights count as nothing.
    let mut bad = nodes.clone();
    bad[5].hard.push(99);
    assert_eq!(critical_path(&bad, &weights[..2]).len(), nodes.len());
}

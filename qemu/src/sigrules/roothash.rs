//! The root-hash pass of the judge's boot: every signature of [`sigcases::roothash`]
//! handed to the kernel's dm-verity (`root_hash_sig_key_desc`) by `verity-load`, over a
//! small verity device on two loop devices, before the module passes, with no check of
//! ours in between; and our `root-verity-sig` verdict on the same bytes
//! ([`RootHash::verdict`]).
//!
//! The initramfs gets `/roothash/`: the Debian modules `loop` and `dm_verity` with their
//! dependencies (decompressed, in load order, named in `modules`), the data and hash
//! images (`veritysetup format` of eight zero blocks), `table` (blocks, root hash and salt),
//! `manifest` (the case ids) and `<id>.p7s`. Output lines: `ROOTSIG <id> <ok|ERRNO>`,
//! `ROOTSIG-LOG <id> <kernel line>` and `ROOTSIG-SETUP <line>` (what the set-up printed).

use std::path::{Path, PathBuf};
use std::process::Command;

use mkinitramfs::cpio::Archive;
use sigcases::roothash::RootCase;
use validator::formats::verity::sig::RootHashSig;
use validator::trust::TrustStore;

use crate::HarnessError;

/// The data device's size in 4096-byte blocks.
const BLOCKS: u64 = 8;

/// The static `verity-load`, built once per process.
pub fn loader() -> Result<PathBuf, HarnessError> {
    crate::paths::build_static("verity-load", "test-support", "verity-load", &[])
}

/// The pass's script, run by the judge's `/init` before the module passes.
pub const SCRIPT: &str = r#"
if [ -f /roothash/manifest ]; then
    for m in $(cat /roothash/modules); do
        insmod "/roothash/$m.ko" || echo "ROOTSIG-SETUP insmod $m failed"
    done
    losetup /dev/loop0 /roothash/data || echo "ROOTSIG-SETUP losetup data failed"
    losetup /dev/loop1 /roothash/hash || echo "ROOTSIG-SETUP losetup hash failed"
    dmesg -c | while read -r l; do echo "ROOTSIG-SETUP $l"; done
    read -r blocks rh salt < /roothash/table
    while read -r id; do
        r=$(/bin/verity-load "$id" /dev/loop0 /dev/loop1 "$blocks" "$rh" "$salt" "/roothash/$id.p7s")
        echo "ROOTSIG $id $r"
        dmesg -c | while read -r l; do echo "ROOTSIG-LOG $id $l"; done
    done < /roothash/manifest
fi
"#;

/// The pass's set-up for one kernel.
#[derive(Debug, Clone)]
pub struct RootHash {
    /// The hex root hash every case signs, and its bytes.
    pub root_hash: String,
    pub root_hash_bytes: Vec<u8>,
    pub salt: String,
    pub data: PathBuf,
    pub hash: PathBuf,
    pub cases: Vec<RootCase>,
    /// The modules to load, in order: (name, decompressed bytes).
    pub modules: Vec<(String, Vec<u8>)>,
}

/// `loop` and `dm_verity` of `kernel` (a provisioned kernel's directory name) with their
/// dependencies, in load order, decompressed (busybox's `insmod` reads plain files; the
/// signature is inside the compressed file's content).
fn modules(kernel: &str) -> Result<Vec<(String, Vec<u8>)>, HarnessError> {
    let k = crate::paths::kernel(kernel)?;
    let tree = mkinitramfs::closure::KernelTree::open(&k.root)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let want = ["loop".to_string(), "dm_verity".to_string()];
    let clo = mkinitramfs::closure::closure(&tree, &want)
        .map_err(|e| HarnessError::Setup(e.to_string()))?;
    let mut order: Vec<String> = Vec::new();
    for name in &want {
        let entry = clo
            .index
            .entries
            .get(name)
            .ok_or_else(|| HarnessError::Setup(format!("{kernel}: no module {name}")))?;
        // kmod order: the dependency to load first comes last.
        for d in entry.deps.iter().rev().chain([name]) {
            if !order.contains(d) {
                order.push(d.clone());
            }
        }
    }
    order
        .into_iter()
        .map(|name| {
            let (rel, raw, _) = tree
                .module(&name)
                .map_err(|e| HarnessError::Setup(e.to_string()))?;
            let c = validator::formats::kmod::modinfo::Compression::from_name(&rel);
            let image = validator::formats::kmod::modinfo::decompress(&raw, c)
                .map_err(|e| HarnessError::Setup(format!("{rel}: {e}")))?;
            Ok((name, image))
        })
        .collect()
}

/// Makes the verity device's images and the cases in `dir`, for `kernel`.
pub fn make(kernel: &str, dir: &Path) -> Result<RootHash, HarnessError> {
    std::fs::create_dir_all(dir).map_err(|e| HarnessError::io(dir, e))?;
    let (data, hash) = (dir.join("data"), dir.join("hash"));
    let zeros = vec![0u8; usize::try_from(BLOCKS * 4096).unwrap_or(0)];
    std::fs::write(&data, zeros).map_err(|e| HarnessError::io(&data, e))?;
    let _ = std::fs::remove_file(&hash);
    let out = crate::disk::run(
        Command::new("veritysetup")
            .args(["format", "--hash", "sha256"])
            .args(["--data-block-size", "4096", "--hash-block-size", "4096"])
            .arg(&data)
            .arg(&hash),
    )?;
    let field = |name| crate::verity::veritysetup_field(&out, name);
    let (root_hash, salt) = (field("Root hash:")?, field("Salt:")?);
    let root_hash_bytes = validator::util::unhex(&root_hash)
        .ok_or_else(|| HarnessError::Setup(format!("veritysetup's root hash {root_hash:?}")))?;
    let content = dir.join("roothash.txt");
    std::fs::write(&content, &root_hash).map_err(|e| HarnessError::io(&content, e))?;
    Ok(RootHash {
        cases: sigcases::roothash::cases(sigcases::keys(), &content, &dir.join("cases")),
        root_hash,
        root_hash_bytes,
        salt,
        data,
        hash,
        modules: modules(kernel)?,
    })
}

impl RootHash {
    /// Adds `/roothash/` and `/bin/verity-load` to the judge's initramfs `a`.
    pub fn add_to(&self, a: &mut Archive) -> Result<(), HarnessError> {
        let cpio = |e: mkinitramfs::cpio::CpioError| HarnessError::Setup(e.to_string());
        let read = |p: &Path| std::fs::read(p).map_err(|e| HarnessError::io(p, e));
        a.file("bin/verity-load", read(&loader()?)?, 0o755)
            .map_err(cpio)?;
        let mut names = String::new();
        for (name, image) in &self.modules {
            a.file(&format!("roothash/{name}.ko"), image.clone(), 0o644)
                .map_err(cpio)?;
            names.push_str(&format!("{name}\n"));
        }
        let mut manifest = String::new();
        for c in &self.cases {
            a.file(&format!("roothash/{}.p7s", c.id), c.p7.clone(), 0o644)
                .map_err(cpio)?;
            manifest.push_str(&format!("{}\n", c.id));
        }
        let table = format!("{BLOCKS} {} {}\n", self.root_hash, self.salt);
        for (name, bytes) in [
            ("modules", names.into_bytes()),
            ("manifest", manifest.into_bytes()),
            ("table", table.into_bytes()),
            ("data", read(&self.data)?),
            ("hash", read(&self.hash)?),
        ] {
            a.file(&format!("roothash/{name}"), bytes, 0o644)
                .map_err(cpio)?;
        }
        Ok(())
    }

    /// Our `root-verity-sig` verdict on case `c` with `store` trusted and the signer
    /// named by `snake`'s fingerprint: the signer's label, or the refusal.
    pub fn verdict(&self, c: &RootCase, store: &TrustStore) -> Result<String, String> {
        use sha2::Digest;
        let fingerprint =
            validator::util::hex(&sha2::Sha256::digest(sigcases::keys().snake.cert_der()));
        let sig = RootHashSig {
            root_hash: self.root_hash_bytes.clone(),
            root_hash_hex: self.root_hash.clone(),
            fingerprint,
            pkcs7: c.p7.clone(),
        };
        validator::trust::rootsig::verify(&sig, store).map_err(|e| e.to_string())
    }
}

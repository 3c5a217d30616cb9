//! `validator verity verify`: a full userspace check of a dm-verity image (superblock,
//! every hash block, every data block) against a trusted root hash or a DPS
//! `root-verity-sig` file; names the first corrupted block.
//!
//! Contract: exit 0 verified, 1 corrupted, 2 unusable input (named). The signature file
//! is read up to the library's limit for a `root-verity-sig` partition.

use std::path::Path;
use validator::util::as_f64;

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::cli::VerityVerify;
use crate::keys::trust_store;
use crate::{Res, Usage};

/// `validator verity verify`.
pub(crate) fn verify(a: VerityVerify, out: &mut Out) -> Res {
    use validator::formats::verity::{sig, superblock, tree};
    let open =
        |p: &Path| validator::util::fs::open_input(p, true).map_err(|e| Usage(e.to_string()));
    let (df, hf) = (open(&a.data)?, open(&a.hash)?);
    let size = |f: &std::fs::File, p: &Path| {
        validator::sys::file_size(f).map_err(|e| Usage(format!("{}: {e}", p.display())))
    };
    let (dsize, hsize) = (size(&df, &a.data)?, size(&hf, &a.hash)?);
    let data_name = a.data.display().to_string();
    let hash_name = a.hash.display().to_string();
    // A tree error is about one of the two files: name it.
    let tree_err = |e: tree::TreeError| {
        let name = match &e {
            tree::TreeError::Read { device: "data", .. }
            | tree::TreeError::TooSmall { device: "data", .. } => &data_name,
            _ => &hash_name,
        };
        Usage(format!("{name}: {e}"))
    };
    if a.hash_offset >= hsize {
        return Err(Usage(format!(
            "{hash_name}: --hash-offset {} is beyond its end ({hsize} bytes)",
            a.hash_offset
        )));
    }
    let mut sb = vec![0u8; superblock::SIZE];
    use std::os::unix::fs::FileExt;
    let n = hf.read_at(&mut sb, a.hash_offset).map_err(|e| {
        Usage(format!(
            "{hash_name}: superblock at offset {}: {e}",
            a.hash_offset
        ))
    })?;
    // data_blocks 0 in the superblock: the whole data device, as veritysetup reads it.
    let params = superblock::parse(sb.get(..n).unwrap_or_default())
        .and_then(|p| p.resolve_data_blocks(dsize))
        .map_err(|e| Usage(format!("{hash_name}: {e}")))?;
    let (root, signer) = match (&a.root_hash, &a.sig) {
        (Some(h), None) => (
            validator::util::unhex(h).ok_or_else(|| Usage(format!("--root-hash {h}: not hex")))?,
            None,
        ),
        (None, Some(f)) => {
            let bytes = read_limited(
                f,
                validator::runtime::verity_parts::SIG_PARTITION_MAX as u64,
            )?;
            let s = sig::parse(&bytes).map_err(|e| Usage(format!("{}: {e}", f.display())))?;
            let store = trust_store(&a.trust)?;
            let who = validator::trust::rootsig::verify(&s, &store).map_err(|e| {
                let trusted: Vec<String> =
                    a.trust.iter().map(|t| t.display().to_string()).collect();
                Usage(format!(
                    "{}: {e} (trusted: {})",
                    f.display(),
                    trusted.join(", ")
                ))
            })?;
            (s.root_hash, Some(who))
        }
        _ => return Err(Usage("give exactly one of --root-hash and --sig".into())),
    };
    if root.len() != params.algorithm.digest_size() {
        return Err(Usage(format!(
            "the root hash has {} bytes; {} digests have {}",
            root.len(),
            params.algorithm.name(),
            params.algorithm.digest_size()
        )));
    }
    let g = tree::Geometry::new(&params, a.hash_offset, true).map_err(tree_err)?;
    let threads = a.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let start = std::time::Instant::now();
    let v = tree::verify(&df, dsize, &hf, hsize, &g, &root, threads).map_err(tree_err)?;
    let secs = start.elapsed().as_secs_f64();
    let gbs = as_f64(v.data_bytes) / 1e9 / secs.max(1e-9);
    if a.json {
        let doc = serde_json::json!({
            "verified": v.ok,
            "root_hash": validator::util::hex(&root),
            "signer": signer,
            "finding": v.finding.as_ref().map(|f| f.to_string()),
            "algorithm": params.algorithm.name(),
            "data_block_size": params.data_block_size,
            "hash_block_size": params.hash_block_size,
            "data_blocks": params.data_blocks,
            "seconds": secs,
        });
        out.line(&doc.to_string())?;
    } else if v.ok {
        out.line(&format!(
            "verified: root hash {} ({} data blocks of {} bytes, {})",
            validator::util::hex(&root),
            params.data_blocks,
            params.data_block_size,
            params.algorithm.name()
        ))?;
    } else if let Some(f) = &v.finding {
        out.line(&format!("CORRUPTED: {f}"))?;
    }
    eprintln!(
        "validator: {:.2} GB in {secs:.2} s ({gbs:.2} GB/s, {threads} threads)",
        as_f64(v.data_bytes) / 1e9
    );
    Ok(v.ok)
}

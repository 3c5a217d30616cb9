//! Stage `verity`: the root filesystem is the image, block for block.
//!
//! 1. The root hash we trust comes from the BOM, or from the Discoverable Partitions
//!    `root-verity-sig` partition ([`sig`], [`rootsig`]) checked against the trust store.
//! 2. The data and hash partitions are named on the command line, or found by the systemd
//!    convention (data PARTUUID = first 128 bits of the root hash, hash PARTUUID = last 128
//!    bits), or by their DPS partition types; the GPT is read by us ([`crate::formats::gpt`]).
//! 3. The `veritysetup format` superblock ([`superblock`]) is untrusted: its values must
//!    agree with the BOM's trusted parameters and the stored top hash block must hash to
//!    the root hash, or the boot is refused - before any device-mapper device exists.
//! 4. The verity table goes to the kernel through the device-mapper ioctls
//!    ([`crate::sys::dm`]), read-only, with the BOM's options; the status must say `V`.
//!
//! Finding the partitions is the `storage` stage's part (with the rules of
//! [`crate::runtime::verity_parts`]); reading the critical files through the device after
//! mounting is the `critical` stage's.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Classified, Context, Fault};
use crate::config::bom::{OnCorruption, RootHashSource, Verity};
use crate::config::layout;
use crate::formats::verity::superblock::{self, Params};
use crate::formats::verity::{sig, tree};
use crate::runtime::critical::CriticalFile;
use crate::runtime::devices::FoundPartition;
use crate::runtime::measure::MeasureError;
use crate::runtime::verity_parts::{Parts, SigPartition};
use crate::sys::dm;
use crate::trust::rootsig::{self, RootSigError};
use crate::trust::TrustStore;

/// Name of the device-mapper device we create.
pub const DM_NAME: &str = crate::config::VERITY_DM_NAME;

/// A verity problem: which step, and why. Everything before [`VerityError::Dm`] happens
/// before any device-mapper device exists.
#[derive(Debug, thiserror::Error)]
pub enum VerityError {
    #[error("{0}")]
    Partitions(String),
    /// A read of the data, hash or signature partition itself failed; `eio`: the disk
    /// returned `EIO` (no hash is involved in these reads: the hardware's fault).
    #[error("{device}: {why}")]
    Read {
        device: String,
        why: String,
        eio: bool,
    },
    #[error(transparent)]
    Signature(#[from] sig::SigError),
    #[error(transparent)]
    RootSig(#[from] RootSigError),
    #[error("no trusted root hash: the BOM's verity.source is \"bom\" but it has no root_hash")]
    NoRootHash,
    #[error("{device}: {source}")]
    Superblock {
        device: String,
        source: superblock::SuperblockError,
    },
    #[error("superblock {field} is {found}, the trusted value is {trusted}")]
    Disagrees {
        field: &'static str,
        found: String,
        trusted: String,
    },
    #[error("{0}")]
    Tree(#[from] tree::TreeError),
    #[error("the stored top hash block does not hash to the trusted root hash {0}")]
    TopMismatch(String),
    #[error("device-mapper: {0}")]
    Dm(#[from] crate::sys::SysError),
    #[error("verity status is {0:?}, not \"V\" (verified)")]
    Status(String),
    #[error("trust store: {0}")]
    Trust(#[from] crate::trust::TrustError),
    #[error(transparent)]
    Measure(#[from] MeasureError),
}

impl Classified for VerityError {
    fn fault(&self) -> Fault {
        match self {
            VerityError::Measure(e) => e.fault(),
            VerityError::Read { eio: true, .. } => Fault::Hardware,
            VerityError::Tree(tree::TreeError::Read {
                os_error: Some(nix::libc::EIO),
                ..
            }) => Fault::Hardware,
            // Everything else is about the image's verity data, its signature or the
            // table made from them (the kernel refusing it included).
            _ => Fault::Image,
        }
    }
}

/// What the report says about the verified root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerityReport {
    pub root_hash: String,
    /// `signature` (DPS root-verity-sig) or `bom`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    pub data_device: String,
    pub hash_device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig_device: Option<String>,
    pub algorithm: String,
    pub data_block_size: u32,
    pub hash_block_size: u32,
    pub data_blocks: u64,
    /// The dm device (`/dev/dm-0`), once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dm_device: Option<String>,
    /// The kernel's verity status: `V` verified, `C` corruption seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The table we loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// The table as the kernel reports it back (`DM_TABLE_STATUS` with the table flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_table: Option<String>,
    pub critical_files: Vec<CriticalFile>,
    /// Reads through the device failed with `EIO`: what the kernel says made them fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_fault: Option<crate::runtime::read_fault::ReadFault>,
}

fn read_error(path: &str, e: &std::io::Error) -> VerityError {
    let eio = e.raw_os_error() == Some(nix::libc::EIO);
    VerityError::Read {
        device: path.into(),
        why: match crate::sys::io_errno_name(e) {
            Some(name) if eio => format!("{name}: {e} (the disk failed the read)"),
            _ => e.to_string(),
        },
        eio,
    }
}

fn read_device(path: &str, offset: u64, len: usize) -> Result<Vec<u8>, VerityError> {
    crate::sys::read_device_at(path, offset, len).map_err(|e| read_error(path, &e))
}

fn device_size(path: &str) -> Result<u64, VerityError> {
    crate::sys::device_size(path).map_err(|e| read_error(path, &e))
}

/// The root hash to trust: the BOM's, or the signature partition's once verified.
pub fn trusted_root_hash(
    cfg: &Verity,
    sig_part: Option<&SigPartition>,
    trust: &TrustStore,
) -> Result<(Vec<u8>, Option<String>), VerityError> {
    match cfg.source {
        RootHashSource::Bom => {
            let h = cfg.root_hash.as_ref().ok_or(VerityError::NoRootHash)?;
            Ok((
                crate::util::unhex(h.as_str()).ok_or(VerityError::NoRootHash)?,
                None,
            ))
        }
        RootHashSource::Signature => {
            let s = sig_part
                .ok_or_else(|| VerityError::Partitions("no root-verity-sig partition".into()))?;
            let signer = rootsig::verify(&s.sig, trust)?;
            Ok((s.sig.root_hash.clone(), Some(signer)))
        }
    }
}

/// Reads the superblock and checks it against the trusted values; returns the geometry.
/// A superblock's `data_blocks` 0 is the whole data device, as cryptsetup reads it.
pub fn check_superblock(
    cfg: &Verity,
    hash_dev: &str,
    data_dev: &str,
    root_hash: &[u8],
) -> Result<tree::Geometry, VerityError> {
    let raw = read_device(hash_dev, cfg.hash_offset, superblock::SIZE)?;
    let sb_err = |source| VerityError::Superblock {
        device: hash_dev.into(),
        source,
    };
    let mut p = superblock::parse(&raw).map_err(sb_err)?;
    if p.data_blocks == 0 {
        p = p
            .resolve_data_blocks(device_size(data_dev)?)
            .map_err(sb_err)?;
    }
    check_trusted(cfg, &p, root_hash)?;
    Ok(tree::Geometry::new(&p, cfg.hash_offset, true)?)
}

/// The superblock's values must equal every trusted value the BOM gives.
pub fn check_trusted(cfg: &Verity, p: &Params, root_hash: &[u8]) -> Result<(), VerityError> {
    let dis = |field, found: String, trusted: String| {
        Err(VerityError::Disagrees {
            field,
            found,
            trusted,
        })
    };
    if let Some(a) = &cfg.algorithm {
        if a.as_str() != p.algorithm.name() {
            return dis("algorithm", p.algorithm.name().into(), a.to_string());
        }
    }
    if let Some(v) = cfg.data_block_size {
        if v != p.data_block_size {
            return dis(
                "data_block_size",
                p.data_block_size.to_string(),
                v.to_string(),
            );
        }
    }
    if let Some(v) = cfg.hash_block_size {
        if v != p.hash_block_size {
            return dis(
                "hash_block_size",
                p.hash_block_size.to_string(),
                v.to_string(),
            );
        }
    }
    if let Some(v) = cfg.data_blocks {
        if v != p.data_blocks {
            return dis("data_blocks", p.data_blocks.to_string(), v.to_string());
        }
    }
    if let Some(s) = &cfg.salt {
        let want = crate::util::unhex(s.as_str()).ok_or(VerityError::Disagrees {
            field: "salt",
            found: crate::util::hex(&p.salt),
            trusted: format!("{s} (not hex)"),
        })?;
        if want != p.salt {
            return dis("salt", crate::util::hex(&p.salt), s.to_string());
        }
    }
    if root_hash.len() != p.algorithm.digest_size() {
        return dis(
            "algorithm",
            p.algorithm.name().into(),
            format!(
                "one with {}-byte digests (the root hash's length)",
                root_hash.len()
            ),
        );
    }
    Ok(())
}

/// The kernel's verity table line (`Documentation/admin-guide/device-mapper/verity.rst`).
pub fn table(
    g: &tree::Geometry,
    data_dev: (u64, u64),
    hash_dev: (u64, u64),
    root_hash: &[u8],
    cfg: &Verity,
    sig_key: Option<&str>,
) -> dm::Target {
    let p = &g.params;
    let salt = if p.salt.is_empty() {
        "-".to_string()
    } else {
        crate::util::hex(&p.salt)
    };
    let mut opts: Vec<String> = Vec::new();
    match cfg.on_corruption {
        OnCorruption::Eio => {}
        OnCorruption::Restart => opts.push("restart_on_corruption".into()),
        OnCorruption::Panic => opts.push("panic_on_corruption".into()),
        OnCorruption::Ignore => opts.push("ignore_corruption".into()),
    }
    if cfg.ignore_zero_blocks {
        opts.push("ignore_zero_blocks".into());
    }
    if cfg.check_at_most_once {
        opts.push("check_at_most_once".into());
    }
    if let Some(k) = sig_key {
        opts.push("root_hash_sig_key_desc".into());
        opts.push(k.into());
    }
    let mut params = format!(
        "{} {}:{} {}:{} {} {} {} {} {} {} {}",
        p.hash_type,
        data_dev.0,
        data_dev.1,
        hash_dev.0,
        hash_dev.1,
        p.data_block_size,
        p.hash_block_size,
        p.data_blocks,
        g.hash_start,
        p.algorithm.name(),
        crate::util::hex(root_hash),
        salt
    );
    if !opts.is_empty() {
        params.push_str(&format!(" {} {}", opts.len(), opts.join(" ")));
    }
    dm::Target {
        start: 0,
        length: p.data_blocks * u64::from(p.data_block_size) / 512,
        kind: "verity".into(),
        params,
    }
}

fn dev_numbers(sys_root: &Path, p: &FoundPartition) -> Result<(u64, u64), VerityError> {
    let name = Path::new(&p.device)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let f = sys_root.join("class/block").join(&name).join("dev");
    let s =
        crate::util::fs::read_text_limited(&f, crate::util::fs::SYSFS_VALUE_MAX).map_err(|e| {
            VerityError::Read {
                device: f.display().to_string(),
                why: e.to_string(),
                eio: false,
            }
        })?;
    s.trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| VerityError::Read {
            device: f.display().to_string(),
            why: format!("bad device number {s:?}"),
            eio: false,
        })
}

/// Everything up to (not including) creating the device: the trusted root hash, the
/// superblock checks, the top block. Fills `report`; returns the geometry and root hash.
pub fn prepare(
    cfg: &Verity,
    parts: &Parts,
    trust: &TrustStore,
    report: &mut VerityReport,
) -> Result<(tree::Geometry, Vec<u8>), VerityError> {
    report.source = match cfg.source {
        RootHashSource::Bom => "bom".into(),
        RootHashSource::Signature => "signature".into(),
    };
    report.data_device = parts.data.device.clone();
    report.hash_device = parts.hash.device.clone();
    report.sig_device = parts.sig.as_ref().map(|p| p.partition.device.clone());
    let (root, signer) = trusted_root_hash(cfg, parts.sig.as_ref(), trust)?;
    report.root_hash = crate::util::hex(&root);
    report.signer = signer;
    let g = check_superblock(cfg, &parts.hash.device, &parts.data.device, &root)?;
    let p = &g.params;
    report.algorithm = p.algorithm.name().into();
    report.data_block_size = p.data_block_size;
    report.hash_block_size = p.hash_block_size;
    report.data_blocks = p.data_blocks;
    let (dsize, hsize) = (
        device_size(&parts.data.device)?,
        device_size(&parts.hash.device)?,
    );
    if dsize < g.data_end() {
        return Err(tree::TreeError::TooSmall {
            device: "data",
            have: dsize,
            need: g.data_end(),
        }
        .into());
    }
    if hsize < g.hash_end() {
        return Err(tree::TreeError::TooSmall {
            device: "hash",
            have: hsize,
            need: g.hash_end(),
        }
        .into());
    }
    let f = crate::util::fs::open_input(Path::new(&parts.hash.device), true).map_err(|e| {
        VerityError::Read {
            device: parts.hash.device.clone(),
            why: e.to_string(),
            eio: false,
        }
    })?;
    if !tree::top_matches(&f, &g, &root)? {
        return Err(VerityError::TopMismatch(crate::util::hex(&root)));
    }
    Ok((g, root))
}

/// Creates, loads and resumes the verity device and checks its status. Returns the
/// device node. On a failure after creation the device is removed again.
#[expect(
    clippy::too_many_arguments,
    reason = "each argument is one part of the verity target the stage built"
)]
pub fn activate(
    cfg: &Verity,
    parts: &Parts,
    g: &tree::Geometry,
    root: &[u8],
    sys_root: &Path,
    dev_root: &Path,
    sig_key: Option<&str>,
    report: &mut VerityReport,
) -> Result<String, VerityError> {
    let data = dev_numbers(sys_root, &parts.data)?;
    let hash = dev_numbers(sys_root, &parts.hash)?;
    let t = table(g, data, hash, root, cfg, sig_key);
    report.table = Some(format!("{} {} {} {}", t.start, t.length, t.kind, t.params));
    let ctl = dm::Control::open(dev_root, sys_root)?;
    let uuid = format!(
        "VALIDATOR-VERITY-{}",
        &crate::util::hex(root)[..32.min(root.len() * 2)]
    );
    let (maj, min) = ctl.create(DM_NAME, &uuid)?;
    let result = (|| -> Result<String, VerityError> {
        ctl.load(DM_NAME, std::slice::from_ref(&t), true)?;
        ctl.resume(DM_NAME)?;
        if let Some(kt) = ctl.status(DM_NAME, true)?.first() {
            report.kernel_table = Some(format!(
                "{} {} {} {}",
                kt.start, kt.length, kt.kind, kt.params
            ));
        }
        let st = ctl.status(DM_NAME, false)?;
        let status = st
            .first()
            .map(|s| s.params.trim().to_string())
            .unwrap_or_default();
        report.status = Some(status.clone());
        // The first word: a kernel may add more after it.
        if status.split_whitespace().next() != Some("V") {
            return Err(VerityError::Status(status));
        }
        let node = dev_root.join(format!("dm-{min}"));
        if !node.exists() {
            crate::sys::mknod_block(&node, maj, min)?;
        }
        Ok(node.display().to_string())
    })();
    match result {
        Ok(node) => {
            report.dm_device = Some(node.clone());
            Ok(node)
        }
        Err(e) => {
            let _ = ctl.remove(DM_NAME);
            Err(e)
        }
    }
}

/// The kernel key description under which the root-hash signature is handed over.
pub const SIG_KEY_DESC: &str = "validator:root-hash-sig";

/// The stage: the trusted root hash, the superblock and top block checks, the dm-verity
/// device through the DM ioctls, its status; then the root hash is measured.
pub fn run(ctx: &mut Context) -> Result<String, VerityError> {
    let (Some(cfg), Some(parts)) = (ctx.verity_cfg().cloned(), ctx.verity_parts.clone()) else {
        return Err(VerityError::Partitions(
            "verity partitions not found".into(),
        ));
    };
    // The module gate's trust store (the same certificates), loaded once.
    let trust = match ctx.trust.take() {
        Some(t) => t,
        None => {
            let mut t = TrustStore::new();
            t.add_path(&ctx.roots.initramfs.join(layout::TRUST_DIR))?;
            t
        }
    };
    let mut rep = VerityReport::default();
    let result = (|| {
        let (g, root) = prepare(&cfg, &parts, &trust, &mut rep)?;
        let key = if cfg.kernel_signature {
            let sigp = parts.sig.as_ref().ok_or_else(|| {
                VerityError::Partitions(
                    "kernel_signature needs the root-verity-sig partition".into(),
                )
            })?;
            crate::sys::add_user_key(SIG_KEY_DESC, &sigp.sig.pkcs7)?;
            Some(SIG_KEY_DESC)
        } else {
            None
        };
        activate(
            &cfg,
            &parts,
            &g,
            &root,
            &ctx.roots.sys,
            &ctx.roots.dev,
            key,
            &mut rep,
        )
    })();
    ctx.trust = Some(trust);
    let node = match result {
        Ok(node) => node,
        Err(e) => {
            ctx.facts.verity = Some(rep);
            return Err(e);
        }
    };
    if let Some(r) = ctx.facts.root.as_mut() {
        r.partition.device = node.clone();
    }
    let rh = rep.root_hash.clone();
    let detail = format!(
        "root hash {} ({}) on {node}, status {}",
        rep.root_hash,
        rep.signer.as_deref().unwrap_or("from the BOM"),
        rep.status.as_deref().unwrap_or("")
    );
    ctx.facts.verity = Some(rep);
    ctx.measure(
        &crate::formats::tpm::measurement::Measurement::VerityRootHash(rh),
        None,
    )?;
    Ok(detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw read of the verity partitions that the disk failed (`EIO`) is the
    /// hardware's fault; any other unreadable input, and a read the tree code made that
    /// failed otherwise, stay the image's.
    #[test]
    fn the_disks_read_errors_are_the_hardwares() {
        let eio = std::io::Error::from_raw_os_error(nix::libc::EIO);
        let e = read_error("/dev/vda3", &eio);
        assert_eq!(e.fault(), Fault::Hardware);
        assert!(e.to_string().contains("EIO"), "{e}");
        let enoent = std::io::Error::from_raw_os_error(nix::libc::ENOENT);
        assert_eq!(read_error("/dev/vda3", &enoent).fault(), Fault::Image);
        let tree = |os_error| {
            VerityError::Tree(tree::TreeError::Read {
                device: "hash",
                offset: 0,
                len: 4096,
                why: "x".into(),
                os_error,
            })
        };
        assert_eq!(tree(Some(nix::libc::EIO)).fault(), Fault::Hardware);
        assert_eq!(tree(None).fault(), Fault::Image);
    }
    use crate::formats::verity::superblock::Algorithm;

    fn cfg() -> Verity {
        Verity::default()
    }

    #[test]
    fn table_lines() {
        let p = Params {
            hash_type: 1,
            algorithm: Algorithm::Sha256,
            data_block_size: 4096,
            hash_block_size: 4096,
            data_blocks: 256,
            salt: vec![0xab, 0xcd],
            uuid: [0; 16],
        };
        let g = tree::Geometry::new(&p, 0, true).unwrap();
        let t = table(&g, (254, 1), (254, 2), &[0x11; 32], &cfg(), None);
        assert_eq!(t.length, 2048);
        assert_eq!(
            t.params,
            format!(
                "1 254:1 254:2 4096 4096 256 1 sha256 {} abcd",
                "11".repeat(32)
            )
        );
        let mut c = cfg();
        c.on_corruption = OnCorruption::Restart;
        c.ignore_zero_blocks = true;
        c.check_at_most_once = true;
        let mut p2 = p.clone();
        p2.salt.clear();
        let g2 = tree::Geometry::new(&p2, 0, true).unwrap();
        let t = table(&g2, (8, 1), (8, 2), &[0x11; 32], &c, Some("k"));
        assert!(t.params.ends_with(" - 5 restart_on_corruption ignore_zero_blocks check_at_most_once root_hash_sig_key_desc k"), "{}", t.params);
    }

    #[test]
    fn trusted_values_must_agree() {
        let p = Params {
            hash_type: 1,
            algorithm: Algorithm::Sha256,
            data_block_size: 4096,
            hash_block_size: 4096,
            data_blocks: 256,
            salt: vec![0xab],
            uuid: [0; 16],
        };
        assert!(check_trusted(&cfg(), &p, &[0; 32]).is_ok());
        let mut c = cfg();
        c.data_block_size = Some(1024);
        let e = check_trusted(&c, &p, &[0; 32]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "superblock data_block_size is 4096, the trusted value is 1024"
        );
        let mut c = cfg();
        c.salt = Some(crate::config::bom::HexString("abcd".into()));
        assert!(check_trusted(&c, &p, &[0; 32])
            .unwrap_err()
            .to_string()
            .contains("salt"));
        assert!(check_trusted(&cfg(), &p, &[0; 20]).is_err());
    }
}

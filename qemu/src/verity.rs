//! Verity root images for the test node, made with the real tools: `mkfs.ext4 -d` for the
//! filesystem, `veritysetup format` for the hash tree and superblock, `openssl` for a
//! signing key and the PKCS#7 signature over the hex root hash, and a Discoverable
//! Partitions layout (root, root-verity, root-verity-sig; PARTUUIDs from the root hash).

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;

use crate::disk::{self, Content, PartitionSpec};
use crate::HarnessError;

/// What to do to the image after it is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Good,
    /// One byte flipped in the first data block of `/sbin/init` (the tree is unchanged).
    CorruptCritical,
    /// The PKCS#7 signature's last byte flipped.
    BadSignature,
    /// Signed by a key that is not in the trust store.
    UntrustedCert,
    /// The superblock's hash block size changed (disagrees with the BOM).
    BadSuperblock,
    /// A good image whose filesystem is EROFS instead of ext4.
    Erofs,
    /// One byte flipped in the level-0 hash block that covers the first data block of
    /// `/sbin/init` (the top level, and so the root hash, unchanged).
    CorruptHash,
    /// A good image whose disk fails reads of the first data block of `/sbin/init`
    /// (`EIO`, [`Image::read_error`]).
    EioData,
    /// A good image whose disk fails reads of the level-0 hash block that covers it.
    EioHash,
    /// A good image whose disk fails reads of the first data block (the filesystem's
    /// superblock): the mount reads it.
    EioMount,
    /// A good image whose signature has signed attributes, out of DER's sorted order and
    /// signed as they lie ([`sigcases::keys::attrs_out_of_order`]).
    AttrsOutOfOrder,
}

/// A made image and what the BOM needs to trust it.
#[derive(Debug, Clone)]
pub struct Image {
    pub disk_parts: Vec<PartitionSpec>,
    pub root_hash: String,
    /// The certificate to trust (PEM).
    pub cert: PathBuf,
    pub salt: String,
    /// Where the disk must fail reads ([`Variant::EioData`], [`Variant::EioHash`]): the
    /// partition's label and the byte offset inside it.
    pub read_error: Option<(String, u64)>,
}

fn run(cmd: &mut Command) -> Result<String, HarnessError> {
    disk::run(cmd)
}

/// A self-signed RSA-2048 signing key and certificate named `name` in `dir`.
pub fn make_key(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), HarnessError> {
    let key = dir.join(format!("{name}.key"));
    let cert = dir.join(format!("{name}.pem"));
    test_support::keys::self_signed(
        &key,
        &cert,
        &format!("fleet image signing {name}"),
        "rsa:2048",
        2,
        &[],
    );
    Ok((key, cert))
}

fn cert_fingerprint(cert: &Path, dir: &Path) -> Result<String, HarnessError> {
    let der = dir.join("fp.der");
    run(Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(cert)
        .arg("-out")
        .arg(&der))?;
    let bytes = std::fs::read(&der).map_err(|e| HarnessError::io(&der, e))?;
    use sha2::Digest;
    Ok(validator::util::hex(&sha2::Sha256::digest(&bytes)))
}

/// The physical block of logical block 0 of `file` in an ext4 image (debugfs `bmap`).
fn first_block(image: &Path, file: &str) -> Result<u64, HarnessError> {
    let out = run(Command::new("debugfs")
        .arg("-R")
        .arg(format!("bmap {file} 0"))
        .arg(image))?;
    out.trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| HarnessError::Setup(format!("debugfs bmap {file}: {out:?}")))
}

/// The value `veritysetup format` printed after `name` (`Root hash:`, `Salt:`).
pub fn veritysetup_field(out: &str, name: &str) -> Result<String, HarnessError> {
    out.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| HarnessError::Setup(format!("veritysetup printed no {name}: {out}")))
}

/// Builds the verity root from `rootdir` in `dir`.
pub fn build(rootdir: &Path, dir: &Path, variant: Variant) -> Result<Image, HarnessError> {
    let data = dir.join("root.ext4");
    let _ = std::fs::remove_file(&data);
    if variant == Variant::Erofs {
        // mkfs.erofs writes 4 KiB blocks, as dm-verity's data blocks here.
        run(Command::new("mkfs.erofs")
            .args(["--quiet", "-T0", "--all-root"])
            .arg(&data)
            .arg(rootdir))?;
    } else {
        crate::rootfs::ext4_image(rootdir, &data)?;
    }
    let hash = dir.join("root.verity");
    let _ = std::fs::remove_file(&hash);
    let salt = "5a17".repeat(16);
    let out = run(Command::new("veritysetup")
        .args([
            "format",
            "--hash",
            "sha256",
            "--data-block-size",
            "4096",
            "--hash-block-size",
            "4096",
        ])
        .arg(format!("--salt={salt}"))
        .arg("--uuid=6a5e1a3c-2b0e-4f3a-9a63-0f3c5d2e1b4a")
        .arg(&data)
        .arg(&hash))?;
    let root_hash = veritysetup_field(&out, "Root hash:")?;
    // Sign the hex root hash (detached PKCS#7, no embedded certs, no attributes but for
    // AttrsOutOfOrder).
    let (key, cert) = make_key(dir, "trusted")?;
    let (skey, scert) = if variant == Variant::UntrustedCert {
        make_key(dir, "untrusted")?
    } else {
        (key.clone(), cert.clone())
    };
    let rh = dir.join("roothash.txt");
    std::fs::write(&rh, &root_hash).map_err(|e| HarnessError::io(&rh, e))?;
    let p7 = dir.join("roothash.p7s");
    let attrs = if variant == Variant::AttrsOutOfOrder {
        "-nosmimecap"
    } else {
        "-noattr"
    };
    run(Command::new("openssl")
        .args([
            "smime", "-sign", "-binary", attrs, "-nocerts", "-outform", "DER", "-in",
        ])
        .arg(&rh)
        .arg("-signer")
        .arg(&scert)
        .arg("-inkey")
        .arg(&skey)
        .arg("-out")
        .arg(&p7))?;
    let mut sig = std::fs::read(&p7).map_err(|e| HarnessError::io(&p7, e))?;
    if variant == Variant::AttrsOutOfOrder {
        sig = sigcases::keys::attrs_out_of_order(&sig, &skey, dir);
    }
    if variant == Variant::BadSignature {
        let n = sig.len() - 1;
        sig[n] ^= 0x01;
    }
    let json = serde_json::json!({
        "rootHash": root_hash,
        "certificateFingerprint": cert_fingerprint(&scert, dir)?,
        "signature": base64::engine::general_purpose::STANDARD.encode(&sig),
    });
    let sigimg = dir.join("root.sig");
    let mut bytes = json.to_string().into_bytes();
    bytes.resize(64 * 1024, 0);
    std::fs::write(&sigimg, &bytes).map_err(|e| HarnessError::io(&sigimg, e))?;
    let mut read_error = None;
    match variant {
        Variant::EioData => {
            let blk = first_block(&data, "/sbin/init")?;
            read_error = Some(("root-x86-64".to_string(), blk * 4096));
        }
        Variant::EioMount => {
            read_error = Some(("root-x86-64".to_string(), 0));
        }
        Variant::EioHash => {
            let blk = first_block(&data, "/sbin/init")?;
            let at = level0_hash_block(&hash, blk)?;
            read_error = Some(("root-x86-64-verity".to_string(), at * 4096));
        }
        Variant::CorruptCritical => {
            let blk = first_block(&data, "/sbin/init")?;
            patch(&data, blk * 4096 + 3, 0x01)?;
        }
        Variant::CorruptHash => {
            let blk = first_block(&data, "/sbin/init")?;
            let at = level0_hash_block(&hash, blk)?;
            patch(&hash, at * 4096 + 5, 0x01)?;
        }
        Variant::BadSuperblock => {
            // hash_block_size (offset 68) from 4096 to 1024.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&hash)
                .map_err(|e| HarnessError::io(&hash, e))?;
            use std::os::unix::fs::FileExt;
            f.write_all_at(&1024u32.to_le_bytes(), 68)
                .map_err(|e| HarnessError::io(&hash, e))?;
        }
        _ => {}
    }
    let labels = [
        "root-x86-64",
        "root-x86-64-verity",
        "root-x86-64-verity-sig",
    ]
    .map(String::from);
    let disk_parts = dps_partitions(labels, &root_hash, data, hash, sigimg);
    Ok(Image {
        disk_parts,
        root_hash,
        cert,
        salt,
        read_error,
    })
}

/// A verity root's three Discoverable Partitions: data and hash tree with the PARTUUIDs
/// made from the halves of `root_hash` (hex), and the signature; `labels` in that order.
pub fn dps_partitions(
    labels: [String; 3],
    root_hash: &str,
    data: PathBuf,
    hash: PathBuf,
    sig: PathBuf,
) -> Vec<PartitionSpec> {
    use validator::formats::verity as v;
    let raw = hex_bytes(root_hash);
    let half = |b: Option<&[u8]>| b.and_then(v::uuid_from_hash);
    let [data_label, hash_label, sig_label] = labels;
    let part = |label, type_uuid: &str, uuid, file| PartitionSpec {
        label,
        type_uuid: type_uuid.into(),
        uuid,
        content: Content::Raw(file),
    };
    vec![
        part(data_label, v::DPS_ROOT_X86_64, half(raw.get(..16)), data),
        part(
            hash_label,
            v::DPS_ROOT_VERITY_X86_64,
            half(raw.len().checked_sub(16).and_then(|i| raw.get(i..))),
            hash,
        ),
        part(sig_label, v::DPS_ROOT_VERITY_SIG_X86_64, None, sig),
    ]
}

/// The hash block (in 4096-byte blocks from the start of the hash image) of tree level 0
/// that holds the digest of data block `data_block`, from the image's own superblock.
fn level0_hash_block(hash: &Path, data_block: u64) -> Result<u64, HarnessError> {
    use validator::formats::verity::{superblock, tree};
    let bytes = std::fs::read(hash).map_err(|e| HarnessError::io(hash, e))?;
    let p = superblock::parse(&bytes)
        .map_err(|e| HarnessError::Setup(format!("{}: {e}", hash.display())))?;
    let g = tree::Geometry::new(&p, 0, true)
        .map_err(|e| HarnessError::Setup(format!("{}: {e}", hash.display())))?;
    let first = *g
        .level_start
        .first()
        .ok_or_else(|| HarnessError::Setup("verity tree without levels".into()))?;
    Ok(first + (data_block >> g.bits))
}

fn hex_bytes(s: &str) -> Vec<u8> {
    validator::util::unhex(s).unwrap_or_default()
}

/// XORs one byte of a file.
pub fn patch(path: &Path, offset: u64, xor: u8) -> Result<(), HarnessError> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| HarnessError::io(path, e))?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset)
        .map_err(|e| HarnessError::io(path, e))?;
    b[0] ^= xor;
    f.write_all_at(&b, offset)
        .map_err(|e| HarnessError::io(path, e))
}

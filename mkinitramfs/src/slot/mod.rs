//! `mkinitramfs slot`: one A/B slot's image from a root filesystem, for operators: the
//! root image, its dm-verity hash tree, the signed root hash, the initramfs and the
//! slot's boot entry, in one new directory.
//!
//! Contract: [`build`] reads the root (an ext4, erofs or squashfs image, recognised by its
//! superblock magic (`validator::formats::fsimage`) and refused when shorter than its
//! superblock says, or a directory, which becomes an erofs image made by `mkfs.erofs`
//! with every timestamp `SOURCE_DATE_EPOCH` and a UUID derived from it), the unpacked
//! kernel package, the BOM (it must have a `[verity]` section: a slot whose root the gate
//! does not verify is refused), the static init, and a PEM key with its certificate, and
//! writes into OUT, which must not exist:
//! - `root.img`: the root image, zero-padded to whole 4096-byte blocks;
//! - `root.verity`: its hash tree as `veritysetup format` writes it (superblock, then the
//!   tree; SHA-256, 4096-byte blocks, hash type 1), built by the verifier's own tree code
//!   (`validator::formats::verity::tree`); the salt is the SHA-256 of `root.img`, the
//!   superblock UUID is derived from it, so the tree depends on the root image alone;
//! - `root.roothash`: the root hash, hex (`veritysetup --root-hash-file`);
//! - `root.verity-sig`: the Discoverable Partitions `root-verity-sig` JSON
//!   (`rootHash`, `certificateFingerprint`, `signature`: a detached PKCS#7 over the hex
//!   root hash, no attributes, no certificates, made by `openssl smime -sign` as
//!   systemd-repart's is), padded with NUL bytes to 64 KiB: the partition's content;
//! - `bom.toml`: the BOM as given, with `root_hash = "<hex>"` added after its `[verity]`
//!   header when its source is `bom` (such a BOM comes without one: this build computes
//!   it; one that already pins a hash is refused);
//! - `esp/<SLOT>/vmlinuz`, `esp/<SLOT>/initrd.img`: the kernel and the initramfs (the
//!   library's [`crate::build`], the module gate on) where the shipped `grub.cfg` loads
//!   them, and `esp/loader/entries/slot-<slot>.conf`, the slot's systemd-boot entry;
//! - with [`SlotSpec::uki`], `esp/<SLOT>/linux.efi`: the slot's Unified Kernel Image
//!   ([`crate::uki`]: systemd-stub with the kernel, the initramfs, an os-release and the
//!   command line `validator.slot=<SLOT> ...` as one image, signed by the fleet's Secure
//!   Boot key or left unsigned for a signer outside the tool), which the shipped grub.cfg
//!   chainloads; `reference.json` then predicts a boot of it (its `.cmdline`, GRUB's read
//!   of the signed file, systemd-stub's PCR 11 events) instead of the plain entry, and
//!   with [`SlotSpec::rauc`] a boot of the other slot's image too (the bundle carries
//!   both: RAUC installs it in whichever slot is not booted);
//! - with [`SlotSpec::cmdline`], `reference.json`: what a good boot of the slot measures
//!   (`validator.reference/v1`, as `validator attest predict` writes it; the entries
//!   `boot-loader` through the shipped grub.cfg and `kexec` from the other slot), for
//!   `validator attest verify`;
//! - `SHA256SUMS` of all of them (`sha256sum -c` reads it; hashed from the bytes written,
//!   the root image's digest being the salt already computed);
//! - with [`SlotSpec::rauc`], `bundle.raucb`: a RAUC bundle (verity format, made and
//!   signed by `rauc bundle`) whose images `rootfs`, `rootfs-verity` and `rootfs-sig` are
//!   the three partitions (the slot classes of `examples/rauc/system.conf`), with an
//!   install hook that writes the root image and its hash tree, gives both partitions the
//!   PARTUUIDs the new root hash names (so the gate finds them, as after
//!   systemd-sysupdate), and puts the kernel and initramfs on the ESP at `/<bootname>/`. The bundle is not byte-reproducible (its CMS signature carries
//!   the signing time); what it holds is.
//!
//! The signature is checked after it is made, with the gate's own code, against the
//! certificate given (a key that does not belong to the certificate is refused by
//! openssl first, naming both). Everything is built in a hidden directory next to OUT and
//! renamed into place at the end; on any error it is removed, so OUT is whole or absent.
//! Byte-reproducible from the same inputs and `SOURCE_DATE_EPOCH` with an RSA key
//! (PKCS#1 v1.5 signatures are deterministic; ECDSA ones are not).
//!
//! Current limits: SHA-256 and 4096-byte blocks only; the root is read twice (the salt,
//! then the tree) and the level-0 digests are held in memory (32 bytes per 4 KiB block);
//! signing shells out to `openssl` (no reviewed Rust crate writes the CMS structure the
//! kernel reads); the reference is for GRUB entries (systemd-boot's: `validator attest
//! predict`). The bundle's hook assumes the GPT layout of
//! `examples/rauc/system.conf` (each slot device a partition, `sfdisk` on the node); RAUC
//! installs such bundles on the test bed's real node (`qemu/tests/real_node.rs`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;
use validator::formats::fsimage;
use validator::formats::verity::{superblock, tree};

mod entry;
mod rauc;
use rauc::rauc_bundle;

/// Why a slot image was not built (nothing is left behind).
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("{0}: exists; the slot image goes into a new directory (nothing was written)")]
    Exists(PathBuf),
    #[error("{path}: {why}")]
    Input { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{tool}: {why}")]
    Tool { tool: String, why: String },
    #[error(transparent)]
    Build(#[from] crate::BuildError),
    #[error("the Unified Kernel Image: {0}")]
    Uki(#[from] crate::uki::UkiError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SlotError + '_ {
    move |source| SlotError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct SlotSpec {
    /// The root filesystem: an ext4, erofs or squashfs image, or a directory.
    pub root: PathBuf,
    /// The unpacked kernel package.
    pub kernel: PathBuf,
    pub bom: PathBuf,
    /// The static init.
    pub init: PathBuf,
    /// The root-hash signing key (PEM) and its certificate (PEM).
    pub key: PathBuf,
    pub cert: PathBuf,
    /// `A` or `B`.
    pub slot: String,
    /// Words the slot's systemd-boot entry gives the kernel after `validator.slot=`.
    pub options: String,
    /// Where it goes (must not exist).
    pub out: PathBuf,
    /// Every timestamp (`SOURCE_DATE_EPOCH`).
    pub epoch: u32,
    /// Also package it as a RAUC bundle (`bundle.raucb`).
    pub rauc: Option<RaucBundle>,
    /// The kernel command line the slot's GRUB entry gives (as `/proc/cmdline` shows it):
    /// with it, `reference.json` holds the measurements a good boot of the slot makes.
    pub cmdline: Option<String>,
    /// Also a Unified Kernel Image of the slot (`esp/<SLOT>/linux.efi`).
    pub uki: Option<UkiSlot>,
}

/// The slot's Unified Kernel Image: the stub, the command line after
/// `validator.slot=<SLOT>` (the image's `.cmdline` is both), and how it is signed.
#[derive(Debug, Clone)]
pub struct UkiSlot {
    pub stub: PathBuf,
    pub cmdline: String,
    pub signing: crate::uki::Signing,
}

impl UkiSlot {
    /// The image's `.cmdline` for `slot`: `validator.slot=<slot>` and the words given.
    pub fn line(&self, slot: &str) -> Result<String, String> {
        if self.cmdline.contains(['\n', '\r', '\0']) {
            return Err("the command line has a line break or a NUL".into());
        }
        if self.cmdline.split_ascii_whitespace().any(|w| {
            ["validator.slot=", "validator-slot=", "BOOT_IMAGE="]
                .iter()
                .any(|p| w.starts_with(p))
        }) {
            return Err(format!(
                "the command line {:?} names validator.slot= or BOOT_IMAGE= itself: the image's line starts with validator.slot={slot}",
                self.cmdline
            ));
        }
        // One space between words, as the init writes a line for a kexec: the line
        // predicted for a fallback into this image is then the image's own.
        let mut line = format!("validator.slot={slot}");
        for w in self.cmdline.split_ascii_whitespace() {
            line.push(' ');
            line.push_str(w);
        }
        if line.len() > CMDLINE_MAX {
            return Err(format!(
                "the command line is {} bytes; the kernel takes {CMDLINE_MAX} at most",
                line.len()
            ));
        }
        Ok(line)
    }
}

/// A RAUC bundle of the slot image: its `compatible` string (the nodes' system.conf's),
/// the bundle signing key and certificate (PEM), and extra `mksquashfs` arguments for
/// `rauc bundle --mksquashfs-args` (none: RAUC's and mksquashfs's defaults, gzip).
#[derive(Debug, Clone)]
pub struct RaucBundle {
    pub compatible: String,
    pub key: PathBuf,
    pub cert: PathBuf,
    pub mksquashfs_args: Option<String>,
}

/// What was built.
#[derive(Debug, Clone)]
pub struct SlotBuilt {
    pub root_hash: String,
    /// `ext4`, `erofs` or `squashfs`.
    pub filesystem: &'static str,
    pub data_blocks: u64,
    /// The kernel release of the initramfs.
    pub release: String,
    pub modules: usize,
}

/// The longest command line the x86-64 kernel takes (`COMMAND_LINE_SIZE` less its NUL).
pub const CMDLINE_MAX: usize = 2047;

/// The slot's Unified Kernel Image on the ESP, in the slot's directory (where the gate
/// looks for the other slot's: `validator::runtime::slot::uki_path`).
pub const UKI_NAME: &str = validator::runtime::slot::UKI_FILE;

/// The size of the `root-verity-sig` partition content.
pub const SIG_PARTITION: usize = 64 * 1024;

/// Builds the slot image `spec` describes into `spec.out`.
pub fn build(spec: &SlotSpec) -> Result<SlotBuilt, SlotError> {
    if spec.out.symlink_metadata().is_ok() {
        return Err(SlotError::Exists(spec.out.clone()));
    }
    if !matches!(spec.slot.as_str(), "A" | "B") {
        return Err(SlotError::Input {
            path: spec.out.clone(),
            why: format!("slot {:?}: A or B", spec.slot),
        });
    }
    let name = spec
        .out
        .file_name()
        .ok_or_else(|| SlotError::Input {
            path: spec.out.clone(),
            why: "no directory name".into(),
        })?
        .to_string_lossy()
        .into_owned();
    let parent = spec
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(SlotError::Input {
            path: spec.out.clone(),
            why: format!("its directory {} does not exist", parent.display()),
        });
    }
    let tmp = spec
        .out
        .with_file_name(format!(".{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    let built = build_into(spec, &tmp).and_then(|b| {
        std::fs::rename(&tmp, &spec.out).map_err(io(&spec.out))?;
        Ok(b)
    });
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    built
}

fn run(c: &mut Command) -> Result<Vec<u8>, SlotError> {
    crate::run_tool(c, "").map_err(|(tool, why)| SlotError::Tool { tool, why })
}

/// `root.img` in `tmp` from the root; returns its filesystem.
fn root_image(spec: &SlotSpec, img: &Path) -> Result<&'static str, SlotError> {
    let bad = |why: String| SlotError::Input {
        path: spec.root.clone(),
        why,
    };
    let m = std::fs::metadata(&spec.root).map_err(io(&spec.root))?;
    let fs = if m.is_dir() {
        let uuid = validator::formats::verity::uuid_from_hash(
            sha2::Sha256::digest(format!("root {}", spec.epoch))
                .get(..16)
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        run(Command::new("mkfs.erofs")
            .arg("--quiet")
            .arg(format!("-T{}", spec.epoch))
            .arg("--all-root")
            .arg(format!("-U{uuid}"))
            .arg(img)
            .arg(&spec.root))?;
        "erofs"
    } else if m.is_file() {
        let mut head = vec![0u8; 4096];
        let mut f = std::fs::File::open(&spec.root).map_err(io(&spec.root))?;
        let n = f.read(&mut head).map_err(io(&spec.root))?;
        head.truncate(n);
        let fs = fsimage::detect(&head)
            .ok_or_else(
                || bad("no filesystem image: no ext4, erofs or squashfs superblock".into()),
            )?
            .name();
        let need = fsimage::size(&head).unwrap_or(0);
        if m.len() < need {
            return Err(bad(format!(
                "truncated: its {fs} superblock says {need} bytes, the file has {}",
                m.len()
            )));
        }
        std::fs::copy(&spec.root, img).map_err(io(img))?;
        fs
    } else {
        return Err(bad("not a file or a directory".into()));
    };
    // Whole data blocks: the tree must cover every byte of the filesystem.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(img)
        .map_err(io(img))?;
    let len = f.metadata().map_err(io(img))?.len();
    if len == 0 {
        return Err(bad("empty".into()));
    }
    f.set_len(len.div_ceil(4096) * 4096).map_err(io(img))?;
    Ok(fs)
}

/// Calls `each` with every 1 MiB of `path` in order (the last piece may be shorter).
fn stream(path: &Path, mut each: impl FnMut(&[u8])) -> Result<(), SlotError> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    let mut chunk = Vec::with_capacity(1 << 20);
    let mut r = f.take(u64::MAX);
    loop {
        chunk.clear();
        (&mut r)
            .take(1 << 20)
            .read_to_end(&mut chunk)
            .map_err(io(path))?;
        if chunk.is_empty() {
            return Ok(());
        }
        each(&chunk);
    }
}

/// The hash tree of `img` (`root.verity`'s bytes: superblock, then the tree); returns the
/// parameters (the salt is the image's SHA-256), the root hash and the tree.
fn verity(img: &Path) -> Result<(superblock::Params, Vec<u8>, Vec<u8>), SlotError> {
    let mut h = sha2::Sha256::new();
    let mut len = 0u64;
    stream(img, |b| {
        h.update(b);
        len += b.len() as u64;
    })?;
    let salt = h.finalize().to_vec();
    let mut uuid = [0u8; 16];
    for (u, d) in uuid
        .iter_mut()
        .zip(sha2::Sha256::digest([b"uuid".as_slice(), &salt].concat()))
    {
        *u = d;
    }
    // A version-4, RFC 4122 variant UUID, as veritysetup writes.
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    let p = superblock::Params {
        hash_type: 1,
        algorithm: superblock::Algorithm::Sha256,
        data_block_size: 4096,
        hash_block_size: 4096,
        data_blocks: len / 4096,
        salt,
        uuid,
    };
    let mut level0 = Vec::with_capacity(usize::try_from(p.data_blocks).unwrap_or(0));
    stream(img, |b| {
        for block in b.chunks(4096) {
            level0.push(tree::block_digest(&p, block));
        }
    })?;
    let (area, root) = tree::build_from_digests(&p, level0);
    if root.is_empty() {
        return Err(SlotError::Input {
            path: img.to_path_buf(),
            why: "no verity tree for this size".into(),
        });
    }
    let mut bytes = superblock::encode(&p);
    bytes.resize(4096, 0);
    bytes.extend_from_slice(&area);
    Ok((p, root, bytes))
}

/// The DPS `root-verity-sig` JSON for `root_hex`, signed by `key` as `cert`.
fn signature(spec: &SlotSpec, tmp: &Path, root_hex: &str) -> Result<String, SlotError> {
    use base64::Engine;
    let content = tmp.join(".roothash-to-sign");
    std::fs::write(&content, root_hex).map_err(io(&content))?;
    let signed = run(Command::new("openssl")
        .args([
            "smime", "-sign", "-binary", "-noattr", "-nocerts", "-outform", "DER", "-in",
        ])
        .arg(&content)
        .arg("-signer")
        .arg(&spec.cert)
        .arg("-inkey")
        .arg(&spec.key))
    .map_err(|e| SlotError::Input {
        path: spec.key.clone(),
        why: match e {
            SlotError::Tool { why, .. } if why.contains("does not match certificate") => {
                format!("not the key of the certificate {}", spec.cert.display())
            }
            e => format!("signing with it as {}: {e}", spec.cert.display()),
        },
    });
    let _ = std::fs::remove_file(&content);
    let der = signed?;
    let cert = validator::util::fs::read_limited(&spec.cert, validator::trust::CERT_FILE_MAX)
        .map_err(|e| SlotError::Input {
            path: spec.cert.clone(),
            why: e.to_string(),
        })?;
    let mut store = validator::trust::TrustStore::new();
    let bad_cert = |why: String| SlotError::Input {
        path: spec.cert.clone(),
        why,
    };
    store
        .add_bytes(&cert, &spec.cert.display().to_string())
        .map_err(|e| bad_cert(e.to_string()))?;
    let fingerprint = store
        .certs
        .first()
        .map(|c| validator::util::hex(&c.sha256))
        .ok_or_else(|| bad_cert("no certificate in it".into()))?;
    let json = format!(
        "{{\"rootHash\":\"{root_hex}\",\"certificateFingerprint\":\"{fingerprint}\",\"signature\":\"{}\"}}",
        base64::engine::general_purpose::STANDARD.encode(&der)
    );
    // The gate's own check of what it will be given.
    let parsed =
        validator::formats::verity::sig::parse(json.as_bytes()).map_err(|e| SlotError::Tool {
            tool: "openssl smime".into(),
            why: format!("its signature does not parse as the gate reads it: {e}"),
        })?;
    validator::trust::rootsig::verify(&parsed, &store)
        .map_err(|e| bad_cert(format!("the signature does not verify against it: {e}")))?;
    Ok(json)
}

/// `text` with `root_hash = "<hex>"` on the line after its `[verity]` header.
fn pin(text: &str, hex: &str) -> String {
    let mut out = String::with_capacity(text.len() + 90);
    for line in text.split_inclusive('\n') {
        out.push_str(line);
        if line.trim() == "[verity]" {
            if !line.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("root_hash = \"{hex}\"\n"));
        }
    }
    out
}

/// The slot's BOM as given, and read.
struct SlotBom {
    raw: Vec<u8>,
    text: String,
    bom: validator::config::bom::Bom,
    /// Its root hash comes from the BOM and is left out: this build pins it.
    unpinned: bool,
}

fn bad_bom(spec: &SlotSpec, why: String) -> SlotError {
    SlotError::Input {
        path: spec.bom.clone(),
        why,
    }
}

/// The BOM first: it decides whether this is a verified root at all. One whose root hash
/// comes from the BOM cannot pin it yet: it is read with a placeholder, and the hash this
/// build computes goes into the copy written out (the operator's text kept).
fn read_bom(spec: &SlotSpec) -> Result<SlotBom, SlotError> {
    let raw = validator::util::fs::read_limited(&spec.bom, validator::config::bom::BOM_MAX)
        .map_err(crate::BuildError::Input)?;
    let text = String::from_utf8(raw.clone()).map_err(|_| bad_bom(spec, "not UTF-8".into()))?;
    let parse = |t: &str| validator::config::bom::parse(t.as_bytes(), &spec.bom);
    let (bom, unpinned) = match parse(&text) {
        Ok(l) => (l.bom, false),
        Err(first) => match parse(&pin(&text, &"0".repeat(64))) {
            Ok(l)
                if l.bom
                    .verity
                    .as_ref()
                    .is_some_and(|v| v.source == validator::config::bom::RootHashSource::Bom) =>
            {
                (l.bom, true)
            }
            _ => return Err(crate::BuildError::Bom(first).into()),
        },
    };
    let v = bom.verity.as_ref().ok_or_else(|| {
        bad_bom(
            spec,
            "no [verity] section: the gate would not verify this slot's root".into(),
        )
    })?;
    if v.algorithm.as_ref().is_some_and(|a| a.0 != "sha256")
        || v.data_block_size.is_some_and(|s| s != 4096)
        || v.hash_block_size.is_some_and(|s| s != 4096)
    {
        return Err(bad_bom(
            spec,
            "[verity] asks for other parameters than sha256 with 4096-byte blocks".into(),
        ));
    }
    Ok(SlotBom {
        raw,
        text,
        bom,
        unpinned,
    })
}

/// The BOM written out: the given one, or with the root hash this build computed pinned;
/// read back as the gate will.
fn bom_to_write(spec: &SlotSpec, b: &SlotBom, root_hex: &str) -> Result<Vec<u8>, SlotError> {
    let source = b.bom.verity.as_ref().map(|v| v.source);
    let bom_text = if b.unpinned {
        pin(&b.text, root_hex).into_bytes()
    } else if source == Some(validator::config::bom::RootHashSource::Bom) {
        return Err(bad_bom(
            spec,
            "[verity] source = \"bom\" already pins a root_hash: leave it out, this command \
             writes the one it computes"
                .into(),
        ));
    } else {
        b.raw.clone()
    };
    validator::config::bom::parse(&bom_text, &spec.bom).map_err(crate::BuildError::Bom)?;
    Ok(bom_text)
}

fn build_into(spec: &SlotSpec, tmp: &Path) -> Result<SlotBuilt, SlotError> {
    // Every file is hashed for SHA256SUMS from the bytes written (the root image and its
    // tree where they are made), never read back.
    let mut sums = String::new();
    let mut write = |rel: &str, bytes: &[u8]| -> Result<(), SlotError> {
        let p = tmp.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(io(d))?;
        }
        std::fs::write(&p, bytes).map_err(io(&p))?;
        sums.push_str(&format!(
            "{}  {rel}\n",
            validator::util::hex(&sha2::Sha256::digest(bytes))
        ));
        Ok(())
    };
    let b = read_bom(spec)?;
    let img = tmp.join("root.img");
    let filesystem = root_image(spec, &img)?;
    let (p, root, tree_bytes) = verity(&img)?;
    // The salt is the SHA-256 of the root image.
    let root_sum = format!("{}  root.img\n", validator::util::hex(&p.salt));
    write("root.verity", &tree_bytes)?;
    let root_hex = validator::util::hex(&root);
    write("root.roothash", root_hex.as_bytes())?;
    let mut sig = signature(spec, tmp, &root_hex)?.into_bytes();
    sig.resize(SIG_PARTITION, 0);
    write("root.verity-sig", &sig)?;
    let bom_text = bom_to_write(spec, &b, &root_hex)?;
    write("bom.toml", &bom_text)?;
    let mut s = crate::Spec::new(&spec.kernel, &spec.bom, &spec.init);
    s.mtime = spec.epoch;
    s.bom_bytes = Some(bom_text.clone());
    let initrd = crate::build(&s)?;
    let slot = spec.slot.as_str();
    write(&format!("esp/{slot}/initrd.img"), &initrd.bytes)?;
    let vmlinuz = initrd.vmlinuz.clone().ok_or_else(|| SlotError::Input {
        path: spec.kernel.clone(),
        why: format!("no boot/vmlinuz-{}", initrd.release),
    })?;
    let kernel = validator::util::fs::read_limited(&vmlinuz, crate::limits::VMLINUZ_MAX)
        .map_err(crate::BuildError::Input)?;
    write(&format!("esp/{slot}/vmlinuz"), &kernel)?;
    let image_id = b.bom.image_id.to_string();
    let uki = entry::uki(spec, tmp, &kernel, &initrd.bytes, &image_id)?;
    if let Some(u) = &uki {
        write(&format!("esp/{slot}/{UKI_NAME}"), &u.image)?;
        if let Some((other, _, image)) = &u.other {
            let p = tmp.join(format!(".linux-{other}.efi"));
            std::fs::write(&p, image).map_err(io(&p))?;
        }
    }
    // The boots the reference predicts: the slot's, and for a RAUC bundle's images the
    // other slot's too (the bundle is installed in whichever slot is not booted).
    let boots: Vec<(&str, entry::Boot<'_>)> = match (&uki, &spec.cmdline) {
        (Some(u), _) => std::iter::once((slot, &u.line, &u.image))
            .chain(u.other.iter().map(|(o, line, image)| (*o, line, image)))
            .map(|(s, line, image)| {
                let boot = entry::Boot::Uki {
                    line,
                    image,
                    signed: u.signed,
                };
                (s, boot)
            })
            .collect(),
        (None, Some(line)) => vec![(slot, entry::Boot::Plain(line))],
        (None, None) => Vec::new(),
    };
    if !boots.is_empty() {
        let r = entry::reference(spec, &boots, &bom_text, &root_hex, &kernel, &initrd.bytes)?;
        write("reference.json", r.as_bytes())?;
    }
    let entry = format!(
        "title Slot {slot} ({image})\nversion {release}\nlinux /{slot}/vmlinuz\ninitrd /{slot}/initrd.img\noptions {}\n",
        format!("validator.slot={slot} {}", spec.options).trim(),
        image = image_id,
        release = initrd.release,
    );
    let lower = slot.to_ascii_lowercase();
    write(
        &format!("esp/loader/entries/slot-{lower}.conf"),
        entry.as_bytes(),
    )?;
    let sums_path = tmp.join("SHA256SUMS");
    std::fs::write(&sums_path, root_sum + &sums).map_err(io(&sums_path))?;
    if let Some(r) = &spec.rauc {
        rauc_bundle(r, tmp, slot, &image_id, &root_hex)?;
        for other in ["A", "B"] {
            let _ = std::fs::remove_file(tmp.join(format!(".linux-{other}.efi")));
        }
    }
    Ok(SlotBuilt {
        root_hash: root_hex,
        filesystem,
        data_blocks: p.data_blocks,
        release: initrd.release,
        modules: initrd.modules.len(),
    })
}

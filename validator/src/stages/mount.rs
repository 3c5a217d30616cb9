//! Stage `mount`: the root found by `storage` (or the verity device) is mounted at the new
//! root, read-only by default and always with verity, trying `rootfstype=` or ext4, EROFS
//! and squashfs in turn. A mount that reads `EIO` is told apart
//! ([`crate::runtime::read_fault`]): the disk's error is the hardware's fault, a block
//! that failed its hash the image's.

use nix::mount::MsFlags;

use super::{Classified, Context, Fault};
use crate::runtime::read_fault::{self, Cause, ReadFault};

/// Why the root could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("no root device")]
    NoRoot,
    /// No filesystem type mounted; with an `EIO`, what the kernel says made the reads
    /// fail ([`read_fault::judge`] for the verity device, [`read_fault::judge_plain`] for a
    /// plain one).
    #[error("cannot mount {device}: {}{}", .tried.join(", "),
        .cause.as_ref().map(|f| format!(": {}", f.describe())).unwrap_or_default())]
    Mount {
        device: String,
        tried: Vec<String>,
        cause: Option<ReadFault>,
    },
}

impl Classified for MountError {
    fn fault(&self) -> Fault {
        match self {
            MountError::NoRoot => Fault::Platform,
            // The disk failed the reads (no hash mismatch).
            MountError::Mount {
                cause:
                    Some(ReadFault {
                        cause: Cause::Disk, ..
                    }),
                ..
            } => Fault::Hardware,
            // The device is there and (with verity) verified: it holds no filesystem
            // this kernel can mount, so the image is wrong.
            MountError::Mount { .. } => Fault::Image,
        }
    }
}

/// The stage.
pub fn run(ctx: &mut Context) -> Result<String, MountError> {
    let Some(root) = ctx.facts.root.as_mut() else {
        return Err(MountError::NoRoot);
    };
    let types: Vec<String> = match &ctx.args.rootfstype {
        Some(t) => t.split(',').map(str::to_string).collect(),
        None => vec!["ext4".into(), "erofs".into(), "squashfs".into()],
    };
    let mut flags = MsFlags::empty();
    let read_only = ctx.args.read_only || root.read_only;
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    if let Err(e) = std::fs::create_dir_all(&ctx.roots.new_root) {
        log::warn!("{}: {e}", ctx.roots.new_root.display());
    }
    let mut tried = Vec::new();
    for t in &types {
        match crate::sys::mount(
            &root.partition.device,
            &ctx.roots.new_root,
            Some(t),
            flags,
            ctx.args.rootflags.as_deref(),
        ) {
            Ok(()) => {
                root.fstype = t.clone();
                return Ok(format!(
                    "{} ({t}, {}) on {}",
                    root.partition.device,
                    if read_only { "ro" } else { "rw" },
                    ctx.roots.new_root.display()
                ));
            }
            Err(e) => tried.push(format!("{t}: {}", e.errno_name())),
        }
    }
    let device = root.partition.device.clone();
    let cause = tried
        .iter()
        .any(|t| t.ends_with(": EIO"))
        .then(|| eio_cause(ctx, &device));
    if let (Some(v), Some(f)) = (ctx.facts.verity.as_mut(), &cause) {
        v.read_fault = Some(f.clone());
    }
    Err(MountError::Mount {
        device,
        tried,
        cause,
    })
}

/// Why a mount read `EIO`: the verity device's own account, or, for a plain device (no
/// hash to fail), whether the kernel logged a failed read on its disk.
fn eio_cause(ctx: &Context, device: &str) -> ReadFault {
    let (dev, sys) = (&ctx.roots.dev, &ctx.roots.sys);
    match ctx.facts.verity.as_ref().filter(|v| v.dm_device.is_some()) {
        Some(v) => read_fault::of_verity(dev, sys, &v.data_device, &v.hash_device),
        None => read_fault::of_plain(dev, sys, device),
    }
}

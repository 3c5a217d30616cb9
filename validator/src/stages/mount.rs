//! Stage `mount`: the root found by `storage` (or the verity device) is mounted at the new
//! root, read-only by default and always with verity, trying `rootfstype=` or ext4, EROFS
//! and squashfs in turn.

use nix::mount::MsFlags;

use super::{Classified, Context, Fault};

/// Why the root could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("no root device")]
    NoRoot,
    #[error("cannot mount {device}: {}", .tried.join(", "))]
    Mount { device: String, tried: Vec<String> },
}

impl Classified for MountError {
    fn fault(&self) -> Fault {
        match self {
            MountError::NoRoot => Fault::Platform,
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
    Err(MountError::Mount {
        device: root.partition.device.clone(),
        tried,
    })
}

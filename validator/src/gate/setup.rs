//! The gate as the init builds it ([`Gate::from_initramfs`]): the kernel's vermagic, the
//! symbol table and the trusted certificates read from the initramfs, each with its
//! limit, and the policy from the BOM.

use crate::config::layout;
use crate::formats::kmod::symvers::Symvers;
use crate::trust::TrustStore;

use super::{Gate, Policy};

/// A problem loading the gate's inputs.
#[derive(Debug, thiserror::Error)]
pub enum GateSetupError {
    #[error("{path}: {why}")]
    Read {
        path: std::path::PathBuf,
        why: String,
    },
    #[error(transparent)]
    Input(#[from] crate::util::fs::InputError),
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
}

/// Most bytes read from the initramfs's `kernel.vermagic` (the kernel's string is a few
/// dozen bytes).
pub const VERMAGIC_MAX: u64 = 4096;

/// Most bytes read from the initramfs's `Module.symvers` (the whole of Debian's 6.1 kernel
/// and its modules export about 30,000 symbols, 2.5 MB; the initramfs carries only the
/// symbols its modules import).
pub const SYMVERS_MAX: u64 = 16 << 20;

impl Gate {
    /// The gate as the init builds it: inputs from the initramfs rooted at `root` (each read
    /// with its limit, [`VERMAGIC_MAX`] and [`SYMVERS_MAX`]), policy from the BOM.
    pub fn from_initramfs(
        root: &std::path::Path,
        bom: &crate::config::bom::Bom,
    ) -> Result<Gate, GateSetupError> {
        let read = |rel: &str, limit: u64| -> Result<String, GateSetupError> {
            Ok(crate::util::fs::read_text_limited(&root.join(rel), limit)?)
        };
        let mut policy = Policy::from_bom(bom);
        policy.kernel_vermagic = Some(
            read(layout::VERMAGIC, VERMAGIC_MAX)?
                .trim_end_matches('\n')
                .to_string(),
        );
        let symvers = Symvers::parse(&read(layout::SYMVERS, SYMVERS_MAX)?).map_err(|why| {
            GateSetupError::Read {
                path: root.join(layout::SYMVERS),
                why: why.to_string(),
            }
        })?;
        let mut trust = TrustStore::new();
        trust.add_path(&root.join(layout::TRUST_DIR))?;
        Ok(Gate {
            trust,
            symvers: Some(symvers),
            policy,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gate's own inputs in the initramfs are read with limits: an oversized
    /// `kernel.vermagic` is refused naming the limit, a FIFO in place of `Module.symvers`
    /// is refused without blocking, and good inputs still load.
    #[test]
    fn initramfs_inputs_are_read_with_limits() {
        use std::path::Path;
        let d = std::env::temp_dir().join(format!("vld-gate-inputs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join(layout::TRUST_DIR)).unwrap();
        let bom = crate::config::bom::parse(
            b"schema = 1\nimage_id = \"img-1\"\n[kernel]\nrelease = \"6.1.0-57-amd64\"\n",
            Path::new("bom.toml"),
        )
        .unwrap()
        .bom;
        let vermagic = d.join(layout::VERMAGIC);
        let symvers = d.join(layout::SYMVERS);
        std::fs::write(&symvers, "0x12345678\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n").unwrap();
        std::fs::write(
            &vermagic,
            vec![b'x'; usize::try_from(VERMAGIC_MAX).unwrap() + 1],
        )
        .unwrap();
        let e = Gate::from_initramfs(&d, &bom).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: larger than the limit of {VERMAGIC_MAX} bytes",
                vermagic.display()
            )
        );
        std::fs::write(
            &vermagic,
            "6.1.0-57-amd64 SMP preempt mod_unload modversions \n",
        )
        .unwrap();
        let g = Gate::from_initramfs(&d, &bom).unwrap();
        assert_eq!(
            g.policy.kernel_vermagic.as_deref(),
            Some("6.1.0-57-amd64 SMP preempt mod_unload modversions ")
        );
        std::fs::remove_file(&symvers).unwrap();
        nix::unistd::mkfifo(&symvers, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = Gate::from_initramfs(&d, &bom).unwrap_err();
        assert!(
            e.to_string().ends_with("is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

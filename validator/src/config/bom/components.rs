//! The BOM's `[components]` table: versions of the user-space parts of the image (OFED,
//! the container toolkit, kubelet).
//!
//! Contract: each is optional and a checked [`Version`]. They are part of the BOM's
//! bytes, so they are in its digest and its TPM measurement (a verifier sees which
//! versions a node booted); the gate does not compare them with the node (they are
//! files of the verified root, which the root hash already pins). `ofed` has one
//! consequence the gate does enforce, at parse time: MLNX_OFED replaces the kernel's
//! RDMA stack with its own out-of-tree build, so a BOM that names an OFED must allow
//! out of tree every module of that stack it loads ([`OFED_MODULES`], checked by the
//! BOM's cross-checks) - else the gate would refuse the OFED's `mlx5_core` at boot.

use serde::{Deserialize, Serialize};

use super::Version;

/// Versions of the user-space parts of the image.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Components {
    pub ofed: Option<Version>,
    pub container_toolkit: Option<Version>,
    pub kubelet: Option<Version>,
}

/// Modules MLNX_OFED builds out of tree in place of the kernel's (its `mlnx-ofa_kernel`
/// package: the compatibility layer, the mlx5 and mlx4 drivers, the RDMA core and its
/// user-space interfaces, IPoIB, and the flash and devlink helpers mlx5 depends on),
/// as `modinfo` names them (`_`, not `-`).
pub const OFED_MODULES: &[&str] = &[
    "mlx_compat",
    "mlx5_core",
    "mlx5_ib",
    "mlx4_core",
    "mlx4_ib",
    "mlx4_en",
    "mlxfw",
    "mlxdevm",
    "ib_core",
    "ib_uverbs",
    "ib_umad",
    "ib_cm",
    "iw_cm",
    "rdma_cm",
    "rdma_ucm",
    "ib_ipoib",
];

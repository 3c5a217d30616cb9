//! The BOM's `[hardware]` table and `modules.root`: every key parses, round-trips through
//! TOML, and a bad value is refused with its line.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use std::path::Path;

use validator::config::bom::hardware::*;
use validator::config::bom::{parse, BomError};
use validator::formats::sysfs::LinkSpeed;

const BOM: &str = r#"schema = 1
image_id = "hgx-h200"

[kernel]
release = "6.1.0-57-amd64"

[modules]
load = ["nvme"]
root = ["nvidia", "nvidia-uvm", "mlx5_ib"]

[hardware]
gpus = 8
gpu_pci_ids = ["10de:2335", "10DE:2330"]
gpu_link_min_speed = "32.0 GT/s"
gpu_link_min_width = 16
nvswitches = 4
nvswitch_pci_ids = ["10de:22a3"]
nvme = 2
nvme_models = ["SAMSUNG MZ1L2960HCJR-00A07"]
mlx5_ports = 8
mlx5_link_layer = "InfiniBand"
mlx5_state = "ACTIVE"
mlx5_phys_state = "LinkUp"
mlx5_min_rate = "400 Gb/sec (4X NDR)"
mlx5_fw_version = "28.42.1000"
nic_link_min_speed = "32 GT/s"
nic_link_min_width = 16
link_wait_s = 90
cmdline = ["intel_iommu=on", "iommu=pt"]
secure_boot = true
"#;

fn err(text: &str) -> (usize, String) {
    match parse(text.as_bytes(), Path::new("bom.toml")) {
        Err(BomError::Invalid { line, message, .. }) => (line, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn every_key_parses_and_round_trips() {
    let b = parse(BOM.as_bytes(), Path::new("bom.toml")).unwrap().bom;
    let h = &b.hardware;
    assert_eq!(b.modules.root.len(), 3);
    assert_eq!(
        h.gpu_pci_ids[1],
        PciId {
            vendor: 0x10de,
            device: 0x2330
        }
    );
    assert_eq!(h.gpu_link_min_speed, Some(MinLinkSpeed(LinkSpeed(32000))));
    assert_eq!(h.nic_link_min_speed, Some(MinLinkSpeed(LinkSpeed(32000))));
    assert_eq!(h.mlx5_min_rate.as_ref().unwrap().0.tenth_gbps, 4000);
    assert_eq!(h.mlx5_link_layer(), LinkLayer::InfiniBand);
    assert_eq!((h.mlx5_state(), h.mlx5_phys_state()), ("ACTIVE", "LinkUp"));
    assert_eq!(h.link_wait(), std::time::Duration::from_secs(90));
    assert_eq!(h.cmdline[1].as_str(), "iommu=pt");
    let again = parse(b.to_toml().unwrap().as_bytes(), Path::new("x"))
        .unwrap()
        .bom;
    assert_eq!(again, b);
    // Defaults.
    let d = Hardware::default();
    assert_eq!(d.link_wait().as_secs(), u64::from(DEFAULT_LINK_WAIT_S));
    assert_eq!(d.mlx5_state(), "ACTIVE");
}

#[test]
fn bad_values_name_their_line() {
    for (from, to, line, needle) in [
        ("\"10de:22a3\"", "\"10de:22a\"", 17, "invalid PCI id"),
        ("\"32.0 GT/s\"", "\"fast\"", 14, "invalid PCIe link speed"),
        (
            "gpu_link_min_width = 16",
            "gpu_link_min_width = 3",
            15,
            "not a PCIe link width",
        ),
        (
            "\"400 Gb/sec (4X NDR)\"",
            "\"400\"",
            24,
            "invalid InfiniBand rate",
        ),
        ("\"InfiniBand\"", "\"IB\"", 21, "unknown variant"),
        ("link_wait_s = 90", "link_wait_s = 9000", 28, "above 1800"),
        (
            "\"iommu=pt\"",
            "\"iommu pt\"",
            29,
            "invalid command-line word",
        ),
        ("\"ACTIVE\"", "\"4: ACTIVE\"", 22, "invalid port state name"),
        (
            "secure_boot = true",
            "secure_boot = \"yes\"",
            30,
            "invalid type",
        ),
        (
            "\"10DE:2330\"",
            "\"10de:2335\"",
            13,
            "lists 10de:2335 twice",
        ),
        ("\"mlx5_ib\"", "\"nvme\"", 9, "module nvme is listed twice"),
        ("gpus = 8", "gpus = 8\ngpu = 8", 13, "unknown field `gpu`"),
    ] {
        assert!(BOM.contains(from), "{from}");
        let (l, msg) = err(&BOM.replace(from, to));
        assert_eq!(l, line, "{to}: {msg}");
        assert!(msg.contains(needle), "{to}: {msg}");
    }
}

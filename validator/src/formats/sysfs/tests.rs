//! Unit tests of `sysfs` (moved out of `sysfs.rs` to keep it under 700 lines).

use super::*;

#[test]
fn pci_values() {
    assert_eq!(pci_id("0x10de\n"), Ok(0x10de));
    assert_eq!(pci_class("0x030200\n"), Ok(0x030200));
    for bad in [
        "",
        "\n",
        "10de\n",
        "0x\n",
        "0x10dez\n",
        "0x10de0\n",
        "0x10de\n\n",
    ] {
        assert!(pci_id(bad).is_err(), "{bad:?}");
    }
    assert!(pci_class("0x0302000\n").is_err());
    assert_eq!(link_width("16\n"), Ok(16));
    assert!(link_width("x16\n").is_err());
    assert!(link_width("99999999999\n").is_err());
}

#[test]
fn link_speeds_in_every_spelling() {
    let s = |t: &str| link_speed(t).unwrap();
    assert_eq!(s("32.0 GT/s PCIe\n"), Some(LinkSpeed(32000)));
    assert_eq!(s("32 GT/s\n"), Some(LinkSpeed(32000)));
    assert_eq!(s("2.5 GT/s PCIe\n"), Some(LinkSpeed(2500)));
    assert_eq!(s("2.5 GT/s\n"), Some(LinkSpeed(2500)));
    assert_eq!(s("8.0 GT/s"), Some(LinkSpeed(8000)));
    assert_eq!(s("Unknown\n"), None);
    assert_eq!(s("Unknown speed\n"), None);
    assert_eq!(LinkSpeed(2500).to_string(), "2.5 GT/s");
    assert_eq!(LinkSpeed(32000).to_string(), "32.0 GT/s");
    for bad in [
        "",
        "32\n",
        "32 GT/s PCIe PCIe\n",
        "GT/s\n",
        ".5 GT/s\n",
        "5. GT/s\n",
        "0 GT/s\n",
    ] {
        assert!(link_speed(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn aer() {
    let a = aer_counters("RxErr 37\nBadTLP 2\nTOTAL_ERR_COR 41\n").unwrap();
    assert_eq!(a.total, 41);
    assert_eq!(a.nonzero(), ["RxErr 37", "BadTLP 2"]);
    let a = aer_counters("dev_cor_errs_bit[9] 3\nTOTAL_ERR_COR 3\n").unwrap();
    assert_eq!(a.bits, [("dev_cor_errs_bit[9]".to_string(), 3)]);
    for bad in [
        "",
        "RxErr 0\n",
        "RxErr x\nTOTAL_ERR_COR 0\n",
        "TOTAL_ERR_COR 0\nX 1\n",
        "TOTAL_ERR_COR 0",
    ] {
        assert!(aer_counters(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn infiniband() {
    assert_eq!(
        ib_enum("4: ACTIVE\n"),
        Ok(IbEnum {
            code: 4,
            name: "ACTIVE".into()
        })
    );
    assert_eq!(ib_enum("7: Phy Test\n").unwrap().name, "Phy Test");
    assert!(ib_enum("ACTIVE\n").is_err());
    assert!(ib_enum(": ACTIVE\n").is_err());
    let r = ib_rate("400 Gb/sec (4X NDR)\n").unwrap();
    assert_eq!((r.tenth_gbps, r.lanes, r.speed.as_str()), (4000, 4, "NDR"));
    assert_eq!(r.to_string(), "400 Gb/sec (4X NDR)");
    let r = ib_rate("2.5 Gb/sec (1X SDR)\n").unwrap();
    assert_eq!((r.tenth_gbps, r.gbps().as_str()), (25, "2.5"));
    assert_eq!(ib_rate("400 Gb/sec").unwrap().tenth_gbps, 4000);
    for bad in [
        "400\n",
        "400 Gb/sec (NDR)\n",
        "4.2 Gb/sec (1X SDR)\n",
        "400 Gb/sec (4X NDR\n",
    ] {
        assert!(ib_rate(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn padded_strings() {
    let model = format!("{:<40}\n", "SAMSUNG MZ1L2960HCJR-00A07");
    assert_eq!(
        padded(&model, "a model").unwrap(),
        "SAMSUNG MZ1L2960HCJR-00A07"
    );
    assert!(padded("    \n", "a model").is_err());
    assert!(padded("a\u{1}b\n", "a model").is_err());
}

const OPEN: &str = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Jul  8 18:49:27 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n";
const PROPRIETARY: &str = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.309.01  Tue Nov  4 12:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n";

#[test]
fn nvidia_versions() {
    let v = nvidia_version(OPEN).unwrap();
    assert_eq!(
        (v.flavour, v.version.as_str()),
        (DriverFlavour::Open, "570.172.08")
    );
    let v = nvidia_version(PROPRIETARY).unwrap();
    assert_eq!(
        (v.flavour, v.version.as_str()),
        (DriverFlavour::Proprietary, "535.309.01")
    );
    for bad in [
        "",
        "NVRM version: \n",
        "NVRM version: NVIDIA UNIX Kernel Module\n",
        "GCC version: x\n",
    ] {
        assert!(nvidia_version(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn gpu_and_switch_information() {
    let t = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 16\nGPU UUID: \t GPU-fa4e\nBus Location: \t 0000:1b:00.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";
    let g = gpu_information(t).unwrap();
    assert_eq!(g.model, "NVIDIA H200");
    assert_eq!(g.bus_location, "0000:1b:00.0");
    assert_eq!(g.minor, Some(0));
    assert!(!g.excluded && g.firmware.is_none());
    let g = gpu_information(&t.replace("\t No", "\t Yes")).unwrap();
    assert!(g.excluded);
    assert!(gpu_information(&t.replace("0000:1b:00.0", "1b:00.0")).is_err());
    assert!(gpu_information("Model: x\n").is_err());
    assert!(gpu_information("garbage\n").is_err());
    assert_eq!(
        nvswitch_information("BIOS Version: 96.10.6d.00.01\n")
            .unwrap()
            .bios_version,
        "96.10.6d.00.01"
    );
    assert!(nvswitch_information("Version 1\n").is_err());
}

#[test]
fn platform() {
    assert_eq!(
        lockdown("none [integrity] confidentiality\n").unwrap(),
        "integrity"
    );
    assert_eq!(
        lockdown("[none] integrity confidentiality\n").unwrap(),
        "none"
    );
    assert!(lockdown("none integrity\n").is_err());
    assert!(lockdown("[none] [integrity]\n").is_err());
    assert_eq!(efi_bool(&[6, 0, 0, 0, 1]), Ok(true));
    assert_eq!(efi_bool(&[6, 0, 0, 0, 0]), Ok(false));
    assert!(efi_bool(&[6, 0, 0, 0, 2]).is_err());
    assert!(efi_bool(&[1]).is_err());
    assert_eq!(module_taint("PO\n").unwrap(), "PO");
    assert_eq!(module_taint("\n").unwrap(), "");
    assert!(module_taint("po\n").is_err());
}

#[test]
fn dpkg() {
    let t = "Package: a\nStatus: install ok installed\nVersion: 1:570.172.08-1\nProvides: x (= 1), y\nDescription: d\n more\n\nPackage: b\nStatus: deinstall ok config-files\nVersion: 2\n";
    let p = dpkg_status(t).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].upstream_version(), "570.172.08");
    assert_eq!(p[0].provides, ["x", "y"]);
    assert!(p[0].installed() && !p[1].installed());
    let e = dpkg_status("Package: a\ngarbage\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2"), "{e}");
    assert!(dpkg_status(" x\n").is_err());
    assert!(dpkg_status("Version: 1\n\n")
        .unwrap_err()
        .to_string()
        .contains("line 1"));
    assert_eq!(dpkg_status("").unwrap(), vec![]);
}

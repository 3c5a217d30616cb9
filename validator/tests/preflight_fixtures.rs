//! The preflight's checks against the hardware fixture trees (`tests/fixtures/hw`, made by
//! `scripts/make-fixtures`, documented in `docs/FIXTURES.md`): every variant yields the
//! fault `variants.toml` says, with the BOM of the fixture node
//! (`examples/hgx-h200-training.toml`); the generator and the committed trees agree; the
//! wait for InfiniBand ports ends as soon as they come up; garbage in any file fails a
//! check that names the file, never panics.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use validator::config::bom::Bom;
use validator::stages::preflight::{self, CheckStatus, HwRoots, Options, PreflightReport};
use validator::stages::Fault;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hw")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[derive(Debug, serde::Deserialize)]
struct Variants {
    bom: toml::Table,
    variant: Vec<Variant>,
}

#[derive(Debug, serde::Deserialize)]
struct Variant {
    name: String,
    fault: String,
    summary: String,
}

fn variants() -> Variants {
    let text = std::fs::read_to_string(fixtures().join("variants.toml")).unwrap();
    toml::from_str(&text).unwrap()
}

/// The fixture node's BOM, with no wait for links (a fixture never changes).
fn bom() -> Bom {
    let mut b = validator::config::bom::load(&workspace().join("examples/hgx-h200-training.toml"))
        .unwrap()
        .bom;
    b.hardware.link_wait_s = Some(0);
    b
}

fn opts() -> Options {
    Options {
        link_wait: Duration::ZERO,
        poll: Duration::from_millis(20),
    }
}

fn run(dir: &Path, bom: &Bom, opts: &Options) -> PreflightReport {
    let roots = HwRoots {
        sys: dir.join("sys"),
        proc: dir.join("proc"),
        root: dir.join("root"),
    };
    let mut r = PreflightReport::default();
    preflight::check(&roots, bom, opts, &mut r);
    r
}

/// The check each failing variant must be decided by.
fn deciding_check(variant: &str) -> Option<&'static str> {
    Some(match variant {
        "gpu-missing-from-pci" | "gpu-model-h100" => "gpus",
        "driver-sees-7" | "driver-not-loaded" => "gpu-driver",
        "driver-version-mismatch" => "driver-version",
        "flavour-proprietary" => "driver-flavour",
        "fabricmanager-mismatch" | "fabricmanager-missing" => "fabric-manager",
        "port-down" | "ib-port-init" => "mlx5-ports",
        "gpu-link-x8" | "gpu-link-gen4" => "gpu-links",
        "nvswitch-missing" => "nvswitches",
        "nvme-missing" => "nvme",
        "aer-errors" => "aer",
        "secureboot-off" => "secure-boot",
        _ => return None,
    })
}

#[test]
fn the_example_bom_is_the_fixture_node() {
    let v = variants();
    let b = bom();
    let hw = &b.hardware;
    let nv = b.nvidia.as_ref().unwrap();
    let s = |k: &str| v.bom[k].as_str().unwrap().to_string();
    let n = |k: &str| u32::try_from(v.bom[k].as_integer().unwrap()).unwrap();
    assert_eq!(hw.gpus, Some(n("gpus")));
    assert_eq!(
        hw.gpu_pci_ids
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>(),
        [s("gpu_pci_id")]
    );
    assert_eq!(hw.nvswitches, Some(n("nvswitches")));
    assert_eq!(hw.nvswitch_pci_ids[0].to_string(), s("nvswitch_pci_id"));
    assert_eq!(hw.mlx5_ports, Some(n("ib_ports")));
    assert_eq!(
        hw.mlx5_min_rate.as_ref().unwrap().0.to_string(),
        s("ib_rate")
    );
    assert_eq!(hw.nvme, Some(n("nvme")));
    assert_eq!(nv.driver_version.as_str(), s("driver_version"));
    assert_eq!(format!("{:?}", nv.flavour).to_lowercase(), s("flavour"));
    assert_eq!(
        nv.fabric_manager_version.as_ref().unwrap().as_str(),
        s("fabric_manager_version")
    );
    assert_eq!(
        hw.gpu_link_min_speed.unwrap().0.to_string(),
        s("gpu_link_min_speed")
    );
    assert_eq!(hw.gpu_link_min_width, Some(n("gpu_link_min_width")));
    assert_eq!(hw.secure_boot, v.bom["secure_boot"].as_bool());
}

#[test]
fn every_variant_yields_its_fault() {
    let v = variants();
    let b = bom();
    // Every variant directory is listed, and every listed variant exists.
    let mut dirs: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut listed: Vec<String> = v.variant.iter().map(|x| x.name.clone()).collect();
    listed.sort();
    assert_eq!(dirs, listed);
    let mut table = BTreeMap::new();
    for var in &v.variant {
        let r = run(&fixtures().join(&var.name), &b, &opts());
        let got = r.decide().map(|(f, c)| (f, c.name.clone(), c.transient));
        table.insert(var.name.clone(), format!("{got:?}"));
        let ctx = || {
            format!(
                "{}: {} -> {}\n{:#?}",
                var.name,
                var.summary,
                r.summary(),
                r.checks
            )
        };
        match var.fault.as_str() {
            "none" => assert!(got.is_none(), "{}", ctx()),
            f => {
                let (fault, check, transient) =
                    got.clone().unwrap_or_else(|| panic!("no fault: {}", ctx()));
                let want = match f {
                    "image" => Fault::Image,
                    "hardware" | "transient" => Fault::Hardware,
                    other => panic!("unknown fault {other} in variants.toml"),
                };
                assert_eq!(fault, want, "{}", ctx());
                assert_eq!(transient, f == "transient", "{}", ctx());
                assert_eq!(Some(check.as_str()), deciding_check(&var.name), "{}", ctx());
            }
        }
    }
    eprintln!("{table:#?}");
}

#[test]
fn the_good_node_in_detail() {
    let r = run(&fixtures().join("good"), &bom(), &opts());
    assert!(
        r.checks.iter().all(|c| c.status != CheckStatus::Fail),
        "{:#?}",
        r.checks
    );
    assert_eq!(r.gpus.len(), 8);
    assert!(r
        .gpus
        .iter()
        .all(|g| g.model.as_deref() == Some("NVIDIA H200") && g.pci_id == "10de:2335"));
    assert_eq!(
        r.gpus.iter().map(|g| g.minor.unwrap()).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
    assert_eq!(r.nvswitches.len(), 4);
    assert!(r
        .nvswitches
        .iter()
        .all(|s| s.bios.as_deref() == Some("96.10.6d.00.01")));
    let d = r.driver.as_ref().unwrap();
    assert_eq!(
        (d.version.as_str(), d.flavour.as_str()),
        ("570.172.08", "open")
    );
    assert_eq!(d.module_taint.as_deref(), Some("O"));
    let fm = r.fabric_manager.as_ref().unwrap();
    assert_eq!(fm.package.as_deref(), Some("nvidia-fabricmanager-570"));
    assert_eq!(fm.version.as_deref(), Some("570.172.08"));
    assert_eq!(r.ports.len(), 10);
    let ib: Vec<_> = r
        .ports
        .iter()
        .filter(|p| p.link_layer == "InfiniBand")
        .collect();
    assert_eq!(ib.len(), 8);
    assert!(ib.iter().all(|p| p.up
        && p.rate == "400 Gb/sec (4X NDR)"
        && p.netdev.as_deref().is_some_and(|n| n.starts_with("ib"))));
    let roce: Vec<_> = r
        .ports
        .iter()
        .filter(|p| p.link_layer == "Ethernet")
        .collect();
    assert_eq!(
        roce.iter()
            .map(|p| p.netdev.clone().unwrap())
            .collect::<Vec<_>>(),
        ["eth0", "eth1"]
    );
    assert!(roce.iter().all(|p| p.admin_up && !p.up));
    assert_eq!(r.nvme.len(), 2);
    assert_eq!(r.nvme[0].model, "SAMSUNG MZ1L2960HCJR-00A07");
    assert_eq!(r.nvme[0].namespaces, ["nvme0n1"]);
    assert_eq!(r.nvme[1].namespaces, ["nvme1c1n1"]);
    let gpu_links: Vec<_> = r
        .links
        .iter()
        .filter(|l| l.role == preflight::pci::Role::Gpu)
        .collect();
    assert_eq!(gpu_links.len(), 8);
    assert!(gpu_links
        .iter()
        .all(|l| l.speed.as_deref() == Some("32.0 GT/s") && l.width == 16 && !l.downtrained));
    assert!(r
        .aer
        .iter()
        .all(|a| a.correctable + a.nonfatal + a.fatal == 0));
    assert_eq!(r.platform.secure_boot, Some(true));
    assert_eq!(r.platform.lockdown.as_deref(), Some("integrity"));
    assert_eq!(r.platform.taint.as_deref(), Some("O"));
    // The report round-trips through JSON.
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(serde_json::from_str::<PreflightReport>(&json).unwrap(), r);
}

#[test]
fn failing_variants_name_what_is_wrong() {
    let b = bom();
    let detail = |v: &str, check: &str| {
        let r = run(&fixtures().join(v), &b, &opts());
        r.check(check).unwrap().detail.clone()
    };
    let d = detail("gpu-missing-from-pci", "gpus");
    assert!(
        d.starts_with("7 NVIDIA GPU(s) on PCI, the BOM expects 8") && !d.contains("0000:c3:00.0"),
        "{d}"
    );
    let d = detail("driver-sees-7", "gpu-driver");
    assert!(
        d.contains("sees 7 of the 8") && d.contains("0000:d1:00.0 (bound to no driver)"),
        "{d}"
    );
    let d = detail("fabricmanager-mismatch", "fabric-manager");
    assert!(
        d.contains("fabric manager 570.124.06 does not match the driver 570.172.08"),
        "{d}"
    );
    let d = detail("driver-version-mismatch", "driver-version");
    assert!(
        d.contains("driver 570.124.06 is loaded, the BOM names 570.172.08"),
        "{d}"
    );
    let d = detail("flavour-proprietary", "driver-flavour");
    assert!(
        d.contains("the proprietary driver is loaded, the BOM names the open flavour"),
        "{d}"
    );
    let d = detail("port-down", "mlx5-ports");
    assert!(
        d.contains("7 of 8 InfiniBand")
            && d.contains("mlx5_3 port 1: 1: DOWN / 2: Polling / 10 Gb/sec (4X SDR)"),
        "{d}"
    );
    let d = detail("gpu-link-x8", "gpu-links");
    assert!(
        d.contains("0000:52:00.0 at 32.0 GT/s x8 (device max 32.0 GT/s x16"),
        "{d}"
    );
    let d = detail("gpu-link-gen4", "gpu-links");
    assert!(d.contains("0000:9d:00.0 at 16.0 GT/s x16"), "{d}");
    let d = detail("aer-errors", "aer");
    assert!(d.contains("0000:52:00.0: 0 fatal, 1 non-fatal, 41 correctable (RxErr 37, BadTLP 2, BadDLLP 5, CmpltTO 1)"), "{d}");
    let d = detail("nvme-missing", "nvme");
    assert!(d.starts_with("1 of 2 NVMe controller(s) live"), "{d}");
    let d = detail("gpu-model-h100", "gpus");
    assert!(d.contains("0000:1b:00.0 is 10de:2330"), "{d}");
    // The RoCE ports are left alone before bring-up; the IB ports still count.
    let r = run(&fixtures().join("eth-not-brought-up"), &b, &opts());
    assert!(r
        .ports
        .iter()
        .filter(|p| p.link_layer == "Ethernet")
        .all(|p| !p.admin_up && p.state == "1: DOWN"));
    assert_eq!(r.check("mlx5-ports").unwrap().status, CheckStatus::Pass);
}

fn regular_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            regular_files(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

#[test]
fn the_wait_ends_when_the_ports_come_up() {
    let tmp = std::fs::canonicalize(common::tmpdir("preflight-wait")).unwrap();
    common::copy_tree(&fixtures().join("ib-port-init"), &tmp);
    let mut states = Vec::new();
    regular_files(&tmp.join("sys/devices"), &mut states);
    states.retain(|p| {
        p.ends_with("ports/1/state") && std::fs::read_to_string(p).unwrap() == "2: INIT\n"
    });
    assert_eq!(states.len(), 8);
    let b = bom();
    let o = Options {
        link_wait: Duration::from_secs(30),
        poll: Duration::from_millis(20),
    };
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        for p in states {
            std::fs::write(p, "4: ACTIVE\n").unwrap();
        }
    });
    let r = run(&tmp, &b, &o);
    t.join().unwrap();
    assert!(r.decide().is_none(), "{}", r.summary());
    assert!(
        r.waited_ms >= 250 && r.waited_ms < 30_000,
        "{}",
        r.waited_ms
    );
    // Still INIT at a short deadline: transient, after the wait.
    let r = run(
        &fixtures().join("ib-port-init"),
        &b,
        &Options {
            link_wait: Duration::from_millis(200),
            poll: Duration::from_millis(50),
        },
    );
    let c = r.check("mlx5-ports").unwrap();
    assert!(
        c.failed() && c.transient && c.detail.contains("(after waiting 0."),
        "{c:?}"
    );
    assert!(r.waited_ms >= 200);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn garbage_in_any_file_names_the_file() {
    let tmp = std::fs::canonicalize(common::tmpdir("preflight-garbage")).unwrap();
    common::copy_tree(&fixtures().join("good"), &tmp);
    let b = bom();
    let key = |r: &PreflightReport| {
        r.checks
            .iter()
            .map(|c| (c.name.clone(), c.status, c.fault, c.detail.clone()))
            .collect::<Vec<_>>()
    };
    let base = key(&run(&tmp, &b, &opts()));
    let mut files = Vec::new();
    regular_files(&tmp, &mut files);
    files.sort();
    assert!(files.len() > 500, "{}", files.len());
    let mut named = Vec::new();
    for f in &files {
        let orig = std::fs::read(f).unwrap();
        for garbage in [&b""[..], &b"\xff\xfe\x00garbage\x07"[..]] {
            std::fs::write(f, garbage).unwrap();
            let r = run(&tmp, &b, &opts());
            std::fs::write(f, &orig).unwrap();
            if key(&r) == base {
                continue;
            }
            let shown = f.display().to_string();
            assert!(
                r.checks.iter().any(|c| {
                    // Facts the BOM only reports (lockdown) warn; the rest fail.
                    matches!(c.status, CheckStatus::Fail | CheckStatus::Warn)
                        && c.detail.contains(&shown)
                }),
                "{shown} = {garbage:?}: no failing check names the file:\n{:#?}",
                r.checks
                    .iter()
                    .filter(|c| c.status != CheckStatus::Pass)
                    .collect::<Vec<_>>()
            );
            named.push(f.strip_prefix(&tmp).unwrap().display().to_string());
        }
    }
    named.dedup();
    eprintln!(
        "{} of {} files are read by the preflight",
        named.len(),
        files.len()
    );
    // The files every check depends on are among them.
    for must in [
        "proc/driver/nvidia/version",
        "proc/driver/nvidia/gpus/0000:1b:00.0/information",
        "proc/driver/nvidia-nvswitch/devices/0000:07:00.0/information",
        "proc/cmdline",
        "proc/sys/kernel/tainted",
        "root/var/lib/dpkg/status",
        "sys/module/nvidia/version",
        "sys/module/nvidia/taint",
        "sys/kernel/security/lockdown",
        "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0/class",
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0/current_link_width",
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:03.0/0000:1b:00.0/aer_dev_fatal",
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/infiniband/mlx5_0/ports/1/state",
        "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0/infiniband/mlx5_0/fw_ver",
        "sys/devices/pci0000:a7/0000:a7:01.0/0000:a8:00.0/nvme/nvme0/model",
    ] {
        assert!(named.iter().any(|n| n == must), "{must} is not read");
    }
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A front-end NIC of another model, firmware and width than the compute fabric's passes
/// under the fixture node's BOM (which selects the fabric by model and address) and is
/// held to its own `frontend_link_*` bounds; without the selection it would fail the
/// fabric's firmware and link checks. The GPU's and NVSwitch's firmware keys are judged.
#[test]
fn a_front_end_nic_is_judged_on_its_own_terms() {
    let tmp = std::fs::canonicalize(common::tmpdir("preflight-frontend")).unwrap();
    common::copy_tree(&fixtures().join("good"), &tmp);
    let sys = tmp.join("sys");
    // The dual-port front-end function becomes an x8 BlueField-3 (Gen5), firmware 32.x.
    for (f, dev) in [("0000:aa:00.0", "mlx5_5"), ("0000:aa:00.1", "mlx5_6")] {
        let dir = std::fs::canonicalize(sys.join("bus/pci/devices").join(f)).unwrap();
        std::fs::write(dir.join("device"), "0xa2dc\n").unwrap();
        std::fs::write(dir.join("current_link_width"), "8\n").unwrap();
        std::fs::write(dir.join("max_link_width"), "8\n").unwrap();
        std::fs::write(
            dir.join("infiniband").join(dev).join("fw_ver"),
            "32.43.1010\n",
        )
        .unwrap();
    }
    let b = bom();
    let r = run(&tmp, &b, &opts());
    assert!(r.decide().is_none(), "{}", r.summary());
    let c = r.check("frontend-links").unwrap();
    assert_eq!(c.status, CheckStatus::Pass, "{c:?}");
    assert!(r
        .check("mlx5-firmware")
        .unwrap()
        .detail
        .contains("8 device(s)"));
    let front: Vec<_> = r.ports.iter().filter(|p| p.frontend).collect();
    assert_eq!(front.len(), 2);
    assert!(front.iter().all(|p| p.fw_ver == "32.43.1010" && !p.up));
    assert_eq!(
        r.links
            .iter()
            .filter(|l| l.role == preflight::pci::Role::FrontendNic)
            .count(),
        2
    );
    // Held to its own minimum.
    let mut strict = b.clone();
    strict.hardware.frontend_link_min_width = Some(16);
    let r = run(&tmp, &strict, &opts());
    let (fault, c) = r.decide().unwrap();
    assert_eq!(
        (fault, c.name.as_str()),
        (Fault::Hardware, "frontend-links")
    );
    assert!(c.detail.contains("0000:aa:00.0"), "{}", c.detail);
    // Without the selection every mlx5 function is the fabric's: the BlueField fails its
    // firmware and its link.
    let mut all = b.clone();
    all.hardware.mlx5_pci_ids.clear();
    all.hardware.mlx5_pci_addresses.clear();
    let r = run(&tmp, &all, &opts());
    let fw = r.check("mlx5-firmware").unwrap();
    assert!(
        fw.failed() && fw.detail.contains("mlx5_5 runs 32.43.1010"),
        "{fw:?}"
    );
    let links = r.check("nic-links").unwrap();
    assert!(
        links.failed() && links.detail.contains("0000:aa:00.1"),
        "{links:?}"
    );
    // Firmware of GPUs and NVSwitches: as the driver prints it, any case in the BOM.
    let mut fw = b.clone();
    fw.hardware.gpu_vbios = Some(validator::config::bom::hardware::FwVersion(
        "96.00.A5.00.01".into(),
    ));
    let r = run(&tmp, &fw, &opts());
    assert_eq!(r.check("gpu-vbios").unwrap().status, CheckStatus::Pass);
    assert_eq!(r.check("nvswitch-bios").unwrap().status, CheckStatus::Pass);
    let info = tmp.join("proc/driver/nvidia/gpus/0000:43:00.0/information");
    let text = std::fs::read_to_string(&info).unwrap();
    std::fs::write(&info, text.replace("96.00.a5.00.01", "96.00.a4.00.02")).unwrap();
    let r = run(&tmp, &b, &opts());
    let (fault, c) = r.decide().unwrap();
    assert_eq!((fault, c.name.as_str()), (Fault::Hardware, "gpu-vbios"));
    assert!(
        c.detail.contains("0000:43:00.0 runs 96.00.a4.00.02"),
        "{}",
        c.detail
    );
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn make_fixtures_check_passes() {
    let out = std::process::Command::new("python3")
        .arg(workspace().join("scripts/make-fixtures"))
        .arg("--check")
        .output()
        .expect("python3 runs scripts/make-fixtures (install python3)");
    assert!(
        out.status.success(),
        "scripts/make-fixtures --check: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

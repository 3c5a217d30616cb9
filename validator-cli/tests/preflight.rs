//! `validator preflight`, run as a process against the hardware fixture trees, this
//! machine's own `/sys` and `/proc`, and a root holding the real NVIDIA modules.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use test_support as common;

use std::path::{Path, PathBuf};
use std::process::Command;

mod run;
use run::validator;

fn ws() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(v: &str) -> PathBuf {
    ws().join("validator/tests/fixtures/hw").join(v)
}

fn h200() -> String {
    ws().join("examples/hgx-h200-training.toml")
        .display()
        .to_string()
}

/// `preflight` over one fixture variant with the H200 BOM and no wait.
fn on_fixture(v: &str, extra: &[&str]) -> (i32, String, String) {
    let d = fixture(v);
    let mut args: Vec<String> = vec!["preflight".into(), "--bom".into(), h200()];
    for (flag, sub) in [("--sysfs", "sys"), ("--procfs", "proc"), ("--root", "root")] {
        args.push(flag.into());
        args.push(d.join(sub).display().to_string());
    }
    args.extend(["--wait".to_string(), "0".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    validator(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn verdicts_and_exit_codes_on_fixtures() {
    let (code, out, err) = on_fixture("good", &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("PASS gpus: 8 NVIDIA GPU(s) on PCI")),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("0 failed, 0 warned, 0 skipped)"),
        "{out}"
    );
    let (code, out, _) = on_fixture("fabricmanager-mismatch", &[]);
    assert_eq!(code, 1);
    assert!(out.contains("FAIL fabric-manager [image]: fabric manager 570.124.06 does not match the driver 570.172.08"), "{out}");
    assert!(
        out.trim_end().ends_with(")")
            && out
                .lines()
                .last()
                .unwrap()
                .starts_with("preflight: image fault: fabric-manager:"),
        "{out}"
    );
    let (code, out, _) = on_fixture("ib-port-init", &[]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL mlx5-ports [hardware, transient]: 0 of 8"),
        "{out}"
    );
    // JSON: the same verdict, typed.
    let (code, out, _) = on_fixture("gpu-link-x8", &["--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["pass"], false);
    assert_eq!(v["fault"], "hardware");
    assert!(
        v["reason"].as_str().unwrap().starts_with(
            "gpu-links: GPU link(s) below the BOM's >= 32.0 GT/s x16: 0000:52:00.0 at 32.0 GT/s x8"
        ),
        "{v}"
    );
    assert_eq!(v["preflight"]["gpus"].as_array().unwrap().len(), 8);
    let (code, out, _) = on_fixture("good", &["--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["pass"].as_bool(), v["fault"].is_null()),
        (Some(true), true)
    );
}

#[test]
fn unusable_inputs_exit_2_naming_them() {
    let good = fixture("good");
    let sys = good.join("sys").display().to_string();
    let missing = good.join("nope").display().to_string();
    let bom = h200();
    // A missing BOM, a directory as BOM, a sysfs that is a file or missing.
    let (code, _, err) = validator(&["preflight", "--bom", &missing, "--sysfs", &sys]);
    assert_eq!(code, 2);
    assert!(err.contains(&missing), "{err}");
    let (code, _, err) = validator(&["preflight", "--bom", &sys]);
    assert_eq!(code, 2);
    assert!(err.contains("is a directory, not a regular file"), "{err}");
    let (code, _, err) = validator(&["preflight", "--bom", &bom, "--sysfs", &bom]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("--sysfs {bom}: not a directory")),
        "{err}"
    );
    let (code, _, err) = validator(&["preflight", "--bom", &bom, "--procfs", &missing]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--procfs") && err.contains("No such file"),
        "{err}"
    );
    // A BOM with a bad hardware value: its line.
    let tmp = common::tmpdir("cli-preflight-bom");
    let bad = tmp.join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&bom)
            .unwrap()
            .replace("gpu_link_min_width = 16", "gpu_link_min_width = 5"),
    )
    .unwrap();
    let (code, _, err) = validator(&["preflight", "--bom", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.toml:") && err.contains("not a PCIe link width"),
        "{err}"
    );
    // Bad usage.
    let (code, _, _) = validator(&["preflight", "--bom", &bom, "--wait", "99999"]);
    assert_eq!(code, 2);
    let (code, _, _) = validator(&["preflight", "--bom", &bom, "--vmlinuz", "/x"]);
    assert_eq!(code, 2, "--vmlinuz needs --gate-modules");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn runs_against_this_machine() {
    // The live /sys and /proc of the machine running the tests (no GPU here): the QEMU
    // node's BOM (no GPU expected) passes, the H200's fails on hardware, not a crash.
    let (code, out, err) = validator(&[
        "preflight",
        "--bom",
        ws().join("examples/qemu-node.toml").to_str().unwrap(),
        "--wait",
        "0",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS pci:"), "{out}");
    let (code, out, err) = validator(&["preflight", "--bom", &h200(), "--wait", "0"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("FAIL gpus [hardware]: 0 NVIDIA GPU(s) on PCI, the BOM expects 8"),
        "{out}"
    );
}

#[test]
fn gate_modules_judges_the_real_nvidia_driver_on_a_root() {
    let nv = ws().join("target/nvidia");
    let kroot = common::kernel_root("default");
    let release = common::kernel_release("default");
    let signed = nv.join("proprietary").join(&release).join("signed");
    assert!(
        signed.join("nvidia.ko").is_file(),
        "{} missing: run scripts/build-nvidia",
        signed.display()
    );
    // A root laid out as DKMS leaves it: the kernel's tree, the driver in updates/dkms,
    // depmod's index; and the BOM naming the proprietary flavour and its root modules.
    let root = common::tmpdir("cli-preflight-gate");
    let dir = root.join("lib/modules").join(&release);
    std::fs::create_dir_all(dir.join("updates/dkms")).unwrap();
    let ktree = kroot.join("lib/modules").join(&release);
    std::os::unix::fs::symlink(
        std::fs::canonicalize(ktree.join("kernel")).unwrap(),
        dir.join("kernel"),
    )
    .unwrap();
    for f in [
        "modules.builtin",
        "modules.order",
        "modules.builtin.modinfo",
    ] {
        std::fs::copy(ktree.join(f), dir.join(f)).unwrap();
    }
    for m in ["nvidia.ko", "nvidia-uvm.ko"] {
        std::os::unix::fs::symlink(
            std::fs::canonicalize(signed.join(m)).unwrap(),
            dir.join("updates/dkms").join(m),
        )
        .unwrap();
    }
    let st = Command::new("depmod")
        .arg("-b")
        .arg(&root)
        .arg(&release)
        .status()
        .unwrap();
    assert!(st.success());
    let bom = root.join("bom.toml");
    let text = std::fs::read_to_string(h200())
        .unwrap()
        .replace("release = \"6.1.0-57-amd64\"", &format!("release = \"{release}\""))
        .replace("flavour = \"open\"", "flavour = \"proprietary\"")
        // The fleet certificate comes with --trust (and is left out to see the refusal).
        .replace("trust = [\"certs/fleet.pem\"]", "trust = []")
        .replace(
            "root = [\n  \"mlx5_core\", \"mlx5_ib\",\n  \"nvidia\", \"nvidia_uvm\", \"nvidia_modeset\", \"nvidia_peermem\",\n]",
            "root = [\"nvidia\", \"nvidia_uvm\"]",
        );
    assert!(text.contains("root = [\"nvidia\", \"nvidia_uvm\"]") && text.contains("trust = []"));
    std::fs::write(&bom, &text).unwrap();
    // The kernel is configuration here: its vmlinux ELF, no xz decode in each run.
    let vz = common::vmlinux("default");
    let fleet = nv.join("fleet-key/fleet.crt");
    let d = fixture("good");
    let run = |trust: bool| {
        let mut a = vec![
            "preflight".to_string(),
            "--bom".into(),
            bom.display().to_string(),
            "--sysfs".into(),
            d.join("sys").display().to_string(),
            "--procfs".into(),
            d.join("proc").display().to_string(),
            "--root".into(),
            root.display().to_string(),
            "--wait".into(),
            "0".into(),
            "--gate-modules".into(),
            "--vmlinuz".into(),
            vz.display().to_string(),
        ];
        if trust {
            a.extend(["--trust".to_string(), fleet.display().to_string()]);
        }
        validator(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (_, out, err) = run(true);
    for m in ["nvidia", "nvidia_uvm", "drm"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("PASS module {m} signer="))),
            "{m}: {out}{err}"
        );
    }
    assert!(
        out.contains("PASS root-modules: 3 module(s) pass the gate (not loaded)"),
        "{out}"
    );
    // Without the fleet key the driver is refused: an image fault, decided first.
    let (code, out, _) = run(false);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL module nvidia: signer Boot gate test fleet module signing key"),
        "{out}"
    );
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("preflight: image fault: root-modules: the gate refuses nvidia:"),
        "{out}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn capture_node_keeps_every_verdict() {
    // scripts/capture-node over each fixture variant (standing in for a live node): the
    // capture must hold every file the checks read, so both verdicts agree.
    let variants = std::fs::read_dir(ws().join("validator/tests/fixtures/hw")).unwrap();
    let mut n = 0;
    for v in variants
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
    {
        let d = v.path();
        let out = common::tmpdir(&format!("capture-{}", v.file_name().to_string_lossy()));
        std::fs::remove_dir_all(&out).unwrap();
        let o = Command::new("python3")
            .arg(ws().join("scripts/capture-node"))
            .arg(&out)
            .arg("--sysfs")
            .arg(d.join("sys"))
            .arg("--procfs")
            .arg(d.join("proc"))
            .arg("--root")
            .arg(d.join("root"))
            .arg("--validator")
            .arg(env!("CARGO_BIN_EXE_validator"))
            .arg("--bom")
            .arg(h200())
            .output()
            .expect("python3 runs scripts/capture-node");
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{}: {text}", d.display());
        assert!(
            text.contains("\nlive:") && text.contains("\ncapture:"),
            "{text}"
        );
        // Serials and GPU UUIDs are replaced.
        let gpus = out.join("proc/driver/nvidia/gpus");
        if let Ok(rd) = std::fs::read_dir(&gpus) {
            for g in rd.filter_map(Result::ok) {
                let info = std::fs::read_to_string(g.path().join("information")).unwrap();
                assert!(info.contains("GPU UUID: \t GPU-fa4e"), "{info}");
            }
        }
        std::fs::remove_dir_all(&out).unwrap();
        n += 1;
    }
    assert_eq!(n, 20);
}

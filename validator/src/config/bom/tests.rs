//! Unit tests of the BOM: parsing, digests, and each refusal on the line of its key.

use super::*;

const GOOD: &str = r#"
schema = 1
image_id = "qemu-node-2026.11.30"

[kernel]
release = "6.1.0-57-amd64"

[nvidia]
driver_version = "550.127.05"
flavour = "open"
fabric_manager_version = "550.127.05"

[components]
kubelet = "1.31.4"

# Firmware versions the preflight checks are [hardware] keys
# (gpu_vbios, nvswitch_bios, mlx5_fw_version).

[modules]
load = ["virtio_pci", "virtio-blk", "ext4"]

[hardware]
gpus = 8
"#;

fn err(text: &str) -> (usize, String) {
    match parse(text.as_bytes(), Path::new("bom.toml")) {
        Err(BomError::Invalid { line, message, .. }) => (line, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn parses_and_digests() {
    let b = parse(GOOD.as_bytes(), Path::new("bom.toml")).unwrap();
    assert_eq!(b.bom.kernel.release.as_str(), "6.1.0-57-amd64");
    assert_eq!(b.bom.nvidia.as_ref().unwrap().flavour, Flavour::Open);
    assert_eq!(b.bom.modules.load[1].normalized(), "virtio_blk");
    assert_eq!(b.bom.hardware.gpus, Some(8));
    assert_eq!(b.sha256, hex(&Sha256::digest(GOOD.as_bytes())));
    // Round trip through to_toml keeps the content.
    let again = parse(b.bom.to_toml().unwrap().as_bytes(), Path::new("x")).unwrap();
    assert_eq!(again.bom, b.bom);
}

#[test]
fn unknown_key_names_its_line() {
    let text = GOOD.replace("gpus = 8", "gpus = 8\ngpu = 8");
    let (line, msg) = err(&text);
    assert_eq!(line, 24);
    assert!(msg.contains("unknown field `gpu`"), "{msg}");
}

/// `[firmware]` is refused with a pointer to the keys the preflight checks.
#[test]
fn firmware_section_is_refused_with_its_replacements() {
    let text = GOOD.replace(
        "# Firmware versions the preflight checks are [hardware] keys\n#",
        "[firmware]\ncx7 = \"28.42.1000\"\n#",
    );
    let (line, msg) = err(&text);
    assert_eq!(line, 16);
    assert!(msg.contains("unknown field `firmware`"), "{msg}");
    assert!(msg.contains("hardware.mlx5_fw_version"), "{msg}");
}

/// A BOM naming an OFED must let the OFED's modules it loads be out of tree.
#[test]
fn ofed_modules_must_be_allowed_out_of_tree() {
    let root = "[modules]\nroot = [\"nvidia\", \"mlx5-ib\"]\n";
    let base = format!(
        "schema = 1\nimage_id = \"x\"\n[kernel]\nrelease = \"6.1.0-57-amd64\"\n\
         [components]\nofed = \"24.10-1.1.4.0\"\n{root}[policy]\nout_of_tree = [\"nvidia\"]\n"
    );
    let (line, msg) = err(&base);
    assert_eq!(line, 8);
    assert!(
        msg.contains("components.ofed") && msg.contains("mlx5-ib") && msg.contains("out_of_tree"),
        "{msg}"
    );
    // Listed (either spelling): accepted; no OFED named: the kernel's in-tree mlx5 loads.
    let ok = base.replace("[\"nvidia\"]\n", "[\"nvidia\", \"mlx5_ib\"]\n");
    parse(ok.as_bytes(), Path::new("b")).unwrap();
    let no_ofed = base.replace("ofed = \"24.10-1.1.4.0\"", "kubelet = \"1.31.4\"");
    parse(no_ofed.as_bytes(), Path::new("b")).unwrap();
}

/// The compute fabric's selectors and the new firmware keys: checked values, no repeats.
#[test]
fn nic_selection_and_firmware_keys() {
    let hw = |extra: &str| GOOD.replace("gpus = 8", &format!("gpus = 8\n{extra}"));
    let b = parse(
        hw(
            "mlx5_pci_ids = [\"15b3:1021\"]\nmlx5_pci_addresses = [\"0000:18:00.0\"]\n\
            frontend_link_min_width = 8\ngpu_vbios = \"96.00.A5.00.01\"\n\
            nvswitch_bios = \"96.10.6D.00.01\"",
        )
        .as_bytes(),
        Path::new("b"),
    )
    .unwrap();
    let h = &b.bom.hardware;
    let cx7 = hardware::PciId::parse("15b3:1021");
    let bf3 = hardware::PciId::parse("15b3:a2dc");
    assert!(h.is_fabric_nic(Some("0000:18:00.0"), cx7));
    assert!(!h.is_fabric_nic(Some("0000:aa:00.0"), cx7));
    assert!(!h.is_fabric_nic(Some("0000:18:00.0"), bf3));
    assert!(!h.is_fabric_nic(None, None));
    assert!(Hardware::default().is_fabric_nic(None, None));
    for (extra, want) in [
        (
            "mlx5_pci_addresses = [\"0000:18:00.0\", \"0000:18:00.0\"]",
            "twice",
        ),
        (
            "mlx5_pci_addresses = [\"0000:18:00\"]",
            "invalid PCI address",
        ),
        (
            "mlx5_pci_addresses = [\"0000:1A:00.0\"]",
            "invalid PCI address",
        ),
        ("mlx5_pci_ids = [\"15b3:1021\", \"15B3:1021\"]", "twice"),
        ("frontend_link_min_width = 3", "not a PCIe link width"),
        ("gpu_vbios = \"96 00\"", "invalid firmware version"),
    ] {
        let (line, msg) = err(&hw(extra));
        assert_eq!(line, 24, "{extra}: {msg}");
        assert!(msg.contains(want), "{extra}: {msg}");
    }
}

#[test]
fn bad_values_name_their_line() {
    let (line, msg) = err(&GOOD.replace("\"open\"", "\"closed\""));
    assert_eq!(line, 10);
    assert!(msg.contains("closed"), "{msg}");
    let (line, msg) = err(&GOOD.replace("\"6.1.0-57-amd64\"", "\"6.1 amd64\""));
    assert_eq!(line, 6);
    assert!(msg.contains("invalid version"), "{msg}");
    let (line, msg) = err(&GOOD.replace("\"ext4\"", "\"ext4/../x\""));
    assert_eq!(line, 20);
    assert!(msg.contains("invalid module name"), "{msg}");
    let (line, _) = err(&GOOD.replace("gpus = 8", "gpus = -1"));
    assert_eq!(line, 23);
    let (line, msg) = err(&GOOD.replace("schema = 1", "schema = 2"));
    assert_eq!(line, 2);
    assert!(msg.contains("schema 2"), "{msg}");
    let (line, msg) = err(&GOOD.replace("\"ext4\"", "\"virtio_blk\""));
    assert_eq!(line, 20);
    assert!(msg.contains("listed twice"), "{msg}");
}

/// `[report]`: defaults when absent; directories, namespace and pool checked, on the
/// section's line.
#[test]
fn report_section() {
    let b = parse(GOOD.as_bytes(), Path::new("bom.toml")).unwrap().bom;
    assert_eq!(b.report, ReportCfg::default());
    assert_eq!(b.report.textfile_dir, "/var/lib/prometheus/node-exporter");
    let with = |body: &str| format!("{GOOD}\n[report]\n{body}\n");
    let ok = parse(
        with("pool = \"h200-a\"\ntextfile_dir = \"\"\nnfd_namespace = \"gpu.example.com\"")
            .as_bytes(),
        Path::new("bom.toml"),
    )
    .unwrap()
    .bom;
    assert_eq!(ok.report.pool.as_deref(), Some("h200-a"));
    assert_eq!(ok.report.nfd_dir, ReportCfg::default().nfd_dir);
    let section = GOOD.lines().count() + 2;
    for (body, why) in [
        ("textfile_dir = \"var/lib\"", "textfile_dir"),
        ("nfd_dir = \"/etc/../x\"", "nfd_dir"),
        ("nfd_namespace = \"kubernetes.io\"", "nfd_namespace"),
        ("nfd_namespace = \"Upper.example\"", "nfd_namespace"),
        ("pool = \"has space\"", "pool"),
    ] {
        let (line, msg) = err(&with(body));
        assert_eq!(line, section, "{body}: {msg}");
        assert!(msg.contains(why), "{body}: {msg}");
    }
    let (_, msg) = err(&with("colour = \"red\""));
    assert!(msg.contains("colour"), "{msg}");
}

#[test]
fn missing_and_malformed() {
    let (_, msg) = err("schema = 1\n");
    assert!(msg.contains("missing field"), "{msg}");
    let (line, _) = err("schema = 1\nimage_id = \n");
    assert_eq!(line, 2);
    let (line, msg) = err("schema = 1\n\u{0}");
    assert_eq!(line, 2, "{msg}");
    match parse(b"\xff\xfe", Path::new("b")) {
        Err(BomError::Invalid { message, .. }) => assert_eq!(message, "not UTF-8"),
        other => panic!("{other:?}"),
    }
}

/// The line of the first line of `text` starting with `prefix`.
fn line_starting(text: &str, prefix: &str) -> usize {
    text.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
}

/// A NUL byte or lone carriage returns: the error says what is wrong, never an
/// empty message.
#[test]
fn control_characters_are_named() {
    let (line, msg) = err("schema = 1\n\u{0}");
    assert_eq!(line, 2);
    assert!(msg.contains("NUL"), "{msg}");
    let (line, msg) = err("schema = 1\nimage_id = \"a\0b\"\n");
    assert_eq!(line, 2);
    assert!(msg.contains("NUL"), "{msg}");
    // In a comment the parser has no message at all.
    let (line, msg) = err("schema = 1\n# a \u{0} b\n");
    assert_eq!(line, 2);
    assert!(msg.contains("NUL"), "{msg}");
    let (_, msg) = err("schema = 1\n# a \u{7} b\n");
    assert!(msg.contains("U+0007"), "{msg}");
    let (line, msg) = err(&GOOD.replace('\n', "\r"));
    assert_eq!(line, 1);
    assert!(msg.contains("carriage return"), "{msg}");
    // CRLF is fine.
    assert!(parse(GOOD.replace('\n', "\r\n").as_bytes(), Path::new("b")).is_ok());
}

/// A bad measure.pcr is reported on its own line, not on the first line that starts
/// with "pcr".
#[test]
fn measure_pcr_names_its_own_line() {
    let text = GOOD.replace("cx7 = \"28.42.1000\"", "pcr_fw = \"1.0\"")
        + "\n[measure]\ntimeout_ms = 100\npcr = 11\n";
    let (line, msg) = err(&text);
    assert_eq!(line, line_starting(&text, "pcr ="), "{msg}");
    assert!(msg.contains("measure.pcr 11"), "{msg}");
    let text = GOOD.to_string() + "\n[measure]\npcr = 7\ntimeout_ms = 5\n";
    let (line, msg) = err(&text);
    assert_eq!(line, line_starting(&text, "timeout_ms"), "{msg}");
    // Dotted keys and inline tables name their line too.
    let text = GOOD.replace("[nvidia]", "measure.pcr = 99\n\n[nvidia]");
    let (line, _) = err(&text);
    assert_eq!(line, line_starting(&text, "measure.pcr"));
}

/// BOMs the init could not boot with are refused by parse (so by the init and by
/// `validator bom check` alike), each on the line of the key at fault.
#[test]
fn boms_no_boot_could_use_are_refused_on_the_key_line() {
    let hash32 = "ab".repeat(32);
    let good_verity = format!(
        "\n[verity]\nsource = \"bom\"\nroot_hash = \"{hash32}\"\nalgorithm = \"sha256\"\n\
         data_block_size = 4096\nhash_block_size = 4096\ndata_blocks = 256\nsalt = \"{}\"\n",
        "cd".repeat(256)
    );
    assert!(parse((GOOD.to_string() + &good_verity).as_bytes(), Path::new("b")).is_ok());
    let cases: Vec<(String, &str, &str)> = vec![
        (
            "\n[verity]\nsource = \"bom\"\n".into(),
            "source",
            "no verity.root_hash",
        ),
        (
            "\n[verity]\nsource = \"bom\"\nroot_hash = \"00\"\n".into(),
            "root_hash",
            "has 1 bytes",
        ),
        (
            format!("\n[verity]\nalgorithm = \"sha512\"\nroot_hash = \"{hash32}\"\n"),
            "root_hash",
            "not 64 bytes for sha512",
        ),
        (
            "\n[verity]\nroot_hash = \"\"\n".into(),
            "root_hash",
            "has 0 bytes",
        ),
        (
            "\n[verity]\ndata_block_size = 3\n".into(),
            "data_block_size",
            "data_block_size 3 is not a power of two",
        ),
        (
            "\n[verity]\ndata_block_size = 8192\n".into(),
            "data_block_size",
            "page size",
        ),
        (
            "\n[verity]\nhash_block_size = 0\n".into(),
            "hash_block_size",
            "hash_block_size 0",
        ),
        (
            "\n[verity]\ndata_blocks = 0\n".into(),
            "data_blocks",
            "data_blocks 0",
        ),
        (
            format!("\n[verity]\nsalt = \"{}\"\n", "ab".repeat(300)),
            "salt",
            "300 bytes",
        ),
        (
            "\n[policy.module_sha256]\n\"../../etc/passwd x\" = \"".to_string()
                + &"0".repeat(64)
                + "\"\n",
            "\"../../etc",
            "is not a module name",
        ),
        (
            "\n[policy.module_sha256]\n\"\" = \"".to_string() + &"0".repeat(64) + "\"\n",
            "\"\"",
            "\"\" is not a module name",
        ),
        (
            format!(
                "\n[policy.module_sha256]\nmlx5-core = \"{}\"\nmlx5_core = \"{}\"\n",
                "0".repeat(64),
                "1".repeat(64)
            ),
            "mlx5_core",
            "pinned twice",
        ),
        (
            "\n[policy]\nout_of_tree = [\"nvidia\",\n  \"nvidia-uvm\",\n  \"nvidia_uvm\"]\n".into(),
            "  \"nvidia_uvm",
            "listed twice in policy.out_of_tree",
        ),
    ];
    for (extra, key, want) in cases {
        let text = GOOD.to_string() + &extra;
        let (line, msg) = err(&text);
        assert!(msg.contains(want), "{extra}: {msg}");
        assert_eq!(line, line_starting(&text, key), "{extra}: {msg}");
    }
}

/// `[slot]` and `[report]` refusals are typed: the variant names the key and the value,
/// and the BOM's message keeps the section prefix.
#[test]
fn slot_and_report_errors_are_typed() {
    assert_eq!(
        Slot::from_toml("max_boots = 0"),
        Err(SlotConfigError::MaxBoots(0))
    );
    assert_eq!(
        Slot::from_toml("grubenv = \"EFI/grubenv\""),
        Err(SlotConfigError::NotEspPath {
            key: "grubenv",
            value: "EFI/grubenv".into()
        })
    );
    assert!(matches!(
        Slot::from_toml("\nmax_boots = \"x\""),
        Err(SlotConfigError::Toml { line: 2, .. })
    ));
    let r = ReportCfg {
        pool: Some("has space".into()),
        ..ReportCfg::default()
    };
    assert_eq!(r.check(), Err(ReportCfgError::Pool("has space".into())));
    let (_, msg) = err(&format!("{GOOD}\n[slot]\nmax_boots = 17\n"));
    assert_eq!(msg, "slot: max_boots 17 is outside 1..16");
}

/// Every path-valued key refuses an empty path (or one naming no file) on the key's line,
/// naming the key: `policy.trust` (mkinitramfs read "" as the BOM's directory and said
/// only ": No such file or directory"), the `[slot]` ESP paths and `verity.critical`.
/// The `[report]` directories take "" to turn an output off.
#[test]
fn empty_paths_are_refused_on_their_line() {
    for bad in ["\"\"", "\".\"", "\"certs/\"", "\"..\"", "\"a\\u0000b\""] {
        let (line, msg) = err(&format!(
            "{GOOD}\n[policy]\ntrust = [\n  \"ok.pem\",\n  {bad},\n]\n"
        ));
        assert_eq!(line, 28, "{bad}: {msg}");
        assert!(msg.starts_with("policy.trust[1] "), "{bad}: {msg}");
    }
    parse(
        format!("{GOOD}\n[policy]\ntrust = [\"ok.pem\", \"certs/fleet.der\"]\n").as_bytes(),
        Path::new("bom.toml"),
    )
    .unwrap();
    for key in ["grubenv", "kernel", "initrd", "state_dir"] {
        let (line, msg) = err(&format!("{GOOD}\n[slot]\nmax_boots = 3\n{key} = \"\"\n"));
        assert_eq!(line, 27, "{key}: {msg}");
        assert!(msg.contains(&format!("slot: {key} \"\"")), "{msg}");
    }
    let (line, msg) = err(&format!(
        "{GOOD}\n[verity]\nsource = \"signature\"\ncritical = [\"\"]\n"
    ));
    assert_eq!(line, 27, "{msg}");
    assert!(msg.contains("absolute path"), "{msg}");
    parse(
        format!("{GOOD}\n[report]\ntextfile_dir = \"\"\nnfd_dir = \"\"\n").as_bytes(),
        Path::new("bom.toml"),
    )
    .unwrap();
}

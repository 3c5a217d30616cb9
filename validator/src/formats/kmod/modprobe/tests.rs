use super::*;

fn conf(text: &str) -> Config {
    let mut c = Config::default();
    c.add_file("t.conf", text.as_bytes());
    c
}

#[test]
fn options_lines_join_in_order_and_keep_what_kmod_keeps() {
    let c = conf(
        "# comment\n\
         options nvidia NVreg_A=1\n\
         options\tnvidia-drm modeset=1\tfbdev=1\n\
         options nvidia  NVreg_B=2 \n\
         \n\
         options nvidia NVreg_C=\\\n3\n",
    );
    assert_eq!(c.options("nvidia"), "NVreg_A=1  NVreg_B=2  NVreg_C=3");
    assert_eq!(c.options("nvidia_drm"), "modeset=1 fbdev=1");
    assert_eq!(c.options("nvidia-drm"), "");
    assert_eq!(c.options("absent"), "");
    // Placed by the line it ends on, as kmod's messages place it.
    assert_eq!(
        c.options[3].origin,
        Origin::File {
            file: "t.conf".into(),
            line: 7
        }
    );
    assert!(c.ignored.is_empty(), "{:?}", c.ignored);
}

#[test]
fn bad_lines_are_ignored_and_named() {
    let c = conf(
        "options nvidia\n\
         options nvidia \n\
         options bad]name a=1\n\
         options bad[name a=1\n\
         frobnicate x\n\
         \x20# indented comment\n\
         blacklist\n\
         include /etc/x\n\
         alias pci:v* nvidia\n\
         softdep nvidia pre: ecdh_generic\n\
         install nvidia /bin/true\n\
         options a[-]b x=1\n",
    );
    let words: Vec<_> = c.ignored.iter().map(|(o, w)| format!("{o} {w}")).collect();
    assert_eq!(
        words,
        [
            "t.conf:1 options",
            "t.conf:2 options",
            "t.conf:3 options",
            "t.conf:4 options",
            "t.conf:5 frobnicate",
            "t.conf:6 #",
            "t.conf:7 blacklist",
            "t.conf:8 include",
        ]
    );
    // Inside brackets `-` stays.
    assert_eq!(c.options("a[-]b"), "x=1");
}

#[test]
fn blacklist_by_file_and_command_line() {
    let mut c = conf("blacklist nouveau\nblacklist nvidia-drm\n");
    c.add_cmdline(b"quiet modprobe.blacklist=bochs,nvidia-uvm root=/dev/vda\n");
    assert!(matches!(
        c.blacklisted("nouveau"),
        Some(Origin::File { line: 1, .. })
    ));
    assert!(c.blacklisted("nvidia_drm").is_some());
    assert_eq!(c.blacklisted("bochs"), Some(&Origin::Cmdline));
    // kmod does not respell names given on the command line.
    assert_eq!(c.blacklisted("nvidia_uvm"), None);
    assert_eq!(c.blacklisted("nvidia-uvm"), Some(&Origin::Cmdline));
    assert_eq!(c.blacklisted("nvidia"), None);
}

#[test]
fn command_line_words_as_kmod_reads_them() {
    let mut c = conf("options nvidia NVreg_A=1\n");
    c.add_cmdline(
        b"BOOT_IMAGE=/B/vmlinuz-6.1.0 root=PARTLABEL=a nvidia.NVreg_B=2 \
          nvidia-drm.modeset=1 a.b.c=1 x.y=\"q r\" \"p.dyndbg=file d.c +p\" flag.on \
          m.\"z\"=1 nvidia.NVreg_A=3\n",
    );
    assert_eq!(c.options("nvidia"), "NVreg_A=1 NVreg_B=2 NVreg_A=3");
    assert_eq!(c.options("nvidia_drm"), "modeset=1");
    assert_eq!(c.options("a"), "");
    assert_eq!(c.options("x"), "y=\"q r\"");
    assert_eq!(c.options("p"), "dyndbg=\"file d.c +p\"");
    assert_eq!(c.options("flag"), "on");
    assert_eq!(c.options("m"), "");
    assert_eq!(c.options("BOOT_IMAGE=/B/vmlinuz-6"), "");
    assert!(c
        .options
        .iter()
        .skip(1)
        .all(|e| e.origin == Origin::Cmdline));
}

#[test]
fn command_line_edges() {
    for (line, want) in [
        (&b""[..], ""),
        (b"m.p=1", "p=1"),
        (b"m.p=\"open", ""),
        (b"\"m.p\"=1", ""),
        (b"m.p=1\0m.q=2", "p=1"),
        (b"m.p=a\tm.q=b\r", "p=a q=b"),
        (b"\xff.p=1 m.p=\xfe m.q=2", "q=2"),
    ] {
        let mut c = Config::default();
        c.add_cmdline(line);
        assert_eq!(c.options("m"), want, "{:?}", String::from_utf8_lossy(line));
    }
}

#[test]
fn files_in_kmods_order() {
    let dirs = vec![
        vec!["50-b.conf".into(), "x.txt".into(), ".hidden.conf".into()],
        vec!["10-a.conf".into(), "50-b.conf".into(), "z.alias".into()],
        vec![".conf".into(), "a.conf".into(), "Z.conf".into()],
    ];
    assert_eq!(
        config_files(&dirs),
        [
            (1, "10-a.conf".to_string()),
            (0, "50-b.conf".into()),
            (2, "Z.conf".into()),
            (2, "a.conf".into()),
            (1, "z.alias".into()),
        ]
    );
}

#[test]
fn underscores_as_kmod() {
    assert_eq!(underscores("nvidia-drm").as_deref(), Some("nvidia_drm"));
    assert_eq!(underscores("a[-x]-b").as_deref(), Some("a[-x]_b"));
    assert_eq!(underscores("a]"), None);
    assert_eq!(underscores("a[b"), None);
}

#[test]
fn nul_ends_a_line_and_a_final_backslash_is_kmods_eof_byte() {
    let c = conf("blacklist m\0x\noptions m a=1\0b\noptions n z=1\\");
    assert!(c.blacklisted("m").is_some());
    assert_eq!(c.options("m"), "a=1");
    // `a=1\xff`: not UTF-8, so not applied, and said.
    assert_eq!(c.options("n"), "");
    assert_eq!(
        c.not_utf8,
        [Origin::File {
            file: "t.conf".into(),
            line: 3
        }]
    );
}

#[test]
fn bytes_that_are_not_utf8_are_said_not_passed_on() {
    let mut c = Config::default();
    c.add_file("t.conf", b"options m p=caf\xe9\noptions m q=1\n");
    c.add_cmdline(b"m.r=\xfe m.s=2");
    assert_eq!(c.options("m"), "q=1 s=2");
    assert_eq!(c.not_utf8.len(), 2, "{:?}", c.not_utf8);
}

#[test]
fn a_quoted_blacklist_word_keeps_its_quote_as_kmod_does() {
    let mut c = Config::default();
    c.add_cmdline(b"\"modprobe.blacklist=nouveau,x y\" modprobe.blacklist=bochs");
    assert_eq!(c.blacklisted("nouveau"), None);
    assert!(c.blacklisted("\"nouveau").is_some());
    assert!(c.blacklisted("x y\"").is_some());
    assert!(c.blacklisted("bochs").is_some());
}

//! An installed disk's partition table as docs/INSTALL.md shows it: `sfdisk --dump` with
//! the disk's path as `DISK`, no `label-id:` line, each root and hash PARTUUID named as the
//! half of its slot's root hash it is, and every other GUID `<derived>`; and that
//! documented table, between its `<!-- install-dump -->` marker and the fence that ends it.
//! Used by `mkinitramfs`'s install test and the real node's (QEMU) test.

use std::path::Path;
use std::process::Command;

/// The table docs/INSTALL.md documents.
pub fn documented_table() -> String {
    let path = crate::workspace().join("docs/INSTALL.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let marker = "<!-- install-dump -->\n```\n";
    let start = doc
        .find(marker)
        .unwrap_or_else(|| panic!("{}: no {marker:?}", path.display()));
    let rest = &doc[start + marker.len()..];
    rest[..rest.find("```").unwrap()].to_string()
}

/// `sfdisk --dump` of `disk` with the GUIDs named as [`documented_table`] names them;
/// `hashes`: each slot's name and root hash (hex).
pub fn dump(disk: &Path, hashes: &[(String, String)]) -> String {
    let o = Command::new("sfdisk")
        .arg("--dump")
        .arg(disk)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "sfdisk --dump {}: {}",
        disk.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut text = String::from_utf8(o.stdout)
        .unwrap()
        .replace(&disk.display().to_string(), "DISK")
        .lines()
        .filter(|l| !l.starts_with("label-id:"))
        .collect::<Vec<_>>()
        .join("\n");
    for (slot, h) in hashes {
        let guid = |b: &str| {
            validator::formats::verity::uuid_from_hash(&validator::util::unhex(b).unwrap())
                .unwrap()
                .to_uppercase()
        };
        text = text
            .replace(&guid(&h[..32]), &format!("<root hash {slot}, first half>"))
            .replace(&guid(&h[32..]), &format!("<root hash {slot}, second half>"));
    }
    // The other GUIDs are derived, so any 36-character GUID left is one of them.
    let mut out = String::new();
    for line in text.lines() {
        let mut l = line.to_string();
        if let Some(i) = l.find("uuid=") {
            let g = l.get(i + 5..i + 41).unwrap_or_default().to_string();
            if g.len() == 36 && g.chars().filter(|&c| c == '-').count() == 4 {
                l = l.replace(&g, "<derived>");
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

//! The RAUC bundle of a slot image (`mkinitramfs slot --rauc-bundle`): the slot's three
//! partitions as images of the slot classes `rootfs`, `rootfs-verity`, `rootfs-sig`
//! (`examples/rauc/system.conf`), with an install hook that writes them and puts the
//! slot's boot files on the ESP (its kernel and initramfs, and when it was built as a
//! Unified Kernel Image, the image made for the slot it is written into: the bundle
//! carries one per slot, `linux-A.efi` and `linux-B.efi`, as each names its slot; an image
//! of an earlier install is removed when the bundle has none); made and signed by
//! `rauc bundle`.

use std::path::Path;
use std::process::Command;

use super::{io, run, RaucBundle, SlotError};

/// RAUC's install hook of the `rootfs` and `rootfs-verity` images in the bundle: writes
/// the image to the slot's partition and gives the partition the PARTUUID the
/// Discoverable Partitions convention derives from the new root hash (data: its first
/// 128 bits, hash tree: its last; as systemd-sysupdate does), which is how the gate finds
/// a slot's verity partitions; for `rootfs` it then puts the slot's kernel and initramfs
/// on the ESP where the shipped grub.cfg loads them (`/<bootname>/`), each under a
/// temporary name, synced, renamed.
pub(super) const RAUC_HOOK: &str = r#"#!/bin/sh
# RAUC slot-install hook of a validator slot bundle (rootfs and rootfs-verity images).
set -eu
[ "${1:-}" = slot-install ] || exit 0
dd if="$RAUC_IMAGE_NAME" of="$RAUC_SLOT_DEVICE" bs=4M conv=fsync status=none
hex=$(cat "$RAUC_BUNDLE_MOUNT_POINT/root.roothash")
case "$RAUC_SLOT_CLASS" in
rootfs) half=$(echo "$hex" | cut -c1-32) ;;
*) half=$(echo "$hex" | cut -c33-64) ;;
esac
uuid=$(echo "$half" | sed 's/^\(.\{8\}\)\(.\{4\}\)\(.\{4\}\)\(.\{4\}\)\(.\{12\}\)$/\1-\2-\3-\4-\5/')
name=$(basename "$(readlink -f "$RAUC_SLOT_DEVICE")")
disk=/dev/$(basename "$(readlink -f "/sys/class/block/$name/..")")
sfdisk --quiet --lock=no --no-reread --no-tell-kernel --part-uuid "$disk" \
    "$(cat "/sys/class/block/$name/partition")" "$uuid"
[ "$RAUC_SLOT_CLASS" = rootfs ] || exit 0
esp=${VALIDATOR_ESP:-/boot/efi}
echo "validator slot bundle: slot $RAUC_SLOT_BOOTNAME's root written; writing its boot files to $esp"
mkdir -p "$esp/$RAUC_SLOT_BOOTNAME"
for f in vmlinuz initrd.img linux.efi; do
    src="$RAUC_BUNDLE_MOUNT_POINT/$f"
    # A Unified Kernel Image names its slot on its command line: the one made for the
    # slot being written.
    [ "$f" != linux.efi ] || src="$RAUC_BUNDLE_MOUNT_POINT/linux-$RAUC_SLOT_BOOTNAME.efi"
    if [ ! -e "$src" ]; then
        # No Unified Kernel Image in this bundle: none of an earlier install may stay
        # for grub.cfg to chainload.
        rm -f "$esp/$RAUC_SLOT_BOOTNAME/$f"
        continue
    fi
    cp "$src" "$esp/$RAUC_SLOT_BOOTNAME/$f.new"
    sync "$esp/$RAUC_SLOT_BOOTNAME/$f.new"
    mv "$esp/$RAUC_SLOT_BOOTNAME/$f.new" "$esp/$RAUC_SLOT_BOOTNAME/$f"
done
sync
echo "validator slot bundle: slot $RAUC_SLOT_BOOTNAME written, its kernel and initramfs on $esp"
"#;

/// `bundle.raucb` in `tmp`: the slot image's three partitions as images of the slot
/// classes `rootfs`, `rootfs-verity`, `rootfs-sig` (examples/rauc/system.conf), the kernel
/// and initramfs for [`RAUC_HOOK`], in RAUC's verity format, signed by `r`'s key.
pub(super) fn rauc_bundle(
    r: &RaucBundle,
    tmp: &Path,
    slot: &str,
    version: &str,
    root_hex: &str,
) -> Result<(), SlotError> {
    let content = tmp.join(".rauc-content");
    std::fs::create_dir(&content).map_err(io(&content))?;
    let link = |from: &Path, name: &str| -> Result<(), SlotError> {
        let to = content.join(name);
        std::fs::hard_link(from, &to)
            .or_else(|_| std::fs::copy(from, &to).map(|_| ()))
            .map_err(io(&to))
    };
    for (from, name) in [
        (tmp.join("root.img"), "root.img"),
        // RAUC picks its update handler by the file name: `.img` for a raw slot.
        (tmp.join("root.verity"), "root-verity.img"),
        (tmp.join("root.verity-sig"), "root-verity-sig.img"),
        (tmp.join(format!("esp/{slot}/vmlinuz")), "vmlinuz"),
        (tmp.join(format!("esp/{slot}/initrd.img")), "initrd.img"),
        (tmp.join("root.roothash"), "root.roothash"),
    ] {
        link(&from, name)?;
    }
    // The slot's Unified Kernel Images, one naming each slot the bundle may be
    // installed into (`build_into` makes the other one beside the slot's own).
    for s in ["A", "B"] {
        let own = tmp.join(format!("esp/{s}/{}", super::UKI_NAME));
        let other = tmp.join(format!(".linux-{s}.efi"));
        for from in [own, other] {
            if from.is_file() {
                link(&from, &format!("linux-{s}.efi"))?;
            }
        }
    }
    let hook = content.join("hook.sh");
    std::fs::write(&hook, RAUC_HOOK).map_err(io(&hook))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
            .map_err(io(&hook))?;
    }
    let manifest = format!(
        "[update]\ncompatible={}\nversion={version}\ndescription=validator slot image {version}, root hash {root_hex}\n\n\
         [bundle]\nformat=verity\n\n[hooks]\nfilename=hook.sh\n\n\
         [image.rootfs]\nfilename=root.img\nhooks=install\n\n[image.rootfs-verity]\nfilename=root-verity.img\nhooks=install\n\n\
         [image.rootfs-sig]\nfilename=root-verity-sig.img\n",
        r.compatible
    );
    let m = content.join("manifest.raucm");
    std::fs::write(&m, manifest).map_err(io(&m))?;
    let mut c = Command::new("rauc");
    c.arg("bundle")
        .arg(format!("--cert={}", r.cert.display()))
        .arg(format!("--key={}", r.key.display()));
    if let Some(a) = &r.mksquashfs_args {
        c.arg(format!("--mksquashfs-args={a}"));
    }
    let out = run(c.arg(&content).arg(tmp.join("bundle.raucb")));
    let _ = std::fs::remove_dir_all(&content);
    out.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundle's hook gives the data and hash partitions the PARTUUIDs the gate looks
    /// for (`validator::formats::verity::uuid_from_hash` of each half of the root hash).
    #[test]
    fn hook_names_the_partitions_as_the_gate_finds_them() {
        let hex = "4ab7ce0cd8f638db42cb5c4a98bbf567567f2014f3e0493ee0eb3c72c36812d2";
        let raw = validator::util::unhex(hex).unwrap_or_default();
        let lines: Vec<&str> = RAUC_HOOK.lines().collect();
        let from = lines
            .iter()
            .position(|l| l.starts_with("case "))
            .unwrap_or(0);
        let to = lines
            .iter()
            .position(|l| l.starts_with("uuid="))
            .unwrap_or(0);
        assert!(from > 0 && to > from, "{RAUC_HOOK}");
        let body = lines.get(from..=to).unwrap_or_default().join("\n");
        for (class, half) in [("rootfs", raw.get(..16)), ("rootfs-verity", raw.get(16..))] {
            let script = format!("hex={hex}\n{body}\necho \"$uuid\"\n");
            let out = Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env("RAUC_SLOT_CLASS", class)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            let want = half.and_then(validator::formats::verity::uuid_from_hash);
            assert_eq!(Some(out), want, "{class}");
        }
    }
}

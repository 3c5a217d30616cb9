#!/bin/sh
# Seeds the fuzz corpora, fuzz/corpus/<target>/, from real data: the provisioned Debian
# kernels (modules, certificates, image, module index), the tools that make each format
# (veritysetup, sfdisk, grub-editenv, GNU cpio, openssl, xz/zstd/gzip/lz4), a real TPM
# (swtpm) and firmware (an OVMF boot of the Debian kernel whose TPM event log, command
# line and sysfs values are captured), the fixture node's sysfs/procfs tree, the example
# reports of real boots (docs/examples), our own writers (event logs, CEL, slot state,
# cpio), the example BOMs and the committed regression inputs. Nothing here is committed: the
# corpora are generated (fuzz/.gitignore).
#
# Usage: fuzz/seed.sh [CORPUS_DIR]   (default fuzz/corpus; SEED_VM=0 skips the OVMF boot)
# Needs the nightly toolchain for the seed program (scripts/fuzz installs it).
set -eu
FUZZ=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$FUZZ")
OUT=${1:-$FUZZ/corpus}
WORK=$FUZZ/seeds-work
KERNEL=$ROOT/target/kernels/default
K612=$ROOT/target/kernels/k612
VMLINUZ=$(ls "$KERNEL"/boot/vmlinuz-* | head -n 1)
RELEASE=${VMLINUZ##*/vmlinuz-}
MODDIR=$KERNEL/lib/modules/$RELEASE

rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
say() { printf 'seed: %s\n' "$*" >&2; }

# seed TARGET NAME < bytes
seed() {
    mkdir -p "$OUT/$1"
    cat >"$OUT/$1/$2"
}
# frame CERT FILE: [u16 LE length][certificate][file], the framing of the targets that
# take a trust store (test-support/src/fuzz.rs).
frame() {
    n=$(stat -c %s "$1")
    # shellcheck disable=SC2059
    printf "$(printf '\\%03o\\%03o' $((n & 255)) $((n >> 8)))"
    cat "$1" "$2"
}

# Committed regression inputs start every corpus.
for d in "$FUZZ"/regressions/*/; do
    [ -d "$d" ] || continue
    t=$(basename "$d")
    mkdir -p "$OUT/$t"
    cp "$d"* "$OUT/$t/" 2>/dev/null || true
done

# The kernel package has no module index: depmod makes it, as on an installed system.
IDX=$WORK/depmod/lib/modules/$RELEASE
mkdir -p "$IDX"
ln -s "$MODDIR/kernel" "$IDX/kernel"
cp "$MODDIR"/modules.order "$MODDIR"/modules.builtin* "$IDX/"
depmod -b "$WORK/depmod" "$RELEASE"

say "kernel command lines"
seed cmdline host </proc/cmdline
printf 'BOOT_IMAGE=/vmlinuz-%s root=UUID=2f0e1b8c-3d4a-4c1e-9b2a-7d1e5f6a8b9c ro quiet\n' "$RELEASE" | seed cmdline debian-grub
printf 'console=ttyS0 panic=-1 root=PARTLABEL=root-a rootfstype=ext4 ro validator.slot=A validator.root_timeout=20 validator.on_stop=poweroff validator.debug -- single "a b"\n' | seed cmdline qemu-node
printf 'initrd=\\initrd.img root="/dev/disk/by-partlabel/root b" rootflags=noatime,errors=remount-ro init=/sbin/init validator.verity_data=PARTUUID=6a5e1a3c-2b0e-4f3a-9a63-0f3c5d2e1b4a validator.esp=LABEL=ESP\n' | seed cmdline quoted

say "BOMs"
for f in "$ROOT"/examples/*.toml; do
    seed bom "$(basename "$f")" <"$f"
done

say "cpio (GNU cpio)"
tree=$WORK/cpio-tree
mkdir -p "$tree/etc/validator" "$tree/dev" "$tree/lib/modules/$RELEASE"
printf 'schema = 1\n' >"$tree/etc/validator/bom.toml"
head -n 3 "$IDX/modules.dep" >"$tree/lib/modules/$RELEASE/modules.dep"
ln -s ../usr/sbin "$tree/sbin"
mknod "$tree/dev/console" c 5 1 2>/dev/null || true
(cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet --reproducible) | seed cpio gnu-cpio
# As initramfs images come: compressed (gzip, zstd, xz as the kernel reads them), and a
# plain archive (early microcode) before a compressed one.
c=$OUT/cpio/gnu-cpio
gzip -9 -n -c <"$c" | seed cpio gnu-cpio.gz
zstd -19 -q -c <"$c" | seed cpio gnu-cpio.zst
xz --check=crc32 -c <"$c" | seed cpio gnu-cpio.xz
{ cat "$c"; zstd -19 -q -c <"$c"; } | seed cpio plain-then-zstd

say "modules"
# Small signed modules of the 6.1 kernel, and 6.12's xz-compressed ones.
MODS=$(find "$MODDIR/kernel" -name '*.ko' -size -24k | LC_ALL=C sort | awk 'NR % 40 == 1' | head -n 6)
for m in $MODS; do
    seed modinfo "$(basename "$m")" <"$m"
done
for m in $(find "$K612"/lib/modules/*/kernel -name '*.ko.xz' -size -8k | LC_ALL=C sort | head -n 3); do
    n=$(basename "$m" .xz)
    xz -dc "$m" | seed modinfo "k612-$n"
    { printf '\000'; cat "$m"; } | seed compress "k612-$n.xz"
done

say "module index"
{ head -n 10 "$IDX/modules.dep"; grep ': .' "$IDX/modules.dep" | head -n 30; } | seed kmod_index modules.dep
for f in modules.softdep modules.builtin; do
    head -n 40 "$IDX/$f" | seed kmod_index "$f"
done

say "compressed streams"
small=$(echo "$MODS" | head -n 1)
{ printf '\000'; xz --format=xz --check=crc32 --x86 --lzma2=preset=6 -c "$small"; } | seed compress xz-x86
{ printf '\001'; zstd -19 -q -c "$small"; } | seed compress zstd
{ printf '\002'; gzip -9 -n -c "$small"; } | seed compress gzip
{ printf '\003'; lz4 -l -9 -q -c "$small"; } | seed compress lz4-legacy

say "certificates and signatures (openssl)"
printf '7f2a84461b51447d6b4cf73858361503c1904bed5dffecc516211eeec089990a' >"$WORK/content"
for k in rsa:2048 ec:p256 ec:p384; do
    name=$(echo "$k" | tr ':' '-')
    case $k in
    rsa:*) newkey=$k ;;
    ec:p256) openssl ecparam -name prime256v1 -out "$WORK/p.pem" && newkey=ec:$WORK/p.pem ;;
    ec:p384) openssl ecparam -name secp384r1 -out "$WORK/p.pem" && newkey=ec:$WORK/p.pem ;;
    esac
    openssl req -new -x509 -nodes -newkey "$newkey" -days 2 -subj "/CN=fleet image signing $name" \
        -keyout "$WORK/$name.key" -out "$WORK/$name.pem" 2>/dev/null
    openssl x509 -outform DER -in "$WORK/$name.pem" -out "$WORK/$name.der"
    seed x509 "$name.der" <"$WORK/$name.der"
    seed x509 "$name.pem" <"$WORK/$name.pem"
    openssl smime -sign -binary -noattr -nocerts -outform DER -in "$WORK/content" \
        -signer "$WORK/$name.pem" -inkey "$WORK/$name.key" -out "$WORK/$name.p7s"
    seed pkcs7 "$name-smime.p7s" <"$WORK/$name.p7s"
    openssl cms -sign -binary -md sha512 -outform DER -in "$WORK/content" \
        -signer "$WORK/$name.pem" -inkey "$WORK/$name.key" -out "$WORK/$name-cms.p7s"
    seed pkcs7 "$name-cms-attrs-certs.p7s" <"$WORK/$name-cms.p7s"
done
cat "$WORK/rsa-2048.pem" "$WORK/ec-p256.pem" | seed x509 two.pem
# Authenticode: Debian's signed GRUB and shim with the Debian Secure Boot CA (shim's
# .vendor_cert: four 32-bit sizes and offsets, then the certificate), and a re-signed
# copy; UEFI signature databases made by our own writer's layout.
SB=$ROOT/target/secureboot
if [ -d "$SB" ]; then
    objcopy -O binary --only-section=.vendor_cert "$SB/usr/lib/shim/shimx64.efi.signed" "$WORK/vendor_cert.bin"
    python3 -c "import struct,sys;b=open(sys.argv[1],'rb').read();n,_,o,_=struct.unpack('<IIII',b[:16]);open(sys.argv[2],'wb').write(b[o:o+n])" "$WORK/vendor_cert.bin" "$WORK/debian-ca.der"
    frame "$WORK/debian-ca.der" "$SB/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed" | seed authenticode grub-debian-ca
    frame "$WORK/debian-ca.der" "$SB/usr/lib/shim/shimx64.efi.signed" | seed authenticode shim-debian-ca
    python3 -c "import struct,sys;b=open(sys.argv[1],'rb').read();n=len(b);open(sys.argv[2],'wb').write(bytes.fromhex('a159c0a5e494a74a87b5ab155c2bf072')+struct.pack('<III',28+16+n,0,16+n)+bytes(16)+b)" "$WORK/debian-ca.der" "$WORK/db.bin"
    seed efisiglist db-debian-ca <"$WORK/db.bin"
fi

say "dm-verity (veritysetup)"
head -c 65536 /dev/urandom >"$WORK/verity.data"
i=0
for opts in "--hash sha256" "--hash sha1 --data-block-size 1024 --hash-block-size 512" \
    "--hash sha512 --salt=-" "--format 0 --hash sha256 --hash-block-size 1024"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    veritysetup format $opts --uuid=6a5e1a3c-2b0e-4f3a-9a63-0f3c5d2e1b4a \
        "$WORK/verity.data" "$WORK/verity.hash$i" >"$WORK/verity.out$i"
    seed verity_superblock "veritysetup-$i" <"$WORK/verity.hash$i"
done
root=$(sed -n 's/^Root hash:[[:space:]]*//p' "$WORK/verity.out1")
printf '%s' "$root" >"$WORK/roothash.txt"
for name in rsa-2048 ec-p256; do
    openssl smime -sign -binary -noattr -nocerts -outform DER -in "$WORK/roothash.txt" \
        -signer "$WORK/$name.pem" -inkey "$WORK/$name.key" -out "$WORK/root-$name.p7s"
    fp=$(sha256sum "$WORK/$name.der" | cut -d' ' -f1)
    printf '{"rootHash":"%s","certificateFingerprint":"%s","signature":"%s"}' \
        "$root" "$fp" "$(base64 -w0 "$WORK/root-$name.p7s")" >"$WORK/root-$name.json"
    frame "$WORK/$name.der" "$WORK/root-$name.json" | seed verity_sig "root-verity-sig-$name"
done

say "GPT (sfdisk)"
# A small disk (64 sectors, a 4-entry array) with the ESP and DPS root, verity and
# signature partitions; the seed program lays the same table out on 4096-byte sectors
# (sfdisk 2.38 makes 512-byte-sector tables only on image files).
img=$WORK/gpt-512.img
truncate -s 32768 "$img"
printf 'label: gpt\ntable-length: 4\nfirst-lba: 4\nsize=8, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=ESP\nsize=16, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name=root-a\nsize=8, type=2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5, name=root-a-verity\nsize=4, type=41092B05-9FC8-4523-994F-2DEF0408B176, name=root-a-verity-sig\n' |
    sfdisk -q --no-reread --no-tell-kernel "$img" >/dev/null
seed gpt sfdisk-512 <"$img"

say "grubenv (grub-editenv)"
g=$WORK/grubenv
grub-editenv "$g" create
seed grubenv empty <"$g"
grub-editenv "$g" set ORDER="A B" A_OK=1 B_OK=0 A_TRY=0 saved_entry=slot-a
grub-editenv "$g" set 'note=back\slash'
cp "$g" "$WORK/grubenv.set"
seed grubenv slots <"$g"
{ cat "$WORK/grubenv.set"; printf '\000sA_TRY=1\nsORDER=B A\ndA_OK\nsnew=multi\\\\line\ndmissing\nsB_OK=1\n'; } | seed grubenv slots-edits

say "BLS entries"
printf 'debian-%s+3-1.conf\ntitle Debian GNU/Linux 12 (bookworm)\nversion %s\nlinux /debian/vmlinuz-%s\ninitrd /debian/initrd.img-%s\noptions root=PARTLABEL=root-a ro quiet validator.slot=A\n# comment\nsort-key debian\n' \
    "$RELEASE" "$RELEASE" "$RELEASE" "$RELEASE" | seed bls entry-counting
printf 'slot-b.conf\ntitle B\nlinux /b/vmlinuz\ninitrd /b/initrd\ninitrd /b/extra.cpio\noptions root=PARTLABEL=root-b\n' | seed bls entry-plain
{ printf '\007\000\000\000'; printf '\\loader\\entries\\slot-a+2-1.conf\000' | iconv -f UTF-8 -t UTF-16LE; } | seed bls efivar-boot-count-path

say "sysfs/procfs values (the fixture node)"
FIX=$ROOT/validator/tests/fixtures/hw/good
find "$FIX" -type f | LC_ALL=C sort | awk -F/ '!seen[$NF]++' | while read -r f; do
    seed sysfs "fixture-$(basename "$f")" <"$f"
done
find "$FIX/proc/driver/nvidia/gpus" -name information | head -n 1 | while read -r f; do
    seed sysfs fixture-gpu-information <"$f"
done
seed cmdline fixture-node <"$FIX/proc/cmdline"
seed sysfs proc-self-status </proc/self/status

say "reports (the example reports of real boots), console lines, NFD features"
for f in "$ROOT"/docs/examples/report-*.json; do
    seed report "$(basename "$f")" <"$f"
done

say "firmware TPM event log and command line (OVMF boot of the Debian kernel)"
if [ "${SEED_VM:-1}" != 0 ]; then
    vm=$WORK/vm
    mkdir -p "$vm/root/bin" "$vm/tpm"
    cp /bin/busybox "$vm/root/bin/busybox"
    cat >"$vm/root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t securityfs securityfs /sys/kernel/security
echo SEED-CMDLINE-BEGIN; /bin/busybox cat /proc/cmdline; echo SEED-CMDLINE-END
echo SEED-LOG-BEGIN; /bin/busybox base64 /sys/kernel/security/tpm0/binary_bios_measurements; echo SEED-LOG-END
for f in /sys/bus/pci/devices/*/vendor /sys/bus/pci/devices/*/class \
    /sys/bus/pci/devices/*/current_link_speed /sys/bus/pci/devices/*/max_link_width \
    /sys/bus/pci/devices/*/aer_dev_correctable /sys/kernel/security/lockdown \
    /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c \
    /sys/module/*/taint; do
    [ -r "$f" ] && echo "SEED-FILE $f $(/bin/busybox base64 "$f" | /bin/busybox tr -d '\n')"
done
/bin/busybox poweroff -f
EOF
    chmod 755 "$vm/root/init"
    (cd "$vm/root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$vm/initrd"
    cp /usr/share/OVMF/OVMF_VARS_4M.fd "$vm/vars.fd"
    swtpm socket --tpm2 --tpmstate dir="$vm/tpm" --ctrl type=unixio,path="$vm/tpm.sock" \
        --flags not-need-init >/dev/null 2>&1 &
    tpm_pid=$!
    n=0
    while [ ! -S "$vm/tpm.sock" ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    timeout 600 qemu-system-x86_64 -machine q35,accel=tcg -cpu max -m 512 -nodefaults \
        -display none -monitor none -serial "file:$vm/console.log" -no-reboot \
        -drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd \
        -drive if=pflash,format=raw,unit=1,file="$vm/vars.fd" \
        -chardev socket,id=chrtpm,path="$vm/tpm.sock" -tpmdev emulator,id=tpm0,chardev=chrtpm \
        -device tpm-tis,tpmdev=tpm0 -kernel "$VMLINUZ" -initrd "$vm/initrd" \
        -append "console=ttyS0 panic=-1 quiet root=PARTLABEL=root-a ro validator.slot=A" || true
    kill "$tpm_pid" 2>/dev/null || true
    tr -d '\r' <"$vm/console.log" | sed -n '/^SEED-LOG-BEGIN/,/^SEED-LOG-END/p' | sed '1d;$d' |
        base64 -d >"$vm/eventlog.bin" || true
    tr -d '\r' <"$vm/console.log" | sed -n '/^SEED-CMDLINE-BEGIN/,/^SEED-CMDLINE-END/p' | sed '1d;$d' >"$vm/cmdline"
    i=0
    tr -d '\r' <"$vm/console.log" | grep '^SEED-FILE ' | head -n 40 | while read -r _ path b64; do
        i=$((i + 1))
        printf '%s' "$b64" | base64 -d | seed sysfs "vm-$i-$(basename "$path")"
    done
    if [ -s "$vm/eventlog.bin" ]; then
        seed eventlog ovmf-firmware <"$vm/eventlog.bin"
        seed cmdline ovmf-vm <"$vm/cmdline"
    else
        say "the OVMF boot gave no event log (see $vm/console.log); continuing without it"
    fi
fi

say "library-made, swtpm and kernel seeds (fuzz/seed/main.rs)"
# Built with cargo fuzz's flags (cargo-fuzz 0.13), so it shares the fuzz build's directory;
# other flags only cost a separate build.
(cd "$FUZZ" && RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Zsanitizer=address \
-Cllvm-args=-sanitizer-coverage-stack-depth -Cdebug-assertions -Ccodegen-units=1" \
    cargo +nightly build -q --release --target x86_64-unknown-linux-gnu --example seed)
# shellcheck disable=SC2086
"$FUZZ"/target/x86_64-unknown-linux-gnu/release/examples/seed "$OUT" "$WORK" "$VMLINUZ" $MODS >/dev/null

for d in "$OUT"/*/; do
    printf '%-20s %3d seeds\n' "$(basename "$d")" "$(ls "$d" | wc -l)"
done

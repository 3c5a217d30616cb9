//! The real node's root: a Debian 12 system made by `mmdebstrap` (minbase plus systemd,
//! node_exporter, RAUC, tpm2-tools and the tools a GPU node image carries that Debian
//! has), which the gate hands over to; systemd then runs as PID 1 and reaches
//! `multi-user.target`.
//!
//! RAUC is the node's updater: `rauc-service` with `examples/rauc/system.conf` and
//! `examples/rauc/booted-slot.conf`, the run's bundle certificate as its keyring
//! ([`rauc_key`]); [`update_disk`] makes an update as an operator would (a root,
//! `mkinitramfs slot --rauc-bundle`) on a disk the VM gets as `/dev/vdb`, from which
//! `node-check` runs `rauc install` and prints `rauc status`.
//!
//! Contract: [`base_tar`] builds the system once per recipe ([`RECIPE`] and
//! [`PACKAGES`]: the cache key) into `target/debian-root/<key>.tar` and reuses it after;
//! [`build`] unpacks it into a slot's root tree and adds what a node of this test bed
//! carries: the slot's name (`/etc/slot`), the validator CLI (`/usr/local/bin/validator`,
//! static), the shipped `examples/systemd/validator-mark-good.service` with a health check
//! that stands for the fleet's (node_exporter serves our metrics), the shipped
//! `validator-recheck.service` and `.timer` (enabled in `real-node-recheck`,
//! [`setup_recheck`]), and `node-check.service`,
//! which after `multi-user.target` (and after the mark-good unit) prints on the console
//! what the root sees, in the markers of the busybox root ([`crate::rootfs`]) plus
//! [`SYSTEM`], [`SCRAPE`] and the slot state, then powers the node off.
//!
//! [`install_disk`] lays the node's disk out as an operator does, with `mkinitramfs install`
//! from the two slot directories [`slot_image`] made (and, `force`, reinstalls it: the
//! recovery of a node with both slots bad).
//!
//! The image is read-only (a verity root): `/etc/fstab` puts tmpfs on `/tmp`, `/var/tmp`,
//! `/var/log`, `/var/cache` and `/var/lib/systemd`, mounts the ESP at `/boot/efi` after
//! `fsck.vfat` has checked it (fstab pass 2, as Debian does) and `/etc/machine-id` is empty (systemd makes one for the boot); the
//! textfile and NFD directories are links into `/run/validator`, where the gate wrote.
//!
//! The packages come from the mirrors of the build host's apt sources, or from the file
//! `VALIDATOR_DEBROOT_SOURCES` names ([`crate::aptsources`]); they are part of the key.
//!
//! Limits: needs root (mmdebstrap's root mode, ownership kept through `tar`) and the
//! Debian package registry on the first build; x86-64; the recipe is Debian 12 only.

use std::path::{Path, PathBuf};
use std::process::Command;

use validator::config::bom as vbom;

use crate::scenario::{BootPath, Name, RootSystem, Scenario};
use crate::HarnessError;

/// The suite and options (the cache key includes them, and the mirrors: [`crate::aptsources`]).
pub const RECIPE: &[&str] = &[
    "--variant=minbase",
    "--mode=root",
    "--format=tar",
    "--aptopt=Acquire::Languages \"none\"",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "bookworm",
];

/// The packages beyond minbase.
pub const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "kmod",
    "iproute2",
    "curl",
    "prometheus-node-exporter",
    "rauc",
    "rauc-service",
    // RAUC's GRUB backend edits grubenv with grub-editenv; the bundles' hook sets
    // partition UUIDs with sfdisk.
    "grub-common",
    "fdisk",
    // fsck.vfat: systemd-fsck checks (and repairs) the ESP before it mounts it (fstab's
    // pass 2): a power cut during an update's ESP writes can leave a broken cluster
    // chain, which the kernel's vfat answers by going read-only.
    "dosfstools",
    "tpm2-tools",
    "pciutils",
    "nvme-cli",
    "ethtool",
    "dmidecode",
    "rdma-core",
    "ibverbs-utils",
    "numactl",
];

/// The hook run in the new root before it is packed (its path is `$1`).
const CUSTOMIZE: &str = r#"set -e
: > "$1/etc/machine-id"
echo node > "$1/etc/hostname"
cat > "$1/etc/fstab" <<'EOF'
# The root is a read-only dm-verity image: what must be writable is tmpfs.
tmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0
tmpfs /var/tmp tmpfs mode=1777,nosuid,nodev 0 0
tmpfs /var/log tmpfs mode=0755,nosuid,nodev 0 0
tmpfs /var/cache tmpfs mode=0755,nosuid,nodev 0 0
tmpfs /var/lib/systemd tmpfs mode=0755,nosuid,nodev 0 0
PARTLABEL=esp /boot/efi vfat umask=0077,nofail 0 2
EOF
mkdir -p "$1/boot/efi"
rm -rf "$1/var/lib/prometheus/node-exporter"
ln -s /run/validator/textfile "$1/var/lib/prometheus/node-exporter"
mkdir -p "$1/etc/kubernetes/node-feature-discovery"
ln -s /run/validator/nfd "$1/etc/kubernetes/node-feature-discovery/features.d"
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer \
         e2scrub_reap.service nvmf-autoconnect.service; do
    ln -sf /dev/null "$1/etc/systemd/system/$u"
done
"#;

/// Printed by `node-check`: `ROOT-SYSTEM pid1=systemd multi-user=active at_us=<when it
/// became active, microseconds since the kernel started> node_exporter=active`.
pub const SYSTEM: &str = "ROOT-SYSTEM ";
/// The section (`ROOT-SCRAPE-BEGIN` .. `END`) holding our lines of node_exporter's answer
/// over HTTP (`# HELP`, `# TYPE` and samples of `validator_*`).
pub const SCRAPE: &str = "SCRAPE";
/// Written to `/dev/kmsg` by `node-check` once `multi-user.target` is active, so the
/// kernel log timestamps it (kernel start to `multi-user.target`).
pub const KMSG_MULTI_USER: &str = "node-check: multi-user.target active";
/// The section holding `validator slot status --esp /boot/efi` after the mark-good unit.
pub const SLOT_STATUS: &str = "SLOT-STATUS";
/// Printed by `node-check` before `rauc install` of each bundle on the second disk
/// (`/dev/vdb`, when one is attached), then its exit status.
pub const RAUC_INSTALL: &str = "ROOT-RAUC-INSTALL ";
pub const RAUC_INSTALL_RC: &str = "ROOT-RAUC-INSTALL-RC ";
/// Kernel command-line words for a boot whose slot RAUC marks good (`rauc status
/// mark-good`, printed as [`RAUC_MARK_GOOD`] with its exit status) instead of the
/// shipped unit, which they mask.
pub const RAUC_MARKS_GOOD: &str = "node.rauc-mark-good";
pub const RAUC_MARKS_GOOD_WORDS: [&str; 2] =
    ["systemd.mask=validator-mark-good.service", RAUC_MARKS_GOOD];
pub const RAUC_MARK_GOOD: &str = "ROOT-RAUC-MARK-GOOD ";
/// The section holding `rauc status --detailed --output-format=json` (after any install).
pub const RAUC_STATUS: &str = "RAUC-STATUS";
/// The same before the install, when an update disk is attached (RAUC's service log is
/// on the console while it installs: the bundle hook's lines).
pub const RAUC_BEFORE: &str = "RAUC-BEFORE";
/// Printed by `node-check`: the mark-good unit's result (`success`, `exit-code`, ...).
pub const MARK_GOOD: &str = "ROOT-MARK-GOOD ";

/// The test bed's bundles are uncompressed squashfs (`rauc bundle --mksquashfs-args`).
pub const BUNDLE_MKSQUASHFS_ARGS: &str = "-noI -noId -noD -noF -noX";

/// The cache key of the recipe: SHA-256 over its arguments, mirrors (the sources text),
/// packages and hook.
fn key(mirrors: &str) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in RECIPE.iter().chain(&[mirrors]).chain(PACKAGES) {
        h.update(part.as_bytes());
        h.update([0]);
    }
    h.update(CUSTOMIZE.as_bytes());
    validator::util::hex(&h.finalize()[..8])
}

/// The Debian root as a tar archive, built by `mmdebstrap` when the recipe changed
/// (about 30 s and 250 MB with a reachable mirror).
pub fn base_tar() -> Result<PathBuf, HarnessError> {
    let dir = crate::paths::workspace().join("target/debian-root");
    // One build at a time, across threads and processes (each call opens the lock file
    // anew, and `flock` serialises separate opens even within a process).
    let _one_build = crate::paths::file_lock(&dir.join(".build-lock"))?;
    let mirrors = crate::aptsources::mirrors()?;
    let key = key(&mirrors);
    let tar = dir.join(format!("{key}.tar"));
    if tar.is_file() {
        return Ok(tar);
    }
    std::fs::create_dir_all(&dir).map_err(|e| HarnessError::io(&dir, e))?;
    crate::progress(&format!(
        "building the Debian root with mmdebstrap (about 30 s; kept as {})",
        tar.display()
    ));
    let hook = dir.join("customize.sh");
    std::fs::write(&hook, CUSTOMIZE).map_err(|e| HarnessError::io(&hook, e))?;
    let sources = dir.join(format!("{key}.sources"));
    std::fs::write(&sources, &mirrors).map_err(|e| HarnessError::io(&sources, e))?;
    let part = dir.join(format!("{key}.tar.part"));
    let _ = std::fs::remove_file(&part);
    let mut c = Command::new("mmdebstrap");
    c.args(RECIPE)
        .arg(format!("--include={}", PACKAGES.join(",")))
        .arg(format!("--customize-hook=sh {} \"$1\"", hook.display()))
        .arg(&part)
        .arg(&sources)
        .env("SOURCE_DATE_EPOCH", "1700000000");
    crate::disk::run(&mut c).map_err(|e| {
        HarnessError::Setup(format!(
            "mmdebstrap (install it with scripts/provision; it needs the Debian registry): {e}"
        ))
    })?;
    std::fs::rename(&part, &tar).map_err(|e| HarnessError::io(&tar, e))?;
    Ok(tar)
}

/// Builds what the scenarios share and would otherwise build on first use, one test
/// waiting on another: the static init with the test hooks (unless `VALIDATOR_INIT` names
/// one) and without, the operator's CLI, and the Debian root's archive. The suite runner
/// (`test-support/src/bin/suite.rs`) runs it (`qemu-harness prebuild`) first, beside the
/// tests that boot nothing.
pub fn prebuild() -> Result<Vec<PathBuf>, HarnessError> {
    Ok(vec![
        crate::paths::init_binary()?,
        crate::paths::production_init()?,
        crate::paths::validator_cli()?,
        base_tar()?,
    ])
}

/// The test bed's RAUC bundle signing key and certificate, made once in `dir/rauc/`
/// (`bundles.key`, `bundles.pem`, by [`crate::verity::make_key`]): the certificate is the
/// slots' RAUC keyring.
pub fn rauc_key(dir: &Path) -> Result<(PathBuf, PathBuf), HarnessError> {
    let d = dir.join("rauc");
    let (key, cert) = (d.join("bundles.key"), d.join("bundles.pem"));
    if cert.is_file() {
        return Ok((key, cert));
    }
    std::fs::create_dir_all(&d).map_err(|e| HarnessError::io(&d, e))?;
    crate::verity::make_key(&d, "bundles")
}

/// Builds the slot's root tree at `dir` from [`base_tar`]; `extra` is shell that
/// `node-check` runs after it printed what it sees (before the power-off); `keyring` is
/// the RAUC bundle certificate the node trusts. The shipped `validator-recheck.service`
/// and `.timer` are installed; with `recheck_every_s` the timer is enabled, and a
/// test-bed drop-in runs it 20 s after boot and every that many seconds.
pub fn build(
    dir: &Path,
    extra: &str,
    keyring: &Path,
    recheck_every_s: Option<u32>,
) -> Result<(), HarnessError> {
    let io = |p: &Path, e| HarnessError::io(p, e);
    let tar = base_tar()?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    crate::disk::run(
        Command::new("tar")
            .args(["--numeric-owner", "-xpf"])
            .arg(&tar)
            .arg("-C")
            .arg(dir),
    )?;
    let write = |rel: &str, text: &str, mode: u32| -> Result<(), HarnessError> {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).map_err(|e| io(&p, e))
    };
    let cli = crate::paths::validator_cli()?;
    let to = dir.join("usr/local/bin/validator");
    std::fs::copy(&cli, &to).map_err(|e| io(&cli, e))?;
    let unit = crate::paths::workspace().join("examples/systemd/validator-mark-good.service");
    let shipped = std::fs::read_to_string(&unit).map_err(|e| io(&unit, e))?;
    write(
        "etc/systemd/system/validator-mark-good.service",
        &shipped,
        0o644,
    )?;
    // The fleet's readiness check, in the test bed: node_exporter serves our metrics (a
    // masked exporter never will: no point waiting out the 20 tries).
    write(
        "etc/systemd/system/validator-mark-good.service.d/health.conf",
        "[Service]\nExecStartPre=\nExecStartPre=/bin/sh -c 'for i in $(seq 20); do \
         curl -sf http://127.0.0.1:9100/metrics | grep -q \"^validator_\" && exit 0; \
         [ \"$(systemctl show -P LoadState prometheus-node-exporter.service)\" = masked ] && break; \
         sleep 1; done; echo \"node not healthy: node_exporter does not serve validator_ metrics\"; \
         exit 1'\n",
        0o644,
    )?;
    write(
        "etc/systemd/system/node-check.service",
        NODE_CHECK_UNIT,
        0o644,
    )?;
    for u in ["validator-recheck.service", "validator-recheck.timer"] {
        let p = crate::paths::workspace().join("examples/systemd").join(u);
        let text = std::fs::read_to_string(&p).map_err(|e| io(&p, e))?;
        write(&format!("etc/systemd/system/{u}"), &text, 0o644)?;
    }
    if let Some(n) = recheck_every_s {
        // An empty assignment resets every trigger of the timer (systemd.timer(5)), so
        // one reset, then both.
        write(
            "etc/systemd/system/validator-recheck.timer.d/testbed.conf",
            &format!("[Timer]\nOnBootSec=\nOnBootSec=20s\nOnUnitActiveSec={n}s\nAccuracySec=1s\n"),
            0o644,
        )?;
        let wants = dir.join("etc/systemd/system/timers.target.wants");
        std::fs::create_dir_all(&wants).map_err(|e| io(&wants, e))?;
        let l = wants.join("validator-recheck.timer");
        std::os::unix::fs::symlink("/etc/systemd/system/validator-recheck.timer", &l)
            .map_err(|e| io(&l, e))?;
    }
    // RAUC as the updater: the shipped system.conf and drop-in, the bundles' keyring.
    let ex = crate::paths::workspace().join("examples/rauc");
    for (from, to) in [
        ("system.conf", "etc/rauc/system.conf"),
        (
            "booted-slot.conf",
            "etc/systemd/system/rauc.service.d/booted-slot.conf",
        ),
    ] {
        let p = ex.join(from);
        let text = std::fs::read_to_string(&p).map_err(|e| io(&p, e))?;
        write(to, &text, 0o644)?;
    }
    let ring = std::fs::read_to_string(keyring).map_err(|e| io(keyring, e))?;
    write("etc/rauc/keyring.pem", &ring, 0o644)?;
    let wants = dir.join("etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).map_err(|e| io(&wants, e))?;
    for u in ["validator-mark-good.service", "node-check.service"] {
        let l = wants.join(u);
        std::os::unix::fs::symlink(format!("/etc/systemd/system/{u}"), &l)
            .map_err(|e| io(&l, e))?;
    }
    // The serial console carries the checks' lines: no login prompt in between.
    let l = dir.join("etc/systemd/system/serial-getty@ttyS0.service");
    std::os::unix::fs::symlink("/dev/null", &l).map_err(|e| io(&l, e))?;
    let script = format!(
        "#!/bin/sh\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         echo \"{KMSG_MULTI_USER}\" > /dev/kmsg\n\
         echo \"{marker} uptime=$(cut -d' ' -f1 /proc/uptime) pid=$$\"\n\
         echo \"{SYSTEM}pid1=$(cat /proc/1/comm) multi-user=$(systemctl is-active multi-user.target) at_us=$(systemctl show -P ActiveEnterTimestampMonotonic multi-user.target) node_exporter=$(systemctl is-active prometheus-node-exporter.service)\"\n\
         printf '%s%s\\n' \"{report}\" \"$(cat /run/validator/report.json 2>/dev/null)\"\n\
         echo TPM-LOG-BEGIN; base64 /run/validator/tpm-eventlog.bin 2>/dev/null; echo TPM-LOG-END\n\
         systemctl -q is-active prometheus-node-exporter.service && for i in $(seq 30); do curl -sf http://127.0.0.1:9100/metrics > /tmp/scrape && grep -q '^validator_' /tmp/scrape && break; sleep 1; done; touch /tmp/scrape\n\
         echo ROOT-{SCRAPE}-BEGIN; grep -E '^(# (HELP|TYPE) )?validator_' /tmp/scrape; echo ROOT-{SCRAPE}-END\n\
         echo ROOT-METRICS-BEGIN; cat /{textfile}/validator.prom; echo ROOT-METRICS-END\n\
         echo ROOT-NFD-BEGIN; cat /{nfd}/validator; echo ROOT-NFD-END\n\
         echo ROOT-LINKS-BEGIN; readlink /{textfile}; readlink /{nfd}; echo ROOT-LINKS-END\n\
         echo ROOT-RUN-BEGIN; ls -1 /run/validator; echo ROOT-RUN-END\n\
         echo \"{MARK_GOOD}$(systemctl show -P Result validator-mark-good.service)\"\n\
         if grep -qw {RAUC_MARKS_GOOD} /proc/cmdline; then rauc status mark-good; echo \"{RAUC_MARK_GOOD}$?\"; fi\n\
         echo ROOT-{SLOT_STATUS}-BEGIN; validator slot status --esp /boot/efi; echo ROOT-{SLOT_STATUS}-END\n\
         if [ -b /dev/vdb ]; then mkdir -p /run/bundles; mount -o ro /dev/vdb /run/bundles; \
         echo ROOT-{RAUC_BEFORE}-BEGIN; rauc status --detailed --output-format=json; echo; echo ROOT-{RAUC_BEFORE}-END; \
         journalctl -f -n 0 -o cat -u rauc.service & jpid=$!; \
         for b in /run/bundles/*.raucb; do echo \"{RAUC_INSTALL}$(basename $b)\"; rauc install \"$b\"; \
         rc=$?; [ $rc = 0 ] || journalctl -u rauc --no-pager -o cat | tail -n 25; \
         echo \"{RAUC_INSTALL_RC}$rc\"; done; kill $jpid; fi\n\
         echo ROOT-{RAUC_STATUS}-BEGIN; rauc status --detailed --output-format=json; echo; echo ROOT-{RAUC_STATUS}-END\n\
         {extra}\n\
         sync\n\
         systemctl --no-block poweroff\n",
        marker = crate::rootfs::MARKER,
        report = crate::rootfs::ROOT_REPORT,
        nfd = crate::rootfs::NFD_DIR,
        textfile = crate::rootfs::TEXTFILE_DIR,
        extra = extra,
    );
    write("usr/local/sbin/node-check", &script, 0o755)
}

/// The test bed's unit that shows what the root sees once `multi-user.target` is reached
/// and the mark-good unit has run, then powers the node off.
const NODE_CHECK_UNIT: &str = "[Unit]\n\
Description=Test bed: show what the node sees, then power off\n\
After=multi-user.target validator-mark-good.service prometheus-node-exporter.service\n\
\n\
[Service]\n\
Type=oneshot\n\
ExecStart=/usr/local/sbin/node-check\n\
StandardOutput=tty\n\
StandardError=tty\n\
TTYPath=/dev/console\n\
\n\
[Install]\n\
WantedBy=multi-user.target\n";

/// Sets up `real-node` on `s`: the Secure Boot node ([`Scenario::node`] through
/// [`BootPath::SecureBoot`]: Debian's signed shim, GRUB and kernels, signed verity roots,
/// the TPM) whose slots are Debian systems ([`RootSystem::Debian`]), with the BOMs a
/// fleet ships: Secure Boot required and `mark_good = "later"` (the shipped unit marks
/// the slot good once the node is healthy).
pub fn setup(s: &mut Scenario) -> Result<(), HarnessError> {
    *s = Scenario::node(BootPath::SecureBoot)?;
    s.name = Name::RealNode.as_str().into();
    // As Debian's boot entries: the root is mounted read-only (systemd leaves it so).
    s.cmdline = format!("ro {}", s.cmdline);
    // systemd under TCG, beside another VM: a minute or two to the last check line.
    s.boot.min_timeout_s = Some(360);
    let two = s
        .boot
        .slots
        .as_mut()
        .ok_or_else(|| HarnessError::Setup("real-node: no A/B layout".into()))?;
    two.system = RootSystem::Debian;
    // Each slot a Unified Kernel Image signed by the fleet's key (OVMF's snakeoil key),
    // enrolled as a MOK: GRUB chainloads it through shim.
    two.mok_snakeoil = true;
    for slot in [&mut two.a, &mut two.b] {
        slot.uki = Some(crate::scenario::UkiForm::Signed);
        let bom = &mut slot.bom;
        bom.hardware.secure_boot = Some(true);
        // RAUC mounts its bundles: a squashfs image on a loop device (and dm-verity).
        for m in ["loop", "squashfs"] {
            bom.modules.load.push(vbom::ModuleName(m.into()));
        }
        if let Some(c) = bom.slot.as_mut() {
            c.mark_good = vbom::MarkGood::Later;
        }
        if let Some(v) = bom.verity.as_mut() {
            v.critical = [SYSTEMD, "/usr/local/bin/validator"]
                .iter()
                .map(|p| vbom::RootPath((*p).into()))
                .collect();
        }
    }
    Ok(())
}

/// Printed by the recheck scenario's `node-check` once it showed the boot's state: the
/// test bed then plugs the NVMe controller into the running node.
pub const HOTPLUG_NOW: &str = "node-check: plug the controller in now";
/// The recheck scenario's `node-check` line about the timer: `ROOT-RECHECK-TIMER
/// active=<is-active> triggered=<LastTriggerUSecMonotonic>` (`25.254362s`; `0`: never).
pub const RECHECK_TIMER: &str = "ROOT-RECHECK-TIMER ";
/// Sections of the recheck scenario: the re-check's report, the `recheck:` lines the
/// service logged, node_exporter's answer and the features file after it, and the
/// SHA-256 of the boot's `report.json` then.
pub const RECHECK: &str = "RECHECK";
pub const RECHECK_LOG: &str = "RECHECK-LOG";
pub const SCRAPE_AFTER: &str = "SCRAPE-AFTER";
pub const NFD_AFTER: &str = "NFD-AFTER";
pub const REPORT_SHA256: &str = "ROOT-REPORT-SHA256 ";

/// What the recheck scenario's `node-check` does after it showed the boot's state: asks
/// for the controller, waits (up to 3 minutes) until the timer's re-check has run with
/// it there and passed, stops the timer (nothing rewrites the files while they are
/// read), then shows what the re-check left.
fn recheck_script() -> String {
    format!(
        "echo \"{HOTPLUG_NOW}\"\n\
         for i in $(seq 180); do [ -s /run/validator/recheck.json ] && [ -e /sys/class/nvme/nvme0 ] && \
         [ \"$(systemctl show -P ExecMainStatus validator-recheck.service)\" = 0 ] && break; sleep 1; done\n\
         echo \"{RECHECK_TIMER}active=$(systemctl is-active validator-recheck.timer) triggered=$(systemctl show -P LastTriggerUSecMonotonic validator-recheck.timer)\"\n\
         systemctl stop validator-recheck.timer\n\
         echo ROOT-{RECHECK}-BEGIN; cat /run/validator/recheck.json; echo; echo ROOT-{RECHECK}-END\n\
         echo ROOT-{RECHECK_LOG}-BEGIN; journalctl -u validator-recheck.service --no-pager -o cat | grep -v -E '^(PASS|FAIL|WARN|SKIP) '; echo ROOT-{RECHECK_LOG}-END\n\
         curl -sf http://127.0.0.1:9100/metrics > /tmp/scrape-after\n\
         echo ROOT-{SCRAPE_AFTER}-BEGIN; grep -E '^(# (HELP|TYPE) )?validator_' /tmp/scrape-after; echo ROOT-{SCRAPE_AFTER}-END\n\
         echo ROOT-{NFD_AFTER}-BEGIN; cat /{nfd}/validator; echo ROOT-{NFD_AFTER}-END\n\
         echo \"{REPORT_SHA256}$(sha256sum < /run/validator/report.json | cut -d' ' -f1)\"",
        nfd = crate::rootfs::NFD_DIR,
    )
}

/// Sets up `real-node-recheck`: [`setup`]'s node whose BOM also expects one live NVMe
/// controller (QEMU's model; the gate loads `nvme` and waits 1 s) that is not there when
/// the gate looks, so the boot is quarantined (a hardware fault); an empty hot-plug root
/// port, into which the test bed plugs the controller once `node-check` has shown the
/// boot's state ([`HOTPLUG_NOW`]); the shipped re-check timer enabled (every 5 s here).
pub fn setup_recheck(s: &mut Scenario) -> Result<(), HarnessError> {
    setup(s)?;
    s.name = Name::RealNodeRecheck.as_str().into();
    s.devices = vec![crate::hw::Device::HotplugNvme {
        serial: "LATE0001".into(),
    }];
    s.hotplug_on = Some(HOTPLUG_NOW.into());
    s.root_extra = recheck_script();
    // The wait for the re-check comes on top of the real node's boot.
    s.boot.min_timeout_s = Some(600);
    let two = s
        .boot
        .slots
        .as_mut()
        .ok_or_else(|| HarnessError::Setup("real-node-recheck: no A/B layout".into()))?;
    two.recheck_every_s = Some(5);
    for slot in [&mut two.a, &mut two.b] {
        let hw = &mut slot.bom.hardware;
        hw.nvme = Some(1);
        hw.nvme_models = vec![vbom::hardware::NvmeModel("QEMU NVMe Ctrl".into())];
        hw.link_wait_s = Some(1);
        slot.bom.modules.load.push(vbom::ModuleName("nvme".into()));
    }
    Ok(())
}

/// systemd, which the gate hands over to (`/sbin/init` links to it).
pub const SYSTEMD: &str = "/usr/lib/systemd/systemd";

/// The kernel command-line word that keeps node_exporter from starting (systemd's
/// `systemd.mask=`): the node never gets healthy.
pub const UNHEALTHY: &str = "systemd.mask=prometheus-node-exporter.service";

/// The slot's image made as an operator makes it, by `mkinitramfs slot` (the library):
/// an ext4 image of `rootdir`, the BOM at `bom` (whose `policy.trust` names
/// `trusted.pem` next to it), a signing key made for the run (`trusted.key` and
/// `trusted.pem` in `sdir`), into `sdir/image`, with the slot's Unified Kernel Image when
/// `uki` says. Returns the slot's three DPS partitions (labels `root-<slot>`, `-verity`,
/// `-sig`) and its initramfs.
pub fn slot_image(
    kernel: &crate::paths::Kernel,
    rootdir: &Path,
    bom: &Path,
    slot: crate::firmware::Slot,
    sdir: &Path,
    uki: Option<mkinitramfs::slot::UkiSlot>,
) -> Result<(Vec<crate::disk::PartitionSpec>, PathBuf), HarnessError> {
    let ext4 = sdir.join("root.ext4");
    crate::rootfs::ext4_image(rootdir, &ext4)?;
    let (key, cert) = crate::verity::make_key(sdir, "trusted")?;
    let out = sdir.join("image");
    let spec = mkinitramfs::slot::SlotSpec {
        root: ext4.clone(),
        kernel: kernel.root.clone(),
        bom: bom.to_path_buf(),
        init: crate::paths::init_binary()?,
        key,
        cert,
        slot: slot.as_str().into(),
        options: String::new(),
        out: out.clone(),
        epoch: 0,
        rauc: None,
        cmdline: None,
        uki,
    };
    let built = mkinitramfs::slot::build(&spec)
        .map_err(|e| HarnessError::Setup(format!("mkinitramfs slot {slot}: {e}")))?;
    let _ = std::fs::remove_file(&ext4);
    // The slot layout's names (examples/rauc/system.conf): root-A, root-A-verity, root-A-sig.
    let parts = crate::verity::dps_partitions(
        ["", "-verity", "-sig"].map(|suffix| format!("root-{slot}{suffix}")),
        &built.root_hash,
        out.join("root.img"),
        out.join("root.verity"),
        out.join("root.verity-sig"),
    );
    Ok((parts, out.join(format!("esp/{slot}/initrd.img"))))
}

/// The attestation reference of the update `name` made by [`update_disk`] in `run_dir`
/// (`mkinitramfs slot`'s `reference.json`: the image booted from either slot).
pub fn update_reference(
    run_dir: &Path,
    name: &str,
) -> Result<validator::attest::reference::Reference, HarnessError> {
    read_reference(&run_dir.join(format!("update-{name}/reference.json")))
}

/// The attestation reference of the real node's installed slot `slot`, as `mkinitramfs
/// slot` wrote it (`slot-<slot>/image/reference.json`).
pub fn slot_reference(
    run_dir: &Path,
    slot: crate::firmware::Slot,
) -> Result<validator::attest::reference::Reference, HarnessError> {
    read_reference(&run_dir.join(format!("slot-{slot}/image/reference.json")))
}

fn read_reference(p: &Path) -> Result<validator::attest::reference::Reference, HarnessError> {
    let text = std::fs::read_to_string(p).map_err(|e| HarnessError::io(p, e))?;
    validator::attest::reference::Reference::parse(&text)
        .map_err(|e| HarnessError::Setup(format!("{}: {e}", p.display())))
}

/// The sizes (MiB) the real node's disk is installed with: docs/INSTALL.md's table
/// (ESP, each root partition, each hash partition), so `sfdisk --dump` of the node's disk
/// is that table. The image is sparse: the slots fill a few hundred MiB of it.
pub const INSTALL_MIB: [u64; 3] = [512, 8192, 128];

/// The real node's disk at `disk`, laid out as an operator lays out a blank one: by
/// `mkinitramfs install` (the library) from the two slot directories `mkinitramfs slot`
/// made ([`slot_image`]), with Debian's signed shim and GRUB
/// ([`crate::firmware::SHIM_SIGNED`], [`crate::firmware::GRUB_SIGNED`]), the shipped
/// `grub.cfg`, `cmdline` in `node.cfg` and `grubenv`'s variables (`None`: install's own,
/// RAUC's initial state), at [`INSTALL_MIB`]. `force`: over the disk's table (`--force`,
/// the recovery by reinstall); otherwise the disk is made anew.
pub fn install_disk(
    disk: &Path,
    slot_dirs: Vec<PathBuf>,
    cmdline: &str,
    grubenv: Option<&[(String, String)]>,
    force: bool,
) -> Result<mkinitramfs::install::Installed, HarnessError> {
    let ws = crate::paths::workspace();
    let mut spec = mkinitramfs::install::InstallSpec::new(disk, slot_dirs);
    spec.loader = mkinitramfs::install::Loader::ShimGrub {
        shim: ws.join(crate::firmware::SHIM_SIGNED),
        grub: ws.join(crate::firmware::GRUB_SIGNED),
    };
    spec.cmdline = Some(cmdline.to_string());
    spec.grubenv = grubenv.map(<[_]>::to_vec);
    let [esp, root, verity] = INSTALL_MIB;
    spec.esp_mib = esp;
    spec.root_mib = Some(root);
    spec.verity_mib = Some(verity);
    spec.force = force;
    if !force {
        let _ = std::fs::remove_file(disk);
    }
    mkinitramfs::install::install(&spec)
        .map_err(|e| HarnessError::Setup(format!("mkinitramfs install {}: {e}", disk.display())))
}

/// A RAUC update for the real node, built on the host as an operator would: a Debian root
/// (the same recipe; its `node-check` prints `ROOT-IMAGE <name>`), the slot image made by
/// `mkinitramfs slot --rauc-bundle` from `bom` with `image_id` `<its id>-<name>`, signed
/// by the run's RAUC key ([`rauc_key`]), with a Unified Kernel Image of `uki_cmdline`
/// when given (the node's slots are such images), and put alone on an ext4 disk image
/// for the VM's second disk. `trusted`: the root hash is signed by the key the new initramfs trusts;
/// otherwise by another one, so the gate refuses the image (an image fault). Returns the
/// disk image; the update's `reference.json` is kept beside it ([`update_reference`]).
pub fn update_disk(
    run_dir: &Path,
    kernel: &crate::paths::Kernel,
    bom: &vbom::Bom,
    name: &str,
    trusted: bool,
    uki_cmdline: Option<&str>,
) -> Result<PathBuf, HarnessError> {
    let io = |p: &Path, e| HarnessError::io(p, e);
    let d = run_dir.join(format!("update-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    let (rauc_key, ring) = rauc_key(run_dir)?;
    let tree = d.join("rootfs");
    build(&tree, &format!("echo \"ROOT-IMAGE {name}\""), &ring, None)?;
    let slot_file = tree.join("etc/slot");
    std::fs::write(&slot_file, format!("{name}\n")).map_err(|e| io(&slot_file, e))?;
    let ext4 = d.join("root.ext4");
    crate::rootfs::ext4_image(&tree, &ext4)?;
    let _ = std::fs::remove_dir_all(&tree);
    let mut b = bom.clone();
    b.image_id = vbom::Version(format!("{}-{name}", bom.image_id));
    let bom_path = d.join("bom.toml");
    let text = b
        .to_toml()
        .map_err(|e| HarnessError::Setup(format!("update {name} BOM as TOML: {e}")))?;
    std::fs::write(&bom_path, text).map_err(|e| io(&bom_path, e))?;
    // The BOM trusts trusted.pem; the root hash is signed by it, or by a stranger.
    let (key, cert) = crate::verity::make_key(&d, "trusted")?;
    let (key, cert) = if trusted {
        (key, cert)
    } else {
        crate::verity::make_key(&d, "stranger")?
    };
    let out = d.join("image");
    let spec = mkinitramfs::slot::SlotSpec {
        root: ext4.clone(),
        kernel: kernel.root.clone(),
        bom: bom_path,
        init: crate::paths::init_binary()?,
        key,
        cert,
        slot: "A".into(),
        options: String::new(),
        out: out.clone(),
        epoch: 0,
        rauc: Some(mkinitramfs::slot::RaucBundle {
            compatible: "gpu-node".into(),
            key: rauc_key,
            cert: ring,
            // Uncompressed: the node under TCG reads the bundle at emulated speed, and
            // gzip would cost each install (and each bundle's build) tens of seconds.
            mksquashfs_args: Some(BUNDLE_MKSQUASHFS_ARGS.into()),
        }),
        cmdline: None,
        // A node whose slots are Unified Kernel Images gets one in the bundle too, signed
        // by the fleet's key (OVMF's snakeoil key, enrolled as a MOK).
        uki: uki_cmdline.map(|line| crate::secureboot::fleet_uki_slot(run_dir, line.to_string())),
    };
    mkinitramfs::slot::build(&spec)
        .map_err(|e| HarnessError::Setup(format!("mkinitramfs slot (update {name}): {e}")))?;
    let _ = std::fs::remove_file(&ext4);
    let carry = d.join("disk");
    std::fs::create_dir_all(&carry).map_err(|e| io(&carry, e))?;
    let bundle = carry.join(format!("{name}.raucb"));
    std::fs::rename(out.join("bundle.raucb"), &bundle).map_err(|e| io(&bundle, e))?;
    // What a verifier of the update's boots is given (from either slot: update_reference).
    let reference = d.join("reference.json");
    std::fs::rename(out.join("reference.json"), &reference).map_err(|e| io(&reference, e))?;
    let _ = std::fs::remove_dir_all(&out);
    let disk = d.join("update.img");
    crate::rootfs::ext4_image(&carry, &disk)?;
    let _ = std::fs::remove_dir_all(&carry);
    Ok(disk)
}

//! The boot benchmark's floor: a minimal busybox initramfs that does only what the kernel
//! has to do for the same boot - `insmod` the same module files (each after its
//! dependencies), mount the same root read-only and `switch_root` - with no checks. Its
//! time is what the kernel itself costs; ours minus the floor is the price of the checks.
//! It writes a line to the kernel log (`floor: ...`, a shell builtin, no process) at each
//! point [`crate::bench_split`] splits it at.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use mkinitramfs::closure::{closure, KernelTree};

use crate::scenario::Scenario;
use crate::HarnessError;

/// The module files of the scenario's BOM closure, in an order that loads each after its
/// hard dependencies (paths relative to the module directory).
pub fn load_order(s: &Scenario) -> Result<(KernelTree, Vec<String>), HarnessError> {
    let setup = |e: &dyn std::fmt::Display| HarnessError::Setup(e.to_string());
    let tree = KernelTree::open(&s.kernel.root).map_err(|e| setup(&e))?;
    let names: Vec<String> = s.bom.modules.load.iter().map(|m| m.0.clone()).collect();
    let c = closure(&tree, &names).map_err(|e| setup(&e))?;
    fn visit(
        name: &str,
        c: &mkinitramfs::closure::Closure,
        seen: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        if !seen.insert(name.to_string()) {
            return;
        }
        if let Some(e) = c.index.entries.get(name) {
            // modules.dep lists the one to load first last.
            for d in e.deps.iter().rev() {
                visit(d, c, seen, out);
            }
            out.push(e.path.clone());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for n in c.files.keys() {
        visit(n, &c, &mut seen, &mut out);
    }
    Ok((tree, out))
}

/// Builds the floor initramfs for the scenario's kernel and BOM into `dir`; returns its
/// path. The root is `/dev/vda1`, as the benchmark's disk has it.
pub fn build(s: &Scenario, dir: &Path) -> Result<PathBuf, HarnessError> {
    let (tree, order) = load_order(s)?;
    let cpio = |e: mkinitramfs::cpio::CpioError| HarnessError::Setup(e.to_string());
    let mut a = crate::rootfs::busybox_initramfs(
        &["proc", "sys", "run", "sysroot", "lib/modules"],
        &["sh", "mount", "insmod", "sleep", "switch_root", "mkdir"],
    )?;
    let moddir = format!("lib/modules/{}", tree.release);
    let mut insmods = String::new();
    for rel in &order {
        let src = tree.moddir.join(rel);
        let data = std::fs::read(&src).map_err(|e| HarnessError::io(&src, e))?;
        a.file(&format!("{moddir}/{rel}"), data, 0o644)
            .map_err(cpio)?;
        insmods.push_str(&format!("insmod /{moddir}/{rel}\n"));
    }
    let init = format!(
        "#!/bin/sh\n\
         export PATH=/bin\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /run\n\
         echo 'floor: init' > /dev/kmsg\n\
         {insmods}\
         echo 'floor: modules' > /dev/kmsg\n\
         i=0\n\
         while [ ! -b /dev/vda1 ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done\n\
         echo 'floor: device' > /dev/kmsg\n\
         mount -t ext4 -o ro /dev/vda1 /sysroot\n\
         echo 'floor: mounted' > /dev/kmsg\n\
         for d in dev proc sys run; do mount --move /$d /sysroot/$d; done\n\
         exec switch_root /sysroot /sbin/init\n"
    );
    a.file("init", init.into_bytes(), 0o755).map_err(cpio)?;
    let raw = a.write(0);
    // Compressed as ours is, so the two image sizes compare.
    let packed = mkinitramfs::compress(&raw, mkinitramfs::Compress::Zstd)
        .map_err(|e| HarnessError::Setup(format!("zstd: {e}")))?;
    let out = dir.join("floor-initrd.img");
    std::fs::write(&out, packed).map_err(|e| HarnessError::io(&out, e))?;
    Ok(out)
}

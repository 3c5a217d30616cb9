//! Stage `start`: what PID 1 does before anything can be checked. Mount the API
//! filesystems, install the panic policy, read the kernel command line once, load the
//! image's BOM from the initramfs and check that the running kernel is the one it names.
//! It also notes who the node is ([`crate::runtime::node::identity`]) for the report.
//!
//! PID 1 must never return, exit or unwind: the kernel would panic with "Attempted to
//! kill init!". The panic hook therefore logs to `/dev/kmsg`, syncs and reboots, powers
//! off or halts as the command line says ([`set_panic_action`]); if even that fails, the
//! thread sleeps forever.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::mount::MsFlags;

use super::{Classified, Context, Fault};
use crate::config::bom::{self, BomError};
use crate::config::cmdline::{Action, BootArgs};
use crate::sys::{self, SysError};
use crate::util::fs::{read_limited, InputError};

/// Most bytes read from `/proc/cmdline` (the kernel's own limit is 2048 on x86-64; some
/// configurations allow more).
pub const CMDLINE_MAX: u64 = 64 * 1024;

/// Why the boot could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot read the kernel command line: {0}")]
    Cmdline(InputError),
    #[error("cannot tell the running kernel's release: {0}")]
    Release(SysError),
    #[error(transparent)]
    Bom(#[from] BomError),
    #[error("running kernel {running} but the BOM's kernel.release is {bom}")]
    KernelMismatch { running: String, bom: String },
}

impl Classified for StartError {
    fn fault(&self) -> Fault {
        match self {
            StartError::Cmdline(_) | StartError::Release(_) => Fault::Platform,
            StartError::Bom(_) | StartError::KernelMismatch { .. } => Fault::Image,
        }
    }
}

/// The stage: command line, BOM, kernel release.
pub fn run(ctx: &mut Context) -> Result<String, StartError> {
    let path: PathBuf = ctx.roots.proc.join("cmdline");
    let mut raw = read_limited(&path, CMDLINE_MAX).map_err(StartError::Cmdline)?;
    while raw.last() == Some(&b'\n') {
        raw.pop();
    }
    let (line, raw) = cmdline_text(raw);
    ctx.cmdline = line;
    ctx.cmdline_raw = raw;
    ctx.args = BootArgs::parse(&ctx.cmdline);
    if ctx.cmdline_raw.is_some() {
        ctx.args.warnings.push(
            "the kernel command line holds bytes that are not UTF-8; read with U+FFFD in their place (measured as it is)"
                .into(),
        );
    }
    set_panic_action(ctx.args.on_panic);
    if ctx.args.debug {
        log::set_max_level(log::LevelFilter::Debug);
    }
    ctx.facts.warnings.append(&mut ctx.args.warnings);
    let (node, mut unread) = crate::runtime::node::identity(&ctx.roots.sys, &ctx.roots.proc);
    ctx.facts.node = node;
    ctx.facts.warnings.append(&mut unread);
    ctx.release = sys::kernel_release().map_err(StartError::Release)?;
    ctx.facts.kernel_release = Some(ctx.release.clone());
    let b = bom::load(Path::new(&ctx.args.bom_path))?;
    ctx.facts.image_id = Some(b.bom.image_id.to_string());
    ctx.facts.bom_sha256 = Some(b.sha256.clone());
    ctx.facts.bom_gpus = b.bom.hardware.gpus;
    ctx.facts.pool.clone_from(&b.bom.report.pool);
    log::info!("BOM {} sha256 {}", b.bom.image_id, b.sha256);
    let detail = format!("bom {} ({})", b.bom.image_id, b.path.display());
    let want = b.bom.kernel.release.to_string();
    ctx.bom = Some(b);
    if want != ctx.release {
        return Err(StartError::KernelMismatch {
            running: ctx.release.clone(),
            bom: want,
        });
    }
    Ok(detail)
}

/// The command line as text, and its exact bytes when they are not UTF-8: a byte the
/// kernel accepted never stops the boot here (each key's value is then judged as usual).
pub fn cmdline_text(raw: Vec<u8>) -> (String, Option<Vec<u8>>) {
    match String::from_utf8(raw) {
        Ok(s) => (s, None),
        Err(e) => {
            let bytes = e.into_bytes();
            (String::from_utf8_lossy(&bytes).into_owned(), Some(bytes))
        }
    }
}

static PANIC_ACTION: AtomicU8 = AtomicU8::new(2);

fn encode(a: Action) -> u8 {
    match a {
        Action::Halt => 0,
        Action::Poweroff => 1,
        Action::Reboot => 2,
    }
}

fn decode(v: u8) -> Action {
    match v {
        0 => Action::Halt,
        1 => Action::Poweroff,
        _ => Action::Reboot,
    }
}

/// Sets what the panic hook does (the default is reboot).
pub fn set_panic_action(a: Action) {
    PANIC_ACTION.store(encode(a), Ordering::SeqCst);
}

/// Installs the PID-1 panic hook.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let loc = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let action = decode(PANIC_ACTION.load(Ordering::SeqCst));
        crate::sys::kmsg::emergency(&format!(
            "PANIC in PID 1: {payload}{loc}; syncing, then {}",
            action_word(action)
        ));
        crate::runtime::power::finish(action)
    }));
}

fn action_word(a: Action) -> &'static str {
    match a {
        Action::Halt => "halt",
        Action::Poweroff => "power off",
        Action::Reboot => "reboot",
    }
}

/// Mounts the API filesystems PID 1 needs: `/proc`, `/sys`, `/dev` (devtmpfs), `/run`.
/// Already-mounted targets (`EBUSY`) are fine. Returns the failures, which the caller
/// reports; the boot goes on as far as it can.
pub fn mount_api_filesystems(root: &Path) -> Vec<SysError> {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let table: [(&str, &str, &str, MsFlags, Option<&str>); 4] = [
        ("proc", "proc", "proc", nosuid, None),
        ("sysfs", "sys", "sysfs", nosuid, None),
        (
            "devtmpfs",
            "dev",
            "devtmpfs",
            MsFlags::MS_NOSUID,
            Some("mode=0755"),
        ),
        (
            "tmpfs",
            "run",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
    ];
    let mut errs = Vec::new();
    for (src, dir, fstype, flags, data) in table {
        let target = root.join(dir);
        let _ = std::fs::create_dir_all(&target);
        match sys::mount(src, &target, Some(fstype), flags, data) {
            Ok(()) => {}
            Err(e) if e.errno == nix::errno::Errno::EBUSY => {}
            Err(e) => errs.push(e),
        }
    }
    // On a UEFI boot, the EFI variables: the preflight reads Secure Boot there whatever
    // the boot loader (the slot stage reads systemd-boot's there too).
    sys::mount_efivarfs(&root.join("sys"));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::Roots;

    fn ctx_in(dir: &Path) -> Context {
        Context::new(Roots {
            proc: dir.join("proc"),
            sys: dir.join("sys"),
            dev: dir.join("dev"),
            run: dir.join("run"),
            new_root: dir.join("sysroot"),
            modules: dir.join("lib/modules"),
            initramfs: dir.to_path_buf(),
        })
    }

    /// An unreadable command line or BOM stops the boot with an error naming the file,
    /// and the fault class comes from the error's variant.
    #[test]
    fn failing_reads_are_named_errors() {
        let d = std::env::temp_dir().join(format!("vld-start-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proc")).unwrap();
        let e = run(&mut ctx_in(&d)).unwrap_err();
        assert!(matches!(e, StartError::Cmdline(_)), "{e}");
        assert_eq!(e.fault(), Fault::Platform);
        assert!(e.to_string().contains("proc/cmdline"), "{e}");
        let bom = d.join("bom.toml");
        std::fs::write(
            d.join("proc/cmdline"),
            format!("ro validator.bom={}\n", bom.display()),
        )
        .unwrap();
        let mut c = ctx_in(&d);
        let e = run(&mut c).unwrap_err();
        assert!(matches!(e, StartError::Bom(_)), "{e}");
        assert_eq!(e.fault(), Fault::Image);
        assert!(e.to_string().contains("bom.toml"), "{e}");
        // The command line was read once and kept, newline removed, for the measurement.
        assert_eq!(c.cmdline, format!("ro validator.bom={}", bom.display()));
        std::fs::create_dir(&bom).unwrap();
        let e = run(&mut ctx_in(&d)).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A command line over [`CMDLINE_MAX`] and a BOM over [`bom::BOM_MAX`] (sparse files)
    /// are refused before any byte is read, the error naming the file and the limit.
    #[test]
    fn command_line_and_bom_over_their_limits_are_named_errors() {
        let d = std::env::temp_dir().join(format!("vld-start-limits-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proc")).unwrap();
        let cmdline = d.join("proc/cmdline");
        let f = std::fs::File::create(&cmdline).unwrap();
        f.set_len(CMDLINE_MAX + 1).unwrap();
        let e = run(&mut ctx_in(&d)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read the kernel command line: {}: larger than the limit of {CMDLINE_MAX} bytes",
                cmdline.display()
            )
        );
        let bom = d.join("bom.toml");
        std::fs::write(&cmdline, format!("ro validator.bom={}\n", bom.display())).unwrap();
        let f = std::fs::File::create(&bom).unwrap();
        f.set_len(bom::BOM_MAX + 1).unwrap();
        let e = run(&mut ctx_in(&d)).unwrap_err();
        assert!(matches!(e, StartError::Bom(_)), "{e}");
        assert!(
            e.to_string().contains(&format!(
                "{}: larger than the limit of {} bytes",
                bom.display(),
                bom::BOM_MAX
            )),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Bytes that are not UTF-8 on the command line (the kernel passes any byte) do not
    /// stop the boot: the text has U+FFFD in their place, the keys are still read, a
    /// warning says so, and the exact bytes are kept for the measurement.
    #[test]
    fn command_line_bytes_that_are_not_utf8_are_read_not_fatal() {
        let d = std::env::temp_dir().join(format!("vld-start-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proc")).unwrap();
        let mut line = b"ro x=\xff\xfe validator.root_timeout=7 validator.bom=".to_vec();
        line.extend_from_slice(d.join("missing.toml").to_string_lossy().as_bytes());
        line.extend_from_slice(b"\n\n");
        std::fs::write(d.join("proc/cmdline"), &line).unwrap();
        let mut c = ctx_in(&d);
        let e = run(&mut c).unwrap_err();
        // It got as far as the BOM, with the keys read.
        assert!(matches!(e, StartError::Bom(_)), "{e}");
        assert_eq!(c.args.root_timeout, std::time::Duration::from_secs(7));
        assert!(
            c.cmdline.starts_with("ro x=\u{fffd}\u{fffd} "),
            "{}",
            c.cmdline
        );
        let raw = c.cmdline_raw.as_deref().unwrap();
        assert_eq!(raw, &line[..line.len() - 2]);
        assert!(
            c.facts.warnings.iter().any(|w| w.contains("not UTF-8")),
            "{:?}",
            c.facts.warnings
        );
        assert_eq!(cmdline_text(b"ok".to_vec()), ("ok".to_string(), None));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

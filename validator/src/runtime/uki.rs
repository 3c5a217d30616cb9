//! Whether this boot came through a Unified Kernel Image, as systemd-stub tells the
//! operating system, and what the stub added to the initramfs from outside the image.
//!
//! Contract: [`read`] takes the `/sys` root (efivarfs mounted under it) and the
//! initramfs's root, and returns a [`BootImage`]:
//! - `stub`: systemd-stub's `StubInfo` variable (vendor [`LOADER_VENDOR`], a UTF-16LE
//!   string), present when a stub started the kernel; `image`: `LoaderImageIdentifier`
//!   (the image's path on the ESP, set by the stub when the boot loader did not);
//!   `kernel_image_pcr` and `kernel_parameters_pcr`: `StubPcrKernelImage` and
//!   `StubPcrKernelParameters`, the PCRs the stub says it measured its sections and
//!   the parameters it was given into (stub 252 sets the first only when it measured,
//!   the second whether or not it measured anything);
//! - `ignored_extra`: every file under [`EXTRA_DIR`] in the initramfs, as relative
//!   paths, sorted, at most [`EXTRA_MAX`] (then one entry saying how many more).
//!   systemd-stub places companion files from the ESP (`<image>.extra.d/*.cred`,
//!   `*.raw`, `/loader/credentials/*.cred`) there; they are not covered by the image's
//!   signature, so the init never reads anything under it and names each in the report.
//!
//! A variable that cannot be read or decoded is absent and named in the warnings. After
//! a kexec the variables are still the first boot's (the firmware keeps them; no stub ran
//! for this kernel): the report of a kexec'd boot says so through its slot facts.
//!
//! Limits: systemd-stub's variables only (another stub sets none); the listing does not
//! follow symbolic links. A directory under [`EXTRA_DIR`] (or an entry of it) that
//! cannot be listed is named in the warnings, not taken for an empty one.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// systemd's loader vendor GUID (`LoaderVendorGuid`), under which the stub sets its
/// variables.
pub const LOADER_VENDOR: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";
/// Where systemd-stub puts its companion files in the initramfs.
pub const EXTRA_DIR: &str = ".extra";
/// Most files of [`EXTRA_DIR`] named.
pub const EXTRA_MAX: usize = 32;
/// Most bytes of one variable read.
const VAR_MAX: u64 = 4096;

/// What the stub said of this boot, and what it added.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BootImage {
    /// `StubInfo`: the stub that started the kernel (`systemd-stub 252.39-1~deb12u1`);
    /// absent: none did (a kernel started by the boot loader itself).
    pub stub: Option<String>,
    /// `LoaderImageIdentifier`: the started image's path on the ESP.
    pub image: Option<String>,
    /// `StubPcrKernelImage`: the PCR the stub measured the image's sections into.
    pub kernel_image_pcr: Option<u32>,
    /// `StubPcrKernelParameters`: the PCR the stub measures a command line it was given,
    /// and credentials, into (stub 252 sets it whether or not it measured anything).
    pub kernel_parameters_pcr: Option<u32>,
    /// Files under `/.extra/` in the initramfs, which the init ignores.
    pub ignored_extra: Vec<String>,
}

impl BootImage {
    /// Whether a systemd-stub started the kernel.
    pub fn through_uki(&self) -> bool {
        self.stub.is_some()
    }
}

/// A UTF-16LE variable of the stub under `sys_root`: `Ok(None)` when absent.
fn var(sys_root: &Path, name: &str) -> Result<Option<String>, String> {
    let p = super::uefi_keys::efivar_file(sys_root, &format!("{name}-{LOADER_VENDOR}"));
    if p.symlink_metadata().is_err() {
        return Ok(None);
    }
    let b = crate::util::fs::read_limited(&p, VAR_MAX).map_err(|e| e.to_string())?;
    crate::formats::bls::efivar_utf16(&b, name)
        .map(Some)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// A PCR number variable.
fn pcr_var(sys_root: &Path, name: &str, warnings: &mut Vec<String>) -> Option<u32> {
    match var(sys_root, name) {
        Ok(Some(s)) => match s.trim().parse::<u32>() {
            Ok(n) if n < 24 => Some(n),
            _ => {
                warnings.push(format!("{name}: {s:?} is not a PCR number"));
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            warnings.push(format!("{name}: {e}"));
            None
        }
    }
}

/// Every file under `dir`, named `rel/...`, depth first, into `out` up to [`EXTRA_MAX`];
/// `total` counts them all. A directory (or an entry of it) that cannot be listed is
/// named in `unlisted` with why, so what it holds is not silently left unnamed.
fn list(
    dir: &Path,
    rel: &str,
    out: &mut Vec<String>,
    total: &mut usize,
    unlisted: &mut Vec<String>,
) {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            unlisted.push(format!("{rel}: {e}"));
            return;
        }
    };
    let mut names = Vec::new();
    for e in rd {
        match e {
            Ok(e) => names.push(e),
            Err(e) => unlisted.push(format!("{rel}: {e}")),
        }
    }
    names.sort_by_key(std::fs::DirEntry::file_name);
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = format!("{rel}/{name}");
        match e.file_type() {
            Ok(t) if t.is_dir() => list(&e.path(), &r, out, total, unlisted),
            _ => {
                *total += 1;
                if out.len() < EXTRA_MAX {
                    out.push(r);
                }
            }
        }
    }
}

/// What the stub said and added, with a warning for each thing that could not be read
/// and for each ignored file.
pub fn read(sys_root: &Path, initramfs: &Path) -> (BootImage, Vec<String>) {
    let mut warnings = Vec::new();
    let mut text = |name: &str| match var(sys_root, name) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!("{name}: {e}"));
            None
        }
    };
    let stub = text("StubInfo");
    let image = text("LoaderImageIdentifier");
    let mut b = BootImage {
        stub,
        image,
        kernel_image_pcr: pcr_var(sys_root, "StubPcrKernelImage", &mut warnings),
        kernel_parameters_pcr: pcr_var(sys_root, "StubPcrKernelParameters", &mut warnings),
        ignored_extra: Vec::new(),
    };
    let mut total = 0;
    let mut unlisted = Vec::new();
    let extra = initramfs.join(EXTRA_DIR);
    // Absent: the stub added nothing.
    if extra.symlink_metadata().is_ok() {
        list(
            &extra,
            &format!("/{EXTRA_DIR}"),
            &mut b.ignored_extra,
            &mut total,
            &mut unlisted,
        );
    }
    for u in unlisted {
        warnings.push(format!(
            "cannot list what systemd-stub added from outside the signed image: {u}"
        ));
    }
    if total > b.ignored_extra.len() {
        b.ignored_extra
            .push(format!("... and {} more", total - b.ignored_extra.len()));
    }
    if !b.ignored_extra.is_empty() {
        warnings.push(format!(
            "ignored what systemd-stub added from outside the signed image: {}",
            b.ignored_extra.join(", ")
        ));
    }
    (b, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16_var(s: &str) -> Vec<u8> {
        let mut v = vec![6, 0, 0, 0];
        for u in s.encode_utf16().chain([0]) {
            v.extend_from_slice(&u.to_le_bytes());
        }
        v
    }

    #[test]
    fn reads_the_stub_variables_and_names_extra_files() {
        let d = test_support::tmpdir("uki-vars");
        let sys = d.join("sys");
        let vars = sys.join(super::super::uefi_keys::EFIVARS);
        std::fs::create_dir_all(&vars).unwrap();
        let put = |n: &str, v: &[u8]| {
            std::fs::write(vars.join(format!("{n}-{LOADER_VENDOR}")), v).unwrap()
        };
        put("StubInfo", &utf16_var("systemd-stub 252.39-1~deb12u1"));
        put("LoaderImageIdentifier", &utf16_var("\\A\\linux.efi"));
        put("StubPcrKernelImage", &utf16_var("11"));
        put("StubPcrKernelParameters", &utf16_var("x1"));
        let init = d.join("init");
        std::fs::create_dir_all(init.join(".extra/credentials")).unwrap();
        std::fs::write(init.join(".extra/credentials/a.cred"), b"x").unwrap();
        std::fs::write(init.join(".extra/z.raw"), b"x").unwrap();
        let (b, w) = read(&sys, &init);
        assert_eq!(b.stub.as_deref(), Some("systemd-stub 252.39-1~deb12u1"));
        assert_eq!(b.image.as_deref(), Some("\\A\\linux.efi"));
        assert_eq!(b.kernel_image_pcr, Some(11));
        assert_eq!(b.kernel_parameters_pcr, None);
        assert_eq!(
            b.ignored_extra,
            vec!["/.extra/credentials/a.cred", "/.extra/z.raw"]
        );
        assert!(b.through_uki());
        assert!(
            w.iter().any(|w| w.contains("\"x1\" is not a PCR number")),
            "{w:?}"
        );
        assert!(w.iter().any(|w| w.contains("/.extra/z.raw")), "{w:?}");
        // No stub, no extra: nothing said.
        let (b, w) = read(&d.join("none"), &d.join("none"));
        assert_eq!(b, BootImage::default());
        assert!(w.is_empty());
    }

    /// An `/.extra` that cannot be listed (here a file, not a directory) is named, not
    /// taken for an empty one.
    #[test]
    fn extra_that_cannot_be_listed_is_named() {
        let d = test_support::tmpdir("uki-unlisted");
        std::fs::write(d.join(EXTRA_DIR), b"x").unwrap();
        let (b, w) = read(&d, &d);
        assert!(b.ignored_extra.is_empty());
        assert!(
            w.iter().any(|w| w.starts_with(
                "cannot list what systemd-stub added from outside the signed image: /.extra: "
            )),
            "{w:?}"
        );
    }

    #[test]
    fn many_extra_files_are_counted() {
        let d = test_support::tmpdir("uki-extra");
        let x = d.join(EXTRA_DIR);
        std::fs::create_dir_all(&x).unwrap();
        for i in 0..EXTRA_MAX + 3 {
            std::fs::write(x.join(format!("f{i:03}")), b"").unwrap();
        }
        let (b, _) = read(&d, &d);
        assert_eq!(b.ignored_extra.len(), EXTRA_MAX + 1);
        assert_eq!(
            b.ignored_extra.last().map(String::as_str),
            Some("... and 3 more")
        );
    }
}

//! The keys the kernel takes from the firmware, read as it reads them: Secure Boot, UEFI
//! `db` and `dbx` from efivarfs, and shim's MOK list (`MokListRT` from shim's MOK variable
//! table under `firmware/efi/mok-variables`, else the `MokListRT` EFI variable; it carries
//! shim's vendor certificate, Debian's Secure Boot CA). Debian's kernel loads `db` and the
//! MOK list into its platform (or machine) keyring and, with Debian's patch "Make use of
//! platform keyring for module signature verify", trusts them for modules and for
//! `kexec_file_load`, next to its built-in keys.
//!
//! Contract: [`read`] takes the `/sys` root and never fails: a database that cannot be
//! read or parsed is left out and named in [`UefiKeys::notes`]; without efivarfs mounted
//! Secure Boot is `None` and the databases are empty. [`kernel_builtin`] reads the
//! kernel's built-in certificates that mkinitramfs put in the initramfs's trust directory
//! (`kernel-builtin-*.der`, [`layout::BUILTIN_CERT_PREFIX`]). [`module_trust`] is the rule the module gate and the fallback
//! check share: under Secure Boot (lockdown enforces module and kexec signatures) only
//! what the kernel trusts (built-in, `db`, MOK); otherwise the initramfs's store plus `db`
//! and MOK (the kernel would load anything, tainted; the gate keeps the fleet's
//! certificates as its own policy).
//!
//! Revocation is read as the kernel and shim take it: `dbx` and shim's `MokListXRT` (its
//! MOK variable table first, as for `MokListRT`) as [`Revocations`], and shim's SBAT level
//! `SbatLevelRT` ([`crate::formats::sbat::Level`]). [`UefiKeys::module_hash_blacklist`]
//! is what the kernel puts in its blacklist keyring as `bin:` hashes (the SHA-256 entries
//! of `dbx`, and of `MokListXRT` under Secure Boot), which Debian's kernel refuses a
//! module by.
//!
//! Limits: `MokIgnoreDB` is not read; shim's
//! `MokListTrustedRT` (machine keyring or platform keyring) makes no difference to
//! Debian's kernel for modules, so it is not read either.

use std::path::Path;

use crate::config::layout;
use crate::formats::efisiglist;
use crate::formats::sbat;
use crate::trust::revocation::Revocations;
use crate::trust::{Cert, TrustStore};
use crate::util::fs::read_limited;

/// The `SecureBoot` variable under `/sys` (EFI global vendor): four attribute bytes, then
/// the value.
pub const SECURE_BOOT_VAR: &str =
    "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";
/// The image security database's vendor and shim's.
const IMAGE_SECURITY: &str = "d719b2cb-3d3a-4596-a3bc-dad00e67656f";
const SHIM_LOCK: &str = "605dab50-e046-4300-abb6-3dd810dd8b23";
/// The largest signature database read.
pub const DB_MAX: u64 = 1 << 20;

/// What the firmware and shim hand the kernel.
#[derive(Debug, Clone, Default)]
pub struct UefiKeys {
    /// Secure Boot, from efivarfs (`None`: unknown).
    pub secure_boot: Option<bool>,
    pub db: Vec<Cert>,
    pub mok: Vec<Cert>,
    /// UEFI `dbx`.
    pub dbx: Revocations,
    /// Shim's `MokListXRT`.
    pub mokx: Revocations,
    /// Shim's `SbatLevelRT` (`None`: not there, or left out with a note).
    pub sbat_level: Option<sbat::Level>,
    /// Databases left out, and why.
    pub notes: Vec<String>,
}

impl UefiKeys {
    /// `N from db, M from MokListRT, dbx: ..., MokListXRT: ..., SBAT level ...` (and what
    /// was left out).
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} from db, {} from MokListRT, {}, {}, SBAT level {}",
            self.db.len(),
            self.mok.len(),
            self.dbx.describe(),
            self.mokx.describe(),
            self.sbat_level
                .as_ref()
                .map_or_else(|| "none".to_string(), ToString::to_string)
        );
        if !self.notes.is_empty() {
            s.push_str(&format!(" (left out: {})", self.notes.join("; ")));
        }
        s
    }

    /// The kernel's `bin:` blacklist: the SHA-256 entries of `dbx`, and of `MokListXRT`
    /// under Secure Boot (`load_uefi_certs` reads it only then).
    pub fn module_hash_blacklist(&self) -> Vec<[u8; 32]> {
        let mut v = self.dbx.image_sha256.clone();
        if self.secure_boot == Some(true) {
            v.extend(self.mokx.image_sha256.iter().copied());
        }
        v
    }
}

/// Secure Boot as efivarfs says under `sys_root`: `Some(true)` on.
pub fn secure_boot(sys_root: &Path) -> Option<bool> {
    let b = read_limited(&sys_root.join(SECURE_BOOT_VAR), 64).ok()?;
    crate::formats::sysfs::efi_bool(&b).ok()
}

/// Where efivarfs shows the EFI variables under a `/sys` root.
pub const EFIVARS: &str = "firmware/efi/efivars";

/// The efivarfs file of the variable `name_vendor` (`Name-vendor-guid`) under `sys_root`:
/// four attribute bytes, then the value. The key databases and systemd-boot's
/// `LoaderBootCountPath` are found here; [`SECURE_BOOT_VAR`] is the same rule spelled
/// out as one path (the preflight names it in its messages).
pub fn efivar_file(sys_root: &Path, name_vendor: &str) -> std::path::PathBuf {
    sys_root.join(EFIVARS).join(name_vendor)
}

/// An efivarfs variable's value (after its four attribute bytes).
fn efivar(sys_root: &Path, name: &str, vendor: &str) -> Result<Option<Vec<u8>>, String> {
    let p = efivar_file(sys_root, &format!("{name}-{vendor}"));
    if p.symlink_metadata().is_err() {
        return Ok(None);
    }
    let b = read_limited(&p, DB_MAX).map_err(|e| e.to_string())?;
    b.get(4..)
        .map(|v| Some(v.to_vec()))
        .ok_or_else(|| format!("{}: shorter than its attributes", p.display()))
}

/// One of shim's variables as the kernel reads it: shim's MOK variable table first, else
/// the variable.
fn shim_var(sys_root: &Path, name: &str) -> Result<Option<Vec<u8>>, String> {
    let table = sys_root.join("firmware/efi/mok-variables").join(name);
    if table.symlink_metadata().is_ok() {
        return read_limited(&table, DB_MAX)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    efivar(sys_root, name, SHIM_LOCK)
}

/// Reads Secure Boot, `db`, `dbx`, the MOK lists and the SBAT level under `sys_root`.
pub fn read(sys_root: &Path) -> UefiKeys {
    let mut k = UefiKeys {
        secure_boot: secure_boot(sys_root),
        dbx: Revocations {
            name: "dbx".into(),
            ..Revocations::default()
        },
        mokx: Revocations {
            name: "MokListXRT".into(),
            ..Revocations::default()
        },
        ..UefiKeys::default()
    };
    match shim_var(sys_root, "SbatLevelRT") {
        Ok(Some(v)) => match sbat::Level::parse(&v) {
            Ok(l) => k.sbat_level = Some(l),
            Err(e) => k.notes.push(format!("SbatLevelRT: {e}")),
        },
        Ok(None) => {}
        Err(e) => k.notes.push(format!("SbatLevelRT: {e}")),
    }
    for (what, value) in [
        ("db", efivar(sys_root, "db", IMAGE_SECURITY)),
        ("MokListRT", shim_var(sys_root, "MokListRT")),
        ("dbx", efivar(sys_root, "dbx", IMAGE_SECURITY)),
        ("MokListXRT", shim_var(sys_root, "MokListXRT")),
    ] {
        let db = match value.and_then(|v| {
            v.map(|v| efisiglist::parse(&v).map_err(|e| e.to_string()))
                .transpose()
        }) {
            Ok(Some(db)) => db,
            Ok(None) => continue,
            Err(e) => {
                k.notes.push(format!("{what}: {e}"));
                continue;
            }
        };
        if what == "dbx" || what == "MokListXRT" {
            let mut r = Revocations::from_database(what, &db);
            k.notes.append(&mut r.notes);
            if what == "dbx" {
                k.dbx = r;
            } else {
                k.mokx = r;
            }
            continue;
        }
        for der in db.certs() {
            match Cert::from_der(der, what) {
                Ok(c) if what == "db" => k.db.push(c),
                Ok(c) => k.mok.push(c),
                Err(e) => k.notes.push(e.to_string()),
            }
        }
    }
    k
}

/// The kernel's built-in certificates in the initramfs's trust directory under `root`
/// (read errors are returned as notes).
pub fn kernel_builtin(root: &Path) -> (Vec<Cert>, Vec<String>) {
    let dir = root.join(layout::TRUST_DIR);
    let mut certs = Vec::new();
    let mut notes = Vec::new();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (certs, notes);
    };
    let mut names: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(layout::BUILTIN_CERT_PREFIX))
        })
        .collect();
    names.sort();
    for p in names {
        match read_limited(&p, crate::trust::CERT_FILE_MAX)
            .map_err(|e| e.to_string())
            .and_then(|b| Cert::from_der(&b, &p.display().to_string()).map_err(|e| e.to_string()))
        {
            Ok(c) => certs.push(c),
            Err(e) => notes.push(e),
        }
    }
    (certs, notes)
}

/// Whether `c` is one of the kernel's built-in certificates (by its file in the trust
/// directory).
pub fn is_builtin(c: &Cert) -> bool {
    Path::new(&c.origin)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(layout::BUILTIN_CERT_PREFIX))
}

/// The module trust store: under Secure Boot the kernel's (the built-in certificates of
/// `initramfs`, `db`, MOK); otherwise `initramfs`'s plus `db` and MOK. Returns the store
/// and the labels of the initramfs certificates left out.
pub fn module_trust(initramfs: &TrustStore, keys: &UefiKeys) -> (TrustStore, Vec<String>) {
    let mut store = TrustStore::new();
    let mut dropped = Vec::new();
    for c in &initramfs.certs {
        if keys.secure_boot == Some(true) && !is_builtin(c) {
            dropped.push(c.label());
        } else {
            store.add(c.clone());
        }
    }
    for c in keys.db.iter().chain(&keys.mok) {
        store.add(c.clone());
    }
    (store, dropped)
}

/// [`module_trust`], each certificate left out logged as a warning.
pub fn module_trust_logged(initramfs: &TrustStore, keys: &UefiKeys) -> TrustStore {
    let (store, dropped) = module_trust(initramfs, keys);
    for d in &dropped {
        log::warn!(
            "module gate: {d} is not trusted: under Secure Boot the kernel trusts only its \
             built-in keys, db and MOK"
        );
    }
    store
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Secure Boot path is the one rule's: efivarfs's directory, then the name.
    #[test]
    fn secure_boot_var_is_an_efivar_file() {
        let root = Path::new("/sys");
        assert_eq!(
            root.join(SECURE_BOOT_VAR),
            efivar_file(root, "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
        );
    }

    /// Without efivarfs: Secure Boot unknown, nothing read, nothing noted.
    #[test]
    fn nothing_mounted_is_nothing_read() {
        let d = std::env::temp_dir().join(format!("vld-uefi-keys-{}", std::process::id()));
        std::fs::create_dir_all(d.join("firmware/efi/efivars")).unwrap();
        let k = read(&d);
        assert_eq!(k.secure_boot, None);
        assert!(k.db.is_empty() && k.mok.is_empty() && k.dbx.is_empty() && k.mokx.is_empty());
        assert!(k.sbat_level.is_none());
        assert!(k.notes.is_empty());
        // A db that does not parse is named, not silently empty.
        std::fs::write(
            d.join(format!("firmware/efi/efivars/db-{IMAGE_SECURITY}")),
            [7, 0, 0, 0, 1, 2, 3],
        )
        .unwrap();
        std::fs::write(d.join(SECURE_BOOT_VAR), [6, 0, 0, 0, 1]).unwrap();
        let k = read(&d);
        assert_eq!(k.secure_boot, Some(true));
        assert_eq!(k.notes.len(), 1, "{:?}", k.notes);
        assert!(k.notes[0].starts_with("db: EFI signature list at byte 0"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

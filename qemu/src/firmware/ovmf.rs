//! OVMF for one VM: the firmware's code and a variable store of the VM's own.
//!
//! Contract: [`Ovmf::fresh`] copies OVMF's empty store ([`OVMF_VARS`]);
//! [`Ovmf::secure_boot`] is the production firmware, the SMM build
//! ([`OVMF_CODE_SECBOOT`]) with Microsoft's keys and Secure Boot on ([`OVMF_VARS_MS`]),
//! and [`Ovmf::secure_boot_with_db`] adds certificates to its `db`; [`Ovmf::snakeoil`]
//! uses Debian's snakeoil store ([`SNAKEOIL_VARS`], [`snakeoil_store`]) with Secure Boot
//! off; [`Ovmf::with_store`] writes any store a caller made ([`crate::efivars`]). Each
//! puts the store at `<dir>/ovmf-vars.fd`. [`Ovmf::qemu_args`] gives QEMU the code
//! read-only and the store writable (secure flash for SMM firmware).
//!
//! Limits: the firmware files are Debian's `ovmf` package's, at their fixed paths
//! (`scripts/provision` installs them); x86-64 only.

use std::path::{Path, PathBuf};

use crate::HarnessError;

/// OVMF's store with the snakeoil keys enrolled (PK, KEK, db), from Debian's `ovmf`.
pub const SNAKEOIL_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd";

/// OVMF's snakeoil store ([`SNAKEOIL_VARS`]) in memory, with Secure Boot off
/// (`SecureBootEnable` 0), for a caller to change further.
pub fn snakeoil_store() -> Result<crate::efivars::VarStore, HarnessError> {
    let mut s = crate::efivars::VarStore::open(Path::new(SNAKEOIL_VARS))?;
    s.set_byte(
        "SecureBootEnable",
        crate::efivars::SECURE_BOOT_ENABLE_GUID,
        0,
    )?;
    Ok(s)
}

/// OVMF's code (read-only pflash) and the variable store template, from Debian's `ovmf`.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// OVMF built for Secure Boot with its variables guarded by SMM (QEMU needs `smm=on` and
/// a secure pflash), and the store with Microsoft's keys enrolled and Secure Boot on: what
/// a production x86 server ships with.
pub const OVMF_CODE_SECBOOT: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub const OVMF_VARS_MS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";

/// OVMF for one VM: its code and a writable variable store of the VM's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ovmf {
    pub code: PathBuf,
    pub vars: PathBuf,
    /// The code requires SMM ([`OVMF_CODE_SECBOOT`]): the machine gets `smm=on` and the
    /// variable flash is secure.
    pub smm: bool,
}

impl Ovmf {
    /// A fresh variable store (a copy of [`OVMF_VARS`]) at `<dir>/ovmf-vars.fd`, replacing
    /// any there.
    pub fn fresh(dir: &Path) -> Result<Ovmf, HarnessError> {
        let vars = dir.join("ovmf-vars.fd");
        std::fs::copy(OVMF_VARS, &vars).map_err(|e| {
            HarnessError::Setup(format!(
                "{OVMF_VARS}: {e} (install ovmf: scripts/provision)"
            ))
        })?;
        if !Path::new(OVMF_CODE).is_file() {
            return Err(HarnessError::Setup(format!(
                "{OVMF_CODE} not found (install ovmf: scripts/provision)"
            )));
        }
        Ok(Ovmf {
            code: OVMF_CODE.into(),
            vars,
            smm: false,
        })
    }

    /// The production firmware: [`OVMF_CODE_SECBOOT`] with a fresh copy of
    /// [`OVMF_VARS_MS`] (Microsoft's KEK and db, Secure Boot on) at `<dir>/ovmf-vars.fd`.
    pub fn secure_boot(dir: &Path) -> Result<Ovmf, HarnessError> {
        for f in [OVMF_CODE_SECBOOT, OVMF_VARS_MS] {
            if !Path::new(f).is_file() {
                return Err(HarnessError::Setup(format!(
                    "{f} not found (install ovmf: scripts/provision)"
                )));
            }
        }
        let vars = dir.join("ovmf-vars.fd");
        std::fs::copy(OVMF_VARS_MS, &vars).map_err(|e| HarnessError::io(&vars, e))?;
        Ok(Ovmf {
            code: OVMF_CODE_SECBOOT.into(),
            vars,
            smm: true,
        })
    }

    /// [`Ovmf::secure_boot`] with `extra` certificates (DER) added to `db`, each as one
    /// more X.509 signature list after Microsoft's.
    pub fn secure_boot_with_db(dir: &Path, extra: &[Vec<u8>]) -> Result<Ovmf, HarnessError> {
        let ovmf = Ovmf::secure_boot(dir)?;
        if extra.is_empty() {
            return Ok(ovmf);
        }
        let mut store = crate::efivars::VarStore::open(&ovmf.vars)?;
        let db = store
            .get("db", crate::efivars::IMAGE_SECURITY_DATABASE)
            .ok_or_else(|| HarnessError::Setup(format!("{OVMF_VARS_MS}: no db")))?;
        let mut value = store.bytes.get(db.data).unwrap_or_default().to_vec();
        value.extend(crate::efivars::db(extra));
        store.replace("db", crate::efivars::IMAGE_SECURITY_DATABASE, &value)?;
        store.write(&ovmf.vars)?;
        Ok(ovmf)
    }

    /// OVMF's snakeoil store ([`SNAKEOIL_VARS`]: PK, KEK and db hold the snakeoil
    /// certificate) with Secure Boot off (`SecureBootEnable` 0), at `<dir>/ovmf-vars.fd`:
    /// a kernel started through it loads db into its `.platform` keyring and so trusts
    /// modules signed with the snakeoil key, while `-kernel` still boots an image db does
    /// not sign.
    pub fn snakeoil(dir: &Path) -> Result<Ovmf, HarnessError> {
        Ovmf::with_store(dir, &snakeoil_store()?)
    }

    /// OVMF's code with `store` written to `<dir>/ovmf-vars.fd` as its variable store.
    pub fn with_store(dir: &Path, store: &crate::efivars::VarStore) -> Result<Ovmf, HarnessError> {
        let vars = dir.join("ovmf-vars.fd");
        store.write(&vars)?;
        Ok(Ovmf {
            code: OVMF_CODE.into(),
            vars,
            smm: false,
        })
    }

    /// QEMU's arguments: the code read-only, the variable store writable (and, for SMM
    /// firmware, the flash writable only from SMM; the machine's `smm=on` is
    /// [`crate::vm::VmConfig::command`]'s).
    pub fn qemu_args(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        if self.smm {
            v.extend([
                "-global".into(),
                "driver=cfi.pflash01,property=secure,value=on".into(),
            ]);
        }
        v.extend([
            "-drive".into(),
            format!(
                "if=pflash,format=raw,unit=0,readonly=on,file={}",
                self.code.display()
            ),
            "-drive".into(),
            format!("if=pflash,format=raw,unit=1,file={}", self.vars.display()),
        ]);
        v
    }
}

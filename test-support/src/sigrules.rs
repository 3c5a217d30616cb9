//! The module gate the signature-rule cases are judged by, built once for both judges:
//! the gate's own tests (`validator/tests/signature_rules.rs`) and the test bed's
//! comparison with the real kernels (`qemu::sigrules`). As the init builds it, but in
//! kernel mode: the kernel's vermagic and exports, its built-in certificates plus every
//! test certificate the kernel gets in UEFI db that the trust store can load, the module
//! the QEMU boots name in `module_blacklist=` ([`sigcases::cases::BLACKLISTED`]), and the
//! hash blacklist the caller gives (the firmware's dbx read back, for row S40).

use sigcases::Set;
use validator::config::bom::VermagicMode;
use validator::formats::vmlinuz::KernelFacts;
use validator::gate::{Gate, Policy};
use validator::trust::TrustStore;

/// db certificates the trust store refused, with its message.
pub type Refused = Vec<(&'static str, String)>;

/// The gate for `set`'s kernel with `hash_blacklist` as its module hash blacklist, and
/// the db certificates its trust store refused.
pub fn gate(set: &Set, hash_blacklist: Vec<[u8; 32]>) -> Result<(Gate, Refused), String> {
    let path = crate::boot_file(&set.root, "vmlinuz-")
        .ok_or_else(|| format!("no vmlinuz-* in {}", set.root.join("boot").display()))?;
    let image = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let facts = KernelFacts::from_image(&image).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut trust = TrustStore::new();
    for c in &facts.certs {
        trust
            .add_bytes(c, "kernel")
            .map_err(|e| format!("{}: kernel certificate: {e}", path.display()))?;
    }
    let mut refused = Vec::new();
    for key in sigcases::keys().db_certs() {
        if let Err(e) = trust.add_bytes(&key.cert_der(), key.name) {
            refused.push((key.name, e.to_string()));
        }
    }
    let gate = Gate {
        trust,
        symvers: Some(facts.symvers()),
        policy: Policy {
            release: Some(facts.release.clone()),
            kernel_vermagic: facts.vermagic.clone(),
            mode: VermagicMode::Kernel,
            require_signature: true,
            unknown_symbols_fatal: true,
            module_blacklist: vec![sigcases::cases::BLACKLISTED.to_string()],
            hash_blacklist,
            ..Policy::default()
        },
    };
    Ok((gate, refused))
}

//! The gate's checks of a module's ELF and `.modinfo`: the kernel's ELF rules past the
//! parser's, the module name, vermagic (`same_magic`, and the release word in strict
//! mode), then the BOM's policy; and, once the symbol table is complete, the imports as
//! the kernel resolves them at load time (CRCs from `__versions`, unknown symbols,
//! GPL-only exports, symbol namespaces).
//!
//! Limits: duplicate exports are not checked, nor the namespaces of symbols other modules
//! export (their `__crc_` exports carry none).

use std::collections::{HashMap, HashSet};

use crate::config::bom::VermagicMode;
use crate::formats::kmod::modinfo;
use crate::formats::kmod::symvers::{Export, Symvers};

use super::{Gate, KernelRules, ReasonCode, Verdict};

/// The licences the kernel's `license_is_gpl_compatible` accepts.
pub const GPL_COMPATIBLE: [&str; 6] = [
    "GPL",
    "GPL v2",
    "GPL and additional rights",
    "Dual BSD/GPL",
    "Dual MIT/GPL",
    "Dual MPL/GPL",
];

/// `e_machine` of the modules the gate judges: the kernels it reads are x86-64 bzImages.
pub const EM_X86_64: u16 = 62;

/// The symbol whose CRC stands for `struct module`'s layout; the kernel checks its
/// `__versions` record for every module (`check_modstruct_version`).
pub const MODULE_LAYOUT: &str = "module_layout";

/// The kernel's `same_magic()`: with CRCs the release word is not compared.
pub fn same_magic(module: &str, kernel: &str, has_crcs: bool) -> bool {
    if has_crcs {
        fn rest(s: &str) -> &str {
            s.split_once(' ').map_or("", |(_, r)| r)
        }
        rest(module) == rest(kernel)
    } else {
        module == kernel
    }
}

impl Gate {
    /// The kernel's ELF rules past the parser's (`elf_validity_check` on 6.1,
    /// `elf_validity_cache_copy` on 6.12, `setup_load_info`): ENOEXEC in the kernel.
    pub(super) fn check_elf_rules(&self, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        let strict = self
            .policy
            .release
            .as_deref()
            .and_then(KernelRules::debian)
            .is_some_and(|k| k.elf_exactly_one);
        if elf.machine != EM_X86_64 {
            v.reason(
                ReasonCode::Unreadable,
                format!(
                    "Invalid architecture in ELF header: {} (the kernel is x86-64, {EM_X86_64})",
                    elf.machine
                ),
            );
        }
        if elf.this_module.is_empty() {
            v.reason(
                ReasonCode::Unreadable,
                "No module found in object (no .gnu.linkonce.this_module section)",
            );
        } else if strict && elf.this_module.len() != 1 {
            v.reason(
                ReasonCode::Unreadable,
                "Exactly one .gnu.linkonce.this_module section must exist.",
            );
        } else if strict {
            let (ty, flags, _) = elf.this_module.first().copied().unwrap_or_default();
            if ty == goblin::elf::section_header::SHT_NOBITS
                || flags & u64::from(goblin::elf::section_header::SHF_ALLOC) == 0
            {
                v.reason(
                    ReasonCode::Unreadable,
                    ".gnu.linkonce.this_module must be allocated and have a size set",
                );
            }
        }
        if strict && elf.modinfo_sections > 1 {
            v.reason(
                ReasonCode::Unreadable,
                "Only one .modinfo section must exist.",
            );
        }
    }

    pub(super) fn check_elf(&self, name: &str, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        self.check_elf_rules(elf, v);
        let mi = &elf.modinfo;
        v.license = mi.get("license").map(str::to_string);
        if let Some(n) = mi.get("name") {
            if crate::formats::kmod::normalize_name(n) != name {
                v.reason(
                    ReasonCode::Name,
                    format!("the file holds module {n}, not {name}"),
                );
            }
        }
        match mi.get("vermagic") {
            None => v.reason(ReasonCode::Vermagic, "no vermagic in .modinfo"),
            Some(vm) => {
                v.vermagic = Some(vm.to_string());
                if let Some(kv) = &self.policy.kernel_vermagic {
                    if !same_magic(vm, kv, elf.has_versions) {
                        v.reason(
                            ReasonCode::Vermagic,
                            format!("version magic '{vm}' should be '{kv}'"),
                        );
                    }
                }
                if self.policy.mode == VermagicMode::Strict {
                    if let Some(rel) = &self.policy.release {
                        let word = vm.split(' ').next().unwrap_or("");
                        if word != rel {
                            v.reason(
                                ReasonCode::VermagicRelease,
                                format!("built for kernel {word}, the image's kernel is {rel}"),
                            );
                        }
                    }
                }
            }
        }
        self.check_policy(name, elf, v);
    }

    /// Checks the module's imports against the symbol table as the kernel does at load
    /// time (the caller settles `pass`).
    pub fn check_crcs(&self, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        if let Some(table) = &self.symvers {
            check_imports(
                elf,
                v,
                &|s| table.map.get(s),
                self.policy.unknown_symbols_fatal,
            );
        }
    }

    /// `extra` over the gate's symbol table, for [`Gate::check_crcs_over`]: whether the
    /// two share a symbol is found here, once for every module checked against them.
    pub fn overlay<'a>(&self, extra: &'a Symvers) -> Overlay<'a> {
        let disjoint = self
            .symvers
            .as_ref()
            .is_none_or(|t| !extra.map.keys().any(|k| t.map.contains_key(k)));
        Overlay { extra, disjoint }
    }

    /// [`Gate::check_crcs`] against the gate's symbol table with `over`'s symbols over it
    /// (the exports of the modules checked with this one; a symbol in both is theirs), as
    /// if they had been inserted into the table. Nothing is checked when the gate has no
    /// table.
    pub fn check_crcs_over(&self, over: &Overlay<'_>, elf: &modinfo::ModuleElf, v: &mut Verdict) {
        if let Some(table) = &self.symvers {
            let extra = &over.extra.map;
            // Without a shared symbol the order of the two lookups cannot change what is
            // found, and most imports are the kernel image's: the table first.
            let disjoint = over.disjoint;
            let lookup = |s: &str| {
                if disjoint {
                    table.map.get(s).or_else(|| extra.get(s))
                } else {
                    extra.get(s).or_else(|| table.map.get(s))
                }
            };
            check_imports(elf, v, &lookup, self.policy.unknown_symbols_fatal);
        }
    }
}

/// A batch's exports over the gate's symbol table ([`Gate::overlay`]).
#[derive(Debug, Clone, Copy)]
pub struct Overlay<'a> {
    extra: &'a Symvers,
    /// No symbol is in both.
    disjoint: bool,
}

/// The imports of `elf` against the symbol table `lookup` reads, as the kernel resolves
/// them at load time.
fn check_imports<'t>(
    elf: &modinfo::ModuleElf,
    v: &mut Verdict,
    lookup: &dyn Fn(&str) -> Option<&'t Export>,
    unknown_symbols_fatal: bool,
) {
    if !elf.has_versions {
        v.reason(
            ReasonCode::NoVersions,
            "no __versions section (built without CONFIG_MODVERSIONS)",
        );
        return;
    }
    let mut bad = Vec::new();
    let mut missing = Vec::new();
    let mut unknown = Vec::new();
    let mut gpl_only = Vec::new();
    let mut namespaces = Vec::new();
    let gplok = elf
        .modinfo
        .get("license")
        .is_some_and(|l| GPL_COMPATIBLE.contains(&l));
    let hasher = foldhash::fast::RandomState::default();
    // A name the symbol table repeats is judged once: the names that failed are kept (a
    // repeat of a name that passed passes again, so those need no set).
    let mut failed = HashSet::with_hasher(hasher.clone());
    // The kernel's check_version takes the first `__versions` record of a name; one
    // map instead of a scan per import (modules import hundreds of symbols).
    let mut versions = HashMap::with_capacity_and_hasher(elf.versions().len(), hasher);
    for r in elf.versions() {
        versions.entry(r.symbol).or_insert(r.crc);
    }
    // check_modstruct_version first, then simplify_symbols in symbol-table order.
    let layout = lookup(MODULE_LAYOUT)
        .is_some()
        .then_some((MODULE_LAYOUT, false));
    let undefined = elf.undefined().map(|u| (u.name, u.weak));
    for (name, weak) in layout.into_iter().chain(undefined) {
        if failed.contains(name) {
            continue;
        }
        let Some(x) = lookup(name) else {
            // The kernel: an unresolved weak symbol is fine, and x86 ignores an
            // unreferenced _GLOBAL_OFFSET_TABLE_ (ignore_undef_symbol).
            if !weak && name != "_GLOBAL_OFFSET_TABLE_" {
                unknown.push(name.to_string());
                failed.insert(name);
            }
            continue;
        };
        // find_symbol with gplok false skips GPL-only exports: "Unknown symbol".
        if x.gpl && !gplok {
            gpl_only.push(name.to_string());
            failed.insert(name);
            continue;
        }
        // verify_namespace_is_imported (CONFIG_MODULE_ALLOW_MISSING_NAMESPACE_IMPORTS
        // is unset in both Debian kernels).
        if !x.namespace.is_empty() && !elf.modinfo.all("import_ns").any(|n| n == x.namespace) {
            namespaces.push(format!(
                "module uses symbol ({name}) from namespace {}, but does not import it",
                x.namespace
            ));
            failed.insert(name);
        }
        match versions.get(name) {
            None => missing.push(name.to_string()),
            Some(&crc) if crc != u64::from(x.crc) => bad.push(format!(
                "disagrees about version of symbol {name} (module {crc:#010x}, {} {:#010x})",
                x.module, x.crc
            )),
            Some(_) => continue,
        }
        failed.insert(name);
    }
    for b in bad {
        v.reason(ReasonCode::Crc, b);
    }
    for m in missing {
        v.reason(
            ReasonCode::NoSymbolVersion,
            format!("no symbol version for {m}"),
        );
    }
    for n in namespaces {
        v.reason(ReasonCode::NamespaceNotImported, n);
    }
    if !gpl_only.is_empty() {
        v.reason(
            ReasonCode::GplOnlySymbol,
            format!(
                "licence '{}' is not GPL-compatible, and the module uses GPL-only \
                     symbol(s) {} (the kernel: Unknown symbol)",
                elf.modinfo.get("license").unwrap_or("(none)"),
                gpl_only.join(", ")
            ),
        );
    }
    if unknown_symbols_fatal && !unknown.is_empty() {
        v.reason(
            ReasonCode::UnknownSymbol,
            format!("unknown symbol(s) {}", unknown.join(", ")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::bom::Flavour;
    use crate::gate::Policy;

    #[test]
    fn same_magic_follows_the_kernel() {
        let k = "6.1.0-57-amd64 SMP preempt mod_unload modversions ";
        assert!(same_magic(
            "6.1.0-99-amd64 SMP preempt mod_unload modversions ",
            k,
            true
        ));
        assert!(!same_magic(
            "6.1.0-99-amd64 SMP preempt mod_unload modversions ",
            k,
            false
        ));
        assert!(!same_magic(
            "6.1.0-57-cloud-amd64 SMP mod_unload modversions ",
            k,
            true
        ));
        assert!(same_magic(k, k, false));
    }

    fn elf_with(license: &str, intree: bool) -> modinfo::ModuleElf {
        let mut text = format!(
            "license={license}\0vermagic=6.1.0-57-amd64 SMP preempt mod_unload modversions \0"
        );
        if intree {
            text.push_str("intree=Y\0");
        }
        let mut elf = modinfo::ModuleElf::default();
        elf.modinfo = modinfo::ModInfo::parse(text.as_bytes());
        elf.has_versions = true;
        elf.machine = EM_X86_64;
        elf.modinfo_sections = 1;
        elf.this_module = vec![(1, 3, 1344)];
        elf
    }

    #[test]
    fn a_repeated_import_is_judged_once() {
        let mut table = Symvers::default();
        table.insert("foo", 1, "vmlinux", false);
        table.insert("bar", 2, "vmlinux", false);
        table.insert("ok", 3, "vmlinux", false);
        let g = Gate {
            symvers: Some(table),
            policy: Policy {
                unknown_symbols_fatal: true,
                ..Policy::default()
            },
            ..Gate::default()
        };
        let mut elf = elf_with("GPL", true);
        elf.push_test_symbols(
            &[(b"foo", 9), (b"ok", 3)],
            &[b"foo", b"ok", b"baz", b"foo", b"bar", b"baz", b"bar", b"ok"],
        );
        let mut v = Verdict::new("m");
        g.check_crcs(&elf, &mut v);
        let got: Vec<_> = v
            .reasons
            .iter()
            .map(|r| (r.code, r.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    ReasonCode::Crc,
                    "disagrees about version of symbol foo (module 0x00000009, vmlinux 0x00000001)"
                ),
                (ReasonCode::NoSymbolVersion, "no symbol version for bar"),
                (ReasonCode::UnknownSymbol, "unknown symbol(s) baz"),
            ]
        );
    }

    #[test]
    fn a_batchs_exports_count_over_the_table_in_either_order_of_lookup() {
        let mut table = Symvers::default();
        table.insert("foo", 1, "vmlinux", false);
        let g = Gate {
            symvers: Some(table),
            ..Gate::default()
        };
        let mut elf = elf_with("GPL", true);
        elf.push_test_symbols(&[(b"foo", 2), (b"bar", 3)], &[b"foo", b"bar"]);
        let check = |extra: &Symvers| {
            let over = g.overlay(extra);
            let mut v = Verdict::new("m");
            g.check_crcs_over(&over, &elf, &mut v);
            (
                over.disjoint,
                v.reasons.iter().map(|r| r.code).collect::<Vec<_>>(),
            )
        };
        // Disjoint: the table read first still finds bar in the batch's exports, and
        // foo's CRC is the table's (1, not the module's 2).
        let mut extra = Symvers::default();
        extra.insert("bar", 3, "other", false);
        assert_eq!(check(&extra), (true, vec![ReasonCode::Crc]));
        // foo in both: the batch's (2) counts, as if inserted over the table.
        extra.insert("foo", 2, "other", false);
        assert_eq!(check(&extra), (false, vec![]));
    }

    #[test]
    fn nvidia_flavour_follows_the_bom() {
        let mut g = Gate::default();
        g.policy.out_of_tree = Some(["nvidia".to_string()].into_iter().collect());
        let codes = |g: &Gate, name: &str, lic: &str| {
            let mut v = Verdict::new(name);
            g.check_elf(name, &elf_with(lic, false), &mut v);
            v.reasons.iter().map(|r| r.code).collect::<Vec<_>>()
        };
        g.policy.flavour = Some(Flavour::Open);
        assert!(codes(&g, "nvidia", "Dual MIT/GPL").is_empty());
        assert_eq!(codes(&g, "nvidia", "NVIDIA"), ["flavour"]);
        g.policy.flavour = Some(Flavour::Proprietary);
        assert!(codes(&g, "nvidia", "NVIDIA").is_empty());
        assert_eq!(codes(&g, "nvidia", "Dual MIT/GPL"), ["flavour"]);
        // Another out-of-tree module not in the BOM's list.
        assert_eq!(codes(&g, "nvidia_fs", "GPL"), ["out-of-tree"]);
        g.policy.release = Some("6.1.0-58-amd64".into());
        assert_eq!(codes(&g, "nvidia", "NVIDIA"), ["vermagic-release"]);
    }
}

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use sigcases::Kernel;

#[test]
fn observe() {
    let mut out = String::new();
    for k in Kernel::ALL {
        let set = sigcases::set(k);
        for enforce in [false, true] {
            let b = qemu::sigrules::boot(set, enforce).unwrap();
            out.push_str(&format!(
                "=== {} enforce={enforce} ended={} {}\n",
                k.label(),
                b.ended,
                b.outcome.describe()
            ));
            for l in &b.boot_log {
                out.push_str(&format!("  BOOT {l}\n"));
            }
            for l in &b.state {
                out.push_str(&format!("  STATE {l}\n"));
            }
            for c in &set.cases {
                match b.answers.get(&c.id) {
                    Some(a) => {
                        out.push_str(&format!("{} {}\n", c.id, a.short()));
                        for l in &a.log {
                            out.push_str(&format!("    {l}\n"));
                        }
                    }
                    None => out.push_str(&format!("{} MISSING\n", c.id)),
                }
            }
        }
    }
    std::fs::write("/tmp/sigrules-observed.txt", &out).unwrap();
}

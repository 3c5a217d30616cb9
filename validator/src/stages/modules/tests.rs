//! Unit tests of the `modules` stage: measuring only what the gate digested.

use super::*;
use crate::runtime::modload::ModuleReport;

/// A loaded module whose image digest the gate did not record is never measured as
/// something else (no second read, no empty bytes): the stage gets a named error.
#[test]
fn a_loaded_module_without_its_digest_is_not_measured() {
    let mut ctx = Context::new(crate::stages::Roots::default());
    let mut m = ModuleReport::new("ext4", ModStatus::Loaded);
    m.sha256 = Some("ab".repeat(32));
    ctx.facts.modules.push(m);
    assert!(measure_loaded(&mut ctx).is_ok());
    ctx.facts
        .modules
        .push(ModuleReport::new("jbd2", ModStatus::Loaded));
    let e = measure_loaded(&mut ctx).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot measure module jbd2: the gate recorded no digest of the image the kernel was given"
    );
    assert_eq!(ModulesError::from(e).fault(), Fault::Image);
}

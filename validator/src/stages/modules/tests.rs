//! Unit tests of the `modules` stage: measuring only what the gate digested (through the
//! load-and-measure both module stages share), an image fault when it cannot.

use super::*;
use crate::runtime::modload::gated::measure;
use crate::runtime::modload::ModuleReport;

/// A loaded module whose image digest the gate did not record is never measured as
/// something else (no second read, no empty bytes): the stage gets a named error.
#[test]
fn a_loaded_module_without_its_digest_is_not_measured() {
    let mut warnings = Vec::new();
    let mut m = ModuleReport::new("ext4", ModStatus::Loaded);
    m.sha256 = Some("ab".repeat(32));
    let mut modules = vec![m];
    assert!(measure(&modules, None, &mut warnings).is_ok());
    modules.push(ModuleReport::new("jbd2", ModStatus::Loaded));
    let e = measure(&modules, None, &mut warnings).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot measure module jbd2: the gate recorded no digest of the image the kernel was given"
    );
    assert_eq!(ModulesError::from(e).fault(), Fault::Image);
}

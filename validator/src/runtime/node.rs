//! What the report says about the node itself, read with bounded reads. The identity
//! (DMI product name, product serial and board serial from `<sys>/class/dmi/id/`, the
//! kernel's boot id from `<proc>/sys/kernel/random/boot_id`) is read once by the `start`
//! stage; PID 1's peak memory (`VmHWM` of `<proc>/self/status`) is read when the report is
//! made.
//!
//! Contract: never fails a boot. A value that is missing, unreadable, larger than
//! [`SYSFS_VALUE_MAX`] (one page, as every sysfs attribute) or empty is `None`; a value is
//! trimmed and any control character in it is replaced by `?`, so the report and the
//! console line stay one line each. What could not
//! be read (other than "no such file", which is normal on machines without DMI) is
//! returned as a warning naming the file.
//!
//! Current limits: `product_serial` and `board_serial` are readable by root only (PID 1
//! is root); firmware that fills them with placeholders ("To be filled by O.E.M.") is
//! reported as it is.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::util::fs::{read_text_limited, InputError, SYSFS_VALUE_MAX};

/// Who the node is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NodeFacts {
    /// DMI `product_name` (the server model).
    pub product_name: Option<String>,
    /// DMI `product_serial` (the chassis' serial number).
    pub product_serial: Option<String>,
    /// DMI `board_serial` (the mainboard's serial number).
    pub board_serial: Option<String>,
    /// The kernel's random id of this boot (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: Option<String>,
}

/// Reads one value: `Ok(None)` when absent or empty.
fn value(path: &Path) -> Result<Option<String>, InputError> {
    match read_text_limited(path, SYSFS_VALUE_MAX) {
        Ok(s) => {
            let v: String = s
                .trim()
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            Ok((!v.is_empty()).then_some(v))
        }
        Err(InputError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The node's identity under the roots `sys` and `proc`, and what could not be read.
pub fn identity(sys: &Path, proc: &Path) -> (NodeFacts, Vec<String>) {
    let mut warnings = Vec::new();
    let mut read = |p: &Path| match value(p) {
        Ok(v) => v,
        Err(e) => {
            warnings.push(format!("node identity: {e}"));
            None
        }
    };
    let dmi = sys.join("class/dmi/id");
    let facts = NodeFacts {
        product_name: read(&dmi.join("product_name")),
        product_serial: read(&dmi.join("product_serial")),
        board_serial: read(&dmi.join("board_serial")),
        boot_id: read(&proc.join("sys/kernel/random/boot_id")),
    };
    (facts, warnings)
}

/// PID 1's peak resident set size in bytes (`VmHWM`), `None` when unreadable.
pub fn peak_rss_bytes(proc: &Path) -> Option<u64> {
    let text = read_text_limited(&proc.join("self/status"), 64 * 1024).ok()?;
    crate::formats::procstatus::memory_bytes(&text, "VmHWM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_from_a_fixture_tree() {
        let d = std::env::temp_dir().join(format!("vld-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let dmi = d.join("sys/class/dmi/id");
        std::fs::create_dir_all(&dmi).unwrap();
        std::fs::create_dir_all(d.join("proc/sys/kernel/random")).unwrap();
        std::fs::write(dmi.join("product_name"), "HGX H200 8-GPU\n").unwrap();
        std::fs::write(dmi.join("product_serial"), "  SN\x01123 \n").unwrap();
        std::fs::write(dmi.join("board_serial"), "\n").unwrap();
        std::fs::write(
            d.join("proc/sys/kernel/random/boot_id"),
            "0f0e0d0c-0b0a-0908-0706-050403020100\n",
        )
        .unwrap();
        let (f, w) = identity(&d.join("sys"), &d.join("proc"));
        assert_eq!(f.product_name.as_deref(), Some("HGX H200 8-GPU"));
        assert_eq!(f.product_serial.as_deref(), Some("SN?123"));
        assert_eq!(f.board_serial, None, "empty is absent");
        assert_eq!(
            f.boot_id.as_deref(),
            Some("0f0e0d0c-0b0a-0908-0706-050403020100")
        );
        assert!(w.is_empty(), "{w:?}");
        // A directory where a value should be, and a huge value: warnings naming the file.
        std::fs::remove_file(dmi.join("board_serial")).unwrap();
        std::fs::create_dir(dmi.join("board_serial")).unwrap();
        std::fs::write(dmi.join("product_name"), vec![b'x'; 5000]).unwrap();
        let (f, w) = identity(&d.join("sys"), &d.join("proc"));
        assert_eq!((f.product_name, f.board_serial), (None, None));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("product_name") && w[0].contains("limit"),
            "{w:?}"
        );
        assert!(
            w[1].contains("board_serial") && w[1].contains("directory"),
            "{w:?}"
        );
        // No DMI at all (a VM without SMBIOS): nothing, and no warning.
        let (f, w) = identity(&d.join("nowhere"), &d.join("proc"));
        assert_eq!(f.product_name, None);
        assert!(w.is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn peak_memory_of_this_process() {
        let b = peak_rss_bytes(Path::new("/proc")).expect("VmHWM of the test process");
        assert!(b > 0 && b.is_multiple_of(1024), "{b}");
        assert_eq!(peak_rss_bytes(Path::new("/nonexistent")), None);
    }
}

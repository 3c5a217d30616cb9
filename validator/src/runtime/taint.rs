//! The kernel's taint after module loading (`/proc/sys/kernel/tainted`), as letters.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::util::fs::{read_text_limited, InputError};

/// The kernel's taint after module loading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TaintReport {
    pub value: u64,
    /// As `dmesg` prints them (`POE`...).
    pub flags: String,
    /// Flags the BOM's `policy.taint_allowed` does not allow.
    pub unexpected: String,
}

/// Taint flags that point at the modules we loaded (proprietary, forced, staging,
/// out-of-tree, unsigned).
pub const IMAGE_TAINTS: &str = "PFCOE";

/// Taint bits to letters, in the kernel's `taint_flags` order.
pub fn letters(value: u64) -> String {
    const LETTERS: &[u8] = b"PFSRMBUDAWCIOELKXTNJ";
    LETTERS
        .iter()
        .enumerate()
        .filter(|(i, _)| value & (1 << i) != 0)
        .map(|(_, c)| char::from(*c))
        .collect()
}

/// A taint value that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TaintError {
    #[error(transparent)]
    Read(#[from] InputError),
    #[error("{path}: {text:?} is not a taint value")]
    Value { path: String, text: String },
}

/// Reads `/proc/sys/kernel/tainted` under `proc_root` and compares it with `allowed`.
pub fn read(proc_root: &Path, allowed: &str) -> Result<TaintReport, TaintError> {
    let path = proc_root.join("sys/kernel/tainted");
    let text = read_text_limited(&path, 64)?;
    let value: u64 = text.trim().parse().map_err(|_| TaintError::Value {
        path: path.display().to_string(),
        text: text.clone(),
    })?;
    let flags = letters(value);
    let unexpected = flags.chars().filter(|c| !allowed.contains(*c)).collect();
    Ok(TaintReport {
        value,
        flags,
        unexpected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_follow_the_kernel() {
        assert_eq!(letters(0), "");
        assert_eq!(letters(1), "P");
        assert_eq!(letters((1 << 12) | (1 << 13)), "OE");
        assert_eq!(letters(1 << 9), "W");
    }

    #[test]
    fn reads_a_fixture_and_names_garbage() {
        let d = std::env::temp_dir().join(format!("vld-taint-{}", std::process::id()));
        std::fs::create_dir_all(d.join("sys/kernel")).unwrap();
        std::fs::write(d.join("sys/kernel/tainted"), "12288\n").unwrap();
        let t = read(&d, "O").unwrap();
        assert_eq!((t.flags.as_str(), t.unexpected.as_str()), ("OE", "E"));
        std::fs::write(d.join("sys/kernel/tainted"), "lots\n").unwrap();
        let e = read(&d, "").unwrap_err().to_string();
        assert!(
            e.contains("sys/kernel/tainted") && e.contains("lots"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! Reading a module directory's index ([`load_index`]): `modules.dep`,
//! `modules.softdep` and `modules.builtin`, each at most [`INDEX_FILE_MAX`] bytes.

use std::path::Path;

use crate::formats::kmod::index::{Index, IndexError};
use crate::util::fs::{read_text_limited, InputError};

/// Most bytes read from one module index file.
pub const INDEX_FILE_MAX: u64 = 16 << 20;

/// Reads the index of a module directory (`/lib/modules/<release>`): `modules.dep` is
/// required, `modules.softdep` and `modules.builtin` are empty when absent.
pub fn load_index(dir: &Path) -> Result<Index, IndexLoadError> {
    let read = |name: &str, required: bool| -> Result<String, IndexLoadError> {
        let path = dir.join(name);
        match read_text_limited(&path, INDEX_FILE_MAX) {
            Ok(s) => Ok(s),
            Err(InputError::Io { source, .. })
                if !required && source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(String::new())
            }
            Err(e) => Err(IndexLoadError::Read(e)),
        }
    };
    Ok(Index::from_texts(
        dir,
        &read("modules.dep", true)?,
        &read("modules.softdep", false)?,
        &read("modules.builtin", false)?,
    )?)
}

/// Why a module directory's index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IndexLoadError {
    #[error("module index: {0}")]
    Read(InputError),
    #[error("module index: {0}")]
    Parse(#[from] IndexError),
}

//! `validator gpt DISK`: the GPT partitions of a disk or disk image, as the storage
//! stage reads them (`validator::sys::read_gpt`, 512-byte sectors).

use std::path::Path;

use validator::util::out::Out;

use crate::Res;

/// `validator gpt DISK`.
pub(crate) fn list(disk: &Path, out: &mut Out) -> Res {
    let t = validator::sys::read_gpt(disk, 512)?;
    out.line(&format!(
        "disk {}{}",
        t.disk_guid,
        if t.used_backup {
            " (backup header)"
        } else {
            ""
        }
    ))?;
    for p in &t.partitions {
        out.line(&format!(
            "{:>3} {:>10} {:>10} {} {} {:?}",
            p.number, p.first_lba, p.last_lba, p.type_guid, p.unique_guid, p.name
        ))?;
    }
    Ok(true)
}

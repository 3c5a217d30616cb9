//! A slot's Unified Kernel Image: systemd-stub with the kernel, the initramfs, the command
//! line and an os-release as PE sections, signed as one image so that shim (and the
//! firmware) refuse a changed initramfs or command line before any of it runs.
//!
//! Contract: [`build`] takes the stub (`systemd-boot-efi`'s `linuxx64.efi.stub`,
//! [`DEBIAN_STUB`]: an unsigned PE32+ image with none of the four sections), the kernel
//! (Debian's signed `vmlinuz`, byte for byte), the initramfs, the command line and the
//! os-release text, and adds them as `.osrel`, `.cmdline`, `.initrd`, `.linux` (in that
//! order, `.linux` last as ukify places it) with `objcopy --add-section`, each at the next
//! multiple of the stub's `SectionAlignment` after the stub's last section in memory (the
//! addresses ukify computes; no fixed addresses that a larger kernel would overrun).
//! The result is read back with the verifier's own PE reader
//! ([`validator::formats::pe::layout`]): each section must hold exactly the bytes given.
//! With [`Signing::Key`] it is then signed by `sbsign` with the fleet's key and
//! certificate and checked with the verifier's Authenticode code
//! ([`validator::trust::authenticode`], the firmware's rule) against that certificate.
//! [`Signing::Unsigned`] leaves it unsigned for a signer outside the tool (an HSM):
//! `sbsign` (or `pesign`) over the file as it is, nothing else changed.
//! The same inputs give the same bytes: the COFF header's timestamp, which objcopy sets to
//! the time it runs, is put back to the stub's and the PE checksum made again; an RSA
//! (PKCS#1 v1.5) signature is deterministic once its signing time is fixed (below).
//!
//! What systemd-stub 252 measures of it into PCR 11 is predicted from the same bytes by
//! `validator::formats::uki` (the section events) and `validator::attest::predict`.
//!
//! The signing time inside sbsign's signature (OpenSSL adds one) is `SOURCE_DATE_EPOCH`,
//! by running sbsign under Debian's `faketime` with the clock stopped.
//!
//! Limits: the stub is systemd 252's (Debian 12): no `.uname`, `.sbat` of ours, `.splash`,
//! `.dtb`, `.pcrsig` or `.pcrpkey`; objcopy and sbsign are run as tools (no reviewed Rust
//! crate writes PE sections or Authenticode signatures).

use std::path::{Path, PathBuf};
use std::process::Command;

use validator::formats::pe;

/// Where Debian's `systemd-boot-efi` installs the stub.
pub const DEBIAN_STUB: &str = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub";

/// The largest stub read (Debian's is about 50 KiB).
const STUB_MAX: u64 = 16 << 20;

/// Why no image was built.
#[derive(Debug, thiserror::Error)]
pub enum UkiError {
    /// An input that could not be read (the error names its path).
    #[error(transparent)]
    Read(validator::util::fs::InputError),
    #[error("{path}: {why}")]
    Input { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{tool}: {why}")]
    Tool { tool: String, why: String },
}

/// How the image is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signing {
    /// By `sbsign` with this key (PEM) and certificate (PEM).
    Key { key: PathBuf, cert: PathBuf },
    /// Not at all: the operator signs it outside the tool.
    Unsigned,
}

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct UkiInputs<'a> {
    pub stub: &'a Path,
    pub linux: &'a [u8],
    pub initrd: &'a [u8],
    pub cmdline: &'a str,
    pub osrel: &'a str,
    /// The signature's signing time (`SOURCE_DATE_EPOCH`).
    pub epoch: u32,
}

/// The sections added, in the order they are placed.
pub const SECTIONS: [&str; 4] = [".osrel", ".cmdline", ".initrd", ".linux"];

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> UkiError + '_ {
    move |source| UkiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn run(c: &mut Command) -> Result<Vec<u8>, UkiError> {
    crate::run_tool(c, "").map_err(|(tool, why)| UkiError::Tool { tool, why })
}

/// The os-release text of a slot's image (`.osrel`): the image it boots
/// (`IMAGE_ID`, `IMAGE_VERSION` as os-release(5) names them) and the slot.
pub fn osrel(image_id: &str, slot: &str) -> String {
    let q = |s: &str| s.replace(['\\', '"', '$', '`'], "_");
    format!(
        "ID=validator-slot\nNAME=\"GPU node image\"\nPRETTY_NAME=\"GPU node image {id} (slot {slot})\"\nIMAGE_ID=\"{id}\"\nIMAGE_VERSION=\"{id}\"\nVARIANT_ID=slot-{lower}\n",
        id = q(image_id),
        slot = q(slot),
        lower = q(slot).to_ascii_lowercase(),
    )
}

/// The virtual addresses (image base included, as objcopy takes them) of [`SECTIONS`]
/// with these sizes, after the stub's last section, each aligned to `align`.
pub fn addresses(layout: &pe::Layout, sizes: [usize; 4]) -> Result<[u64; 4], String> {
    let align = u64::from(layout.section_alignment);
    if align == 0 || !align.is_power_of_two() {
        return Err(format!("SectionAlignment {align:#x} is not a power of two"));
    }
    let up = |v: u64| v.div_ceil(align) * align;
    let mut at = up(layout.memory_end.max(u64::from(layout.size_of_image)));
    let mut out = [0u64; 4];
    for (o, size) in out.iter_mut().zip(sizes) {
        *o = layout
            .image_base
            .checked_add(at)
            .ok_or("the image base and the sections overflow")?;
        at = up(at.saturating_add(size as u64));
    }
    if at > u64::from(u32::MAX) {
        return Err(format!(
            "the image would be {at:#x} bytes in memory, past what a PE image addresses"
        ));
    }
    Ok(out)
}

/// Builds the image in `tmp` (a directory for the pieces) and returns its bytes.
pub fn build(tmp: &Path, i: &UkiInputs<'_>, signing: &Signing) -> Result<Vec<u8>, UkiError> {
    let bad_stub = |why: String| UkiError::Input {
        path: i.stub.to_path_buf(),
        why,
    };
    let stub = validator::util::fs::read_limited(i.stub, STUB_MAX).map_err(UkiError::Read)?;
    let layout = pe::layout(&stub).map_err(|e| bad_stub(e.to_string()))?;
    if let Some(n) = layout
        .names()
        .into_iter()
        .find(|n| SECTIONS.contains(&n.as_str()))
    {
        return Err(bad_stub(format!(
            "already has a {n} section: give the bare stub (systemd-boot-efi's linuxx64.efi.stub), not an image built from it"
        )));
    }
    if !matches!(pe::parse(&stub), Err(pe::PeError::Unsigned)) {
        return Err(bad_stub(
            "is signed: adding sections would void its signature; give the unsigned stub".into(),
        ));
    }
    if i.cmdline.contains('\0') || i.osrel.contains('\0') {
        return Err(UkiError::Input {
            path: tmp.to_path_buf(),
            why: "the command line and the os-release cannot hold a NUL byte".into(),
        });
    }
    let contents: [&[u8]; 4] = [i.osrel.as_bytes(), i.cmdline.as_bytes(), i.initrd, i.linux];
    let vmas = addresses(&layout, contents.map(<[u8]>::len)).map_err(bad_stub)?;
    let dir = tmp.join(".uki");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(io(&dir))?;
    let stamp = time_date_stamp(&stub).ok_or_else(|| bad_stub("no COFF header".into()))?;
    let built = objcopy(&dir, &stub, stamp, &contents, &vmas)
        .and_then(|unsigned| check_sections(&dir, &unsigned, &contents))
        .and_then(|unsigned| sign(&dir, unsigned, signing, i.epoch));
    let _ = std::fs::remove_dir_all(&dir);
    built
}

/// The stub (its bytes) with the sections added, by objcopy in `dir`, stamped `stamp`.
fn objcopy(
    dir: &Path,
    stub: &[u8],
    stamp: u32,
    contents: &[&[u8]; 4],
    vmas: &[u64; 4],
) -> Result<PathBuf, UkiError> {
    let mut c = Command::new("objcopy");
    for ((name, bytes), vma) in SECTIONS.iter().zip(contents).zip(vmas) {
        let f = dir.join(name.trim_start_matches('.'));
        std::fs::write(&f, bytes).map_err(io(&f))?;
        c.arg("--add-section")
            .arg(format!("{name}={}", f.display()))
            .arg("--change-section-vma")
            .arg(format!("{name}={vma:#x}"));
    }
    // The stub's bytes as read and checked, not its path again.
    let input = dir.join("stub.efi");
    std::fs::write(&input, stub).map_err(io(&input))?;
    let out = dir.join("unsigned.efi");
    run(c.arg(&input).arg(&out))?;
    // objcopy stamps the COFF header with the time it ran (it reads no
    // SOURCE_DATE_EPOCH for PE): the stub's own stamp goes back, and the checksum is made
    // again over the result.
    let mut image = std::fs::read(&out).map_err(io(&out))?;
    restamp(&mut image, stamp).ok_or_else(|| UkiError::Tool {
        tool: "objcopy".into(),
        why: "its image has no COFF header".into(),
    })?;
    std::fs::write(&out, &image).map_err(io(&out))?;
    Ok(out)
}

/// `epoch` as `YYYY-MM-DD hh:mm:ss` in UTC (libfaketime's absolute time), by the civil
/// calendar's rules (days since 1970-01-01 to year, month and day).
fn utc(epoch: u32) -> String {
    let secs = i64::from(epoch);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Shifted to an era starting on 0000-03-01 so that leap days end each year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The file offset of the PE signature (`e_lfanew`), checked to leave room for the COFF
/// header and the optional header's checksum.
fn pe_offset(image: &[u8]) -> Option<usize> {
    let at = usize::try_from(validator::util::le::u32_le(image, 0x3c)?).ok()?;
    (image.get(at..at + 4)? == b"PE\0\0" && image.len() >= at + 24 + 68).then_some(at)
}

/// The COFF header's `TimeDateStamp`.
fn time_date_stamp(image: &[u8]) -> Option<u32> {
    validator::util::le::u32_le(image, pe_offset(image)? + 8)
}

/// Sets `TimeDateStamp` to `stamp` and recomputes the optional header's `CheckSum` as
/// the PE format defines it (the file's 16-bit little-endian words summed with the
/// carries folded in, the checksum field itself counted as zero, plus the file's length):
/// what `objcopy` and the linkers write. Not a cryptographic check: no firmware verifies
/// it, but tools that read the image compare it.
fn restamp(image: &mut [u8], stamp: u32) -> Option<()> {
    let pe = pe_offset(image)?;
    image
        .get_mut(pe + 8..pe + 12)?
        .copy_from_slice(&stamp.to_le_bytes());
    let sum_at = pe + 24 + 64;
    image.get_mut(sum_at..sum_at + 4)?.fill(0);
    let mut sum: u64 = 0;
    for w in image.chunks(2) {
        let v = u64::from(w.first().copied().unwrap_or(0))
            | (u64::from(w.get(1).copied().unwrap_or(0)) << 8);
        sum += v;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum = (sum & 0xffff) + (sum >> 16);
    let total = u32::try_from(sum + image.len() as u64).ok()?;
    image
        .get_mut(sum_at..sum_at + 4)?
        .copy_from_slice(&total.to_le_bytes());
    Some(())
}

/// `unsigned` read back: every added section holds exactly its bytes.
fn check_sections(
    _dir: &Path,
    unsigned: &Path,
    contents: &[&[u8]; 4],
) -> Result<PathBuf, UkiError> {
    let bytes = std::fs::read(unsigned).map_err(io(unsigned))?;
    let bad = |why: String| UkiError::Tool {
        tool: "objcopy".into(),
        why,
    };
    let layout =
        pe::layout(&bytes).map_err(|e| bad(format!("its image does not read back: {e}")))?;
    for (name, want) in SECTIONS.iter().zip(contents) {
        match layout
            .section_bytes(&bytes, name)
            .map_err(|e| bad(e.to_string()))?
        {
            Some(got) if got.as_slice() == *want => {}
            Some(got) => {
                return Err(bad(format!(
                    "section {name} holds {} bytes, not the {} given",
                    got.len(),
                    want.len()
                )))
            }
            None => return Err(bad(format!("no section {name} in its image"))),
        }
    }
    Ok(unsigned.to_path_buf())
}

/// Signs `unsigned` (or not), returns the image's bytes.
fn sign(dir: &Path, unsigned: PathBuf, signing: &Signing, epoch: u32) -> Result<Vec<u8>, UkiError> {
    let Signing::Key { key, cert } = signing else {
        return std::fs::read(&unsigned).map_err(io(&unsigned));
    };
    let signed = dir.join("signed.efi");
    // sbsign's signature carries a signing time (OpenSSL adds it): `epoch`'s, through
    // libfaketime with the clock stopped, so the same inputs sign to the same bytes.
    run(Command::new("faketime")
        .arg("-f")
        .arg(utc(epoch))
        .env("TZ", "UTC")
        .arg("sbsign")
        .arg("--key")
        .arg(key)
        .arg("--cert")
        .arg(cert)
        .arg("--output")
        .arg(&signed)
        .arg(&unsigned))
    .map_err(|e| match e {
        UkiError::Tool { why, .. } if why.contains("key values mismatch") => UkiError::Input {
            path: key.clone(),
            why: format!("not the key of the certificate {}", cert.display()),
        },
        UkiError::Tool { why, .. } => UkiError::Tool {
            tool: "sbsign (under faketime)".into(),
            why: why
                .lines()
                .filter(|l| !l.contains("gaps between PE/COFF sections"))
                .collect::<Vec<_>>()
                .join("; "),
        },
        e => e,
    })?;
    let bytes = std::fs::read(&signed).map_err(io(&signed))?;
    // The verifier's own check, as the firmware and shim judge it, against the
    // certificate alone.
    let bad_cert = |why: String| UkiError::Input {
        path: cert.clone(),
        why,
    };
    let pem = validator::util::fs::read_limited(cert, validator::trust::CERT_FILE_MAX)
        .map_err(UkiError::Read)?;
    let mut store = validator::trust::TrustStore::new();
    store
        .add_bytes(&pem, &cert.display().to_string())
        .map_err(|e| bad_cert(e.to_string()))?;
    validator::trust::authenticode::verify(
        &bytes,
        &store,
        &[],
        validator::trust::authenticode::Rule::Firmware,
    )
    .map_err(|e| UkiError::Tool {
        tool: "sbsign".into(),
        why: format!(
            "its signature does not verify against {}: {e}",
            cert.display()
        ),
    })?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(base: u64, align: u32, size: u32, end: u64) -> pe::Layout {
        pe::Layout {
            image_base: base,
            section_alignment: align,
            size_of_image: size,
            sections: Vec::new(),
            memory_end: end,
        }
    }

    /// Each section starts at the next multiple of the alignment after the stub and the
    /// one before it, the image base added.
    #[test]
    fn sections_follow_the_stub_aligned() {
        let l = layout(0x1_0000_0000, 0x1000, 0x12000, 0x11800);
        let a = addresses(&l, [10, 0x1000, 0x1001, 5]).unwrap();
        assert_eq!(
            a,
            [0x1_0001_2000, 0x1_0001_3000, 0x1_0001_4000, 0x1_0001_6000]
        );
        assert!(addresses(&layout(0, 0, 0, 0), [1, 1, 1, 1]).is_err());
        assert!(addresses(&layout(0, 0x1000, 0, 0), [1, 1, usize::MAX / 2, 1]).is_err());
    }

    /// The checksum is the one objcopy writes: restamping an objcopy output with its own
    /// stamp leaves every byte as it was.
    #[test]
    fn restamp_keeps_objcopys_checksum() {
        let d = std::env::temp_dir().join(format!("uki-restamp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("o"), b"ID=x\n").unwrap();
        let out = d.join("out.efi");
        let ok = Command::new("objcopy")
            .arg("--add-section")
            .arg(format!(".osrel={}", d.join("o").display()))
            .arg(DEBIAN_STUB)
            .arg(&out)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "objcopy of {DEBIAN_STUB} failed: run scripts/provision (systemd-boot-efi, binutils)"
        );
        let made = std::fs::read(&out).unwrap();
        let mut again = made.clone();
        restamp(&mut again, time_date_stamp(&made).unwrap()).unwrap();
        assert_eq!(again, made);
        restamp(&mut again, 0).unwrap();
        assert_eq!(time_date_stamp(&again), Some(0));
        assert!(restamp(&mut [0u8; 10], 0).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(u32::MAX), "2106-02-07 06:28:15");
    }

    #[test]
    fn osrel_names_the_image_and_slot() {
        let t = osrel("img-7 \"x\"", "B");
        assert!(t.contains("IMAGE_ID=\"img-7 _x_\"\n"), "{t}");
        assert!(t.contains("VARIANT_ID=slot-b\n"), "{t}");
    }
}

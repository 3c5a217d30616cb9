//! `validator slot status|mark-good|mark-bad`: the A/B state - the boot loader's
//! variables or entries, and our record on the ESP - read and changed with the A/B
//! library the boot gate's slot stage uses (`validator::runtime::slot::Runtime`).
//!
//! Contract: `status` exits 0 when there is no problem and 1 when there is one, each
//! named on a `problem:` line (`docs/SLOTS.md` lists them: a boot loader state or a record
//! that cannot be read, a record with no valid copy, a boot loader and a record that
//! disagree on a slot being good or bad, a GRUB state under which no slot would boot);
//! `mark-*` refuse (exit 2) when the boot loader's state, or with `--esp` our record,
//! could not be read whole (a record with no valid copy is started anew, as a boot does,
//! and the output says so). A `--grubenv` that is a symbolic link is refused (exit 2);
//! a bare file name is in the current directory.
//! A missing record is told apart by its error variant (`SlotError::NoRecord`), never by
//! its message.

use std::path::{Path, PathBuf};

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::cli::{SlotArg, SlotCmd, SlotWhere};
use crate::{Res, Usage};

/// The slot configuration and the ESP directory a `slot` command works on.
fn slot_target(at: &SlotWhere) -> Result<(validator::config::bom::Slot, PathBuf, bool), Usage> {
    use validator::config::bom::{Bootloader, Slot};
    let mut cfg: Slot = match &at.bom {
        Some(b) => validator::config::bom::load(b)?
            .bom
            .slot
            .ok_or_else(|| Usage(format!("{}: no [slot] section", b.display())))?,
        None => toml_default_slot()?,
    };
    match (&at.grubenv, &at.esp) {
        (Some(f), None) => {
            // Slot files are opened following no symlink: a link given as the grubenv is
            // refused by name here rather than by the kernel's ELOOP later.
            if std::fs::symlink_metadata(f).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(Usage(format!(
                    "{}: is a symbolic link: refused (slot files are never followed through one; name the grubenv itself)",
                    f.display()
                )));
            }
            // A FIFO, a directory or an oversized file is unusable input (exit 2), as for
            // every other command; what the block says is for the stage to judge.
            let file = validator::util::fs::open_input(f, false)?;
            validator::util::fs::read_file_limited(
                file,
                f,
                validator::formats::grubenv::BLOCK_SIZE_MAX as u64,
            )?;
            // A bare name is in the current directory (its parent is the empty path).
            let dir = validator::util::fs::output_dir(f).to_path_buf();
            let name = f
                .file_name()
                .ok_or_else(|| Usage(format!("{}: not a file", f.display())))?;
            cfg.bootloader = Bootloader::Grub;
            let name = name.to_str().ok_or_else(|| {
                Usage(format!(
                    "{}: the file name is not UTF-8 (the slot configuration names its files as text)",
                    f.display()
                ))
            })?;
            cfg.grubenv = format!("/{name}");
            Ok((cfg, dir, false))
        }
        (None, Some(d)) => {
            if !d.is_dir() {
                return Err(Usage(format!("{}: not a directory", d.display())));
            }
            if at.bom.is_none() && d.join("loader/entries").is_dir() {
                cfg.bootloader = Bootloader::SystemdBoot;
            }
            Ok((cfg, d.clone(), true))
        }
        _ => Err(Usage("give exactly one of --grubenv and --esp".into())),
    }
}

fn toml_default_slot() -> Result<validator::config::bom::Slot, Usage> {
    Ok(validator::config::bom::Slot::from_toml("")?)
}

fn booted_slot(arg: Option<SlotArg>) -> Result<validator::config::bom::SlotName, Usage> {
    use validator::config::bom::SlotName;
    if let Some(a) = arg {
        return Ok(match a {
            SlotArg::A => SlotName::A,
            SlotArg::B => SlotName::B,
        });
    }
    let b = read_limited(
        Path::new("/proc/cmdline"),
        validator::stages::start::CMDLINE_MAX,
    )?;
    let args = validator::config::cmdline::BootArgs::parse(String::from_utf8_lossy(&b).trim_end());
    args.slot
        .as_deref()
        .and_then(SlotName::parse)
        .ok_or_else(|| Usage("no --slot, and no validator.slot= on /proc/cmdline".into()))
}

/// `validator slot ...`.
pub(crate) fn run(c: SlotCmd, out: &mut Out) -> Res {
    use validator::config::bom::SlotName;
    use validator::runtime::slot::Runtime;
    match c {
        SlotCmd::Status { at, json } => {
            let (cfg, dir, record) = slot_target(&at)?;
            let l = Runtime::load(&cfg, SlotName::A, dir, false);
            let mut problems: Vec<String> = fatal(&l.errors, record)
                .iter()
                .map(ToString::to_string)
                .collect();
            // The boot loader and our record must agree on what is good and bad, and the
            // boot loader must have a slot to boot.
            problems.extend(l.runtime.problems().iter().map(ToString::to_string));
            let st = l.runtime.status(l.view, problems);
            if json {
                out.line(&serde_json::to_string_pretty(&st)?)?;
            } else {
                out.line(&format!("bootloader {:?}", st.bootloader).to_lowercase())?;
                for (k, v) in &st.bootloader_state {
                    out.line(&format!("  {k}={v}"))?;
                }
                if let Some(r) = &st.record {
                    out.line(&format!(
                        "record generation {}, {} failed boot(s) in a row, last slot {}",
                        st.generation,
                        r.consecutive_failures,
                        r.last_slot.as_deref().unwrap_or("-")
                    ))?;
                    for (s, rec) in &r.slots {
                        out.line(&format!(
                            "  {s}: image {} attempts {} good {} last {} {}",
                            rec.image_id.as_deref().unwrap_or("-"),
                            rec.attempts,
                            rec.good.map_or("-".into(), |g| g.to_string()),
                            rec.last_decision.as_deref().unwrap_or("-"),
                            rec.last_reason.as_deref().unwrap_or("")
                        ))?;
                    }
                }
                for p in &st.problems {
                    out.line(&format!("problem: {p}"))?;
                }
            }
            Ok(st.problems.is_empty())
        }
        SlotCmd::MarkGood { at, slot } => mark(at, slot, true, out),
        SlotCmd::MarkBad { at, slot } => mark(at, slot, false, out),
    }
}

/// The load errors that count: all of them, except a missing record when none is
/// required (`--grubenv` alone names no record).
fn fatal(
    errors: &[validator::runtime::slot::SlotError],
    record: bool,
) -> Vec<&validator::runtime::slot::SlotError> {
    use validator::runtime::slot::SlotError;
    errors
        .iter()
        .filter(|e| record || !matches!(e, SlotError::NoRecord { .. }))
        .collect()
}

/// Whether a load error stops a `mark-*`: every one that counts ([`fatal`]) except a
/// record with no valid copy, over which the mark starts a new record as a boot does
/// (and says so).
fn stops_mark(e: &validator::runtime::slot::SlotError) -> bool {
    !matches!(e, validator::runtime::slot::SlotError::NoValidCopy { .. })
}

fn mark(at: SlotWhere, slot: Option<SlotArg>, good: bool, out: &mut Out) -> Res {
    let s = booted_slot(slot)?;
    let (cfg, dir, record) = slot_target(&at)?;
    let l = validator::runtime::slot::Runtime::load(&cfg, s, dir, false);
    let mut rt = l.runtime;
    // The boot loader's state must have been read whole; a record is optional with
    // --grubenv, required with --esp.
    let (stop, notes): (Vec<_>, Vec<_>) = fatal(&l.errors, record)
        .into_iter()
        .partition(|e| stops_mark(e));
    if !stop.is_empty() {
        return Err(Usage(
            stop.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    let done = rt.mark(s, good)?;
    out.line(&done)?;
    for n in notes {
        out.line(&format!("note: {n}: a new record was started"))?;
    }
    for (k, v) in rt.view() {
        out.line(&format!("  {k}={v}"))?;
    }
    Ok(true)
}

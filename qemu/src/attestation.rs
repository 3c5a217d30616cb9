//! Attestation in the test bed: the evidence a boot leaves (the report file as the root's
//! init found it, the binary event log), the attestation key a verifier enrolls from the
//! node's TPM (the swtpm state the VM used, served again over TCP after the VM is gone:
//! the endorsement seed is in the state, so the TPM derives the same AK), and what an image
//! build knows to predict a slot's measurements from the run directory (its initramfs
//! with the BOM in it, the root hash, the boot entry's command line, the files GRUB
//! reads).
//!
//! Limits: GRUB nodes (the command line is what the shipped `grub.cfg` gives the kernel:
//! `BOOT_IMAGE=/<slot>/vmlinuz validator.slot=<slot> ` then `node.cfg`'s `CMDLINE`; or,
//! for slots that are Unified Kernel Images, [`uki_image_inputs`], the image's own).

use std::path::{Path, PathBuf};

use std::time::Duration;

use validator::attest::predict::{self, Inputs, MemTree, SlotInput};
use validator::attest::reference::Reference;
use validator::config::bom::SlotName;

use crate::firmware::{GRUBENV_PATH, GRUB_CFG_PATH, NODE_CFG_PATH};
use validator::formats::tpm::attest::{ak_template, KeyKind, Public};
use validator::sys::tpm::{TcpTransport, Tpm, RH_ENDORSEMENT};

use crate::vm::Outcome;
use crate::HarnessError;
use test_support::swtpm::{Channel, Swtpm};

/// What a boot leaves for a verifier.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// `/run/validator/report.json` as the root's init printed it.
    pub report: Vec<u8>,
    /// `/run/validator/tpm-eventlog.bin` (printed in base64 by the TPM root script).
    pub log: Vec<u8>,
}

impl Evidence {
    /// The evidence of a boot whose root ran [`crate::scenario::TPM_ROOT_SCRIPT`].
    pub fn of(o: &Outcome) -> Result<Evidence, HarnessError> {
        let text = o.console.replace('\r', "");
        let report = text
            .lines()
            .find_map(|l| l.strip_prefix(crate::rootfs::ROOT_REPORT))
            .ok_or_else(|| HarnessError::Setup("the root printed no report".into()))?;
        let log = crate::tpmcheck::base64_section(&o.console, "TPM-LOG")
            .ok_or_else(|| HarnessError::Setup("the root printed no event log".into()))?;
        let mut report = report.as_bytes().to_vec();
        report.push(b'\n');
        Ok(Evidence { report, log })
    }
}

/// Where a boot's TPM state is (the directory of its console log) and where its node's
/// images are (the same, or for a power-on of a test bed the bed's directory above it).
pub fn dirs(o: &Outcome) -> (PathBuf, PathBuf) {
    let tpm = o.log_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let images = if tpm.join("slot-A").is_dir() {
        tpm.clone()
    } else {
        tpm.parent().unwrap_or(&tpm).to_path_buf()
    };
    (tpm, images)
}

/// A swtpm serving `state` (copied first; a fresh one when there is none) on a free
/// 127.0.0.1 port, killed when dropped.
fn serve(state: &Path, scratch: &Path) -> Result<Swtpm, HarnessError> {
    let setup = |e: test_support::swtpm::SwtpmError| HarnessError::Setup(e.to_string());
    let _ = std::fs::remove_dir_all(scratch);
    std::fs::create_dir_all(scratch).map_err(|e| HarnessError::io(scratch, e))?;
    if state.is_dir() {
        for e in std::fs::read_dir(state).map_err(|e| HarnessError::io(state, e))? {
            let e = e.map_err(|e| HarnessError::io(state, e))?;
            std::fs::copy(e.path(), scratch.join(e.file_name()))
                .map_err(|err| HarnessError::io(&e.path(), err))?;
        }
    } else {
        test_support::swtpm::create_state(scratch, "sha256", false).map_err(setup)?;
    }
    let log = scratch.with_extension("log");
    Swtpm::serve(scratch, &Channel::Tcp, "not-need-init,startup-clear", &log).map_err(setup)
}

fn ak_of(served: &Swtpm, kind: KeyKind) -> Result<Public, HarnessError> {
    let tpm_err = |e: validator::formats::tpm::TpmError| HarnessError::Setup(e.to_string());
    let mut tpm =
        Tpm::new(TcpTransport::connect(served.addr(), Duration::from_secs(5)).map_err(tpm_err)?);
    let key = tpm
        .create_primary(RH_ENDORSEMENT, &ak_template(kind))
        .map_err(tpm_err)?;
    tpm.flush_context(key.handle).map_err(tpm_err)?;
    Ok(key.public)
}

/// The AK a verifier enrolls from the TPM whose state is in `tpm_dir` ([`dirs`]).
pub fn enrolled_ak(tpm_dir: &Path, kind: KeyKind) -> Result<Public, HarnessError> {
    let s = serve(
        &tpm_dir.join("tpm-state"),
        &tpm_dir.join("tpm-state-served"),
    )?;
    ak_of(&s, kind)
}

/// The AK of another, new TPM.
pub fn other_tpm_ak(scratch: &Path, kind: KeyKind) -> Result<Public, HarnessError> {
    let s = serve(&scratch.join("no-such-state"), scratch)?;
    ak_of(&s, kind)
}

/// What an image build knows of the image in `slot-<image>` of a run directory, to
/// predict its boot from either slot: the initramfs (unpacked; the BOM is in it), the
/// root hash (`roothash.txt`), the command line each slot's GRUB entry gives the kernel,
/// and for the slot it was built for, the kernel and initramfs GRUB reads (`kernel` is
/// the slot's `vmlinuz`).
#[derive(Debug, Clone)]
pub struct ImageInputs {
    pub initramfs: MemTree,
    pub bom: Vec<u8>,
    pub root_hash: Option<String>,
    pub slots: Vec<SlotInput>,
}

/// [`ImageInputs`] of the image in `slot-<image>` of `run_dir` (the images' directory of
/// [`dirs`]), as booted from either slot.
pub fn image_inputs(
    run_dir: &Path,
    image: &str,
    kernel: &Path,
) -> Result<ImageInputs, HarnessError> {
    let slot_dir = run_dir.join(format!("slot-{image}"));
    let initrd_path = slot_dir.join("initrd.img");
    let initrd = std::fs::read(&initrd_path).map_err(|e| HarnessError::io(&initrd_path, e))?;
    let entries = mkinitramfs::unpack::unpack(&initrd, mkinitramfs::limits::UNPACKED_MAX)
        .map_err(|e| HarnessError::Setup(format!("{}: {e}", initrd_path.display())))?;
    let tree = MemTree::from_listing(&initrd_path.display().to_string(), entries);
    let bom = tree
        .files
        .get("etc/validator/bom.toml")
        .cloned()
        .ok_or_else(|| HarnessError::Setup("no BOM in the initramfs".into()))?;
    let root_hash = std::fs::read_to_string(slot_dir.join("roothash.txt"))
        .ok()
        .map(|s| s.trim().to_string());
    let node_cfg = run_dir.join("esp-files/node.cfg");
    let cfg = std::fs::read_to_string(&node_cfg).map_err(|e| HarnessError::io(&node_cfg, e))?;
    let extra = cfg
        .lines()
        .find_map(|l| l.trim().strip_prefix("set CMDLINE=\""))
        .and_then(|l| l.strip_suffix('"'))
        .ok_or_else(|| HarnessError::Setup(format!("{}: no CMDLINE", node_cfg.display())))?;
    let kernel_bytes = std::fs::read(kernel).map_err(|e| HarnessError::io(kernel, e))?;
    // The shipped grub.cfg, as the test bed installs it on every GRUB node's ESP.
    let grub_cfg_path = crate::paths::workspace().join("examples/grub/grub.cfg");
    let grub_cfg =
        std::fs::read(&grub_cfg_path).map_err(|e| HarnessError::io(&grub_cfg_path, e))?;
    let line = |s: &str| format!("BOOT_IMAGE=/{s}/vmlinuz validator.slot={s} {extra}");
    let pcr = validator::formats::tpm::measurement::BOOT_LOADER_FILE_PCR;
    let slots = [SlotName::A, SlotName::B]
        .iter()
        .map(|&s| SlotInput {
            slot: s,
            cmdline: line(s.as_str()),
            kexec_cmdline: Some(predict::kexec_cmdline_grub(&line(s.other().as_str()), s)),
            files: if s.as_str() == image {
                // What the shipped grub.cfg reads, in its order; the environment block
                // follows the A/B state.
                vec![
                    (pcr, GRUB_CFG_PATH.to_string(), Some(grub_cfg.clone())),
                    (pcr, GRUBENV_PATH.to_string(), None),
                    (
                        pcr,
                        NODE_CFG_PATH.to_string(),
                        Some(cfg.as_bytes().to_vec()),
                    ),
                    (pcr, format!("/{s}/vmlinuz"), Some(kernel_bytes.clone())),
                    (pcr, format!("/{s}/initrd.img"), Some(initrd.clone())),
                ]
            } else {
                Vec::new()
            },
            files_complete: s.as_str() == image,
            uki: None,
        })
        .collect();
    Ok(ImageInputs {
        initramfs: tree,
        bom,
        root_hash,
        slots,
    })
}

/// [`image_inputs`] of a node whose slots are Unified Kernel Images
/// (`<run_dir>/slot-<slot>/linux.efi`, chainloaded by the shipped grub.cfg): each slot's
/// command line is its image's `.cmdline`, the slot `image` boots GRUB's read of its
/// image (PCR 9; the list is not complete: the kernel's EFI stub adds its own records of
/// the initramfs and the command line there) and systemd-stub's events of it (PCR 11).
pub fn uki_image_inputs(
    run_dir: &Path,
    image: &str,
    kernel: &Path,
) -> Result<ImageInputs, HarnessError> {
    let mut i = image_inputs(run_dir, image, kernel)?;
    let read_uki = |slot: SlotName| -> Result<(Vec<u8>, String), HarnessError> {
        let p = run_dir.join(format!("slot-{slot}/linux.efi"));
        let bytes = std::fs::read(&p).map_err(|e| HarnessError::io(&p, e))?;
        let line = validator::formats::uki::cmdline(&bytes)
            .ok()
            .flatten()
            .ok_or_else(|| HarnessError::Setup(format!("{}: no .cmdline", p.display())))?;
        Ok((bytes, String::from_utf8_lossy(&line).into_owned()))
    };
    let pcr = validator::formats::tpm::measurement::BOOT_LOADER_FILE_PCR;
    let lines: Vec<(SlotName, String)> = i
        .slots
        .iter()
        .map(|s| read_uki(s.slot).map(|(_, l)| (s.slot, l)))
        .collect::<Result<_, _>>()?;
    for s in &mut i.slots {
        let (bytes, line) = read_uki(s.slot)?;
        s.cmdline = line;
        s.kexec_cmdline = lines
            .iter()
            .find(|(n, _)| *n != s.slot)
            .map(|(_, from)| predict::kexec_cmdline_grub(from, s.slot));
        s.files_complete = false;
        if s.slot.as_str() == image {
            s.files = vec![(pcr, format!("/{}/linux.efi", s.slot), Some(bytes.clone()))];
            s.uki = Some(bytes);
        } else {
            s.files = Vec::new();
        }
    }
    Ok(i)
}

impl ImageInputs {
    /// The reference file of this image (a UEFI boot).
    pub fn predict(&self) -> Result<Reference, HarnessError> {
        predict::predict(&Inputs {
            bom: &self.bom,
            initramfs: &self.initramfs,
            root: None,
            root_hash: self.root_hash.clone(),
            uefi: true,
            slots: self.slots.clone(),
        })
        .map_err(|e| HarnessError::Setup(format!("prediction: {e}")))
    }
}

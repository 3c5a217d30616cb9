//! `validator attest`: the node's attestation key and quotes (`ak`, `quote`), the
//! enrollment of the AK through the TPM's endorsement key (`ek` and `activate` on the
//! node, `make-credential` on the verifier), the prediction of a good boot from an image
//! (`predict`), and the verifier (`verify`).
//!
//! Contract: `ak` and `quote` talk to the TPM device (or a swtpm port) and write their
//! files all or none in tpm2-tools' formats (`TPM2B_PUBLIC`, `TPMS_ATTEST`,
//! `TPMT_SIGNATURE`, the PCR values concatenated as `tpm2_pcrread -o` writes them), so
//! `tpm2_checkquote` reads them. `predict` writes one reference file
//! (`validator.reference/v1`). `verify` exits 0 when the report (or the quote) is
//! verified, 1 when it is refused (the reason on stdout, or in `--json`), 2 when an input
//! is unusable. Inputs are read with the library's bounded readers.

use std::path::Path;
use std::time::Duration;

use validator::attest::predict::{self, DirTree, Inputs, MemTree, SlotInput};
use validator::attest::reference::Reference;
use validator::attest::verify::{self, Policy, VerifyError};
use validator::config::bom::SlotName;
use validator::formats::tpm::attest::{
    ak_template, format_selection, parse_selection, selected_values, KeyKind, Public,
};
use validator::formats::tpm::eventlog::EventLog;
use validator::formats::tpm::PcrValues;
use validator::sys::tpm::{DeviceTransport, TcpTransport, Tpm, Transport, RH_ENDORSEMENT};
use validator::util::fs::{read_limited, write_output};
use validator::util::out::Out;

use crate::cli::{
    ActivateArgs, AkArgs, AttestCmd, EkArgs, Kind, MakeCredentialArgs, PredictArgs, QuoteArgs,
    VerifyArgs,
};
use crate::{Res, Usage};

/// Largest report, quote, key or reference file read.
const SMALL_MAX: u64 = 4 << 20;

fn key_kind(k: Kind) -> KeyKind {
    match k {
        Kind::Ecc => KeyKind::EccP256,
        Kind::Rsa => KeyKind::Rsa2048,
    }
}

fn connect(tcp: Option<std::net::SocketAddr>) -> Result<Tpm<Box<dyn Transport>>, Usage> {
    let t: Box<dyn Transport> = match tcp {
        Some(sa) => Box::new(TcpTransport::connect(sa, Duration::from_secs(2))?),
        None => Box::new(DeviceTransport::open(Path::new("/dev"))?),
    };
    Ok(Tpm::new(t))
}

pub(crate) fn run(cmd: AttestCmd, out: &mut Out) -> Res {
    match cmd {
        AttestCmd::Ak(a) => ak(a, out),
        AttestCmd::Quote(a) => quote(a, out),
        AttestCmd::Ek(a) => ek(a, out),
        AttestCmd::MakeCredential(a) => make_credential(a, out),
        AttestCmd::Activate(a) => activate(a, out),
        AttestCmd::Predict(a) => predict_cmd(a, out),
        AttestCmd::Verify(a) => verify_cmd(a, out),
    }
}

fn ak(a: AkArgs, out: &mut Out) -> Res {
    let mut tpm = connect(a.tpm.tcp)?;
    let key = tpm.create_primary(RH_ENDORSEMENT, &ak_template(key_kind(a.tpm.kind)))?;
    tpm.flush_context(key.handle)?;
    write_output(&a.out, &key.public.to_2b())?;
    out.line(&format!(
        "{}: {} attestation key, name {}",
        a.out.display(),
        key_kind(a.tpm.kind).name(),
        validator::util::hex(&key.public.name())
    ))?;
    Ok(true)
}

/// Writes the named files into `dir`, all or none.
fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) -> Result<(), Usage> {
    let refs: Vec<(String, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.clone(), b.as_slice()))
        .collect();
    crate::files::write_all_or_nothing(dir, &refs)
}

fn ek(a: EkArgs, out: &mut Out) -> Res {
    use validator::formats::tpm::attest::{ek_template, EK_CERT_NV_RSA};
    let mut tpm = connect(a.tpm.tcp)?;
    let ek = tpm.create_primary(RH_ENDORSEMENT, &ek_template(KeyKind::Rsa2048))?;
    tpm.flush_context(ek.handle)?;
    let ak = tpm.create_primary(RH_ENDORSEMENT, &ak_template(key_kind(a.tpm.kind)))?;
    tpm.flush_context(ak.handle)?;
    let cert = tpm.nv_read(EK_CERT_NV_RSA)?;
    let files: Vec<(String, Vec<u8>)> = vec![
        ("ek.pub".into(), ek.public.to_2b()),
        ("ek.der".into(), cert),
        ("ak.pub".into(), ak.public.to_2b()),
    ];
    write_files(&a.out_dir, &files)?;
    out.line(&format!(
        "{}: ek.pub (name {}), ek.der, ak.pub (name {})",
        a.out_dir.display(),
        validator::util::hex(&ek.public.name()),
        validator::util::hex(&ak.public.name())
    ))?;
    Ok(true)
}

fn make_credential(a: MakeCredentialArgs, out: &mut Out) -> Res {
    use validator::formats::tpm::attest::CredentialFile;
    use validator::trust::credential::{check_ek_cert, make_credential};
    let ek = read_ak(&a.ek)?;
    let ak = read_ak(&a.ak)?;
    let cert = read_limited(&a.ek_cert, validator::trust::CERT_FILE_MAX)?;
    let cas = crate::keys::trust_store(&a.cas)?;
    let chain = match check_ek_cert(&cert, &ek, &cas.certs) {
        Ok(c) => c,
        Err(e) => {
            out.line(&format!("refused: {e}"))?;
            return Ok(false);
        }
    };
    if !ak.is_attestation_key() {
        out.line(&format!(
            "refused: {}: not an attestation key (a TPM-bound restricted signing key)",
            a.ak.display()
        ))?;
        return Ok(false);
    }
    let secret = validator::trust::keys::random_bytes(32).map_err(|e| Usage(e.to_string()))?;
    let cred = make_credential(&ek, &ak.name(), &secret)?;
    let file = CredentialFile {
        id_object: cred.id_object,
        encrypted_secret: cred.encrypted_secret,
    };
    // Both or neither: a failure leaves every file that was there as it was.
    crate::files::write_set(&[
        (a.out.as_path(), &file.to_bytes()),
        (a.secret_out.as_path(), &secret),
    ])?;
    out.line(&format!(
        "{}: credential for AK {} to the EK of {} (issued by {})",
        a.out.display(),
        validator::util::hex(&ak.name()),
        chain.first().map_or("?", String::as_str),
        chain.get(1).map_or("?", String::as_str)
    ))?;
    Ok(true)
}

fn activate(a: ActivateArgs, out: &mut Out) -> Res {
    use validator::formats::tpm::attest::{ek_template, CredentialFile};
    let cred = CredentialFile::parse(&read_limited(&a.input, SMALL_MAX)?)
        .map_err(|e| Usage(format!("{}: {e}", a.input.display())))?;
    let mut tpm = connect(a.tpm.tcp)?;
    let ek = tpm.create_primary(RH_ENDORSEMENT, &ek_template(KeyKind::Rsa2048))?;
    let ak = match tpm.create_primary(RH_ENDORSEMENT, &ak_template(key_kind(a.tpm.kind))) {
        Ok(k) => k,
        Err(e) => {
            let _ = tpm.flush_context(ek.handle);
            return Err(e.into());
        }
    };
    let r = tpm.activate_credential(
        ak.handle,
        ek.handle,
        &cred.id_object,
        &cred.encrypted_secret,
    );
    tpm.flush_context(ak.handle)?;
    tpm.flush_context(ek.handle)?;
    match r {
        Ok(secret) => {
            write_output(&a.out, &secret)?;
            out.line(&format!(
                "{}: the credential's secret ({} bytes)",
                a.out.display(),
                secret.len()
            ))?;
            Ok(true)
        }
        Err(e) if e.response_code().is_some() => {
            out.line(&format!(
                "refused by the TPM: {e} (a credential for another AK or another TPM)"
            ))?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn quote(a: QuoteArgs, out: &mut Out) -> Res {
    let nonce = validator::util::unhex(&a.nonce)
        .filter(|n| !n.is_empty() && n.len() <= 64)
        .ok_or_else(|| Usage(format!("--nonce {:?}: not 1 to 64 bytes of hex", a.nonce)))?;
    let sel = parse_selection(&a.pcrs).map_err(|e| Usage(format!("--pcrs: {e}")))?;
    let mut tpm = connect(a.tpm.tcp)?;
    let key = tpm.create_primary(RH_ENDORSEMENT, &ak_template(key_kind(a.tpm.kind)))?;
    let q = tpm.quote(key.handle, &nonce, &sel);
    tpm.flush_context(key.handle)?;
    let (attest, sig) = q?;
    let mut values = PcrValues::new();
    for (bank, pcrs) in &sel {
        for p in pcrs {
            for (b, v) in tpm.pcr_read(*p, &[*bank])? {
                values.entry(b).or_default().insert(*p, v);
            }
        }
    }
    let pcr_bytes = selected_values(&sel, &values).map_err(|e| Usage(e.to_string()))?;
    let files: Vec<(String, Vec<u8>)> = vec![
        ("ak.pub".into(), key.public.to_2b()),
        ("quote.msg".into(), attest.bytes.clone()),
        ("quote.sig".into(), sig.to_bytes()),
        ("quote.pcrs".into(), pcr_bytes),
    ];
    write_files(&a.out_dir, &files)?;
    out.line(&format!(
        "{}: quote of {} by AK {}, reset count {}, clock {} ms (tpm2_checkquote -u ak.pub -m quote.msg -s quote.sig -f quote.pcrs -l {} -g sha256 -q {})",
        a.out_dir.display(),
        format_selection(&sel),
        validator::util::hex(&key.public.name()),
        attest.clock.reset_count,
        attest.clock.clock,
        format_selection(&sel),
        a.nonce
    ))?;
    Ok(true)
}

/// `--uki SLOT=FILE`: each slot's Unified Kernel Image, read into its input.
fn add_ukis(ukis: &[String], slots: &mut [SlotInput]) -> Res {
    for u in ukis {
        let (slot, file) = u
            .split_once('=')
            .ok_or_else(|| Usage(format!("--uki {u:?}: not SLOT=FILE")))?;
        let s = slots
            .iter_mut()
            .find(|s| s.slot.as_str() == slot)
            .ok_or_else(|| Usage(format!("--uki {u:?}: no --slot {slot}")))?;
        if s.uki.is_some() {
            return Err(Usage(format!("--uki {slot} given twice")));
        }
        let image = read_limited(Path::new(file), validator::runtime::slot::UKI_MAX)?;
        // The image's own line is the one its kernel gets, from its boot loader and from
        // the init on a kexec into it.
        let line = validator::formats::uki::cmdline(&image)
            .map_err(|e| Usage(format!("--uki {u:?}: {e}")))?
            .map(|l| String::from_utf8_lossy(&l).into_owned())
            .ok_or_else(|| Usage(format!("--uki {u:?}: the image has no .cmdline")))?;
        if line != s.cmdline {
            return Err(Usage(format!(
                "--uki {u:?}: the image's .cmdline is {line:?}, --slot {slot} gives {:?}",
                s.cmdline
            )));
        }
        if s.kexec_cmdline.is_some() {
            s.kexec_cmdline = Some(line);
        }
        s.uki = Some(image);
    }
    Ok(true)
}

fn predict_cmd(a: PredictArgs, out: &mut Out) -> Res {
    let bytes = read_limited(&a.initramfs, validator::formats::newc::INITRAMFS_MAX)?;
    let entries = mkinitramfs::unpack::unpack(&bytes, mkinitramfs::limits::UNPACKED_MAX)
        .map_err(|e| Usage(format!("{}: {e}", a.initramfs.display())))?;
    let tree = MemTree::from_listing(&a.initramfs.display().to_string(), entries);
    let bom = match &a.bom {
        Some(p) => read_limited(p, SMALL_MAX)?,
        None => tree
            .files
            .get("etc/validator/bom.toml")
            .cloned()
            .ok_or_else(|| {
                Usage(format!(
                    "{}: no etc/validator/bom.toml in it; give --bom",
                    a.initramfs.display()
                ))
            })?,
    };
    let mut slots: Vec<SlotInput> = Vec::new();
    for s in &a.slots {
        let (name, cmdline) = s
            .split_once('=')
            .ok_or_else(|| Usage(format!("--slot {s:?}: not SLOT=CMDLINE")))?;
        let name = match name {
            "A" => SlotName::A,
            "B" => SlotName::B,
            _ => return Err(Usage(format!("--slot {s:?}: the slot is A or B"))),
        };
        if slots.iter().any(|x| x.slot == name) {
            return Err(Usage(format!("--slot {name} given twice")));
        }
        slots.push(SlotInput {
            slot: name,
            cmdline: cmdline.into(),
            kexec_cmdline: None,
            files: Vec::new(),
            files_complete: a.files_complete,
            uki: None,
        });
    }
    // GRUB: a slot reached by a kexec fallback gets the other slot's line, as the init
    // rewrites it.
    if !a.no_kexec {
        let lines: Vec<(SlotName, String)> =
            slots.iter().map(|s| (s.slot, s.cmdline.clone())).collect();
        for s in &mut slots {
            if let Some((_, from)) = lines.iter().find(|(n, _)| *n != s.slot) {
                s.kexec_cmdline = Some(predict::kexec_cmdline_grub(from, s.slot));
            }
        }
    }
    for f in &a.files {
        let bad = || Usage(format!("--file {f:?}: not SLOT:PCR:PATH[=FILE]"));
        let (spec, local) = match f.split_once('=') {
            Some((spec, local)) => (spec, Some(local)),
            None => (f.as_str(), None),
        };
        let mut parts = spec.splitn(3, ':');
        let (Some(slot), Some(pcr), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let pcr: u32 = pcr.parse().map_err(|_| bad())?;
        let s = slots
            .iter_mut()
            .find(|s| s.slot.as_str() == slot)
            .ok_or_else(|| Usage(format!("--file {f:?}: no --slot {slot}")))?;
        let bytes = match local {
            Some(l) => Some(read_limited(Path::new(l), crate::pe::PE_MAX)?),
            None if a.files_complete => None,
            None => {
                return Err(Usage(format!(
                    "--file {f:?}: a file without =FILE (any content) needs --files-complete"
                )))
            }
        };
        s.files.push((pcr, path.into(), bytes));
    }
    add_ukis(&a.ukis, &mut slots)?;
    let root = a.root.clone().map(DirTree);
    let r = predict::predict(&Inputs {
        bom: &bom,
        initramfs: &tree,
        root: root.as_ref().map(|t| t as &dyn predict::Tree),
        root_hash: a.root_hash.clone(),
        uefi: !a.bios,
        slots,
    })?;
    write_output(&a.out, r.to_text().as_bytes())?;
    let events: Vec<String> = r
        .slots
        .iter()
        .map(|s| {
            format!(
                "slot {} ({}): {} events, {} files",
                s.slot,
                s.entry.as_str(),
                s.events.len(),
                s.files.len()
            )
        })
        .collect();
    out.line(&format!(
        "{}: image {} ({}), {}",
        a.out.display(),
        r.image_id,
        r.kernel_release,
        events.join("; ")
    ))?;
    Ok(true)
}

fn read_ak(p: &Path) -> Result<Public, Usage> {
    Public::parse_2b(&read_limited(p, SMALL_MAX)?)
        .map_err(|e| Usage(format!("{}: {e}", p.display())))
}

/// The event log named by `--eventlog`, parsed: a log that does not read is unusable
/// input (exit 2) in either mode, named.
fn read_log(p: &Path) -> Result<EventLog, Usage> {
    let b = read_limited(p, validator::runtime::measure::EVENT_LOG_MAX)?;
    EventLog::parse(&b).map_err(|e| Usage(format!("{}: {e}", p.display())))
}

/// `--after RESET_COUNT:CLOCK_MS`.
fn parse_after(s: &str) -> Result<validator::formats::tpm::attest::ClockInfo, Usage> {
    let (r, c) = s
        .split_once(':')
        .and_then(|(r, c)| Some((r.parse().ok()?, c.parse().ok()?)))
        .ok_or_else(|| Usage(format!("--after {s:?}: not RESET_COUNT:CLOCK_MS")))?;
    Ok(validator::formats::tpm::attest::ClockInfo {
        clock: c,
        reset_count: r,
        restart_count: 0,
        safe: true,
    })
}

/// A report's verification: the report, the log and the references read (unusable ones
/// refused, named), then the verdict.
fn verify_report_files(
    a: &VerifyArgs,
    report: &Path,
    ak: &validator::formats::tpm::attest::Public,
) -> Result<Result<serde_json::Value, VerifyError>, Usage> {
    let json = read_limited(report, SMALL_MAX)?;
    let log_path = a
        .eventlog
        .as_ref()
        .ok_or_else(|| Usage("--report needs --eventlog".into()))?;
    let log = read_log(log_path)?;
    if a.references.is_empty() {
        return Err(Usage("--report needs at least one --reference".into()));
    }
    let mut refs = Vec::new();
    for p in &a.references {
        let text = String::from_utf8(read_limited(p, SMALL_MAX)?)
            .map_err(|_| Usage(format!("{}: not UTF-8", p.display())))?;
        refs.push(Reference::parse(&text).map_err(|e| Usage(format!("{}: {e}", p.display())))?);
    }
    let policy = Policy {
        accept: if a.accept.is_empty() {
            Policy::default().accept
        } else {
            a.accept.clone()
        },
        allow_fallback: !a.no_fallback,
        last: a.after.as_deref().map(parse_after).transpose()?,
    };
    Ok(
        match verify::verify_report_log(ak, &refs, &json, &log, &policy) {
            // Not a report at all: unusable input, named.
            Err(e @ VerifyError::Report(_)) => {
                return Err(Usage(format!("{}: {e}", report.display())));
            }
            r => r.map(|v| serde_json::to_value(v).unwrap_or_default()),
        },
    )
}

/// A challenge's verification (`--message --signature --nonce [--eventlog]`).
fn verify_challenge_files(
    a: &VerifyArgs,
    ak: &validator::formats::tpm::attest::Public,
) -> Result<Result<serde_json::Value, VerifyError>, Usage> {
    let (Some(m), Some(s), Some(n)) = (&a.message, &a.signature, &a.nonce) else {
        return Err(Usage(
            "give --report, or --message, --signature and --nonce".into(),
        ));
    };
    let nonce =
        validator::util::unhex(n).ok_or_else(|| Usage(format!("--nonce {n:?}: not hex")))?;
    let log = a.eventlog.as_deref().map(read_log).transpose()?;
    let r = verify::verify_quote(
        ak,
        &read_limited(m, SMALL_MAX)?,
        &read_limited(s, SMALL_MAX)?,
        &nonce,
        "the nonce",
        log.as_ref(),
    );
    Ok(match r {
        // A quote or signature that is not one: unusable input, named.
        Err(e @ VerifyError::Malformed(_)) => {
            return Err(Usage(format!("{} / {}: {e}", m.display(), s.display())));
        }
        r => r.map(|q| {
            serde_json::json!({
                "ak_name": validator::util::hex(&ak.name()),
                "pcrs": format_selection(&q.pcr_select),
                "clock": q.clock,
                "log_checked": log.is_some(),
            })
        }),
    })
}

fn verify_cmd(a: VerifyArgs, out: &mut Out) -> Res {
    let ak = read_ak(&a.ak)?;
    let result = match &a.report {
        Some(report) => verify_report_files(&a, report, &ak),
        None => verify_challenge_files(&a, &ak),
    };
    let result = match result {
        Ok(r) => r,
        Err(Usage(why)) => {
            // Unusable input: exit 2 in either output mode; with --json the answer is
            // also on stdout for the service that reads it.
            if a.json {
                out.line(
                    &serde_json::json!({"verified": false, "unusable": true, "reason": why})
                        .to_string(),
                )?;
            }
            return Err(Usage(why));
        }
    };
    match result {
        Ok(v) => {
            if a.json {
                out.line(&serde_json::json!({"verified": true, "result": v}).to_string())?;
            } else {
                out.line(&format!("verified: {v}"))?;
            }
            Ok(true)
        }
        Err(e) => {
            if a.json {
                out.line(
                    &serde_json::json!({"verified": false, "reason": e.to_string()}).to_string(),
                )?;
            } else {
                out.line(&format!("refused: {e}"))?;
            }
            Ok(false)
        }
    }
}

//! `validator tpm pcrs` and `validator tpm replay`: the TPM's PCRs (device or swtpm
//! port), and the PCR values a binary (TCG crypto-agile or legacy SHA-1) or CEL-JSON event log predicts,
//! in `tpm2_eventlog`'s `pcrs:` layout.
//!
//! Contract: the log is read up to the library's event-log limit; an unparsable log is
//! exit 2, named.

use std::path::Path;

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::{Res, Usage};

fn print_pcrs(
    v: &validator::formats::tpm::PcrValues,
    json: bool,
    out: &mut Out,
) -> Result<(), Usage> {
    use std::collections::BTreeMap;
    if json {
        let doc: BTreeMap<&str, BTreeMap<String, String>> = v
            .iter()
            .map(|(b, m)| {
                (
                    b.name(),
                    m.iter()
                        .map(|(p, d)| (p.to_string(), validator::util::hex(d)))
                        .collect(),
                )
            })
            .collect();
        out.line(&serde_json::to_string_pretty(&doc)?)?;
    } else {
        out.line("pcrs:")?;
        for (b, m) in v {
            out.line(&format!("  {}:", b.name()))?;
            for (p, d) in m {
                out.line(&format!("    {p:<2} : 0x{}", validator::util::hex(d)))?;
            }
        }
    }
    Ok(())
}

/// `validator tpm pcrs`.
pub(crate) fn pcrs(tcp: Option<std::net::SocketAddr>, json: bool, out: &mut Out) -> Res {
    use validator::formats::tpm::PcrValues;
    use validator::sys::tpm::{DeviceTransport, TcpTransport, Tpm, Transport};
    fn read_all<T: Transport>(mut t: Tpm<T>) -> Result<PcrValues, Usage> {
        let banks = t.get_pcr_banks()?;
        let mut v = PcrValues::new();
        for pcr in 0..24 {
            for (b, d) in t.pcr_read(pcr, &banks)? {
                v.entry(b).or_default().insert(pcr, d);
            }
        }
        eprintln!(
            "validator: {} TPM commands, {} us",
            t.stats().commands,
            t.stats().time.as_micros()
        );
        Ok(v)
    }
    let v = match tcp {
        Some(sa) => read_all(Tpm::new(TcpTransport::connect(
            sa,
            std::time::Duration::from_secs(2),
        )?))?,
        None => read_all(Tpm::new(DeviceTransport::open(Path::new("/dev"))?))?,
    };
    print_pcrs(&v, json, out)?;
    Ok(true)
}

/// `validator tpm replay`.
pub(crate) fn replay(file: &Path, json: bool, out: &mut Out) -> Res {
    use validator::formats::tpm::{cel, eventlog};
    let bytes = read_limited(file, validator::runtime::measure::EVENT_LOG_MAX)?;
    let name = file.display();
    // CEL-JSON is a JSON-seq (RS-prefixed records) or plain JSON lines; a binary log
    // starts with the 32-bit PCR index of its Spec ID event.
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let v = if matches!(first, Some(0x1e | b'{')) {
        cel::replay(&cel::parse(&bytes).map_err(|e| Usage(format!("{name}: {e}")))?)
    } else {
        eventlog::EventLog::parse(&bytes)
            .map_err(|e| Usage(format!("{name}: {e}")))?
            .replay()
    };
    print_pcrs(&v, json, out)?;
    Ok(true)
}

//! Reading what the test root printed about its TPM: `tpm2_pcrread` and `tpm2_eventlog`
//! listings and base64 copies of our logs, between the markers of
//! [`crate::scenario::TPM_ROOT_SCRIPT`].

use std::collections::BTreeMap;

use base64::Engine as _;

/// Bank name to PCR to lower-case hex.
pub type Listing = BTreeMap<String, BTreeMap<u32, String>>;

/// The console lines between `<name>-BEGIN` and `<name>-END` (CR removed).
pub fn section(console: &str, name: &str) -> Option<String> {
    let begin = format!("{name}-BEGIN");
    let end = format!("{name}-END");
    let text = console.replace('\r', "");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    Some(text[start..stop].trim_matches('\n').to_string())
}

/// Parses `  bank:` / `    N : 0xHEX` listings (tpm2_pcrread, tpm2_eventlog's `pcrs:`,
/// `validator tpm replay`). Banks with no PCRs are left out.
pub fn parse_listing(text: &str) -> Listing {
    let mut out = Listing::new();
    let mut bank: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(b) = t.strip_suffix(':') {
            if line.starts_with("  ") && !line.starts_with("    ") && !b.contains(' ') {
                bank = Some(b.to_string());
            }
            continue;
        }
        if let (Some(b), Some((n, v))) = (&bank, t.split_once(':')) {
            if let (Ok(n), Some(h)) = (n.trim().parse::<u32>(), v.trim().strip_prefix("0x")) {
                out.entry(b.clone())
                    .or_default()
                    .insert(n, h.to_ascii_lowercase());
            }
        }
    }
    out
}

/// The `pcrs:` part of `tpm2_eventlog` output.
pub fn eventlog_pcrs(text: &str) -> Listing {
    parse_listing(text.split("\npcrs:").nth(1).unwrap_or(""))
}

/// Decodes a base64 section.
pub fn base64_section(console: &str, name: &str) -> Option<Vec<u8>> {
    let s: String = section(console, name)?.split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// The PCR values, bank name -> PCR -> lower-case hex, of the printed binary log
/// (`TPM-LOG`) replayed without its last record, which must be the boot's seal: what the
/// PCRs held when the init read them back and quoted (the report's `tpm.pcrs`). `None`
/// when the log is missing, does not parse or does not end with the seal.
pub fn pcrs_before_seal(console: &str) -> Option<BTreeMap<String, BTreeMap<u32, String>>> {
    use validator::formats::tpm::eventlog::{replay_events, EventLog};
    let log = EventLog::parse(&base64_section(console, "TPM-LOG")?).ok()?;
    let (seal, quoted) = log.events().split_last()?;
    if !seal.data.starts_with(b"sealed:") {
        return None;
    }
    Some(
        replay_events(quoted)
            .into_iter()
            .map(|(bank, pcrs)| {
                (
                    bank.name().to_string(),
                    pcrs.into_iter()
                        .map(|(p, v)| (p, validator::util::hex(&v)))
                        .collect(),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings() {
        let t = "  sha1:\n    0 : 0xAB\n    11: 0xcd\n  sha384:\n  sha256:\n    13 : 0x01\n";
        let l = parse_listing(t);
        assert_eq!(l["sha1"][&0], "ab");
        assert_eq!(l["sha1"][&11], "cd");
        assert_eq!(l["sha256"][&13], "01");
        assert!(!l.contains_key("sha384"));
        let c = "x\r\nA-BEGIN\r\nhello\r\nA-END\r\n";
        assert_eq!(section(c, "A").as_deref(), Some("hello"));
        let e = "---\nevents:\n- PCRIndex: 0\npcrs:\n  sha1:\n    0  : 0x00\n";
        assert_eq!(eventlog_pcrs(e)["sha1"][&0], "00");
    }
}

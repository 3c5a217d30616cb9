//! PCR selections as people write them and as a quote covers them: tpm2-tools' PCR
//! list (`sha256:0,1,2+sha1:11`, [`parse_selection`] / [`format_selection`]), the
//! selected values in quote order ([`selected_values`], `tpm2_pcrread -o`'s file) and the
//! quote's PCR digest over them ([`pcr_digest`]).
//!
//! Contract: a list parses to banks in the order given, each bank once, PCRs sorted and
//! unique, each below the PCR count; a value the selection names but `values` lacks is a
//! [`MissingPcr`], never a shorter digest.

use super::PcrSelection;
use crate::formats::tpm::{HashAlg, PcrValues};

/// Why a PCR list (`sha256:0,1,2+sha1:11`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error("{0:?} is not BANK:PCR,PCR,...")]
    NotBankList(String),
    #[error("{0:?} is not a PCR bank (sha1, sha256, sha384, sha512)")]
    UnknownBank(String),
    #[error("bank {0} given twice")]
    BankTwice(HashAlg),
    #[error("{0:?} is not a PCR number")]
    NotPcr(String),
    #[error("PCR {0} is out of range 0..{count}", count = crate::formats::tpm::PCR_COUNT)]
    OutOfRange(u32),
}

/// Parses `sha256:0,1,2+sha1:11` (tpm2-tools' PCR list) into a selection, PCRs sorted.
pub fn parse_selection(text: &str) -> Result<PcrSelection, SelectionError> {
    let mut sel = PcrSelection::new();
    for part in text.split('+') {
        let (bank, list) = part
            .split_once(':')
            .ok_or_else(|| SelectionError::NotBankList(part.to_string()))?;
        let bank = HashAlg::from_name(bank.trim())
            .ok_or_else(|| SelectionError::UnknownBank(bank.to_string()))?;
        if sel.iter().any(|(b, _)| *b == bank) {
            return Err(SelectionError::BankTwice(bank));
        }
        let mut pcrs = Vec::new();
        for p in list.split(',') {
            let n: u32 = p
                .trim()
                .parse()
                .map_err(|_| SelectionError::NotPcr(p.to_string()))?;
            if n >= crate::formats::tpm::PCR_COUNT {
                return Err(SelectionError::OutOfRange(n));
            }
            if !pcrs.contains(&n) {
                pcrs.push(n);
            }
        }
        pcrs.sort_unstable();
        sel.push((bank, pcrs));
    }
    Ok(sel)
}

/// Formats a selection as [`parse_selection`] reads it.
pub fn format_selection(sel: &[(HashAlg, Vec<u32>)]) -> String {
    sel.iter()
        .map(|(b, p)| {
            let list: Vec<String> = p.iter().map(u32::to_string).collect();
            format!("{}:{}", b.name(), list.join(","))
        })
        .collect::<Vec<_>>()
        .join("+")
}

/// A selected PCR that has no value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no value for PCR {pcr} of bank {bank}")]
pub struct MissingPcr {
    pub bank: HashAlg,
    pub pcr: u32,
}

/// The quote's PCR digest of `values`: `hash` over the selected PCRs' values, banks in
/// selection order, PCRs ascending. `Err` names the first PCR `values` lacks.
pub fn pcr_digest(
    hash: HashAlg,
    sel: &[(HashAlg, Vec<u32>)],
    values: &PcrValues,
) -> Result<Vec<u8>, MissingPcr> {
    Ok(hash.digest(&selected_values(sel, values)?))
}

/// The selected PCRs' values concatenated in quote order (`tpm2_pcrread -o`'s file).
pub fn selected_values(
    sel: &[(HashAlg, Vec<u32>)],
    values: &PcrValues,
) -> Result<Vec<u8>, MissingPcr> {
    let mut cat = Vec::new();
    for (bank, pcrs) in sel {
        for p in pcrs {
            let v = values.get(bank).and_then(|m| m.get(p)).ok_or(MissingPcr {
                bank: *bank,
                pcr: *p,
            })?;
            cat.extend_from_slice(v);
        }
    }
    Ok(cat)
}

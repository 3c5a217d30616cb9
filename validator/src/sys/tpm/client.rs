//! The TPM 2.0 commands the gate uses, over any [`Transport`].

use std::thread;
use std::time::{Duration, Instant};

use super::transport::Transport;
use crate::formats::tpm::wire::{
    check_response, CommandBuf, Reader, ResponseCode, HEADER_LEN, ST_NO_SESSIONS, ST_SESSIONS,
};
use crate::formats::tpm::{HashAlg, TpmError};

/// Default per-command timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

const CC_STARTUP: u32 = 0x0000_0144;
const CC_GET_CAPABILITY: u32 = 0x0000_017A;
const CC_PCR_READ: u32 = 0x0000_017E;
const CC_PCR_EXTEND: u32 = 0x0000_0182;
const TPM_CAP_PCRS: u32 = 0x0000_0005;
const TPM_RS_PW: u32 = 0x4000_0009;
const TPM_SU_CLEAR: u16 = 0x0000;
/// PCR indexes we accept (`TPM2_MAX_PCRS` in the TSS).
const PCR_COUNT: u32 = 32;
/// Times a PCR_Read sequence restarts when the update counter moves under it.
const READ_RESTARTS: u32 = 3;

/// How often and how long to retry `TPM_RC_RETRY`, `YIELDED`, `TESTING`.
#[derive(Debug, Clone, Copy)]
struct RetryPolicy {
    tries: u32,
    first: Duration,
    max: Duration,
}

const RETRY: RetryPolicy = RetryPolicy {
    tries: 5,
    first: Duration::from_millis(10),
    max: Duration::from_millis(200),
};

/// Commands sent (every transaction, retries included) and the time spent in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpmStats {
    pub commands: u32,
    pub time: Duration,
}

/// A TPM 2.0 client over a [`Transport`].
#[derive(Debug)]
pub struct Tpm<T: Transport> {
    transport: T,
    timeout: Duration,
    retry: RetryPolicy,
    stats: TpmStats,
    /// The active banks, once [`Tpm::get_pcr_banks`] has read them.
    banks: Option<Vec<HashAlg>>,
}

impl<T: Transport> Tpm<T> {
    /// A client with the default timeout of [`DEFAULT_TIMEOUT`] per command.
    pub fn new(transport: T) -> Tpm<T> {
        Tpm {
            transport,
            timeout: DEFAULT_TIMEOUT,
            retry: RETRY,
            stats: TpmStats::default(),
            banks: None,
        }
    }

    /// Sets the per-command timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Tpm<T> {
        self.timeout = timeout;
        self
    }

    /// Commands sent so far and the time spent waiting for their responses.
    pub fn stats(&self) -> TpmStats {
        self.stats
    }

    /// Gives the transport back.
    pub fn into_transport(self) -> T {
        self.transport
    }

    /// `TPM2_Startup(TPM_SU_CLEAR)`. Returns `false` when the TPM was already started
    /// (`TPM_RC_INITIALIZE`), as it is after firmware.
    pub fn startup_clear(&mut self) -> Result<bool, TpmError> {
        const CMD: &str = "TPM2_Startup";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_STARTUP);
        c.u16(TPM_SU_CLEAR);
        match self.execute(CMD, ST_NO_SESSIONS, &c.finish()) {
            Ok(resp) => {
                Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default()).finish()?;
                Ok(true)
            }
            Err(TpmError::Rc { rc, .. }) if rc == ResponseCode::INITIALIZE => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `TPM2_GetCapability(TPM_CAP_PCRS)`: the active PCR banks (a non-empty
    /// `pcrSelect`), in the TPM's order. Banks of algorithms we do not support are left
    /// out. The result is remembered: [`Tpm::pcr_extend`] then insists on a digest for
    /// each of them.
    pub fn get_pcr_banks(&mut self) -> Result<Vec<HashAlg>, TpmError> {
        const CMD: &str = "TPM2_GetCapability(TPM_CAP_PCRS)";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_GET_CAPABILITY);
        c.u32(TPM_CAP_PCRS).u32(0).u32(1);
        let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
        let banks = parse_pcr_banks(CMD, resp.get(HEADER_LEN..).unwrap_or_default())?;
        self.banks = Some(banks.clone());
        Ok(banks)
    }

    /// `TPM2_PCR_Extend`: one command extending `pcr` in every bank given, with the empty
    /// password session (`TPM_RS_PW`). Give a digest for every active bank: a bank left
    /// out keeps a value an attacker could forge. Once [`Tpm::get_pcr_banks`] has run, the
    /// digests must cover exactly those banks.
    pub fn pcr_extend(&mut self, pcr: u32, digests: &[(HashAlg, Vec<u8>)]) -> Result<(), TpmError> {
        const CMD: &str = "TPM2_PCR_Extend";
        check_pcr(CMD, pcr)?;
        let invalid = |why: String| TpmError::Invalid { command: CMD, why };
        if digests.is_empty() {
            return Err(invalid("no digest given".into()));
        }
        for (i, (alg, d)) in digests.iter().enumerate() {
            if d.len() != alg.size() {
                return Err(invalid(format!(
                    "{alg} digest has {} bytes, expected {}",
                    d.len(),
                    alg.size()
                )));
            }
            if digests.iter().take(i).any(|(a, _)| a == alg) {
                return Err(invalid(format!("two {alg} digests")));
            }
        }
        if let Some(banks) = &self.banks {
            let missing: Vec<&str> = banks
                .iter()
                .filter(|b| !digests.iter().any(|(a, _)| a == *b))
                .map(|b| b.name())
                .collect();
            let extra: Vec<&str> = digests
                .iter()
                .filter(|(a, _)| !banks.contains(a))
                .map(|(a, _)| a.name())
                .collect();
            if !missing.is_empty() || !extra.is_empty() {
                return Err(invalid(format!(
                    "digests must cover exactly the active banks; missing [{}], not active [{}]",
                    missing.join(","),
                    extra.join(",")
                )));
            }
        }
        let mut c = CommandBuf::new(ST_SESSIONS, CC_PCR_EXTEND);
        c.u32(pcr);
        // Authorization area: TPMS_AUTH_COMMAND with the password session, empty nonce,
        // no attributes, empty password.
        c.u32(9).u32(TPM_RS_PW).u16(0).u8(0).u16(0);
        let count = u32::try_from(digests.len())
            .map_err(|_| invalid(format!("{} digests is too many", digests.len())))?;
        c.u32(count);
        for (alg, d) in digests {
            c.u16(alg.alg_id()).bytes(d);
        }
        let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let param_size = r.u32("parameterSize")?;
        if param_size != 0 {
            return Err(TpmError::BadResponse {
                command: CMD,
                why: format!("parameterSize {param_size}, expected 0"),
            });
        }
        r.tpm2b("session nonce")?;
        r.u8("session attributes")?;
        r.tpm2b("session hmac")?;
        r.finish()
    }

    /// `TPM2_PCR_Read` of one PCR in the given banks, in the order given. A TPM returns at
    /// most 8 digests per call and may leave selections out: the remaining banks are
    /// asked for again until all are read; if the PCR update counter moves between those
    /// calls, the read starts over.
    pub fn pcr_read(
        &mut self,
        pcr: u32,
        banks: &[HashAlg],
    ) -> Result<Vec<(HashAlg, Vec<u8>)>, TpmError> {
        const CMD: &str = "TPM2_PCR_Read";
        check_pcr(CMD, pcr)?;
        if banks.is_empty() {
            return Err(TpmError::Invalid {
                command: CMD,
                why: "no bank given".into(),
            });
        }
        for (i, b) in banks.iter().enumerate() {
            if banks.iter().take(i).any(|x| x == b) {
                return Err(TpmError::Invalid {
                    command: CMD,
                    why: format!("bank {b} given twice"),
                });
            }
        }
        'restart: for _ in 0..READ_RESTARTS {
            let mut got: Vec<Option<Vec<u8>>> = vec![None; banks.len()];
            let mut counter = None;
            loop {
                let want: Vec<HashAlg> = banks
                    .iter()
                    .zip(&got)
                    .filter(|(_, g)| g.is_none())
                    .map(|(b, _)| *b)
                    .collect();
                if want.is_empty() {
                    break;
                }
                let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_PCR_READ);
                push_selection(&mut c, &want, pcr);
                let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
                let (update, values) =
                    parse_pcr_read(CMD, resp.get(HEADER_LEN..).unwrap_or_default(), pcr, &want)?;
                if values.is_empty() {
                    return Err(TpmError::BadResponse {
                        command: CMD,
                        why: format!("no value returned for PCR {pcr} in [{}]", names(&want)),
                    });
                }
                if counter.is_some_and(|c| c != update) {
                    continue 'restart;
                }
                counter = Some(update);
                for (alg, v) in values {
                    if let Some(slot) = banks
                        .iter()
                        .position(|b| *b == alg)
                        .and_then(|i| got.get_mut(i))
                    {
                        *slot = Some(v);
                    }
                }
            }
            return Ok(banks
                .iter()
                .zip(got)
                .map(|(b, v)| (*b, v.unwrap_or_default()))
                .collect());
        }
        Err(TpmError::BadResponse {
            command: CMD,
            why: format!("PCR update counter changed during each of {READ_RESTARTS} reads"),
        })
    }

    /// Sends one command, retrying "busy" codes with a bounded backoff; returns the whole
    /// response once it checked as a success.
    pub(super) fn execute(
        &mut self,
        command: &'static str,
        expect_tag: u16,
        cmd: &[u8],
    ) -> Result<Vec<u8>, TpmError> {
        let mut backoff = self.retry.first;
        let mut last = ResponseCode::RETRY;
        for attempt in 1..=self.retry.tries {
            let start = Instant::now();
            let r = self.transport.transact(cmd, self.timeout);
            self.stats.commands += 1;
            self.stats.time += start.elapsed();
            let resp = r.map_err(|e| TpmError::Command {
                command,
                source: Box::new(e),
            })?;
            match check_response(command, expect_tag, &resp) {
                Ok(_) => return Ok(resp),
                Err(TpmError::Rc { rc, .. }) if rc.is_retryable() => {
                    log::debug!("{command}: {rc}, try {attempt} of {}", self.retry.tries);
                    last = rc;
                    if attempt < self.retry.tries {
                        thread::sleep(backoff);
                        backoff = (backoff * 2).min(self.retry.max);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(TpmError::Busy {
            command,
            rc: last,
            tries: self.retry.tries,
        })
    }
}

fn check_pcr(command: &'static str, pcr: u32) -> Result<(), TpmError> {
    if pcr >= PCR_COUNT {
        return Err(TpmError::Invalid {
            command,
            why: format!("PCR {pcr} out of range 0..{PCR_COUNT}"),
        });
    }
    Ok(())
}

fn names(banks: &[HashAlg]) -> String {
    banks.iter().map(|b| b.name()).collect::<Vec<_>>().join(",")
}

/// A `TPML_PCR_SELECTION` selecting `pcr` in each bank.
fn push_selection(c: &mut CommandBuf, banks: &[HashAlg], pcr: u32) {
    let size = (pcr / 8 + 1).max(3) as usize;
    let mut select = vec![0u8; size];
    if let Some(byte) = select.get_mut((pcr / 8) as usize) {
        *byte = 1 << (pcr % 8);
    }
    // Both counts are tiny (a handful of banks, at most 32 select bytes); saturating
    // only names the limit, it is never reached.
    c.u32(u32::try_from(banks.len()).unwrap_or(u32::MAX));
    let size_byte = u8::try_from(size).unwrap_or(u8::MAX);
    for b in banks {
        c.u16(b.alg_id()).u8(size_byte).bytes(&select);
    }
}

/// One `TPMS_PCR_SELECTION`: algorithm and the bitmap.
fn read_selection<'a>(r: &mut Reader<'a>) -> Result<(u16, &'a [u8]), TpmError> {
    let alg = r.u16("TPMS_PCR_SELECTION.hash")?;
    let n = r.u8("TPMS_PCR_SELECTION.sizeofSelect")?;
    let bits = r.bytes(usize::from(n), "TPMS_PCR_SELECTION.pcrSelect")?;
    Ok((alg, bits))
}

/// The `TPML_PCR_SELECTION` count, bounded so that a lying count fails as truncation
/// rather than a large loop (each entry is at least 3 bytes).
fn read_count(
    command: &'static str,
    r: &mut Reader<'_>,
    what: &str,
    max: u32,
) -> Result<u32, TpmError> {
    let at = r.offset();
    let n = r.u32(what)?;
    if n > max {
        return Err(TpmError::BadResponse {
            command,
            why: format!("{what} {n} at byte {at} exceeds {max}"),
        });
    }
    Ok(n)
}

/// GetCapability(TPM_CAP_PCRS) response parameters → active, supported banks.
fn parse_pcr_banks(command: &'static str, body: &[u8]) -> Result<Vec<HashAlg>, TpmError> {
    let mut r = Reader::new(command, body);
    let more = r.u8("moreData")?;
    if more > 1 {
        return Err(TpmError::BadResponse {
            command,
            why: format!("moreData {more} is not a TPMI_YES_NO"),
        });
    }
    let cap = r.u32("capability")?;
    if cap != TPM_CAP_PCRS {
        return Err(TpmError::BadResponse {
            command,
            why: format!("capability {cap:#x}, expected TPM_CAP_PCRS (0x5)"),
        });
    }
    let count = read_count(command, &mut r, "TPML_PCR_SELECTION.count", 16)?;
    let mut banks = Vec::new();
    for _ in 0..count {
        let (alg, bits) = read_selection(&mut r)?;
        if bits.iter().all(|b| *b == 0) {
            continue;
        }
        match HashAlg::from_alg_id(alg) {
            Some(h) if !banks.contains(&h) => banks.push(h),
            Some(_) => {}
            None => log::debug!("{command}: ignoring PCR bank of algorithm {alg:#06x}"),
        }
    }
    r.finish()?;
    Ok(banks)
}

/// The update counter and the values of one PCR_Read.
type PcrReadReply = (u32, Vec<(HashAlg, Vec<u8>)>);

/// PCR_Read response parameters → update counter and the values returned, checked to
/// be `pcr` in banks of `want`, with digests of the bank's size.
fn parse_pcr_read(
    command: &'static str,
    body: &[u8],
    pcr: u32,
    want: &[HashAlg],
) -> Result<PcrReadReply, TpmError> {
    let bad = |why: String| TpmError::BadResponse { command, why };
    let mut r = Reader::new(command, body);
    let update = r.u32("pcrUpdateCounter")?;
    let count = read_count(command, &mut r, "TPML_PCR_SELECTION.count", 16)?;
    let mut selected = Vec::new();
    for _ in 0..count {
        let at = r.offset();
        let (alg_id, bits) = read_selection(&mut r)?;
        for (byte, b) in (0u32..).zip(bits.iter()) {
            for bit in 0..8 {
                if b & (1 << bit) == 0 {
                    continue;
                }
                let index = byte * 8 + bit;
                let alg = HashAlg::from_alg_id(alg_id).filter(|a| want.contains(a));
                match alg {
                    Some(a) if index == pcr && !selected.contains(&a) => selected.push(a),
                    _ => {
                        return Err(bad(format!(
                            "selection at byte {at} returns PCR {index} of bank {alg_id:#06x}, which was not asked for"
                        )))
                    }
                }
            }
        }
    }
    let at = r.offset();
    let n = r.u32("TPML_DIGEST.count")?;
    if n as usize != selected.len() {
        return Err(bad(format!(
            "{n} digests at byte {at} for {} selected PCRs",
            selected.len()
        )));
    }
    let mut values = Vec::with_capacity(selected.len());
    for alg in selected {
        let at = r.offset();
        let d = r.tpm2b("TPM2B_DIGEST")?;
        if d.len() != alg.size() {
            return Err(bad(format!(
                "{alg} digest at byte {at} has {} bytes, expected {}",
                d.len(),
                alg.size()
            )));
        }
        values.push((alg, d.to_vec()));
    }
    r.finish()?;
    Ok((update, values))
}

#[cfg(test)]
mod tests;

//! The TPM 2.0 commands of attestation: keys from templates (`TPM2_CreatePrimary`),
//! their public areas (`TPM2_ReadPublic`), quotes (`TPM2_Quote`), the EK certificate
//! (`TPM2_NV_ReadPublic`, `TPM2_NV_Read`), the enrollment of the AK through the EK
//! (`TPM2_StartAuthSession`, `TPM2_PolicySecret`, `TPM2_ActivateCredential`), and
//! `TPM2_FlushContext`.
//!
//! Every command uses the empty password session where it needs authorization: the
//! endorsement hierarchy of a fleet node has no password (the TPM's default, and what
//! `swtpm_setup` leaves); a hierarchy with one is refused by the TPM with
//! `TPM_RC_BAD_AUTH`, named.

use super::transport::Transport;
use super::Tpm;
use crate::formats::tpm::attest::{write_selection, Attest, Public, Signature};
use crate::formats::tpm::wire::{CommandBuf, Reader, HEADER_LEN, ST_NO_SESSIONS, ST_SESSIONS};
use crate::formats::tpm::{HashAlg, TpmError};

const CC_CREATE_PRIMARY: u32 = 0x0000_0131;
const CC_ACTIVATE_CREDENTIAL: u32 = 0x0000_0147;
const CC_POLICY_SECRET: u32 = 0x0000_0151;
const CC_START_AUTH_SESSION: u32 = 0x0000_0176;
/// `TPM_RH_NULL`.
const RH_NULL: u32 = 0x4000_0007;
/// `TPM_SE_POLICY`.
const SE_POLICY: u8 = 0x01;
const CC_NV_READ: u32 = 0x0000_014E;
const CC_QUOTE: u32 = 0x0000_0158;
const CC_FLUSH_CONTEXT: u32 = 0x0000_0165;
const CC_NV_READ_PUBLIC: u32 = 0x0000_0169;
const CC_READ_PUBLIC: u32 = 0x0000_0173;
const TPM_RS_PW: u32 = 0x4000_0009;
/// `TPM_RH_ENDORSEMENT`.
pub const RH_ENDORSEMENT: u32 = 0x4000_000B;
/// `TPM_RH_OWNER`.
pub const RH_OWNER: u32 = 0x4000_0001;
/// Bytes asked for per `TPM2_NV_Read` (every TPM 2.0 takes at least this).
const NV_CHUNK: u16 = 512;

/// A loaded key: its transient handle and public area.
#[derive(Debug, Clone)]
pub struct LoadedKey {
    pub handle: u32,
    pub public: Public,
}

/// An NV index's public area: attributes and data size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvPublic {
    pub attributes: u32,
    pub size: u16,
}

/// The empty password session (`TPMS_AUTH_COMMAND`), preceded by its size.
fn password_session(c: &mut CommandBuf) {
    c.u32(9).u32(TPM_RS_PW).u16(0).u8(0).u16(0);
}

/// A response of a command with one session: the parameters (by `parameterSize`) and
/// the session's response after them, checked and skipped.
fn params_with_session<'a>(
    command: &'static str,
    r: &mut Reader<'a>,
) -> Result<&'a [u8], TpmError> {
    params_with_sessions(command, r, 1)
}

/// [`params_with_session`] for a command with `sessions` sessions.
fn params_with_sessions<'a>(
    command: &'static str,
    r: &mut Reader<'a>,
    sessions: usize,
) -> Result<&'a [u8], TpmError> {
    let n = r.u32("parameterSize")?;
    let params = r.bytes(n as usize, "parameters")?;
    for _ in 0..sessions {
        r.tpm2b("session nonce")?;
        r.u8("session attributes")?;
        r.tpm2b("session hmac")?;
    }
    r.finish().map_err(|e| match e {
        TpmError::BadResponse { why, .. } => TpmError::BadResponse { command, why },
        e => e,
    })?;
    Ok(params)
}

impl<T: Transport> Tpm<T> {
    /// `TPM2_CreatePrimary` under `hierarchy` from `template` (a `TPMT_PUBLIC`, see
    /// [`crate::formats::tpm::attest::ak_template`]), with no sensitive data and no
    /// creation PCRs. The same template under the same seed gives the same key every
    /// time. Flush the handle when done ([`Tpm::flush_context`]): a TPM holds only a
    /// few transient objects.
    pub fn create_primary(
        &mut self,
        hierarchy: u32,
        template: &[u8],
    ) -> Result<LoadedKey, TpmError> {
        const CMD: &str = "TPM2_CreatePrimary";
        let mut c = CommandBuf::new(ST_SESSIONS, CC_CREATE_PRIMARY);
        c.u32(hierarchy);
        password_session(&mut c);
        c.u16(4).u16(0).u16(0); // inSensitive: empty userAuth, empty data
        c.tpm2b(template);
        c.tpm2b(&[]); // outsideInfo
        c.u32(0); // creationPCR: none
        let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let handle = r.u32("objectHandle")?;
        let params = params_with_session(CMD, &mut r)?;
        let mut p = Reader::new(CMD, params);
        let public = {
            let area = p.tpm2b("outPublic")?;
            let mut a = Reader::new(CMD, area);
            let public = Public::read(&mut a)?;
            a.finish()?;
            public
        };
        p.tpm2b("creationData")?;
        p.tpm2b("creationHash")?;
        p.u16("creationTicket.tag")?;
        p.u32("creationTicket.hierarchy")?;
        p.tpm2b("creationTicket.digest")?;
        let name = p.tpm2b("name")?;
        p.finish()?;
        if name != public.name().as_slice() {
            return Err(TpmError::BadResponse {
                command: CMD,
                why: "the name returned is not the digest of the public area returned".into(),
            });
        }
        Ok(LoadedKey { handle, public })
    }

    /// `TPM2_ReadPublic`: the public area, the name and the qualified name of a loaded
    /// object.
    pub fn read_public(&mut self, handle: u32) -> Result<(Public, Vec<u8>, Vec<u8>), TpmError> {
        const CMD: &str = "TPM2_ReadPublic";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_READ_PUBLIC);
        c.u32(handle);
        let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let area = r.tpm2b("outPublic")?;
        let name = r.tpm2b("name")?.to_vec();
        let qualified = r.tpm2b("qualifiedName")?.to_vec();
        r.finish()?;
        let mut a = Reader::new(CMD, area);
        let public = Public::read(&mut a)?;
        a.finish()?;
        Ok((public, name, qualified))
    }

    /// `TPM2_Quote` by the signing key `handle` (its own scheme) over `sel`, with
    /// `qualifying` data (at most 64 bytes: a nonce or a digest).
    pub fn quote(
        &mut self,
        handle: u32,
        qualifying: &[u8],
        sel: &[(HashAlg, Vec<u32>)],
    ) -> Result<(Attest, Signature), TpmError> {
        const CMD: &str = "TPM2_Quote";
        if qualifying.len() > 64 {
            return Err(TpmError::Invalid {
                command: CMD,
                why: format!("{} bytes of qualifying data, at most 64", qualifying.len()),
            });
        }
        let mut c = CommandBuf::new(ST_SESSIONS, CC_QUOTE);
        c.u32(handle);
        password_session(&mut c);
        c.tpm2b(qualifying);
        c.u16(crate::formats::tpm::attest::alg::NULL); // inScheme: the key's own
        write_selection(&mut c, sel);
        let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let params = params_with_session(CMD, &mut r)?;
        let mut p = Reader::new(CMD, params);
        let quoted = p.tpm2b("quoted")?;
        let sig = Signature::read(&mut p)?;
        p.finish()?;
        let attest = Attest::parse(quoted).map_err(|e| TpmError::BadResponse {
            command: CMD,
            why: e.to_string(),
        })?;
        Ok((attest, sig))
    }

    /// `TPM2_StartAuthSession` of a policy session (unbound, unsalted, no parameter
    /// encryption, SHA-256): its handle.
    pub fn start_policy_session(&mut self) -> Result<u32, TpmError> {
        const CMD: &str = "TPM2_StartAuthSession";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_START_AUTH_SESSION);
        c.u32(RH_NULL).u32(RH_NULL); // tpmKey, bind
        c.tpm2b(&[0u8; 32]); // nonceCaller: any value of the hash's size
        c.tpm2b(&[]); // encryptedSalt
        c.u8(SE_POLICY);
        c.u16(crate::formats::tpm::attest::alg::NULL); // symmetric
        c.u16(HashAlg::Sha256.alg_id());
        let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let handle = r.u32("sessionHandle")?;
        r.tpm2b("nonceTPM")?;
        r.finish()?;
        Ok(handle)
    }

    /// `TPM2_PolicySecret(TPM_RH_ENDORSEMENT)` into the policy session: what the EK's
    /// policy asks for (the endorsement hierarchy's empty password).
    pub fn policy_secret_endorsement(&mut self, session: u32) -> Result<(), TpmError> {
        const CMD: &str = "TPM2_PolicySecret";
        let mut c = CommandBuf::new(ST_SESSIONS, CC_POLICY_SECRET);
        c.u32(RH_ENDORSEMENT).u32(session);
        password_session(&mut c);
        c.tpm2b(&[]).tpm2b(&[]).tpm2b(&[]).u32(0); // nonceTPM, cpHashA, policyRef, expiration
        let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let params = params_with_session(CMD, &mut r)?;
        let mut p = Reader::new(CMD, params);
        p.tpm2b("timeout")?;
        p.u16("policyTicket.tag")?;
        p.u32("policyTicket.hierarchy")?;
        p.tpm2b("policyTicket.digest")?;
        p.finish()
    }

    /// `TPM2_ActivateCredential`: the secret of a credential made for the key `ak` in
    /// this TPM (its name) to the EK `ek`. The EK is authorized by a policy session with
    /// `PolicySecret(TPM_RH_ENDORSEMENT)`, started here and ended by the command (also
    /// flushed when it fails). `TPM_RC_INTEGRITY` means the credential is not for this AK
    /// or not to this EK.
    pub fn activate_credential(
        &mut self,
        ak: u32,
        ek: u32,
        id_object: &[u8],
        encrypted_secret: &[u8],
    ) -> Result<Vec<u8>, TpmError> {
        let session = self.start_policy_session()?;
        let r = self
            .policy_secret_endorsement(session)
            .and_then(|()| self.activate_with(session, ak, ek, id_object, encrypted_secret));
        if r.is_err() {
            // A failed command leaves the session loaded; a TPM holds only a few.
            let _ = self.flush_context(session);
        }
        r
    }

    fn activate_with(
        &mut self,
        session: u32,
        ak: u32,
        ek: u32,
        id_object: &[u8],
        encrypted_secret: &[u8],
    ) -> Result<Vec<u8>, TpmError> {
        const CMD: &str = "TPM2_ActivateCredential";
        let mut c = CommandBuf::new(ST_SESSIONS, CC_ACTIVATE_CREDENTIAL);
        c.u32(ak).u32(ek);
        // Two sessions: the AK's empty password, then the policy session (no nonce, not
        // continued, no HMAC: a policy session without bind or salt needs none).
        c.u32(9 + 9);
        c.u32(TPM_RS_PW).u16(0).u8(0).u16(0);
        c.u32(session).u16(0).u8(0).u16(0);
        c.tpm2b(id_object).tpm2b(encrypted_secret);
        let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let params = params_with_sessions(CMD, &mut r, 2)?;
        let mut p = Reader::new(CMD, params);
        let cert_info = p.tpm2b("certInfo")?.to_vec();
        p.finish()?;
        Ok(cert_info)
    }

    /// `TPM2_FlushContext` of a transient object.
    pub fn flush_context(&mut self, handle: u32) -> Result<(), TpmError> {
        const CMD: &str = "TPM2_FlushContext";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_FLUSH_CONTEXT);
        c.u32(handle);
        let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
        Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default()).finish()
    }

    /// `TPM2_NV_ReadPublic`: an NV index's attributes and size.
    pub fn nv_read_public(&mut self, index: u32) -> Result<NvPublic, TpmError> {
        const CMD: &str = "TPM2_NV_ReadPublic";
        let mut c = CommandBuf::new(ST_NO_SESSIONS, CC_NV_READ_PUBLIC);
        c.u32(index);
        let resp = self.execute(CMD, ST_NO_SESSIONS, &c.finish())?;
        let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
        let area = r.tpm2b("nvPublic")?;
        r.tpm2b("nvName")?;
        r.finish()?;
        let mut a = Reader::new(CMD, area);
        let got = a.u32("nvIndex")?;
        if got != index {
            return Err(a.error(format!("nvIndex {got:#010x}, asked for {index:#010x}")));
        }
        a.u16("nameAlg")?;
        let attributes = a.u32("attributes")?;
        a.tpm2b("authPolicy")?;
        let size = a.u16("dataSize")?;
        a.finish()?;
        Ok(NvPublic { attributes, size })
    }

    /// The whole contents of an NV index (`TPM2_NV_Read` in chunks, authorized by the
    /// index itself with the empty password, as EK certificate indexes allow).
    pub fn nv_read(&mut self, index: u32) -> Result<Vec<u8>, TpmError> {
        const CMD: &str = "TPM2_NV_Read";
        let size = self.nv_read_public(index)?.size;
        let mut out = Vec::with_capacity(usize::from(size));
        let mut offset: u16 = 0;
        while offset < size {
            let n = NV_CHUNK.min(size - offset);
            let mut c = CommandBuf::new(ST_SESSIONS, CC_NV_READ);
            c.u32(index).u32(index);
            password_session(&mut c);
            c.u16(n).u16(offset);
            let resp = self.execute(CMD, ST_SESSIONS, &c.finish())?;
            let mut r = Reader::new(CMD, resp.get(HEADER_LEN..).unwrap_or_default());
            let params = params_with_session(CMD, &mut r)?;
            let mut p = Reader::new(CMD, params);
            let data = p.tpm2b("data")?;
            p.finish()?;
            if data.len() != usize::from(n) {
                return Err(p.error(format!(
                    "{} bytes at offset {offset}, asked for {n}",
                    data.len()
                )));
            }
            out.extend_from_slice(data);
            offset += n;
        }
        Ok(out)
    }
}

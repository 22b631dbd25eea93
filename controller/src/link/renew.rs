//! `AgentLink.Renew`: a connected agent's next certificate, before its current one
//! expires.
//!
//! The caller is known by the certificate its connection presented, as a session is: the
//! new certificate names the same agent and account, whatever the request asks. The
//! presented certificate stays valid until it expires, so the session on it goes on and
//! an agent that crashes before it installs the new one can still connect; any older
//! certificate of the agent is dropped, so an agent holds at most two.

use iohr_proto::link::EnrollResponse;
use tonic::Status;

use super::enroll::{Signer, store_failed};
use crate::store::{AgentIdentity, Store, now_ms};

pub(super) async fn renew(
    store: &Store,
    signer: &Signer,
    identity: &AgentIdentity,
    presented: &str,
    csr_pem: String,
) -> Result<EnrollResponse, Status> {
    let began = std::time::Instant::now();
    let account = store
        .account(&identity.account_id)
        .await
        .map_err(store_failed)?;
    let signed = signer.sign(csr_pem, &account.name, &identity.name).await?;
    let signed_ms = began.elapsed().as_millis() as u64;
    let renewed = store
        .renew_agent_cert(identity, presented, &signed.fingerprint, now_ms())
        .await
        .map_err(store_failed)?;
    if !renewed {
        // Removed between the check and the write: the new certificate was never stored.
        return Err(Status::permission_denied(
            "this certificate belongs to no agent (unknown or removed)",
        ));
    }
    tracing::info!(agent = %identity.name, agent_id = %identity.agent_id,
        fingerprint = %signed.fingerprint, signed_ms, took_ms = began.elapsed().as_millis() as u64,
        "agent certificate renewed");
    Ok(signer.response(signed, identity.name.clone(), account.name))
}

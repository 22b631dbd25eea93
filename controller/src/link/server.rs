//! The `AgentLink` gRPC service and its mTLS configuration.

use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use iohr_certs::{ControllerPki, fingerprint};
use iohr_proto::link::agent_link_server::AgentLink;
use iohr_proto::link::{AgentMessage, ControllerMessage, EnrollResponse, RenewRequest};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use super::enroll::Signer;
use super::session::Session;
use crate::Shared;
use crate::store::AgentIdentity;

/// Server identity plus the CA every agent certificate must chain to.
///
/// The server presents the CA after its own certificate, so that an enrolling agent,
/// which knows only the CA's fingerprint, can find the CA in the chain and verify against
/// it. A client certificate is optional at the handshake (an enrolling agent has none);
/// one that is presented must chain to the CA, and `Session` refuses a stream without it.
pub fn tls_config(pki: &ControllerPki) -> std::io::Result<ServerTlsConfig> {
    let mut chain = std::fs::read(pki.server_cert())?;
    let key = std::fs::read(pki.server_key())?;
    let ca = std::fs::read(pki.ca_cert())?;
    if !chain.ends_with(b"\n") {
        chain.push(b'\n');
    }
    chain.extend_from_slice(&ca);
    Ok(ServerTlsConfig::new()
        .identity(Identity::from_pem(chain, key))
        .client_ca_root(Certificate::from_pem(ca))
        .client_auth_optional(true))
}

pub struct LinkService {
    shared: Shared,
    signer: Signer,
}

impl LinkService {
    pub fn new(shared: Shared, signer: Signer) -> LinkService {
        LinkService { shared, signer }
    }
}

/// The fingerprint of the client certificate a request came with.
fn presented_fingerprint<T>(request: &Request<T>) -> Result<String, Status> {
    request
        .peer_certs()
        .and_then(|certs| certs.first().map(|c| fingerprint(c.as_ref())))
        .ok_or_else(|| {
            Status::unauthenticated(
                "client_certificate_required: a session needs the agent's certificate (enroll first)",
            )
        })
}

/// The live agent a presented certificate belongs to.
async fn agent_of(shared: &Shared, presented: &str) -> Result<AgentIdentity, Status> {
    shared
        .store
        .agent_by_fingerprint(presented)
        .await
        .map_err(|e| Status::unavailable(format!("store: {e}")))?
        .ok_or_else(|| {
            tracing::warn!(fingerprint = %presented, "refused an unknown or removed agent certificate");
            Status::permission_denied("this certificate belongs to no agent (unknown or removed)")
        })
}

type OutboundStream = Pin<Box<dyn Stream<Item = Result<ControllerMessage, Status>> + Send>>;

/// Messages queued towards one agent before the stream applies backpressure.
const OUTBOUND_BUFFER: usize = 1024;

#[tonic::async_trait]
impl AgentLink for LinkService {
    type SessionStream = OutboundStream;

    async fn session(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let presented = presented_fingerprint(&request)?;
        let identity = agent_of(&self.shared, &presented).await?;
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(OUTBOUND_BUFFER);
        let session = Session::new(self.shared.clone(), identity, tx);
        // A refused session ends its stream with a status that says why.
        let (refusal_tx, refusal_rx) = oneshot::channel::<Status>();
        tokio::spawn(async move {
            if let Some(status) = session.run(inbound).await {
                let _ = refusal_tx.send(status);
            }
        });
        let refusal = futures_util::stream::once(refusal_rx)
            .filter_map(|ended| std::future::ready(ended.ok().map(Err)));
        let outbound = ReceiverStream::new(rx).map(Ok).chain(refusal);
        Ok(Response::new(Box::pin(outbound)))
    }

    async fn renew(
        &self,
        request: Request<RenewRequest>,
    ) -> Result<Response<EnrollResponse>, Status> {
        let presented = presented_fingerprint(&request)?;
        let identity = agent_of(&self.shared, &presented).await?;
        let renewed = super::renew::renew(
            &self.shared.store,
            &self.signer,
            &identity,
            &presented,
            request.into_inner().csr_pem,
        )
        .await?;
        Ok(Response::new(renewed))
    }
}

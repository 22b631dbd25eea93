//! The MCP tools of iohr reliability, written once and served two ways: by the controller
//! on its API port at `/mcp` (streamable HTTP, [`http_service`]) and by `iohr mcp` (stdio,
//! [`serve_stdio`]).
//!
//! The tools are a client of the REST API ([`Rest`]): each one is a REST call made with
//! the caller's token, so they have exactly REST's semantics, callers and scopes (a
//! read-only token cannot start a run; there is no confirm tool, so no MCP caller can
//! confirm a production fault). A tool error carries the API's error `code` and message.

mod frames;
mod inputs;
mod outputs;
mod rest;
mod tools;
mod wait;

pub use rest::{ByteStream, Method, Rest, RestError, RestFuture, StreamFuture, body_stream};
pub use tools::Tools;
pub use wait::MAX_WAIT_S;

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

/// Serving over stdio ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MCP over stdio: {0}")]
    Start(String),
    #[error("MCP over stdio ended: {0}")]
    Run(String),
}

/// The tools over stdio until the client closes stdin (`iohr mcp`).
pub async fn serve_stdio(rest: Arc<dyn Rest>) -> Result<(), ServeError> {
    let running = Tools::new(rest)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| ServeError::Run(e.to_string()))
}

/// The tower service the controller mounts at `/mcp`: streamable HTTP, stateless for every
/// protocol revision (nothing is kept between requests, so nothing to bound or expire),
/// each tool call forwarding the request's `Authorization` header to REST.
/// `shutdown` ends the service's streams (a waiting tool returns) when the controller stops.
pub fn http_service(
    rest: Arc<dyn Rest>,
    shutdown: CancellationToken,
) -> StreamableHttpService<Tools, NeverSessionManager> {
    // rmcp's Host check (loopback names only, against DNS rebinding) is off: every call
    // needs a bearer token, which a rebound page does not have (tokens are not ambient
    // like cookies), and the controller serves whatever names its certificate carries.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .disable_allowed_hosts()
        .with_cancellation_token(shutdown);
    StreamableHttpService::new(
        move || Ok(Tools::new(rest.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

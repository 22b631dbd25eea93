//! The controller of iohr reliability.
//!
//! A run is created by the API ([`api::runs`]), stored ([`store`]), queued and placed by
//! the [`queue`] (scheduler + dispatcher), offered to an agent over the agent [`link`],
//! and its frames come back through the link into the store and out to viewers through
//! the [`hub`]; product events leave through the [`outbox`]. [`server`] wires them together; [`http`] is the API's listener (TLS,
//! connection bound, timeouts); [`mcp`] serves the MCP tools on it.

pub mod account_shares;
pub mod api;
pub mod auth;
pub mod compare_pool;
pub mod console;
pub mod error;
pub mod forge;
pub mod http;
pub mod hub;
pub mod in_flight;
pub mod limits;
pub mod link;
pub mod mcp;
pub mod metrics;
pub mod otlp;
pub mod outbox;
pub mod query;
pub mod queue;
pub mod replicas;
pub mod resources;
pub mod retention;
pub mod runs;
pub mod schedule;
pub mod server;
pub mod store;
pub mod timing;
pub mod trigger;
pub mod viewers;

use tokio_util::sync::CancellationToken;

/// What every part of a running controller shares.
#[derive(Clone)]
pub struct Shared {
    pub store: store::Store,
    pub hub: hub::FrameHub,
    pub compares: compare_pool::ComparePool,
    pub dispatcher: queue::DispatcherHandle,
    pub timing: timing::Timing,
    pub shutdown: CancellationToken,
    /// The bound and poll of the product-event feeds (`GET /v1/reliability/events`).
    pub feed: outbox::FeedLimits,
    /// Where webhooks may be sent (the deny-list and `--allow-webhook-target`).
    pub egress: std::sync::Arc<outbox::egress::EgressPolicy>,
    /// API requests in flight and each account's share of them (`api/in_flight.rs`).
    pub requests: account_shares::SharedBound,
}

impl Shared {
    /// The egress policy of one account: the process-wide one widened by the exceptions
    /// the operator opened for that account (`account allow-target`).
    pub async fn account_egress(
        &self,
        account_id: &str,
    ) -> store::Result<outbox::egress::EgressPolicy> {
        let entries = self.store.egress_allow(account_id).await?;
        Ok(self.egress.with_account(&entries))
    }
}

//! The outbox's consumers: product events (written by the store in the transaction that
//! finishes a run, `store/events.rs`) leave the controller from here.
//!
//! - [`deliveries`]: webhook subscriptions, one background task per controller that fans
//!   new events out into delivery rows and sends the due ones, signed as Standard Webhooks
//!   says ([`signing`]), retried on a bounded schedule.
//! - [`egress`] and [`connector`]: where deliveries may go (a deny-list of the
//!   controller's own network, the operator's exceptions), checked at creation and on the
//!   resolved address at connection.
//! - [`mqtt`]: with `serve --mqtt-url`, a publisher with its own cursor per account in the
//!   store, QoS 1, topic `iohr/ACCOUNT/EVENT_TYPE`.
//! - the forge reporter (`crate::forge::reporter`): pull request comments and commit
//!   statuses for runs a forge's trigger started, with its own cursor per account.
//! - [`feed`]: "the account's events after N, then live", served as SSE by
//!   `GET /v1/reliability/events` and reusable by any other stream.
//!
//! Every consumer is at-least-once: a crash between sending and recording repeats a
//! send, and the event id (`webhook-id`, the SSE id, the payload's `id`) is what a
//! receiver deduplicates on.

pub mod config;
pub mod connector;
pub mod deliveries;
pub mod egress;
pub mod feed;
pub mod mqtt;
pub mod signing;

pub use config::{EventsConfig, RetrySchedule};
pub use feed::{FeedFull, FeedLimits, FeedPlace, account_events};

use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// Starts the outbox's background tasks; they end when `shutdown` is cancelled.
pub fn start(
    shared: &crate::Shared,
    config: &EventsConfig,
    policy: std::sync::Arc<egress::EgressPolicy>,
    shutdown: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let store: Store = shared.store.clone();
    let mut tasks = vec![tokio::spawn(deliveries::run(
        store.clone(),
        config.deliveries(),
        policy.clone(),
        shutdown.clone(),
    ))];
    tasks.push(tokio::spawn(crate::forge::reporter::run(
        shared.clone(),
        config.reporter(),
        policy,
        shutdown.clone(),
    )));
    if let Some(url) = &config.mqtt_url {
        tasks.push(tokio::spawn(mqtt::run(
            store,
            url.clone(),
            config.poll(),
            shutdown,
        )));
    }
    tasks
}

//! The end-to-end test harness: real `iohr-controller`, `iohr-agent` and
//! `iohr-sample-target` processes on loopback, each test with its own data dir, its own
//! PKI and its own store (a SQLite file, or a fresh database on the PostgreSQL server of
//! this machine), plus a small HTTP client, an SSE reader and a TCP proxy that can cut
//! every connection through it.
//!
//! Every wait is a bounded poll on an observable condition; nothing sleeps to synchronise.

// A test harness: a helper that cannot do its part fails the test that called it, with
// what went wrong, which is what unwrap, expect and panic are for here. The binaries
// beside it (the sample target) are held to the workspace's rule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod api;
pub mod checker;
pub mod fake_forge;
pub mod forge;
pub mod history;
pub mod metrics;
pub mod partition;
pub mod pg_cluster;
pub mod process;
pub mod proxy;
pub mod python;
pub mod raw_agent;
pub mod recorder;
pub mod records;
pub mod relay;
pub mod setup;
pub mod tls;
pub mod victim;

pub use api::{Api, Sse};
pub use process::{Agent, Controller, Target};
pub use proxy::CutProxy;
pub use setup::{Backend, Installation};

use std::time::Duration;

/// Polls `check` every 20 ms until it gives `Some`, for at most `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Declares one `#[tokio::test]` per store for an `async fn(Backend)`.
#[macro_export]
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Postgres).await
                }
            )*
        }
    };
}

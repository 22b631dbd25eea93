//! The bounds `serve` puts on what callers can make the controller hold, with their
//! flags. What each bound answers when reached is in docs/api.md ("Limits").

use std::time::Duration;

use crate::hub::ViewerLimits;

#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Limits {
    /// Live viewers (SSE `events` and gRPC `WatchRun`) of one run; one more is answered
    /// 429 `too_many_viewers` (gRPC RESOURCE_EXHAUSTED).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_viewers_per_run: u32,
    /// Live viewers of all runs together (a WebSocket stream connection counts as one,
    /// and each of its subscriptions as one more).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_viewers: u32,
    /// Live viewers (streams and WebSocket connections, counted as in --max-viewers) one
    /// account may hold, its share of --max-viewers; one more is answered 429
    /// `too_many_account_viewers`.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_viewers_per_account: u32,
    /// Comparisons computed at once, each on a blocking thread (default: the CPUs the
    /// controller may use).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_compares: Option<u32>,
    /// Comparisons that may wait for one of those; one more is answered 429
    /// `too_many_compares`.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=4096))]
    pub compare_queue: u32,
    /// Comparisons one account may have computing or waiting at once, its share of
    /// --max-compares plus --compare-queue; one more is answered 429
    /// `too_many_account_compares`.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub compares_per_account: u32,
    /// Live product-event feeds (`GET /v1/reliability/events`) at once; one more is
    /// answered 429 `too_many_feeds`.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_event_feeds: u32,
    /// Live product-event feeds one account may hold, its share of --max-event-feeds;
    /// one more is answered 429 `too_many_account_feeds`.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_event_feeds_per_account: u32,
    /// API requests (REST, gRPC, the tools' calls through MCP) answered at once, counted
    /// once the caller's token is checked and until the answer's head is written; one more
    /// is answered 429 `too_many_requests` (gRPC RESOURCE_EXHAUSTED).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub api_max_requests: u32,
    /// API requests one account may have in flight, its share of --api-max-requests; one
    /// more is answered 429 `too_many_account_requests` (gRPC RESOURCE_EXHAUSTED).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub api_requests_per_account: u32,
    /// Connections the agent-link port holds at once (agents' links, enrollments and
    /// handshakes in progress); more wait in the listen backlog until one closes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_agent_connections: u32,
    /// Time a connection to the agent-link port has for its TLS handshake (1ms to 10m).
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = iohr_domain::duration::between(Duration::from_millis(1), Duration::from_secs(600)))]
    pub agent_handshake_timeout: Duration,
    /// The older form of --agent-handshake-timeout, in milliseconds.
    #[arg(long, hide = true, conflicts_with = "agent_handshake_timeout",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub agent_handshake_timeout_ms: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_viewers_per_run: 256,
            max_viewers: 4096,
            max_viewers_per_account: 256,
            max_compares: None,
            compare_queue: 16,
            compares_per_account: 4,
            max_event_feeds: 256,
            max_event_feeds_per_account: 32,
            api_max_requests: 1024,
            api_requests_per_account: 128,
            max_agent_connections: 4096,
            agent_handshake_timeout: Duration::from_secs(10),
            agent_handshake_timeout_ms: None,
        }
    }
}

impl Limits {
    /// The agent link's TLS handshake time (the older flag, when given, in its own unit).
    pub fn handshake_timeout(&self) -> Duration {
        self.agent_handshake_timeout_ms
            .map_or(self.agent_handshake_timeout, Duration::from_millis)
    }

    pub fn viewers(&self) -> ViewerLimits {
        ViewerLimits {
            per_run: self.max_viewers_per_run as usize,
            total: self.max_viewers as usize,
            per_account: self.max_viewers_per_account as usize,
        }
    }

    /// The bound on API requests in flight and each account's share of it.
    pub fn requests(&self) -> crate::account_shares::SharedBound {
        crate::account_shares::SharedBound::new(
            self.api_max_requests as usize,
            self.api_requests_per_account as usize,
        )
    }

    pub fn compares(&self) -> usize {
        match self.max_compares {
            Some(n) => n as usize,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

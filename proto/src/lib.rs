//! The wire protocols, generated from `proto/*.proto`.
//!
//! - [`link`]: the agent link, one bidirectional mTLS stream per agent.
//! - [`runs`]: the live stream of a run for API clients over gRPC.

pub mod link {
    tonic::include_proto!("iohr.link.v1");
}

pub mod runs {
    tonic::include_proto!("iohr.runs.v1");
}

/// The largest message either end of the agent link takes (tonic's default is 4 MiB): a
/// lease offer carries a replay's whole log and a completion a scenario's request log,
/// each bounded by its kind's limits (100,000 requests, about 13 MiB of JSON).
pub const MAX_LINK_MESSAGE: usize = 32 * 1024 * 1024;

/// The `StepAsk` step a share of a split run asks before it starts: answered once every
/// share holds its lease (a sweep's own steps count from 1).
pub const START_STEP: u32 = 0;

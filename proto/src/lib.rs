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

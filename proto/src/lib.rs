//! The wire protocols, generated from `proto/*.proto`.
//!
//! - [`link`]: the agent link, one bidirectional mTLS stream per agent.
//! - [`runs`]: the live stream of a run for API clients over gRPC.

pub mod link {
    // The offer is the largest controller message (312 bytes with `allow_targets`); the
    // others are rarer and smaller, so a box per offer buys nothing worth the churn.
    #![allow(clippy::large_enum_variant)]
    tonic::include_proto!("iohr.link.v1");

    /// Everything but the secrets' values, which are never printed.
    impl std::fmt::Debug for LeaseOffer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("LeaseOffer")
                .field("lease_id", &self.lease_id)
                .field("epoch", &self.epoch)
                .field("run_id", &self.run_id)
                .field("kind", &self.kind)
                .field("spec_json", &self.spec_json)
                .field("target", &self.target)
                .field("environment", &self.environment)
                .field("accept_within_ms", &self.accept_within_ms)
                .field("scenario_id", &self.scenario_id)
                .field("scenario_version", &self.scenario_version)
                .field("confirmed_by", &self.confirmed_by)
                .field("share_index", &self.share_index)
                .field("share_count", &self.share_count)
                .field("start_after_ms", &self.start_after_ms)
                .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
                .field("allow_targets", &self.allow_targets)
                .finish()
        }
    }
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

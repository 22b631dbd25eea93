//! The agent of iohr reliability.
//!
//! It holds one mTLS stream to the controller ([`link`]), takes leased runs into its
//! [`leases`] table, executes them ([`execute`], one module per kind in [`kinds`], listed
//! once in [`kinds::registry`]) and streams their numbered frames back until the
//! controller has acknowledged every one. The load engine ([`load`]) stands on the leaves
//! [`frames`], [`run_context`] and [`metrics`] (its counters) only.

pub mod backoff;
pub mod cpu_quota;
pub mod dry_run;
pub mod egress;
pub mod enroll;
pub mod execute;
pub mod faults;
pub mod frames;
pub mod http_client;
pub mod kinds;
pub mod leases;
pub mod link;
pub mod load;
pub mod metrics;
pub mod renew;
pub mod request;
pub mod run_context;
pub mod secrets;
pub mod state_dir;
pub mod stress;
pub mod telemetry;
pub mod verdicts;

//! The agent of iohr reliability.
//!
//! It holds one mTLS stream to the controller ([`link`]), takes leased runs into its
//! [`leases`] table, executes them ([`execute`], one module per kind in [`kinds`]) and
//! streams their numbered frames back until the controller has acknowledged every one.

pub mod backoff;
pub mod cpu_quota;
pub mod dry_run;
pub mod execute;
pub mod faults;
pub mod http_client;
pub mod kinds;
pub mod leases;
pub mod link;
pub mod load;

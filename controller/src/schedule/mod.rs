//! Schedules: runs started by a cron expression evaluated in UTC (see docs/operations.md).
//!
//! - The expressions (crontab's five fields, or six with seconds) and how often a schedule
//!   of each kind may fire are the resource layer's
//!   ([`crate::resources::schedules::cron`], [`crate::resources::schedules::floors`]):
//!   it checks a schedule when it is made, the ticker fires it.
//! - [`clock`]: the scheduler's time, which tests advance by hand.
//! - [`Scheduler`]: the task that fires what falls due, through the same path as a POST
//!   (`api::run_start`), each fire once (its row's key is the schedule id and due time).

pub mod clock;
#[cfg(test)]
mod scheduler_tests;
mod ticker;

pub use clock::{Clock, SharedClock, SystemClock, TestClock};
pub use ticker::{Scheduler, TickReport};

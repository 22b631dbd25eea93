//! Schedules: runs started by a cron expression evaluated in UTC (see docs/operations.md).
//!
//! - [`cron`]: the expressions (crontab's five fields, or six with seconds) and next fires.
//! - [`floors`]: how often a schedule of each kind may fire under its account's plan.
//! - [`clock`]: the scheduler's time, which tests advance by hand.
//! - [`Scheduler`]: the task that fires what falls due, through the same path as a POST
//!   (`api::run_start`), each fire once (its row's key is the schedule id and due time).

pub mod clock;
pub mod cron;
pub mod floors;
#[cfg(test)]
mod scheduler_tests;
#[cfg(test)]
mod tests;
mod ticker;

pub use clock::{Clock, SharedClock, SystemClock, TestClock};
pub use ticker::{Scheduler, TickReport};

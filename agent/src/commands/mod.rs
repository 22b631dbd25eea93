//! The commands of `iohr-agent`, one module each (the flags are in [`crate::cli`]).

pub mod enroll;
pub mod exec;
pub mod faults;
pub mod output;
pub mod run;

/// Exit statuses of `iohr-agent` (k6's habit: a broken spec is not a failed run): 0 passed,
/// 1 failed (thresholds, a deviated steady state), 2 a usage or spec error (nothing ran),
/// 3 error, cancelled or refused (or `exec --output` could not be written at the end).
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_ERROR: i32 = 3;

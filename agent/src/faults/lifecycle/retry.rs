//! How a failed undo is retried: the number of tries, the waits between them and the
//! bound on each.

use std::time::Duration;

use super::Clock;

/// How a failed undo is retried: `attempts` in all, waits doubling from `first_wait` up
/// to `max_wait` (each a uniform draw from its upper half), each try bounded by `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first_wait: Duration,
    pub max_wait: Duration,
    pub timeout: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 5,
            first_wait: Duration::from_millis(100),
            max_wait: Duration::from_secs(2),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The waits between the tries of one undo: [`crate::backoff`]'s, drawn with a seed from
/// the injected clock so that tests on a paused clock repeat.
pub(super) fn retry_waits<E: Clock>(
    retry: Retry,
    clock: &E,
) -> impl Iterator<Item = Duration> + Send {
    crate::backoff::waits(
        retry.first_wait,
        retry.max_wait,
        Some(crate::backoff::seed(clock.random())),
    )
}

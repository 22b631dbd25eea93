//! The agent's one backoff, for the link's reconnects and the faults lifecycle's undo
//! retries: backon's exponential delays, the windows doubling from `min` up to `max`, each
//! wait a uniform draw from the upper half of its window, so that agents cut off together
//! do not come back together, nor too soon.
//!
//! backon draws its jitter from its own generator; the lifecycle's must come from its
//! injected `Clock` (tests on a paused clock are repeatable), so [`waits`] takes a seed.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Windows past this many doublings stay put (as `max` would have them long before).
const MAX_DOUBLINGS: u32 = 20;

/// The waits after each failure, in order and without end: the n-th a uniform draw from
/// the upper half of `min(max, min * 2^n)`. A `seed` makes the draws repeatable.
pub fn waits(
    min: Duration,
    max: Duration,
    seed: Option<u64>,
) -> impl Iterator<Item = Duration> + Send {
    let jittered = halves(min, max).with_jitter();
    match seed {
        Some(seed) => jittered.with_jitter_seed(seed),
        None => jittered,
    }
    .build()
}

/// A seed for [`waits`] from a uniform draw in `[0, 1)` (what a `Clock` gives).
pub fn seed(random: f64) -> u64 {
    // A saturating cast: the product is within `u64`'s range, NaN becomes 0.
    (random.clamp(0.0, 1.0) * u64::MAX as f64) as u64
}

/// backon adds up to the delay again as its jitter: on halved windows that is a draw from
/// the upper half of the whole window.
fn halves(min: Duration, max: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(min / 2)
        .with_max_delay(max.max(min) / 2)
        .without_max_times()
}

/// The link's reconnect backoff: [`waits`], with the controller's cap and a reset.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
        }
    }

    /// The window the next wait is drawn from.
    pub fn window(&self) -> Duration {
        halves(self.min, self.max)
            .build()
            .nth(self.index())
            .map_or(self.max, |half| half.saturating_mul(2))
    }

    /// The next wait; the window doubles after each.
    pub fn next_wait(&mut self) -> Duration {
        let wait = waits(self.min, self.max, None)
            .nth(self.index())
            .unwrap_or(self.max);
        self.attempt = self.attempt.saturating_add(1);
        wait
    }

    /// Lowers the largest window (never below the smallest).
    pub fn cap(&mut self, max: Duration) {
        self.max = self.max.min(max).max(self.min);
    }

    /// After a session that worked, start again from the smallest window.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    fn index(&self) -> usize {
        self.attempt.min(MAX_DOUBLINGS) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_double_up_to_the_cap_and_waits_stay_inside() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut windows = Vec::new();
        for _ in 0..7 {
            let window = b.window();
            let wait = b.next_wait();
            assert!(wait <= window, "{wait:?} within {window:?}");
            windows.push(window.as_millis());
        }
        assert_eq!(windows, [100, 200, 400, 800, 1600, 2000, 2000]);
        b.reset();
        assert_eq!(b.window(), Duration::from_millis(100));
        b.cap(Duration::from_millis(300));
        for _ in 0..5 {
            b.next_wait();
        }
        assert_eq!(
            b.window(),
            Duration::from_millis(300),
            "capped by the controller"
        );
    }

    #[test]
    fn waits_are_drawn_from_the_upper_half_and_a_seed_repeats_them() {
        let min = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        let drawn: Vec<Duration> = waits(min, max, Some(seed(0.25))).take(8).collect();
        for (n, wait) in drawn.iter().enumerate() {
            let window = min.saturating_mul(1 << n).min(max);
            // In whole milliseconds: backon doubles in `f32`, a few nanoseconds off.
            let (wait, window) = (wait.as_millis(), window.as_millis());
            assert!(
                wait >= window / 2 && wait <= window,
                "{n}: {wait} ms in {window} ms"
            );
        }
        let again: Vec<Duration> = waits(min, max, Some(seed(0.25))).take(8).collect();
        assert_eq!(drawn, again);
    }
}

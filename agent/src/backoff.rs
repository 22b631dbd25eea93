//! Jittered exponential backoff for reconnects: the n-th wait is uniform in
//! `[0, min(max, min * 2^n)]`, so agents cut off together do not come back together.

use std::time::Duration;

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
        let factor = 2u32.saturating_pow(self.attempt.min(20));
        self.min.saturating_mul(factor).min(self.max)
    }

    /// The next wait; the window doubles after each.
    pub fn next_wait(&mut self) -> Duration {
        let window = self.window();
        self.attempt = self.attempt.saturating_add(1);
        let ms = window.as_millis() as u64;
        Duration::from_millis(if ms == 0 {
            0
        } else {
            rand::random_range(0..=ms)
        })
    }

    /// Lowers the largest window (never below the smallest).
    pub fn cap(&mut self, max: Duration) {
        self.max = self.max.min(max).max(self.min);
    }

    /// After a session that worked, start again from the smallest window.
    pub fn reset(&mut self) {
        self.attempt = 0;
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
}

//! When a fault must be gone, held on a clock nobody steps.
//!
//! The rule: a fault's deadline is *stored* as wall-clock time (Unix milliseconds, in the
//! ledger: it must mean something to an operator and across an agent's restart), and a
//! process that *waits* for it converts it once, when it starts waiting, into the time left
//! on `CLOCK_BOOTTIME`, then reads only that clock. A wall clock stepped afterwards (an NTP
//! step, an operator's `date -s`) moves no deadline; stepped back by N minutes it would
//! otherwise hold a host fault N minutes past its deadline.
//!
//! `CLOCK_BOOTTIME` rather than `CLOCK_MONOTONIC` (`std::time::Instant`): it is monotonic
//! too, and it also counts the time a host spends suspended, so a fault whose deadline
//! passes while the host sleeps is undone when it wakes, not the length of the sleep later.
//! The waits that use it (the warden's, a hog's) re-read it at least once a second, since a
//! sleeping thread's own timeout does not count a suspend.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::time::{ClockId, clock_gettime};

/// A point on `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due(Duration);

impl Due {
    /// The wall-clock deadline `unix_ms`, converted now: as far from now as it is on the
    /// wall clock at this moment (a deadline already past is due now).
    pub fn at_unix_ms(unix_ms: u64) -> Due {
        Due::after(until_unix_ms(unix_ms))
    }

    /// `left` from now.
    pub fn after(left: Duration) -> Due {
        Due(boot_now().saturating_add(left))
    }

    /// This point plus `more`.
    pub fn plus(self, more: Duration) -> Due {
        Due(self.0.saturating_add(more))
    }

    /// The time left until it; zero once it has come.
    pub fn left(self) -> Duration {
        self.0.saturating_sub(boot_now())
    }

    pub fn has_come(self) -> bool {
        self.left().is_zero()
    }
}

/// How far the wall-clock time `unix_ms` is from now on the wall clock; zero if past.
pub fn until_unix_ms(unix_ms: u64) -> Duration {
    (UNIX_EPOCH + Duration::from_millis(unix_ms))
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO)
}

/// Time since boot, suspends included. `CLOCK_BOOTTIME` exists since Linux 2.6.39; were it
/// ever refused, `Duration::MAX` makes every deadline due at once: a fault undone early is
/// the safe side.
fn boot_now() -> Duration {
    clock_gettime(ClockId::CLOCK_BOOTTIME).map_or(Duration::MAX, Duration::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_point_counts_down_on_the_boot_clock() {
        let due = Due::after(Duration::from_millis(200));
        assert!(!due.has_come());
        assert!(due.left() <= Duration::from_millis(200));
        assert!(due.plus(Duration::from_secs(1)) > due);
        std::thread::sleep(Duration::from_millis(250));
        assert!(due.has_come());
        assert_eq!(due.left(), Duration::ZERO);
    }

    #[test]
    fn a_past_wall_clock_deadline_is_due_now() {
        assert!(Due::at_unix_ms(0).has_come());
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let left = Due::at_unix_ms(now_ms + 60_000).left();
        assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
    }
}

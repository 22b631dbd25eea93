//! Open-model arrival schedules. The i-th request (from 0) is due at the instant where
//! the integral of the rate reaches i, so a constant 200/s sends at 0, 5, 10, ... ms and a
//! ramp places arrivals exactly on its curve. Latency is measured from these intended
//! times, so a stalled target shows in the tail instead of slowing the schedule down.

use std::time::Duration;

pub mod timeline;

/// One stage: the rate moves linearly to `target_rate` (requests per second) over
/// `duration`, from where the previous stage ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stage {
    pub duration: Duration,
    pub target_rate: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArrivalSchedule {
    start_rate: f64,
    stages: Vec<Stage>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schedule: {0}")]
pub struct ScheduleError(String);

impl ArrivalSchedule {
    /// `rate` requests per second for `duration`.
    pub fn constant(rate: f64, duration: Duration) -> Result<ArrivalSchedule, ScheduleError> {
        ArrivalSchedule::ramping(
            rate,
            vec![Stage {
                duration,
                target_rate: rate,
            }],
        )
    }

    /// From `start_rate`, through each stage in turn.
    pub fn ramping(start_rate: f64, stages: Vec<Stage>) -> Result<ArrivalSchedule, ScheduleError> {
        let finite = |r: f64| r.is_finite() && r >= 0.0;
        if !finite(start_rate) || stages.iter().any(|s| !finite(s.target_rate)) {
            return Err(ScheduleError(
                "rates must be finite and not negative".into(),
            ));
        }
        if stages.is_empty() || stages.iter().any(|s| s.duration.is_zero()) {
            return Err(ScheduleError(
                "at least one stage, each with a duration".into(),
            ));
        }
        Ok(ArrivalSchedule { start_rate, stages })
    }

    pub fn duration(&self) -> Duration {
        self.stages.iter().map(|s| s.duration).sum()
    }

    /// How many requests the schedule sends in all.
    pub fn total(&self) -> u64 {
        // A hair below the integral, so rounding never adds a request past the end.
        (self.arrivals_by(self.duration().as_secs_f64()) - 1e-9)
            .ceil()
            .max(0.0) as u64
    }

    /// The integral of the rate from 0 to `t` seconds.
    fn arrivals_by(&self, t: f64) -> f64 {
        let (mut from, mut elapsed, mut count) = (self.start_rate, 0.0, 0.0);
        for stage in &self.stages {
            let length = stage.duration.as_secs_f64();
            let span = (t - elapsed).clamp(0.0, length);
            let slope = (stage.target_rate - from) / length;
            count += from * span + slope * span * span / 2.0;
            if t <= elapsed + length {
                break;
            }
            elapsed += length;
            from = stage.target_rate;
        }
        count
    }

    /// When the i-th request (from 0) is due, from the start of the schedule; `None`
    /// past its end.
    pub fn offset_of(&self, i: u64) -> Option<Duration> {
        let wanted = i as f64;
        let (mut from, mut elapsed, mut before) = (self.start_rate, 0.0, 0.0);
        for stage in &self.stages {
            let length = stage.duration.as_secs_f64();
            let slope = (stage.target_rate - from) / length;
            let during = from * length + slope * length * length / 2.0;
            if wanted < before + during {
                // Solve before + from·τ + slope·τ²/2 = wanted for τ in [0, length].
                let need = wanted - before;
                let tau = if slope.abs() < 1e-12 {
                    need / from
                } else {
                    let disc = (from * from + 2.0 * slope * need).max(0.0);
                    (disc.sqrt() - from) / slope
                };
                // Plans keep schedules within a day; a time no `Duration` holds is past
                // the end rather than a panic.
                return Duration::try_from_secs_f64(elapsed + tau.clamp(0.0, length)).ok();
            }
            before += during;
            elapsed += length;
            from = stage.target_rate;
        }
        None
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1000.0
    }

    #[test]
    fn a_constant_rate_is_evenly_spaced() {
        let s = ArrivalSchedule::constant(200.0, Duration::from_secs(10)).expect("schedule");
        assert_eq!(s.total(), 2000);
        for i in [0, 1, 2, 999, 1999] {
            let at = ms(s.offset_of(i).expect("due"));
            assert!((at - i as f64 * 5.0).abs() < 1e-6, "request {i} at {at} ms");
        }
        assert_eq!(s.offset_of(2000), None, "nothing past the end");
    }

    #[test]
    fn a_ramp_places_arrivals_on_its_curve() {
        // 0 -> 100/s over 10 s: 500 requests; N(t) = 5 t², so request i is due at sqrt(i/5).
        let s = ArrivalSchedule::ramping(
            0.0,
            vec![Stage {
                duration: Duration::from_secs(10),
                target_rate: 100.0,
            }],
        )
        .expect("schedule");
        assert_eq!(s.total(), 500);
        for i in [1u64, 20, 125, 499] {
            let at = s.offset_of(i).expect("due").as_secs_f64();
            assert!(
                (at - (i as f64 / 5.0).sqrt()).abs() < 1e-9,
                "request {i} at {at} s"
            );
        }
    }

    #[test]
    fn stages_chain_and_times_only_grow() {
        let s = ArrivalSchedule::ramping(
            10.0,
            vec![
                Stage {
                    duration: Duration::from_secs(2),
                    target_rate: 50.0,
                },
                Stage {
                    duration: Duration::from_secs(3),
                    target_rate: 50.0,
                },
                Stage {
                    duration: Duration::from_secs(1),
                    target_rate: 0.0,
                },
            ],
        )
        .expect("schedule");
        // 2 s from 10 to 50 (60), 3 s at 50 (150), 1 s from 50 to 0 (25).
        assert_eq!(s.total(), 235);
        let mut last = Duration::ZERO;
        for i in 0..s.total() {
            let at = s.offset_of(i).expect("due");
            assert!(at >= last, "request {i} before request {}", i - 1);
            last = at;
        }
        let first_steady = s.offset_of(60).expect("due").as_secs_f64();
        assert!((first_steady - 2.0).abs() < 1e-9, "{first_steady}");
        assert!(last <= Duration::from_secs(6));
    }

    #[test]
    fn bad_schedules_are_refused() {
        assert!(ArrivalSchedule::constant(-1.0, Duration::from_secs(1)).is_err());
        assert!(ArrivalSchedule::constant(f64::NAN, Duration::from_secs(1)).is_err());
        assert!(ArrivalSchedule::constant(10.0, Duration::ZERO).is_err());
        assert!(ArrivalSchedule::ramping(1.0, vec![]).is_err());
    }
}

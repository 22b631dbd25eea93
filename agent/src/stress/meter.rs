//! What a run's seconds showed, judged as they come: the sampler's ([`Meter::judge`]) and,
//! for a run with a measure, the load engine's ([`Meter::measure_started`],
//! [`Meter::sends`], [`Meter::measure_ended`]). Before the engine starts its measure the
//! seconds are the run's; from then on the measure's, as its `load` frames number them,
//! and the warm-up's are forgotten.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use iohr_domain::stress::{Basis, GeneratorSaturated, Saturation, StressSecond};
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Meter(Arc<Mutex<State>>);

#[derive(Debug)]
struct State {
    saturation: Saturation,
    measure: Option<(Instant, Option<Instant>)>,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter::new()
    }
}

impl Meter {
    pub fn new() -> Meter {
        Meter(Arc::new(Mutex::new(State {
            saturation: Saturation::new(Basis::Run),
            measure: None,
        })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // Nothing here panics while holding the lock; were it poisoned, the figures are
        // still whole.
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut state)
    }

    /// The engine's measure started at `at` (its first measured second ends a second
    /// later). Only the first call counts: a run has one measure.
    pub fn measure_started(&self, at: Instant) {
        self.with(|s| {
            if s.measure.is_none() {
                s.measure = Some((at, None));
                s.saturation = Saturation::new(Basis::Measure);
            }
        });
    }

    pub fn measure_ended(&self, at: Instant) {
        self.with(|s| {
            if let Some((_, end @ None)) = &mut s.measure {
                *end = Some(at);
            }
        });
    }

    /// A measured second's sends (open model).
    pub fn sends(&self, second: u64, sent: u64, late: u64) {
        self.with(|s| s.saturation.sends(second, sent, late));
    }

    /// A sample read at `at`: marks its measured second and judges it.
    pub fn judge(&self, at: Instant, sample: &mut StressSecond) {
        self.with(|s| match s.measure {
            None => s.saturation.stress(sample.second, sample),
            Some((start, end)) => {
                sample.measure_second = measure_second(start, end, at);
                if let Some(second) = sample.measure_second {
                    s.saturation.stress(second, sample);
                }
            }
        });
    }

    pub fn verdict(&self) -> Option<GeneratorSaturated> {
        self.with(|s| s.saturation.verdict())
    }
}

/// The measured second a sample read at `at` mostly covers (it covers the second before
/// `at`): `None` before the measure's first half second and after its end.
fn measure_second(start: Instant, end: Option<Instant>, at: Instant) -> Option<u64> {
    if end.is_some_and(|end| at > end + Duration::from_millis(500)) {
        return None;
    }
    let elapsed = at.checked_duration_since(start)?;
    let second = elapsed.as_secs_f64().round() as u64;
    (second > 0).then_some(second)
}

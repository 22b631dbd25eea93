//! The open model's requests in order, as the engine's workers take them: the warm-up's,
//! then the measure's, each with its intended offset, operation and phase. It is where a
//! share of a run split over agents is applied ([`Share`]): the whole run's timeline is
//! numbered and this agent's i-th request is the whole's [`Share::nth`], so the shares
//! interleave and together are exactly the whole, warm-up included, each operation
//! where the whole would send it.

use std::time::Duration;

use iohr_domain::load::Share;

use super::ArrivalSchedule;
use crate::load::recorder::Phase;

/// Where the open model's measured requests come from.
pub enum Arrivals {
    /// A schedule; operations are picked by weight in a fixed interleaving.
    Schedule(ArrivalSchedule),
    /// Recorded requests (replay): offset from the start and operation index, in order.
    Recorded(Vec<(Duration, usize)>),
}

/// Fixed interleaving of operations by weight (smooth weighted round robin), so a run's
/// mix is the same every time.
pub struct Picker {
    table: Vec<usize>,
}

impl Picker {
    pub fn new(weights: &[u32]) -> Picker {
        let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
        let mut current = vec![0i64; weights.len()];
        let mut table = Vec::with_capacity(total.max(1) as usize);
        for _ in 0..total {
            for (c, w) in current.iter_mut().zip(weights) {
                *c += i64::from(*w);
            }
            let (best, _) = current
                .iter()
                .enumerate()
                .max_by_key(|(i, c)| (**c, -(*i as i64)))
                .unwrap_or((0, &0));
            current[best] -= total;
            table.push(best);
        }
        if table.is_empty() {
            table.push(0);
        }
        Picker { table }
    }

    pub fn pick(&self, seq: u64) -> usize {
        self.table[(seq % self.table.len() as u64) as usize]
    }
}

/// The open model's requests in order: the warm-up's, then the measure's (this share's).
pub struct Timeline {
    warmup: Option<ArrivalSchedule>,
    /// The whole run's warm-up requests, and this share's of them.
    warmup_total: u64,
    warmup_here: u64,
    measure_start: Duration,
    arrivals: Arrivals,
    picker: Picker,
    share: Share,
}

impl Timeline {
    pub fn new(
        warmup: Option<ArrivalSchedule>,
        measure_start: Duration,
        arrivals: Arrivals,
        weights: &[u32],
        share: Share,
    ) -> Timeline {
        let warmup_total = warmup.as_ref().map_or(0, ArrivalSchedule::total);
        Timeline {
            warmup,
            warmup_total,
            warmup_here: share.part(warmup_total),
            measure_start,
            arrivals,
            picker: Picker::new(weights),
            share,
        }
    }

    /// This share's i-th request: its offset from the start, its operation and phase;
    /// `None` past the end.
    pub fn at(&self, i: u64) -> Option<(Duration, usize, Phase)> {
        if i < self.warmup_here {
            let k = self.share.nth(i)?;
            let offset = self.warmup.as_ref()?.offset_of(k)?;
            return Some((offset, self.picker.pick(k), Phase::Warmup));
        }
        let k = self.share.nth(i - self.warmup_here)?;
        let (offset, operation) = match &self.arrivals {
            Arrivals::Schedule(schedule) => (
                schedule.offset_of(k)?,
                self.picker.pick(self.warmup_total.checked_add(k)?),
            ),
            Arrivals::Recorded(list) => *list.get(usize::try_from(k).ok()?)?,
        };
        Some((self.measure_start + offset, operation, Phase::Measure))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::schedule::Stage;

    type Request = (Duration, usize, bool);

    fn requests(timeline: &Timeline) -> Vec<Request> {
        (0..)
            .map_while(|i| timeline.at(i))
            .map(|(at, op, phase)| (at, op, phase == Phase::Warmup))
            .collect()
    }

    fn timeline(share: Share, recorded: bool) -> Timeline {
        let warmup = ArrivalSchedule::constant(90.0, Duration::from_millis(500)).ok();
        let arrivals = if recorded {
            Arrivals::Recorded(
                (0..100)
                    .map(|i| (Duration::from_millis(i * 7), (i % 3) as usize))
                    .collect(),
            )
        } else {
            let ramp = vec![Stage {
                duration: Duration::from_secs(2),
                target_rate: 300.0,
            }];
            Arrivals::Schedule(ArrivalSchedule::ramping(30.0, ramp).expect("schedule"))
        };
        Timeline::new(
            warmup,
            Duration::from_millis(500),
            arrivals,
            &[1, 2, 3],
            share,
        )
    }

    /// Three shares' requests (times, operations, phases), merged in time order, are the
    /// whole timeline's, each share the whole's every third from its index.
    #[test]
    fn three_shares_merged_are_the_whole_schedule() {
        for recorded in [false, true] {
            let whole = requests(&timeline(Share::WHOLE, recorded));
            assert!(whole.len() > 140, "{}", whole.len());
            let mut merged = Vec::new();
            for share in Share::all(3).expect("shares") {
                let part = requests(&timeline(share, recorded));
                let expected: Vec<Request> = whole
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| share.keeps(*k as u64))
                    .map(|(_, r)| *r)
                    .collect();
                assert_eq!(part, expected, "share {share}");
                merged.extend(part);
            }
            merged.sort();
            let mut sorted_whole = whole.clone();
            sorted_whole.sort();
            assert_eq!(merged, sorted_whole, "recorded: {recorded}");
        }
    }

    #[test]
    fn the_picker_interleaves_by_weight() {
        let picker = Picker::new(&[1, 3]);
        let picks: Vec<usize> = (0..8).map(|i| picker.pick(i)).collect();
        assert_eq!(picks.iter().filter(|p| **p == 1).count(), 6);
        assert_eq!(picks[..4].iter().filter(|p| **p == 0).count(), 1);
        let one = Picker::new(&[5]);
        assert!((0..10).all(|i| one.pick(i) == 0));
    }
}

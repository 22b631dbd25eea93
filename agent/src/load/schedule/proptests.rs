//! Property tests of the arrival schedule, over every plan the spec's caps allow (rates
//! up to 1,000,000/s, up to 100 stages, at most 24 h): every request of the total is due
//! inside the schedule, in order, and none past it.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use super::*;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x1012_0bad_5eed),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1_000_000.0),
        Just(1e-6),
        0.0..1_000_000.0f64
    ]
}

fn stages() -> impl Strategy<Value = Vec<Stage>> {
    prop::collection::vec((1u64..=86_400_000, rate()), 1..100).prop_map(|stages| {
        // Scaled so that the stages together last at most 24 h, as the spec's caps allow.
        let sum: u64 = stages.iter().map(|(ms, _)| ms).sum();
        let scale = (86_400_000.0 / sum as f64).min(1.0);
        stages
            .into_iter()
            .map(|(ms, target_rate)| Stage {
                duration: Duration::from_millis(((ms as f64 * scale) as u64).max(1)),
                target_rate,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn every_request_is_due_inside_the_schedule_in_order(
        start in rate(),
        stages in stages(),
        picks in prop::collection::vec(any::<u64>(), 1..16),
    ) {
        let schedule = ArrivalSchedule::ramping(start, stages).expect("a schedule within the caps");
        let total = schedule.total();
        let end = schedule.duration();
        prop_assert_eq!(schedule.offset_of(total.saturating_add(1)), None);
        if total == 0 {
            return Ok(());
        }
        let mut picks: Vec<u64> = picks.iter().map(|p| p % total).chain([0, total - 1]).collect();
        picks.sort_unstable();
        let mut last = Duration::ZERO;
        for i in picks {
            let due = schedule.offset_of(i);
            prop_assert!(due.is_some(), "request {i} of {total} has no time");
            let due = due.unwrap_or_default();
            prop_assert!(due <= end, "request {i} due at {due:?}, after the end {end:?}");
            prop_assert!(due >= last, "request {i} due before an earlier one");
            last = due;
        }
    }
}

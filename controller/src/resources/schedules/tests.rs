//! Next fires of a table of expressions (UTC), crontab's day-of-week numbering and its
//! day-of-month/day-of-week rule, floors, and a parser that never panics.

use proptest::prelude::*;

use super::cron::{Expression, format_utc};
use super::floors;
use iohr_domain::RunKind;

/// Saturday 2026-03-28 12:00:00 UTC; Europe's clocks go forward on Sunday at 01:00 UTC.
const SAT_NOON: i64 = 1_774_699_200_000;

fn next3(text: &str) -> Vec<String> {
    let expression = Expression::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    expression
        .next_n(SAT_NOON, 3)
        .into_iter()
        .map(format_utc)
        .collect()
}

#[test]
fn the_reference_time_is_saturday_noon() {
    assert_eq!(format_utc(SAT_NOON), "2026-03-28T12:00:00Z");
}

#[test]
fn next_fires_of_a_table_of_expressions() {
    let table: &[(&str, [&str; 3])] = &[
        // steps
        (
            "*/15 * * * *",
            [
                "2026-03-28T12:15:00Z",
                "2026-03-28T12:30:00Z",
                "2026-03-28T12:45:00Z",
            ],
        ),
        // a range with a step
        (
            "0 9-17/4 * * *",
            [
                "2026-03-28T13:00:00Z",
                "2026-03-28T17:00:00Z",
                "2026-03-29T09:00:00Z",
            ],
        ),
        // a list, across Europe's spring-forward night: UTC repeats and loses nothing
        (
            "30 1,2,3 * * *",
            [
                "2026-03-29T01:30:00Z",
                "2026-03-29T02:30:00Z",
                "2026-03-29T03:30:00Z",
            ],
        ),
        // a day-of-month range (day of week unrestricted)
        (
            "0 0 1-3 * *",
            [
                "2026-04-01T00:00:00Z",
                "2026-04-02T00:00:00Z",
                "2026-04-03T00:00:00Z",
            ],
        ),
        // weekdays: crontab's 1-5 is Monday to Friday
        (
            "0 0 * * 1-5",
            [
                "2026-03-30T00:00:00Z",
                "2026-03-31T00:00:00Z",
                "2026-04-01T00:00:00Z",
            ],
        ),
        // day 1 OR Monday: crontab fires on a day matching either when both are restricted
        (
            "0 0 1 * 1",
            [
                "2026-03-30T00:00:00Z",
                "2026-04-01T00:00:00Z",
                "2026-04-06T00:00:00Z",
            ],
        ),
        // the 13th OR a Friday, not only Friday the 13th
        (
            "0 0 13 * 5",
            [
                "2026-04-03T00:00:00Z",
                "2026-04-10T00:00:00Z",
                "2026-04-13T00:00:00Z",
            ],
        ),
        // a day-of-month field starting with `*` makes crontab AND the two: odd days
        // that are Mondays (Vixie cron's DOM_STAR), not odd days or Mondays
        (
            "0 0 */2 * 1",
            [
                "2026-04-13T00:00:00Z",
                "2026-04-27T00:00:00Z",
                "2026-05-11T00:00:00Z",
            ],
        ),
        // and a day-of-week field starting with `*`: the 1st, on any day of the week
        (
            "0 0 1 * */1",
            [
                "2026-04-01T00:00:00Z",
                "2026-05-01T00:00:00Z",
                "2026-06-01T00:00:00Z",
            ],
        ),
        // a month list with a day
        (
            "0 6 15 1,7 *",
            [
                "2026-07-15T06:00:00Z",
                "2027-01-15T06:00:00Z",
                "2027-07-15T06:00:00Z",
            ],
        ),
        // 29 February only in leap years
        (
            "0 12 29 2 *",
            [
                "2028-02-29T12:00:00Z",
                "2032-02-29T12:00:00Z",
                "2036-02-29T12:00:00Z",
            ],
        ),
        // names
        (
            "0 8 * JAN-MAR MON",
            [
                "2026-03-30T08:00:00Z",
                "2027-01-04T08:00:00Z",
                "2027-01-11T08:00:00Z",
            ],
        ),
        (
            "@hourly",
            [
                "2026-03-28T13:00:00Z",
                "2026-03-28T14:00:00Z",
                "2026-03-28T15:00:00Z",
            ],
        ),
        (
            "@daily",
            [
                "2026-03-29T00:00:00Z",
                "2026-03-30T00:00:00Z",
                "2026-03-31T00:00:00Z",
            ],
        ),
        // six fields: seconds first
        (
            "*/20 * * * * *",
            [
                "2026-03-28T12:00:20Z",
                "2026-03-28T12:00:40Z",
                "2026-03-28T12:01:00Z",
            ],
        ),
        (
            "0 0 12 * * 6",
            [
                "2026-04-04T12:00:00Z",
                "2026-04-11T12:00:00Z",
                "2026-04-18T12:00:00Z",
            ],
        ),
    ];
    for (text, expected) in table {
        assert_eq!(next3(text), expected.to_vec(), "{text}");
    }
}

/// crontab numbers days of the week 0-7, 0 and 7 Sunday (the `cron` crate's 1-7 from
/// Sunday would make `1` a Sunday): each number is checked against the weekday it names.
#[test]
fn days_of_the_week_are_numbered_as_crontab_numbers_them() {
    let days = [
        (0, "2026-03-29"), // Sunday
        (1, "2026-03-30"), // Monday
        (2, "2026-03-31"),
        (3, "2026-04-01"),
        (4, "2026-04-02"),
        (5, "2026-04-03"),
        (6, "2026-03-28"), // Saturday: the reference day itself, at midnight next week
        (7, "2026-03-29"), // Sunday again
    ];
    for (number, day) in days {
        let first = &next3(&format!("0 0 * * {number}"))[0];
        let expected = if number == 6 {
            "2026-04-04T00:00:00Z".to_string()
        } else {
            format!("{day}T00:00:00Z")
        };
        assert_eq!(first, &expected, "day of week {number}");
    }
    assert_eq!(next3("0 0 * * SUN"), next3("0 0 * * 0"));
    assert_eq!(next3("0 0 * * 7"), next3("0 0 * * 0"));
    assert_eq!(next3("0 0 * * SAT"), next3("0 0 * * 6"));
}

#[test]
fn malformed_expressions_are_refused_with_the_reason() {
    for (text, says) in [
        ("", "0 fields"),
        ("* * * *", "4 fields"),
        ("0 0 0 * * * 2030", "7 fields"),
        (
            "61 * * * *",
            "the minute field \"61\" is not valid: it takes 0-59",
        ),
        ("* * 32 * *", "the day-of-month field \"32\" is not valid"),
        ("* * * 13 *", "the month field \"13\" is not valid"),
        ("* * * * 8", "the day-of-week field \"8\" is not valid"),
        ("61 * * * * *", "the second field \"61\" is not valid"),
        ("0 0 31 2 *", "never fires"),
        ("@often", ""),
        ("@hourly 5", "stands alone"),
        ("a b c d e", "the minute field \"a\" is not valid"),
    ] {
        let error = Expression::parse(text).expect_err(text);
        assert!(error.to_string().contains(says), "{text}: {error}");
    }
    let long = "1,".repeat(150) + " * * * *";
    assert!(Expression::parse(&long).is_err());
}

#[test]
fn the_latest_fire_at_or_before_a_time_is_found() {
    let latest = |text: &str, at: i64| {
        format_utc(
            Expression::parse(text)
                .unwrap()
                .latest_at_or_before(at)
                .unwrap(),
        )
    };
    assert_eq!(latest("*/15 * * * *", SAT_NOON), "2026-03-28T12:00:00Z");
    assert_eq!(latest("*/15 * * * *", SAT_NOON - 1), "2026-03-28T11:45:00Z");
    assert_eq!(latest("0 0 * * 1", SAT_NOON), "2026-03-23T00:00:00Z");
    assert_eq!(
        latest("*/20 * * * * *", SAT_NOON + 59_000),
        "2026-03-28T12:00:40Z"
    );
}

#[test]
fn the_shortest_gap_between_fires_is_found() {
    let gap = |text: &str| {
        Expression::parse(text)
            .unwrap()
            .min_gap_ms(SAT_NOON)
            .unwrap()
    };
    assert_eq!(gap("*/15 * * * *"), 15 * 60_000);
    assert_eq!(gap("0 * * * *"), 3_600_000);
    assert_eq!(gap("0,30 3 * * *"), 30 * 60_000);
    assert_eq!(gap("*/10 * * * * *"), 10_000);
    assert_eq!(gap("0 0 * * *"), 86_400_000);
}

#[test]
fn floors_default_per_kind_and_take_an_accounts_overrides() {
    assert_eq!(floors::default_floor(RunKind::Checks).as_secs(), 60);
    for kind in [
        RunKind::Load,
        RunKind::Capacity,
        RunKind::Replay,
        RunKind::Faults,
    ] {
        assert_eq!(floors::default_floor(kind).as_secs(), 3600, "{kind}");
    }
    let (kind, floor) = floors::parse_override("checks=1s").unwrap();
    let stored = floors::merged(None, &[(kind, floor)]);
    assert_eq!(floors::floor(RunKind::Checks, Some(&stored)).as_secs(), 1);
    assert_eq!(floors::floor(RunKind::Load, Some(&stored)).as_secs(), 3600);
    assert!(floors::parse_override("checks").is_err());
    assert!(floors::parse_override("nope=1s").is_err());
    assert!(floors::parse_override("checks=0s").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, rng_seed: proptest::test_runner::RngSeed::Fixed(16), ..ProptestConfig::default() })]

    /// Any string: an expression or a precise error, never a panic.
    #[test]
    fn any_string_parses_or_is_refused_without_panicking(text in "\\PC{0,60}") {
        if let Err(error) = Expression::parse(&text) {
            prop_assert!(!error.why.is_empty());
        }
    }

    /// Strings made of cron's own characters reach the field parser.
    #[test]
    fn cron_like_strings_parse_or_are_refused(text in "[0-9*/,\\-LW#?@A-Z ]{0,40}") {
        match Expression::parse(&text) {
            Ok(expression) => prop_assert!(expression.next_after(SAT_NOON).is_some()),
            Err(error) => prop_assert!(!error.why.is_empty()),
        }
    }
}

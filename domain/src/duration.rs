//! One duration type for specs and flags: a humantime string (`"1500ms"`, `"30s"`,
//! `"1m30s"`, `"7d"`) read and written the same way everywhere. Older spec fields that
//! hold integer milliseconds (`timeout_ms`) or seconds stay accepted by their own types;
//! new fields use this one, and every command-line flag parses with [`parse`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest duration read: a year is far past any run, retention or timeout here, and
/// the bound keeps arithmetic on it from overflowing.
pub const MAX: Duration = Duration::from_secs(366 * 24 * 3600);

/// Why a duration was refused; the message names what was read and shows a good one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration such as 1500ms, 30s, 1m30s or 7d: {why}")]
pub struct DurationError {
    pub text: String,
    pub why: String,
}

/// A duration written as humantime text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub fn get(self) -> Duration {
        self.0
    }
}

/// Reads humantime text (surrounding spaces ignored), at most [`MAX`]. Also a clap
/// `value_parser` for every duration flag.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let refused = |why: String| DurationError {
        text: text.chars().take(64).collect(),
        why,
    };
    let duration = humantime::parse_duration(text.trim()).map_err(|e| refused(e.to_string()))?;
    if duration > MAX {
        return Err(refused(format!(
            "longer than the most, {}",
            humantime::format_duration(MAX)
        )));
    }
    Ok(duration)
}

/// A clap `value_parser` for a duration flag held to a range: humantime text from
/// `least` to `most`, else a refusal naming both.
pub fn between(
    least: Duration,
    most: Duration,
) -> impl Fn(&str) -> Result<Duration, DurationError> + Clone + Send + Sync + 'static {
    move |text| {
        let duration = parse(text)?;
        if duration < least || duration > most {
            return Err(DurationError {
                text: text.chars().take(64).collect(),
                why: format!(
                    "must be from {} to {}",
                    humantime::format_duration(least),
                    humantime::format_duration(most)
                ),
            });
        }
        Ok(duration)
    }
}

impl FromStr for HumanDuration {
    type Err = DurationError;
    fn from_str(text: &str) -> Result<HumanDuration, DurationError> {
        parse(text).map(HumanDuration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl From<HumanDuration> for Duration {
    fn from(d: HumanDuration) -> Duration {
        d.0
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<HumanDuration, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn humantime_text_reads_and_writes_back() {
        for (text, ms) in [
            ("1500ms", 1500),
            ("30s", 30_000),
            ("1m30s", 90_000),
            ("7d", 7 * 86_400_000),
            (" 2h ", 7_200_000),
        ] {
            let d: HumanDuration = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(d.get(), Duration::from_millis(ms), "{text}");
            let back: HumanDuration =
                serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
            assert_eq!(back, d);
        }
        for refused in ["", "30", "-1s", "ten seconds", "400d"] {
            let error = refused.parse::<HumanDuration>().unwrap_err();
            assert!(error.to_string().contains("such as 1500ms"), "{error}");
        }
        assert!(serde_json::from_value::<HumanDuration>(serde_json::json!(30)).is_err());
    }

    #[test]
    fn a_flag_range_is_held_and_named() {
        let within = between(Duration::from_millis(100), Duration::from_secs(120));
        assert_eq!(within("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(within("100ms"), Ok(Duration::from_millis(100)));
        let refused = within("99ms").unwrap_err().to_string();
        assert!(refused.contains("must be from 100ms to 2m"), "{refused}");
        assert!(within("3m").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x0d0a_7104),
            ..ProptestConfig::default()
        })]

        /// Any text: a duration at most MAX or a refusal, never a panic.
        #[test]
        fn any_text_is_a_bounded_duration_or_a_refusal(text in ".{0,40}") {
            if let Ok(d) = parse(&text) {
                prop_assert!(d <= MAX);
            }
        }

        /// Every duration up to MAX, written, reads back as itself.
        #[test]
        fn written_durations_read_back(ms in 0u64..=MAX.as_millis() as u64) {
            let d = HumanDuration(Duration::from_millis(ms));
            prop_assert_eq!(d.to_string().parse::<HumanDuration>(), Ok(d));
        }
    }
}

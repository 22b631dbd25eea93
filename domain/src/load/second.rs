//! What a person (or an MCP client's progress) reads of one `load` frame: its second and
//! phase, the requests started, the failures, the late and dropped sends, and p50/p99 from
//! its histogram. Read leniently from the frame's JSON, since frames are outside input
//! to a client: a field that is missing or malformed is left out, never an error.

use serde::Deserialize;
use serde_json::Value;

use super::result::Counts;
use crate::histogram;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SecondSummary {
    /// Seconds since the phase started.
    pub second: Option<u64>,
    /// `warmup` or `measure` (a capacity step's frames name theirs).
    pub phase: Option<String>,
    /// Requests started in this second.
    pub sent: Option<u64>,
    /// Requests with no response or a status of 400 or more.
    pub failed: u64,
    pub late: u64,
    pub dropped: u64,
    /// Corrected latency percentiles, in ms; none in warm-up seconds.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The second's slowest request named by its exemplars: trace id and latency in ms.
    pub slowest: Option<(String, f64)>,
}

impl SecondSummary {
    pub fn of(data: &Value) -> SecondSummary {
        let count = |key: &str| data.get(key).and_then(Value::as_u64);
        let latency = data
            .get("histogram")
            .and_then(Value::as_str)
            .and_then(|text| histogram::decode(text).ok())
            .filter(|h| !h.is_empty());
        let ms = |q: f64| {
            latency
                .as_ref()
                .map(|h| h.value_at_quantile(q) as f64 / 1000.0)
        };
        SecondSummary {
            second: count("second"),
            phase: data
                .get("phase")
                .and_then(Value::as_str)
                .map(str::to_string),
            sent: count("sent"),
            failed: Counts::deserialize(data).map_or(0, |c| c.failed()),
            late: count("late").unwrap_or(0),
            dropped: count("dropped").unwrap_or(0),
            p50_ms: ms(0.5),
            p99_ms: ms(0.99),
            slowest: data
                .get("exemplars")
                .and_then(|e| super::Exemplars::deserialize(e).ok())
                .and_then(|e| e.slowest.into_iter().next())
                .map(|e| (e.trace_id, e.latency_us as f64 / 1000.0)),
        }
    }

    /// `measure  12/60 s  100 req/s  p50 3.1 ms  p99 9.8 ms  errors 0  late 0` (`total_s`
    /// when the run's length is known; `dropped N` only when some were).
    pub fn line(&self, total_s: Option<u64>) -> String {
        let mut parts: Vec<String> = Vec::new();
        parts.extend(self.phase.clone());
        if let Some(second) = self.second {
            // The total is the measure's length: a warm-up second is not one of it, and a
            // second past it (answers still coming in) is not "11/10".
            let measuring = matches!(self.phase.as_deref(), None | Some("measure"));
            parts.push(match total_s {
                Some(total) if measuring && second <= total => format!("{second}/{total} s"),
                Some(total) if measuring => format!("{second} s (past the {total} s measure)"),
                _ => format!("{second} s"),
            });
        }
        if let Some(sent) = self.sent {
            parts.push(format!("{sent} req/s"));
        }
        if let (Some(p50), Some(p99)) = (self.p50_ms, self.p99_ms) {
            parts.push(format!("p50 {p50:.1} ms"));
            parts.push(format!("p99 {p99:.1} ms"));
        }
        parts.push(format!("errors {}", self.failed));
        parts.push(format!("late {}", self.late));
        if self.dropped > 0 {
            parts.push(format!("dropped {}", self.dropped));
        }
        parts.join("  ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn encoded(millis: std::ops::RangeInclusive<u64>) -> String {
        let mut h = histogram::latency_histogram().expect("histogram");
        for ms in millis {
            h.record(ms * 1000).expect("record");
        }
        histogram::encode(&h).expect("encode")
    }

    #[test]
    fn a_measured_second_reads_as_one_line() {
        let data = json!({"second": 12, "phase": "measure", "requests": 100,
            "responses": {"2xx": 97, "5xx": 2}, "errors": {"timeout": 1}, "intended": 100,
            "sent": 100, "late": 3, "dropped": 0, "histogram": encoded(1..=100),
            "operations": {}});
        let summary = SecondSummary::of(&data);
        assert_eq!(summary.failed, 3);
        assert_eq!(
            summary.line(Some(60)),
            "measure  12/60 s  100 req/s  p50 50.0 ms  p99 99.0 ms  errors 3  late 3"
        );
    }

    #[test]
    fn only_a_measured_second_is_counted_against_the_measure() {
        let at = |phase: &str, second: u64| {
            SecondSummary::of(&json!({"second": second, "phase": phase, "sent": 5})).line(Some(10))
        };
        assert_eq!(at("warmup", 1), "warmup  1 s  5 req/s  errors 0  late 0");
        assert_eq!(
            at("measure", 10),
            "measure  10/10 s  5 req/s  errors 0  late 0"
        );
        assert_eq!(
            at("measure", 11),
            "measure  11 s (past the 10 s measure)  5 req/s  errors 0  late 0"
        );
    }

    #[test]
    fn a_warmup_second_or_a_partial_frame_leaves_out_what_it_lacks() {
        let warmup = json!({"second": 2, "phase": "warmup", "sent": 5, "dropped": 4});
        assert_eq!(
            SecondSummary::of(&warmup).line(None),
            "warmup  2 s  5 req/s  errors 0  late 0  dropped 4"
        );
        for junk in [
            json!(null),
            json!([1]),
            json!({"histogram": "not base64", "sent": -1}),
        ] {
            assert_eq!(SecondSummary::of(&junk).line(None), "errors 0  late 0");
        }
    }
}

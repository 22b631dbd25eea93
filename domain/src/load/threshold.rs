//! Thresholds: k6-style pass/fail rules on a run's measures (`p99 < 200ms`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A k6-style pass/fail rule on the measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Threshold {
    pub expression: String,
    pub metric: Metric,
    pub op: Comparison,
    /// Microseconds for latencies, a fraction (0..1) for the error rate, per second for
    /// the rate.
    pub limit: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The q-quantile of the corrected latency.
    Percentile(f64),
    Mean,
    Max,
    /// Failed requests (no response, or a status of 400 or more) over all requests.
    ErrorRate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    #[serde(rename = "<")]
    Less,
    #[serde(rename = "<=")]
    LessOrEqual,
    #[serde(rename = ">")]
    Greater,
    #[serde(rename = ">=")]
    GreaterOrEqual,
}

impl Comparison {
    pub fn holds(self, observed: f64, limit: f64) -> bool {
        match self {
            Comparison::Less => observed < limit,
            Comparison::LessOrEqual => observed <= limit,
            Comparison::Greater => observed > limit,
            Comparison::GreaterOrEqual => observed >= limit,
        }
    }
}

impl std::str::FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Threshold, String> {
        let usage = "expected METRIC OP VALUE, such as \"p99 < 300ms\" or \"error_rate < 1%\" (metrics: pNN, p(NN), mean, max, error_rate)";
        let ops = [
            ("<=", Comparison::LessOrEqual),
            (">=", Comparison::GreaterOrEqual),
            ("<", Comparison::Less),
            (">", Comparison::Greater),
        ];
        let (at, op_text, op) = ops
            .iter()
            .filter_map(|(t, op)| text.find(t).map(|at| (at, *t, *op)))
            .min_by_key(|(at, t, _)| (*at, usize::MAX - t.len()))
            .ok_or_else(|| format!("{text:?}: {usage}"))?;
        let name = text[..at].trim().to_ascii_lowercase();
        let value = text[at + op_text.len()..].trim();
        let metric = match name.as_str() {
            "mean" | "avg" => Metric::Mean,
            "max" => Metric::Max,
            "error_rate" | "errors" => Metric::ErrorRate,
            other => {
                let digits = other
                    .strip_prefix("p(")
                    .and_then(|r| r.strip_suffix(')'))
                    .or_else(|| other.strip_prefix('p'))
                    .ok_or_else(|| format!("{text:?}: unknown metric {other:?}; {usage}"))?;
                let q: f64 = digits
                    .parse()
                    .map_err(|_| format!("{text:?}: unknown metric {other:?}; {usage}"))?;
                if !(q > 0.0 && q < 100.0) {
                    return Err(format!("{text:?}: a percentile is between 0 and 100"));
                }
                Metric::Percentile(q / 100.0)
            }
        };
        let limit = match metric {
            Metric::ErrorRate => {
                let (number, scale) = match value.strip_suffix('%') {
                    Some(n) => (n.trim(), 0.01),
                    None => (value, 1.0),
                };
                let n: f64 = number
                    .parse()
                    .map_err(|_| format!("{text:?}: {value:?} is not a rate such as 1% or 0.01"))?;
                n * scale
            }
            _ => {
                // A bare number is milliseconds, as in k6.
                match value.parse::<f64>() {
                    Ok(ms) => ms * 1000.0,
                    Err(_) => {
                        humantime::parse_duration(value)
                            .map_err(|_| {
                                format!("{text:?}: {value:?} is not a latency such as 300ms")
                            })?
                            .as_secs_f64()
                            * 1e6
                    }
                }
            }
        };
        if !limit.is_finite() || limit < 0.0 {
            return Err(format!("{text:?}: the limit must be a positive number"));
        }
        Ok(Threshold {
            expression: text.trim().to_string(),
            metric,
            op,
            limit,
        })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expression)
    }
}

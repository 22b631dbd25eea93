//! Latency histograms, the tables printed per scenario and their JSON form.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// One phase's latencies, in microseconds: fine enough for sub-millisecond phases, and
/// an hour is far past anything a scenario waits for.
pub struct Phase {
    pub name: &'static str,
    histogram: Histogram<u64>,
}

const MAX_MICROS: u64 = 3_600_000_000;

impl Phase {
    pub fn new(name: &'static str) -> anyhow::Result<Phase> {
        Ok(Phase {
            name,
            histogram: Histogram::new_with_bounds(1, MAX_MICROS, 3)?,
        })
    }

    pub fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros())
            .unwrap_or(MAX_MICROS)
            .clamp(1, MAX_MICROS);
        // Clamped into the histogram's bounds above, so saturating never drops a sample.
        self.histogram.saturating_record(micros);
    }

    /// Adds another phase's samples to this one's (iohr-bench-viewers only).
    #[allow(dead_code)]
    pub fn merge(&mut self, other: &Phase) -> anyhow::Result<()> {
        self.histogram.add(&other.histogram)?;
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    fn ms_at(&self, quantile: f64) -> f64 {
        self.histogram.value_at_quantile(quantile) as f64 / 1000.0
    }

    pub fn p99_ms(&self) -> f64 {
        self.ms_at(0.99)
    }

    fn max_ms(&self) -> f64 {
        self.histogram.max() as f64 / 1000.0
    }

    pub fn to_json(&self) -> Value {
        json!({
            "phase": self.name,
            "count": self.count(),
            "p50_ms": round3(self.ms_at(0.50)),
            "p90_ms": round3(self.ms_at(0.90)),
            "p99_ms": round3(self.ms_at(0.99)),
            "max_ms": round3(self.max_ms()),
            "mean_ms": round3(self.histogram.mean() / 1000.0),
        })
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The phases as a fixed-width table.
pub fn table(phases: &[Phase]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<34} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "phase (ms)", "count", "p50", "p90", "p99", "max"
    );
    for phase in phases {
        if phase.count() == 0 {
            let _ = writeln!(out, "  {:<34} {:>7}", phase.name, 0);
            continue;
        }
        let _ = writeln!(
            out,
            "  {:<34} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            phase.name,
            phase.count(),
            phase.ms_at(0.50),
            phase.ms_at(0.90),
            phase.ms_at(0.99),
            phase.max_ms()
        );
    }
    out
}

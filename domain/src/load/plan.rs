//! A load spec read and validated into the plan the engine runs.

use std::time::Duration;

use crate::request::{SpecError, parse_spec, spec_error, validate_request};

use super::*;

impl LoadSpec {
    /// Parses and validates a spec; the error says what to fix.
    pub fn from_json(value: &serde_json::Value) -> Result<LoadSpec, SpecError> {
        parse_spec("spec", value)
    }

    /// Validates the spec and reads it into the plan the engine runs.
    pub fn plan(&self) -> Result<LoadPlan, SpecError> {
        if self.operations.is_empty() {
            return Err(spec_error(
                "spec.operations",
                "at least one operation is needed",
            ));
        }
        if self.operations.len() > MAX_OPERATIONS {
            return Err(spec_error(
                "spec.operations",
                format!("at most {MAX_OPERATIONS} operations"),
            ));
        }
        for (i, op) in self.operations.iter().enumerate() {
            let field = format!("spec.operations[{i}]");
            validate_request(&field, &op.method, &op.path, &op.headers)?;
            if op.weight == 0 {
                return Err(spec_error(format!("{field}.weight"), "must be at least 1"));
            }
        }
        unique_names(&self.operations)?;
        let connections = self.connections.unwrap_or(match self.model {
            Model::Open => DEFAULT_OPEN_CONNECTIONS,
            Model::Closed => 0,
        });
        if connections == 0 || connections > MAX_CONNECTIONS {
            return Err(spec_error(
                "spec.connections",
                format!("must be between 1 and {MAX_CONNECTIONS} (the closed model needs it)"),
            ));
        }
        let max_connections = self.max_connections(connections)?;
        let rate_ok = |r: f64| r.is_finite() && (0.0..=MAX_RATE).contains(&r);
        let (start_rate, stages, duration) = match self.model {
            Model::Closed => {
                if self.rate.is_some() || !self.stages.is_empty() {
                    return Err(spec_error(
                        "spec.rate",
                        "the closed model sends as fast as the target answers; rate and stages belong to the open model",
                    ));
                }
                (0.0, Vec::new(), self.required_duration()?)
            }
            Model::Open if self.stages.is_empty() => {
                let rate = self.rate.ok_or_else(|| {
                    spec_error("spec.rate", "the open model needs a rate or stages")
                })?;
                if !rate_ok(rate) || rate == 0.0 {
                    return Err(spec_error(
                        "spec.rate",
                        format!("must be above 0 and at most {MAX_RATE}"),
                    ));
                }
                let duration = self.required_duration()?;
                (rate, vec![(duration, rate)], duration)
            }
            Model::Open => {
                if self.duration.is_some() {
                    return Err(spec_error(
                        "spec.duration",
                        "with stages the duration is their sum; leave it out",
                    ));
                }
                let start = self.rate.unwrap_or(0.0);
                if !rate_ok(start) {
                    return Err(spec_error(
                        "spec.rate",
                        format!("must be between 0 and {MAX_RATE}"),
                    ));
                }
                if self.stages.len() > MAX_STAGES {
                    return Err(spec_error(
                        "spec.stages",
                        format!("at most {MAX_STAGES} stages"),
                    ));
                }
                let mut stages = Vec::with_capacity(self.stages.len());
                // Summed as it goes and checked against the cap at each stage, so that the
                // sum of many long stages never overflows.
                let mut total = Duration::ZERO;
                for (i, stage) in self.stages.iter().enumerate() {
                    let field = format!("spec.stages[{i}]");
                    let d = parse_duration(&format!("{field}.duration"), &stage.duration)?;
                    if d.is_zero() {
                        return Err(spec_error(format!("{field}.duration"), "must not be zero"));
                    }
                    total = total.saturating_add(d);
                    if total > MAX_DURATION {
                        return Err(spec_error(
                            format!("{field}.duration"),
                            "the stages must sum to at most 24h",
                        ));
                    }
                    if !rate_ok(stage.target) {
                        return Err(spec_error(
                            format!("{field}.target"),
                            format!("must be between 0 and {MAX_RATE}"),
                        ));
                    }
                    stages.push((d, stage.target));
                }
                (start, stages, total)
            }
        };
        if duration > MAX_DURATION {
            return Err(spec_error("spec.duration", "at most 24h"));
        }
        let warmup = match &self.warmup {
            None => WarmupPlan::None,
            Some(Warmup::Requests(0)) => WarmupPlan::None,
            Some(Warmup::Requests(n)) => {
                let most = self.most_warmup_requests(start_rate, &stages);
                if *n > most {
                    return Err(spec_error(
                        "spec.warmup",
                        format!(
                            "{n} requests is more than the {most} the warm-up's rate sends in 24h"
                        ),
                    ));
                }
                WarmupPlan::Requests(*n)
            }
            Some(Warmup::Duration(text)) => {
                let d = parse_duration("spec.warmup", text)?;
                if d > MAX_DURATION {
                    return Err(spec_error("spec.warmup", "at most 24h"));
                }
                if d.is_zero() {
                    WarmupPlan::None
                } else {
                    WarmupPlan::Duration(d)
                }
            }
        };
        let timeout = read_timeout(self.timeout.as_deref())?;
        let streams = self.streams.unwrap_or(1);
        if streams == 0 || streams > 1000 {
            return Err(spec_error("spec.streams", "must be between 1 and 1000"));
        }
        if streams > 1 && self.http != HttpVersion::Http2 {
            return Err(spec_error(
                "spec.streams",
                "streams per connection need \"http\": \"2\"",
            ));
        }
        let thresholds = read_thresholds(&self.thresholds)?;
        crate::trace::validate_sample("spec.trace_sample", self.trace_sample)?;
        Ok(LoadPlan {
            operations: self.operations.clone(),
            model: self.model,
            start_rate,
            stages,
            connections,
            max_connections,
            duration,
            warmup,
            timeout,
            http: self.http,
            streams,
            thresholds,
            abort_on_fail: self.abort_on_fail,
            recorded: None,
            share: Share::WHOLE,
            trace_sample: self.trace_sample,
        })
    }

    /// The open model's bound on connections: the spec's, at least `connections` and at
    /// most [`MAX_CONNECTIONS`], or the default; the closed model has none to set.
    fn max_connections(&self, connections: u32) -> Result<u32, SpecError> {
        match (self.model, self.max_connections) {
            (Model::Closed, None) => Ok(connections),
            (Model::Closed, Some(_)) => Err(spec_error(
                "spec.max_connections",
                "the closed model keeps its connections; max_connections belongs to the open model",
            )),
            (Model::Open, None) => Ok(default_max_connections(connections)),
            (Model::Open, Some(max)) if max < connections || max > MAX_CONNECTIONS => {
                Err(spec_error(
                    "spec.max_connections",
                    format!("must be between connections ({connections}) and {MAX_CONNECTIONS}"),
                ))
            }
            (Model::Open, Some(max)) => Ok(max),
        }
    }

    /// The most warm-up requests a spec may ask for: what its warm-up rate sends in the
    /// 24 h cap (the open model warms up at its start rate, or its first stage's target
    /// from zero, as the engine does); the closed model, the most rate in the cap.
    fn most_warmup_requests(&self, start_rate: f64, stages: &[(Duration, f64)]) -> u64 {
        let rate = match self.model {
            Model::Closed => MAX_RATE,
            Model::Open if start_rate > 0.0 => start_rate,
            Model::Open => stages.first().map_or(0.0, |(_, r)| *r),
        };
        // At most 1e6/s for 86,400 s: far inside a u64 (a float-to-int cast saturates).
        (rate * MAX_DURATION.as_secs_f64()).floor() as u64
    }

    fn required_duration(&self) -> Result<Duration, SpecError> {
        let text = self
            .duration
            .as_deref()
            .ok_or_else(|| spec_error("spec.duration", "is required, such as \"10s\""))?;
        let d = parse_duration("spec.duration", text)?;
        if d.is_zero() {
            return Err(spec_error("spec.duration", "must not be zero"));
        }
        Ok(d)
    }
}

/// The open model's bound on connections when a spec sets none:
/// [`DEFAULT_MAX_CONNECTIONS`], or `connections` when that is more.
pub fn default_max_connections(connections: u32) -> u32 {
    connections.max(DEFAULT_MAX_CONNECTIONS)
}

/// Operations are told apart by name in frames and results: two with one name would merge.
pub fn unique_names(operations: &[Operation]) -> Result<(), SpecError> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, op) in operations.iter().enumerate() {
        let name = op.display_name();
        if !seen.insert(name.clone()) {
            return Err(spec_error(
                format!("spec.operations[{i}].name"),
                format!("{name:?} names another operation too; give each its own name"),
            ));
        }
    }
    Ok(())
}

/// The per-request timeout of a spec (`spec.timeout`), default 10 s, at most 60 s.
pub fn read_timeout(text: Option<&str>) -> Result<Duration, SpecError> {
    let timeout = match text {
        None => DEFAULT_TIMEOUT,
        Some(text) => parse_duration("spec.timeout", text)?,
    };
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(spec_error("spec.timeout", "must be between 1ms and 60s"));
    }
    Ok(timeout)
}

/// A spec's `thresholds`, each parsed or refused with its index.
pub fn read_thresholds(texts: &[String]) -> Result<Vec<Threshold>, SpecError> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            text.parse::<Threshold>()
                .map_err(|e| spec_error(format!("spec.thresholds[{i}]"), e))
        })
        .collect()
}

impl LoadPlan {
    /// The most requests the run may send (for the units it reserves): the schedule's
    /// total for the open model (this share's part of it), none known for the closed one.
    pub fn expected_requests(&self) -> Option<u64> {
        if let Some(recorded) = &self.recorded {
            return Some(self.share.part(recorded.len() as u64));
        }
        match self.model {
            Model::Closed => None,
            Model::Open => {
                let mut from = self.start_rate;
                let mut total = 0.0;
                for (d, to) in &self.stages {
                    total += (from + to) / 2.0 * d.as_secs_f64();
                    from = *to;
                }
                Some(self.share.part(total.ceil() as u64))
            }
        }
    }
}

//! A capacity spec read and validated into its plan: the sweep's grid, its SLO and the
//! load plan every step runs.

use std::time::Duration;

use crate::load::{
    LoadSpec, MAX_DURATION, MAX_RATE, Metric, Model, Share, Threshold, Warmup, check_split,
    parse_duration,
};
use crate::request::{SpecError, parse_spec, spec_error};

use super::*;

impl CapacitySpec {
    pub fn from_json(value: &serde_json::Value) -> Result<CapacitySpec, SpecError> {
        parse_spec("spec", value)
    }

    /// Validates the spec and reads it into the plan the agent runs.
    pub fn plan(&self) -> Result<CapacityPlan, SpecError> {
        let grid = self.grid()?;
        let step = match &self.step {
            None => DEFAULT_STEP,
            Some(text) => parse_duration("spec.step", text)?,
        };
        if step.is_zero() || step > Duration::from_secs(3600) {
            return Err(spec_error("spec.step", "must be between 1ms and 1h"));
        }
        let discard = match &self.discard {
            None => DEFAULT_DISCARD.min(step / 2),
            Some(text) => parse_duration("spec.discard", text)?,
        };
        if discard >= step {
            return Err(spec_error(
                "spec.discard",
                "must be shorter than the step: the rest of the step is what is judged",
            ));
        }
        let cooldown = match &self.cooldown {
            None => discard,
            Some(text) => parse_duration("spec.cooldown", text)?,
        };
        if cooldown > Duration::from_secs(3600) {
            return Err(spec_error("spec.cooldown", "at most 1h"));
        }
        let bisect = self.bisect.unwrap_or(DEFAULT_BISECT);
        if bisect > MAX_BISECT {
            return Err(spec_error(
                "spec.bisect",
                format!("at most {MAX_BISECT} rounds"),
            ));
        }
        let total = (step + cooldown).saturating_mul((grid.len() as u32).saturating_add(bisect));
        if total > MAX_DURATION {
            return Err(spec_error(
                "spec.step",
                "the whole sweep (steps and bisection) must fit in 24h",
            ));
        }
        if let Some(floor) = self.floor
            && !(floor.is_finite() && floor > 0.0 && floor <= MAX_RATE)
        {
            return Err(spec_error(
                "spec.floor",
                format!("must be above 0 and at most {MAX_RATE} requests per second"),
            ));
        }
        let slo = self.slo()?;
        // The load spec's own checks (operations, headers, connections, timeout, http).
        let timeout = self
            .timeout
            .clone()
            .unwrap_or_else(|| format!("{}ms", step.min(Duration::from_secs(10)).as_millis()));
        let load = LoadSpec {
            operations: self.operations.clone(),
            model: Model::Open,
            rate: Some(grid[0]),
            stages: Vec::new(),
            connections: self.connections,
            max_connections: None,
            duration: Some(format!("{}us", (step - discard).as_micros())),
            warmup: (!discard.is_zero())
                .then(|| Warmup::Duration(format!("{}us", discard.as_micros()))),
            timeout: Some(timeout),
            http: self.http,
            streams: None,
            thresholds: Vec::new(),
            abort_on_fail: false,
            on_agent_lost: crate::load::AgentLoss::Error,
            trace_sample: self.trace_sample,
        };
        let template = load.plan()?;
        Ok(CapacityPlan {
            grid,
            step,
            discard,
            cooldown,
            slo,
            bisect,
            floor: self.floor,
            template,
        })
    }

    fn grid(&self) -> Result<Vec<f64>, SpecError> {
        let rate_ok = |r: f64| r.is_finite() && r > 0.0 && r <= MAX_RATE;
        if !self.rates.is_empty() {
            if self.start_rate.is_some() || self.max_rate.is_some() || self.growth.is_some() {
                return Err(spec_error(
                    "spec.rates",
                    "give either rates or start_rate, max_rate and growth, not both",
                ));
            }
            if self.rates.len() > MAX_STEPS {
                return Err(spec_error(
                    "spec.rates",
                    format!("at most {MAX_STEPS} rates"),
                ));
            }
            let mut previous = 0.0;
            for (i, rate) in self.rates.iter().enumerate() {
                if !rate_ok(*rate) {
                    return Err(spec_error(
                        format!("spec.rates[{i}]"),
                        format!("must be above 0 and at most {MAX_RATE}"),
                    ));
                }
                if round_rate(*rate) <= previous {
                    return Err(spec_error(
                        format!("spec.rates[{i}]"),
                        "rates must ascend (and differ by at least 0.01)",
                    ));
                }
                previous = round_rate(*rate);
            }
            return Ok(self.rates.iter().map(|r| round_rate(*r)).collect());
        }
        let start = self.start_rate.ok_or_else(|| {
            spec_error(
                "spec.start_rate",
                "is required (with max_rate), or give the grid as rates",
            )
        })?;
        if !rate_ok(start) || round_rate(start) <= 0.0 {
            return Err(spec_error(
                "spec.start_rate",
                format!("must be at least 0.01 and at most {MAX_RATE}"),
            ));
        }
        let max = self
            .max_rate
            .ok_or_else(|| spec_error("spec.max_rate", "is required with start_rate"))?;
        if !rate_ok(max) || max < start {
            return Err(spec_error(
                "spec.max_rate",
                format!("must be at least start_rate and at most {MAX_RATE}"),
            ));
        }
        let growth = self.growth.unwrap_or(DEFAULT_GROWTH);
        if !(growth.is_finite() && growth > 1.0 && growth <= 10.0) {
            return Err(spec_error("spec.growth", "must be above 1 and at most 10"));
        }
        let mut grid = Vec::new();
        let mut rate = start;
        // The last step is max_rate itself, however far the growth overshoots it.
        while round_rate(rate) < round_rate(max) {
            grid.push(round_rate(rate));
            if grid.len() >= MAX_STEPS {
                return Err(spec_error(
                    "spec.growth",
                    format!(
                        "the sweep from {start} to {max} would take more than {MAX_STEPS} steps; grow faster or narrow it"
                    ),
                ));
            }
            rate *= growth;
        }
        grid.push(round_rate(max));
        Ok(grid)
    }

    fn slo(&self) -> Result<Slo, SpecError> {
        let p99: Threshold = format!("p99 <= {}", self.slo.p99).parse().map_err(|_| {
            spec_error(
                "spec.slo.p99",
                format!("{:?} is not a latency such as \"200ms\"", self.slo.p99),
            )
        })?;
        if p99.limit <= 0.0 || p99.metric != Metric::Percentile(0.99) {
            return Err(spec_error("spec.slo.p99", "must be above 0"));
        }
        let text = self.slo.error_rate.as_deref().unwrap_or(DEFAULT_ERROR_RATE);
        let errors: Threshold = format!("error_rate <= {text}").parse().map_err(|_| {
            spec_error(
                "spec.slo.error_rate",
                format!("{text:?} is not a rate such as \"1%\" or 0.01"),
            )
        })?;
        if errors.limit > 1.0 {
            return Err(spec_error(
                "spec.slo.error_rate",
                "must be between 0% and 100%",
            ));
        }
        Ok(Slo {
            p99_us: p99.limit,
            error_rate: errors.limit,
        })
    }
}

impl CapacityPlan {
    /// One step: an open-model constant `rate`, its first `discard` run as a warm-up.
    pub fn step_plan(&self, rate: f64) -> LoadPlan {
        let mut plan = self.template.clone();
        plan.start_rate = rate;
        plan.stages = vec![(plan.duration, rate)];
        plan
    }

    pub fn connections(&self) -> u32 {
        self.template.connections
    }

    /// Whether the sweep may be split over `count` agents: every step's rate is split as
    /// the open model's, and the connections with it.
    pub fn check_split(&self, count: u32) -> Result<(), SpecError> {
        check_split(&self.template, count)
    }

    /// The sweep one agent runs as `share` of it: every step's arrivals interleaved with
    /// the other shares' ([`Share`]), so each agent offers its part of the step's rate.
    pub fn share(mut self, share: Share) -> Result<CapacityPlan, SpecError> {
        self.template = self.template.share(share)?;
        Ok(self)
    }

    /// The share of the sweep this agent runs (the whole, unless split).
    pub fn share_of(&self) -> Share {
        self.template.share
    }

    /// The most requests the sweep may send (for the units it reserves): every grid step
    /// and every bisection round at the top rate (a share's part of them).
    pub fn expected_requests(&self) -> u64 {
        let step = self.step.as_secs_f64();
        let top = self.grid.last().copied().unwrap_or(0.0);
        let grid: f64 = self.grid.iter().map(|r| r * step).sum();
        self.share_of()
            .part((grid + f64::from(self.bisect) * top * step).ceil() as u64)
    }
}

//! The `capacity` kind: a sweep of constant-rate load steps that finds the highest rate
//! meeting an SLO and the knee of latency against load.
//!
//! - [`CapacitySpec`] / [`CapacityPlan`]: the spec, validated like a load spec (it reuses
//!   its pieces), read into the sweep's grid and one [`LoadPlan`] per step.
//! - [`Sweep`]: the pure decision logic: next rate, stop at the first step that breaks
//!   the SLO (or whose achieved rate falls under 95% of the offered one), then bisect
//!   between the last good and the first bad rate.
//! - [`SweepPoint`]: one measured step, judged against the SLO.
//! - [`knee`]: Kneedle on log p99 against the offered rate, normalised over a given range,
//!   with a bootstrap interval over the sweep points (each point's p99 redrawn from its
//!   histogram by a binomial rank draw, seeded, so the same points give the same answer).

use std::time::Duration;

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
// A seeded stream that rand_chacha keeps across releases, and an exact binomial draw: the
// same points give the same knee after a dependency update.
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution};
use serde::{Deserialize, Serialize};

use crate::histogram::decode;
use crate::load::{
    Counts, HttpVersion, LEVEL, LoadPlan, LoadResult, LoadSpec, MAX_DURATION, MAX_RATE, Metric,
    Model, Operation, Threshold, Warmup, parse_duration,
};
use crate::quantile::Percentile;
use crate::request::{SpecError, parse_spec, spec_error};

/// The most steps a sweep's grid may have (bisection adds its rounds).
pub const MAX_STEPS: usize = 50;
pub const MAX_BISECT: u32 = 10;
pub const DEFAULT_GROWTH: f64 = 1.5;
pub const DEFAULT_STEP: Duration = Duration::from_secs(10);
pub const DEFAULT_DISCARD: Duration = Duration::from_secs(2);
pub const DEFAULT_BISECT: u32 = 3;
pub const DEFAULT_ERROR_RATE: &str = "1%";
/// A step whose completed requests per second fall under this share of the offered rate
/// did not keep up, whatever its latency.
pub const KEEP_UP: f64 = 0.95;
/// Kneedle's sensitivity S (its paper's and kneed's default).
pub const SENSITIVITY: f64 = 1.0;
/// Bootstrap replicates of the knee.
pub const REPLICATES: usize = 1000;
/// A knee that more than this share of replicates does not find is not resolved.
pub const MAX_KNEELESS: f64 = 0.2;
/// Every knee's bootstrap starts from this seed: the same points give the same interval.
const SEED: u64 = 0x6b6e_6565_6c65;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacitySpec {
    pub operations: Vec<Operation>,
    /// The first step's rate (requests per second), with `max_rate` and `growth`.
    #[serde(default)]
    pub start_rate: Option<f64>,
    /// The last step's rate: the grid grows by `growth` from `start_rate` and ends here.
    #[serde(default)]
    pub max_rate: Option<f64>,
    /// Each step's rate over the one before (default 1.5).
    #[serde(default)]
    pub growth: Option<f64>,
    /// The grid given explicitly, ascending, in place of start_rate/max_rate/growth.
    #[serde(default)]
    pub rates: Vec<f64>,
    /// How long each step holds its rate (default `10s`), `discard` included.
    #[serde(default)]
    pub step: Option<String>,
    /// The first part of each step, run and not judged (default `2s`).
    #[serde(default)]
    pub discard: Option<String>,
    /// A pause after a step that broke the SLO, so that what it left queued at the target
    /// drains before the next step (default: the discard).
    #[serde(default)]
    pub cooldown: Option<String>,
    /// The most connections the engine may use (default 64).
    #[serde(default)]
    pub connections: Option<u32>,
    /// Per request (default the smaller of 10 s and the step).
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub http: HttpVersion,
    pub slo: SloSpec,
    /// Bisection rounds between the last good and the first bad step (default 3).
    #[serde(default)]
    pub bisect: Option<u32>,
    /// The capacity (requests per second) the scenario must reach: the run fails below.
    #[serde(default)]
    pub floor: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloSpec {
    /// The highest p99 a step may have: `200ms`, `1s`, or a bare number of milliseconds.
    pub p99: String,
    /// The highest share of failed requests: `1%` (default) or `0.01`.
    #[serde(default)]
    pub error_rate: Option<String>,
}

/// The SLO a step is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Microseconds.
    pub p99_us: f64,
    /// A share, 0..1.
    pub error_rate: f64,
}

/// A spec with its defaults applied: the grid and what every step runs.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityPlan {
    /// The sweep's rates, ascending.
    pub grid: Vec<f64>,
    pub step: Duration,
    pub discard: Duration,
    pub cooldown: Duration,
    pub slo: Slo,
    pub bisect: u32,
    pub floor: Option<f64>,
    /// A constant-rate open-model plan at the grid's first rate: each step's plan is it
    /// with that step's rate ([`CapacityPlan::step_plan`]).
    template: LoadPlan,
}

/// Rates are kept to two decimals, so that they read well and match between runs.
pub fn round_rate(rate: f64) -> f64 {
    (rate * 100.0).round() / 100.0
}

/// `337.5/s`, `300/s`.
pub fn rate_text(rate: f64) -> String {
    format!("{}/s", crate::text::decimal(round_rate(rate), 2))
}

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
            duration: Some(format!("{}us", (step - discard).as_micros())),
            warmup: (!discard.is_zero())
                .then(|| Warmup::Duration(format!("{}us", discard.as_micros()))),
            timeout: Some(timeout),
            http: self.http,
            streams: None,
            thresholds: Vec::new(),
            abort_on_fail: false,
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

    /// The most requests the sweep may send (for the units it reserves): every grid step
    /// and every bisection round at the top rate.
    pub fn expected_requests(&self) -> u64 {
        let step = self.step.as_secs_f64();
        let top = self.grid.last().copied().unwrap_or(0.0);
        let grid: f64 = self.grid.iter().map(|r| r * step).sum();
        (grid + f64::from(self.bisect) * top * step).ceil() as u64
    }
}

/// Where a step belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    Sweep,
    Bisect,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Sweep => "sweep",
            Stage::Bisect => "bisect",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub rate: f64,
    pub stage: Stage,
}

/// The sweep's decisions, from the steps' verdicts alone.
#[derive(Debug, Clone)]
pub struct Sweep {
    grid: Vec<f64>,
    next: usize,
    rounds: u32,
    rounds_done: u32,
    good: Option<f64>,
    bad: Option<f64>,
    /// Why the first bad step broke the SLO.
    broke: Option<String>,
    bisecting: bool,
}

impl Sweep {
    pub fn new(grid: Vec<f64>, bisect: u32) -> Sweep {
        Sweep {
            grid,
            next: 0,
            rounds: bisect,
            rounds_done: 0,
            good: None,
            bad: None,
            broke: None,
            bisecting: false,
        }
    }

    /// The next step to run, or `None` when the sweep is over.
    pub fn next(&self) -> Option<Step> {
        if !self.bisecting {
            if self.bad.is_some() {
                return None;
            }
            return self.grid.get(self.next).map(|rate| Step {
                rate: *rate,
                stage: Stage::Sweep,
            });
        }
        let (good, bad) = (self.good?, self.bad?);
        if self.rounds_done >= self.rounds {
            return None;
        }
        let mid = round_rate((good + bad) / 2.0);
        // Closer than the rates' resolution: nothing left to bisect.
        (mid > good && mid < bad).then_some(Step {
            rate: mid,
            stage: Stage::Bisect,
        })
    }

    /// Records a step's verdict: `why` says how a bad step broke the SLO.
    pub fn record(&mut self, step: Step, meets_slo: bool, why: &str) {
        match step.stage {
            Stage::Sweep => {
                self.next += 1;
                if meets_slo {
                    self.good = Some(step.rate);
                } else {
                    self.bad = Some(step.rate);
                    self.broke = Some(format!("{} broke the SLO: {why}", rate_text(step.rate)));
                    self.bisecting = self.good.is_some() && self.rounds > 0;
                }
            }
            Stage::Bisect => {
                self.rounds_done += 1;
                if meets_slo {
                    self.good = Some(step.rate);
                } else {
                    self.bad = Some(step.rate);
                }
            }
        }
    }

    /// The highest offered rate that met the SLO.
    pub fn max_rate_meeting_slo(&self) -> Option<f64> {
        self.good
    }

    /// Why the sweep stopped, in plain words.
    pub fn stopped_because(&self) -> String {
        let Some(broke) = &self.broke else {
            let top = self.grid.last().copied().unwrap_or(0.0);
            return format!(
                "the sweep reached its top rate ({}) within the SLO: the capacity is above it",
                rate_text(top)
            );
        };
        match (self.good, self.bad) {
            (None, _) => format!("{broke}; the first step already broke it: start lower"),
            (Some(good), Some(bad)) if self.rounds_done > 0 => format!(
                "{broke}; bisected {} times: {} meets it, {} does not",
                self.rounds_done,
                rate_text(good),
                rate_text(bad)
            ),
            _ => broke.clone(),
        }
    }
}

/// One measured step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// 1-based, in the order the steps ran.
    pub step: u32,
    pub stage: Stage,
    /// Requests per second the step's schedule asked for.
    pub offered: f64,
    /// Requests completed per second during the judged part of the step (whenever sent).
    pub achieved: f64,
    #[serde(flatten)]
    pub counts: Counts,
    pub error_rate: f64,
    pub late: u64,
    pub dropped: u64,
    /// Corrected latency (from the intended send time), microseconds, with 95% intervals.
    pub p50: Percentile,
    pub p99: Percentile,
    /// The p99 the SLO is judged on (the histogram's, even from too few samples for an
    /// interval), microseconds; none without responses.
    pub p99_us: Option<u64>,
    pub meets_slo: bool,
    /// How the step broke the SLO, when it did.
    pub broke: Vec<String>,
    /// The judged part's latency histogram (V2 + deflate, base64): the knee's bootstrap
    /// and compare read it.
    pub histogram: String,
}

impl SweepPoint {
    /// A step's load result, judged against the SLO. `achieved` is the requests completed
    /// per second during the judged part of the step, whenever they were sent: under
    /// overload the engine's own count (requests sent in the judged part, completed
    /// whenever) would trail the offered rate only by how late they complete.
    pub fn judge(step: u32, at: Step, result: &LoadResult, achieved: f64, slo: &Slo) -> SweepPoint {
        let pick = |name: &str| {
            result
                .latency
                .percentiles
                .get(name)
                .cloned()
                .unwrap_or(Percentile::Insufficient {
                    insufficient: "no responses".to_string(),
                    samples: 0,
                })
        };
        let p99_us = decode(&result.latency.histogram)
            .ok()
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.99));
        let mut broke = Vec::new();
        match p99_us {
            None => broke.push("no responses".to_string()),
            Some(p99) if p99 as f64 > slo.p99_us => broke.push(format!(
                "p99 {} > {}",
                ms_text(p99 as f64),
                ms_text(slo.p99_us)
            )),
            Some(_) => {}
        }
        if result.error_rate > slo.error_rate {
            broke.push(format!(
                "error rate {:.2}% > {:.2}%",
                result.error_rate * 100.0,
                slo.error_rate * 100.0
            ));
        }
        if achieved < KEEP_UP * at.rate {
            broke.push(format!(
                "achieved {} under {:.0}% of {} offered",
                rate_text(achieved),
                KEEP_UP * 100.0,
                rate_text(at.rate)
            ));
        }
        SweepPoint {
            step,
            stage: at.stage,
            offered: at.rate,
            achieved,
            counts: result.counts.clone(),
            error_rate: result.error_rate,
            late: result.late,
            dropped: result.dropped,
            p50: pick("p50"),
            p99: pick("p99"),
            p99_us,
            meets_slo: broke.is_empty(),
            broke,
            histogram: result.latency.histogram.clone(),
        }
    }

    /// `337.5/s: achieved 337.1/s, p50 10.2 ms, p99 12.9 ms [12.1, 14.0], errors 0.00%: meets the SLO`.
    pub fn line(&self) -> String {
        let verdict = if self.meets_slo {
            "meets the SLO".to_string()
        } else {
            format!("breaks the SLO ({})", self.broke.join("; "))
        };
        format!(
            "{} {}: achieved {}, p50 {}, p99 {}, errors {:.2}%: {verdict}",
            self.stage.as_str(),
            rate_text(self.offered),
            rate_text(self.achieved),
            percentile_text(&self.p50),
            percentile_text(&self.p99),
            self.error_rate * 100.0
        )
    }
}

fn ms_text(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn percentile_text(p: &Percentile) -> String {
    match p {
        Percentile::Estimate {
            value, low, high, ..
        } => format!(
            "{} [{:.2}, {:.2}]",
            ms_text(*value as f64),
            *low as f64 / 1000.0,
            *high as f64 / 1000.0
        ),
        Percentile::Insufficient { insufficient, .. } => insufficient.clone(),
    }
}

/// The knee of latency against load, with its bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// The offered rate at the knee (one of the sweep points), if the curve has one.
    pub rate: Option<f64>,
    /// The interval's ends (sweep points), at `level`.
    pub low: Option<f64>,
    pub high: Option<f64>,
    pub resolved: bool,
    /// Why it is not resolved, when it is not.
    pub reason: Option<String>,
    /// The offered rates the knee was sought over (normalised to [0, 1]).
    pub range: (f64, f64),
    pub level: f64,
    pub replicates: usize,
    /// Replicates that found a knee.
    pub found: usize,
}

impl Knee {
    fn unresolved(range: (f64, f64), reason: String) -> Knee {
        Knee {
            rate: None,
            low: None,
            high: None,
            resolved: false,
            reason: Some(reason),
            range,
            level: LEVEL,
            replicates: 0,
            found: 0,
        }
    }

    /// `knee 506/s [450/s, 534/s]` or `knee not resolved (why)`.
    pub fn line(&self) -> String {
        match (self.rate, self.low, self.high) {
            (Some(rate), Some(low), Some(high)) if self.resolved => format!(
                "knee {} [{}, {}]",
                rate_text(rate),
                rate_text(low),
                rate_text(high)
            ),
            _ => format!(
                "knee not resolved ({})",
                self.reason.as_deref().unwrap_or("no knee")
            ),
        }
    }
}

/// A point's latencies by rank: its p99 and the binomial rank draws of the bootstrap.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// (samples up to and including this bucket, the bucket's highest value).
    cumulative: Vec<(u64, u64)>,
    total: u64,
}

impl Ranked {
    pub fn new(histogram: &Histogram<u64>) -> Ranked {
        let mut seen = 0;
        let cumulative = histogram
            .iter_recorded()
            .map(|b| {
                seen += b.count_at_value();
                (seen, histogram.highest_equivalent(b.value_iterated_to()))
            })
            .collect();
        Ranked {
            cumulative,
            total: seen,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The value of the sample at a 1-based rank.
    fn at_rank(&self, rank: u64) -> u64 {
        let i = self.cumulative.partition_point(|(seen, _)| *seen < rank);
        self.cumulative
            .get(i)
            .or(self.cumulative.last())
            .map_or(0, |(_, v)| *v)
    }

    /// The q-quantile, as the histogram reads it (the sample at rank ceil(q n)).
    pub fn quantile(&self, q: f64) -> u64 {
        self.at_rank(((q * self.total as f64).ceil() as u64).max(1))
    }

    /// The q-quantile of a bootstrap resample: the sample at rank 1 + Binomial(n, q).
    fn draw(&self, q: f64, rng: &mut ChaCha8Rng) -> u64 {
        let rank = (binomial(self.total, q, rng) + 1).min(self.total);
        self.at_rank(rank)
    }
}

/// An exact Binomial(n, p) draw (rand_distr's: BTPE for large n p, inversion below).
fn binomial<R: Rng + ?Sized>(n: u64, p: f64, rng: &mut R) -> u64 {
    // p is a quantile in [0, 1]; any other would have no draw, and the rank its mean.
    match Binomial::new(n, p) {
        Ok(draw) => draw.sample(rng),
        Err(_) => (n as f64 * p.clamp(0.0, 1.0)).round() as u64,
    }
}

/// Kneedle (Satopää et al. 2011) on a convex increasing curve already normalised: the
/// index of the knee, or `None` when the curve does not bend. The difference curve is
/// x - y (how far the curve lies under the diagonal); the knee is its first local maximum
/// after which it falls below that maximum minus `sensitivity` times the mean x step.
pub fn kneedle(x: &[f64], y: &[f64], sensitivity: f64) -> Option<usize> {
    let n = x.len().min(y.len());
    if n < 3 {
        return None;
    }
    let d: Vec<f64> = x.iter().zip(y).map(|(x, y)| x - y).collect();
    let mean_step = (x[n - 1] - x[0]).abs() / (n - 1) as f64;
    let mut candidate: Option<(usize, f64)> = None;
    for i in 1..n {
        let local_max = i + 1 < n && d[i] >= d[i - 1] && d[i] >= d[i + 1] && d[i] > 0.0;
        if local_max {
            candidate = Some((i, d[i] - sensitivity * mean_step));
            continue;
        }
        if let Some((at, threshold)) = candidate
            && d[i] < threshold
        {
            return Some(at);
        }
    }
    None
}

/// One point of a latency curve: its offered rate and its latencies by rank.
pub struct CurvePoint<'a> {
    pub offered: f64,
    pub latency: &'a Ranked,
}

/// The log p99 range of the points whose offered rate is within `range`.
pub fn log_p99_range(points: &[CurvePoint], range: (f64, f64)) -> Option<(f64, f64)> {
    let logs: Vec<f64> = points
        .iter()
        .filter(|p| within(p.offered, range) && !p.latency.is_empty())
        .map(|p| (p.latency.quantile(0.99).max(1) as f64).ln())
        .collect();
    let low = logs.iter().copied().reduce(f64::min)?;
    let high = logs.iter().copied().reduce(f64::max)?;
    Some((low, high))
}

fn within(rate: f64, (low, high): (f64, f64)) -> bool {
    let slack = 1e-9 * high.abs().max(1.0);
    rate >= low - slack && rate <= high + slack
}

/// The knee of log p99 against the offered rate, over the points within `range`
/// (normalised to [0, 1] by `range` and by `log_range`, fixed for every replicate, so that
/// two runs normalised alike compare), with a bootstrap interval: each replicate redraws
/// every point's p99 from its histogram and finds the knee again.
pub fn knee(points: &[CurvePoint], range: (f64, f64), log_range: (f64, f64)) -> Knee {
    let mut used: Vec<&CurvePoint> = points
        .iter()
        .filter(|p| within(p.offered, range) && !p.latency.is_empty())
        .collect();
    used.sort_by(|a, b| a.offered.total_cmp(&b.offered));
    if used.len() < 3 {
        return Knee::unresolved(
            range,
            format!(
                "{} sweep points with responses in {} to {}: a knee needs at least 3",
                used.len(),
                rate_text(range.0),
                rate_text(range.1)
            ),
        );
    }
    let (x_span, y_span) = (range.1 - range.0, log_range.1 - log_range.0);
    if x_span <= 0.0 || y_span <= 1e-9 {
        return Knee::unresolved(range, "p99 does not change over the sweep".to_string());
    }
    let xs: Vec<f64> = used
        .iter()
        .map(|p| (p.offered - range.0) / x_span)
        .collect();
    let normalise = |us: u64| ((us.max(1) as f64).ln() - log_range.0) / y_span;
    let ys: Vec<f64> = used
        .iter()
        .map(|p| normalise(p.latency.quantile(0.99)))
        .collect();
    let Some(at) = kneedle(&xs, &ys, SENSITIVITY) else {
        return Knee::unresolved(
            range,
            "no knee: p99 does not bend upwards over the sweep".to_string(),
        );
    };
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut knees = Vec::with_capacity(REPLICATES);
    let mut ys = vec![0.0; used.len()];
    for _ in 0..REPLICATES {
        for (y, p) in ys.iter_mut().zip(&used) {
            *y = normalise(p.latency.draw(0.99, &mut rng));
        }
        if let Some(i) = kneedle(&xs, &ys, SENSITIVITY) {
            knees.push(used[i].offered);
        }
    }
    knees.sort_by(f64::total_cmp);
    let tail = (1.0 - LEVEL) / 2.0;
    let pick = |share: f64| {
        let i = ((share * knees.len() as f64) as usize).min(knees.len().saturating_sub(1));
        knees.get(i).copied()
    };
    let (low, high) = (pick(tail), pick(1.0 - tail));
    // Kneedle needs a point on either side of a knee: the lowest knee it can find is the
    // second point, the highest the last but one. An interval reaching either may hide a
    // knee outside the sweep.
    let (first, last) = (used[1].offered, used[used.len() - 2].offered);
    let kneeless = 1.0 - knees.len() as f64 / REPLICATES as f64;
    let reason = if kneeless > MAX_KNEELESS {
        Some(format!(
            "{:.0}% of the bootstrap replicates find no knee",
            kneeless * 100.0
        ))
    } else if low.is_some_and(|l| l <= first) || high.is_some_and(|h| h >= last) {
        Some(format!(
            "the interval touches an end of the sweep (a knee needs a point either side; {} to {} can tell): the knee may lie outside it",
            rate_text(first),
            rate_text(last)
        ))
    } else {
        None
    };
    Knee {
        rate: Some(used[at].offered),
        low,
        high,
        resolved: reason.is_none(),
        reason,
        range,
        level: LEVEL,
        replicates: REPLICATES,
        found: knees.len(),
    }
}

/// The result of a capacity run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityResult {
    pub slo: Slo,
    /// The spec's floor (requests per second), when it gives one.
    pub floor: Option<f64>,
    /// The highest offered rate whose step met the SLO (and kept up); none when no step did.
    pub max_rate_meeting_slo: Option<f64>,
    pub stopped_because: String,
    /// Every step, in the order run.
    pub points: Vec<SweepPoint>,
    pub knee: Knee,
    /// Seconds each step held its rate and the first seconds of it not judged.
    pub step_seconds: f64,
    pub discard_seconds: f64,
    pub notes: Vec<String>,
}

/// The points' histograms read for the knee: (offered rate, ranked latencies).
pub fn ranked_points(points: &[SweepPoint]) -> Vec<(f64, Ranked)> {
    points
        .iter()
        .filter_map(|p| Some((p.offered, Ranked::new(&decode(&p.histogram).ok()?))))
        .collect()
}

/// Ranked points as the knee reads them.
pub fn curve(ranked: &[(f64, Ranked)]) -> Vec<CurvePoint<'_>> {
    ranked
        .iter()
        .map(|(offered, latency)| CurvePoint {
            offered: *offered,
            latency,
        })
        .collect()
}

/// The knee of one run's points over their own range.
pub fn knee_of(points: &[SweepPoint]) -> Knee {
    let ranked = ranked_points(points);
    let curve = curve(&ranked);
    let low = points.iter().map(|p| p.offered).reduce(f64::min);
    let high = points.iter().map(|p| p.offered).reduce(f64::max);
    let (Some(low), Some(high)) = (low, high) else {
        return Knee::unresolved((0.0, 0.0), "no sweep points".to_string());
    };
    match log_p99_range(&curve, (low, high)) {
        Some(log_range) => knee(&curve, (low, high), log_range),
        None => Knee::unresolved((low, high), "no step got a response".to_string()),
    }
}

impl CapacityResult {
    /// The result in a few lines for people.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "SLO: p99 <= {}, error rate <= {:.2}%; steps of {:.2} s, the first {:.2} s not judged",
                ms_text(self.slo.p99_us),
                self.slo.error_rate * 100.0,
                self.step_seconds,
                self.discard_seconds
            ),
            match self.max_rate_meeting_slo {
                Some(rate) => format!("max rate meeting the SLO: {}", rate_text(rate)),
                None => "max rate meeting the SLO: none (no step met it)".to_string(),
            },
        ];
        if let Some(floor) = self.floor {
            lines.push(format!("floor: {}", rate_text(floor)));
        }
        lines.push(self.knee.line());
        lines.push(format!("stopped: {}", self.stopped_because));
        lines.extend(
            self.points
                .iter()
                .map(|p| format!("step {}: {}", p.step, p.line())),
        );
        lines.extend(self.notes.iter().cloned());
        lines
    }
}

#[cfg(test)]
mod tests;

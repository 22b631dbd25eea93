//! A `faults` run's spec: an experiment in the Chaos Toolkit's shape.
//!
//! ```json
//! {"title": "...", "description": "...",
//!  "steady-state-hypothesis": {"title": "...", "probes": [ACTIVITY...]},
//!  "method": [ACTIVITY...], "rollbacks": [ACTIVITY...]}
//! ```
//!
//! An activity is `{type: probe|action, name, provider, tolerance, pauses: {before, after}}`
//! (pauses in seconds). Providers:
//! - `{"type": "iohr", "fault": "network", ..., "duration": "30s"}`: a [`Fault`] (an action),
//!   held for `duration` (its deadline; default 60 s, at most
//!   [`MAX_FAULT_DURATION`](super::fault::MAX_FAULT_DURATION));
//! - `{"type": "http", "path": "/health" | "url": "http://...", "method", "headers",
//!   "timeout", "expected_status"}`: the Chaos Toolkit's HTTP provider; its output is the
//!   status, the latency and the body (for tolerances only: the journal keeps status and
//!   latency, never the body);
//! - `{"type": "iohr", "probe": "load", "rate": 50, "duration": "2s", "path": "/"}`: a short
//!   open-model burst; its output is `p99_ms`, `error_rate` and `requests`.
//!
//! `configuration` and `secrets` (see [`vars`]) are substituted into `${name}` in
//! providers as the Chaos Toolkit does ([`substitute`]): literal configuration when the
//! experiment is read; a provider naming an `env` value is kept as written
//! ([`Provider::Deferred`]) until the agent resolves it ([`Experiment::resolve`]).
//!
//! Rollbacks differ from the Chaos Toolkit's on purpose: every applied fault is undone by
//! the agent itself (newest first), so `rollbacks` only lists extra actions (HTTP calls)
//! run after those undos. A Chaos Toolkit experiment file whose activities use these
//! providers is accepted as it is; anything else is refused with the field named.

mod fields;
mod parse;
mod provider;
mod resolve;
pub mod substitute;
pub mod vars;

pub use resolve::{MASK, Mask, Resolved};
pub use vars::{ConfigValue, Vars};

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::fault::Fault;
use super::tolerance::Tolerance;

/// A fault's deadline when its action names no `duration`.
pub const DEFAULT_FAULT_DURATION: Duration = Duration::from_secs(60);
/// An HTTP probe's timeout when it names none.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest load burst a probe may send.
pub const MAX_LOAD_PROBE_DURATION: Duration = Duration::from_secs(60);
/// The longest pause before or after an activity.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);
/// The most activities in each of the hypothesis, the method and the rollbacks.
pub const MAX_ACTIVITIES: usize = 100;

#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    pub title: String,
    pub description: String,
    pub tags: Vec<String>,
    pub hypothesis: Option<Hypothesis>,
    pub method: Vec<Activity>,
    /// Extra actions run after the agent has undone every applied fault.
    pub rollbacks: Vec<Activity>,
    /// The `configuration` and `secrets` blocks, as declared (never a value from the
    /// environment).
    pub vars: Vars,
    /// The share of its probes' requests sent sampled ([`crate::trace`]); not a Chaos
    /// Toolkit field.
    pub trace_sample: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    pub title: String,
    /// Probes, each with a tolerance.
    pub probes: Vec<Activity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivityType {
    Probe,
    Action,
}

impl Experiment {
    /// The faults its method applies, by name (`network`, `http`, ...), in order, each
    /// once: what an audit line names.
    pub fn fault_names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        for activity in &self.method {
            if let Provider::Fault(action) = &activity.provider {
                let name = action.fault.name();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub kind: ActivityType,
    pub name: String,
    pub provider: Provider,
    /// Required in the hypothesis; decides whether a probe's output is steady.
    pub tolerance: Option<Tolerance>,
    pub pauses: Pauses,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pauses {
    pub before: Duration,
    pub after: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Provider {
    Fault(FaultAction),
    Http(HttpProbe),
    Load(LoadProbe),
    /// A provider naming an `env` configuration value or a secret, as written (with the
    /// literal configuration substituted): only the agent's environment completes it, and
    /// [`Experiment::resolve`] reads it then. Nothing runs it as it is.
    Deferred(Value),
}

/// A fault and how long it holds: its deadline, which the agent enforces.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultAction {
    pub fault: Fault,
    pub duration: Duration,
}

/// Where an HTTP probe goes: a path on the run's target, or (in a Chaos Toolkit file) a
/// URL, which must name the run's target (checked by the agent, which knows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpLocation {
    Path(String),
    Url(String),
}

impl HttpLocation {
    /// The path (with any query) this location names on the run's `target`; a URL must
    /// start with the target (`http://127.0.0.1:8080/api` + `/health`).
    pub fn path_on(&self, target: &str) -> Result<String, String> {
        match self {
            HttpLocation::Path(p) => Ok(p.clone()),
            HttpLocation::Url(url) => {
                // Both in canonical form: `HTTP://Host:80/x` is on the target `http://host`.
                let target = crate::target::with_canonical_origin(target);
                let target = target.trim_end_matches('/');
                let canonical = crate::target::with_canonical_origin(url);
                let rest = canonical
                    .strip_prefix(target)
                    .filter(|rest| rest.is_empty() || rest.starts_with(['/', '?']))
                    .ok_or_else(|| format!("url {url} is not on the run's target {target}"))?;
                Ok(match rest {
                    "" => "/".to_string(),
                    r if r.starts_with('?') => format!("/{r}"),
                    r => r.to_string(),
                })
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct HttpProbe {
    pub location: HttpLocation,
    pub method: String,
    /// Credential-named values are `${env:NAME}` (see [`crate::request`]).
    pub headers: BTreeMap<String, String>,
    pub timeout: Duration,
    /// The Chaos Toolkit's `expected_status`: another status fails the activity.
    pub expected_status: Option<u16>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoadProbe {
    pub rate: f64,
    pub duration: Duration,
    pub path: String,
    pub method: String,
    pub headers: BTreeMap<String, String>,
}

/// What a probe measured. The body is for tolerances only and never stored.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeOutput {
    Http {
        status: u16,
        latency_ms: f64,
        body: String,
    },
    Load {
        /// `None` when the burst had no answered request.
        p99_ms: Option<f64>,
        error_rate: f64,
        requests: u64,
        /// The burst's corrected latencies (an encoded HDR histogram, as load results keep
        /// them): what compare judges the p99 with an interval over.
        histogram: Option<String>,
    },
}

impl ProbeOutput {
    /// What tolerances judge: for HTTP `{status, latency_ms, body}`.
    pub fn for_tolerance(&self) -> Value {
        match self {
            ProbeOutput::Http {
                status,
                latency_ms,
                body,
            } => json!({"status": status, "latency_ms": latency_ms, "body": body}),
            ProbeOutput::Load {
                p99_ms,
                error_rate,
                requests,
                ..
            } => json!({"p99_ms": p99_ms, "error_rate": error_rate, "requests": requests}),
        }
    }

    /// What the journal keeps: never a body.
    pub fn for_journal(&self) -> Value {
        match self {
            ProbeOutput::Http {
                status, latency_ms, ..
            } => json!({"status": status, "latency_ms": latency_ms}),
            ProbeOutput::Load {
                p99_ms,
                error_rate,
                requests,
                histogram,
            } => json!({
                "p99_ms": p99_ms, "error_rate": error_rate, "requests": requests,
                "histogram": histogram,
            }),
        }
    }
}

impl Serialize for Experiment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Experiment {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Experiment, D::Error> {
        let value = Value::deserialize(d)?;
        Experiment::from_json(&value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;

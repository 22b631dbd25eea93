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
//!   held for `duration` (its deadline; default 60 s, at most [`MAX_FAULT_DURATION`]);
//! - `{"type": "http", "path": "/health" | "url": "http://...", "method", "headers",
//!   "timeout", "expected_status"}`: the Chaos Toolkit's HTTP provider; its output is the
//!   status, the latency and the body (for tolerances only: the journal keeps status and
//!   latency, never the body);
//! - `{"type": "iohr", "probe": "load", "rate": 50, "duration": "2s", "path": "/"}`: a short
//!   open-model burst; its output is `p99_ms`, `error_rate` and `requests`.
//!
//! Rollbacks differ from the Chaos Toolkit's on purpose: every applied fault is undone by
//! the agent itself (newest first), so `rollbacks` only lists extra actions (HTTP calls)
//! run after those undos. A Chaos Toolkit experiment file whose activities use these
//! providers is accepted as it is; anything else is refused with the field named.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::load::{LoadPlan, LoadSpec, MAX_RATE, MAX_TIMEOUT, Model, Operation, parse_duration};
use crate::request::{SpecError, spec_error, validate_request};

use super::fault::{Fault, MAX_FAULT_DURATION};
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
            other => other.for_journal(),
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
            } => json!({"p99_ms": p99_ms, "error_rate": error_rate, "requests": requests}),
        }
    }
}

impl Experiment {
    /// Reads an experiment (ours, or a Chaos Toolkit file using our providers).
    pub fn from_json(value: &Value) -> Result<Experiment, SpecError> {
        let map = object("experiment", value)?;
        for key in map.keys() {
            match key.as_str() {
                "title"
                | "description"
                | "tags"
                | "steady-state-hypothesis"
                | "method"
                | "rollbacks" => {}
                // Descriptive Chaos Toolkit fields: read and dropped.
                "version" | "contributions" | "extensions" => {}
                "configuration" | "secrets" | "controls" | "runtime" => {
                    return Err(spec_error(
                        key.clone(),
                        "not supported by iohr: probes and actions read their values from the experiment, credentials from ${env:NAME} headers",
                    ));
                }
                _ => return Err(spec_error(key.clone(), "unknown field")),
            }
        }
        let title = text(map, "", "title")?;
        if title.trim().is_empty() {
            return Err(spec_error("title", "must not be empty"));
        }
        let description = text(map, "", "description")?;
        let tags = match map.get("tags") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some(s) if !s.is_empty() => Ok(s.to_string()),
                    _ => Err(spec_error(
                        format!("tags[{i}]"),
                        "must be a non-empty string",
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(spec_error("tags", "must be a list of strings")),
        };
        let hypothesis = match map.get("steady-state-hypothesis") {
            None | Some(Value::Null) => None,
            Some(h) => Some(Hypothesis::from_json(h)?),
        };
        let method = match map.get("method") {
            Some(m) => activities("method", m)?,
            None => {
                return Err(spec_error(
                    "method",
                    "is required (a list of actions and probes, possibly empty)",
                ));
            }
        };
        let rollbacks = match map.get("rollbacks") {
            None | Some(Value::Null) => Vec::new(),
            Some(r) => activities("rollbacks", r)?,
        };
        for (i, a) in method.iter().enumerate() {
            if let Provider::Fault(_) = a.provider
                && a.kind != ActivityType::Action
            {
                return Err(spec_error(
                    format!("method[{i}].type"),
                    "a fault is an action, not a probe",
                ));
            }
        }
        for (i, a) in rollbacks.iter().enumerate() {
            if let Provider::Fault(_) = a.provider {
                return Err(spec_error(
                    format!("rollbacks[{i}].provider"),
                    "a fault in the rollbacks would be left applied; every applied fault is undone by the agent, and rollbacks list only extra actions",
                ));
            }
        }
        Ok(Experiment {
            title,
            description,
            tags,
            hypothesis,
            method,
            rollbacks,
        })
    }

    /// Reads an experiment file's text.
    pub fn parse(text: &str) -> Result<Experiment, SpecError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| spec_error("experiment", format!("not JSON: {e}")))?;
        Experiment::from_json(&value)
    }

    /// The experiment in the shape [`Experiment::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("title".into(), json!(self.title));
        map.insert("description".into(), json!(self.description));
        if !self.tags.is_empty() {
            map.insert("tags".into(), json!(self.tags));
        }
        if let Some(h) = &self.hypothesis {
            map.insert(
                "steady-state-hypothesis".into(),
                json!({"title": h.title, "probes": h.probes.iter().map(Activity::to_json).collect::<Vec<_>>()}),
            );
        }
        map.insert(
            "method".into(),
            Value::Array(self.method.iter().map(Activity::to_json).collect()),
        );
        map.insert(
            "rollbacks".into(),
            Value::Array(self.rollbacks.iter().map(Activity::to_json).collect()),
        );
        Value::Object(map)
    }

    /// Every fault of the method, with the field that names it (`method[2]`).
    pub fn faults(&self) -> impl Iterator<Item = (String, &FaultAction)> {
        self.method
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match &a.provider {
                Provider::Fault(f) => Some((format!("method[{i}]"), f)),
                _ => None,
            })
    }
}

impl Experiment {
    /// Refuses an HTTP provider whose `url` is not on the run's target (the agent would
    /// refuse it when it runs; this says so before the run is stored).
    pub fn check_target(&self, target: &str) -> Result<(), SpecError> {
        let mut pending: Vec<(String, &Activity)> = Vec::new();
        if let Some(h) = &self.hypothesis {
            for (i, a) in h.probes.iter().enumerate() {
                pending.push((format!("steady-state-hypothesis.probes[{i}]"), a));
            }
        }
        for (i, a) in self.method.iter().enumerate() {
            pending.push((format!("method[{i}]"), a));
        }
        for (i, a) in self.rollbacks.iter().enumerate() {
            pending.push((format!("rollbacks[{i}]"), a));
        }
        while let Some((field, activity)) = pending.pop() {
            if let Provider::Http(h) = &activity.provider {
                h.location
                    .path_on(target)
                    .map_err(|e| spec_error(format!("{field}.provider.url"), e))?;
            }
            if let Some(Tolerance::Probe(inner)) = &activity.tolerance {
                pending.push((format!("{field}.tolerance"), inner));
            }
        }
        Ok(())
    }
}

impl Hypothesis {
    fn from_json(value: &Value) -> Result<Hypothesis, SpecError> {
        let field = "steady-state-hypothesis";
        let map = object(field, value)?;
        if let Some(k) = map
            .keys()
            .find(|k| !["title", "probes"].contains(&k.as_str()))
        {
            return Err(spec_error(format!("{field}.{k}"), "unknown field"));
        }
        let title = text(map, field, "title")?;
        let probes = match map.get("probes") {
            None => Vec::new(),
            Some(p) => activities(&format!("{field}.probes"), p)?,
        };
        for (i, p) in probes.iter().enumerate() {
            let at = format!("{field}.probes[{i}]");
            if p.kind != ActivityType::Probe {
                return Err(spec_error(
                    format!("{at}.type"),
                    "the hypothesis holds probes only",
                ));
            }
            if p.tolerance.is_none() {
                return Err(spec_error(
                    format!("{at}.tolerance"),
                    "a hypothesis probe needs a tolerance",
                ));
            }
        }
        Ok(Hypothesis { title, probes })
    }
}

impl Activity {
    /// Reads one activity at `field`; `depth` counts probe tolerances around it.
    pub fn from_json(field: &str, value: &Value, depth: usize) -> Result<Activity, SpecError> {
        let map = object(field, value)?;
        for key in map.keys() {
            match key.as_str() {
                "type" | "name" | "provider" | "tolerance" | "pauses" => {}
                "ref" | "background" | "controls" | "timeout" => {
                    return Err(spec_error(
                        format!("{field}.{key}"),
                        "not supported by iohr (put timeouts in the provider)",
                    ));
                }
                _ => return Err(spec_error(format!("{field}.{key}"), "unknown field")),
            }
        }
        let kind = match map.get("type").and_then(Value::as_str) {
            Some("probe") => ActivityType::Probe,
            Some("action") => ActivityType::Action,
            _ => {
                return Err(spec_error(
                    format!("{field}.type"),
                    "must be \"probe\" or \"action\"",
                ));
            }
        };
        let name = text(map, field, "name")?;
        if name.trim().is_empty() {
            return Err(spec_error(format!("{field}.name"), "must not be empty"));
        }
        let provider = Provider::from_json(
            &format!("{field}.provider"),
            map.get("provider").unwrap_or(&Value::Null),
        )?;
        if let (Provider::Fault(_), ActivityType::Probe) = (&provider, kind) {
            return Err(spec_error(
                format!("{field}.type"),
                "a fault is an action, not a probe",
            ));
        }
        let tolerance = match map.get("tolerance") {
            None => None,
            Some(t) => Some(Tolerance::from_json(
                &format!("{field}.tolerance"),
                t,
                depth,
            )?),
        };
        if tolerance.is_some() && kind == ActivityType::Action {
            return Err(spec_error(
                format!("{field}.tolerance"),
                "only probes have tolerances",
            ));
        }
        let pauses = match map.get("pauses") {
            None => Pauses::default(),
            Some(p) => {
                let at = format!("{field}.pauses");
                let pm = object(&at, p)?;
                if let Some(k) = pm
                    .keys()
                    .find(|k| !["before", "after"].contains(&k.as_str()))
                {
                    return Err(spec_error(format!("{at}.{k}"), "unknown field"));
                }
                Pauses {
                    before: seconds(&format!("{at}.before"), pm.get("before"), MAX_PAUSE)?,
                    after: seconds(&format!("{at}.after"), pm.get("after"), MAX_PAUSE)?,
                }
            }
        };
        Ok(Activity {
            kind,
            name,
            provider,
            tolerance,
            pauses,
        })
    }

    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("type".into(), json!(self.kind));
        map.insert("name".into(), json!(self.name));
        map.insert("provider".into(), self.provider.to_json());
        if let Some(t) = &self.tolerance {
            map.insert("tolerance".into(), t.to_json());
        }
        if self.pauses != Pauses::default() {
            map.insert(
                "pauses".into(),
                json!({"before": self.pauses.before.as_secs_f64(), "after": self.pauses.after.as_secs_f64()}),
            );
        }
        Value::Object(map)
    }
}

impl Provider {
    fn from_json(field: &str, value: &Value) -> Result<Provider, SpecError> {
        let map = object(field, value)?;
        match map.get("type").and_then(Value::as_str) {
            Some("http") => HttpProbe::from_json(field, map).map(Provider::Http),
            Some("iohr") if map.contains_key("fault") => {
                let mut fault_fields = map.clone();
                fault_fields.remove("type");
                let duration = match fault_fields.remove("duration") {
                    None => DEFAULT_FAULT_DURATION,
                    Some(d) => duration(&format!("{field}.duration"), &d)?,
                };
                if duration.is_zero() || duration > MAX_FAULT_DURATION {
                    return Err(spec_error(
                        format!("{field}.duration"),
                        format!(
                            "must be above zero and at most {}",
                            humantime::format_duration(MAX_FAULT_DURATION)
                        ),
                    ));
                }
                let fault: Fault = serde_json::from_value(Value::Object(fault_fields))
                    .map_err(|e| spec_error(field, format!("not a fault: {e}")))?;
                fault.validate(field)?;
                Ok(Provider::Fault(FaultAction { fault, duration }))
            }
            Some("iohr") => match map.get("probe").and_then(Value::as_str) {
                Some("load") => LoadProbe::from_json(field, map).map(Provider::Load),
                _ => Err(spec_error(
                    field,
                    "an iohr provider names a \"fault\" or \"probe\": \"load\"",
                )),
            },
            Some(other @ ("python" | "process")) => Err(spec_error(
                format!("{field}.type"),
                format!(
                    "the Chaos Toolkit's {other:?} provider is not supported by iohr; use \"http\" or \"iohr\""
                ),
            )),
            _ => Err(spec_error(
                format!("{field}.type"),
                "must be \"http\" or \"iohr\"",
            )),
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            Provider::Fault(f) => {
                let mut v = serde_json::to_value(&f.fault).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut v {
                    m.insert("type".into(), json!("iohr"));
                    m.insert(
                        "duration".into(),
                        json!(humantime::format_duration(f.duration).to_string()),
                    );
                }
                v
            }
            Provider::Http(h) => {
                let mut m = Map::new();
                m.insert("type".into(), json!("http"));
                match &h.location {
                    HttpLocation::Path(p) => m.insert("path".into(), json!(p)),
                    HttpLocation::Url(u) => m.insert("url".into(), json!(u)),
                };
                m.insert("method".into(), json!(h.method));
                if !h.headers.is_empty() {
                    m.insert("headers".into(), json!(h.headers));
                }
                m.insert("timeout".into(), json!(h.timeout.as_secs_f64()));
                if let Some(s) = h.expected_status {
                    m.insert("expected_status".into(), json!(s));
                }
                Value::Object(m)
            }
            Provider::Load(l) => {
                let mut m = Map::new();
                m.insert("type".into(), json!("iohr"));
                m.insert("probe".into(), json!("load"));
                m.insert("rate".into(), json!(l.rate));
                m.insert(
                    "duration".into(),
                    json!(humantime::format_duration(l.duration).to_string()),
                );
                m.insert("path".into(), json!(l.path));
                m.insert("method".into(), json!(l.method));
                if !l.headers.is_empty() {
                    m.insert("headers".into(), json!(l.headers));
                }
                Value::Object(m)
            }
        }
    }
}

impl HttpProbe {
    fn from_json(field: &str, map: &Map<String, Value>) -> Result<HttpProbe, SpecError> {
        let allowed = [
            "type",
            "url",
            "path",
            "method",
            "headers",
            "timeout",
            "expected_status",
        ];
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(spec_error(format!("{field}.{k}"), "not supported here"));
        }
        let method = optional_text(map, field, "method")?.unwrap_or_else(|| "GET".into());
        let headers = headers(field, map)?;
        let location = match (map.get("path"), map.get("url")) {
            (Some(Value::String(p)), None) => HttpLocation::Path(p.clone()),
            (None, Some(Value::String(u))) => {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(spec_error(
                        format!("{field}.url"),
                        "must be an http:// URL on the run's target",
                    ));
                }
                HttpLocation::Url(u.clone())
            }
            _ => {
                return Err(spec_error(
                    field,
                    "names a \"path\" on the run's target or a \"url\" (one of them)",
                ));
            }
        };
        let path_for_checks = match &location {
            HttpLocation::Path(p) => p.as_str(),
            HttpLocation::Url(_) => "/",
        };
        validate_request(field, &method, path_for_checks, &headers)?;
        let timeout = match map.get("timeout") {
            None => DEFAULT_PROBE_TIMEOUT,
            // The Chaos Toolkit's [connect, read]: together they bound the request.
            Some(Value::Array(pair)) if pair.len() == 2 => {
                seconds(&format!("{field}.timeout"), pair.first(), MAX_TIMEOUT)?
                    + seconds(&format!("{field}.timeout"), pair.get(1), MAX_TIMEOUT)?
            }
            Some(t) => duration(&format!("{field}.timeout"), t)?,
        };
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(spec_error(
                format!("{field}.timeout"),
                format!("must be above zero and at most {} s", MAX_TIMEOUT.as_secs()),
            ));
        }
        let expected_status = match map.get("expected_status") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|s| (100..=599).contains(s))
                    .map(|s| s as u16)
                    .ok_or_else(|| {
                        spec_error(format!("{field}.expected_status"), "must be an HTTP status")
                    })?,
            ),
        };
        Ok(HttpProbe {
            location,
            method,
            headers,
            timeout,
            expected_status,
        })
    }
}

impl LoadProbe {
    fn from_json(field: &str, map: &Map<String, Value>) -> Result<LoadProbe, SpecError> {
        let allowed = [
            "type", "probe", "rate", "duration", "path", "method", "headers",
        ];
        if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(spec_error(format!("{field}.{k}"), "unknown field"));
        }
        let rate = map
            .get("rate")
            .and_then(Value::as_f64)
            .filter(|r| *r > 0.0 && *r <= MAX_RATE)
            .ok_or_else(|| {
                spec_error(
                    format!("{field}.rate"),
                    format!("must be requests per second, above 0 and at most {MAX_RATE}"),
                )
            })?;
        let duration = match map.get("duration") {
            Some(d) => duration(&format!("{field}.duration"), d)?,
            None => return Err(spec_error(format!("{field}.duration"), "is required")),
        };
        if duration.is_zero() || duration > MAX_LOAD_PROBE_DURATION {
            return Err(spec_error(
                format!("{field}.duration"),
                format!(
                    "must be above zero and at most {} s",
                    MAX_LOAD_PROBE_DURATION.as_secs()
                ),
            ));
        }
        let probe = LoadProbe {
            rate,
            duration,
            path: optional_text(map, field, "path")?.unwrap_or_else(|| "/".into()),
            method: optional_text(map, field, "method")?.unwrap_or_else(|| "GET".into()),
            headers: headers(field, map)?,
        };
        validate_request(field, &probe.method, &probe.path, &probe.headers)?;
        probe.plan().map_err(|e| spec_error(field, e.message))?;
        Ok(probe)
    }

    /// The burst as a load spec: open model, one operation, no warm-up.
    pub fn load_spec(&self) -> LoadSpec {
        LoadSpec {
            operations: vec![Operation {
                name: None,
                method: self.method.clone(),
                path: self.path.clone(),
                headers: self.headers.clone(),
                body: None,
                weight: 1,
            }],
            model: Model::Open,
            rate: Some(self.rate),
            stages: Vec::new(),
            connections: None,
            duration: Some(humantime::format_duration(self.duration).to_string()),
            warmup: None,
            timeout: None,
            http: Default::default(),
            streams: None,
            thresholds: Vec::new(),
            abort_on_fail: false,
        }
    }

    pub fn plan(&self) -> Result<LoadPlan, SpecError> {
        self.load_spec().plan()
    }
}

fn object<'v>(field: &str, value: &'v Value) -> Result<&'v Map<String, Value>, SpecError> {
    value
        .as_object()
        .ok_or_else(|| spec_error(field, "must be an object"))
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

fn text(map: &Map<String, Value>, field: &str, key: &str) -> Result<String, SpecError> {
    optional_text(map, field, key)?.ok_or_else(|| spec_error(join(field, key), "is required"))
}

fn optional_text(
    map: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<String>, SpecError> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(spec_error(join(field, key), "must be a string")),
    }
}

fn headers(field: &str, map: &Map<String, Value>) -> Result<BTreeMap<String, String>, SpecError> {
    match map.get("headers") {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(h)) => h
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(spec_error(
                    format!("{field}.headers.{k}"),
                    "must be a string",
                )),
            })
            .collect(),
        Some(_) => Err(spec_error(format!("{field}.headers"), "must be an object")),
    }
}

fn activities(field: &str, value: &Value) -> Result<Vec<Activity>, SpecError> {
    let items = value
        .as_array()
        .ok_or_else(|| spec_error(field, "must be a list of activities"))?;
    if items.len() > MAX_ACTIVITIES {
        return Err(spec_error(
            field,
            format!("at most {MAX_ACTIVITIES} activities"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, a)| Activity::from_json(&format!("{field}[{i}]"), a, 0))
        .collect()
}

/// A number of seconds (the Chaos Toolkit's pauses and timeouts); absent is zero.
fn seconds(field: &str, value: Option<&Value>, max: Duration) -> Result<Duration, SpecError> {
    let Some(value) = value else {
        return Ok(Duration::ZERO);
    };
    let secs = value
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| spec_error(field, "must be a number of seconds"))?;
    if secs > max.as_secs_f64() {
        return Err(spec_error(
            field,
            format!("must be at most {} s", max.as_secs()),
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| spec_error(field, e.to_string()))
}

/// `"2s"`, `"1m30s"` or a number of seconds.
fn duration(field: &str, value: &Value) -> Result<Duration, SpecError> {
    match value {
        Value::String(s) => parse_duration(field, s),
        Value::Number(_) => seconds(field, Some(value), Duration::from_secs(u32::MAX as u64)),
        _ => Err(spec_error(field, "must be a duration such as \"30s\"")),
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

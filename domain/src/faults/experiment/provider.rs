//! The providers an activity runs: a fault, an HTTP call, a short load burst.

use serde_json::{Map, Value, json};

use crate::load::{LoadPlan, LoadSpec, MAX_RATE, MAX_TIMEOUT, Model, Operation};
use crate::request::{SpecError, spec_error, validate_request};

use std::collections::BTreeSet;

use super::fields::*;
use super::substitute::{references, substitute};
use super::vars::Names;
use super::*;
use crate::faults::fault::{Fault, MAX_FAULT_DURATION};

impl Provider {
    /// Reads a provider, substituting the literal configuration first; one that names an
    /// `env` value or a secret is kept as written, to be read by the agent.
    pub(super) fn from_json_in(
        field: &str,
        value: &Value,
        names: &Names,
    ) -> Result<Provider, SpecError> {
        let substituted = substitute(value, &names.literal);
        if !names.deferred.is_empty() {
            let mut refs = BTreeSet::new();
            references(&substituted, &mut refs);
            if refs.iter().any(|r| names.deferred.contains(r)) {
                let map = object(field, value)?;
                return match map.get("type").and_then(Value::as_str) {
                    Some("http" | "iohr") => Ok(Provider::Deferred(value.clone())),
                    _ => Err(spec_error(
                        format!("{field}.type"),
                        "must be \"http\" or \"iohr\"",
                    )),
                };
            }
        }
        Provider::from_json(field, &substituted)
    }

    pub(super) fn from_json(field: &str, value: &Value) -> Result<Provider, SpecError> {
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
            Provider::Deferred(raw) => raw.clone(),
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
            max_connections: None,
            duration: Some(humantime::format_duration(self.duration).to_string()),
            warmup: None,
            timeout: None,
            http: Default::default(),
            streams: None,
            thresholds: Vec::new(),
            abort_on_fail: false,
            on_agent_lost: crate::load::AgentLoss::Error,
            // The experiment's `trace_sample` replaces it where the probe runs.
            trace_sample: crate::trace::DEFAULT_SAMPLE,
        }
    }

    pub fn plan(&self) -> Result<LoadPlan, SpecError> {
        self.load_spec().plan()
    }
}

//! An experiment, its hypothesis and its activities read from (and written back to) JSON.

use serde_json::{Map, Value, json};

use crate::request::{SpecError, spec_error};

use super::fields::*;
use super::vars::Names;
use super::*;
use crate::faults::tolerance::Tolerance;

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
                | "rollbacks"
                | "trace_sample" => {}
                // Descriptive Chaos Toolkit fields: read and dropped.
                "version" | "contributions" | "extensions" => {}
                "configuration" | "secrets" => {}
                "controls" | "runtime" => {
                    return Err(spec_error(
                        key.clone(),
                        "not supported by iohr: the agent runs the lifecycle itself",
                    ));
                }
                _ => return Err(spec_error(key.clone(), "unknown field")),
            }
        }
        let vars = Vars::from_json(map.get("configuration"), map.get("secrets"))?;
        let names = Names::of(&vars);
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
            Some(h) => Some(Hypothesis::from_json(h, &names)?),
        };
        let method = match map.get("method") {
            Some(m) => activities("method", m, &names)?,
            None => {
                return Err(spec_error(
                    "method",
                    "is required (a list of actions and probes, possibly empty)",
                ));
            }
        };
        let rollbacks = match map.get("rollbacks") {
            None | Some(Value::Null) => Vec::new(),
            Some(r) => activities("rollbacks", r, &names)?,
        };
        let trace_sample = match map.get("trace_sample") {
            None => crate::trace::DEFAULT_SAMPLE,
            Some(v) => {
                let sample = v.as_f64().ok_or_else(|| {
                    spec_error("trace_sample", "must be a number between 0 and 1")
                })?;
                crate::trace::validate_sample("trace_sample", sample)?;
                sample
            }
        };
        let experiment = Experiment {
            trace_sample,
            title,
            description,
            tags,
            hypothesis,
            method,
            rollbacks,
            vars,
        };
        experiment.check_structure()?;
        Ok(experiment)
    }

    /// What only the whole experiment can tell: faults only in the method, as actions.
    /// Checked again once deferred providers are resolved.
    pub(super) fn check_structure(&self) -> Result<(), SpecError> {
        let (method, rollbacks) = (&self.method, &self.rollbacks);
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
        Ok(())
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
        self.vars.to_json(&mut map);
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
        if self.trace_sample != crate::trace::DEFAULT_SAMPLE {
            map.insert("trace_sample".into(), json!(self.trace_sample));
        }
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
    /// refuse it when it runs; this says so before the run is stored). A deferred provider
    /// is checked by the agent once it is resolved ([`Experiment::resolve`]).
    pub fn check_target(&self, target: &str) -> Result<(), SpecError> {
        let mut first = None;
        self.visit(&mut |field, activity| {
            if first.is_none()
                && let Provider::Http(h) = &activity.provider
                && let Err(e) = h.location.path_on(target)
            {
                first = Some(spec_error(format!("{field}.provider.url"), e));
            }
        });
        first.map_or(Ok(()), Err)
    }
}

impl Hypothesis {
    fn from_json(value: &Value, names: &Names) -> Result<Hypothesis, SpecError> {
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
            Some(p) => activities(&format!("{field}.probes"), p, names)?,
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
        Activity::from_json_in(field, value, depth, &Names::default())
    }

    /// [`Activity::from_json`] with the experiment's configuration and secrets.
    pub fn from_json_in(
        field: &str,
        value: &Value,
        depth: usize,
        names: &Names,
    ) -> Result<Activity, SpecError> {
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
        let provider = Provider::from_json_in(
            &format!("{field}.provider"),
            map.get("provider").unwrap_or(&Value::Null),
            names,
        )?;
        if let (Provider::Fault(_), ActivityType::Probe) = (&provider, kind) {
            return Err(spec_error(
                format!("{field}.type"),
                "a fault is an action, not a probe",
            ));
        }
        let tolerance = match map.get("tolerance") {
            None => None,
            Some(t) => Some(Tolerance::from_json_in(
                &format!("{field}.tolerance"),
                t,
                depth,
                names,
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

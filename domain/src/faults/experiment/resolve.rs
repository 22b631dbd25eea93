//! The agent's side of `configuration` and `secrets`: every value read from its
//! environment, each deferred provider substituted and read, the target rule checked
//! again, and the secrets' values kept to mask whatever the run writes.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::faults::tolerance::Tolerance;
use crate::request::{SpecError, spec_error};

use super::substitute::substitute;
use super::*;

/// What masks a secret's value.
pub const MASK: &str = "***";

/// An experiment ready to run: no provider is deferred any more.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub experiment: Experiment,
    pub mask: Mask,
}

/// The secrets' values (longest first), to mask wherever a run writes.
#[derive(Clone, Default)]
pub struct Mask {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mask({} secrets)", self.secrets.len())
    }
}

impl Mask {
    /// `text` with every secret's value replaced by [`MASK`].
    pub fn mask_str(&self, text: &str) -> String {
        mask_with(&self.secrets, text)
    }

    /// Masks every string in `value` (the journal, a frame).
    pub fn mask(&self, value: &mut Value) {
        if self.secrets.is_empty() {
            return;
        }
        match value {
            Value::String(s)
                if self
                    .secrets
                    .iter()
                    .any(|secret| s.contains(secret.as_str())) =>
            {
                *s = self.mask_str(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.mask(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.mask(v)),
            _ => {}
        }
    }
}

fn mask_with(secrets: &[String], text: &str) -> String {
    secrets.iter().fold(text.to_string(), |t, secret| {
        t.replace(secret.as_str(), MASK)
    })
}

impl Experiment {
    /// Whether a provider waits for the agent's environment.
    pub fn has_deferred(&self) -> bool {
        let mut found = false;
        self.visit(&mut |_, a| found |= matches!(a.provider, Provider::Deferred(_)));
        found
    }

    /// Reads the configuration and secrets from `env`, substitutes them into the deferred
    /// providers, reads those, and checks every URL against `target` (the agent's own
    /// check before it runs anything). An error names the field and never a secret's value.
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        target: &str,
    ) -> Result<Resolved, SpecError> {
        let mut experiment = self.clone();
        let (values, mut secrets) = self.vars.resolve(env)?;
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let masked = |e: SpecError| SpecError {
            field: e.field,
            message: mask_with(&secrets, &e.message),
        };
        if let Some(h) = &mut experiment.hypothesis {
            for (i, a) in h.probes.iter_mut().enumerate() {
                let field = format!("steady-state-hypothesis.probes[{i}]");
                resolve_activity(&field, a, &values).map_err(masked)?;
            }
        }
        for (i, a) in experiment.method.iter_mut().enumerate() {
            resolve_activity(&format!("method[{i}]"), a, &values).map_err(masked)?;
        }
        for (i, a) in experiment.rollbacks.iter_mut().enumerate() {
            resolve_activity(&format!("rollbacks[{i}]"), a, &values).map_err(masked)?;
        }
        experiment.check_structure().map_err(masked)?;
        experiment.check_target(target).map_err(masked)?;
        Ok(Resolved {
            experiment,
            mask: Mask { secrets },
        })
    }

    /// Calls `f` with every activity and its field, probe tolerances' included.
    pub(super) fn visit(&self, f: &mut dyn FnMut(&str, &Activity)) {
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
            f(&field, activity);
            if let Some(Tolerance::Probe(inner)) = &activity.tolerance {
                pending.push((format!("{field}.tolerance"), inner));
            }
        }
    }
}

fn resolve_activity(
    field: &str,
    activity: &mut Activity,
    values: &BTreeMap<String, Value>,
) -> Result<(), SpecError> {
    if let Provider::Deferred(raw) = &activity.provider {
        let at = format!("{field}.provider");
        let mut substituted = substitute(raw, values);
        // A credential header may now hold a secret's value: it exists only here, on the
        // agent, for this run (the stored spec holds `${name}`), so the rule that such a
        // header is a `${env:NAME}` reference (for what is stored) does not apply to it.
        let headers = substituted
            .as_object_mut()
            .and_then(|map| map.remove("headers"));
        let mut provider = Provider::from_json(&at, &substituted)?;
        if let Some(h) = headers {
            let h =
                super::fields::headers(&at, &serde_json::Map::from_iter([("headers".into(), h)]))?;
            match &mut provider {
                Provider::Http(p) => p.headers = h,
                Provider::Load(p) => p.headers = h,
                Provider::Fault(_) | Provider::Deferred(_) => {
                    return Err(spec_error(format!("{at}.headers"), "not supported here"));
                }
            }
        }
        if let (Provider::Fault(_), ActivityType::Probe) = (&provider, activity.kind) {
            return Err(spec_error(
                format!("{field}.type"),
                "a fault is an action, not a probe",
            ));
        }
        activity.provider = provider;
    }
    if let Some(Tolerance::Probe(inner)) = &mut activity.tolerance {
        resolve_activity(&format!("{field}.tolerance"), inner, values)?;
    }
    Ok(())
}

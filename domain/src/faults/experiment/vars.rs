//! The Chaos Toolkit's `configuration` and `secrets` blocks: what they declare, and their
//! values once the agent's environment is known.
//!
//! ```json
//! "configuration": {"base_url": "http://127.0.0.1:8080",
//!                   "api": {"type": "env", "key": "API_URL", "default": "http://..."},
//!                   "port": {"type": "env", "key": "PORT", "env_var_type": "int"}},
//! "secrets": {"auth": {"token": {"type": "env", "key": "API_TOKEN"}}}
//! ```
//!
//! A literal configuration value is known when the experiment is read, so it is
//! substituted there (and a URL it makes is checked against the run's target before the
//! run is stored). An `env` value, configuration or secret, exists only on the agent's
//! machine: providers naming one are kept as written and resolved by the agent just before
//! the run. A secret is never a literal (it would be stored with the run), and its value
//! is masked wherever the run writes (the journal, frames).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::request::{SpecError, spec_error};

/// At most this many configuration keys, and secrets over all scopes.
pub const MAX_VARS: usize = 100;

/// A configuration value as the experiment declares it.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    Literal(Value),
    Env {
        key: String,
        /// Used when the variable is not set.
        default: Option<Value>,
        /// The Chaos Toolkit's `env_var_type`: `str`, `int`, `float`, `bool` or `json`.
        env_var_type: Option<String>,
    },
}

/// The experiment's `configuration` and `secrets` declarations.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Vars {
    pub configuration: BTreeMap<String, ConfigValue>,
    /// Scope, then name, then the environment variable holding the value.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
}

const ENV_TYPES: [&str; 8] = [
    "str", "string", "int", "integer", "float", "number", "bool", "json",
];

impl Vars {
    pub fn from_json(
        configuration: Option<&Value>,
        secrets: Option<&Value>,
    ) -> Result<Vars, SpecError> {
        let mut vars = Vars::default();
        if let Some(c) = configuration.filter(|c| !c.is_null()) {
            let map = c
                .as_object()
                .ok_or_else(|| spec_error("configuration", "must be an object"))?;
            if map.len() > MAX_VARS {
                return Err(spec_error(
                    "configuration",
                    format!("at most {MAX_VARS} keys"),
                ));
            }
            for (name, value) in map {
                let field = format!("configuration.{name}");
                vars.configuration
                    .insert(name.clone(), config_value(&field, value)?);
            }
        }
        if let Some(s) = secrets.filter(|s| !s.is_null()) {
            let scopes = s
                .as_object()
                .ok_or_else(|| spec_error("secrets", "must be an object of scopes"))?;
            let mut count = 0;
            for (scope, entries) in scopes {
                let field = format!("secrets.{scope}");
                let entries = entries.as_object().ok_or_else(|| {
                    spec_error(&field, "must be an object of secrets ({\"name\": {\"type\": \"env\", \"key\": \"VAR\"}})")
                })?;
                if entries.get("type").is_some_and(Value::is_string) {
                    return Err(spec_error(
                        &field,
                        "secrets are grouped in scopes: {\"scope\": {\"name\": {\"type\": \"env\", \"key\": \"VAR\"}}}",
                    ));
                }
                let mut scope_map = BTreeMap::new();
                for (name, value) in entries {
                    count += 1;
                    let at = format!("{field}.{name}");
                    scope_map.insert(name.clone(), secret_env(&at, value)?);
                }
                vars.secrets.insert(scope.clone(), scope_map);
            }
            if count > MAX_VARS {
                return Err(spec_error("secrets", format!("at most {MAX_VARS} secrets")));
            }
        }
        Ok(vars)
    }

    pub fn is_empty(&self) -> bool {
        self.configuration.is_empty() && self.secrets.is_empty()
    }

    /// The values known without the agent's environment: literal configuration.
    pub fn literal(&self) -> BTreeMap<String, Value> {
        self.configuration
            .iter()
            .filter_map(|(k, v)| match v {
                ConfigValue::Literal(v) => Some((k.clone(), v.clone())),
                ConfigValue::Env { .. } => None,
            })
            .collect()
    }

    /// The names only the agent's environment gives a value: `env` configuration, and
    /// secrets a configuration key of the same name does not shadow.
    pub fn deferred(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .configuration
            .iter()
            .filter(|(_, v)| matches!(v, ConfigValue::Env { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for name in self.secrets.values().flat_map(BTreeMap::keys) {
            if !self.configuration.contains_key(name) {
                out.insert(name.clone());
            }
        }
        out
    }

    /// Every value, from `env`: configuration first, then each scope of secrets in turn
    /// (the Chaos Toolkit's `ChainMap(configuration, *secrets.values())`). Also returns the
    /// secrets' values, to mask. A variable that is not set (and has no default) is an
    /// error naming the field and the variable, never a value.
    pub fn resolve(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(BTreeMap<String, Value>, Vec<String>), SpecError> {
        let mut values = BTreeMap::new();
        for (name, value) in &self.configuration {
            let field = format!("configuration.{name}");
            let v = match value {
                ConfigValue::Literal(v) => v.clone(),
                ConfigValue::Env {
                    key,
                    default,
                    env_var_type,
                } => match (env(key), default) {
                    (Some(raw), _) => convert(&field, key, env_var_type.as_deref(), raw)?,
                    (None, Some(d)) => d.clone(),
                    (None, None) => {
                        return Err(spec_error(
                            field,
                            format!(
                                "the environment variable {key} is not set on the agent and the key has no default"
                            ),
                        ));
                    }
                },
            };
            values.insert(name.clone(), v);
        }
        let mut secrets = Vec::new();
        for (scope, entries) in &self.secrets {
            for (name, key) in entries {
                let Some(value) = env(key) else {
                    return Err(spec_error(
                        format!("secrets.{scope}.{name}"),
                        format!("the environment variable {key} is not set on the agent"),
                    ));
                };
                if !value.is_empty() {
                    secrets.push(value.clone());
                }
                values.entry(name.clone()).or_insert(Value::String(value));
            }
        }
        Ok((values, secrets))
    }

    /// The blocks as the experiment wrote them (never a value from the environment).
    pub fn to_json(&self, map: &mut Map<String, Value>) {
        if !self.configuration.is_empty() {
            let c: Map<String, Value> = self
                .configuration
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        ConfigValue::Literal(v) => v.clone(),
                        ConfigValue::Env {
                            key,
                            default,
                            env_var_type,
                        } => {
                            let mut e = json!({"type": "env", "key": key});
                            if let Some(d) = default {
                                e["default"] = d.clone();
                            }
                            if let Some(t) = env_var_type {
                                e["env_var_type"] = json!(t);
                            }
                            e
                        }
                    };
                    (k.clone(), v)
                })
                .collect();
            map.insert("configuration".into(), Value::Object(c));
        }
        if !self.secrets.is_empty() {
            let s: Map<String, Value> = self
                .secrets
                .iter()
                .map(|(scope, entries)| {
                    let e: Map<String, Value> = entries
                        .iter()
                        .map(|(n, key)| (n.clone(), json!({"type": "env", "key": key})))
                        .collect();
                    (scope.clone(), Value::Object(e))
                })
                .collect();
            map.insert("secrets".into(), Value::Object(s));
        }
    }
}

fn env_key(field: &str, map: &Map<String, Value>) -> Result<String, SpecError> {
    match map.get("key").and_then(Value::as_str) {
        Some(k) if !k.is_empty() => Ok(k.to_string()),
        _ => Err(spec_error(
            format!("{field}.key"),
            "names the environment variable (a non-empty string)",
        )),
    }
}

fn config_value(field: &str, value: &Value) -> Result<ConfigValue, SpecError> {
    let Some(map) = value.as_object().filter(|m| m.contains_key("type")) else {
        return Ok(ConfigValue::Literal(value.clone()));
    };
    match map.get("type").and_then(Value::as_str) {
        Some("env") => {
            if let Some(k) = map
                .keys()
                .find(|k| !["type", "key", "default", "env_var_type"].contains(&k.as_str()))
            {
                return Err(spec_error(format!("{field}.{k}"), "unknown field"));
            }
            let env_var_type = match map.get("env_var_type") {
                None | Some(Value::Null) => None,
                Some(Value::String(t)) if ENV_TYPES.contains(&t.as_str()) => Some(t.clone()),
                Some(_) => {
                    return Err(spec_error(
                        format!("{field}.env_var_type"),
                        "must be str, int, float, bool or json",
                    ));
                }
            };
            Ok(ConfigValue::Env {
                key: env_key(field, map)?,
                default: map.get("default").cloned(),
                env_var_type,
            })
        }
        Some("probe") => Err(spec_error(
            format!("{field}.type"),
            "dynamic configuration (a probe) is not supported by iohr; use a literal or {\"type\": \"env\"}",
        )),
        _ => Err(spec_error(
            format!("{field}.type"),
            "a configuration value is a literal or {\"type\": \"env\", \"key\": \"VAR\"}",
        )),
    }
}

fn secret_env(field: &str, value: &Value) -> Result<String, SpecError> {
    let map = match value {
        Value::Object(m) => m,
        _ => {
            return Err(spec_error(
                field,
                "a literal secret would be stored with the run; give {\"type\": \"env\", \"key\": \"VAR\"} (read on the agent)",
            ));
        }
    };
    match map.get("type").and_then(Value::as_str) {
        Some("env") => {
            if let Some(k) = map.keys().find(|k| !["type", "key"].contains(&k.as_str())) {
                return Err(spec_error(format!("{field}.{k}"), "unknown field"));
            }
            env_key(field, map)
        }
        _ => Err(spec_error(
            format!("{field}.type"),
            "iohr reads secrets from the agent's environment only: {\"type\": \"env\", \"key\": \"VAR\"}",
        )),
    }
}

/// The Chaos Toolkit's `convert_to_type` for an environment variable's text.
fn convert(field: &str, key: &str, kind: Option<&str>, raw: String) -> Result<Value, SpecError> {
    // The value itself is not quoted: the variable may hold something meant to stay put.
    let bad = |what: &str| {
        spec_error(
            field,
            format!("the environment variable {key} does not hold {what}"),
        )
    };
    Ok(match kind {
        None | Some("str" | "string") => Value::String(raw),
        Some("int" | "integer") => json!(raw.trim().parse::<i64>().map_err(|_| bad("an int"))?),
        Some("float" | "number") => {
            let f = raw.trim().parse::<f64>().map_err(|_| bad("a float"))?;
            serde_json::Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| bad("a finite float"))?
        }
        Some("bool") => Value::Bool(!matches!(raw.to_lowercase().as_str(), "false" | "0" | "no")),
        Some(_) if raw.is_empty() => Value::String(raw),
        Some(_) => serde_json::from_str(&raw).map_err(|_| bad("JSON"))?,
    })
}

/// What reading an experiment's providers needs of its `configuration` and `secrets`.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// Substituted as the experiment is read.
    pub literal: BTreeMap<String, Value>,
    /// Known only on the agent: a provider naming one is [`super::Provider::Deferred`].
    pub deferred: BTreeSet<String>,
}

impl Names {
    pub fn of(vars: &Vars) -> Names {
        Names {
            literal: vars.literal(),
            deferred: vars.deferred(),
        }
    }
}

//! Readers of an experiment's JSON fields, each refusing with the field named.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::load::parse_duration;
use crate::request::{SpecError, spec_error};

use super::*;

pub(super) fn object<'v>(
    field: &str,
    value: &'v Value,
) -> Result<&'v Map<String, Value>, SpecError> {
    value
        .as_object()
        .ok_or_else(|| spec_error(field, "must be an object"))
}

pub(super) fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

pub(super) fn text(map: &Map<String, Value>, field: &str, key: &str) -> Result<String, SpecError> {
    optional_text(map, field, key)?.ok_or_else(|| spec_error(join(field, key), "is required"))
}

pub(super) fn optional_text(
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

pub(super) fn headers(
    field: &str,
    map: &Map<String, Value>,
) -> Result<BTreeMap<String, String>, SpecError> {
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

pub(super) fn activities(
    field: &str,
    value: &Value,
    names: &super::vars::Names,
) -> Result<Vec<Activity>, SpecError> {
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
        .map(|(i, a)| Activity::from_json_in(&format!("{field}[{i}]"), a, 0, names))
        .collect()
}

/// A number of seconds (the Chaos Toolkit's pauses and timeouts); absent is zero.
pub(super) fn seconds(
    field: &str,
    value: Option<&Value>,
    max: Duration,
) -> Result<Duration, SpecError> {
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
pub(super) fn duration(field: &str, value: &Value) -> Result<Duration, SpecError> {
    match value {
        Value::String(s) => parse_duration(field, s),
        Value::Number(_) => seconds(field, Some(value), Duration::from_secs(u32::MAX as u64)),
        _ => Err(spec_error(field, "must be a duration such as \"30s\"")),
    }
}

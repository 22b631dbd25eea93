//! Tolerances: what a steady-state probe's output must be, in the Chaos Toolkit's forms.
//!
//! - a literal: `true`, `200`, `"ok"`: equal to the output; a number against an HTTP output
//!   is its status, a string against an HTTP output is its body;
//! - a list: a two-number list `[low, high]` is an inclusive range, any other list a set the
//!   output (or an HTTP output's status) must be in;
//! - `{"type": "range", "range": [low, high], "target": "latency_ms"}`;
//! - `{"type": "regex", "pattern": "...", "target"?}`: the pattern is found in the text
//!   (an HTTP output's body by default);
//! - `{"type": "jsonpath", "path": "$.a.b", "expect"?, "count"?, "target"?}`: the path, read
//!   in the output (an HTTP output's body parsed as JSON), finds something (`expect`: a value
//!   equal to it; `count`: that many values);
//! - `{"type": "probe", ...}`: another probe (an activity without its `type`), run with the
//!   output, whose own tolerance decides; the lifecycle runs it.
//!
//! `target` names a field of an object output (`status`, `latency_ms`, `body`, `p99_ms`,
//! `error_rate`). JSON paths are a documented subset: `$`, `.name`, `['name']` or
//! `["name"]`, `[N]` (negative counts from the end) and `[*]` or `.*` (every member).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::request::{SpecError, spec_error};

use super::experiment::Activity;
use super::experiment::vars::Names;

/// The most nested probe tolerances: a probe's tolerance may be a probe, not forever.
pub const MAX_PROBE_DEPTH: usize = 4;

#[derive(Debug, Clone, PartialEq)]
pub enum Tolerance {
    Bool(bool),
    Number(f64),
    String(String),
    /// `[low, high]`, inclusive; `target` picks a field of an object output.
    Range {
        low: f64,
        high: f64,
        target: Option<String>,
    },
    /// Any other list: the output is one of these.
    OneOf(Vec<Value>),
    Regex {
        pattern: String,
        target: Option<String>,
    },
    JsonPath {
        path: String,
        expect: Option<Value>,
        count: Option<u64>,
        target: Option<String>,
    },
    /// A probe whose own tolerance decides; the lifecycle runs it.
    Probe(Box<Activity>),
}

/// How a tolerance judged an output.
#[derive(Debug, PartialEq)]
pub enum Judgement<'a> {
    Met,
    /// Not met, and why, in words that never quote a body.
    Missed(String),
    /// A probe tolerance: the caller runs this probe and judges its output by its own.
    RunProbe(&'a Activity),
}

impl Tolerance {
    /// Reads a tolerance at `field`, refusing what it cannot judge.
    pub fn from_json(field: &str, value: &Value, depth: usize) -> Result<Tolerance, SpecError> {
        Tolerance::from_json_in(field, value, depth, &Names::default())
    }

    /// [`Tolerance::from_json`] with the experiment's configuration and secrets (which a
    /// probe tolerance's provider may name).
    pub fn from_json_in(
        field: &str,
        value: &Value,
        depth: usize,
        names: &Names,
    ) -> Result<Tolerance, SpecError> {
        match value {
            Value::Bool(b) => Ok(Tolerance::Bool(*b)),
            Value::Number(n) => n
                .as_f64()
                .map(Tolerance::Number)
                .ok_or_else(|| spec_error(field, "is not a number we can compare")),
            Value::String(s) => Ok(Tolerance::String(s.clone())),
            Value::Array(items) => {
                let numbers: Vec<f64> = items.iter().filter_map(Value::as_f64).collect();
                if items.len() == 2 && numbers.len() == 2 {
                    range(field, numbers[0], numbers[1], None)
                } else if items.is_empty() {
                    Err(spec_error(field, "an empty list matches nothing"))
                } else {
                    Ok(Tolerance::OneOf(items.clone()))
                }
            }
            Value::Object(map) => {
                let kind = map.get("type").and_then(Value::as_str).ok_or_else(|| {
                    spec_error(
                        format!("{field}.type"),
                        "must be one of range, regex, jsonpath, probe",
                    )
                })?;
                let target = match map.get("target") {
                    None => None,
                    Some(Value::String(t)) => Some(t.clone()),
                    Some(_) => {
                        return Err(spec_error(
                            format!("{field}.target"),
                            "must name a field of the output",
                        ));
                    }
                };
                let known =
                    |allowed: &[&str]| match map.keys().find(|k| !allowed.contains(&k.as_str())) {
                        Some(k) => Err(spec_error(format!("{field}.{k}"), "unknown field")),
                        None => Ok(()),
                    };
                match kind {
                    "range" => {
                        known(&["type", "range", "target"])?;
                        let bounds = map
                            .get("range")
                            .and_then(Value::as_array)
                            .map(|r| r.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
                            .filter(|r| r.len() == 2)
                            .ok_or_else(|| {
                                spec_error(format!("{field}.range"), "must be [low, high]")
                            })?;
                        range(field, bounds[0], bounds[1], target)
                    }
                    "regex" => {
                        known(&["type", "pattern", "target"])?;
                        let pattern = map
                            .get("pattern")
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                spec_error(format!("{field}.pattern"), "must be a regex")
                            })?
                            .to_string();
                        regex::Regex::new(&pattern).map_err(|e| {
                            spec_error(format!("{field}.pattern"), format!("not a regex: {e}"))
                        })?;
                        Ok(Tolerance::Regex { pattern, target })
                    }
                    "jsonpath" => {
                        known(&["type", "path", "expect", "count", "target"])?;
                        let path = map
                            .get("path")
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                spec_error(format!("{field}.path"), "must be a JSON path")
                            })?
                            .to_string();
                        parse_path(&path).map_err(|e| spec_error(format!("{field}.path"), e))?;
                        let count = match map.get("count") {
                            None => None,
                            Some(c) => Some(c.as_u64().ok_or_else(|| {
                                spec_error(format!("{field}.count"), "must be a whole number")
                            })?),
                        };
                        Ok(Tolerance::JsonPath {
                            path,
                            expect: map.get("expect").cloned(),
                            count,
                            target,
                        })
                    }
                    "probe" => {
                        if depth >= MAX_PROBE_DEPTH {
                            return Err(spec_error(
                                field,
                                format!("probe tolerances nest at most {MAX_PROBE_DEPTH} deep"),
                            ));
                        }
                        let activity = Activity::from_json_in(field, value, depth + 1, names)?;
                        if activity.tolerance.is_none() {
                            return Err(spec_error(
                                format!("{field}.tolerance"),
                                "a probe tolerance needs its own tolerance, which decides",
                            ));
                        }
                        Ok(Tolerance::Probe(Box::new(activity)))
                    }
                    other => Err(spec_error(
                        format!("{field}.type"),
                        format!("{other:?} is not one of range, regex, jsonpath, probe"),
                    )),
                }
            }
            Value::Null => Err(spec_error(field, "must not be null")),
        }
    }

    /// The tolerance in the shape [`Tolerance::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let with_target = |mut v: Value, target: &Option<String>| {
            if let (Some(t), Value::Object(m)) = (target, &mut v) {
                m.insert("target".into(), Value::String(t.clone()));
            }
            v
        };
        match self {
            Tolerance::Bool(b) => Value::Bool(*b),
            Tolerance::Number(n) => number(*n),
            Tolerance::String(s) => Value::String(s.clone()),
            Tolerance::Range {
                low,
                high,
                target: None,
            } => Value::Array(vec![number(*low), number(*high)]),
            Tolerance::Range { low, high, target } => with_target(
                serde_json::json!({"type": "range", "range": [number(*low), number(*high)]}),
                target,
            ),
            Tolerance::OneOf(items) => Value::Array(items.clone()),
            Tolerance::Regex { pattern, target } => with_target(
                serde_json::json!({"type": "regex", "pattern": pattern}),
                target,
            ),
            Tolerance::JsonPath {
                path,
                expect,
                count,
                target,
            } => {
                let mut v = serde_json::json!({"type": "jsonpath", "path": path});
                if let Value::Object(m) = &mut v {
                    if let Some(e) = expect {
                        m.insert("expect".into(), e.clone());
                    }
                    if let Some(c) = count {
                        m.insert("count".into(), Value::from(*c));
                    }
                }
                with_target(v, target)
            }
            Tolerance::Probe(activity) => {
                let mut v = activity.to_json();
                if let Value::Object(m) = &mut v {
                    m.insert("type".into(), Value::String("probe".into()));
                }
                v
            }
        }
    }

    /// Judges a probe's output (for an HTTP probe `{status, latency_ms, body}`).
    pub fn judge<'a>(&'a self, output: &Value) -> Judgement<'a> {
        let verdict = |met: bool, why: String| {
            if met {
                Judgement::Met
            } else {
                Judgement::Missed(why)
            }
        };
        let http = output.get("status").is_some();
        match self {
            Tolerance::Bool(b) => verdict(
                output.as_bool() == Some(*b),
                format!("expected {b}, got {}", short(output)),
            ),
            Tolerance::Number(n) => {
                let seen = if http { &output["status"] } else { output };
                verdict(
                    seen.as_f64() == Some(*n),
                    format!("expected {}, got {}", number(*n), short(seen)),
                )
            }
            Tolerance::String(s) => {
                let seen = if http { &output["body"] } else { output };
                verdict(
                    seen.as_str() == Some(s.as_str()),
                    format!("expected the text {s:?}, got other text"),
                )
            }
            Tolerance::Range { low, high, target } => {
                let seen = match target {
                    Some(t) => output.get(t).unwrap_or(&Value::Null),
                    None if http => &output["status"],
                    None => output,
                };
                let name = target
                    .as_deref()
                    .unwrap_or(if http { "status" } else { "output" });
                match seen.as_f64() {
                    Some(v) => verdict(
                        *low <= v && v <= *high,
                        format!(
                            "{name} {} outside [{}, {}]",
                            shown(v),
                            number(*low),
                            number(*high)
                        ),
                    ),
                    None => Judgement::Missed(format!("{name} is not a number")),
                }
            }
            Tolerance::OneOf(items) => {
                let seen = if http { &output["status"] } else { output };
                verdict(
                    items.iter().any(|i| same(i, seen)),
                    format!(
                        "{} is not one of {}",
                        short(seen),
                        Value::from(items.clone())
                    ),
                )
            }
            Tolerance::Regex { pattern, target } => {
                let seen = pick(output, target.as_deref(), http);
                let text = match seen {
                    Value::String(s) => s.clone(),
                    Value::Null => return Judgement::Missed("no text to match".into()),
                    other => other.to_string(),
                };
                match regex::Regex::new(pattern) {
                    Ok(re) => verdict(
                        re.is_match(&text),
                        format!("the pattern {pattern:?} was not found"),
                    ),
                    Err(e) => Judgement::Missed(format!("the pattern is not a regex: {e}")),
                }
            }
            Tolerance::JsonPath {
                path,
                expect,
                count,
                target,
            } => {
                let seen = pick(output, target.as_deref(), http);
                // A body is text: read it as JSON.
                let parsed;
                let document = match seen {
                    Value::String(text) if http || target.is_some() => {
                        match serde_json::from_str::<Value>(text) {
                            Ok(v) => {
                                parsed = v;
                                &parsed
                            }
                            Err(_) => return Judgement::Missed("the body is not JSON".into()),
                        }
                    }
                    other => other,
                };
                let found = match select(document, path) {
                    Ok(found) => found,
                    Err(e) => return Judgement::Missed(format!("JSON path {path}: {e}")),
                };
                let matching = match expect {
                    Some(e) => found.iter().filter(|v| same(e, v)).count() as u64,
                    None => found.len() as u64,
                };
                match count {
                    Some(c) => verdict(
                        matching == *c,
                        format!("{path} matched {matching} values, expected {c}"),
                    ),
                    None => verdict(
                        matching > 0,
                        match expect {
                            Some(e) => format!("{path} has no value equal to {}", short(e)),
                            None => format!("{path} found nothing"),
                        },
                    ),
                }
            }
            Tolerance::Probe(activity) => Judgement::RunProbe(activity),
        }
    }
}

fn range(field: &str, low: f64, high: f64, target: Option<String>) -> Result<Tolerance, SpecError> {
    if low > high {
        return Err(spec_error(field, "a range's low end is above its high end"));
    }
    Ok(Tolerance::Range { low, high, target })
}

fn pick<'v>(output: &'v Value, target: Option<&str>, http: bool) -> &'v Value {
    match target {
        Some(t) => output.get(t).unwrap_or(&Value::Null),
        None if http => output.get("body").unwrap_or(&Value::Null),
        None => output,
    }
}

/// Numbers compare by value (`200` equals `200.0`), everything else structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A whole number written without `.0`.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}

/// An observed number in a message: whole numbers as they are, others to four
/// significant digits (0.1023, not 0.10234567890123).
fn shown(v: f64) -> String {
    if !v.is_finite() || (v.fract() == 0.0 && v.abs() < 9.0e15) {
        return number(v).to_string();
    }
    let magnitude = v.abs().log10().floor() as i32;
    crate::text::decimal(v, (3 - magnitude).clamp(0, 15) as usize)
}

/// An output in a message: numbers and booleans as they are, text never quoted (a body).
fn short(v: &Value) -> String {
    match v {
        Value::String(_) => "text".into(),
        Value::Object(_) => "an object".into(),
        Value::Array(_) => "a list".into(),
        other => other.to_string(),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Key(String),
    Index(i64),
    Every,
}

/// Reads the JSON path subset: `$` then `.name`, `.*`, `['name']`, `["name"]`, `[N]`, `[*]`.
fn parse_path(path: &str) -> Result<Vec<Step>, String> {
    let rest = path
        .strip_prefix('$')
        .ok_or_else(|| "must start with $".to_string())?;
    let bytes: Vec<char> = rest.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            '.' => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && bytes[end] != '.' && bytes[end] != '[' {
                    end += 1;
                }
                let name: String = bytes[start..end].iter().collect();
                if name.is_empty() {
                    return Err("'.' must be followed by a name or *".into());
                }
                steps.push(if name == "*" {
                    Step::Every
                } else {
                    Step::Key(name)
                });
                i = end;
            }
            '[' => {
                let close = bytes[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .map(|p| p + i)
                    .ok_or_else(|| "unclosed [".to_string())?;
                let inner: String = bytes[i + 1..close].iter().collect();
                let inner = inner.trim();
                let quoted = |q: char| {
                    inner
                        .strip_prefix(q)
                        .and_then(|s| s.strip_suffix(q))
                        .map(str::to_string)
                };
                let step = if inner == "*" {
                    Step::Every
                } else if let Some(name) = quoted('\'').or_else(|| quoted('"')) {
                    Step::Key(name)
                } else if let Ok(n) = inner.parse::<i64>() {
                    Step::Index(n)
                } else {
                    return Err(format!(
                        "[{inner}] is not a name, an index or * (filters and slices are not supported)"
                    ));
                };
                steps.push(step);
                i = close + 1;
            }
            c => return Err(format!("unexpected {c:?}; use .name, ['name'], [N] or [*]")),
        }
    }
    Ok(steps)
}

/// Every value the path selects in `document`.
fn select<'v>(document: &'v Value, path: &str) -> Result<Vec<&'v Value>, String> {
    let mut current = vec![document];
    for step in parse_path(path)? {
        let mut next = Vec::new();
        for v in current {
            match (&step, v) {
                (Step::Key(k), Value::Object(m)) => next.extend(m.get(k)),
                (Step::Index(n), Value::Array(items)) => {
                    let at = if *n < 0 {
                        items.len().checked_sub(n.unsigned_abs() as usize)
                    } else {
                        Some(*n as usize)
                    };
                    next.extend(at.and_then(|i| items.get(i)));
                }
                (Step::Every, Value::Array(items)) => next.extend(items.iter()),
                (Step::Every, Value::Object(m)) => next.extend(m.values()),
                _ => {}
            }
        }
        current = next;
    }
    Ok(current)
}

impl Serialize for Tolerance {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tolerance {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Tolerance, D::Error> {
        let value = Value::deserialize(d)?;
        Tolerance::from_json("tolerance", &value, 0).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tol(v: Value) -> Tolerance {
        Tolerance::from_json("t", &v, 0).unwrap()
    }

    fn met(t: &Tolerance, output: Value) -> bool {
        match t.judge(&output) {
            Judgement::Met => true,
            Judgement::Missed(_) => false,
            Judgement::RunProbe(_) => panic!("not a probe tolerance"),
        }
    }

    fn http(status: u16, latency_ms: f64, body: &str) -> Value {
        json!({"status": status, "latency_ms": latency_ms, "body": body})
    }

    #[test]
    fn literals_compare_with_the_output_or_an_http_status_or_body() {
        assert!(met(&tol(json!(true)), json!(true)));
        assert!(!met(&tol(json!(true)), json!(false)));
        assert!(met(&tol(json!(200)), http(200, 3.0, "")));
        assert!(!met(&tol(json!(200)), http(503, 3.0, "")));
        assert!(met(&tol(json!(0.5)), json!(0.5)));
        assert!(met(&tol(json!("ok")), json!("ok")));
        assert!(met(&tol(json!("ok")), http(200, 1.0, "ok")));
        assert!(!met(&tol(json!("ok")), http(200, 1.0, "not ok")));
    }

    #[test]
    fn ranges_are_inclusive_and_can_target_a_field() {
        let r = tol(json!([200, 299]));
        assert!(met(&r, http(200, 1.0, "")));
        assert!(met(&r, http(299, 1.0, "")));
        assert!(!met(&r, http(300, 1.0, "")));
        assert!(met(&tol(json!([0, 1])), json!(0.25)));
        let latency = tol(json!({"type": "range", "range": [0, 50], "target": "latency_ms"}));
        assert!(met(&latency, http(200, 49.9, "")));
        match latency.judge(&http(200, 120.0, "")) {
            Judgement::Missed(why) => assert_eq!(why, "latency_ms 120 outside [0, 50]"),
            other => panic!("{other:?}"),
        }
        // An observed latency is shown to four significant digits, not float noise.
        match latency.judge(&http(200, 123.456789012, "")) {
            Judgement::Missed(why) => assert_eq!(why, "latency_ms 123.5 outside [0, 50]"),
            other => panic!("{other:?}"),
        }
        match tol(json!([0.5, 1])).judge(&json!(0.1234567890123)) {
            Judgement::Missed(why) => assert_eq!(why, "output 0.1235 outside [0.5, 1]"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Tolerance::from_json("t", &json!([5, 1]), 0)
                .unwrap_err()
                .message,
            "a range's low end is above its high end"
        );
        // Any other list is a set of accepted values.
        let set = tol(json!([200, 201, 204]));
        assert!(met(&set, http(204, 1.0, "")));
        assert!(!met(&set, http(202, 1.0, "")));
    }

    #[test]
    fn regexes_search_the_body_or_a_target() {
        let r = tol(json!({"type": "regex", "pattern": "^hello, w.rld$"}));
        assert!(met(&r, http(200, 1.0, "hello, world")));
        assert!(!met(&r, http(200, 1.0, "goodbye")));
        assert!(met(&r, json!("hello, world")));
        let bad = Tolerance::from_json("t", &json!({"type": "regex", "pattern": "("}), 0);
        assert_eq!(bad.unwrap_err().field, "t.pattern");
        // A miss never quotes the body.
        match r.judge(&http(200, 1.0, "secret body")) {
            Judgement::Missed(why) => assert!(!why.contains("secret"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_paths_read_a_documented_subset() {
        let body = r#"{"a": {"b": [1, 2, {"c": "up"}]}, "n": 3}"#;
        let out = http(200, 1.0, body);
        let p = |v: Value| met(&tol(v), out.clone());
        assert!(p(
            json!({"type": "jsonpath", "path": "$.a.b[2].c", "expect": "up"})
        ));
        assert!(p(
            json!({"type": "jsonpath", "path": "$['a'][\"b\"][-1].c"})
        ));
        assert!(p(
            json!({"type": "jsonpath", "path": "$.a.b[*]", "count": 3})
        ));
        assert!(p(json!({"type": "jsonpath", "path": "$.n", "expect": 3.0})));
        assert!(!p(json!({"type": "jsonpath", "path": "$.a.x"})));
        assert!(!p(
            json!({"type": "jsonpath", "path": "$.a.b[0]", "expect": 2})
        ));
        // Plain JSON output (not HTTP) is read as it is.
        assert!(met(
            &tol(json!({"type": "jsonpath", "path": "$.p99_ms"})),
            json!({"p99_ms": 3.5})
        ));
        assert!(!met(
            &tol(json!({"type": "jsonpath", "path": "$.a"})),
            http(200, 1.0, "not json")
        ));
        for bad in ["a.b", "$.a[?(@.x)]", "$.", "$[1"] {
            let e = Tolerance::from_json("t", &json!({"type": "jsonpath", "path": bad}), 0);
            assert_eq!(e.unwrap_err().field, "t.path", "{bad}");
        }
    }

    #[test]
    fn a_probe_tolerance_hands_its_probe_to_the_caller() {
        let t = tol(json!({
            "type": "probe", "name": "health",
            "provider": {"type": "http", "path": "/health"},
            "tolerance": 200
        }));
        match t.judge(&json!(1)) {
            Judgement::RunProbe(a) => {
                assert_eq!(a.name, "health");
                assert!(a.tolerance.is_some());
            }
            other => panic!("{other:?}"),
        }
        let without = Tolerance::from_json(
            "t",
            &json!({"type": "probe", "name": "h", "provider": {"type": "http", "path": "/"}}),
            0,
        );
        assert_eq!(without.unwrap_err().field, "t.tolerance");
    }

    #[test]
    fn tolerances_round_trip_and_refuse_unknown_kinds() {
        for v in [
            json!(true),
            json!(200),
            json!("x"),
            json!([1, 2]),
            json!([1, 2, 3]),
            json!({"type": "range", "range": [0, 50], "target": "latency_ms"}),
            json!({"type": "regex", "pattern": "a+"}),
            json!({"type": "jsonpath", "path": "$.a", "expect": 1, "count": 1}),
        ] {
            assert_eq!(tol(v.clone()).to_json(), v);
        }
        let e = Tolerance::from_json("t", &json!({"type": "xpath"}), 0).unwrap_err();
        assert_eq!(e.field, "t.type");
        let e = Tolerance::from_json("t", &json!({"type": "regex", "pattern": "a", "x": 1}), 0)
            .unwrap_err();
        assert_eq!(e.field, "t.x");
    }
}

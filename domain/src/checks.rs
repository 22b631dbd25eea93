//! The `checks` kind: HTTP surface checks against the run's target and invariants across
//! them. The spec never names the target; verdicts are pure functions of what was observed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
pub use crate::request::{SpecError, env_reference};
use crate::request::{parse_spec, spec_error, validate_request};

pub const MAX_CHECKS: usize = 1000;
pub const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChecksSpec {
    pub checks: Vec<Check>,
    #[serde(default)]
    pub invariants: Vec<Invariant>,
    /// Per-request timeout, such as `"5s"` or `"1500ms"` (default 5 s, at most 60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// The older form of `timeout`, in milliseconds; still read (a spec gives one or the
    /// other).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The share of requests sent with the W3C traceparent's sampled flag set (0 to 1,
    /// default 0.01); every request carries trace context ([`crate::trace`]).
    #[serde(
        default = "crate::trace::default_sample",
        skip_serializing_if = "crate::trace::is_default_sample"
    )]
    pub trace_sample: f64,
}

fn default_timeout_ms() -> u64 {
    5_000
}

fn default_method() -> String {
    "GET".to_string()
}

fn default_status() -> u16 {
    200
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Check {
    /// Defaults to `METHOD PATH`.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default = "default_method")]
    pub method: String,
    pub path: String,
    /// A credential-named header's value must be `${env:NAME}` (the agent reads it from
    /// its own environment) or `${secret:NAME}` (an account secret the lease carries), so
    /// the secret is never in a spec or a record.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as the request body; never recorded in a run, frame or event.
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default = "default_status")]
    pub expect_status: u16,
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
    /// Text the response body must contain (the body itself is never recorded).
    #[serde(default)]
    pub expect_text: Option<String>,
}

impl Check {
    pub fn display_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("{} {}", self.method, self.path))
    }
}

/// Rules across all checks of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum Invariant {
    /// No response had a 5xx status.
    #[serde(rename = "no_5xx")]
    No5xx,
    /// Every request got a response (no connection error or timeout).
    NoErrors,
    /// Every response came within this many milliseconds.
    MaxLatencyMs { value: u64 },
}

impl Invariant {
    pub fn name(&self) -> String {
        match self {
            Invariant::No5xx => "no 5xx".to_string(),
            Invariant::NoErrors => "no errors".to_string(),
            Invariant::MaxLatencyMs { value } => format!("all under {value} ms"),
        }
    }
}

impl ChecksSpec {
    /// The per-request timeout, from `timeout` or its older form `timeout_ms`.
    pub fn timeout(&self) -> std::time::Duration {
        match self.timeout {
            Some(timeout) => timeout.get(),
            None => std::time::Duration::from_millis(self.timeout_ms),
        }
    }

    /// Parses and validates a spec; the error says what to fix.
    pub fn from_json(value: &serde_json::Value) -> Result<ChecksSpec, SpecError> {
        let spec: ChecksSpec = parse_spec("spec", value)?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.checks.is_empty() {
            return Err(spec_error("spec.checks", "at least one check is needed"));
        }
        if self.checks.len() > MAX_CHECKS {
            return Err(spec_error(
                "spec.checks",
                format!("at most {MAX_CHECKS} checks per run"),
            ));
        }
        if let Some(timeout) = self.timeout {
            if self.timeout_ms != default_timeout_ms() {
                return Err(spec_error(
                    "spec.timeout",
                    "give timeout or its older form timeout_ms, not both",
                ));
            }
            let ms = timeout.get().as_millis();
            if ms == 0 || ms > u128::from(MAX_TIMEOUT_MS) {
                return Err(spec_error(
                    "spec.timeout",
                    format!("must be between 1ms and {}s", MAX_TIMEOUT_MS / 1000),
                ));
            }
        } else if self.timeout_ms == 0 || self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(spec_error(
                "spec.timeout_ms",
                format!("must be between 1 and {MAX_TIMEOUT_MS}"),
            ));
        }
        crate::trace::validate_sample("spec.trace_sample", self.trace_sample)?;
        for (i, check) in self.checks.iter().enumerate() {
            let field = format!("spec.checks[{i}]");
            validate_request(&field, &check.method, &check.path, &check.headers)?;
            if !(100..=599).contains(&check.expect_status) {
                return Err(spec_error(
                    format!("{field}.expect_status"),
                    "must be an HTTP status between 100 and 599",
                ));
            }
            // No request outlasts the longest timeout: a higher limit is a mistake.
            if check.max_latency_ms.is_some_and(|ms| ms > MAX_TIMEOUT_MS) {
                return Err(spec_error(
                    format!("{field}.max_latency_ms"),
                    format!("must be at most {MAX_TIMEOUT_MS} (the longest timeout)"),
                ));
            }
        }
        for (i, invariant) in self.invariants.iter().enumerate() {
            if let Invariant::MaxLatencyMs { value } = invariant
                && *value > MAX_TIMEOUT_MS
            {
                return Err(spec_error(
                    format!("spec.invariants[{i}].value"),
                    format!("must be at most {MAX_TIMEOUT_MS} (the longest timeout)"),
                ));
            }
        }
        Ok(())
    }
}

/// What one request of a check observed. The body is reduced to whether it matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub status: Option<u16>,
    pub latency_ms: f64,
    /// A connection error or timeout, when there was no response.
    pub error: Option<String>,
    /// Whether the body contained `expect_text`, when the check asks.
    pub text_found: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckVerdict {
    pub name: String,
    pub method: String,
    pub path: String,
    pub passed: bool,
    pub status: Option<u16>,
    pub latency_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it failed, one line per reason.
    #[serde(default)]
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvariantVerdict {
    pub name: String,
    pub passed: bool,
    #[serde(default)]
    pub failures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChecksResult {
    pub passed: bool,
    pub total: usize,
    pub failed: usize,
    pub checks: Vec<CheckVerdict>,
    pub invariants: Vec<InvariantVerdict>,
}

impl ChecksResult {
    /// `N of M checks failed`: the count a person reads first.
    pub fn count_line(&self) -> String {
        format!("{} of {} checks failed", self.failed, self.total)
    }

    /// Each check and invariant as the cells people read: `check`, its name, `pass` or
    /// `FAIL`, the status, the latency, and why it failed (`invariant` rows leave status
    /// and latency empty).
    pub fn rows(&self) -> Vec<[String; 6]> {
        let pass = |passed: bool| if passed { "pass" } else { "FAIL" }.to_string();
        let checks = self.checks.iter().map(|c| {
            let mut why = c.failures.join("; ");
            if why.is_empty()
                && let Some(error) = &c.error
            {
                why = error.clone();
            }
            [
                "check".to_string(),
                c.name.clone(),
                pass(c.passed),
                c.status.map_or("-".to_string(), |s| s.to_string()),
                format!("{:.1} ms", c.latency_ms),
                why,
            ]
        });
        let invariants = self.invariants.iter().map(|i| {
            [
                "invariant".to_string(),
                i.name.clone(),
                pass(i.passed),
                String::new(),
                String::new(),
                i.failures.join("; "),
            ]
        });
        checks.chain(invariants).collect()
    }

    /// The result in lines: the count, then a line per check and invariant (empty cells
    /// left out), indented as the other kinds' summaries.
    pub fn summary(&self) -> Vec<String> {
        std::iter::once(format!("  {}", self.count_line()))
            .chain(self.rows().into_iter().map(|row| {
                let cells: Vec<&str> = row
                    .iter()
                    .map(String::as_str)
                    .filter(|c| !c.is_empty())
                    .collect();
                format!("  {}", cells.join("  "))
            }))
            .collect()
    }
}

pub fn judge_check(check: &Check, seen: &Observation) -> CheckVerdict {
    let mut failures = Vec::new();
    match (seen.status, &seen.error) {
        (Some(status), _) if status != check.expect_status => {
            failures.push(format!("status {status}, expected {}", check.expect_status));
        }
        // A status came but the body broke off or timed out: the response is not whole.
        (_, Some(error)) => failures.push(error.clone()),
        (None, None) => failures.push("no response".to_string()),
        _ => {}
    }
    if let Some(limit) = check.max_latency_ms
        && seen.status.is_some()
        && seen.latency_ms > limit as f64
    {
        failures.push(format!("took {:.1} ms, limit {limit} ms", seen.latency_ms));
    }
    if let (Some(text), Some(false)) = (&check.expect_text, seen.text_found) {
        failures.push(format!("body does not contain {text:?}"));
    }
    CheckVerdict {
        name: check.display_name(),
        method: check.method.clone(),
        path: check.path.clone(),
        passed: failures.is_empty(),
        status: seen.status,
        latency_ms: seen.latency_ms,
        error: seen.error.clone(),
        failures,
    }
}

pub fn judge_invariant(invariant: &Invariant, verdicts: &[CheckVerdict]) -> InvariantVerdict {
    let failures: Vec<String> = verdicts
        .iter()
        .filter_map(|v| {
            let broken = match invariant {
                Invariant::No5xx => v.status.is_some_and(|s| s >= 500),
                Invariant::NoErrors => v.status.is_none(),
                Invariant::MaxLatencyMs { value } => {
                    v.status.is_some() && v.latency_ms > *value as f64
                }
            };
            broken.then(|| match v.status {
                Some(status) => format!("{}: status {status}, {:.1} ms", v.name, v.latency_ms),
                None => format!(
                    "{}: {}",
                    v.name,
                    v.error.as_deref().unwrap_or("no response")
                ),
            })
        })
        .collect();
    InvariantVerdict {
        name: invariant.name(),
        passed: failures.is_empty(),
        failures,
    }
}

pub fn summarise(checks: Vec<CheckVerdict>, invariants: Vec<InvariantVerdict>) -> ChecksResult {
    let failed = checks.iter().filter(|c| !c.passed).count();
    let passed = failed == 0 && invariants.iter().all(|i| i.passed);
    ChecksResult {
        passed,
        total: checks.len(),
        failed,
        checks,
        invariants,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> Result<ChecksSpec, SpecError> {
        ChecksSpec::from_json(&value)
    }

    #[test]
    fn defaults_fill_a_minimal_check() {
        let s = spec(json!({"checks": [{"path": "/"}]})).expect("valid");
        assert_eq!(s.checks[0].method, "GET");
        assert_eq!(s.checks[0].expect_status, 200);
        assert_eq!(s.timeout_ms, 5_000);
        assert_eq!(s.timeout(), std::time::Duration::from_secs(5));
    }

    #[test]
    fn bad_specs_say_what_to_fix() {
        let cases = [
            (json!({"checks": []}), "spec.checks"),
            (
                json!({"checks": [{"path": "http://x/"}]}),
                "spec.checks[0].path",
            ),
            (
                json!({"checks": [{"path": "/", "method": "get"}]}),
                "spec.checks[0].method",
            ),
            (
                json!({"checks": [{"path": "/", "expect_status": 42}]}),
                "spec.checks[0].expect_status",
            ),
            (
                json!({"checks": [{"path": "/", "headers": {"Authorization": "Bearer abc"}}]}),
                "spec.checks[0].headers.Authorization",
            ),
            (
                json!({"checks": [{"path": "/"}], "timeout_ms": 0}),
                "spec.timeout_ms",
            ),
        ];
        for (value, field) in cases {
            let err = spec(value).expect_err("invalid");
            assert_eq!(err.field, field);
        }
        let unknown = spec(json!({"checks": [{"path": "/", "expect": 200}]})).expect_err("unknown");
        assert!(unknown.message.contains("unknown field"), "{unknown}");
    }

    #[test]
    fn credential_headers_may_reference_the_agent_environment() {
        let s = spec(
            json!({"checks": [{"path": "/", "headers": {"Authorization": "${env:TARGET_TOKEN}"}}]}),
        );
        assert!(s.is_ok());
        assert_eq!(env_reference("${env:TARGET_TOKEN}"), Some("TARGET_TOKEN"));
        assert_eq!(env_reference("${env:}"), None);
        assert_eq!(env_reference("Bearer x"), None);
    }

    #[test]
    fn invariants_are_written_by_rule_name() {
        let s = spec(json!({"checks": [{"path": "/"}], "invariants": [
            {"rule": "no_5xx"}, {"rule": "no_errors"}, {"rule": "max_latency_ms", "value": 300}
        ]}))
        .expect("valid");
        assert_eq!(
            s.invariants,
            [
                Invariant::No5xx,
                Invariant::NoErrors,
                Invariant::MaxLatencyMs { value: 300 }
            ]
        );
    }

    #[test]
    fn verdicts_follow_status_latency_and_text() {
        let check: Check = serde_json::from_value(
            json!({"path": "/", "max_latency_ms": 100, "expect_text": "ok"}),
        )
        .expect("check");
        let good = Observation {
            status: Some(200),
            latency_ms: 3.0,
            error: None,
            text_found: Some(true),
        };
        assert!(judge_check(&check, &good).passed);
        let slow_wrong = Observation {
            status: Some(503),
            latency_ms: 250.0,
            error: None,
            text_found: Some(false),
        };
        let verdict = judge_check(&check, &slow_wrong);
        assert!(!verdict.passed);
        assert_eq!(verdict.failures.len(), 3, "{:?}", verdict.failures);
        let refused = Observation {
            status: None,
            latency_ms: 0.2,
            error: Some("connection refused".into()),
            text_found: None,
        };
        assert_eq!(
            judge_check(&check, &refused).failures,
            ["connection refused"]
        );

        let verdicts = vec![judge_check(&check, &good), verdict];
        assert!(!judge_invariant(&Invariant::No5xx, &verdicts).passed);
        assert!(judge_invariant(&Invariant::NoErrors, &verdicts).passed);
        let result = summarise(verdicts, vec![]);
        assert!(!result.passed);
        assert_eq!((result.total, result.failed), (2, 1));
    }
}

#[cfg(test)]
mod timeout_tests {
    use super::*;
    use serde_json::json;

    /// `timeout` is a humantime string; `timeout_ms`, its older form, is still read.
    #[test]
    fn timeout_is_humantime_and_timeout_ms_its_older_form() {
        let read = |spec: serde_json::Value| ChecksSpec::from_json(&spec);
        let new = read(json!({"checks": [{"path": "/"}], "timeout": "1500ms"})).unwrap();
        assert_eq!(new.timeout(), std::time::Duration::from_millis(1500));
        let old = read(json!({"checks": [{"path": "/"}], "timeout_ms": 1500})).unwrap();
        assert_eq!(old.timeout(), new.timeout());
        for (spec, field) in [
            (
                json!({"checks": [{"path": "/"}], "timeout": "2m"}),
                "spec.timeout",
            ),
            (
                json!({"checks": [{"path": "/"}], "timeout": "0s"}),
                "spec.timeout",
            ),
            (
                json!({"checks": [{"path": "/"}], "timeout": "1s", "timeout_ms": 900}),
                "spec.timeout",
            ),
        ] {
            assert_eq!(read(spec).unwrap_err().field, field);
        }
        assert!(read(json!({"checks": [{"path": "/"}], "timeout": "soon"})).is_err());
    }
}

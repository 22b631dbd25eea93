//! The scenario spec: what is read from JSON, its defaults and limits, and the canonical
//! JSON a replay command carries (every default written out, so a later change of a
//! default cannot change a replay).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::load::parse_duration;
use crate::request::{SpecError, parse_spec, spec_error, validate_request};
use crate::version::canonical_json;

use super::op::Op;

pub const DEFAULT_COUNT: u32 = 30;
pub const DEFAULT_WARMUP: u32 = 5;
pub const DEFAULT_CONCURRENCY: u32 = 1;
pub const DEFAULT_PREFIX: &str = "0ddc0ffe";
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub const MAX_OPS: usize = 100;
/// Per operation, for the load and for the warm-up.
pub const MAX_COUNT: u32 = 10_000;
/// Warm-up included.
pub const MAX_TOTAL_REQUESTS: u64 = 100_000;
pub const MAX_CONCURRENCY: u32 = 256;
/// Per request, as for the other kinds.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_NAME: usize = 200;

/// The spec as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    slug: String,
    ops: Vec<String>,
    count: Option<u32>,
    warmup: Option<u32>,
    concurrency: Option<u32>,
    prefix: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    timeout: Option<String>,
    name: Option<String>,
}

/// The spec as written out canonically: every field, defaults applied.
#[derive(Debug, Serialize)]
struct CanonicalSpec<'a> {
    slug: &'a str,
    name: &'a str,
    ops: Vec<String>,
    count: u32,
    warmup: u32,
    concurrency: u32,
    prefix: &'a str,
    headers: &'a BTreeMap<String, String>,
    timeout: String,
}

/// A validated scenario spec with its defaults applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioSpec {
    /// `[a-z0-9][a-z0-9-]{0,62}`: names the run in its identity.
    pub slug: String,
    /// The scenario's name; the slug unless given.
    pub name: String,
    pub ops: Vec<Op>,
    /// Load requests per op, unless the op states its own.
    pub count: u32,
    /// Warm-up requests per op, discarded from the quoted numbers.
    pub warmup: u32,
    /// 1 is sequential.
    pub concurrency: u32,
    /// 8 lower-case hex digits that start every trace id.
    pub prefix: String,
    /// Sent with every request; a credential-named one is a `${env:NAME}` reference.
    pub headers: BTreeMap<String, String>,
    /// Per request.
    pub timeout: Duration,
}

impl ScenarioSpec {
    /// Parses and validates a spec; the error says what to fix, and where.
    pub fn from_json(value: &Value) -> Result<ScenarioSpec, SpecError> {
        let raw: RawSpec = parse_spec("spec", value)?;
        validate_slug(&raw.slug)?;
        if raw.ops.is_empty() {
            return Err(spec_error("spec.ops", "at least one op is needed"));
        }
        if raw.ops.len() > MAX_OPS {
            return Err(spec_error(
                "spec.ops",
                format!("at most {MAX_OPS} ops ({} given)", raw.ops.len()),
            ));
        }
        let ops = raw
            .ops
            .iter()
            .enumerate()
            .map(|(i, text)| Op::parse(&format!("spec.ops[{i}]"), text))
            .collect::<Result<Vec<_>, _>>()?;
        let count = raw.count.unwrap_or(DEFAULT_COUNT);
        if !(1..=MAX_COUNT).contains(&count) {
            return Err(spec_error(
                "spec.count",
                format!("must be between 1 and {MAX_COUNT} per op"),
            ));
        }
        let warmup = raw.warmup.unwrap_or(DEFAULT_WARMUP);
        if warmup > MAX_COUNT {
            return Err(spec_error(
                "spec.warmup",
                format!("at most {MAX_COUNT} per op"),
            ));
        }
        let concurrency = raw.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if !(1..=MAX_CONCURRENCY).contains(&concurrency) {
            return Err(spec_error(
                "spec.concurrency",
                format!("must be between 1 (sequential) and {MAX_CONCURRENCY}"),
            ));
        }
        let prefix = raw.prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_string());
        let hex8 = prefix.len() == 8
            && prefix
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !hex8 {
            return Err(spec_error(
                "spec.prefix",
                format!("{prefix:?} must be 8 lower-case hex digits, such as {DEFAULT_PREFIX}"),
            ));
        }
        validate_headers(&raw.headers)?;
        let timeout = match raw.timeout.as_deref() {
            None => DEFAULT_TIMEOUT,
            Some(text) => parse_duration("spec.timeout", text)?,
        };
        if timeout < Duration::from_millis(1) || timeout > MAX_TIMEOUT {
            return Err(spec_error(
                "spec.timeout",
                "must be between 1ms and 60s per request",
            ));
        }
        let name = match raw.name {
            None => raw.slug.clone(),
            Some(name) => {
                let ok = !name.trim().is_empty()
                    && name.chars().count() <= MAX_NAME
                    && !name.chars().any(char::is_control);
                if !ok {
                    return Err(spec_error(
                        "spec.name",
                        format!("must be 1 to {MAX_NAME} characters on one line"),
                    ));
                }
                name
            }
        };
        let spec = ScenarioSpec {
            slug: raw.slug,
            name,
            ops,
            count,
            warmup,
            concurrency,
            prefix,
            headers: raw.headers,
            timeout,
        };
        let total = spec.total_requests();
        if total > MAX_TOTAL_REQUESTS {
            return Err(spec_error(
                "spec",
                format!(
                    "{total} requests (warm-up included) is more than the {MAX_TOTAL_REQUESTS} a scenario may send"
                ),
            ));
        }
        Ok(spec)
    }

    /// Load requests of op `i`: its own count, or the spec's.
    pub fn op_count(&self, i: usize) -> u32 {
        self.ops
            .get(i)
            .and_then(|op| op.count)
            .unwrap_or(self.count)
    }

    pub fn warmup_requests(&self) -> u64 {
        u64::from(self.warmup) * self.ops.len() as u64
    }

    pub fn load_requests(&self) -> u64 {
        (0..self.ops.len())
            .map(|i| u64::from(self.op_count(i)))
            .sum()
    }

    /// Every request the run sends, warm-up included (the units it spends).
    pub fn total_requests(&self) -> u64 {
        self.warmup_requests() + self.load_requests()
    }

    /// The spec with every default written out and the ops as canonical lines.
    pub fn to_json(&self) -> Value {
        let canonical = CanonicalSpec {
            slug: &self.slug,
            name: &self.name,
            ops: self.ops.iter().map(Op::line).collect(),
            count: self.count,
            warmup: self.warmup,
            concurrency: self.concurrency,
            prefix: &self.prefix,
            headers: &self.headers,
            timeout: format_timeout(self.timeout),
        };
        // Strings and numbers only: serialising cannot fail.
        serde_json::to_value(canonical).unwrap_or(Value::Null)
    }

    /// [`ScenarioSpec::to_json`] as canonical JSON text (keys sorted, no whitespace).
    pub fn canonical_json(&self) -> String {
        canonical_json(&self.to_json())
    }
}

fn validate_slug(slug: &str) -> Result<(), SpecError> {
    let bytes = slug.as_bytes();
    let ok = matches!(bytes.first(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(spec_error(
            "spec.slug",
            format!(
                "{slug:?} must be 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit"
            ),
        ))
    }
}

/// Header names the scenario's identity sets on every request.
const IDENTITY_HEADERS: [&str; 2] = ["user-agent", "traceparent"];

fn validate_headers(headers: &BTreeMap<String, String>) -> Result<(), SpecError> {
    // The shared rule on credential-named headers; method and path are placeholders.
    validate_request("spec", "GET", "/", headers)?;
    for name in headers.keys() {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(spec_error(
                format!("spec.headers.{name}"),
                "is not a valid header name",
            ));
        }
        if IDENTITY_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(spec_error(
                format!("spec.headers.{name}"),
                "is set by the scenario's identity on every request",
            ));
        }
    }
    Ok(())
}

/// `60s`, or `1500ms` when not whole seconds.
fn format_timeout(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// A spec given as JSON text with its ops taken from an ops file: the ops go into the
/// spec's `ops`, which must not be there already (one source of ops, not a merge).
pub fn spec_with_ops(spec_text: &str, ops: &[Op]) -> Result<String, SpecError> {
    let mut value: Value = serde_json::from_str(spec_text)
        .map_err(|e| spec_error("spec", format!("is not JSON: {e}")))?;
    let Value::Object(fields) = &mut value else {
        return Err(spec_error("spec", "must be a JSON object"));
    };
    if fields.contains_key("ops") {
        return Err(spec_error(
            "spec.ops",
            "is given by the ops file; leave it out of the spec",
        ));
    }
    let lines = ops.iter().map(|op| Value::String(op.line())).collect();
    fields.insert("ops".to_string(), Value::Array(lines));
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error(value: Value) -> String {
        ScenarioSpec::from_json(&value)
            .expect_err("invalid spec")
            .to_string()
    }

    #[test]
    fn defaults_apply_and_the_canonical_json_writes_them_out() {
        let spec = ScenarioSpec::from_json(&json!({
            "slug": "before-fix",
            "ops": ["GET /api/users", "POST  /api/orders 10 {\"sku\": \"A1\"}"],
        }))
        .expect("valid");
        assert_eq!(spec.name, "before-fix");
        assert_eq!(
            (spec.count, spec.warmup, spec.concurrency),
            (30, 5, 1),
            "defaults"
        );
        assert_eq!(spec.prefix, "0ddc0ffe");
        assert_eq!(spec.timeout, Duration::from_secs(60));
        assert_eq!((spec.op_count(0), spec.op_count(1)), (30, 10));
        assert_eq!(spec.total_requests(), 5 + 5 + 30 + 10);
        assert_eq!(
            spec.canonical_json(),
            r#"{"concurrency":1,"count":30,"headers":{},"name":"before-fix","ops":["GET /api/users","POST /api/orders 10 {\"sku\": \"A1\"}"],"prefix":"0ddc0ffe","slug":"before-fix","timeout":"60s","warmup":5}"#
        );
        let again = ScenarioSpec::from_json(&spec.to_json()).expect("canonical is valid");
        assert_eq!(
            again, spec,
            "the canonical JSON reads back to the same spec"
        );

        let fractional = ScenarioSpec::from_json(&json!({
            "slug": "x", "ops": ["GET /"], "timeout": "1.5s", "name": "Checkout, before the fix",
        }))
        .expect("valid");
        assert_eq!(fractional.to_json()["timeout"], "1500ms");
        assert_eq!(fractional.name, "Checkout, before the fix");
    }

    #[test]
    fn validation_errors_name_the_field_and_the_limit() {
        let ok = || json!({"slug": "s", "ops": ["GET /"]});
        let with = |key: &str, value: Value| {
            let mut spec = ok();
            spec[key] = value;
            spec
        };
        assert!(error(json!({"ops": ["GET /"]})).contains("missing field `slug`"));
        assert!(error(with("extra", json!(1))).contains("unknown field `extra`"));
        for slug in ["", "-a", "Upper", "a_b", &"a".repeat(64)] {
            assert!(
                error(with("slug", json!(slug))).starts_with("spec.slug: "),
                "{slug}"
            );
        }
        assert!(ScenarioSpec::from_json(&with("slug", json!("a".repeat(63)))).is_ok());
        assert_eq!(
            error(with("ops", json!([]))),
            "spec.ops: at least one op is needed"
        );
        assert_eq!(
            error(with("ops", json!(vec!["GET /"; 101]))),
            "spec.ops: at most 100 ops (101 given)"
        );
        assert_eq!(
            error(with("ops", json!(["GET /", "GET nope"]))),
            "spec.ops[1].path: must start with '/' (the spec never names the target)"
        );
        assert_eq!(
            error(with("count", json!(10_001))),
            "spec.count: must be between 1 and 10000 per op"
        );
        assert_eq!(
            error(with("warmup", json!(10_001))),
            "spec.warmup: at most 10000 per op"
        );
        assert_eq!(
            error(with("concurrency", json!(0))),
            "spec.concurrency: must be between 1 (sequential) and 256"
        );
        assert_eq!(
            error(with("concurrency", json!(257))),
            "spec.concurrency: must be between 1 (sequential) and 256"
        );
        assert_eq!(
            error(with("prefix", json!("0DDC0FFE"))),
            "spec.prefix: \"0DDC0FFE\" must be 8 lower-case hex digits, such as 0ddc0ffe"
        );
        assert_eq!(
            error(with("timeout", json!("61s"))),
            "spec.timeout: must be between 1ms and 60s per request"
        );
        assert!(error(with("timeout", json!("soon"))).starts_with("spec.timeout: \"soon\""));
        assert_eq!(
            error(with("name", json!(" "))),
            "spec.name: must be 1 to 200 characters on one line"
        );
        // 11 ops of 10,000 (warm-up 0) pass the per-op limit but not the total.
        let mut big = with("ops", json!(vec!["GET /"; 11]));
        big["count"] = json!(10_000);
        big["warmup"] = json!(0);
        assert_eq!(
            error(big.clone()),
            "spec: 110000 requests (warm-up included) is more than the 100000 a scenario may send"
        );
        big["ops"] = json!(vec!["GET /"; 10]);
        big["warmup"] = json!(1);
        assert!(error(big).contains("100010 requests (warm-up included)"));
    }

    #[test]
    fn headers_keep_credentials_out_and_identity_to_itself() {
        let with_headers =
            |headers: Value| json!({"slug": "s", "ops": ["GET /"], "headers": headers});
        assert!(
            ScenarioSpec::from_json(&with_headers(
                json!({"Authorization": "${env:TOKEN}", "Accept": "application/json"})
            ))
            .is_ok()
        );
        let e = error(with_headers(json!({"Authorization": "Bearer abc"})));
        assert!(e.starts_with("spec.headers.Authorization: a credential-named header's value must be \"${secret:NAME}\""), "{e}");
        assert_eq!(
            error(with_headers(json!({"User-Agent": "curl"}))),
            "spec.headers.User-Agent: is set by the scenario's identity on every request"
        );
        assert_eq!(
            error(with_headers(json!({"Bad Name": "x"}))),
            "spec.headers.Bad Name: is not a valid header name"
        );
    }

    #[test]
    fn ops_from_a_file_go_into_the_spec() {
        let ops = super::super::op::parse_ops_file("GET /\nPOST /o 2 {}\n").expect("ops");
        let text = spec_with_ops(r#"{"slug": "f"}"#, &ops).expect("merged");
        let spec =
            ScenarioSpec::from_json(&serde_json::from_str(&text).expect("json")).expect("valid");
        assert_eq!(spec.ops, ops);
        assert_eq!(
            spec_with_ops(r#"{"slug": "f", "ops": ["GET /"]}"#, &ops)
                .expect_err("two sources")
                .to_string(),
            "spec.ops: is given by the ops file; leave it out of the spec"
        );
        assert_eq!(
            spec_with_ops("[]", &ops).expect_err("array").to_string(),
            "spec: must be a JSON object"
        );
    }
}

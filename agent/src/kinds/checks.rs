//! The `checks` kind: one HTTP request per check against the run's target, judged by the
//! domain rules, then the invariants across all of them.
//!
//! Bodies are read only to look for `expect_text` and are never kept; the values of
//! credential-named headers (and of anything read from the agent's environment) are
//! scrubbed from every message this module produces.

pub mod dry_run;

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, USER_AGENT};
use iohr_domain::checks::{
    Check, CheckVerdict, ChecksResult, ChecksSpec, Observation, judge_check, judge_invariant,
    summarise,
};
use iohr_domain::{FrameKind, RunStatus};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bounded::{Bounded, bounded};
use super::describe::describe;
use super::registry::Kind;
use super::target::Target;
use super::{Outcome, RunContext, emit, to_json};
use crate::dry_run::Described;
use crate::http_client::{self, HttpClient};
use crate::request::{BuildError, Parts, Trace, build, scrub};
use crate::secrets::EnvRefusal;

const AGENT_USER_AGENT: &str = concat!("iohr-agent/", env!("CARGO_PKG_VERSION"));

pub struct Checks;

impl Kind for Checks {
    type Contract = iohr_domain::kind::checks::Checks;
    type Plan = ChecksSpec;

    fn from_contract(plan: ChecksSpec) -> ChecksSpec {
        plan
    }

    async fn run(spec: ChecksSpec, ctx: &RunContext) -> Outcome {
        run(spec, ctx).await
    }

    fn dry_run(spec: &ChecksSpec, ctx: &RunContext) -> Result<Option<Described>, String> {
        dry_run::dry_run(spec, ctx)
    }

    /// The count, then a line per check and invariant, as the CLI's record shows them.
    fn summary(result: &Value) -> Option<Vec<String>> {
        iohr_domain::checks::ChecksResult::deserialize(result)
            .ok()
            .map(|checks| checks.summary())
    }
}

/// Runs the checks of `spec` against the context's target, reading `${env:NAME}` header
/// values through the context's lookup.
pub async fn run(spec: ChecksSpec, ctx: &RunContext) -> Outcome {
    let frames = &ctx.frames;
    let cancel = &ctx.cancel;
    let env = ctx.env_fn();
    // The controller validates too; the agent does not trust that it did.
    if let Err(e) = spec.validate() {
        return Outcome::error(format!("invalid spec: {e}"), 0);
    }
    let base = match Target::parse(&ctx.target) {
        Ok(base) => base,
        Err(e) => return Outcome::error(e.to_string(), 0),
    };

    emit(
        frames,
        FrameKind::Phase,
        json!({"phase": "checks", "total": spec.checks.len()}),
    )
    .await;

    let client = http_client::pooled(ctx.options.egress.clone());
    let timeout = spec.timeout();
    let trace = Trace::new(&ctx.run_id, spec.trace_sample);

    let mut verdicts: Vec<CheckVerdict> = Vec::with_capacity(spec.checks.len());
    let mut sent: u64 = 0;
    let mut answered: u64 = 0;
    let mut first_error: Option<String> = None;

    for check in &spec.checks {
        if cancel.is_cancelled() {
            return cancelled_outcome(verdicts, sent);
        }
        let step = run_check(&client, &base, check, timeout, cancel, &env, &trace).await;
        let seen = match step {
            Step::NotSent(seen) => seen,
            Step::Sent(seen) => {
                sent += 1;
                if seen.status.is_some() {
                    answered += 1;
                } else if first_error.is_none() {
                    first_error = seen.error.clone();
                }
                seen
            }
            Step::Cancelled => return cancelled_outcome(verdicts, sent + 1),
        };
        let verdict = judge_check(check, &seen);
        tracing::info!(
            check = %verdict.name,
            passed = verdict.passed,
            status = ?verdict.status,
            latency_ms = verdict.latency_ms,
            "check judged"
        );
        emit(frames, FrameKind::Check, to_json(&verdict)).await;
        verdicts.push(verdict);
    }

    let invariants: Vec<_> = spec
        .invariants
        .iter()
        .map(|invariant| judge_invariant(invariant, &verdicts))
        .collect();
    for verdict in &invariants {
        let mut data = to_json(verdict);
        if let Value::Object(fields) = &mut data {
            fields.insert("invariant".to_string(), Value::Bool(true));
        }
        emit(frames, FrameKind::Check, data).await;
    }

    let result = summarise(verdicts, invariants);
    // "Unreachable" means nothing that was sent got any answer: no verdict on the target.
    let (status, reason) = if sent > 0 && answered == 0 {
        let first = first_error.unwrap_or_else(|| "no response".to_string());
        (
            RunStatus::Error,
            Some(format!("target unreachable: {first}")),
        )
    } else if result.passed {
        (RunStatus::Passed, None)
    } else {
        (RunStatus::Failed, None)
    };
    Outcome {
        status,
        reason,
        result: to_json(&result),
        units_spent: sent,
    }
}

/// What happened to one check.
enum Step {
    /// The request could not be built (e.g. a missing environment variable).
    NotSent(Observation),
    Sent(Observation),
    /// Cancelled while the request was in flight.
    Cancelled,
}

async fn run_check(
    client: &HttpClient,
    base: &Target,
    check: &Check,
    timeout: Duration,
    cancel: &CancellationToken,
    env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
    trace: &Trace,
) -> Step {
    let (request, secrets) = match build_request(base, check, env, trace) {
        Ok(built) => built,
        Err(e) => {
            return Step::NotSent(Observation {
                status: None,
                latency_ms: 0.0,
                error: Some(e.to_string()),
                text_found: None,
            });
        }
    };
    let scrub = |text: String| scrub(text, &secrets);

    // One deadline covers connecting, the response head and the whole body.
    let started = Instant::now();
    let deadline = started + timeout;
    let timeout_ms = timeout.as_millis();
    let elapsed_ms = || started.elapsed().as_secs_f64() * 1000.0;

    crate::metrics::requests_sent(1);
    let response = match bounded(client.request(request), deadline, cancel).await {
        Bounded::Cancelled => return Step::Cancelled,
        Bounded::TimedOut => {
            return Step::Sent(no_response(
                elapsed_ms(),
                format!("no response within {timeout_ms} ms"),
            ));
        }
        Bounded::Done(Err(e)) => return Step::Sent(no_response(elapsed_ms(), scrub(describe(&e)))),
        Bounded::Done(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    let mut matcher = check.expect_text.as_deref().map(TextMatcher::new);
    let body_error = match bounded(
        read_body(response.into_body(), matcher.as_mut()),
        deadline,
        cancel,
    )
    .await
    {
        Bounded::Cancelled => return Step::Cancelled,
        Bounded::TimedOut => Some(format!("body not complete within {timeout_ms} ms")),
        Bounded::Done(Err(e)) => Some(scrub(format!("reading the body: {}", describe(&e)))),
        Bounded::Done(Ok(())) => None,
    };
    Step::Sent(Observation {
        status: Some(status),
        latency_ms: elapsed_ms(),
        // A body that broke off before the text showed up is judged by its error alone.
        text_found: matcher
            .map(|m| m.found)
            .filter(|found| *found || body_error.is_none()),
        error: body_error,
    })
}

fn no_response(latency_ms: f64, error: String) -> Observation {
    Observation {
        status: None,
        latency_ms,
        error: Some(error),
        text_found: None,
    }
}

/// Builds the request through the one builder and returns, alongside it, the values that
/// must never be echoed. Messages name headers and variables, never header values.
fn build_request(
    base: &Target,
    check: &Check,
    env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
    trace: &Trace,
) -> Result<(Request<Full<Bytes>>, Vec<String>), BuildError> {
    let built = build(
        Parts {
            method: &check.method,
            uri: &|| {
                base.join(&check.path).map_err(|_| {
                    format!(
                        "path {}: does not make a valid URL with the target",
                        check.path
                    )
                })
            },
            headers: &check.headers,
            body: check.body.clone().map(Bytes::from).unwrap_or_default(),
            defaults: &[(USER_AGENT, HeaderValue::from_static(AGENT_USER_AGENT))],
        },
        env,
        Some(trace),
    )?;
    Ok((built.request(), built.secrets))
}

/// Drains the body (latency runs to its end) while looking for the expected text.
async fn read_body(
    mut body: Incoming,
    mut matcher: Option<&mut TextMatcher>,
) -> Result<(), hyper::Error> {
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data()
            && let Some(m) = matcher.as_deref_mut()
        {
            m.feed(&data);
        }
    }
    Ok(())
}

/// Finds a byte string in a body streamed in chunks without keeping the body: only the
/// last `needle.len() - 1` bytes are carried over to catch a match across chunks.
struct TextMatcher {
    needle: Vec<u8>,
    tail: Vec<u8>,
    found: bool,
}

impl TextMatcher {
    fn new(text: &str) -> TextMatcher {
        TextMatcher {
            needle: text.as_bytes().to_vec(),
            tail: Vec::new(),
            found: text.is_empty(),
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        if self.found || chunk.is_empty() {
            return;
        }
        let keep = self.needle.len() - 1;
        if !self.tail.is_empty() {
            let mut edge = self.tail.clone();
            edge.extend_from_slice(&chunk[..chunk.len().min(keep)]);
            if contains(&edge, &self.needle) {
                self.found = true;
                return;
            }
        }
        if contains(chunk, &self.needle) {
            self.found = true;
            return;
        }
        if chunk.len() >= keep {
            self.tail = chunk[chunk.len() - keep..].to_vec();
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(keep);
            self.tail.drain(..excess);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn cancelled_outcome(verdicts: Vec<CheckVerdict>, sent: u64) -> Outcome {
    let mut result: ChecksResult = summarise(verdicts, Vec::new());
    // An unfinished run has no positive verdict, whatever the checks so far said.
    result.passed = false;
    Outcome {
        status: RunStatus::Cancelled,
        reason: Some("cancelled".to_string()),
        result: to_json(&result),
        units_spent: sent,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::kinds::test_server::start_server;
    use crate::kinds::{EnvVars, FrameSender, NewFrame};

    fn spec(value: serde_json::Value) -> ChecksSpec {
        ChecksSpec::from_json(&value).expect("valid spec")
    }

    fn drain(mut rx: mpsc::UnboundedReceiver<NewFrame>) -> Vec<NewFrame> {
        let mut frames = Vec::new();
        while let Ok(frame) = rx.try_recv() {
            frames.push(frame);
        }
        frames
    }

    fn result_of(outcome: &Outcome) -> ChecksResult {
        serde_json::from_value(outcome.result.clone()).expect("result is a ChecksResult")
    }

    #[tokio::test]
    async fn verdicts_follow_status_latency_and_text() {
        let (target, _seen) = start_server().await;
        let spec = spec(json!({
            "checks": [
                {"path": "/ok", "expect_text": "hello", "max_latency_ms": 5000},
                {"path": "/ok", "expect_text": "absent"},
                {"path": "/status/503"},
                {"path": "/slow", "max_latency_ms": 50},
                {"name": "down on purpose", "path": "/status/503", "expect_status": 503},
                {"method": "POST", "path": "/echo-length", "body": "payload-xyz", "expect_text": "got 11 bytes"},
            ],
            "invariants": [{"rule": "no_5xx"}, {"rule": "no_errors"}],
        }));
        let (tx, rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(&target, tx.clone())).await;
        drop(tx);

        assert_eq!(outcome.status, RunStatus::Failed, "{:?}", outcome.reason);
        assert_eq!(outcome.units_spent, 6);
        let result = result_of(&outcome);
        let passed: Vec<bool> = result.checks.iter().map(|c| c.passed).collect();
        assert_eq!(passed, [true, false, false, false, true, true]);
        assert_eq!(
            result.checks[1].failures,
            ["body does not contain \"absent\""]
        );
        assert_eq!(result.checks[2].failures, ["status 503, expected 200"]);
        assert_eq!(result.checks[3].status, Some(200));
        assert!(
            result.checks[3].latency_ms >= 300.0,
            "{:?}",
            result.checks[3]
        );
        assert!(result.checks[3].failures[0].contains("limit 50 ms"));
        assert_eq!(result.checks[4].name, "down on purpose");
        assert_eq!((result.total, result.failed), (6, 3));
        let invariants: Vec<(&str, bool)> = result
            .invariants
            .iter()
            .map(|i| (i.name.as_str(), i.passed))
            .collect();
        assert_eq!(invariants, [("no 5xx", false), ("no errors", true)]);

        let frames = drain(rx);
        let kinds: Vec<FrameKind> = frames.iter().map(|f| f.kind).collect();
        let mut expected = vec![FrameKind::Phase];
        expected.extend([FrameKind::Check; 8]);
        assert_eq!(kinds, expected);
        assert_eq!(frames[0].data, json!({"phase": "checks", "total": 6}));
        assert_eq!(frames[1].data["path"], "/ok");
        assert!(frames[1].data.get("invariant").is_none());
        assert_eq!(frames[7].data["invariant"], true);
        assert_eq!(frames[7].data["name"], "no 5xx");
        assert_eq!(frames[8].data["passed"], true);

        // Neither request nor response bodies are recorded.
        let recorded = format!("{:?}{}", frames, outcome.result);
        for body in ["payload-xyz", "hello, world", "tardy-reply"] {
            assert!(!recorded.contains(body), "{body} was recorded");
        }
    }

    #[tokio::test]
    async fn passing_checks_pass_under_a_target_path_prefix() {
        let (target, mut seen) = start_server().await;
        let spec =
            spec(json!({"checks": [{"path": "/ok"}], "invariants": [{"rule": "no_errors"}]}));
        let (tx, _rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(format!("{target}/api/"), tx.clone())).await;
        assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
        assert!(result_of(&outcome).passed);
        let head = seen.recv().await.expect("a request");
        assert!(head.starts_with("GET /api/ok HTTP/1.1\r\n"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("user-agent: iohr-agent/"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn unreachable_target_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let spec = spec(json!({"checks": [{"path": "/"}, {"path": "/health"}]}));
        let (tx, rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(format!("http://{addr}"), tx.clone())).await;
        drop(tx);

        assert_eq!(outcome.status, RunStatus::Error);
        let reason = outcome.reason.clone().expect("a reason");
        assert!(reason.starts_with("target unreachable: "), "{reason}");
        assert!(reason.to_ascii_lowercase().contains("refused"), "{reason}");
        assert_eq!(outcome.units_spent, 2);
        let result = result_of(&outcome);
        assert_eq!(result.failed, 2);
        assert!(
            result
                .checks
                .iter()
                .all(|c| c.status.is_none() && c.error.is_some())
        );
        assert_eq!(
            drain(rx).len(),
            3,
            "phase and both checks are still reported"
        );
    }

    #[tokio::test]
    async fn a_timeout_on_every_check_is_unreachable() {
        let (target, _seen) = start_server().await;
        let spec = spec(json!({"checks": [{"path": "/hang"}], "timeout_ms": 100}));
        let (tx, _rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(&target, tx.clone())).await;
        assert_eq!(outcome.status, RunStatus::Error);
        assert_eq!(
            outcome.reason.as_deref(),
            Some("target unreachable: no response within 100 ms")
        );
    }

    #[tokio::test]
    async fn cancel_mid_request_stops_promptly() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "checks": [{"path": "/ok"}, {"path": "/hang"}, {"path": "/ok"}],
            "timeout_ms": 60_000,
        }));
        let cancel = CancellationToken::new();
        let (tx, rx) = FrameSender::channel();
        let run_cancel = cancel.clone();
        let task = tokio::spawn(async move {
            let outcome = run(
                spec,
                &RunContext::new(&target, tx.clone()).with_cancel(run_cancel),
            )
            .await;
            drop(tx);
            outcome
        });

        // The event: the server has the hanging request in hand.
        loop {
            let head = seen.recv().await.expect("requests arrive");
            if head.starts_with("GET /hang ") {
                break;
            }
        }
        let cancelled_at = std::time::Instant::now();
        cancel.cancel();
        let outcome = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("run stops well before its 60 s request timeout")
            .expect("run task");
        assert!(cancelled_at.elapsed() < Duration::from_secs(1));

        assert_eq!(outcome.status, RunStatus::Cancelled);
        assert_eq!(outcome.reason.as_deref(), Some("cancelled"));
        assert_eq!(outcome.units_spent, 2);
        let result = result_of(&outcome);
        assert_eq!(result.checks.len(), 1);
        assert!(result.checks[0].passed);
        assert!(!result.passed, "a cancelled run never reads as passed");
        assert_eq!(drain(rx).len(), 2, "phase and the first check");
    }

    #[tokio::test]
    async fn credential_from_env_is_sent_but_never_recorded() {
        const SECRET: &str = "Bearer s3cret-value-42";
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "checks": [{
                "path": "/ok",
                "headers": {"Authorization": "${env:IOHR_TEST_TOKEN}", "X-Trace": "plain"},
                // Fails on purpose so failure messages are in the record too.
                "expect_status": 201,
            }],
        }));
        let (tx, rx) = FrameSender::channel();
        let env = |name: &str| (name == "IOHR_TEST_TOKEN").then(|| SECRET.to_string());
        let outcome = run(
            spec,
            &RunContext::new(&target, tx.clone()).with_env(EnvVars::from_fn(env)),
        )
        .await;
        drop(tx);

        let head = seen.recv().await.expect("a request");
        assert!(
            head.contains(&format!("authorization: {SECRET}\r\n")),
            "{head}"
        );
        assert!(head.contains("x-trace: plain\r\n"), "{head}");

        assert_eq!(outcome.status, RunStatus::Failed);
        let recorded = format!("{:?}{}{:?}", drain(rx), outcome.result, outcome.reason);
        assert!(recorded.contains("status 200, expected 201"), "{recorded}");
        assert!(!recorded.contains("s3cret"), "{recorded}");
    }

    #[tokio::test]
    async fn a_missing_env_variable_fails_the_check_without_sending() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "checks": [{"path": "/ok", "headers": {"X-Api-Key": "${env:IOHR_SURELY_UNSET_VARIABLE_1234}"}}],
        }));
        let (tx, _rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(&target, tx.clone())).await;

        assert_eq!(outcome.status, RunStatus::Failed);
        assert_eq!(outcome.units_spent, 0);
        let result = result_of(&outcome);
        assert_eq!(
            result.checks[0].failures,
            [
                "header X-Api-Key: environment variable IOHR_SURELY_UNSET_VARIABLE_1234 is not set on the agent"
            ]
        );
        assert!(seen.try_recv().is_err(), "no request was sent");
    }

    #[tokio::test]
    async fn bad_targets_are_errors_with_a_clear_reason() {
        let spec = spec(json!({"checks": [{"path": "/"}]}));
        let cases = [
            ("https://127.0.0.1:1", "https targets are not supported yet"),
            (
                "ftp://127.0.0.1",
                "the target must be an absolute http:// URL such as http://127.0.0.1:8080",
            ),
            (
                "127.0.0.1:8080",
                "the target must be an absolute http:// URL such as http://127.0.0.1:8080",
            ),
            (
                "http://user:pw@127.0.0.1",
                "the target must not carry credentials; use a ${env:NAME} header instead",
            ),
        ];
        for (target, reason) in cases {
            let (tx, rx) = FrameSender::channel();
            let outcome = run(spec.clone(), &RunContext::new(target, tx.clone())).await;
            drop(tx);
            assert_eq!(outcome.status, RunStatus::Error, "{target}");
            assert_eq!(outcome.reason.as_deref(), Some(reason), "{target}");
            assert_eq!(outcome.units_spent, 0);
            assert!(drain(rx).is_empty());
        }
    }

    #[test]
    fn text_is_found_across_chunk_boundaries() {
        let mut m = TextMatcher::new("needle");
        for chunk in [&b"hay ne"[..], b"e", b"", b"dle hay"] {
            m.feed(chunk);
        }
        assert!(m.found);
        let mut m = TextMatcher::new("needle");
        for chunk in [&b"needl"[..], b"x", b"eedle"] {
            m.feed(chunk);
        }
        assert!(!m.found);
        assert!(TextMatcher::new("").found);
    }
}

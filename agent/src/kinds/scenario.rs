//! The `scenario` kind: the spec's ops driven against the run's base URL in the plan's
//! order (warm-up, then load; one sequence number run-wide), every request stamped with
//! the scenario's identity, and the run recorded verbatim with the command that replays
//! it ([`iohr_domain::scenario_kind`]).
//!
//! With `concurrency` N, N workers take the next request of the phase from a shared
//! counter; the warm-up ends before the load starts, and the log is sorted by sequence
//! number whatever order the responses came in.
//!
//! Failures (timeout, refused, reset) are data: counted as `error` with their kind, never
//! retried. The status:
//! - `passed`: every load request got a complete response, whatever its status (a 503 is
//!   a measurement of the target, not a failure of the run);
//! - `failed`: some load requests got no complete response; the reason says how many and
//!   of which kinds;
//! - `error` ("target unreachable: ..."): no request of the run got a response, so there
//!   is nothing to say about the target (as for `checks`);
//! - `cancelled`: stopped by the cancel token; the record holds what was sent, a request
//!   in flight counted as `cancelled`.
//!
//! The warm-up's failures are in the record but do not decide the status: the warm-up is
//! discarded. `units_spent` is the number of requests sent, warm-up included.

mod progress;
mod send;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use iohr_domain::scenario_kind::{
    DryRun, PlannedRequest, RequestRecord, ScenarioRecord, ScenarioSpec, check_base_url, plan,
    shell_quote,
};
use iohr_domain::{FrameKind, RunStatus};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::registry::{Kind, Leased, read};
use super::target::Target;
use super::{Outcome, RunContext, emit, to_json};
use crate::dry_run::Described;
use progress::{Phase, Progress};
use send::{NoResponse, Sender, Sent};

pub struct Scenario;

impl Kind for Scenario {
    type Contract = iohr_domain::kind::scenario::Scenario;
    type Plan = ScenarioSpec;

    const OPS_FILE: bool = true;

    fn from_contract(plan: ScenarioSpec) -> ScenarioSpec {
        plan
    }

    /// Before the general rule, so that a localhost target is refused with the reason.
    fn exec_target(target: &str) -> Result<(), iohr_domain::target::TargetError> {
        check_base_url(target)
    }

    async fn run(spec: ScenarioSpec, ctx: &RunContext) -> Outcome {
        run(spec, ctx).await
    }

    /// The domain's dry run: the plan with the command that replays it.
    fn dry_run(spec: &ScenarioSpec, ctx: &RunContext) -> Result<Option<Described>, String> {
        let dry = DryRun::new(spec, &ctx.target);
        Described::new(&dry, dry.lines()).map(Some)
    }

    /// The record to paste as it is.
    fn summary(result: &Value) -> Option<Vec<String>> {
        read::<ScenarioRecord>(result).map(|r| r.lines())
    }

    /// The record as the controller stores it: no request body (see
    /// `ScenarioRecord::without_bodies`), and the command that runs it again.
    fn stored(result: Value, lease: &Leased<'_>) -> Value {
        let command = format!(
            "iohr reliability run --kind scenario --environment {} --target {} --scenario {} --version {} --wait",
            shell_quote(lease.environment),
            shell_quote(lease.target),
            shell_quote(lease.scenario_id),
            shell_quote(lease.scenario_version)
        );
        match serde_json::from_value::<ScenarioRecord>(result.clone()) {
            Ok(record) => serde_json::to_value(record.without_bodies(command)).unwrap_or(result),
            Err(_) => result,
        }
    }
}

/// Runs `spec` against the context's target, reading `${env:NAME}` header values through
/// the context's lookup.
pub async fn run(spec: ScenarioSpec, ctx: &RunContext) -> Outcome {
    let (target, frames, cancel) = (ctx.target.as_str(), &ctx.frames, &ctx.cancel);
    // The controller and `exec` check too; the agent does not trust that they did.
    if let Err(e) = check_base_url(target) {
        return Outcome::error(e.to_string(), 0);
    }
    let base = match Target::parse(target) {
        Ok(base) => base,
        Err(e) => return Outcome::error(e.to_string(), 0),
    };
    let sender = match Sender::new(
        &spec,
        &base,
        &ctx.env_fn(),
        ctx.options.egress.clone(),
        &ctx.run_id,
    ) {
        Ok(sender) => Arc::new(sender),
        Err(e) => return Outcome::error(e.to_string(), 0),
    };
    let planned = plan(&spec);
    let (warmup, load) = planned.split_at(planned.iter().take_while(|p| p.warmup).count());

    let progress = Progress::default();
    // A child of the run's cancel: a failed executor's reporter stops with its run.
    let stop_reports = cancel.child_token();
    let reporter = progress.report_every_second(frames.clone(), stop_reports.clone());
    let started_at = SystemTime::now();
    let mut sent: Vec<Sent> = Vec::with_capacity(planned.len());
    for (phase, requests) in [(Phase::Warmup, warmup), (Phase::Load, load)] {
        if requests.is_empty() || cancel.is_cancelled() {
            continue;
        }
        let (first, last) = (requests[0].seq, requests[requests.len() - 1].seq);
        tracing::info!(
            slug = %spec.slug,
            phase = phase.as_str(),
            requests = requests.len(),
            first_seq = first,
            last_seq = last,
            concurrency = spec.concurrency,
            "scenario phase started"
        );
        progress.start(phase, requests.len());
        emit(
            frames,
            FrameKind::Phase,
            json!({
                "phase": phase.as_str(),
                "requests": requests.len(),
                "seq": {"first": first, "last": last},
                "concurrency": spec.concurrency,
            }),
        )
        .await;
        let done = drive(
            sender.clone(),
            requests.into(),
            spec.concurrency,
            progress.clone(),
            cancel.clone(),
        )
        .await;
        sent.extend(done);
    }
    stop_reports.cancel();
    if let Err(e) = reporter.await {
        tracing::warn!(error = %e, "scenario progress reporter ended abnormally");
    }
    let ended_at = SystemTime::now();
    sent.sort_by_key(|s| s.planned.seq);
    let units = sent.len() as u64;
    let verdict = judge(&sent, planned.len());

    let requests = request_log(&spec, &sent);
    let record = match ScenarioRecord::build(&spec, target, started_at, ended_at, requests) {
        Ok(record) => record,
        Err(e) => return Outcome::error(format!("recording the scenario: {e}"), units),
    };
    let (by_status, errors) = load_totals(&record);
    emit(
        frames,
        FrameKind::Phase,
        json!({
            "phase": "done",
            "status": verdict.0,
            "requests": units,
            "by_status": by_status,
            "errors": errors,
        }),
    )
    .await;
    tracing::info!(
        slug = %spec.slug,
        status = %verdict.0,
        requests = units,
        "scenario ended"
    );
    Outcome {
        status: verdict.0,
        reason: verdict.1,
        result: to_json(&record),
        units_spent: units,
    }
}

/// Sends `requests` with `concurrency` workers taking the next one from a shared counter.
async fn drive(
    sender: Arc<Sender>,
    requests: Arc<[PlannedRequest]>,
    concurrency: u32,
    progress: Progress,
    cancel: CancellationToken,
) -> Vec<Sent> {
    let next = Arc::new(AtomicUsize::new(0));
    let workers = (concurrency as usize).clamp(1, requests.len().max(1));
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (sender, requests, next) = (sender.clone(), requests.clone(), next.clone());
        let (progress, cancel) = (progress.clone(), cancel.clone());
        tasks.spawn(async move {
            let mut done = Vec::new();
            while !cancel.is_cancelled() {
                let Some(planned) = requests.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break;
                };
                let sent = sender.send(*planned, &cancel).await;
                progress.count(&sent);
                done.push(sent);
            }
            done
        });
    }
    let mut sent = Vec::with_capacity(requests.len());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(done) => sent.extend(done),
            // Its requests are lost from the log; the others still count.
            Err(e) => tracing::error!(error = %e, "scenario worker ended abnormally"),
        }
    }
    sent
}

/// The run's status and reason, from what was sent out of `planned` requests.
fn judge(sent: &[Sent], planned: usize) -> (RunStatus, Option<String>) {
    let cancelled =
        sent.len() < planned || sent.iter().any(|s| s.error == Some(NoResponse::Cancelled));
    if cancelled {
        return (RunStatus::Cancelled, Some("cancelled".to_string()));
    }
    let answered = sent.iter().filter(|s| s.error.is_none()).count();
    if !sent.is_empty() && answered == 0 {
        let first = sent
            .iter()
            .find_map(|s| s.detail.clone())
            .unwrap_or_else(|| "no response".to_string());
        return (
            RunStatus::Error,
            Some(format!("target unreachable: {first}")),
        );
    }
    let load: Vec<&Sent> = sent.iter().filter(|s| !s.planned.warmup).collect();
    let mut failures: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &load {
        if let Some(error) = s.error {
            *failures.entry(error.as_str()).or_insert(0) += 1;
        }
    }
    if failures.is_empty() {
        return (RunStatus::Passed, None);
    }
    let failed: u64 = failures.values().sum();
    let kinds: Vec<String> = failures.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    (
        RunStatus::Failed,
        Some(format!(
            "{failed} of {} load requests got no complete response ({})",
            load.len(),
            kinds.join(", ")
        )),
    )
}

/// The per-request log: offsets from the first request's start, no bodies, no headers.
fn request_log(spec: &ScenarioSpec, sent: &[Sent]) -> Vec<RequestRecord> {
    let Some(first) = sent.iter().map(|s| s.started).min() else {
        return Vec::new();
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
    sent.iter()
        .map(|s| {
            let op = &spec.ops[s.planned.op];
            RequestRecord {
                seq: s.planned.seq,
                op: s.planned.op,
                method: op.method.clone(),
                path: op.path.clone(),
                warmup: s.planned.warmup,
                offset_ms: ms(Instant::duration_since(&s.started, first)),
                status: s.status,
                error: s.error.map(|e| e.as_str().to_string()),
                duration_ms: ms(s.duration),
            }
        })
        .collect()
}

/// The load's counts over all ops, for the `done` frame.
fn load_totals(record: &ScenarioRecord) -> (BTreeMap<u16, u64>, BTreeMap<String, u64>) {
    let mut by_status = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for op in &record.ops {
        for (status, n) in &op.by_status {
            *by_status.entry(*status).or_insert(0) += n;
        }
        for (kind, n) in &op.errors {
            *errors.entry(kind.clone()).or_insert(0) += n;
        }
    }
    (by_status, errors)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use iohr_domain::scenario_kind::traceparent;
    use serde_json::json;
    use tokio::net::TcpListener;
    use tokio::sync::mpsc;

    use super::*;
    use crate::kinds::test_server::start_server;
    use crate::kinds::{EnvVars, FrameSender, NewFrame};
    use serde_json::Value;

    fn spec(value: Value) -> ScenarioSpec {
        ScenarioSpec::from_json(&value).expect("valid spec")
    }

    fn record_of(outcome: &Outcome) -> ScenarioRecord {
        serde_json::from_value(outcome.result.clone()).expect("result is a ScenarioRecord")
    }

    fn drain(mut rx: mpsc::UnboundedReceiver<NewFrame>) -> Vec<NewFrame> {
        let mut frames = Vec::new();
        while let Ok(frame) = rx.try_recv() {
            frames.push(frame);
        }
        frames
    }

    fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
        head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    async fn run_quietly(spec: ScenarioSpec, target: &str) -> (Outcome, Vec<NewFrame>) {
        let (tx, rx) = FrameSender::channel();
        let outcome = run(spec, &RunContext::new(target, tx.clone())).await;
        drop(tx);
        (outcome, drain(rx))
    }

    #[tokio::test]
    async fn a_sequential_run_stamps_its_identity_and_records_in_sequence() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "slug": "abc", "ops": ["GET /ok", "GET /status/503 3"], "count": 4, "warmup": 1,
        }));
        let (outcome, frames) = run_quietly(spec, &target).await;

        assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
        assert_eq!(outcome.units_spent, 2 + 4 + 3);
        // Sequential: the server saw the plan's order, each with its identity.
        let expected = [
            (1, "/ok", true),
            (2, "/status/503", true),
            (3, "/ok", false),
            (4, "/ok", false),
            (5, "/ok", false),
            (6, "/ok", false),
            (7, "/status/503", false),
            (8, "/status/503", false),
            (9, "/status/503", false),
        ];
        for (seq, path, warmup) in expected {
            let head = seen.try_recv().expect("a request per seq");
            assert!(head.starts_with(&format!("GET {path} HTTP/1.1")), "{head}");
            let agent = if warmup {
                "iohr-scenario/abc-warmup"
            } else {
                "iohr-scenario/abc"
            };
            assert_eq!(header(&head, "user-agent"), Some(agent), "{head}");
            let tp = traceparent("0ddc0ffe", "abc", seq);
            assert_eq!(header(&head, "traceparent"), Some(tp.as_str()), "{head}");
        }
        assert!(seen.try_recv().is_err(), "nothing more was sent");

        let record = record_of(&outcome);
        let seqs: Vec<u64> = record.requests.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
        assert_eq!(
            record.requests[0].offset_ms, 0.0,
            "offsets start at the first request"
        );
        assert!(
            record
                .requests
                .windows(2)
                .all(|w| w[0].offset_ms <= w[1].offset_ms)
        );
        assert_eq!(
            record.ops[0].line,
            format!("GET {target}/ok x4 (seq 3-6) -> 200:4")
        );
        assert_eq!(
            record.ops[1].line,
            format!("GET {target}/status/503 x3 (seq 7-9) -> 503:3")
        );
        assert_eq!(record.load.mode, "sequential");

        let phases: Vec<(FrameKind, Value)> = frames
            .iter()
            .filter(|f| f.kind == FrameKind::Phase)
            .map(|f| (f.kind, f.data["phase"].clone()))
            .collect();
        assert_eq!(
            phases,
            [
                (FrameKind::Phase, json!("warmup")),
                (FrameKind::Phase, json!("load")),
                (FrameKind::Phase, json!("done")),
            ]
        );
        let done = &frames.last().expect("frames").data;
        assert_eq!(done["requests"], 9);
        assert_eq!(done["by_status"], json!({"200": 4, "503": 3}));
    }

    #[tokio::test]
    async fn concurrent_workers_overlap_and_the_log_stays_in_sequence() {
        let (target, _seen) = start_server().await;
        // /slow answers after 300 ms: with 8 workers all 8 start before any answer.
        let spec = spec(json!({
            "slug": "c", "ops": ["GET /slow 8", "GET /ok 4"], "warmup": 0, "concurrency": 8,
        }));
        let (outcome, _) = run_quietly(spec, &target).await;
        assert_eq!(outcome.status, RunStatus::Passed, "{:?}", outcome.reason);
        let record = record_of(&outcome);
        assert_eq!(record.load.mode, "concurrency 8");
        let seqs: Vec<u64> = record.requests.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
        let slow = &record.requests[..8];
        assert!(
            slow.iter()
                .all(|r| r.offset_ms < 250.0 && r.duration_ms >= 300.0),
            "{slow:?}"
        );
    }

    #[tokio::test]
    async fn failures_are_counted_by_kind_and_fail_the_run_without_retries() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "slug": "f", "ops": ["GET /ok 2", "GET /hang 1", "GET /close 1"],
            "warmup": 0, "timeout": "200ms",
        }));
        let (outcome, _) = run_quietly(spec, &target).await;
        assert_eq!(outcome.status, RunStatus::Failed);
        assert_eq!(
            outcome.reason.as_deref(),
            Some("2 of 4 load requests got no complete response (reset: 1, timeout: 1)")
        );
        assert_eq!(outcome.units_spent, 4);
        let record = record_of(&outcome);
        assert_eq!(
            record.ops[1].errors,
            BTreeMap::from([("timeout".into(), 1)])
        );
        assert_eq!(record.ops[2].errors, BTreeMap::from([("reset".into(), 1)]));
        assert!(
            record.ops[1].line.ends_with("-> error:1"),
            "{}",
            record.ops[1].line
        );
        let hang = &record.requests[2];
        assert_eq!(
            (hang.status, hang.error.as_deref()),
            (None, Some("timeout"))
        );
        let mut heads = 0;
        while seen.try_recv().is_ok() {
            heads += 1;
        }
        assert_eq!(heads, 4, "one request per planned seq, nothing retried");
    }

    #[tokio::test]
    async fn an_unreachable_target_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let spec = spec(json!({"slug": "u", "ops": ["GET /"], "count": 2, "warmup": 1}));
        let (outcome, frames) = run_quietly(spec, &format!("http://{addr}")).await;
        assert_eq!(outcome.status, RunStatus::Error);
        let reason = outcome.reason.clone().expect("a reason");
        assert!(reason.starts_with("target unreachable: "), "{reason}");
        assert!(reason.to_ascii_lowercase().contains("refused"), "{reason}");
        assert_eq!(outcome.units_spent, 3);
        let record = record_of(&outcome);
        assert_eq!(
            record.ops[0].errors,
            BTreeMap::from([("connect".into(), 2)])
        );
        assert_eq!(frames.last().expect("done").data["phase"], "done");
    }

    #[tokio::test]
    async fn cancel_mid_request_stops_promptly() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "slug": "x", "ops": ["GET /ok 1", "GET /hang 1", "GET /ok 5"], "warmup": 0,
        }));
        let cancel = CancellationToken::new();
        let (tx, _rx) = FrameSender::channel();
        let run_cancel = cancel.clone();
        let task = tokio::spawn(async move {
            run(
                spec,
                &RunContext::new(&target, tx.clone()).with_cancel(run_cancel),
            )
            .await
        });
        // The event: the server has the hanging request in hand.
        loop {
            let head = seen.recv().await.expect("requests arrive");
            if head.starts_with("GET /hang ") {
                break;
            }
        }
        cancel.cancel();
        let outcome = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops well before the 60 s request timeout")
            .expect("run task");
        assert_eq!(outcome.status, RunStatus::Cancelled);
        assert_eq!(outcome.reason.as_deref(), Some("cancelled"));
        assert_eq!(outcome.units_spent, 2);
        let record = record_of(&outcome);
        let log: Vec<(u64, Option<u16>, Option<&str>)> = record
            .requests
            .iter()
            .map(|r| (r.seq, r.status, r.error.as_deref()))
            .collect();
        assert_eq!(log, [(1, Some(200), None), (2, None, Some("cancelled"))]);
        assert!(
            record.ops[2].line.ends_with("-> not sent:5"),
            "{}",
            record.ops[2].line
        );
    }

    #[tokio::test]
    async fn a_credential_from_env_is_sent_but_never_recorded() {
        const SECRET: &str = "Bearer s3cret-value-42";
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "slug": "cred", "ops": ["GET /ok 1", "GET /close 1"], "warmup": 0,
            "headers": {"Authorization": "${env:IOHR_TEST_TOKEN}"},
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
        assert_eq!(header(&head, "authorization"), Some(SECRET), "{head}");
        assert_eq!(outcome.status, RunStatus::Failed);
        let recorded = format!("{:?}{}{:?}", drain(rx), outcome.result, outcome.reason);
        assert!(!recorded.contains("s3cret"), "{recorded}");
    }

    #[tokio::test]
    async fn a_missing_env_variable_or_a_localhost_target_sends_nothing() {
        let (target, mut seen) = start_server().await;
        let spec = spec(json!({
            "slug": "m", "ops": ["GET /ok"],
            "headers": {"X-Api-Key": "${env:IOHR_SURELY_UNSET_VARIABLE_1234}"},
        }));
        let (outcome, frames) = run_quietly(spec.clone(), &target).await;
        assert_eq!(outcome.status, RunStatus::Error);
        assert_eq!(
            outcome.reason.as_deref(),
            Some(
                "header X-Api-Key: environment variable IOHR_SURELY_UNSET_VARIABLE_1234 is not set on the agent"
            )
        );
        assert_eq!(outcome.units_spent, 0);
        assert!(frames.is_empty());
        assert!(seen.try_recv().is_err(), "no request was sent");

        let port = target.rsplit(':').next().expect("port");
        let (outcome, _) = run_quietly(spec, &format!("http://localhost:{port}")).await;
        assert_eq!(outcome.status, RunStatus::Error);
        let reason = outcome.reason.expect("a reason");
        assert!(
            reason.contains("a dual-stack host may resolve it to another listener; use 127.0.0.1"),
            "{reason}"
        );
        assert!(seen.try_recv().is_err(), "no request was sent");
    }
}

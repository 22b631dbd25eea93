//! Trace context on every request of every kind that sends HTTP (issue 35): a target
//! that reads it with the official OpenTelemetry SDK (tests/trace/target.py, W3C
//! TraceContext and Baggage propagators) tallies what each run sent. Every request
//! carries a valid traceparent whose trace id starts with the run's prefix
//! (sha256(run id)[:16 hex], computed by the script), the baggage names the run and says
//! `synthetic=true`, the sampled flag agrees with OpenTelemetry's `TraceIdRatioBased`
//! sampler at the run's `trace_sample`, and the sampled share is within 5 sigma of it.
//! The scenario keeps its own documented traceparent and carries the baggage.
//!
//! Exemplars: the target answers one POST /j in 16 (those whose trace id ends in 0) late;
//! every trace id the load run's frames and result name is one the target saw, and the
//! run's slowest seconds name requests it delayed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeMap;
use std::time::Duration;

use iohr_tests::Backend;
use iohr_tests::process::AgentOptions;
use iohr_tests::python::run_script_asking;
use iohr_tests::setup::OneAgent;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);
const ENDED: &[&str] = &["passed", "failed", "error", "refused", "cancelled"];

/// A policy file allowing faults on `port` (none is applied: the experiment only probes).
fn policy_for(port: u16) -> String {
    let dir = std::env::temp_dir().join(format!("iohr-trace-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("policy.json");
    std::fs::write(&path, json!({"target_ports": [port]}).to_string()).expect("policy");
    path.display().to_string()
}

/// Each run this test makes: kind, spec, and the `trace_sample` it sends (None for the
/// scenario, whose traceparent is its own).
fn runs() -> Vec<(&'static str, Value, Option<f64>)> {
    let log: Vec<Value> = (0..20)
        .map(|i| json!({"offset_ms": f64::from(i) * 20.0, "method": "GET", "path": "/r"}))
        .collect();
    vec![
        (
            "checks",
            json!({"checks": [{"path": "/a"}, {"path": "/b"}, {"method": "POST", "path": "/c", "body": "x"}]}),
            Some(0.01),
        ),
        (
            "load",
            json!({"operations": [{"path": "/"}, {"method": "POST", "path": "/j", "body": {"a": 1}}],
                   "model": "closed", "connections": 4, "duration": "3s", "warmup": 10,
                   "trace_sample": 0.25}),
            Some(0.25),
        ),
        (
            "replay",
            json!({"requests": log, "trace_sample": 0}),
            Some(0.0),
        ),
        (
            "capacity",
            json!({"operations": [{"path": "/"}], "rates": [40, 80], "step": "2s",
                   "discard": "500ms", "slo": {"p99": "5s", "error_rate": "50%"},
                   "trace_sample": 1}),
            Some(1.0),
        ),
        (
            "faults",
            json!({"title": "probes", "description": "trace context on probes",
                   "trace_sample": 0.5,
                   "steady-state-hypothesis": {"title": "up", "probes": [
                       {"type": "probe", "name": "home", "tolerance": 200,
                        "provider": {"type": "http", "path": "/health"}},
                       {"type": "probe", "name": "burst",
                        "tolerance": {"type": "range", "range": [0, 5000], "target": "p99_ms"},
                        "provider": {"type": "iohr", "probe": "load", "path": "/burst",
                                     "rate": 50, "duration": "1s"}}]},
                   "method": []}),
            Some(0.5),
        ),
        (
            "scenario",
            json!({"slug": "traced", "name": "traced", "ops": ["GET /", "GET /s"],
                   "count": 10, "warmup": 2}),
            None,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_sends_trace_context_an_otel_sdk_reads() {
    // The script's target is where every run goes; the faults policy needs its port, so
    // the agent starts once the script said where it listens.
    let mut ids: BTreeMap<String, (&'static str, Option<f64>)> = BTreeMap::new();
    let mut scenario_prefix = String::new();
    let mut load_seconds: Vec<Value> = Vec::new();
    let mut load_result = Value::Null;
    let mut stack: Option<OneAgent> = None;
    let seen = run_script_asking("trace/target.py", &json!({}), LIMIT * 4, async |ask| {
        let target = ask["target"].as_str().expect("target").to_string();
        let port: u16 = target
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let policy = policy_for(port);
        let extra = ["--policy", policy.as_str()];
        let agent = OneAgent::start(
            Backend::Sqlite,
            AgentOptions {
                extra: &extra,
                ..AgentOptions::default()
            },
        )
        .await;
        for (kind, spec, sample) in runs() {
            let run = agent
                .api
                .create_run(&json!({"kind": kind, "environment": "staging",
                    "target": target, "spec": spec}))
                .await;
            let id = run["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{kind}: {run}"))
                .to_string();
            let done = agent.api.wait_status(&id, ENDED, LIMIT).await;
            assert_ne!(done["status"], "error", "{kind}: {done}");
            assert_ne!(done["status"], "refused", "{kind}: {done}");
            if kind == "load" {
                load_result = done["result"].clone();
                let events = agent.api.events(&id, None).await.collect(LIMIT).await;
                load_seconds = events
                    .into_iter()
                    .filter(|e| e.event == "load")
                    .map(|e| e.data["data"].clone())
                    .collect();
            }
            if kind == "scenario" {
                scenario_prefix = done["result"]["identity"]["trace_id_prefix"]
                    .as_str()
                    .expect("the record states its trace id prefix")
                    .to_string();
            }
            ids.insert(id, (kind, sample));
        }
        stack = Some(agent);
        let rates: BTreeMap<&String, Option<f64>> =
            ids.iter().map(|(id, (_, sample))| (id, *sample)).collect();
        json!({"runs": rates})
    })
    .await;
    drop(stack);

    // Nothing arrived without a run's baggage.
    let runs = seen.as_object().expect("per run");
    assert!(!runs.contains_key(""), "requests without baggage: {seen}");
    for (id, (kind, sample)) in &ids {
        let t = &seen[id.as_str()];
        let n = t["requests"]
            .as_u64()
            .unwrap_or_else(|| panic!("{kind}: no request seen: {seen}"));
        assert!(n > 0, "{kind}: {t}");
        assert_eq!(t["valid"], n, "{kind}: every traceparent is valid: {t}");
        assert_eq!(
            t["synthetic"], n,
            "{kind}: every baggage says synthetic=true: {t}"
        );
        let prefixes = t["prefixes"].as_object().expect("prefixes");
        assert_eq!(prefixes.len(), 1, "{kind}: one prefix per run: {t}");
        let prefix = prefixes.keys().next().expect("prefix");
        match sample {
            None => assert_eq!(prefix, &scenario_prefix, "the scenario's documented ids"),
            Some(p) => {
                assert_eq!(
                    prefix,
                    t["run_prefix"].as_str().expect("run prefix"),
                    "{kind}: {t}"
                );
                assert_eq!(
                    t["distinct_trace_ids"], n,
                    "{kind}: a trace per request: {t}"
                );
                assert_eq!(
                    t["sampler_disagrees"], 0,
                    "{kind}: TraceIdRatioBased({p}) agrees: {t}"
                );
                // Binomial: within 5 sigma of n·p (and exact at 0 and 1).
                let k = t["sampled"].as_u64().expect("sampled") as f64;
                let (n, p) = (n as f64, *p);
                let bound = 5.0 * (n * p * (1.0 - p)).sqrt() + 1.0;
                assert!(
                    (k - n * p).abs() <= bound,
                    "{kind}: {k} of {n} sampled at {p} (bound ±{bound:.1})"
                );
            }
        }
    }
    // Enough requests that the bound says something where it is not exact.
    let load = ids.iter().find(|(_, (k, _))| *k == "load").expect("load").0;
    assert!(
        seen[load.as_str()]["requests"].as_u64().expect("n") >= 400,
        "{seen}"
    );
    exemplars_name_what_the_target_saw(&seen[load.as_str()], &load_seconds, &load_result);
}

/// The load run's exemplars, per second and in its result, against what the target saw.
fn exemplars_name_what_the_target_saw(seen: &Value, seconds: &[Value], result: &Value) {
    let ids = |key: &str| -> std::collections::BTreeSet<String> {
        seen[key]
            .as_array()
            .expect("ids")
            .iter()
            .map(|v| v.as_str().expect("id").to_string())
            .collect()
    };
    let (all, delayed) = (ids("trace_ids"), ids("delayed"));
    let measured: Vec<&Value> = seconds.iter().filter(|s| s["phase"] == "measure").collect();
    assert!(!measured.is_empty(), "{seconds:?}");
    let mut named = 0;
    for second in measured.iter().filter(|s| s["requests"] != 0) {
        let slowest = second["exemplars"]["slowest"].as_array().expect("slowest");
        assert!(
            (1..=3).contains(&slowest.len()),
            "a measured second keeps its 3 slowest: {second}"
        );
        let latencies: Vec<u64> = slowest
            .iter()
            .map(|e| e["latency_us"].as_u64().expect("latency"))
            .collect();
        assert!(latencies.windows(2).all(|w| w[0] >= w[1]), "{latencies:?}");
        for e in slowest {
            let id = e["trace_id"].as_str().expect("trace id");
            assert!(all.contains(id), "an exemplar the target never saw: {e}");
            named += 1;
        }
    }
    assert!(named > 0);
    // The result's slowest seconds name the requests the target delayed (150 ms against
    // its few): not necessarily each one first, as a loaded machine's stall can make an
    // undelayed request as slow, but never none of them.
    let slow = result["slow_seconds"].as_array().expect("slow seconds");
    assert!((1..=5).contains(&slow.len()), "{result}");
    let kept: Vec<&Value> = slow
        .iter()
        .flat_map(|s| s["exemplars"]["slowest"].as_array().expect("slowest"))
        .collect();
    assert!(
        kept.iter()
            .any(|e| delayed.contains(e["trace_id"].as_str().expect("id"))
                && e["operation"] == "POST /j"),
        "the run's slowest seconds name a request the target delayed: {kept:?} of {delayed:?}"
    );
    let top = &slow[0]["exemplars"]["slowest"][0];
    assert!(
        top["latency_us"].as_u64().expect("latency") >= 150_000,
        "{top}"
    );
}

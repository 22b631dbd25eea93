//! OpenTelemetry export (issue 35) through a real controller and agent: an OTLP/HTTP
//! receiver on loopback (tests/otlp/receiver.py) decodes what the controller sends with
//! the OpenTelemetry project's own protobuf definitions (PyPI `opentelemetry-proto`), and
//! the figures are checked against the run's own frames: the resource names the run, and
//! the latency histograms hold exactly the frames' HdrHistogram counts and carry exactly
//! the frames' exemplars (trace id, latency), per operation too. With the receiver
//! answering 503 for the whole run, or absent, the run is unaffected (same status, every
//! frame) and what was dropped is counted on the account's export and on `/metrics`.
//! `/metrics` with exemplars is read by the Prometheus project's OpenMetrics parser.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyper::Method;
use hyper::body::Bytes;
use iohr_domain::histogram::{decode, latency_histogram};
use iohr_tests::metrics::{sample, scrape, scrape_accepting};
use iohr_tests::process::AgentOptions;
use iohr_tests::python::run_script_asking;
use iohr_tests::setup::iohr_with_env;
use iohr_tests::{Agent, Api, Backend, Controller, Installation, Target, on_both_stores};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
/// The exporter's bounds, as `controller/src/otlp/encode.rs` has them.
const BOUNDS_MS: [f64; 18] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
    10000.0, 30000.0, 60000.0,
];
const KEY: &str = "k3y-never-shown";

struct Stack {
    install: Installation,
    controller: Controller,
    api: Api,
    _agent: Agent,
    metrics: String,
}

async fn stack(backend: Backend) -> Stack {
    let install = Installation::new(backend).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let controller = Controller::start_with(&install, 200, None, &["--metrics-addr", &addr]).await;
    let api = Api::new(&controller.api_url(), &install.full_token());
    let agent = Agent::enrol(
        &install,
        &api,
        "edge-1",
        &controller.link_url(),
        AgentOptions::default(),
    )
    .await;
    Stack {
        install,
        controller,
        api,
        _agent: agent,
        metrics: format!("http://{addr}/metrics"),
    }
}

fn load_body(target: &Target) -> Value {
    json!({
        "kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}, {"path": "/health"}], "model": "open",
                 "rate": 100, "duration": "3s", "warmup": "1s"}
    })
}

/// The export, polled until `done` says it has what it should (bounded).
async fn export_until(api: &Api, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, export) = api.get("/v1/reliability/otlp").await;
        assert_eq!(status, 200, "{export}");
        if done(&export) {
            return export;
        }
        assert!(Instant::now() < deadline, "{what} within 60 s: {export}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A run to its end with its `load` frames; the run is asserted passed.
async fn load_run(api: &Api, target: &Target) -> (String, Value, Vec<Value>) {
    let run = api.create_run(&load_body(target)).await;
    let id = run["id"].as_str().unwrap().to_string();
    let done = api.wait_status(&id, &["passed"], LIMIT).await;
    let seconds = api
        .events(&id, None)
        .await
        .collect(LIMIT)
        .await
        .into_iter()
        .filter(|e| e.event == "load")
        .map(|e| e.data["data"].clone())
        .collect();
    (id, done, seconds)
}

fn metric<'a>(resource: &'a Value, name: &str) -> Option<&'a Value> {
    resource["scopes"][0]["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
}

/// The points of `name` in every request, for the whole run (no `iohr.operation`) or one
/// operation.
fn points(seen: &Value, name: &str, operation: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    for request in seen["requests"].as_array().unwrap() {
        for resource in request["resources"].as_array().unwrap() {
            let Some(metric) = metric(resource, name) else {
                continue;
            };
            for point in metric["points"].as_array().unwrap() {
                if point["attributes"]
                    .get("iohr.operation")
                    .and_then(Value::as_str)
                    == operation
                {
                    out.push(point.clone());
                }
            }
        }
    }
    out
}

async fn a_runs_seconds_reach_the_collector_as_otlp_metrics(backend: Backend) {
    let stack = stack(backend).await;
    let target = Target::start().await;
    let mut ran = None;
    let config = json!({"status": 200, "headers": ["x-api-key"]});
    let seen = run_script_asking(
        "otlp/receiver.py",
        &config,
        LIMIT * 2,
        async |ask: &Value| {
            let endpoint = format!("http://127.0.0.1:{}", ask["port"]);
            // Set through the CLI: the header's value comes from an environment variable.
            let out = iohr_with_env(
                &stack.controller,
                &stack.install.full_token(),
                &[
                    "reliability",
                    "otlp",
                    "set",
                    "--endpoint",
                    &endpoint,
                    "--header-from-env",
                    "X-Api-Key=OTLP_KEY",
                ],
                &[("OTLP_KEY", KEY)],
            );
            assert_eq!(out.code, 0, "{out:?}");
            let (id, done, seconds) = load_run(&stack.api, &target).await;
            let frames = seconds.len() as i64;
            let export = export_until(&stack.api, "every load frame exported", |e| {
                e["exported_frames"].as_i64() == Some(frames)
            })
            .await;
            ran = Some((id, done, seconds, export));
            json!({"stop": true})
        },
    )
    .await;
    let (id, done, seconds, export) = ran.expect("the receiver asked");

    // The account's export: counts, the header's name and never its value.
    assert_eq!(export["dropped_frames"], 0, "{export}");
    assert_eq!(export["headers"], json!(["x-api-key"]), "{export}");
    assert!(!export.to_string().contains(KEY));
    let out = iohr_with_env(
        &stack.controller,
        &stack.install.full_token(),
        &["reliability", "otlp", "show"],
        &[],
    );
    assert!(
        out.stdout.contains("x-api-key") && !out.stdout.contains(KEY),
        "{out:?}"
    );

    let requests = seen["requests"].as_array().unwrap();
    assert!(!requests.is_empty(), "{seen}");
    for request in requests {
        assert_eq!(request["path"], "/v1/metrics");
        assert_eq!(request["content_type"], "application/x-protobuf");
        assert_eq!(
            request["headers"]["x-api-key"], KEY,
            "the sealed header is sent"
        );
        for resource in request["resources"].as_array().unwrap() {
            let attributes = &resource["attributes"];
            assert_eq!(attributes["iohr.run.id"], id.as_str(), "{attributes}");
            assert_eq!(attributes["iohr.run.kind"], "load");
            assert_eq!(attributes["iohr.environment"], "staging");
            assert_eq!(attributes["iohr.agent"], "edge-1");
            assert_eq!(attributes["service.name"], "iohr");
            assert_eq!(
                attributes["iohr.scenario.version"], done["scenario"]["version"],
                "{attributes} {done}"
            );
        }
    }

    // Requests and errors: delta sums, per second, as the frames say.
    let requests = points(&seen, "iohr.run.requests", None);
    assert_eq!(requests.len(), seconds.len(), "one point per frame: {seen}");
    let sent: i64 = requests.iter().map(|p| p["value"].as_i64().unwrap()).sum();
    let framed: u64 = seconds
        .iter()
        .map(|s| s["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(sent as u64, framed);
    let measured: i64 = requests
        .iter()
        .filter(|p| p["attributes"]["iohr.phase"] == "measure")
        .map(|p| p["value"].as_i64().unwrap())
        .sum();
    assert_eq!(measured, 300, "3 s at 100/s: {seen}");
    assert_eq!(done["result"]["requests"], 300);
    let errors: i64 = points(&seen, "iohr.run.errors", None)
        .iter()
        .map(|p| p["value"].as_i64().unwrap())
        .sum();
    assert_eq!(errors, 0);
    assert_eq!(points(&seen, "iohr.run.rate", None).len(), seconds.len());

    // Latency: delta histograms whose buckets are exactly the frames' HdrHistograms'.
    for (operation, key) in [(None, None), (Some("GET /health"), Some("GET /health"))] {
        let mut framed = latency_histogram().unwrap();
        for second in seconds.iter().filter(|s| s["phase"] == "measure") {
            let encoded = match key {
                None => &second["histogram"],
                Some(name) => &second["operations"][name]["histogram"],
            };
            framed
                .add(decode(encoded.as_str().unwrap()).unwrap())
                .unwrap();
        }
        let latency = points(&seen, "iohr.run.latency", operation);
        assert!(!latency.is_empty(), "{operation:?}: {seen}");
        let mut exported = vec![0u64; BOUNDS_MS.len() + 1];
        let mut count = 0;
        for point in &latency {
            assert_eq!(point["bounds"], json!(BOUNDS_MS));
            for (i, n) in point["bucket_counts"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                exported[i] += n.as_u64().unwrap();
            }
            count += point["count"].as_u64().unwrap();
            let (start, time) = (
                point["start"].as_u64().unwrap(),
                point["time"].as_u64().unwrap(),
            );
            assert_eq!(time - start, 1_000_000_000, "one second: {point}");
        }
        assert_eq!(count, framed.len(), "{operation:?}");
        // What the frames' latencies (microseconds) come to in the exporter's buckets.
        let mut expected = vec![0u64; BOUNDS_MS.len() + 1];
        for value in framed.iter_recorded() {
            let ms = value.value_iterated_to() as f64 / 1000.0;
            expected[BOUNDS_MS.partition_point(|b| *b < ms)] += value.count_at_value();
        }
        assert_eq!(exported, expected, "{operation:?}: exact buckets");
        // Exemplars: each point carries its frame's (its operation's, on an operation's
        // point), the trace id and the latency in ms.
        let mut framed: Vec<(String, u64)> = seconds
            .iter()
            .filter(|s| s["phase"] == "measure")
            .flat_map(|s| {
                let e = &s["exemplars"];
                let slowest = e["slowest"].as_array().cloned().unwrap_or_default();
                slowest
                    .into_iter()
                    .chain(e["failed"].as_array().cloned().unwrap_or_default())
            })
            .filter(|e| key.is_none_or(|name| e["operation"] == name))
            .map(|e| {
                let id = e["trace_id"].as_str().unwrap().to_string();
                (id, e["latency_us"].as_u64().unwrap())
            })
            .collect();
        let mut sent: Vec<(String, u64)> = latency
            .iter()
            .flat_map(|p| p["exemplars"].as_array().unwrap().clone())
            .map(|e| {
                assert_eq!(e["span_id"], "", "no span id: {e}");
                let ms = e["value"].as_f64().unwrap();
                (
                    e["trace_id"].as_str().unwrap().to_string(),
                    (ms * 1000.0).round() as u64,
                )
            })
            .collect();
        framed.sort();
        sent.sort();
        // The run's slowest requests may all be of one operation (the frames keep the 3
        // slowest of each second, whichever operation sent them): an operation's point
        // may carry none, the whole run's always some.
        assert!(
            key.is_some() || !framed.is_empty(),
            "{operation:?}: the frames name requests"
        );
        assert_eq!(sent, framed, "{operation:?}: the frames' exemplars");
    }
    let resource = seen["requests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .find(|r| metric(r, "iohr.run.latency").is_some())
        .expect("a resource with a latency metric");
    let latency = metric(resource, "iohr.run.latency").unwrap();
    assert_eq!(latency["type"], "histogram");
    assert_eq!(latency["temporality"], 1, "delta: {latency}");
    assert_eq!(latency["unit"], "ms");
    let requests = metric(resource, "iohr.run.requests").unwrap();
    assert_eq!(
        (&requests["temporality"], &requests["monotonic"]),
        (&json!(1), &json!(true))
    );
    assert_eq!(metric(resource, "iohr.run.rate").unwrap()["type"], "gauge");

    // /metrics: the exported frames counted; with OpenMetrics asked for, exemplars naming
    // the run; without, none.
    let scraped = scrape_accepting(
        std::slice::from_ref(&stack.metrics),
        "application/openmetrics-text; version=1.0.0",
    )
    .await;
    let families = &scraped[&stack.metrics]["families"];
    assert!(
        sample(
            &families["iohr_otlp_exported_frames"],
            "iohr_otlp_exported_frames_total",
            &json!({})
        )
        .is_some_and(|n| n >= seconds.len() as f64),
        "{families}"
    );
    let exemplars: Vec<&Value> = families["iohr_dispatch_latency_seconds"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s.get(3))
        .collect();
    assert!(
        exemplars
            .iter()
            .any(|e| e["labels"]["run_id"] == id.as_str()),
        "an exemplar names the run: {families}"
    );
    assert!(
        families["iohr_store_frame_append_seconds"]["samples"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s.get(3).is_some()),
        "{families}"
    );
    let plain = scrape(std::slice::from_ref(&stack.metrics)).await;
    assert!(
        !plain.to_string().contains(&id),
        "no exemplar unless OpenMetrics is asked for: {plain}"
    );
    let api = format!("{}/metrics", stack.controller.api_url());
    assert_eq!(
        scrape(std::slice::from_ref(&api)).await[&api]["status"],
        404
    );

    // Deleted: nothing more is exported, the route answers 404.
    let out = iohr_with_env(
        &stack.controller,
        &stack.install.full_token(),
        &["reliability", "otlp", "delete"],
        &[],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(stack.api.get("/v1/reliability/otlp").await.0, 404);
}

/// A collector that answers 503 for a whole run, or none at all: the run passes with
/// every frame, and the export counts each frame dropped, with the failure's class.
async fn a_failing_collector_never_touches_the_run(stack: &Stack, endpoint: &str, class: &str) {
    let target = Target::start().await;
    let (status, export) = stack
        .api
        .call(
            Method::PUT,
            "/v1/reliability/otlp",
            Some((
                Bytes::from(json!({"endpoint": endpoint}).to_string()),
                "application/json",
            )),
        )
        .await;
    assert!(status == 201 || status == 200, "{status} {export}");
    let before = export["dropped_frames"].as_i64().unwrap();
    let (_, done, seconds) = load_run(&stack.api, &target).await;
    assert_eq!(done["result"]["requests"], 300, "{done}");
    assert!(
        seconds.len() >= 3,
        "every second's frame: {}",
        seconds.len()
    );
    let frames = seconds.len() as i64;
    let export = export_until(&stack.api, "every load frame counted dropped", |e| {
        e["dropped_frames"].as_i64() == Some(before + frames)
    })
    .await;
    assert_eq!(export["exported_frames"], 0, "{export}");
    assert_eq!(export["last_error"], class, "{export}");
    let scraped = scrape(std::slice::from_ref(&stack.metrics)).await;
    let dropped = sample(
        &scraped[&stack.metrics]["families"]["iohr_otlp_dropped_frames"],
        "iohr_otlp_dropped_frames_total",
        &json!({"reason": class}),
    );
    assert!(
        dropped.is_some_and(|n| n >= frames as f64),
        "{class}: {scraped}"
    );
}

async fn a_refusing_or_absent_collector_drops_points_and_counts_them(backend: Backend) {
    let stack = stack(backend).await;
    let mut refused = 0;
    let seen = run_script_asking(
        "otlp/receiver.py",
        &json!({"status": 503}),
        LIMIT * 2,
        async |ask: &Value| {
            let endpoint = format!("http://127.0.0.1:{}/", ask["port"]);
            a_failing_collector_never_touches_the_run(&stack, &endpoint, "http_status").await;
            refused += 1;
            json!({"stop": true})
        },
    )
    .await;
    assert_eq!(refused, 1);
    assert!(
        !seen["requests"].as_array().unwrap().is_empty(),
        "the collector was asked, and refused: {seen}"
    );

    // No collector at all: a port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    a_failing_collector_never_touches_the_run(&stack, &closed, "connect_failed").await;
}

/// What a PUT refuses, by code; a header's value is never answered back.
async fn bad_exports_are_refused_precisely(backend: Backend) {
    let stack = stack(backend).await;
    let put = |body: Value| {
        let api = &stack.api;
        async move {
            api.call(
                Method::PUT,
                "/v1/reliability/otlp",
                Some((Bytes::from(body.to_string()), "application/json")),
            )
            .await
        }
    };
    let cases = [
        (json!({"endpoint": "ftp://collector"}), 400, "invalid_url"),
        (
            json!({"endpoint": "http://u:p@collector"}),
            400,
            "invalid_url",
        ),
        (
            json!({"endpoint": "http://collector", "headers": {"bad name": "v"}}),
            400,
            "invalid_header",
        ),
        (
            json!({"endpoint": "http://collector", "headers": {"host": "v"}}),
            400,
            "invalid_header",
        ),
        (
            json!({"endpoint": "http://collector", "headers": {"x-a": "a\nb"}}),
            400,
            "invalid_header",
        ),
        (
            json!({"endpoint": "http://collector", "extra": 1}),
            400,
            "invalid_body",
        ),
        (
            json!({"endpoint": "http://169.254.169.254"}),
            422,
            "target_not_allowed",
        ),
    ];
    for (body, status, code) in cases {
        let (got, answer) = put(body.clone()).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}: {answer}"
        );
    }
    assert_eq!(
        stack.api.get("/v1/reliability/otlp").await.0,
        404,
        "nothing stored"
    );
    let (status, answer) = put(
        json!({"endpoint": "http://127.0.0.1:9", "headers": {"Authorization": "Bearer s3cret"}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["headers"], json!(["authorization"]));
    assert!(!answer.to_string().contains("s3cret"));
    let mut read = BTreeMap::new();
    for scope in ["reliability:read", "reliability:run"] {
        let token = stack.install.token("default", &[scope], None);
        let (status, _) = stack
            .api
            .with_token(Some(&token))
            .get("/v1/reliability/otlp")
            .await;
        read.insert(scope, status);
    }
    assert_eq!(read["reliability:read"], 200);
}

/// The services' own spans (`OTEL_EXPORTER_OTLP_*` set for the controller and the agent),
/// decoded by tests/otlp/trace_receiver.py: a run is one trace, derived from its id, with
/// both services' spans in it; the controller's phases in order under the root `run`
/// span, the agent's lease under the same root; a split run's parent has its own. With
/// the receiver gone, the next run
/// passes all the same and each service counts the spans it dropped on its /metrics.
async fn the_services_spans_of_a_run_form_one_trace() {
    let install = Installation::new(Backend::Sqlite).await;
    let target = Target::start().await;
    let free_port = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let (metrics_addr, agent_metrics_addr) = (free_port(), free_port());
    let mut stack: Option<(Controller, Api, Agent, Agent)> = None;
    let mut ran: Option<String> = None;
    let mut split: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    let seen = run_script_asking(
        "otlp/trace_receiver.py",
        &json!({"status": 200}),
        LIMIT * 2,
        async |ask: &Value| {
            if ask["ask"] == "act" {
                let base = format!("http://127.0.0.1:{}", ask["port"]);
                let controller = Controller::start_with_env(
                    &install,
                    &["--metrics-addr", &metrics_addr],
                    &[("OTEL_EXPORTER_OTLP_ENDPOINT", &base)],
                )
                .await;
                let api = Api::new(&controller.api_url(), &install.full_token());
                let traces = format!("{base}/v1/traces");
                let agent = Agent::enrol(
                    &install,
                    &api,
                    "edge-1",
                    &controller.link_url(),
                    AgentOptions {
                        env: &[
                            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &traces),
                            ("OTEL_SERVICE_NAME", "edge-agent"),
                        ],
                        extra: &["--metrics-addr", &agent_metrics_addr],
                        ..AgentOptions::default()
                    },
                )
                .await;
                let run = api.create_run(&short_load(&target)).await;
                let id = run["id"].as_str().unwrap().to_string();
                api.wait_status(&id, &["passed"], LIMIT).await;
                ran = Some(id);
                // Then a run split over two agents: its parent ends when its shares
                // have, and has its own trace.
                let second = Agent::enrol(
                    &install,
                    &api,
                    "edge-2",
                    &controller.link_url(),
                    AgentOptions {
                        env: &[
                            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &traces),
                            ("OTEL_SERVICE_NAME", "edge-agent"),
                        ],
                        ..AgentOptions::default()
                    },
                )
                .await;
                let mut body = short_load(&target);
                body["agents"] = json!(2);
                let parent = api.create_run(&body).await;
                let parent = parent["id"].as_str().unwrap().to_string();
                api.wait_status(&parent, &["passed"], LIMIT).await;
                split = Some(parent);
                stack = Some((controller, api, agent, second));
                return json!({"more": true});
            }
            // Both services' `ended` spans of the run arrived, and the controller's of
            // the split run, or ask again (bounded).
            let id = ran.as_deref().unwrap();
            let spans = ask["spans"].as_array().unwrap();
            let ended = |service: &str, id: &str| {
                spans.iter().any(|s| {
                    s["service"] == service
                        && s["name"] == "ended"
                        && s["trace_id"]
                            .as_str()
                            .unwrap()
                            .starts_with(&iohr_domain::trace::run_prefix_hex(id))
                })
            };
            let parent = split.as_deref().unwrap();
            if ended("iohr-controller", id)
                && ended("edge-agent", id)
                && ended("iohr-controller", parent)
            {
                return json!({"stop": true});
            }
            assert!(
                Instant::now() < deadline,
                "both services' spans within 60 s: {ask}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            json!({"more": true})
        },
    )
    .await;
    let id = ran.expect("the receiver asked");
    let parent = split.unwrap();
    let (controller, api, _agent, _second) = stack.unwrap();

    for request in seen["requests"].as_array().unwrap() {
        assert_eq!(request["path"], "/v1/traces");
        assert_eq!(request["content_type"], "application/x-protobuf");
    }
    let spans = seen["spans"].as_array().unwrap();
    // One trace for the run: every span naming the run is in it, and it starts with the
    // prefix of the run's request traces.
    let named: Vec<&Value> = spans
        .iter()
        .filter(|s| s["attributes"]["iohr.run_id"] == id.as_str())
        .collect();
    let trace = named[0]["trace_id"].as_str().unwrap();
    assert!(
        trace.starts_with(&iohr_domain::trace::run_prefix_hex(&id)),
        "{trace}"
    );
    assert!(named.iter().all(|s| s["trace_id"] == trace), "{named:?}");
    let in_trace: Vec<&Value> = spans.iter().filter(|s| s["trace_id"] == trace).collect();
    let by = |service: &str| -> Vec<&Value> {
        let mut of: Vec<&Value> = in_trace
            .iter()
            .copied()
            .filter(|s| s["service"] == service)
            .collect();
        of.sort_by_key(|s| s["start"].as_u64().unwrap());
        of
    };
    let names = |spans: &[&Value]| -> Vec<String> {
        spans
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };

    // The controller: the root, then its phases in order, each under the root.
    let controller_spans = by("iohr-controller");
    assert_eq!(
        names(&controller_spans),
        ["run", "queued", "leased", "executing", "ended"],
        "{controller_spans:?}"
    );
    let root = controller_spans[0];
    assert_eq!(root["parent_span_id"], "", "the run span is the root");
    let root_id = root["span_id"].as_str().unwrap();
    for span in &controller_spans {
        let attributes = &span["attributes"];
        assert_eq!(attributes["iohr.run_id"], id.as_str(), "{span}");
        assert_eq!(attributes["iohr.run.kind"], "load");
        assert!(
            attributes["iohr.account_id"]
                .as_str()
                .is_some_and(|a| !a.is_empty())
        );
        assert!(attributes["iohr.agent_id"].is_string(), "{span}");
        if span["name"] != "run" {
            assert_eq!(span["parent_span_id"], root_id, "{span}");
            assert!(span["start"].as_u64() >= root["start"].as_u64());
            assert!(span["end"].as_u64() <= root["end"].as_u64());
        }
    }
    assert_eq!(
        controller_spans[4]["attributes"]["iohr.run.status"],
        "passed"
    );
    assert_eq!(root["attributes"]["iohr.run.status"], "passed");
    assert!(
        controller_spans[3]["attributes"]["iohr.frames"]
            .as_i64()
            .is_some_and(|n| n >= 2),
        "{}",
        controller_spans[3]
    );

    // The agent: its lease under the run's root, the kind's execution and the ending
    // under the lease.
    let agent_spans = by("edge-agent");
    assert_eq!(
        names(&agent_spans),
        ["lease", "execute", "ended"],
        "{agent_spans:?}"
    );
    let lease = agent_spans[0];
    assert_eq!(lease["parent_span_id"], root_id, "{lease}");
    assert_eq!(lease["attributes"]["iohr.run_id"], id.as_str());
    assert_eq!(lease["attributes"]["iohr.run.kind"], "load");
    assert_eq!(lease["attributes"]["iohr.agent_id"], "edge-1");
    assert!(
        lease["attributes"]["iohr.frames"]
            .as_i64()
            .is_some_and(|n| n >= 2),
        "{lease}"
    );
    for child in &agent_spans[1..] {
        assert_eq!(child["parent_span_id"], lease["span_id"], "{child}");
    }
    assert_eq!(agent_spans[2]["attributes"]["iohr.run.status"], "passed");
    // The split run: the controller's phases under its own root, ended as it did.
    let parent_trace = iohr_domain::trace::run_prefix_hex(&parent);
    let mut of_parent: Vec<&Value> = spans
        .iter()
        .filter(|s| s["service"] == "iohr-controller")
        .filter(|s| s["trace_id"].as_str().unwrap().starts_with(&parent_trace))
        .collect();
    of_parent.sort_by_key(|s| s["start"].as_u64().unwrap());
    let parent_names = names(&of_parent);
    assert_eq!(
        (parent_names.first(), parent_names.last()),
        (Some(&"run".to_string()), Some(&"ended".to_string())),
        "{of_parent:?}"
    );
    assert!(
        of_parent
            .iter()
            .all(|s| s["attributes"]["iohr.run_id"] == parent.as_str()),
        "{of_parent:?}"
    );
    assert_eq!(
        of_parent.last().unwrap()["attributes"]["iohr.run.status"],
        "passed"
    );
    // No span outside the runs' traces: the first run's, the split run's, its shares'.
    let (_, record) = api.get(&format!("/v1/reliability/runs/{parent}")).await;
    let mut runs = vec![id.clone(), parent.clone()];
    runs.extend(
        record["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["run"].as_str().unwrap().to_string()),
    );
    let prefixes: Vec<String> = runs
        .iter()
        .map(|r| iohr_domain::trace::run_prefix_hex(r))
        .collect();
    assert!(
        spans.iter().all(|s| prefixes
            .iter()
            .any(|p| s["trace_id"].as_str().unwrap().starts_with(p.as_str()))),
        "no span outside the runs' traces: {spans:?}"
    );

    // Each service counts its spans on its own /metrics: the controller's 5, the agent's 3.
    let metrics = format!("http://{metrics_addr}/metrics");
    let agent_metrics = format!("http://{agent_metrics_addr}/metrics");
    let counted = |scraped: &Value, at: &str, name: &str| {
        sample(
            &scraped[at]["families"][name],
            &format!("{name}_total"),
            &json!({}),
        )
    };
    let both = [metrics.clone(), agent_metrics.clone()];
    let scraped = scrape(&both).await;
    assert!(
        counted(&scraped, &metrics, "iohr_otlp_spans_exported").is_some_and(|n| n >= 5.0),
        "{scraped}"
    );
    assert_eq!(
        counted(&scraped, &metrics, "iohr_otlp_spans_dropped"),
        Some(0.0)
    );
    assert!(
        counted(&scraped, &agent_metrics, "iohr_agent_otlp_spans_exported")
            .is_some_and(|n| n >= 3.0),
        "{scraped}"
    );
    assert_eq!(
        counted(&scraped, &agent_metrics, "iohr_agent_otlp_spans_dropped"),
        Some(0.0)
    );

    // The receiver is gone: the next run passes as any, its spans are counted dropped.
    let run = api.create_run(&short_load(&target)).await;
    let second = run["id"].as_str().unwrap().to_string();
    let done = api.wait_status(&second, &["passed"], LIMIT).await;
    assert_eq!(done["status"], "passed");
    iohr_tests::wait_for("the second run's spans counted dropped", LIMIT, || async {
        let scraped = scrape(&both).await;
        let controller = counted(&scraped, &metrics, "iohr_otlp_spans_dropped");
        let agent = counted(&scraped, &agent_metrics, "iohr_agent_otlp_spans_dropped");
        (controller >= Some(5.0) && agent >= Some(3.0)).then_some(())
    })
    .await;
    drop(controller);
}

/// A load run of 2 s at 20/s: what a span test needs, and little more.
fn short_load(target: &Target) -> Value {
    json!({
        "kind": "load", "environment": "staging", "target": target.url(),
        "spec": {"operations": [{"path": "/"}], "model": "open",
                 "rate": 20, "duration": "2s"}
    })
}

on_both_stores!(a_runs_seconds_reach_the_collector_as_otlp_metrics);

mod sqlite_only {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusing_or_absent_collector_drops_points_and_counts_them() {
        super::a_refusing_or_absent_collector_drops_points_and_counts_them(Backend::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_services_spans_of_a_run_form_one_trace() {
        super::the_services_spans_of_a_run_form_one_trace().await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_exports_are_refused_precisely() {
        super::bad_exports_are_refused_precisely(Backend::Sqlite).await
    }
}

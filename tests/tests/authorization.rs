//! Authorization comes before anything else: every REST route and gRPC method answers 401
//! without a valid token and 403 without its scope, whatever the body, query or id, and a
//! refused request stores nothing. The table names every route the router has (checked
//! against `controller/src/api/mod.rs`, so a new route cannot be left out).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::{Value, json};

/// What a route demands of its caller.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    Read,
    Run,
    /// `reliability:run` on a person's token (confirming a production fault).
    PersonRun,
    /// `reliability:audit` (reading the audit lines).
    Audit,
    /// `reliability:admin` (a person's role: writing the account's secrets).
    Admin,
}

/// Every REST route: method, path (`{id}` is replaced by each id the test tries), rule.
const ROUTES: &[(&str, &str, Rule)] = &[
    ("POST", "/runs", Rule::Run),
    ("GET", "/runs", Rule::Read),
    ("GET", "/runs/{id}", Rule::Read),
    ("POST", "/runs/{id}/cancel", Rule::Run),
    ("POST", "/runs/{id}/confirm", Rule::PersonRun),
    ("POST", "/halt", Rule::Run),
    ("GET", "/runs/{id}/events", Rule::Read),
    ("GET", "/agents", Rule::Read),
    ("POST", "/scenarios", Rule::Run),
    ("GET", "/scenarios", Rule::Read),
    ("GET", "/scenarios/{id}", Rule::Read),
    ("GET", "/scenarios/{id}/versions/{version}", Rule::Read),
    ("GET", "/compare", Rule::Read),
    ("GET", "/findings", Rule::Read),
    ("GET", "/findings/{id}", Rule::Read),
    ("POST", "/findings/{id}/close", Rule::Run),
    ("GET", "/audit", Rule::Audit),
    ("GET", "/stream", Rule::Read),
    ("GET", "/events", Rule::Read),
    ("POST", "/webhooks", Rule::Run),
    ("GET", "/webhooks", Rule::Read),
    ("GET", "/webhooks/{id}", Rule::Read),
    ("DELETE", "/webhooks/{id}", Rule::Run),
    ("GET", "/webhooks/{id}/deliveries", Rule::Read),
    (
        "POST",
        "/webhooks/{id}/deliveries/{event}/redeliver",
        Rule::Run,
    ),
    ("POST", "/schedules", Rule::Run),
    ("GET", "/schedules", Rule::Read),
    ("GET", "/schedules/{id}", Rule::Read),
    ("PATCH", "/schedules/{id}", Rule::Run),
    ("DELETE", "/schedules/{id}", Rule::Run),
    ("GET", "/secrets", Rule::Read),
    ("PUT", "/secrets/{name}", Rule::Admin),
    ("DELETE", "/secrets/{name}", Rule::Admin),
    ("GET", "/otlp", Rule::Read),
    ("PUT", "/otlp", Rule::Run),
    ("DELETE", "/otlp", Rule::Run),
    ("GET", "/runs/{id}/baseline", Rule::Read),
    ("POST", "/triggers", Rule::Run),
    ("GET", "/triggers", Rule::Read),
    ("GET", "/triggers/{id}", Rule::Read),
    ("PATCH", "/triggers/{id}", Rule::Run),
    ("DELETE", "/triggers/{id}", Rule::Run),
    ("GET", "/triggers/{id}/log", Rule::Read),
    ("GET", "/forges", Rule::Read),
    ("PUT", "/forges/{forge}", Rule::Admin),
    ("DELETE", "/forges/{forge}", Rule::Admin),
    ("GET", "/forges/reports", Rule::Read),
];

/// Every gRPC method of `iohr.runs.v1.Runs` (all read).
const GRPC_METHODS: &[&str] = &["WatchRun", "Compare"];

/// The routes `controller/src/api/mod.rs` declares under `/v1/reliability`, as
/// (METHOD, path) pairs, read from its `.route("PATH", get(..).post(..))` calls.
fn declared_routes() -> Vec<(String, String)> {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../controller/src/api/mod.rs"
    ))
    .expect("the router's source");
    let mut routes = Vec::new();
    // Each `.route(` call up to the statement's end: rustfmt may split one over lines.
    for call in source.split(".route(").skip(1) {
        let call = call.split(';').next().unwrap_or_default().trim_start();
        let Some(rest) = call.strip_prefix('"') else {
            continue;
        };
        let Some((path, handlers)) = rest.split_once('"') else {
            continue;
        };
        // Public: the health check and the OpenAPI document.
        if path == "/healthz" || path == "/v1/openapi.json" {
            continue;
        }
        let handlers: String = handlers.split_whitespace().collect();
        for method in ["get", "post", "put", "patch", "delete"] {
            let called = |prefix: &str| handlers.contains(&format!("{prefix}{method}("));
            if called(".") || called(",") || called("(") {
                routes.push((method.to_uppercase(), path.to_string()));
            }
        }
    }
    routes
}

#[test]
fn the_table_names_every_route_the_router_has() {
    let mut declared = declared_routes();
    declared.sort();
    let mut table: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    table.sort();
    assert!(
        declared.len() >= 13,
        "the parser found the routes: {declared:?}"
    );
    assert_eq!(declared, table, "every route of the router is in ROUTES");
    let proto = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../proto/proto/runs.proto"
    ))
    .expect("runs.proto");
    let rpcs: Vec<&str> = proto
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .filter_map(|l| l.split('(').next())
        .collect();
    assert_eq!(
        rpcs, GRPC_METHODS,
        "every method of Runs is in GRPC_METHODS"
    );
}

/// A request body and its content type.
type Body = Option<(Bytes, &'static str)>;

fn code(body: &Value) -> String {
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The bodies every route is tried with: none, empty JSON, a valid-looking run, malformed
/// JSON, the wrong type, the wrong content type and a body of binary bytes.
fn bodies() -> Vec<Body> {
    let json = |text: String| Some((Bytes::from(text), "application/json"));
    vec![
        None,
        json("{}".into()),
        json(
            json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
                "spec": {"checks": [{"path": "/"}]}, "hash": "sha256:00", "reason": "x"})
            .to_string(),
        ),
        json("{\"kind\": ".into()),
        json("[1, 2, 3]".into()),
        Some((Bytes::from_static(b"kind=checks"), "text/plain")),
        Some((
            Bytes::from((0..16 * 1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>()),
            "application/octet-stream",
        )),
    ]
}

async fn every_route_checks_authorization_before_anything_else(backend: Backend) {
    let install = Installation::new(backend).await;
    install.create_account("other", 4, false);
    let controller = Controller::start(&install, 200, None).await;
    let full = Api::new(&controller.api_url(), &install.full_token());
    let read_only = full.with_token(Some(&install.token("default", &["reliability:read"], None)));
    let run_only = full.with_token(Some(&install.token("default", &["reliability:run"], None)));
    let person_read = full.with_token(Some(&install.token(
        "default",
        &["reliability:read"],
        Some("alice"),
    )));
    let api_token_run = full.with_token(Some(&install.token(
        "default",
        &["reliability:run", "reliability:read"],
        None,
    )));
    let anonymous = full.with_token(None);
    let forged = full.with_token(Some("iohr_0000"));
    let foreign = full.with_token(Some(&install.token(
        "other",
        &["reliability:run", "reliability:read"],
        None,
    )));

    let good = json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
        "spec": {"checks": [{"path": "/"}]}});
    let own = full.create_run(&good).await;
    let own = own["id"].as_str().expect("id").to_string();
    let theirs = foreign.create_run(&good).await;
    let theirs = theirs["id"].as_str().expect("id").to_string();
    let ids = [
        own.clone(),
        theirs,
        "no-such-id".to_string(),
        "%00%ff".to_string(),
    ];
    let queries = [
        "",
        "?colour=blue&limit=0",
        "?before=x&after=y&status=sleeping",
    ];

    let mut tried = 0;
    for (method, path, rule) in ROUTES {
        let method: Method = method.parse().expect("method");
        let paths: Vec<String> = if ["{id}", "{name}", "{forge}"]
            .iter()
            .any(|p| path.contains(p))
        {
            ids.iter()
                .map(|id| {
                    path.replace("{id}", id)
                        .replace("{name}", id)
                        .replace("{forge}", id)
                        .replace("{event}", id)
                        .replace("{version}", "sha256:00")
                })
                .collect()
        } else {
            vec![path.to_string()]
        };
        // Who must be refused, and with what.
        let mut refused: Vec<(&Api, u16, &str)> = vec![
            (&anonymous, 401, "unauthorized"),
            (&forged, 401, "unauthorized"),
        ];
        match rule {
            Rule::Read => refused.push((&run_only, 403, "insufficient_scope")),
            Rule::Run => refused.push((&read_only, 403, "insufficient_scope")),
            Rule::Audit => {
                refused.push((&read_only, 403, "insufficient_scope"));
                refused.push((&run_only, 403, "insufficient_scope"));
                refused.push((&api_token_run, 403, "insufficient_scope"));
            }
            Rule::Admin => {
                refused.push((&read_only, 403, "insufficient_scope"));
                refused.push((&run_only, 403, "insufficient_scope"));
                refused.push((&person_read, 403, "insufficient_scope"));
                refused.push((&api_token_run, 403, "insufficient_scope"));
            }
            Rule::PersonRun => {
                refused.push((&read_only, 403, "insufficient_scope"));
                refused.push((&person_read, 403, "insufficient_scope"));
                refused.push((&api_token_run, 403, "person_required"));
            }
        }
        for path in &paths {
            for query in queries {
                let url = format!("/v1/reliability{path}{query}");
                for body in bodies() {
                    for (caller, status, expected) in &refused {
                        let (got, answer) = caller.call(method.clone(), &url, body.clone()).await;
                        assert_eq!(
                            (got, code(&answer).as_str()),
                            (*status, *expected),
                            "{method} {url} with body {:?}: {answer}",
                            body.as_ref().map(|(b, t)| (b.len(), *t))
                        );
                        tried += 1;
                    }
                }
            }
        }
    }
    assert!(tried > 1000, "the table was walked: {tried} requests");

    // gRPC: refused before the message is decoded, so garbage bytes get the same answer.
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let grpc_tokens: [(Option<&str>, &str); 3] = [
        (None, "16"),
        (Some("iohr_0000"), "16"),
        (run_only.token.as_deref(), "7"),
    ];
    for method in GRPC_METHODS {
        for payload in [
            Bytes::new(),
            Bytes::from_static(&[0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Bytes::from_static(b"not a grpc frame at all"),
        ] {
            for (token, status) in grpc_tokens {
                let mut request = hyper::Request::builder()
                    .method(Method::POST)
                    .uri(format!(
                        "{}/iohr.runs.v1.Runs/{method}",
                        controller.api_url()
                    ))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers");
                if let Some(token) = token {
                    request = request.header("authorization", format!("Bearer {token}"));
                }
                let response = client
                    .request(request.body(Full::new(payload.clone())).expect("request"))
                    .await
                    .expect("an h2c answer");
                let in_headers = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let collected = response.into_body().collect().await.expect("body");
                let in_trailers = collected
                    .trailers()
                    .and_then(|t| t.get("grpc-status"))
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                assert_eq!(
                    in_headers.or(in_trailers).as_deref(),
                    Some(status),
                    "{method} with {token:?} and {} bytes",
                    payload.len()
                );
            }
        }
    }

    // Nothing of the refused requests was stored or changed: the one own run is still
    // the only one, still queued (no agent runs here), and no scenario was made.
    let (_, listed) = full.get("/v1/reliability/runs").await;
    let runs = listed["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["id"], own.as_str());
    assert_eq!(runs[0]["status"], "queued");
}

on_both_stores!(every_route_checks_authorization_before_anything_else);

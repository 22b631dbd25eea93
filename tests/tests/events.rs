//! Product events with the real stack, on both stores: a failing checks run against the
//! sample target and a passing one announce `reliability.finding.created` and
//! `reliability.run.finished`, ids only.
//!
//! - Webhooks: a real HTTP receiver on loopback verifies every delivery's Standard
//!   Webhooks signature with the spec authors' crate (and the Standard Webhooks Python
//!   library checks them too); a receiver failing twice then recovering shows the retries
//!   in the delivery log; one always failing is given up after the (test-sized) schedule
//!   and redelivered on request once it recovers; 410 disables a subscription; the Slack
//!   format posts `{"text"}`; bad bodies, scopes and other accounts are refused.
//! - The feed: `GET /v1/reliability/events` from the start, resumed with
//!   `Last-Event-ID`, then live; the CLI's `webhooks` and `events` commands.
//!
//! MQTT is in events_mqtt.rs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

mod events_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use events_support::{LIMIT, failing_checks, finished, passing_checks, read, stack};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, Response};
use iohr_tests::{Api, Backend, Target, on_both_stores, wait_for};
use serde_json::{Value, json};

/// Test-sized retries: three attempts, 300 ms apart.
const FAST: &[&str] = &[
    "--webhook-retry-schedule",
    "0s,300ms,300ms",
    "--events-poll-ms",
    "50",
    "--webhook-timeout-ms",
    "3000",
];

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    id: String,
    verified: bool,
    body: Value,
    /// The body as sent and the three signature headers, for the Python verifier.
    raw: String,
    signed: Value,
}

#[derive(Default)]
struct Inbox {
    /// The secret of the subscription at each path.
    secrets: HashMap<String, String>,
    got: Vec<Received>,
    /// `/down` answers 500 until this is set.
    recovered: bool,
}

impl Inbox {
    fn at(&self, path: &str) -> Vec<Received> {
        self.got
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

/// A webhook receiver on 127.0.0.1: `/ok` and `/slack` answer 204, `/flaky` 503 to the
/// first two requests of each webhook-id and then 200, `/down` 500 until recovered,
/// `/gone` 410.
async fn receiver() -> (SocketAddr, Arc<Mutex<Inbox>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let shared = inbox.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let inbox = shared.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let inbox = inbox.clone();
                    async move { Ok::<_, hyper::Error>(receive(&inbox, request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, inbox)
}

async fn receive(
    inbox: &Mutex<Inbox>,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    let headers = request.headers().clone();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let mut inbox = inbox.lock().unwrap();
    let verified = inbox.secrets.get(&path).is_some_and(|secret| {
        standardwebhooks::Webhook::new(secret)
            .unwrap()
            .verify(&body, &headers)
            .is_ok()
    });
    let id = headers
        .get("webhook-id")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let before = inbox
        .got
        .iter()
        .filter(|r| r.path == path && r.id == id)
        .count();
    let status = match path.as_str() {
        "/flaky" if before < 2 => 503,
        "/flaky" => 200,
        "/down" if !inbox.recovered => 500,
        "/gone" => 410,
        _ => 204,
    };
    let header = |name: &str| {
        headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap())
            .to_string()
    };
    let signed = json!({"webhook-id": header("webhook-id"),
        "webhook-timestamp": header("webhook-timestamp"),
        "webhook-signature": header("webhook-signature")});
    inbox.got.push(Received {
        path,
        id,
        verified,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        raw: String::from_utf8_lossy(&body).into_owned(),
        signed,
    });
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn subscribe(api: &Api, inbox: &Mutex<Inbox>, url: &str, body: Value) -> Value {
    let (status, hook) = api.post("/v1/reliability/webhooks", &body).await;
    assert_eq!(status, 201, "{hook}");
    let secret = hook["secret"].as_str().expect("secret").to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    let path = url.rsplit_once('/').map(|(_, p)| format!("/{p}")).unwrap();
    inbox.lock().unwrap().secrets.insert(path, secret);
    hook
}

async fn deliveries(api: &Api, hook: &Value) -> Vec<Value> {
    let id = hook["id"].as_str().unwrap();
    let (status, page) = api
        .get(&format!("/v1/reliability/webhooks/{id}/deliveries"))
        .await;
    assert_eq!(status, 200, "{page}");
    page["deliveries"].as_array().unwrap().clone()
}

async fn webhooks_deliver_signed_events_retry_and_redeliver(backend: Backend) {
    let (install, controller, api, _agent) = stack(backend, FAST).await;
    let target = Target::start().await;
    let (addr, inbox) = receiver().await;
    let url = |path: &str| format!("http://{addr}/{path}");

    // Refusals first: nothing of these is stored.
    for (body, code) in [
        (
            json!({"url": "ftp://x/", "events": ["reliability.run.finished"]}),
            "invalid_url",
        ),
        (
            json!({"url": format!("http://u:p@{addr}/ok"), "events": ["reliability.run.finished"]}),
            "invalid_url",
        ),
        (
            json!({"url": url("ok"), "events": ["reliability.run.started"]}),
            "invalid_events",
        ),
        (json!({"url": url("ok"), "events": []}), "invalid_events"),
        (
            json!({"url": url("ok"), "events": ["reliability.run.finished"], "format": "teams"}),
            "invalid_format",
        ),
    ] {
        let (status, answer) = api.post("/v1/reliability/webhooks", &body).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {answer}"
        );
    }
    let reader = api.with_token(Some(&install.token("default", &["reliability:read"], None)));
    let (status, _) = reader
        .post(
            "/v1/reliability/webhooks",
            &json!({"url": url("ok"), "events": ["reliability.run.finished"]}),
        )
        .await;
    assert_eq!(status, 403);

    let all = json!(["reliability.run.finished", "reliability.finding.created"]);
    let ok = subscribe(
        &api,
        &inbox,
        &url("ok"),
        json!({"url": url("ok"), "events": all}),
    )
    .await;
    let flaky = subscribe(
        &api,
        &inbox,
        &url("flaky"),
        json!({"url": url("flaky"), "events": ["reliability.run.finished"]}),
    )
    .await;
    let down = subscribe(
        &api,
        &inbox,
        &url("down"),
        json!({"url": url("down"), "events": ["reliability.run.finished"]}),
    )
    .await;
    let gone = subscribe(
        &api,
        &inbox,
        &url("gone"),
        json!({"url": url("gone"), "events": all}),
    )
    .await;
    let slack = subscribe(
        &api,
        &inbox,
        &url("slack"),
        json!({"url": url("slack"), "events": ["reliability.run.finished"], "format": "slack"}),
    )
    .await;
    assert_eq!(slack["format"], "slack");

    // Listed without secrets; another account sees none of them.
    let (status, list) = reader.get("/v1/reliability/webhooks").await;
    assert_eq!(
        (status, list["webhooks"].as_array().unwrap().len()),
        (200, 5),
        "{list}"
    );
    assert!(!list.to_string().contains("whsec_"), "{list}");
    install.create_account("other", 1, false);
    let other = api.with_token(Some(&install.token(
        "other",
        &["reliability:run", "reliability:read"],
        None,
    )));
    let ok_id = ok["id"].as_str().unwrap();
    for path in [
        format!("/v1/reliability/webhooks/{ok_id}"),
        format!("/v1/reliability/webhooks/{ok_id}/deliveries"),
    ] {
        assert_eq!(other.get(&path).await.0, 404, "{path}");
    }
    assert_eq!(
        other.get("/v1/reliability/webhooks").await.1["webhooks"],
        json!([])
    );

    let failed = finished(&api, &failing_checks(&target), "failed").await;
    let passed = finished(&api, &passing_checks(&target), "passed").await;
    let findings: Vec<&str> = failed["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(findings.len(), 2, "{failed}");

    // `/ok`: every event once, signed, the webhook-id the event's id.
    let got = wait_for("four deliveries at /ok", LIMIT, || async {
        let got = inbox.lock().unwrap().at("/ok");
        (got.len() >= 4).then_some(got)
    })
    .await;
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        got.iter()
            .all(|r| r.verified && r.body["id"] == r.id.as_str()),
        "{got:?}"
    );
    let mut types: Vec<(&str, &str)> = got
        .iter()
        .map(|r| {
            (
                r.body["type"].as_str().unwrap(),
                r.body["data"]["run_id"].as_str().unwrap(),
            )
        })
        .collect();
    types.sort();
    let (failed_id, passed_id) = (
        failed["id"].as_str().unwrap(),
        passed["id"].as_str().unwrap(),
    );
    let mut expected = vec![
        ("reliability.finding.created", failed_id),
        ("reliability.finding.created", failed_id),
        ("reliability.run.finished", failed_id),
        ("reliability.run.finished", passed_id),
    ];
    expected.sort();
    assert_eq!(types, expected);
    let ended = got
        .iter()
        .find(|r| {
            r.body["data"]["run_id"] == failed_id && r.body["type"] == "reliability.run.finished"
        })
        .unwrap();
    assert_eq!(
        ended.body["data"],
        json!({"run_id": failed_id, "kind": "checks", "status": "failed", "environment": "staging"})
    );
    let mut created: Vec<&str> = got
        .iter()
        .filter_map(|r| r.body["data"]["finding_id"].as_str())
        .collect();
    created.sort();
    let mut findings_sorted = findings.clone();
    findings_sorted.sort();
    assert_eq!(created, findings_sorted);

    // The Standard Webhooks Python library verifies them too (and refuses a changed body).
    let secret = inbox.lock().unwrap().secrets["/ok"].clone();
    let config = json!({"secret": secret, "deliveries": got.iter()
        .map(|r| json!({"headers": r.signed, "body": r.raw})).collect::<Vec<_>>()});
    let checked = iohr_tests::python::run_script("events_verify.py", &config, LIMIT).await;
    assert_eq!(checked["verified"], 4, "{checked}");

    // `/flaky`: 503, 503, then 200 for each run's end; the log shows three attempts.
    let log = wait_for("flaky deliveries delivered", LIMIT, || async {
        let log = deliveries(&api, &flaky).await;
        (log.len() == 2 && log.iter().all(|d| d["status"] == "delivered")).then_some(log)
    })
    .await;
    for delivery in &log {
        assert_eq!(
            (
                delivery["attempts"].as_i64(),
                delivery["last_status_code"].as_i64()
            ),
            (Some(3), Some(200)),
            "{delivery}"
        );
        let id = delivery["event_id"].as_str().unwrap();
        let seen = inbox
            .lock()
            .unwrap()
            .at("/flaky")
            .iter()
            .filter(|r| r.id == id && r.verified)
            .count();
        assert_eq!(seen, 3, "three signed attempts of {id}");
    }

    // `/down`: given up after the schedule's three attempts; redelivered once it recovers.
    let log = wait_for("down deliveries given up", LIMIT, || async {
        let log = deliveries(&api, &down).await;
        (log.len() == 2 && log.iter().all(|d| d["status"] == "failed")).then_some(log)
    })
    .await;
    for delivery in &log {
        assert_eq!(
            (
                delivery["attempts"].as_i64(),
                delivery["last_status_code"].as_i64()
            ),
            (Some(3), Some(500)),
            "{delivery}"
        );
        // A class, not the error's text (issue 38).
        assert_eq!(delivery["last_error"], "http_status");
        assert_eq!(delivery["next_attempt_at"], Value::Null);
    }
    inbox.lock().unwrap().recovered = true;
    let down_id = down["id"].as_str().unwrap();
    let event_id = log[0]["event_id"].as_str().unwrap();
    let (status, again) = api
        .post(
            &format!("/v1/reliability/webhooks/{down_id}/deliveries/{event_id}/redeliver"),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, again["status"].as_str()),
        (202, Some("pending")),
        "{again}"
    );
    wait_for("the redelivery delivered", LIMIT, || async {
        let log = deliveries(&api, &down).await;
        log.iter()
            .any(|d| d["event_id"] == event_id && d["status"] == "delivered" && d["attempts"] == 4)
            .then_some(())
    })
    .await;
    assert_eq!(
        deliveries(&api, &down)
            .await
            .iter()
            .filter(|d| d["status"] == "failed")
            .count(),
        1,
        "the other stays given up"
    );
    let (status, _) = api
        .post(
            &format!("/v1/reliability/webhooks/{down_id}/deliveries/evt_none/redeliver"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 404);

    // Redelivering a delivered event sends it again under the same webhook-id.
    let first = got[0].id.clone();
    let (status, _) = api
        .post(
            &format!("/v1/reliability/webhooks/{ok_id}/deliveries/{first}/redeliver"),
            &json!({}),
        )
        .await;
    assert_eq!(status, 202);
    wait_for("the same webhook-id again", LIMIT, || async {
        let got = inbox.lock().unwrap().at("/ok");
        (got.iter().filter(|r| r.id == first && r.verified).count() == 2).then_some(())
    })
    .await;

    // `/gone`: 410 disables the subscription; it is not retried, nor redelivered.
    let gone_id = gone["id"].as_str().unwrap();
    let disabled = wait_for("the 410 subscription disabled", LIMIT, || async {
        let (_, hook) = api
            .get(&format!("/v1/reliability/webhooks/{gone_id}"))
            .await;
        (hook["state"] == "disabled").then_some(hook)
    })
    .await;
    assert!(
        disabled["disabled_reason"]
            .as_str()
            .unwrap()
            .contains("410"),
        "{disabled}"
    );
    // Attempts of the same pass may still be recording: wait for the log to catch up
    // with what the receiver got, then check that nothing more came.
    let gone_log = wait_for("every 410 in the log", LIMIT, || async {
        let log = deliveries(&api, &gone).await;
        let answered = log.iter().filter(|d| d["last_status_code"] == 410).count();
        let got = inbox.lock().unwrap().at("/gone").len();
        (answered >= 1 && answered == got).then_some(log)
    })
    .await;
    assert!(
        gone_log.iter().all(|d| d["status"] != "delivered"),
        "{gone_log:?}"
    );
    let some_event = gone_log[0]["event_id"].as_str().unwrap();
    let (status, refused) = api
        .post(
            &format!("/v1/reliability/webhooks/{gone_id}/deliveries/{some_event}/redeliver"),
            &json!({}),
        )
        .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("webhook_disabled")),
        "{refused}"
    );

    // Slack: an incoming webhook's `{"text"}`, naming the run.
    let texts = wait_for("two Slack posts", LIMIT, || async {
        let got = inbox.lock().unwrap().at("/slack");
        (got.len() >= 2).then_some(got)
    })
    .await;
    let mut texts: Vec<String> = texts
        .iter()
        .map(|r| {
            assert!(r.verified);
            assert_eq!(r.body.as_object().unwrap().len(), 1, "{}", r.body);
            r.body["text"].as_str().unwrap().to_string()
        })
        .collect();
    texts.sort();
    assert!(
        texts
            .iter()
            .any(|t| t.contains(failed_id) && t.ends_with("finished: failed")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains(passed_id) && t.ends_with("finished: passed")),
        "{texts:?}"
    );

    // The feed: everything from the start, resumed after an id, then live.
    let mut feed = api.feed(None).await;
    let start = read(&mut feed, 4).await;
    assert_eq!(
        start.iter().map(|e| e.id).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3), Some(4)]
    );
    let mut feed_ids: Vec<&str> = start
        .iter()
        .map(|e| e.data["id"].as_str().unwrap())
        .collect();
    feed_ids.sort();
    let mut hook_ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    hook_ids.sort();
    assert_eq!(
        feed_ids, hook_ids,
        "the feed and the webhooks tell the same events"
    );
    assert_eq!(start[3].event, "reliability.run.finished");
    assert_eq!(start[3].data["data"]["run_id"], passed_id);
    let mut resumed = api.feed(Some(2)).await;
    let after = read(&mut resumed, 2).await;
    assert_eq!((after[0].id, after[1].id), (Some(3), Some(4)));
    let third = finished(&api, &passing_checks(&target), "passed").await;
    let live = feed.next(LIMIT).await.expect("a live event");
    assert_eq!(
        (live.id, live.data["data"]["run_id"].as_str()),
        (Some(5), third["id"].as_str())
    );
    assert_eq!(resumed.next(LIMIT).await.expect("live too").id, Some(5));
    let (status, _, answer) = api.get_head("/v1/reliability/events?after=-1").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    // The CLI: the same subscriptions, logs and feed.
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(iohr_tests::process::bin("iohr"))
            .args([
                "--server",
                &controller.api_url(),
                "--token",
                &install.full_token(),
            ])
            .args(args)
            .output()
            .expect("run iohr");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success(),
            "iohr {args:?}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let made = cli(&[
        "reliability",
        "webhooks",
        "create",
        "--url",
        &url("ok"),
        "--event",
        "reliability.run.finished",
    ]);
    assert!(
        made.contains("secret (shown once") && made.contains("whsec_"),
        "{made}"
    );
    let listed: Value =
        serde_json::from_str(&cli(&["--json", "reliability", "webhooks", "list"])).unwrap();
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 6);
    let new_id = listed["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .find(|id| !made.is_empty() && made.contains(id))
        .unwrap()
        .to_string();
    let flaky_id = flaky["id"].as_str().unwrap();
    let table = cli(&["reliability", "webhooks", "deliveries", flaky_id]);
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("delivered") && l.contains("reliability.run.finished"))
            .count(),
        2,
        "{table}"
    );
    let lines = cli(&[
        "--json",
        "reliability",
        "events",
        "--after",
        "3",
        "--count",
        "2",
    ]);
    let seqs: Vec<i64> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [4, 5]);
    let human = cli(&["reliability", "events", "--count", "1"]);
    assert!(
        human.starts_with("1  ") && human.contains("reliability.finding.created"),
        "{human}"
    );
    assert!(cli(&["reliability", "webhooks", "delete", &new_id]).contains("deleted"));
    assert!(
        cli(&["reliability", "webhooks", "redeliver", ok_id, &first]).contains("redelivery queued")
    );

    // Deleting: 204, then 404; the other account cannot delete ours.
    let (status, _) = other
        .call(
            Method::DELETE,
            &format!("/v1/reliability/webhooks/{ok_id}"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = api
        .call(
            Method::DELETE,
            &format!("/v1/reliability/webhooks/{ok_id}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        api.get(&format!("/v1/reliability/webhooks/{ok_id}"))
            .await
            .0,
        404
    );
    drop(controller);
}
on_both_stores!(webhooks_deliver_signed_events_retry_and_redeliver);

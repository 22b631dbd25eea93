//! The multiplexed WebSocket stream (`GET /v1/reliability/stream`) through a client
//! nobody here wrote, PyPI `websockets` (`tests/ws/client.py`), against a real controller
//! and agent: refusals before the upgrade (401, 403), two runs' frames on one connection
//! with the SSE stream's ids, frames and ending, an unsubscribe, bad messages answered
//! with error messages, the subscription bound, an oversized message, the viewer bounds
//! (per subscription and 429 before the upgrade) and a resume after a cut of the
//! connection, without a frame lost or twice.
//!
//! The client lives in a virtual environment that tests/run makes (`target/py-venv`, or
//! `IOHR_PYTHON`); without it the test fails, it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use iohr_tests::process::AgentOptions;
use iohr_tests::python::{python, run_script};
use iohr_tests::setup::OneAgent;
use iohr_tests::{Api, Backend, Controller, CutProxy, Installation, Target, on_both_stores};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const LIMIT: Duration = Duration::from_secs(60);

fn stream_url(api_url: &str) -> String {
    format!(
        "{}/v1/reliability/stream",
        api_url.replacen("http://", "ws://", 1)
    )
}

async fn client(config: Value) -> Value {
    run_script("ws/client.py", &config, Duration::from_secs(240)).await
}

/// A frame as both surfaces give it: (id, event name, data).
type Frame = (u64, String, Value);

/// The run's whole SSE stream, from the first frame to its close.
/// The client in a mode that asks the test to act: each `{"ask": WHAT}` line it prints
/// is answered with a line on its stdin after `act(WHAT)`; its last line is what it saw.
async fn client_asking(config: Value, mut act: impl FnMut(&str)) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/ws/client.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .arg(config.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the Python client");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let last = loop {
        let line = tokio::time::timeout(LIMIT, lines.next_line())
            .await
            .expect("a line from the client in time")
            .unwrap()
            .expect("the client's JSON before its output ends");
        let value: Value = serde_json::from_str(&line).unwrap();
        match value["ask"].as_str() {
            Some(what) => {
                act(what);
                stdin.write_all(b"done\n").await.unwrap();
            }
            None => break value,
        }
    };
    let output = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("the client ends in time")
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    last
}

async fn sse_frames(api: &Api, id: &str) -> Vec<Frame> {
    let events = api.events(id, None).await.collect(LIMIT).await;
    assert_eq!(events.last().map(|e| e.event.as_str()), Some("finished"));
    events
        .into_iter()
        .map(|e| (e.id.expect("an SSE id"), e.event, e.data))
        .collect()
}

/// The frame messages of `run` among `messages`.
fn ws_frames(messages: &[Value], run: &str) -> Vec<Frame> {
    messages
        .iter()
        .filter(|m| m["type"] == "frame" && m["run"] == run)
        .map(|m| {
            assert_eq!(m["topic"], "frames", "{m}");
            (
                m["id"].as_u64().expect("a frame id"),
                m["event"].as_str().expect("an event").to_string(),
                m["frame"].clone(),
            )
        })
        .collect()
}

/// The messages about `run` other than frames, by type.
fn others(messages: &[Value], run: &str) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["run"] == run && m["type"] != "frame")
        .cloned()
        .collect()
}

fn end(run: &str, last: u64) -> Value {
    json!({"type": "end", "topic": "frames", "run": run, "last": last})
}

fn subscribed(run: &str, after: u64) -> Value {
    json!({"type": "subscribed", "topic": "frames", "run": run, "after": after})
}

async fn create(api: &Api, body: Value) -> String {
    api.create_run(&body).await["id"]
        .as_str()
        .expect("run id")
        .to_string()
}

/// A run that stays queued: no agent of our cloud is connected.
fn never_placed() -> Value {
    json!({"kind": "checks", "environment": "staging", "target": "http://127.0.0.1:9",
           "executor": "cloud", "spec": {"checks": [{"path": "/"}]}})
}

fn load(target: &Target, seconds: u32) -> Value {
    json!({"kind": "load", "environment": "staging", "target": target.url(),
           "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 20,
                    "duration": format!("{seconds}s"), "connections": 2}})
}

async fn the_stream_serves_several_runs_as_sse_does(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let target = Target::start().await;
    let api = &stack.api;
    let a = create(api, load(&target, 3)).await;
    let checks = json!({"kind": "checks", "environment": "staging", "target": target.url(),
        "spec": {"checks": [{"path": "/"}, {"path": "/health"}, {"path": "/slow?ms=100"}]}});
    let b = create(api, checks).await;
    let live = create(api, load(&target, 3)).await;
    let mut queued = Vec::new();
    for _ in 0..33 {
        queued.push(create(api, never_placed()).await);
    }
    stack.install.create_account("other", 4, false);
    let other_token = stack
        .install
        .token("other", &["reliability:run", "reliability:read"], None);
    let other = create(
        &Api::new(&stack.controller.api_url(), &other_token),
        never_placed(),
    )
    .await;
    let seen = client(json!({
        "mode": "main",
        "url": stream_url(&stack.controller.api_url()),
        "token": stack.install.full_token(),
        "run_token": stack.install.token("default", &["reliability:run"], None),
        "runs": [a, b, live],
        "queued": queued,
        "other": other,
    }))
    .await;

    // Refused before the upgrade, with the API's codes.
    assert_eq!(
        seen["no_token"],
        json!({"status": 401, "code": "unauthorized"})
    );
    assert_eq!(
        seen["unknown_token"],
        json!({"status": 401, "code": "unauthorized"})
    );
    assert_eq!(
        seen["run_only_token"],
        json!({"status": 403, "code": "insufficient_scope"})
    );

    // Two runs on one connection: each run's frames are its SSE stream's, ids, names
    // and data, and each ends where SSE closes.
    let two = seen["two_runs"].as_array().unwrap();
    for run in [&a, &b] {
        let sse = sse_frames(api, run).await;
        assert_eq!(ws_frames(two, run), sse, "run {run}");
        let last = sse.last().unwrap().0;
        assert_eq!(others(two, run), [subscribed(run, 0), end(run, last)]);
        // The end comes after the run's last frame.
        let at_end = two.iter().position(|m| m == &end(run, last)).unwrap();
        let at_last = two
            .iter()
            .rposition(|m| m["type"] == "frame" && m["run"] == *run);
        assert!(at_last < Some(at_end));
    }

    // Unsubscribed after its first frame: none of its frames until it is subscribed
    // again after the last one seen, and then exactly the rest.
    let unsub = &seen["unsubscribe"];
    let first = unsub["first"].as_array().unwrap();
    assert_eq!(first[0], subscribed(&live, 0));
    assert_eq!(
        first.last().unwrap(),
        &json!({"type": "unsubscribed", "topic": "frames", "run": live})
    );
    let between = unsub["between"].as_array().unwrap();
    assert!(between.iter().all(|m| m["run"] != *live), "{between:?}");
    assert_eq!(
        between.last().unwrap(),
        &end(&b, sse_frames(api, &b).await.last().unwrap().0)
    );
    let rest = unsub["rest"].as_array().unwrap();
    let mut frames = ws_frames(first, &live);
    let resumed_after = frames.last().unwrap().0;
    assert_eq!(rest[0], subscribed(&live, resumed_after));
    let later = ws_frames(rest, &live);
    assert!(!later.is_empty(), "the run went on while unsubscribed");
    frames.extend(later);
    let sse = sse_frames(api, &live).await;
    assert_eq!(frames, sse);
    assert_eq!(rest.last().unwrap(), &end(&live, sse.last().unwrap().0));

    // Bad messages: an error message each, with the REST codes where REST has them.
    let bad = &seen["bad"];
    for (name, code) in [
        ("malformed", "malformed_json"),
        ("binary", "invalid_message"),
        ("not_an_object", "invalid_message"),
        ("unknown_op", "invalid_message"),
        ("unknown_field", "invalid_message"),
        ("negative_after", "invalid_message"),
        ("events_topic", "invalid_message"),
        ("unknown_run", "not_found"),
        ("other_account", "not_found"),
        ("not_subscribed", "not_subscribed"),
    ] {
        assert_eq!(bad[name]["type"], "error", "{name}: {}", bad[name]);
        assert_eq!(bad[name]["code"], code, "{name}: {}", bad[name]);
        assert!(!bad[name]["message"].as_str().unwrap().is_empty());
    }
    assert_eq!(bad["unknown_field"]["run"], *a);
    assert!(
        bad["unknown_field"]["message"]
            .as_str()
            .unwrap()
            .contains("\"since\"")
    );
    assert_eq!(bad["other_account"]["run"], *other);

    // One subscription per run, 32 per connection.
    assert_eq!(seen["subscribe_queued"], subscribed(&queued[0], 0));
    assert_eq!(seen["again"]["code"], "already_subscribed");
    assert_eq!(seen["unsubscribe_queued"]["type"], "unsubscribed");
    let bound = seen["bound"].as_array().unwrap();
    assert_eq!(bound.len(), 33);
    assert!(bound[..32].iter().all(|t| t == "subscribed"), "{bound:?}");
    assert_eq!(bound[32], "too_many_subscriptions");
    assert_eq!(seen["unsubscribe_one"], "unsubscribed");
    assert_eq!(seen["then_room"], "subscribed");
    assert_eq!(seen["unsubscribe_all"], json!(["unsubscribed"]));

    // Resuming a finished run: the frames after `after`, then the end; past its last
    // frame, the end alone (SSE: an empty stream).
    let b_last = sse_frames(api, &b).await.last().unwrap().0;
    let tail = seen["b_tail"].as_array().unwrap();
    assert_eq!(tail[0], subscribed(&b, b_last - 1));
    assert_eq!(
        ws_frames(tail, &b)
            .into_iter()
            .map(|f| (f.0, f.1))
            .collect::<Vec<_>>(),
        [(b_last, "finished".to_string())]
    );
    assert_eq!(tail.last().unwrap(), &end(&b, b_last));
    assert_eq!(
        seen["b_past"],
        json!([subscribed(&b, b_last), end(&b, b_last)])
    );
    let past = api.events(&b, Some(b_last)).await.collect(LIMIT).await;
    assert!(past.is_empty(), "{past:?}");

    // A message over 4096 bytes closes the connection with 1009.
    assert_eq!(seen["oversized_close"], 1009);

    // A token revoked while its connection is open: the next subscribe closes it.
    let created = stack.install.ctl2(
        "token",
        &[
            "create",
            "--account",
            "default",
            "--scope",
            "reliability:read",
        ],
    );
    let (line, secret) = (
        created.lines().next().unwrap(),
        created.lines().last().unwrap(),
    );
    let id = line.split_whitespace().nth(2).unwrap().to_string();
    let seen = client_asking(
        json!({"mode": "revoked", "url": stream_url(&stack.controller.api_url()),
               "token": secret.trim(), "run": queued[0]}),
        |what| {
            assert_eq!(what, "revoke");
            stack.install.ctl2("token", &["revoke", "--id", &id]);
        },
    )
    .await;
    assert_eq!(seen["first"], subscribed(&queued[0], 0));
    assert_eq!(
        seen["close"],
        json!([1008, "the token is unknown or revoked"])
    );
}

/// A connection takes a place in the viewer total, each subscription a viewer's place:
/// past a bound a subscription gets an error message, a new connection a 429.
#[tokio::test]
async fn the_stream_counts_against_the_viewer_bounds() {
    let install = Installation::new(Backend::Sqlite).await;
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--max-viewers-per-run", "1", "--max-viewers", "3"],
    )
    .await;
    let token = install.full_token();
    let api = Api::new(&controller.api_url(), &token);
    let run = create(&api, never_placed()).await;

    // Not a WebSocket: refused with the API's shape, after the token was checked.
    let (status, body) = api.get("/v1/reliability/stream").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "websocket_required", "{body}");
    let (status, body) = api.with_token(None).get("/v1/reliability/stream").await;
    assert_eq!(status, 401, "{body}");

    let seen = client(json!({
        "mode": "bounds",
        "url": stream_url(&controller.api_url()),
        "token": token,
        "run": run,
    }))
    .await;
    assert_eq!(seen["first"], subscribed(&run, 0));
    assert_eq!(seen["second"]["type"], "error");
    assert_eq!(seen["second"]["code"], "too_many_viewers", "{seen}");
    assert_eq!(seen["second"]["run"], *run);
    assert_eq!(
        seen["third_connection"],
        json!({"status": 429, "code": "too_many_viewers"})
    );
    assert_eq!(seen["after_close"], "invalid_message");
}

/// Cut mid-run by a proxy, the client reconnects and resumes after the last id it saw:
/// together the two connections gave the SSE stream's frames exactly once each.
async fn a_cut_stream_resumes_after_the_last_frame(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let target = Target::start().await;
    let run = create(&stack.api, load(&target, 4)).await;
    let api_addr: SocketAddr = stack
        .controller
        .api_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let proxy = CutProxy::start(api_addr).await;
    let config = json!({
        "mode": "resume",
        "url": stream_url(&format!("http://{}", proxy.addr)),
        "token": stack.install.full_token(),
        "run": run,
    });
    let seen = client_asking(config, |what| {
        assert_eq!(what, "cut");
        proxy.cut();
    })
    .await;

    assert_eq!(seen["closed"]["code"], Value::Null, "a cut, not a close");
    assert_eq!(proxy.connections(), 2);
    let before = seen["before"].as_array().unwrap();
    let after = seen["after"].as_array().unwrap();
    let mut frames = ws_frames(before, &run);
    assert!(frames.len() >= 2);
    assert_eq!(after[0], subscribed(&run, frames.last().unwrap().0));
    frames.extend(ws_frames(after, &run));
    let sse = sse_frames(&stack.api, &run).await;
    assert_eq!(frames, sse, "every frame once, in order");
    assert_eq!(after.last().unwrap(), &end(&run, sse.last().unwrap().0));
}

/// The account's events on the stream (topic `events`): the same events, ids and data as
/// the SSE feed `GET /events`, stored ones then live ones, resumed after an id.
async fn the_stream_serves_the_accounts_events(backend: Backend) {
    let stack = OneAgent::start(backend, AgentOptions::default()).await;
    let api = &stack.api;
    let target = Target::start().await;
    let failing = create(
        api,
        json!({"kind": "checks", "environment": "staging", "target": target.url(),
               "spec": {"checks": [{"name": "broken", "path": "/status/500"}]}}),
    )
    .await;
    api.wait_status(&failing, &["failed"], LIMIT).await;
    // A finding, then the run's end: two stored events, as the feed shows them.
    let mut feed = api.feed(None).await;
    let mut sse = Vec::new();
    for _ in 0..2 {
        sse.push(feed.next(LIMIT).await.expect("a stored event"));
    }
    drop(feed);
    let live = create(api, load(&target, 2)).await;
    let seen = client(
        json!({"mode": "events", "url": stream_url(&stack.controller.api_url()),
        "token": stack.install.full_token(), "stored": 2, "run": live}),
    )
    .await;
    assert_eq!(seen["subscribed"]["topic"], "events", "{seen}");
    for (ws, sse) in seen["stored"].as_array().unwrap().iter().zip(&sse) {
        assert_eq!(ws["id"].as_u64(), sse.id, "{seen}");
        assert_eq!(ws["event"], sse.event.as_str());
        assert_eq!(ws["data"], sse.data, "the same data as the feed");
    }
    assert_eq!(
        seen["stored"][1]["data"]["data"]["run_id"],
        failing.as_str()
    );
    assert_eq!(seen["live"]["data"]["data"]["run_id"], live.as_str());
    assert_eq!(
        seen["twice"]["code"], "already_subscribed",
        "one events subscription per connection: {seen}"
    );
    assert_eq!(seen["unsubscribed"]["type"], "unsubscribed");
    // Resumed after the first event: every later one once, in order, the live one last.
    let resumed: Vec<u64> = seen["resumed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap())
        .collect();
    let first = seen["stored"][0]["id"].as_u64().unwrap();
    let last = seen["live"]["id"].as_u64().unwrap();
    assert_eq!(resumed, ((first + 1)..=last).collect::<Vec<_>>(), "{seen}");
}

on_both_stores!(
    the_stream_serves_several_runs_as_sse_does,
    a_cut_stream_resumes_after_the_last_frame,
    the_stream_serves_the_accounts_events
);

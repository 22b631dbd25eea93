//! Live viewers are bounded per run and in total (`serve --max-viewers-per-run`,
//! `--max-viewers`): one more is answered 429 `too_many_viewers` with `Retry-After` on
//! REST and RESOURCE_EXHAUSTED on gRPC, and a run that ends frees its viewers' places.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::time::Duration;

use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores, wait_for};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

/// A run no agent serves: it stays queued, and its viewers wait for live frames.
async fn queued_run(api: &Api) -> String {
    let record = api
        .create_run(&json!({
            "kind": "checks",
            "environment": "staging",
            "target": "http://127.0.0.1:9",
            "spec": {"checks": [{"path": "/"}]},
        }))
        .await;
    record["id"].as_str().expect("run id").to_string()
}

fn events_path(id: &str) -> String {
    format!("/v1/reliability/runs/{id}/events")
}

async fn refused_as_too_many(api: &Api, id: &str) -> String {
    let (status, headers, body) = api.get_head(&events_path(id)).await;
    assert_eq!(status, 429, "one viewer past the limit: {body}");
    assert_eq!(body["error"]["code"], "too_many_viewers", "{body}");
    let retry_after: u64 = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(retry_after >= 1);
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn watch_run(controller: &Controller, token: &str, id: &str) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(controller.api_url())
        .expect("endpoint")
        .connect()
        .await
        .expect("h2c to the API port");
    let mut client = iohr_proto::runs::runs_client::RunsClient::new(channel);
    let mut request = tonic::Request::new(iohr_proto::runs::WatchRunRequest {
        run_id: id.to_string(),
        after_frame: 0,
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("metadata"),
    );
    client.watch_run(request).await.map(drop)
}

async fn viewers_are_bounded_per_run_and_in_total(backend: Backend) {
    let install = Installation::new(backend).await;
    let token = install.full_token();
    let controller = Controller::start_with(
        &install,
        200,
        None,
        &["--max-viewers-per-run", "2", "--max-viewers", "3"],
    )
    .await;
    let api = Api::new(&controller.api_url(), &token);
    let (a, b) = (queued_run(&api).await, queued_run(&api).await);

    let a1 = api.events(&a, None).await;
    let a2 = api.events(&a, None).await;
    let message = refused_as_too_many(&api, &a).await;
    assert!(message.contains("2 viewers"), "{message}");
    let status = watch_run(&controller, &token, &a).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    // Run B has room, the controller one place more.
    let _b1 = api.events(&b, None).await;
    let message = refused_as_too_many(&api, &b).await;
    assert!(message.contains("3 viewers"), "{message}");
    let status = watch_run(&controller, &token, &b).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    // Run A ends: its two streams close after `finished` and their places are free.
    let (status, body) = api
        .post(&format!("/v1/reliability/runs/{a}/cancel"), &json!({}))
        .await;
    assert!(status == 200 || status == 202, "cancel: {status} {body}");
    for stream in [a1, a2] {
        let events = stream.collect(LIMIT).await;
        assert_eq!(
            events.last().map(|e| e.event.as_str()),
            Some("finished"),
            "{events:?}"
        );
    }
    let _b2 = wait_for("a place among B's viewers", LIMIT, || async {
        let (status, _, _) = api.get_head(&events_path(&b)).await;
        (status == 200).then_some(())
    })
    .await;
    drop(install);
}

on_both_stores!(viewers_are_bounded_per_run_and_in_total);

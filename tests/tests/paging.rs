//! Every list pages one way (issue 32): scenario names and webhooks walked a page at a
//! time through the real controller, an exactly full last page with no next cursor, a
//! cursor no page gave refused with 400 `invalid_cursor` (as runs, findings and audit
//! lines refuse theirs; these three answered `invalid_query` before their cursors took
//! one shape), and the CLI's `next:` line for webhooks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use iohr_tests::setup::iohr;
use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::{Value, json};

/// Follows `next_cursor` from the first page of `path` at `limit` a page: every page's
/// length and the items' ids in order.
async fn walk(api: &Api, path: &str, field: &str, limit: usize) -> (Vec<usize>, Vec<String>) {
    let (mut sizes, mut ids, mut cursor) = (Vec::new(), Vec::new(), None::<String>);
    loop {
        let mut url = format!("{path}?limit={limit}");
        if let Some(cursor) = &cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = api.get(&url).await;
        assert_eq!(status, 200, "{url}: {page}");
        let items = page[field].as_array().unwrap();
        sizes.push(items.len());
        ids.extend(items.iter().map(|i| i["id"].as_str().unwrap().to_string()));
        match &page["next_cursor"] {
            Value::String(next) => cursor = Some(next.clone()),
            Value::Null => return (sizes, ids),
            other => panic!("next_cursor is a string or null, not {other}"),
        }
    }
}

/// The pages' lengths of `n` items at `limit` a page: no empty page after a full one.
fn sizes(n: usize, limit: usize) -> Vec<usize> {
    let mut sizes = vec![limit; n / limit];
    if !n.is_multiple_of(limit) || n == 0 {
        sizes.push(n % limit);
    }
    sizes
}

async fn refused(api: &Api, url: &str) {
    let (status, body) = api.get(url).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_cursor")),
        "{url}: {body}"
    );
}

async fn scenarios_and_webhooks_page_like_runs(backend: Backend) {
    let install = Installation::new(backend).await;
    let controller = Controller::start(&install, 200, None).await;
    let api = Api::new(&controller.api_url(), &install.full_token());

    for name in ["p-c", "p-a", "p-b"] {
        let body = json!({"name": name, "kind": "checks",
            "spec": {"checks": [{"path": format!("/{name}")}]}});
        let (status, stored) = api.post("/v1/reliability/scenarios", &body).await;
        assert_eq!(status, 201, "{stored}");
    }
    let (_, names) = walk(&api, "/v1/reliability/scenarios", "scenarios", 500).await;
    assert_eq!(names, ["p-a", "p-b", "p-c"], "by name");
    for limit in 1..=4 {
        assert_eq!(
            walk(&api, "/v1/reliability/scenarios", "scenarios", limit).await,
            (sizes(3, limit), names.clone()),
            "limit {limit}"
        );
    }
    refused(&api, "/v1/reliability/scenarios?cursor=").await;
    refused(
        &api,
        &format!("/v1/reliability/scenarios?cursor={}", "x".repeat(1000)),
    )
    .await;
    // A name itself is no cursor: a cursor is opaque (the name in base64url).
    refused(&api, "/v1/reliability/scenarios?cursor=p-a%20b").await;
    // Any cursor of the shape is a position, even one whose bytes no name holds (NUL).
    let (status, page) = api.get("/v1/reliability/scenarios?cursor=AGE").await;
    assert_eq!(status, 200, "{page}");

    let mut hooks = Vec::new();
    for _ in 0..3 {
        let body = json!({"url": "http://127.0.0.1:9/hook",
            "events": ["reliability.run.finished"]});
        let (status, hook) = api.post("/v1/reliability/webhooks", &body).await;
        assert_eq!(status, 201, "{hook}");
        hooks.push(hook["id"].as_str().unwrap().to_string());
    }
    hooks.sort();
    for limit in 1..=4 {
        assert_eq!(
            walk(&api, "/v1/reliability/webhooks", "webhooks", limit).await,
            (sizes(3, limit), hooks.clone()),
            "limit {limit}"
        );
    }
    refused(&api, "/v1/reliability/webhooks?cursor=").await;
    refused(&api, "/v1/reliability/webhooks?cursor=wh_1").await;
    let deliveries = format!("/v1/reliability/webhooks/{}/deliveries", hooks[0]);
    refused(&api, &format!("{deliveries}?cursor=abc")).await;
    refused(&api, &format!("{deliveries}?cursor=-1")).await;
    // A bare event seq, as clients sent before cursors were strings, is still one.
    let (status, page) = api.get(&format!("{deliveries}?cursor=5")).await;
    assert_eq!(
        (status, &page["deliveries"], &page["next_cursor"]),
        (200, &json!([]), &Value::Null),
        "{page}"
    );

    // The CLI pages webhooks as every listing: the `next:` line carries the cursor.
    let token = install.full_token();
    let listed = iohr(
        &controller,
        &token,
        &["reliability", "webhooks", "list", "--limit", "2"],
    );
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(
        listed.stdout.contains(&hooks[0]) && listed.stdout.contains(&hooks[1]),
        "{listed:?}"
    );
    assert!(
        listed.stdout.ends_with(&format!(
            "next: iohr reliability webhooks list --cursor {} --limit 2\n",
            hooks[1]
        )),
        "{listed:?}"
    );
}

on_both_stores!(scenarios_and_webhooks_page_like_runs);

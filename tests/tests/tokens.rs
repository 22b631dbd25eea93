//! `iohr-controller token list` against a real installation: every token with its
//! account, scopes, person and when it was last used by a real request, revoked ones
//! marked, one account's only with `--account`, and never a secret.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use iohr_tests::{Api, Backend, Controller, Installation, on_both_stores};
use serde_json::Value;

async fn tokens_are_listed_with_their_last_use_and_no_secret(backend: Backend) {
    let install = Installation::new(backend).await;
    install.create_account("other", 2, false);
    let controller = Controller::start(&install, 200, None).await;
    let used = install.full_token();
    let unused = install.token("default", &["reliability:audit"], Some("ada"));
    let theirs = install.token("other", &["reliability:read"], None);
    let api = Api::new(&controller.api_url(), &used);
    let (status, _) = api.get("/v1/reliability/runs").await;
    assert_eq!(status, 200);

    let listed: Value =
        serde_json::from_str(&install.ctl2("token", &["list", "--json"])).expect("json");
    let tokens = listed.as_array().expect("a list");
    assert!(tokens.len() >= 3, "{listed}");
    let by_scopes = |scopes: &[&str], account: &str| {
        tokens
            .iter()
            .find(|t| t["account"] == account && t["scopes"] == serde_json::json!(scopes))
            .unwrap_or_else(|| panic!("{scopes:?} of {account} in {listed}"))
            .clone()
    };
    let full = by_scopes(&["reliability:run", "reliability:read"], "default");
    assert!(
        full["last_used_at"].is_string(),
        "used by a request: {full}"
    );
    let audit = by_scopes(&["reliability:audit"], "default");
    assert_eq!(
        (&audit["person"], &audit["last_used_at"]),
        (&serde_json::json!("ada"), &Value::Null)
    );

    let id = audit["id"].as_str().unwrap();
    install.ctl2("token", &["revoke", "--id", id]);
    let table = install.ctl2("token", &["list"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(id))
        .expect("the revoked row");
    assert!(row.contains("never") && row.contains("revoked "), "{row}");
    for secret in [&used, &unused, &theirs] {
        assert!(!table.contains(secret.as_str()), "a secret in the listing");
    }
    assert!(!table.contains("iohr_"), "{table}");

    let only: Value =
        serde_json::from_str(&install.ctl2("token", &["list", "--account", "other", "--json"]))
            .expect("json");
    let accounts: Vec<&str> = only
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["account"].as_str().unwrap())
        .collect();
    assert_eq!(accounts, ["other"], "{only}");
}

on_both_stores!(tokens_are_listed_with_their_last_use_and_no_secret);

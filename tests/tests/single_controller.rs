//! One serving controller per store: a second `serve` on the same store is refused, and
//! says why, instead of expiring the first one's leases.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a test crate: failing is its job

use std::process::Stdio;
use std::time::Duration;

use iohr_tests::process::bin;
use iohr_tests::{Backend, Controller, Installation, on_both_stores};

async fn a_second_controller_on_one_store_is_refused(backend: Backend) {
    let install = Installation::new(backend).await;
    let first = Controller::start(&install, 200, None).await;
    let mut second = tokio::process::Command::new(bin("iohr-controller"));
    second.arg("serve");
    second.arg("--data-dir").arg(&install.data_dir);
    if let Some(url) = &install.database_url {
        second.arg("--database-url").arg(url);
    }
    second
        .args(["--api-addr", "127.0.0.1:0", "--agent-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), second.output())
        .await
        .expect("the second controller gives up within its patience")
        .expect("run iohr-controller");
    assert!(
        !output.status.success(),
        "the second controller must not serve"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("another controller is serving this store"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&output.stdout).contains("api listening"));
    // The first one is unharmed.
    let api = iohr_tests::Api::new(&first.api_url(), &install.full_token());
    assert_eq!(api.get("/v1/reliability/agents").await.0, 200);
}

on_both_stores!(a_second_controller_on_one_store_is_refused);

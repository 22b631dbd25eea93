//! A test-only way to make an executor fail, so the end-to-end tests can prove that a
//! failed executor still ends its run. Compiled only into debug builds (what `cargo test`
//! and `tests/run` start); a release build neither reads the variable nor has this code.
//!
//! `IOHR_AGENT_TEST_PANIC=start`: the first executor this process starts panics at once.
//! `IOHR_AGENT_TEST_PANIC=cancel`: the first executor waits for its run's cancel, then
//! panics. Later executors run normally, so a test can show the agent keeps serving.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;

const VARIABLE: &str = "IOHR_AGENT_TEST_PANIC";

static FIRED: AtomicBool = AtomicBool::new(false);

/// Panics as the hook says, once per process; returns at once when it is not set.
#[allow(clippy::panic, reason = "a test hook whose purpose is to panic")]
pub async fn maybe_panic(cancel: &CancellationToken) {
    let Ok(when) = std::env::var(VARIABLE) else {
        return;
    };
    if FIRED.swap(true, Ordering::SeqCst) {
        return;
    }
    match when.as_str() {
        "start" => panic!("test hook: the executor panicked as it started"),
        "cancel" => {
            cancel.cancelled().await;
            panic!("test hook: the executor panicked while stopping")
        }
        other => tracing::warn!(
            value = other,
            "{VARIABLE} is neither start nor cancel: ignored"
        ),
    }
}

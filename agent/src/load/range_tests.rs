//! The engine turns a plan into timers: a plan that skipped the spec's range checks (a
//! warm-up count no rate sends in a day) stops at the cap, never in a panic that leaves
//! its run without an end.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use iohr_domain::RunStatus;
use iohr_domain::load::{LoadSpec, WarmupPlan};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::run;
use crate::run_context::RunContext;

/// A keep-alive HTTP/1.1 server on loopback answering every request `ok`; its base URL.
pub(super) async fn serve_ok() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let answer = service_fn(|_| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), answer)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn an_unchecked_warmup_count_runs_until_cancelled_not_into_a_panic() {
    let target = serve_ok().await;
    let spec = serde_json::json!({"operations": [{"path": "/"}], "model": "open",
        "rate": 0.5, "duration": "2s"});
    let mut plan = LoadSpec::from_json(&spec)
        .and_then(|s| s.plan())
        .expect("plan");
    // What the spec of issue 12 asked for, past the check that now refuses it.
    plan.warmup = WarmupPlan::Requests(u64::MAX);
    let (tx, _rx) = crate::frames::FrameSender::channel();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let run = tokio::spawn(async move {
        run(plan, &RunContext::<()>::new(target, tx).with_cancel(cancel)).await
    });
    // The warm-up's first request is due at once; cancelling ends the run wherever it is.
    stop.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the run ends")
        .expect("the run's task did not panic");
    assert_eq!(outcome.status, RunStatus::Cancelled, "{:?}", outcome.reason);
}

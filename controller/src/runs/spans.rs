//! A run's life as spans for the operator's OpenTelemetry backend (`iohr_telemetry::run`),
//! recorded once its ending is committed, from the stored instants. Off (no
//! `OTEL_EXPORTER_OTLP_*` endpoint set) it costs the ending one load; on, a task of its
//! own reads the run's first and last frame instants, off the ending's path.

use crate::store::{RunRow, Store};

/// The ended `run`'s spans, `status` and `reason` as its ending wrote them at `ended_ms`.
pub(super) fn record(
    store: &Store,
    run: &RunRow,
    status: &str,
    reason: Option<&str>,
    ended_ms: i64,
) {
    if !iohr_telemetry::enabled() {
        return;
    }
    let store = store.clone();
    let run = run.clone();
    let (status, reason) = (status.to_string(), reason.map(str::to_string));
    tokio::spawn(async move { write(&store, &run, &status, reason.as_deref(), ended_ms).await });
}

/// The spans of a split run's `parent`, which a share's ending settled (its `finished`
/// frame at `ended_ms`, with `reason`): read back once committed, as it ended.
pub(super) fn record_parent(store: &Store, parent: &str, reason: Option<&str>, ended_ms: i64) {
    if !iohr_telemetry::enabled() {
        return;
    }
    let store = store.clone();
    let (parent, reason) = (parent.to_string(), reason.map(str::to_string));
    tokio::spawn(async move {
        match store.run(&parent).await {
            Ok(Some(run)) => {
                let status = run.status.as_str().to_string();
                write(&store, &run, &status, reason.as_deref(), ended_ms).await;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(run = %parent, %error, "reading a split run for its spans failed");
            }
        }
    });
}

async fn write(store: &Store, run: &RunRow, status: &str, reason: Option<&str>, ended_ms: i64) {
    let (first, last) = match frame_instants(store, run).await {
        Ok(instants) => instants,
        Err(error) => {
            tracing::debug!(run = %run.id, %error, "reading a run's frame instants for its spans failed");
            (None, None)
        }
    };
    iohr_telemetry::run::record(&iohr_telemetry::run::RunLife {
        run_id: &run.id,
        kind: run.kind.as_str(),
        account_id: &run.account_id,
        agent_id: run.agent_id.as_deref(),
        status,
        reason,
        created_ms: run.created_at,
        started_ms: run.started_at,
        first_frame_ms: first,
        last_frame_ms: last,
        frames: run.frames_through,
        ended_ms,
    });
}

/// When the run's first and last frames before its ending were stored.
async fn frame_instants(
    store: &Store,
    run: &RunRow,
) -> crate::store::Result<(Option<i64>, Option<i64>)> {
    if run.frames_through == 0 {
        return Ok((None, None));
    }
    let mut tx = store.begin().await?;
    let first = tx.frames_between(&run.id, 0, 1).await?;
    let last = tx
        .frames_between(&run.id, run.frames_through - 1, run.frames_through)
        .await?;
    Ok((
        first.first().map(|(_, _, at)| *at),
        last.last().map(|(_, _, at)| *at),
    ))
}

//! What every surface that streams a run's frames answers alike before they flow (SSE
//! `GET /runs/{id}/events`, the console's live feed, gRPC `WatchRun`, the WebSocket): a
//! place among the run's viewers, whether its frames are still kept, the resume point a
//! reconnecting browser sends. Below the surfaces, so none imports another for them
//! (`crate::api::events` re-exports them).

use axum::http::HeaderMap;

use crate::Shared;
use crate::error::ApiError;
use crate::hub::{HubFull, Subscription};

/// Seconds a refused viewer is told to wait: viewers leave as runs end.
const VIEWERS_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A place among the run's live viewers for the account, or 429 `too_many_viewers`
/// (`too_many_account_viewers` past the account's share).
pub fn join(shared: &Shared, run_id: &str, account_id: &str) -> Result<Subscription, ApiError> {
    shared
        .hub
        .subscribe(run_id, account_id)
        .map_err(|full| refuse_viewer(full, run_id))
}

/// The 429 of a viewer the hub refused (a WebSocket connection, which has no run, is
/// never refused `PerRun`).
pub fn refuse_viewer(full: HubFull, run_id: &str) -> ApiError {
    let message = match full {
        HubFull::PerRun(limit) => {
            format!("run {run_id} already has {limit} viewers, its limit; retry later")
        }
        HubFull::Total(limit) => {
            format!("the controller already serves {limit} viewers, its limit; retry later")
        }
        HubFull::Account(_) => full.to_string(),
    };
    ApiError::too_many(full.code(), message, VIEWERS_RETRY_AFTER)
}

/// 410 `frames_expired` when retention deleted the run's frames: its record (and its
/// result) stays, its stream has nothing left to replay.
pub async fn frames_kept(shared: &Shared, run_id: &str) -> Result<(), ApiError> {
    match shared.store.frames_expired_at(run_id).await? {
        None => Ok(()),
        Some(at) => Err(ApiError::new(
            axum::http::StatusCode::GONE,
            "frames_expired",
            format!(
                "the frames of run {run_id} expired at {} (retention keeps a run's frames for \
                 a period after it ends); GET /v1/reliability/runs/{run_id} keeps its record \
                 and result",
                crate::store::format_ms(at)
            ),
        )),
    }
}

/// The frame number a reconnecting `EventSource` sends back, if any; 400
/// `invalid_last_event_id` when it is not a number.
pub fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_last_event_id",
                "Last-Event-ID must be a frame number",
            )
        })
}

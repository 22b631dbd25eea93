//! Each account's share of the API requests in flight (`serve --api-max-requests`,
//! `--api-requests-per-account`): one tenant's burst of slow requests (large listings,
//! compares, bodies sent slowly) cannot hold every request the controller serves.
//!
//! A connection is accepted before any token is seen, so the share counts requests, after
//! their caller is known: [`hold`] wraps every API route and gives the request a [`Slot`];
//! the caller's extractor ([`crate::auth::Caller`]) or the gRPC guard fills it with a
//! place of the caller's account once the token is checked, or answers 429
//! `too_many_account_requests` (`too_many_requests` at the process bound;
//! `RESOURCE_EXHAUSTED` on gRPC). The place is held until the answer's head is written:
//! a stream's body (SSE, `WatchRun`, WebSocket) lives on under its viewer shares instead.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::account_shares::{BoundPlace, Full, SharedBound};
use crate::error::ApiError;

/// When a refused caller may try again: requests in flight end within moments.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Where a request's place goes once its caller is known; the place is freed when the
/// last holder drops (the middleware, after the answer's head).
#[derive(Debug, Clone, Default)]
pub struct Slot(Arc<Mutex<Option<BoundPlace>>>);

impl Slot {
    /// Takes a place of `account_id` in `bound` for this request, once: a request that
    /// holds one already keeps it.
    pub fn take(&self, bound: &SharedBound, account_id: &str) -> Result<(), Full> {
        let mut held = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.is_none() {
            *held = Some(bound.join(account_id)?);
        }
        Ok(())
    }
}

/// Gives every request a [`Slot`] and holds it until the answer's head is written.
pub async fn hold(mut request: Request, next: Next) -> Response {
    let slot = Slot::default();
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    drop(slot);
    response
}

/// The answer to a request refused by the bound.
pub fn refusal(full: Full) -> ApiError {
    match full {
        Full::Total(max) => ApiError::too_many(
            "too_many_requests",
            format!("the controller is serving {max} API requests, its limit; retry later"),
            RETRY_AFTER,
        ),
        Full::Account(share) => ApiError::too_many(
            "too_many_account_requests",
            format!(
                "this account has {share} API requests in flight, its share of the controller's; retry when one has been answered"
            ),
            RETRY_AFTER,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_takes_one_place_however_often_its_caller_is_checked() {
        let bound = SharedBound::new(8, 2);
        let first = Slot::default();
        first.take(&bound, "a").unwrap();
        first.take(&bound, "a").unwrap();
        assert_eq!(bound.held("a"), 1);
        let second = Slot::default();
        second.take(&bound, "a").unwrap();
        assert_eq!(
            Slot::default().take(&bound, "a").unwrap_err(),
            Full::Account(2)
        );
        drop(first);
        assert_eq!(bound.held("a"), 1);
        let refused = refusal(Full::Account(2));
        assert_eq!(refused.code, "too_many_account_requests");
        assert_eq!(refused.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
    }
}

//! The REST API's authentication: [`crate::auth`] (tokens, scopes, [`Caller`]), re-exported
//! under its old path, and the guard of the gRPC `Runs` service.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Shared;
pub use crate::auth::*;

/// Guards the gRPC `Runs` service (every method reads): the caller is checked before
/// tonic decodes the message, and handed to the method in the request's extensions.
pub async fn grpc_guard(
    State(shared): State<Shared>,
    mut request: Request,
    next: Next,
) -> Response {
    match authorize::<ReadScope>(&shared, request.headers().get(AUTHORIZATION)).await {
        Ok(caller) => {
            if let Some(slot) = request.extensions().get::<super::in_flight::Slot>()
                && let Err(full) = slot.take(&shared.requests, caller.account_id())
            {
                let refused = super::in_flight::refusal(full);
                return tonic::Status::resource_exhausted(refused.message)
                    .into_http::<axum::body::Body>()
                    .into_response();
            }
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => {
            let status = match error.status {
                StatusCode::UNAUTHORIZED => tonic::Status::unauthenticated(error.message),
                StatusCode::FORBIDDEN => tonic::Status::permission_denied(error.message),
                _ => tonic::Status::unavailable(error.message),
            };
            status.into_http::<axum::body::Body>().into_response()
        }
    }
}

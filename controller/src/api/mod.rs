//! The REST API under `/v1/reliability`, with the gRPC `Runs` service beside it on the
//! same port (HTTP/1.1 and h2c).
//!
//! One file per resource: [`runs`], [`events`] (the live stream), [`agents`],
//! [`scenarios`], [`compare`], [`faults`] (confirmation, halt), [`findings`], [`audit`],
//! [`webhooks`] (subscriptions, deliveries), [`outbound`] (the URLs the controller sends to: their shape and the egress policy), [`secrets`] (the account's, write-only), [`otlp`] (the account's OpenTelemetry export), [`forges`] (forge credentials, the reporter's log), [`feed`] (the product events, SSE), [`stream`]
//! (the WebSocket stream); [`auth`] checks
//! tokens and scopes, [`error`] shapes every error.

pub mod agents;
// Below the surfaces (the console answers and authenticates with them too); kept here
// under their old paths so the handlers' imports stay valid.
pub use crate::{error, in_flight};
pub mod audit;
pub mod auth;
pub mod baseline;
pub mod compare;
pub mod events;
pub mod faults;
pub mod feed;
pub mod findings;
pub mod forges;
pub mod limits;
pub mod openapi;
pub mod otlp;
pub mod outbound;
pub mod page;
pub mod run_guards;
pub mod run_start;
pub mod runs;
pub mod scenarios;
pub mod schedules;
pub mod secrets;
pub mod stream;
pub mod triggers;
pub mod watch;
pub mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{delete, get, patch, post, put};
use iohr_proto::runs::runs_server::RunsServer;

use crate::Shared;
use error::ApiError;

pub use crate::error::MAX_BODY_BYTES;

pub fn router(shared: Shared) -> Router {
    let v1 = Router::new()
        .route("/runs", post(runs::create).get(runs::list))
        .route("/runs/{id}", get(runs::get))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/runs/{id}/confirm", post(faults::confirm))
        .route("/halt", post(faults::halt))
        .route("/runs/{id}/events", get(events::events))
        .route("/agents", get(agents::list))
        .route("/scenarios", post(scenarios::create).get(scenarios::list))
        .route("/scenarios/{id}", get(scenarios::get))
        .route(
            "/scenarios/{id}/versions/{version}",
            get(scenarios::version),
        )
        .route("/compare", get(compare::get))
        .route("/findings", get(findings::list))
        .route("/findings/{id}", get(findings::get))
        .route("/findings/{id}/close", post(findings::close))
        .route("/audit", get(audit::list))
        .route("/stream", get(stream::stream))
        .route("/events", get(feed::events))
        .route("/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/webhooks/{id}",
            get(webhooks::get).delete(webhooks::delete),
        )
        .route("/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route(
            "/webhooks/{id}/deliveries/{event}/redeliver",
            post(webhooks::redeliver),
        )
        .route("/schedules", post(schedules::create).get(schedules::list))
        .route("/schedules/{id}", get(schedules::get))
        .route("/schedules/{id}", patch(schedules::patch))
        .route("/schedules/{id}", delete(schedules::delete))
        .route("/triggers", post(triggers::create).get(triggers::list))
        .route(
            "/triggers/{id}",
            get(triggers::get)
                .patch(triggers::patch)
                .delete(triggers::delete),
        )
        .route("/triggers/{id}/log", get(triggers::deliveries))
        .route("/runs/{id}/baseline", get(baseline::get))
        .route("/otlp", get(otlp::get).put(otlp::put).delete(otlp::delete))
        .route("/secrets", get(secrets::list))
        .route("/secrets/{name}", put(secrets::put).delete(secrets::delete))
        .route("/forges", get(forges::list))
        .route("/forges/reports", get(forges::reports))
        .route("/forges/{forge}", put(forges::put).delete(forges::delete));
    Router::new()
        .nest("/v1/reliability", v1)
        .route("/healthz", get(openapi::healthz))
        .route("/v1/openapi.json", get(openapi::serve))
        .route_service(
            "/iohr.runs.v1.Runs/{method}",
            tower::ServiceBuilder::new()
                .layer(axum::middleware::from_fn_with_state(
                    shared.clone(),
                    auth::grpc_guard,
                ))
                .service(RunsServer::new(watch::RunsService::new(shared.clone()))),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Outermost: a request's place is held until its answer's head is written.
        .layer(axum::middleware::from_fn(in_flight::hold))
        .with_state(shared)
}

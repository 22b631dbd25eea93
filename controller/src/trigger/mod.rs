//! The trigger surface: a forge's deliveries (GitHub, GitLab, or any sender signing per
//! Standard Webhooks) start runs through the run-lifecycle layer, as the schedule ticker's
//! fires do (design notes §9). One file per forge's verification and reading
//! ([`github`], [`gitlab`], [`generic`]), the change they come to ([`change`]), and the
//! route ([`delivery`]). The target always comes from the trigger; a delivery's values
//! reach it only through `resources/triggers/substitute.rs`'s validators.

pub mod change;
pub mod delivery;
pub mod generic;
pub mod github;
pub mod gitlab;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;

use crate::Shared;

/// `router` with the delivery route beside the API's. No bearer token: the signature
/// authenticates, so the route is not in the bearer-authenticated OpenAPI document (the
/// API reads a trigger's delivery log at `GET /v1/reliability/triggers/{id}/log`).
pub fn mount(router: Router, shared: Shared) -> Router {
    let inbound = Router::new()
        .route(
            "/v1/reliability/triggers/{id}/deliveries",
            post(delivery::receive),
        )
        .layer(DefaultBodyLimit::max(delivery::MAX_DELIVERY_BYTES))
        .layer(axum::middleware::from_fn(crate::in_flight::hold))
        .with_state(shared);
    router.merge(inbound)
}

//! `GET /agents`: the account's agents, online or not, with their running leases.

use axum::Json;
use axum::extract::State;

use super::auth::{Caller, ReadScope};
use super::error::ApiError;
use crate::Shared;
pub use crate::resources::agents::{AgentList, AgentView, LeaseView};

/// The account's agents, online or not, with their running leases.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/agents",
    tag = "agents",
    operation_id = "list_agents",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The agents", body = AgentList),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<AgentList>, ApiError> {
    let agents = crate::resources::agents::list(&shared, caller.account_id()).await?;
    Ok(Json(agents))
}

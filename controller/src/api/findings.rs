//! `GET /findings`, `GET /findings/{id}`, `POST /findings/{id}/close`: the problems runs
//! found. Reading needs `reliability:read`, closing `reliability:run`; another account's
//! finding is 404, as everywhere.

use axum::Json;
use axum::extract::{Path, Query, State};
use iohr_domain::finding::{Finding, FindingStatus};
use serde::Deserialize;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::ApiError;
use super::page::{page_answer, page_limit};
use crate::Shared;
use crate::store::FindingFilter;

/// The runs a single finding's answer lists (the newest).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only findings with this status.
    #[param(value_type = Option<FindingStatus>)]
    pub(crate) status: Option<String>,
    /// Only findings of this scenario (its id).
    #[param(min_length = 1)]
    pub(crate) scenario: Option<String>,
    /// Only findings in this environment.
    #[param(min_length = 1)]
    pub(crate) environment: Option<String>,
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub(crate) limit: Option<u32>,
    /// The `next_cursor` of the page before (the id of its last row: a lowercase UUID).
    #[param(
        min_length = 36,
        max_length = 36,
        pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    )]
    pub(crate) cursor: Option<String>,
}

impl ListQuery {
    /// The filter this query asks for, or the 400 that says what is wrong with it.
    fn filter(self) -> Result<FindingFilter, ApiError> {
        let status = super::page::filter::<FindingStatus>(self.status)?;
        let limit = page_limit(self.limit)?;
        super::page::not_empty(&[
            ("scenario", &self.scenario),
            ("environment", &self.environment),
        ])?;
        Ok(FindingFilter {
            status,
            scenario: self.scenario,
            environment: self.environment,
            limit,
            cursor: super::page::id_cursor(self.cursor)?,
        })
    }
}

/// The account's findings, newest first, a page at a time.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/findings",
    tag = "findings",
    operation_id = "list_findings",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of findings", body = super::openapi::FindingPage),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let filter = query.filter()?;
    let page =
        crate::resources::findings::list(&shared.store, caller.account_id(), &filter).await?;
    Ok(page_answer("findings", &page.items, page.next_cursor))
}

/// A finding, with the runs that saw it (the newest 100).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/findings/{id}",
    tag = "findings",
    operation_id = "get_finding",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The finding's id")),
    responses(
        (status = 200, description = "The finding", body = Finding),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such finding in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<Finding>, ApiError> {
    let finding = crate::resources::findings::get(&shared.store, caller.account_id(), &id).await?;
    Ok(Json(finding))
}

/// Close a finding; closing a closed one answers it as it is. Each call is audited.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/findings/{id}/close",
    tag = "findings",
    operation_id = "close_finding",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The finding's id")),
    responses(
        (status = 200, description = "The finding, closed", body = Finding),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such finding in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn close(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
) -> Result<Json<Finding>, ApiError> {
    let finding =
        crate::resources::findings::close(&shared.store, caller.account_id(), &id, &caller.actor())
            .await?;
    Ok(Json(finding))
}

#[cfg(test)]
mod tests {
    use super::ListQuery;

    #[test]
    fn a_cursor_that_is_no_finding_id_is_invalid_cursor() {
        crate::query::cursor_tests::takes_only_ids(|cursor| {
            ListQuery {
                cursor,
                ..ListQuery::default()
            }
            .filter()
            .map(|filter| filter.cursor)
        });
    }
}

//! `GET /audit`: the account's audit lines, newest first, paged, filtered by time, actor,
//! action, run and schedule. Reading them needs `reliability:audit`, a scope of its own.

use axum::Json;
use axum::extract::{Query, State};
use iohr_domain::audit::AuditEntry;
use serde::Deserialize;

use super::auth::{AuditScope, Caller};
use super::error::ApiError;
use super::page::{page_answer, page_limit};
use crate::Shared;
use crate::store::{AuditFilter, AuditLine, format_ms};

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Lines at or after this time (RFC 3339).
    since: Option<String>,
    /// Lines before this time (RFC 3339).
    until: Option<String>,
    /// Only this actor's lines (`token:ID`, `person:NAME`, `controller`).
    #[param(min_length = 1)]
    actor: Option<String>,
    /// Only this action's lines (`run.start`, `finding.close`, ...).
    #[param(min_length = 1)]
    action: Option<String>,
    /// Only lines about this run.
    #[param(min_length = 1)]
    run: Option<String>,
    /// Only lines about this schedule.
    #[param(min_length = 1)]
    schedule: Option<String>,
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next_cursor` of the page before (the id of its last row: a lowercase UUID).
    #[param(
        min_length = 36,
        max_length = 36,
        pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    )]
    cursor: Option<String>,
}

impl ListQuery {
    /// The filter this query asks for, or the 400 that says what is wrong with it.
    fn filter(self) -> Result<AuditFilter, ApiError> {
        let limit = page_limit(self.limit)?;
        super::page::not_empty(&[
            ("actor", &self.actor),
            ("action", &self.action),
            ("run", &self.run),
            ("schedule", &self.schedule),
        ])?;
        Ok(AuditFilter {
            since: time("since", self.since.as_deref())?,
            until: time("until", self.until.as_deref())?,
            actor: self.actor,
            action: self.action,
            run: self.run,
            schedule: self.schedule,
            limit,
            cursor: super::page::id_cursor(self.cursor)?,
        })
    }
}

/// A page of audit lines, newest first.
#[allow(dead_code)] // a schema: the page is written by `page::page_answer`
#[derive(utoipa::ToSchema)]
pub struct AuditPage {
    audit: Vec<AuditEntry>,
    /// The `cursor` of the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// The account's audit lines, newest first, a page at a time.
///
/// Scope: `reliability:audit`.
#[utoipa::path(
    get,
    path = "/v1/reliability/audit",
    tag = "audit",
    operation_id = "list_audit",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "A page of audit lines", body = AuditPage),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:audit`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<AuditScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let filter = query.filter()?;
    let (lines, next) = shared
        .store
        .list_audit(caller.account_id(), &filter)
        .await?;
    let entries: Vec<AuditEntry> = lines.into_iter().map(entry).collect();
    Ok(page_answer("audit", &entries, next))
}

/// An RFC 3339 time of the query as epoch milliseconds.
fn time(name: &str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let refused = || {
        ApiError::bad_request(
            "invalid_query",
            format!("{name} must be an RFC 3339 time such as 2026-12-01T00:00:00Z, not {text:?}"),
        )
    };
    let at = humantime::parse_rfc3339_weak(text).map_err(|_| refused())?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| refused())?
        .as_millis();
    i64::try_from(ms).map(Some).map_err(|_| refused())
}

fn entry((id, line): (String, AuditLine)) -> AuditEntry {
    AuditEntry {
        id,
        at: format_ms(line.at),
        actor: line.actor,
        action: line.action,
        run_id: line.run_id,
        schedule_id: line.schedule_id,
        targets: line.targets,
        faults: line.faults,
        outcome: line.outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::ListQuery;

    #[test]
    fn a_cursor_that_is_no_line_id_is_invalid_cursor() {
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

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
const RUNS_SHOWN: u32 = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    status: Option<String>,
    scenario: Option<String>,
    environment: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let status = super::page::filter::<FindingStatus>(query.status)?;
    let limit = page_limit(query.limit)?;
    super::page::not_empty(&[
        ("scenario", &query.scenario),
        ("environment", &query.environment),
    ])?;
    let filter = FindingFilter {
        status,
        scenario: query.scenario,
        environment: query.environment,
        limit,
        cursor: query.cursor,
    };
    let (findings, next) = shared
        .store
        .list_findings(caller.account_id(), &filter)
        .await?;
    let findings: Vec<Finding> = findings.iter().map(|f| f.to_api(None)).collect();
    Ok(page_answer("findings", &findings, next))
}

pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<Finding>, ApiError> {
    let finding = shared
        .store
        .finding(caller.account_id(), &id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("finding {id}")))?;
    let runs = shared.store.finding_runs(&finding.id, RUNS_SHOWN).await?;
    Ok(Json(finding.to_api(Some(runs))))
}

/// Closes a finding; closing a closed one answers it as it is. Each call is audited.
pub async fn close(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
) -> Result<Json<Finding>, ApiError> {
    let finding = shared
        .store
        .close_finding(caller.account_id(), &id, &caller.actor())
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("finding {id}")))?;
    tracing::info!(finding = %finding.id, actor = %caller.actor(), "finding closed");
    Ok(Json(finding.to_api(None)))
}

//! Paged listings (runs, findings, audit lines, scenario names, webhooks, deliveries), all
//! one way: `?limit=` and `?cursor=` in, the page's items and its `next_cursor` out. A
//! cursor is opaque to a client (pass `next_cursor` back as it came); the store's keyset
//! (`store/page.rs`) makes it the key of the page's last row.

use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ApiError;

/// The page size of a list (`?limit=`, default 50, at most 500).
pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    let limit = limit.unwrap_or(50);
    if (1..=500).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request(
            "invalid_query",
            "limit must be between 1 and 500",
        ))
    }
}

/// A listing's page: `?limit=` and `?cursor=`, for the listings with no filter of their own.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before.
    pub cursor: Option<String>,
}

/// A `?cursor=` that no page of this listing gave: an empty one, or one longer than the
/// listing's keys (`longest` bytes).
pub fn text_cursor(cursor: Option<&str>, longest: usize) -> Result<Option<&str>, ApiError> {
    match cursor {
        Some(c) if c.is_empty() || c.len() > longest => Err(not_a_cursor()),
        other => Ok(other),
    }
}

/// The `?cursor=` of a listing keyed by a number (deliveries: an event seq).
pub fn number_cursor(cursor: Option<&str>) -> Result<Option<i64>, ApiError> {
    cursor
        .map(|c| {
            c.parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(not_a_cursor)
        })
        .transpose()
}

fn not_a_cursor() -> ApiError {
    ApiError::bad_request(
        "invalid_query",
        "cursor is not a next_cursor of this listing; leave it out for the first page",
    )
}

/// A filter of a list (`?status=`, `?kind=`) parsed, or the query refused with why.
pub fn filter<T: std::str::FromStr>(value: Option<String>) -> Result<Option<T>, ApiError>
where
    T::Err: std::fmt::Display,
{
    value
        .map(|s| s.parse::<T>())
        .transpose()
        .map_err(|e| ApiError::bad_request("invalid_query", e.to_string()))
}

/// Refuses a filter given empty (`?scenario=`): leaving it out is how to list them all.
pub fn not_empty(filters: &[(&str, &Option<String>)]) -> Result<(), ApiError> {
    for (name, value) in filters {
        if value.as_deref() == Some("") {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("{name} must not be empty; leave it out to list every {name}"),
            ));
        }
    }
    Ok(())
}

/// The answer to a list: the items under `field` and the cursor of the next page (`null`
/// on the last).
pub fn page_answer<T: Serialize>(field: &str, items: &[T], next: Option<String>) -> Json<Value> {
    let mut answer = serde_json::Map::new();
    answer.insert(field.to_string(), serde_json::json!(items));
    answer.insert("next_cursor".to_string(), serde_json::json!(next));
    Json(Value::Object(answer))
}

//! Paged listings (runs, findings): `?limit=` and `?cursor=` in, the page's items and its
//! `next_cursor` out.

use axum::Json;
use serde::Serialize;
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

//! Paged listings (runs, findings, audit lines, scenario names, webhooks, deliveries), all
//! one way: `?limit=` and `?cursor=` in, the page's items and its `next_cursor` out. A
//! cursor is opaque to a client (pass `next_cursor` back as it came); the store's keyset
//! (`store/page.rs`) makes it the key of the page's last row.

use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::query::{filter, id_cursor, not_empty, number_cursor, page_limit, text_cursor};

/// A listing's page: `?limit=` and `?cursor=`, for the listings with no filter of their own.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before (an id: never empty).
    #[param(min_length = 1, max_length = 64)]
    pub cursor: Option<String>,
}

/// The answer to a list: the items under `field` and the cursor of the next page (`null`
/// on the last).
pub fn page_answer<T: Serialize>(field: &str, items: &[T], next: Option<String>) -> Json<Value> {
    let mut answer = serde_json::Map::new();
    answer.insert(field.to_string(), serde_json::json!(items));
    answer.insert("next_cursor".to_string(), serde_json::json!(next));
    Json(Value::Object(answer))
}

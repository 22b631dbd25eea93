//! Paged listings (runs, findings, audit lines, scenario names, webhooks, deliveries), all
//! one way: `?limit=` and `?cursor=` in, the page's items and its `next_cursor` out. A
//! cursor is opaque to a client (pass `next_cursor` back as it came); the store's keyset
//! (`store/page.rs`) pages after the key of the previous page's last row, which
//! [`Cursor`] writes as the listing's cursor and reads back (400 `invalid_cursor` for
//! anything no page gave).

use axum::Json;
use serde::Serialize;
use serde_json::Value;

pub use crate::query::{Cursor, filter, id_cursor, not_empty, page_limit, seq_cursor};

/// The answer to a list: the items under `field` and the cursor of the next page (`null`
/// on the last).
pub fn page_answer<T: Serialize>(field: &str, items: &[T], next: Option<String>) -> Json<Value> {
    let mut answer = serde_json::Map::new();
    answer.insert(field.to_string(), serde_json::json!(items));
    answer.insert("next_cursor".to_string(), serde_json::json!(next));
    Json(Value::Object(answer))
}

//! A listing's typed query and page, below the surfaces: the text of a query (`?limit=`,
//! `?cursor=`, `?status=`...) read into typed values with the same refusals (400
//! `invalid_query`) whichever surface asked, and the typed page a read returns. The REST
//! API turns a [`Page`] into its JSON answer (`api::page::page_answer`); the console
//! renders it.

use crate::error::ApiError;

/// A page of a listing: its items in the listing's order and the cursor of the next page
/// (none on the last), opaque to a client.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

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

/// A `?cursor=` that no page of this listing gave: an empty one, or one longer than the
/// listing's keys (`longest` bytes).
pub fn text_cursor(cursor: Option<&str>, longest: usize) -> Result<Option<&str>, ApiError> {
    match cursor {
        Some(c) if c.is_empty() || c.len() > longest => Err(not_a_cursor()),
        other => Ok(other),
    }
}

/// The `?cursor=` of a listing keyed by a number (deliveries: an event seq): digits only,
/// as the schema says; one past every seq (more digits than an i64 holds) pages from
/// the newest, as the largest seq would.
pub fn number_cursor(cursor: Option<&str>) -> Result<Option<i64>, ApiError> {
    cursor
        .map(|c| {
            if c.is_empty() || !c.bytes().all(|b| b.is_ascii_digit()) {
                return Err(not_a_cursor());
            }
            Ok(c.parse::<i64>().unwrap_or(i64::MAX))
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

#[cfg(test)]
mod cursor_tests {
    use super::*;

    #[test]
    fn a_number_cursor_is_digits_and_past_every_seq_is_the_newest() {
        assert_eq!(number_cursor(None).unwrap(), None);
        assert_eq!(number_cursor(Some("42")).unwrap(), Some(42));
        assert_eq!(
            number_cursor(Some("99999999999999999999")).unwrap(),
            Some(i64::MAX)
        );
        for refused in ["", "-1", "+5", "4x", " 4"] {
            assert_eq!(
                number_cursor(Some(refused)).unwrap_err().code,
                "invalid_query",
                "{refused:?}"
            );
        }
    }
}

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

/// The shape of a cursor of the listings keyed by a row's id (runs, findings, audit
/// lines): a UUID as the store writes ids (`store::new_id`), lowercase and hyphenated.
/// The OpenAPI parameters say the same (`pattern`, 36 characters); a unit test holds them
/// to this.
pub const ID_CURSOR_PATTERN: &str =
    "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/// The `?cursor=` of a listing keyed by a row's id: [`ID_CURSOR_PATTERN`], or 400
/// `invalid_cursor` saying so (never a 500, never silently the first page).
pub fn id_cursor(cursor: Option<String>) -> Result<Option<String>, ApiError> {
    match cursor {
        Some(c) if !is_id(&c) => Err(ApiError::bad_request(
            "invalid_cursor",
            "cursor is the next_cursor of the page before: a lowercase UUID such as \
             0190b5c2-7d4e-7a31-9c2b-5e8f0a1d2c3b; leave it out for the first page",
        )),
        other => Ok(other),
    }
}

/// Whether `text` is an id as the store writes it: 8-4-4-4-12 lowercase hex digits.
fn is_id(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
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
pub(crate) mod cursor_tests {
    use super::*;

    /// A listing keyed by ids (its query read into the cursor it pages from) takes a
    /// store id and refuses anything else as `invalid_cursor`.
    pub(crate) fn takes_only_ids(
        cursor_of: impl Fn(Option<String>) -> Result<Option<String>, ApiError>,
    ) {
        let id = crate::store::new_id();
        assert_eq!(cursor_of(Some(id.clone())).unwrap(), Some(id));
        assert_eq!(cursor_of(None).unwrap(), None);
        for bad in ["", "1", "next", "0190B5C2-7D4E-7A31-9C2B-5E8F0A1D2C3B"] {
            let refused = cursor_of(Some(bad.to_string())).unwrap_err();
            assert_eq!(refused.code, "invalid_cursor", "{bad:?}");
        }
    }

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

    #[test]
    fn an_id_cursor_is_an_id_as_the_store_writes_it() {
        assert_eq!(id_cursor(None).unwrap(), None);
        let id = crate::store::new_id();
        assert_eq!(id_cursor(Some(id.clone())).unwrap(), Some(id.clone()));
        for refused in [
            String::new(),
            "x".repeat(36),
            id.to_uppercase(),
            format!("{id} "),
            id.replace('-', "_"),
            id[..35].to_string(),
            "'; DROP TABLE runs; --".to_string(),
        ] {
            let error = id_cursor(Some(refused.clone())).unwrap_err();
            assert_eq!(error.code, "invalid_cursor", "{refused:?}");
            assert!(error.message.contains("UUID"), "{}", error.message);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(32),
            ..Default::default()
        })]
        /// The check and the documented pattern agree on any text.
        #[test]
        fn the_id_check_is_the_documented_pattern(
            text in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-fA-F-]{34,38}|.{0,40}"
        ) {
            let pattern = regex::Regex::new(ID_CURSOR_PATTERN).unwrap();
            proptest::prop_assert_eq!(is_id(&text), pattern.is_match(&text));
        }
    }
}

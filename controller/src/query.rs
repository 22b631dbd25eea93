//! A listing's typed query and page, below the surfaces: the text of a query (`?limit=`,
//! `?cursor=`, `?status=`...) read into typed values with the same refusals (400
//! `invalid_query`, `invalid_cursor`) whichever surface asked, and the typed page a read returns. The REST
//! API turns a [`Page`] into its JSON answer (`api::page::page_answer`); the console
//! renders it.

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

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

/// How a listing is keyed, and so what its cursor looks like: the key of the previous
/// page's last row (`store/page.rs` pages after it), opaque to a client, which passes
/// `next_cursor` back as it came. A scenario name is written in unpadded base64url, so
/// that a cursor has one short alphabet whatever the names hold. The OpenAPI parameters
/// say the same (`pattern`, lengths; a unit test holds them to this), and anything else
/// is 400 `invalid_cursor` saying what a cursor looks like: never a 500, never silently
/// the first page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cursor {
    /// A row's id as the store writes it (`store::new_id`; runs, findings, audit lines):
    /// a lowercase, hyphenated UUID.
    Id,
    /// A webhook subscription's id: `wh_` and 32 lowercase hex digits.
    Webhook,
    /// An event's number (a webhook's deliveries): digits.
    Seq,
    /// A scenario name (1 to 200 bytes, `MAX_NAME`) in unpadded base64url.
    Name,
}

impl Cursor {
    /// The pattern of its OpenAPI parameter: the check of [`Cursor::read`] before
    /// decoding.
    pub const fn pattern(self) -> &'static str {
        match self {
            Cursor::Id => "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
            Cursor::Webhook => "^wh_[0-9a-f]{32}$",
            Cursor::Seq => "^[0-9]{1,20}$",
            // Whole base64 groups and a last one of 2 or 3: every such text decodes.
            Cursor::Name => "^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$",
        }
    }

    /// Its shortest and longest length, in characters.
    pub const fn lengths(self) -> (usize, usize) {
        match self {
            Cursor::Id => (36, 36),
            Cursor::Webhook => (35, 35),
            Cursor::Seq => (1, 20),
            // The base64 of 1 to MAX_NAME (200) bytes.
            Cursor::Name => (2, 267),
        }
    }

    /// What it looks like, for the refusal's message.
    fn looks_like(self) -> &'static str {
        match self {
            Cursor::Id => "a lowercase UUID such as 0190b5c2-7d4e-7a31-9c2b-5e8f0a1d2c3b",
            Cursor::Webhook => "a subscription's id such as wh_0190b5c27d4e7a319c2b5e8f0a1d2c3b",
            Cursor::Seq => "an event's number, digits only",
            Cursor::Name => "base64url characters (A-Z, a-z, 0-9, - and _)",
        }
    }

    /// Whether `text` has the shape [`Cursor::pattern`] says.
    fn fits(self, text: &str) -> bool {
        let (shortest, longest) = self.lengths();
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        (shortest..=longest).contains(&text.len())
            && match self {
                Cursor::Id => text.bytes().enumerate().all(|(i, b)| match i {
                    8 | 13 | 18 | 23 => b == b'-',
                    _ => hex(b),
                }),
                Cursor::Webhook => text
                    .strip_prefix("wh_")
                    .is_some_and(|digits| digits.bytes().all(hex)),
                Cursor::Seq => text.bytes().all(|b| b.is_ascii_digit()),
                Cursor::Name => {
                    text.len() % 4 != 1
                        && text
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                }
            }
    }

    /// The key a `?cursor=` of this listing names (a scenario name decoded), or 400
    /// `invalid_cursor` for one of another shape. Every text of the shape is a position
    /// in the listing, as any UUID is among runs, whether or not a page gave it: the
    /// schema's pattern is all a client must meet.
    pub fn read(self, cursor: Option<String>) -> Result<Option<String>, ApiError> {
        let Some(cursor) = cursor else {
            return Ok(None);
        };
        let key = if !self.fits(&cursor) {
            None
        } else if self == Cursor::Name {
            // Lenient on a last group's unused bits, on bytes that are no UTF-8 and on
            // NUL, which no name holds and no store compares (each read as U+FFFD): a
            // position all the same, never a refusal the pattern hides.
            NAME_CURSOR
                .decode(&cursor)
                .ok()
                .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', "\u{fffd}"))
        } else {
            Some(cursor)
        };
        key.map(Some).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_cursor",
                format!(
                    "cursor is the next_cursor of the page before: {}; leave it out for the \
                     first page",
                    self.looks_like()
                ),
            )
        })
    }

    /// The cursor of a page whose last row's key is `key`.
    pub fn write(self, key: &str) -> String {
        match self {
            Cursor::Name => NAME_CURSOR.encode(key),
            Cursor::Id | Cursor::Webhook | Cursor::Seq => key.to_string(),
        }
    }
}

/// Unpadded base64url, reading a last group's unused bits whatever they are.
const NAME_CURSOR: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// The shape of a cursor of the listings keyed by a row's id (runs, findings, audit
/// lines): [`Cursor::Id`]'s pattern.
pub const ID_CURSOR_PATTERN: &str = Cursor::Id.pattern();

/// The `?cursor=` of a listing keyed by a row's id: [`Cursor::Id`].
pub fn id_cursor(cursor: Option<String>) -> Result<Option<String>, ApiError> {
    Cursor::Id.read(cursor)
}

/// The `?cursor=` of a listing keyed by an event's number (deliveries): one past every
/// seq (more digits than an i64 holds) pages from the newest, as the largest seq would.
pub fn seq_cursor(cursor: Option<String>) -> Result<Option<i64>, ApiError> {
    Ok(Cursor::Seq
        .read(cursor)?
        .map(|digits| digits.parse::<i64>().unwrap_or(i64::MAX)))
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
    use crate::runs::start::MAX_NAME;

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
        let seq = |c: &str| seq_cursor(Some(c.to_string()));
        assert_eq!(seq_cursor(None).unwrap(), None);
        assert_eq!(seq("42").unwrap(), Some(42));
        assert_eq!(seq("99999999999999999999").unwrap(), Some(i64::MAX));
        for refused in ["", "-1", "+5", "4x", " 4", "999999999999999999999"] {
            assert_eq!(
                seq(refused).unwrap_err().code,
                "invalid_cursor",
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_webhook_cursor_is_a_subscription_id() {
        let id = format!("wh_{}", crate::store::new_id().replace('-', ""));
        assert_eq!(
            Cursor::Webhook.read(Some(id.clone())).unwrap(),
            Some(id.clone())
        );
        for refused in [
            String::new(),
            "wh_".to_string(),
            id.to_uppercase(),
            format!("{id}0"),
            id.replace("wh_", "hw_"),
            "x".repeat(1000),
        ] {
            let error = Cursor::Webhook.read(Some(refused.clone())).unwrap_err();
            assert_eq!(error.code, "invalid_cursor", "{refused:?}");
            assert!(error.message.contains("wh_"), "{}", error.message);
        }
    }

    #[test]
    fn a_name_cursor_is_opaque_and_reads_back_as_its_name() {
        for name in [
            "p-a",
            "a",
            "a name/with ?&= and ünïcode",
            &"n".repeat(MAX_NAME),
        ] {
            let cursor = Cursor::Name.write(name);
            assert!(Cursor::Name.fits(&cursor), "{cursor}");
            assert_eq!(
                Cursor::Name.read(Some(cursor)).unwrap().as_deref(),
                Some(name)
            );
        }
        // Any text of the shape is a position: a last group's unused bits, bytes that
        // are no UTF-8.
        assert_eq!(
            Cursor::Name.read(Some("YR".into())).unwrap().as_deref(),
            Some("a")
        );
        assert_eq!(
            Cursor::Name.read(Some("_w".into())).unwrap().as_deref(),
            Some("\u{fffd}")
        );
        assert_eq!(
            Cursor::Name.read(Some("AGE".into())).unwrap().as_deref(),
            Some("\u{fffd}a")
        );
        for refused in [
            String::new(),
            "a".to_string(),
            "a+b=".to_string(),
            "AAAAA".to_string(),
            NAME_CURSOR.encode("n".repeat(MAX_NAME + 1)),
        ] {
            let error = Cursor::Name.read(Some(refused.clone())).unwrap_err();
            assert_eq!(error.code, "invalid_cursor", "{refused:?}");
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
        /// The check and the documented shape agree on any text, for every listing.
        #[test]
        fn each_cursor_check_is_its_documented_pattern(
            text in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-fA-F-]{34,38}|wh_[0-9a-f]{31,33}|[0-9]{0,22}|[A-Za-z0-9_=+/-]{0,270}|.{0,40}"
        ) {
            for shape in [Cursor::Id, Cursor::Webhook, Cursor::Seq, Cursor::Name] {
                // As the schema says it: the pattern, and the lengths beside it.
                let pattern = regex::Regex::new(shape.pattern()).unwrap();
                let (shortest, longest) = shape.lengths();
                let documented = pattern.is_match(&text)
                    && (shortest..=longest).contains(&text.chars().count());
                proptest::prop_assert_eq!(shape.fits(&text), documented, "{:?}", shape);
            }
        }

        /// Any text of the shape is read as a position, never refused.
        #[test]
        fn every_name_cursor_of_the_shape_is_read(text in "(?:[A-Za-z0-9_-]{4}){0,66}[A-Za-z0-9_-]{2,3}") {
            proptest::prop_assert!(Cursor::Name.read(Some(text)).is_ok());
        }

        /// Any name a scenario may have is one cursor, which reads back as the name.
        #[test]
        fn every_name_is_a_cursor_that_reads_back(name in ".{1,60}|[a-z]{190,200}") {
            // No name holds NUL: the API refuses it in any text (`invalid_text`).
            proptest::prop_assume!(name.len() <= MAX_NAME && !name.contains('\0'));
            let cursor = Cursor::Name.write(&name);
            proptest::prop_assert_eq!(Cursor::Name.read(Some(cursor)).unwrap(), Some(name));
        }
    }
}

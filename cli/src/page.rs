//! Paged listings (runs, findings, audit lines, scenarios, webhooks and their deliveries):
//! the one helper every listing pages with. One page fetched with the filters and the
//! cursor, and the `next:` line that asks for the following one; the server pages every
//! listing alike (`?limit=`, `?cursor=`, `next_cursor`).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Ctx;
use crate::client::{Api, query};
use crate::error::{Failure, Result};
use crate::output::{emit, emit_json};

/// A listing's filters as query pairs (`--flag value` on the command line); `None` is left
/// out.
pub type Filters<'a> = [(&'a str, Option<String>)];

/// What a listing is: where its pages are, under which field of the answer their items
/// are, what it says when a page is empty, and the command that lists it (a listing of one
/// subscription's deliveries names the subscription in its path and its command).
pub struct Listing<'a> {
    pub path: &'a str,
    pub field: &'a str,
    pub none: &'a str,
    pub command: &'a str,
}

/// One page: its items and the cursor of the next page.
struct Page<T> {
    items: Vec<T>,
    next_cursor: Option<String>,
}

/// Gets the page of `path` after `cursor`: the raw answer (what `--json` prints, with
/// fields newer than this CLI) and its items, found under `field`.
async fn fetch<T: DeserializeOwned>(
    api: &Api,
    path: &str,
    field: &str,
    filters: &Filters<'_>,
    cursor: Option<String>,
) -> Result<(Value, Page<T>)> {
    let mut pairs = filters.to_vec();
    pairs.push(("cursor", cursor));
    let raw = api.get(&format!("{path}{}", query(&pairs))).await?;
    let page = parse(&raw, field)
        .map_err(|e| Failure::protocol(format!("the answer is not a page of {field}: {e}")))?;
    Ok((raw, page))
}

/// A `list` command: the page after `cursor` as the answer's JSON with `--json`, else as
/// `render` writes it (its items, the next cursor and the filters for the `next:` line).
pub async fn list<T: DeserializeOwned>(
    ctx: &Ctx,
    listing: &Listing<'_>,
    filters: &Filters<'_>,
    cursor: Option<String>,
    render: impl Fn(&[T], Option<&str>, &Filters<'_>) -> String,
) -> Result<u8> {
    let (raw, page) = fetch::<T>(&ctx.api, listing.path, listing.field, filters, cursor).await?;
    if ctx.json {
        emit_json(&raw)?;
    } else {
        emit(&render(&page.items, page.next_cursor.as_deref(), filters))?;
    }
    Ok(0)
}

/// A page as text: the listing's `none` when it is empty, else its `table`; then the
/// `next:` line.
pub fn render<T>(
    listing: &Listing<'_>,
    items: &[T],
    table: impl FnOnce(&[T]) -> String,
    next: Option<&str>,
    filters: &Filters<'_>,
) -> String {
    let mut out = if items.is_empty() {
        listing.none.to_string()
    } else {
        table(items)
    };
    push_next(&mut out, listing.command, next, filters);
    out
}

fn parse<T: DeserializeOwned>(raw: &Value, field: &str) -> serde_json::Result<Page<T>> {
    let items = match raw.get(field) {
        Some(items) => Vec::<T>::deserialize(items)?,
        None => {
            return Err(serde::de::Error::custom(format!("missing field `{field}`")));
        }
    };
    let next_cursor = match raw.get("next_cursor") {
        Some(next) => Option::<String>::deserialize(next)?,
        None => None,
    };
    Ok(Page { items, next_cursor })
}

/// Appends the command that lists the next page (`next: <command> --cursor C` and the
/// same filters again: a cursor is a position within this listing), if there is one.
fn push_next(out: &mut String, command: &str, next: Option<&str>, filters: &Filters<'_>) {
    let Some(cursor) = next.filter(|c| !c.is_empty()) else {
        return;
    };
    let mut line = format!("next: {command} --cursor {}", shell_word(cursor));
    for (flag, value) in filters {
        if let Some(value) = value {
            line.push_str(&format!(" --{flag} {}", shell_word(value)));
        }
    }
    out.push_str(&line);
    out.push('\n');
}

/// Quotes a word for a POSIX shell when it needs it, so the `next:` line can be pasted.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/=+,@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("eyJhIjoxfQ=="), "eyJhIjoxfQ==");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_page_is_its_items_and_the_next_cursor() {
        let page: Page<u32> = parse(
            &serde_json::json!({"runs": [1, 2], "next_cursor": "c"}),
            "runs",
        )
        .unwrap();
        assert_eq!(
            (page.items, page.next_cursor.as_deref()),
            (vec![1, 2], Some("c"))
        );
        let last: Page<u32> = parse(
            &serde_json::json!({"runs": [], "next_cursor": null}),
            "runs",
        )
        .unwrap();
        assert_eq!(last.next_cursor, None);
        assert!(parse::<u32>(&serde_json::json!({"findings": []}), "runs").is_err());
    }
}

//! The keyset pages of the listings that used to page their own way: scenario names (a
//! cursor by name), webhooks and a webhook's deliveries (where a full page used to mean
//! "more"). A page boundary gives every row once, and a last page that is exactly full
//! has no next cursor.

use iohr_domain::RunStatus;
use serde_json::json;

use crate::store::tests::{both, failing_checks, run_to_end, seed};
use crate::store::{EVENT_TYPES, NewWebhook, Store};

/// A listing of the store that used to page its own way.
#[derive(Clone, Copy)]
enum Listing<'a> {
    /// An account's scenario names.
    Names(&'a str),
    /// An account's webhooks.
    Hooks(&'a str),
    /// A webhook's deliveries (keys: event seqs).
    Deliveries(&'a str),
}

/// One page of `listing` after `cursor`: its keys and the next cursor.
async fn page(
    store: &Store,
    listing: Listing<'_>,
    cursor: Option<&str>,
    limit: u32,
) -> (Vec<String>, Option<String>) {
    match listing {
        Listing::Names(account) => {
            let (page, next) = store
                .list_scenarios(account, cursor, limit)
                .await
                .expect("page");
            (page.into_iter().map(|n| n.id).collect(), next)
        }
        Listing::Hooks(account) => {
            let (page, next) = store
                .webhooks_page(account, cursor, limit)
                .await
                .expect("page");
            (page.into_iter().map(|h| h.id).collect(), next)
        }
        Listing::Deliveries(hook) => {
            let cursor = cursor.map(|c| c.parse::<i64>().expect("a seq"));
            let (page, next) = store
                .deliveries_page(hook, cursor, limit)
                .await
                .expect("page");
            (
                page.into_iter().map(|d| d.event_seq.to_string()).collect(),
                next,
            )
        }
    }
}

/// Follows the cursors of `listing` from its first page; every page's length and the
/// keys in order.
async fn walk(store: &Store, listing: Listing<'_>, limit: usize) -> (Vec<usize>, Vec<String>) {
    let (mut sizes, mut keys, mut cursor) = (Vec::new(), Vec::new(), None::<String>);
    loop {
        let (items, next) = page(store, listing, cursor.as_deref(), limit as u32).await;
        sizes.push(items.len());
        keys.extend(items);
        match next {
            Some(next) => cursor = Some(next),
            None => return (sizes, keys),
        }
    }
}

/// The pages' lengths of `n` rows at `limit` a page: an exactly full last page ends the
/// listing (no empty page after it).
fn sizes(n: usize, limit: usize) -> Vec<usize> {
    if n == 0 {
        return vec![0];
    }
    let mut sizes = vec![limit; n / limit];
    if !n.is_multiple_of(limit) {
        sizes.push(n % limit);
    }
    sizes
}

#[tokio::test]
async fn scenario_names_page_by_name_and_an_exactly_full_last_page_ends() {
    for store in both().await {
        let (account, _) = seed(&store).await;
        for name in ["c", "a", "b", "a"] {
            let spec = json!({"checks": [{"path": format!("/{name}")}]});
            store
                .store_scenario(&account.id, name, "checks", &spec)
                .await
                .expect("store");
        }
        let names = Listing::Names(&account.id);
        // `seed` may store a scenario of its own: count what the listing has.
        let (_, all) = walk(&store, names, 500).await;
        assert!(all.len() >= 3, "{all:?}");
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(all, sorted, "by name, each once");
        for limit in 1..=all.len() + 1 {
            assert_eq!(
                walk(&store, names, limit).await,
                (sizes(all.len(), limit), all.clone()),
                "limit {limit}"
            );
        }
    }
}

fn hook() -> NewWebhook {
    NewWebhook {
        url: "http://127.0.0.1:9/hook".into(),
        events: EVENT_TYPES.iter().map(|e| e.to_string()).collect(),
        format: "standard".into(),
        secret: "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into(),
    }
}

#[tokio::test]
async fn webhooks_and_deliveries_page_by_key_with_no_empty_last_page() {
    for store in both().await {
        let (account, template) = seed(&store).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            let made = store
                .create_webhook(&account.id, &hook(), "person:ada")
                .await
                .expect("create");
            ids.push(made.id);
        }
        ids.sort();
        let hooks = Listing::Hooks(&account.id);
        for limit in 1..=4 {
            assert_eq!(
                walk(&store, hooks, limit).await,
                (sizes(3, limit), ids.clone()),
                "limit {limit}"
            );
        }

        // A failed run gives one run event and findings: each subscription gets them all.
        run_to_end(&store, &template, RunStatus::Failed, failing_checks()).await;
        store.fan_out_events(100).await.expect("fan out");
        let deliveries = Listing::Deliveries(&ids[0]);
        let (_, seqs) = walk(&store, deliveries, 500).await;
        assert!(seqs.len() >= 2, "{seqs:?}");
        let mut newest_first = seqs.clone();
        newest_first.sort_by_key(|s| std::cmp::Reverse(s.parse::<i64>().expect("a seq")));
        assert_eq!(seqs, newest_first, "newest event first");
        for limit in 1..=seqs.len() + 1 {
            assert_eq!(
                walk(&store, deliveries, limit).await,
                (sizes(seqs.len(), limit), seqs.clone()),
                "limit {limit}"
            );
        }
    }
}

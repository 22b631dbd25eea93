//! `/webhooks`: an account's webhook subscriptions and their delivery logs. Creating,
//! deleting and redelivering need `reliability:run` (they change what the account sends
//! out, as starting a run does); reading needs `reliability:read`. The secret is in the
//! creation's answer only. Another account's subscription is 404, as everywhere.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::outbound::{allowed_target, checked_url};
use super::page::{Cursor, page_answer, page_limit, seq_cursor};
use crate::Shared;
use std::sync::LazyLock;

use regex::Regex;

use crate::outbox::signing;
use crate::store::{EVENT_TYPES, MAX_WEBHOOKS_PER_ACCOUNT, NewWebhook, StoreError, WebhookRow};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Where deliveries are POSTed: http:// or https://, a host name, an IPv4 address or a
    /// bracketed IPv6 address, an optional port and path and query, no credentials or
    /// fragment ([`URL_PATTERN`]).
    #[schema(
        max_length = 2048,
        pattern = r"^https?://([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\[(([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,7}:|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}|:((:[0-9A-Fa-f]{1,4}){1,7}|:))\])(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/[A-Za-z0-9._~/-]*)?(\?[A-Za-z0-9._~/=&-]*)?$"
    )]
    url: String,
    /// `reliability.run.finished` and/or `reliability.finding.created`.
    #[schema(value_type = Vec<super::openapi::WebhookEvent>, min_items = 1)]
    events: Vec<String>,
    /// `standard` (the default: the event as JSON) or `slack` (`{"text": ...}`).
    #[schema(value_type = Option<super::openapi::WebhookFormat>)]
    format: Option<String>,
}

/// A subscription URL's shape, as the schema's `url` pattern documents it (a test holds the
/// two equal): the server refuses what a client generated from the document would, and
/// takes what it would send.
pub const URL_PATTERN: &str = r"^https?://([A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*|\[(([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,7}:|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}|:((:[0-9A-Fa-f]{1,4}){1,7}|:))\])(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/[A-Za-z0-9._~/-]*)?(\?[A-Za-z0-9._~/=&-]*)?$";

/// [`URL_PATTERN`] compiled once; `None` only if it did not compile, which a test rules out.
static URL_SHAPE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(URL_PATTERN).ok());

fn validate(body: CreateBody) -> Result<NewWebhook, ApiError> {
    checked_url("url", &body.url)?;
    if !URL_SHAPE
        .as_ref()
        .is_some_and(|shape| shape.is_match(&body.url))
    {
        return Err(ApiError::bad_request(
            "invalid_url",
            "the url must be http(s)://HOST[:PORT][/PATH][?QUERY], the host a name, an IPv4 \
             address or an IPv6 address in brackets, the path and query of letters, digits and -._~/ (and =& in the query)",
        ));
    }
    let mut events = body.events;
    events.sort();
    events.dedup();
    if events.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_events",
            format!("name at least one event type of {}", EVENT_TYPES.join(", ")),
        ));
    }
    if let Some(unknown) = events.iter().find(|e| !EVENT_TYPES.contains(&e.as_str())) {
        return Err(ApiError::bad_request(
            "invalid_events",
            format!(
                "{unknown:?} is not an event type; the types are {}",
                EVENT_TYPES.join(", ")
            ),
        ));
    }
    let format = body.format.unwrap_or_else(|| "standard".to_string());
    if !super::openapi::WEBHOOK_FORMATS.contains(&format.as_str()) {
        return Err(ApiError::bad_request(
            "invalid_format",
            "format is standard (the event as JSON) or slack (an incoming webhook's {\"text\"})",
        ));
    }
    Ok(NewWebhook {
        url: body.url,
        events,
        format,
        secret: signing::new_secret(),
    })
}

/// A webhook subscription (`secret` only in the answer that created it).
#[allow(dead_code)] // a schema: the answer is written by `WebhookRow::to_api`
#[derive(utoipa::ToSchema)]
pub struct Webhook {
    id: String,
    url: String,
    events: Vec<String>,
    /// `standard` or `slack`.
    format: String,
    /// `active` or `disabled`.
    state: String,
    disabled_reason: Option<String>,
    created_by: String,
    created_at: String,
    /// `whsec_...`: shown once, in the creation's answer.
    secret: Option<String>,
}

/// A page of the account's webhook subscriptions, in the order of their ids.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct WebhookList {
    webhooks: Vec<Webhook>,
    /// The `cursor` of the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// One delivery of one event to one subscription: never a body.
#[allow(dead_code)] // a schema: the answer is written by `DeliveryRow::to_api`
#[derive(utoipa::ToSchema)]
pub struct Delivery {
    event_id: String,
    event_seq: i64,
    event_type: String,
    /// `pending`, `delivered` or `failed`.
    status: String,
    attempts: i64,
    last_status_code: Option<i64>,
    /// Why the last attempt failed, as a class: `denied` (the target policy refused the
    /// address; nothing was sent), `connect_failed`, `timeout`, `tls`, `http_status` (see
    /// `last_status_code`) or `internal`. Never the error's text.
    last_error: Option<String>,
    next_attempt_at: Option<String>,
    created_at: String,
    last_attempt_at: Option<String>,
    delivered_at: Option<String>,
}

/// A page of a subscription's deliveries, newest event first.
#[allow(dead_code)] // a schema
#[derive(utoipa::ToSchema)]
pub struct DeliveryPage {
    deliveries: Vec<Delivery>,
    /// The `cursor` of the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// Subscribe a URL to the account's events; the answer holds the signing `secret`, shown
/// this once.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/webhooks",
    tag = "webhooks",
    operation_id = "create_webhook",
    security(("bearer" = [])),
    request_body = CreateBody,
    responses(
        (status = 201, description = "The subscription with its secret", body = Webhook),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_url`, `invalid_events`, `invalid_format`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`too_many_webhooks`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`target_not_allowed`: the url is a loopback, link-local, private, unique-local, unspecified or metadata address or name, or the controller's own (docs/security.md)", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn create(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    body: Result<JsonBody<CreateBody>, ApiError>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let JsonBody(body) = body?;
    let hook = validate(body)?;
    allowed_target(
        &shared,
        caller.account_id(),
        &checked_url("url", &hook.url)?,
    )
    .await?;
    let stored = match shared
        .store
        .create_webhook(caller.account_id(), &hook, &caller.actor())
        .await
    {
        Err(StoreError::Conflict(message)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "too_many_webhooks",
                format!("{message}; delete one first (at most {MAX_WEBHOOKS_PER_ACCOUNT})"),
            ));
        }
        other => other?,
    };
    tracing::info!(webhook = %stored.id, actor = %caller.actor(), "webhook created");
    let mut answer = stored.to_api();
    answer["secret"] = serde_json::json!(stored.secret);
    Ok((StatusCode::CREATED, Json(answer)))
}

/// The account's webhook subscriptions (never a secret).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/webhooks",
    tag = "webhooks",
    operation_id = "list_webhooks",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "The subscriptions", body = WebhookList),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn list(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit)?;
    let cursor = Cursor::Webhook.read(query.cursor)?;
    let (hooks, next) = shared
        .store
        .webhooks_page(caller.account_id(), cursor.as_deref(), limit)
        .await?;
    let hooks: Vec<_> = hooks.iter().map(WebhookRow::to_api).collect();
    Ok(page_answer("webhooks", &hooks, next))
}

async fn owned(shared: &Shared, account_id: &str, id: &str) -> Result<WebhookRow, ApiError> {
    shared
        .store
        .webhook(account_id, id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("webhook {id}")))
}

/// One webhook subscription (never its secret).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/webhooks/{id}",
    tag = "webhooks",
    operation_id = "get_webhook",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The subscription's id")),
    responses(
        (status = 200, description = "The subscription", body = Webhook),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such subscription in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(
        owned(&shared, caller.account_id(), &id).await?.to_api(),
    ))
}

/// Delete a subscription; its delivery log goes with it.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/webhooks/{id}",
    tag = "webhooks",
    operation_id = "delete_webhook",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The subscription's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such subscription in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !shared
        .store
        .delete_webhook(caller.account_id(), &id, &caller.actor())
        .await?
    {
        return Err(ApiError::not_found(&format!("webhook {id}")));
    }
    tracing::info!(webhook = %id, actor = %caller.actor(), "webhook deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// A page of subscriptions: `?limit=` and `?cursor=`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next_cursor` of the page before (the id of its last subscription).
    #[param(min_length = 35, max_length = 35, pattern = "^wh_[0-9a-f]{32}$")]
    cursor: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// The page size (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
    /// The `next_cursor` of the page before: deliveries of older events (an event's
    /// number).
    #[param(min_length = 1, max_length = 20, pattern = "^[0-9]{1,20}$")]
    cursor: Option<String>,
}

/// A subscription's delivery log, newest event first, a page at a time.
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/webhooks/{id}/deliveries",
    tag = "webhooks",
    operation_id = "list_deliveries",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The subscription's id"), DeliveriesQuery),
    responses(
        (status = 200, description = "A page of deliveries", body = DeliveryPage),
        (status = 400, description = "`invalid_query`, `invalid_cursor`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such subscription in this account", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn deliveries(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
    Path(id): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit)?;
    let cursor = seq_cursor(query.cursor)?;
    let hook = owned(&shared, caller.account_id(), &id).await?;
    let (rows, next) = shared
        .store
        .deliveries_page(&hook.id, cursor, limit)
        .await?;
    let rows: Vec<_> = rows.iter().map(|d| d.to_api()).collect();
    Ok(page_answer("deliveries", &rows, next))
}

/// Deliver an event again: the delivery is pending again, its retry schedule started
/// over, with the same `webhook-id`.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    post,
    path = "/v1/reliability/webhooks/{id}/deliveries/{event}/redeliver",
    tag = "webhooks",
    operation_id = "redeliver",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The subscription's id"),
        ("event" = String, Path, description = "The event's id (`evt_...`)"),
    ),
    responses(
        (status = 202, description = "The delivery, pending again", body = Delivery),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: no such subscription or delivery", body = super::openapi::ApiErrorBody),
        (status = 409, description = "`webhook_disabled`", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn redeliver(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    Path((id, event_id)): Path<(String, String)>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let hook = owned(&shared, caller.account_id(), &id).await?;
    if hook.state != "active" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "webhook_disabled",
            format!(
                "webhook {id} is disabled ({}); create a new subscription",
                hook.disabled_reason.as_deref().unwrap_or("no reason kept")
            ),
        ));
    }
    let delivery = shared
        .store
        .redeliver(&hook.id, &event_id)
        .await?
        .ok_or_else(|| ApiError::not_found(&format!("delivery of event {event_id}")))?;
    tracing::info!(webhook = %id, event = %event_id, actor = %caller.actor(), "redelivery asked");
    Ok((StatusCode::ACCEPTED, Json(delivery.to_api())))
}

#[cfg(test)]
mod tests {
    use super::super::outbound::{MAX_URL_LEN, url_refusal};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn urls() {
        for good in [
            "http://127.0.0.1:9000/hook",
            "https://hooks.slack.com/services/T0/B0/x",
            "https://example.com/a?b=c",
        ] {
            assert_eq!(url_refusal(good), None, "{good}");
        }
        for bad in [
            "ftp://x/",
            "http://user:pw@example.com/",
            "http://u@example.com/",
            "example.com/hook",
            "http:///x",
            "http://x/a b",
            "http://x/#frag",
            "",
        ] {
            assert!(url_refusal(bad).is_some(), "{bad}");
        }
        assert!(url_refusal(&format!("http://x/{}", "a".repeat(MAX_URL_LEN))).is_some());
    }

    /// The schema documents the very shape the server holds.
    #[test]
    fn the_schema_pattern_is_the_servers() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_value(CreateBody::schema()).unwrap();
        assert_eq!(schema["properties"]["url"]["pattern"], URL_PATTERN);
        assert!(URL_SHAPE.is_some(), "URL_PATTERN compiles");
        let shape = URL_SHAPE.as_ref().unwrap();
        for good in [
            "http://127.0.0.1:65535/hook",
            "https://hooks.slack.com/services/T0/B0/x",
            "https://example.com/a?b=c&d=e",
            "http://x:0",
            "http://[::1]:8080/hook",
            "http://[2001:db8::1]/",
            "http://[fe80::1]/",
            "http://[::]/",
            "http://[1:2:3:4:5:6:7:8]/",
        ] {
            assert!(shape.is_match(good), "{good}");
        }
        for bad in [
            "http://x/*",
            "http://x:65536/",
            "http://x:05*",
            "http://[::1/",
            "http://[:::1]/",
            "http://[1:2]/",
            "http://[::ffff:127.0.0.1]/",
            "http://x/a%20b",
        ] {
            assert!(!shape.is_match(bad), "{bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(16), ..ProptestConfig::default() })]

        /// Any text is judged without a panic, and nothing accepted carries credentials
        /// or another scheme.
        #[test]
        fn any_text_is_judged(text in "\\PC{0,80}") {
            if url_refusal(&text).is_none() {
                prop_assert!(text.starts_with("http://") || text.starts_with("https://"));
                let uri: hyper::Uri = text.parse().unwrap();
                prop_assert!(!uri.authority().unwrap().as_str().contains('@'));
            }
        }

        /// What the schema allows, the server takes (schemathesis' positive data
        /// acceptance, for every shape of the pattern): no 400 for a URL a generated
        /// client sends.
        #[test]
        fn every_url_the_pattern_allows_is_taken(url in URL_PATTERN.trim_start_matches('^').trim_end_matches('$')) {
            let body = CreateBody { url: url.clone(), events: vec![EVENT_TYPES[0].to_string()], format: None };
            prop_assert!(validate(body).is_ok(), "{}", url);
            let uri: hyper::Uri = url.parse().unwrap();
            let host = uri.host().unwrap();
            if let Some(literal) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                prop_assert!(literal.parse::<std::net::Ipv6Addr>().is_ok(), "{}", url);
            }
        }

        #[test]
        fn accepted_urls_keep_their_host(host in "[a-z]{1,12}(\\.[a-z]{2,5})?", port in 1u16.., path in "(/[a-z0-9]{0,8}){0,3}") {
            let url = format!("https://{host}:{port}{path}");
            prop_assert_eq!(url_refusal(&url), None);
        }
    }
}

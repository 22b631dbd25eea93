//! `/otlp`: the account's OpenTelemetry export (`crate::otlp`), one per account: the
//! OTLP/HTTP endpoint its runs' per-second figures are sent to, the headers sent with them
//! (write-only: sealed at rest, never shown again, only their names), and the counts of
//! what was exported and dropped. Setting and deleting need `reliability:run` (they change
//! what the account sends out, as webhooks do); reading needs `reliability:read`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use super::auth::{Caller, ReadScope, RunScope};
use super::error::{ApiError, JsonBody};
use super::outbound::{allowed_target, checked_url};
use crate::Shared;

/// Headers one export may send.
pub const MAX_HEADERS: usize = 16;
/// The longest header value, in bytes.
pub const MAX_HEADER_VALUE: usize = 4096;
/// Headers the exporter writes itself (or that HTTP/1.1 manages): not the account's.
const RESERVED_HEADERS: [&str; 7] = [
    "host",
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "user-agent",
];

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpExportBody {
    /// The collector's OTLP/HTTP base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`): metrics are
    /// POSTed to `ENDPOINT/v1/metrics` as protobuf. http:// or https://, no credentials or
    /// fragment; the webhook target policy applies.
    #[schema(min_length = 1, max_length = 2048)]
    endpoint: String,
    /// Headers sent with every export (an API key, a tenant id): at most 16, each value
    /// at most 4096 bytes. Sealed at rest and never shown again; a PUT replaces them all.
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The account's export: never a header's value.
#[allow(dead_code)] // a schema: the answer is written by `OtlpExportRow::to_api`
#[derive(utoipa::ToSchema)]
pub struct OtlpExport {
    endpoint: String,
    /// The headers' names, lowercase.
    headers: Vec<String>,
    created_by: String,
    created_at: String,
    updated_by: String,
    updated_at: String,
    /// Load frames (a run's second from one agent) the collector accepted.
    exported_frames: i64,
    /// Load frames whose export was dropped: a buffer was full (a slow collector), or the
    /// send failed or was refused. The run and its frames are never affected.
    dropped_frames: i64,
    /// The class of the last failure: `buffer_full` is not one (see `dropped_frames`);
    /// `denied` (the target policy refused the address), `connect_failed`, `timeout`,
    /// `tls`, `http_status` or `internal`. Never the error's text.
    last_error: Option<String>,
    last_error_at: Option<String>,
    last_exported_at: Option<String>,
}

fn checked_headers(
    headers: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let refuse = |why: String| ApiError::bad_request("invalid_header", why);
    if headers.len() > MAX_HEADERS {
        return Err(refuse(format!("at most {MAX_HEADERS} headers")));
    }
    let mut checked = BTreeMap::new();
    for (name, value) in headers {
        let Ok(parsed) = hyper::header::HeaderName::from_bytes(name.as_bytes()) else {
            return Err(refuse(format!("{name:?} is not a header name")));
        };
        let lower = parsed.as_str().to_string();
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            return Err(refuse(format!(
                "{lower} is written by the exporter, not by the account"
            )));
        }
        if value.is_empty() || value.len() > MAX_HEADER_VALUE {
            return Err(refuse(format!(
                "the value of {lower} is empty or longer than {MAX_HEADER_VALUE} bytes"
            )));
        }
        if value.chars().any(|c| c.is_control() && c != '\t')
            || hyper::header::HeaderValue::from_str(&value).is_err()
        {
            return Err(refuse(format!(
                "the value of {lower} is not a header value (control or non-visible characters)"
            )));
        }
        if checked.insert(lower.clone(), value).is_some() {
            return Err(refuse(format!("{lower} is named twice")));
        }
    }
    Ok(checked)
}

/// Set the account's OpenTelemetry export, or replace it (the headers with it; the
/// counts are kept).
///
/// Scope: `reliability:run`.
#[utoipa::path(
    put,
    path = "/v1/reliability/otlp",
    tag = "otlp",
    operation_id = "put_otlp_export",
    security(("bearer" = [])),
    request_body = OtlpExportBody,
    responses(
        (status = 200, description = "Replaced: the export, never a header's value", body = OtlpExport),
        (status = 201, description = "Set: the export, never a header's value", body = OtlpExport),
        (status = 400, description = "`malformed_json`, `invalid_body`, `invalid_url`, `invalid_header`", body = super::openapi::ApiErrorBody),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 422, description = "`target_not_allowed`: the endpoint is a loopback, link-local, private, unique-local, unspecified or metadata address or name, or the controller's own (docs/security.md)", body = super::openapi::ApiErrorBody),
        (status = 503, description = "`secrets_unavailable`: headers were given and the controller has no secrets key (they are never stored in clear); `store_unavailable`, `busy`, `shutting_down`: retry later", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn put(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
    body: Result<JsonBody<OtlpExportBody>, ApiError>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let JsonBody(body) = body?;
    let uri = checked_url("endpoint", &body.endpoint)?;
    let headers = checked_headers(body.headers)?;
    allowed_target(&shared, caller.account_id(), &uri).await?;
    if !headers.is_empty() && !shared.store.seals_secrets() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "secrets_unavailable",
            "the controller has no secrets key to seal the headers with, and never stores one in clear; its operator runs `iohr-controller init` (docs/security.md)",
        ));
    }
    let (created, row) = shared
        .store
        .put_otlp_export(
            caller.account_id(),
            &body.endpoint,
            &headers,
            &caller.actor(),
        )
        .await?;
    crate::otlp::export_changed(true);
    tracing::info!(endpoint = %row.endpoint, actor = %caller.actor(), created, "OpenTelemetry export set");
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(row.to_api())))
}

/// The account's OpenTelemetry export with its counts of exported and dropped frames
/// (never a header's value).
///
/// Scope: `reliability:read`.
#[utoipa::path(
    get,
    path = "/v1/reliability/otlp",
    tag = "otlp",
    operation_id = "get_otlp_export",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The export", body = OtlpExport),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:read`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: the account exports nothing", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn get(
    State(shared): State<Shared>,
    caller: Caller<ReadScope>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let row = shared
        .store
        .otlp_export(caller.account_id())
        .await?
        .ok_or_else(|| ApiError::not_found("OpenTelemetry export"))?;
    Ok(Json(row.to_api()))
}

/// Stop exporting: the account's export, its headers and counts are deleted.
///
/// Scope: `reliability:run`.
#[utoipa::path(
    delete,
    path = "/v1/reliability/otlp",
    tag = "otlp",
    operation_id = "delete_otlp_export",
    security(("bearer" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "`insufficient_scope`: the token lacks `reliability:run`", body = super::openapi::ApiErrorBody),
        (status = 404, description = "`not_found`: the account exports nothing", body = super::openapi::ApiErrorBody),
    )
)]
pub async fn delete(
    State(shared): State<Shared>,
    caller: Caller<RunScope>,
) -> Result<StatusCode, ApiError> {
    if !shared
        .store
        .delete_otlp_export(caller.account_id(), &caller.actor())
        .await?
    {
        return Err(ApiError::not_found("OpenTelemetry export"));
    }
    crate::otlp::export_changed(false);
    tracing::info!(actor = %caller.actor(), "OpenTelemetry export deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn headers_are_named_lowercase_and_bad_ones_refused() {
        let ok = checked_headers(headers(&[("X-Api-Key", "abc"), ("x-scope", "t 1")])).unwrap();
        assert_eq!(ok, headers(&[("x-api-key", "abc"), ("x-scope", "t 1")]));
        for bad in [
            headers(&[("bad name", "v")]),
            headers(&[("host", "v")]),
            headers(&[("Content-Type", "v")]),
            headers(&[("x-a", "")]),
            headers(&[("x-a", "line\nbreak")]),
            headers(&[("x-a", "v"), ("X-A", "w")]),
            (0..=MAX_HEADERS)
                .map(|i| (format!("x-{i}"), "v".to_string()))
                .collect(),
        ] {
            let refused = checked_headers(bad.clone());
            assert!(refused.is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(35),
            ..Default::default()
        })]
        #[test]
        fn any_headers_are_judged_without_panic(
            pairs in proptest::collection::btree_map("\\PC{0,12}", "\\PC{0,20}", 0..20)
        ) {
            if let Ok(checked) = checked_headers(pairs) {
                for (name, value) in checked {
                    proptest::prop_assert!(hyper::header::HeaderName::from_bytes(name.as_bytes()).is_ok());
                    proptest::prop_assert!(hyper::header::HeaderValue::from_str(&value).is_ok());
                }
            }
        }
    }
}

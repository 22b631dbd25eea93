//! URLs the controller sends to on an account's behalf (webhook subscriptions, the
//! OpenTelemetry export, a forge's API): their shape (400 `invalid_url`) and the egress
//! policy's verdict on them (422 `target_not_allowed`, `outbox/egress.rs`), one check for
//! every surface that takes such a URL.

use axum::http::StatusCode;

use super::error::ApiError;
use crate::Shared;

/// The longest outbound URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Why an outbound URL is refused, if it is: http or https, a host, no credentials, no
/// fragment, at most [`MAX_URL_LEN`] bytes.
pub fn url_refusal(url: &str) -> Option<String> {
    if url.len() > MAX_URL_LEN {
        return Some(format!("the url is longer than {MAX_URL_LEN} bytes"));
    }
    if url.contains('#') || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("the url must not hold a fragment, spaces or control characters".into());
    }
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return Some("the url is not a URL".into());
    };
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Some("the url must be http:// or https://".into());
    }
    let Some(authority) = uri.authority() else {
        return Some("the url has no host".into());
    };
    if authority.as_str().contains('@') {
        return Some("the url must not carry credentials (user:password@)".into());
    }
    if authority.host().is_empty() {
        return Some("the url has no host".into());
    }
    None
}

/// The body's `field` parsed, or 400 `invalid_url` saying why (in the field's name).
pub fn checked_url(field: &str, url: &str) -> Result<hyper::Uri, ApiError> {
    let refused = |why: String| {
        ApiError::bad_request(
            "invalid_url",
            why.replacen("the url", &format!("the {field}"), 1),
        )
    };
    if let Some(why) = url_refusal(url) {
        return Err(refused(why));
    }
    url.parse()
        .map_err(|_| refused("the url is not a URL".to_string()))
}

/// 422 `target_not_allowed` where the account's egress policy refuses `uri`.
pub async fn allowed_target(
    shared: &Shared,
    account_id: &str,
    uri: &hyper::Uri,
) -> Result<(), ApiError> {
    let egress = shared.account_egress(account_id).await?;
    egress.check_url(uri).map_err(|refusal| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "target_not_allowed",
            format!(
                "{refusal}; the controller's operator may allow it (serve --allow-webhook-target, or for this account: account allow-target)"
            ),
        )
    })
}

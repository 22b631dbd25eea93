//! Deliveries of any other sender, signed per Standard Webhooks (`webhook-id`,
//! `webhook-timestamp` within 5 minutes, `webhook-signature`), verified by the spec
//! authors' crate as the outbox signs (`outbox/signing.rs`). The body names the change:
//! `{"repository": "owner/repo", "branch": "feature", "commit": "40 hex",
//! "pull_request": 12, "base_branch": "main", "base_commit": "40 hex"}` (the last three
//! optional).

use axum::http::HeaderMap;
use serde_json::Value;

use super::change::{Parsed, Raw};

/// Whether the Standard Webhooks headers sign `body` with `secret`, recently.
pub fn verified(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    crate::outbox::signing::verify(secret, headers, body)
}

/// The delivery's id (`webhook-id`).
pub fn delivery(headers: &HeaderMap) -> Option<&str> {
    headers.get("webhook-id").and_then(|v| v.to_str().ok())
}

/// What a delivery asks for.
pub fn parse(payload: &Value) -> Parsed {
    let text = |at: &str| payload.pointer(at).and_then(Value::as_str);
    let pr = match payload.get("pull_request") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(n) => Some(n),
            None => return Parsed::Ignore("pull_request is not a whole number".into()),
        },
    };
    Raw {
        repo: text("/repository"),
        pr,
        branch: text("/branch"),
        sha: text("/commit"),
        base_branch: text("/base_branch"),
        base_sha: text("/base_commit"),
    }
    .validate(None)
}

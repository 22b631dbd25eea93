//! GitLab's deliveries: `X-Gitlab-Token` is the trigger's secret itself, compared in
//! constant time; the delivery id is `Idempotency-Key` (kept on GitLab's retries of one
//! event), the event `X-Gitlab-Event`. Acted on: `Merge Request Hook` (`open`, `reopen`,
//! and `update` with new commits, which carries `oldrev`) and `Push Hook` to a branch.

use axum::http::HeaderMap;
use iohr_domain::Forge;
use serde_json::Value;

use super::change::{Parsed, Raw};
use crate::resources::triggers::substitute::shorten;

/// Whether `X-Gitlab-Token` is `secret`. Constant time: both are keyed-hashed with the
/// secret and the tags compared by ring's `hmac::verify`.
pub fn verified(secret: &str, headers: &HeaderMap) -> bool {
    let Some(token) = headers.get("x-gitlab-token").map(|v| v.as_bytes()) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let expected = ring::hmac::sign(&key, secret.as_bytes());
    ring::hmac::verify(&key, token, expected.as_ref()).is_ok()
}

/// The delivery's id and event name.
pub fn delivery(headers: &HeaderMap) -> (Option<&str>, Option<&str>) {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    (
        header("idempotency-key").or_else(|| header("x-gitlab-event-uuid")),
        header("x-gitlab-event"),
    )
}

/// What a delivery of `event` asks for.
pub fn parse(event: &str, payload: &Value) -> Parsed {
    let text = |at: &str| payload.pointer(at).and_then(Value::as_str);
    match event {
        "Merge Request Hook" => {
            let action = text("/object_attributes/action").unwrap_or_default();
            let code_changed = payload.pointer("/object_attributes/oldrev").is_some();
            let acted = matches!(action, "open" | "reopen") || (action == "update" && code_changed);
            if !acted {
                return Parsed::Ignore(format!(
                    "merge request action {:?} is not acted on (open, reopen, update with new commits are)",
                    shorten(action)
                ));
            }
            let Some(iid) = payload
                .pointer("/object_attributes/iid")
                .and_then(Value::as_u64)
            else {
                return Parsed::Ignore("the payload names no merge request iid".into());
            };
            Raw {
                repo: text("/project/path_with_namespace"),
                pr: Some(iid),
                branch: text("/object_attributes/source_branch"),
                sha: text("/object_attributes/last_commit/id"),
                base_branch: text("/object_attributes/target_branch"),
                base_sha: None,
            }
            .validate(Some(Forge::Gitlab))
        }
        "Push Hook" => {
            let reference = text("/ref").unwrap_or_default();
            let Some(branch) = reference.strip_prefix("refs/heads/") else {
                return Parsed::Ignore(format!(
                    "a push to {:?} is not to a branch",
                    shorten(reference)
                ));
            };
            let after = text("/after").unwrap_or_default();
            if after.bytes().all(|b| b == b'0') {
                return Parsed::Ignore("a push that deleted its branch".into());
            }
            Raw {
                repo: text("/project/path_with_namespace"),
                branch: Some(branch),
                sha: Some(after),
                ..Raw::default()
            }
            .validate(Some(Forge::Gitlab))
        }
        other => Parsed::Ignore(format!(
            "event {:?} is not acted on (Merge Request Hook and Push Hook are)",
            shorten(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_the_secret_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!verified("s3cret", &headers));
        for (token, ok) in [
            ("s3cret", true),
            ("s3cre", false),
            ("s3cret ", false),
            ("", false),
        ] {
            headers.insert("x-gitlab-token", token.parse().unwrap());
            assert_eq!(verified("s3cret", &headers), ok, "{token:?}");
        }
    }

    #[test]
    fn an_update_without_new_commits_is_ignored() {
        let payload = serde_json::json!({"object_attributes": {"action": "update", "iid": 3}});
        assert!(matches!(
            parse("Merge Request Hook", &payload),
            Parsed::Ignore(_)
        ));
    }
}

//! GitHub's deliveries: `X-Hub-Signature-256: sha256=HEX` is HMAC-SHA256 of the raw body
//! keyed by the secret, compared in constant time (ring's `hmac::verify`); the delivery
//! id is `X-GitHub-Delivery`, the event `X-GitHub-Event`. Acted on: `pull_request`
//! (`opened`, `synchronize`, `reopened`) and `push` to a branch.

use axum::http::HeaderMap;
use iohr_domain::Forge;
use serde_json::Value;

use super::change::{Parsed, Raw};

/// Whether `X-Hub-Signature-256` signs `body` with `secret`.
pub fn verified(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(signature) = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("sha256="))
    else {
        return false;
    };
    let Ok(tag) = hex::decode(signature) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::verify(&key, body, &tag).is_ok()
}

/// The delivery's id and event name.
pub fn delivery(headers: &HeaderMap) -> (Option<&str>, Option<&str>) {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    (header("x-github-delivery"), header("x-github-event"))
}

/// What a delivery of `event` asks for.
pub fn parse(event: &str, payload: &Value) -> Parsed {
    let text = |at: &str| payload.pointer(at).and_then(Value::as_str);
    match event {
        "pull_request" => {
            let action = text("/action").unwrap_or_default();
            if !matches!(action, "opened" | "synchronize" | "reopened") {
                return Parsed::Ignore(format!(
                    "pull_request action {:?} is not acted on (opened, synchronize, reopened are)",
                    crate::resources::triggers::substitute::shorten(action)
                ));
            }
            let Some(number) = payload
                .pointer("/pull_request/number")
                .and_then(Value::as_u64)
            else {
                return Parsed::Ignore("the payload names no pull request number".into());
            };
            Raw {
                repo: text("/repository/full_name"),
                pr: Some(number),
                branch: text("/pull_request/head/ref"),
                sha: text("/pull_request/head/sha"),
                base_branch: text("/pull_request/base/ref"),
                base_sha: text("/pull_request/base/sha"),
            }
            .validate(Some(Forge::Github))
        }
        "push" => {
            let reference = text("/ref").unwrap_or_default();
            let Some(branch) = reference.strip_prefix("refs/heads/") else {
                return Parsed::Ignore(format!(
                    "a push to {:?} is not to a branch",
                    crate::resources::triggers::substitute::shorten(reference)
                ));
            };
            if payload.pointer("/deleted").and_then(Value::as_bool) == Some(true) {
                return Parsed::Ignore("a push that deleted its branch".into());
            }
            Raw {
                repo: text("/repository/full_name"),
                branch: Some(branch),
                sha: text("/after"),
                ..Raw::default()
            }
            .validate(Some(Forge::Github))
        }
        "ping" => Parsed::Ignore("ping: the hook reaches this trigger".into()),
        other => Parsed::Ignore(format!(
            "event {:?} is not acted on (pull_request and push are)",
            crate::resources::triggers::substitute::shorten(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's own test vector (docs: "Validating webhook deliveries").
    #[test]
    fn verifies_githubs_test_vector_and_nothing_else() {
        let mut headers = HeaderMap::new();
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        headers.insert("x-hub-signature-256", good.parse().unwrap());
        let secret = "It's a Secret to Everybody";
        assert!(verified(secret, &headers, b"Hello, World!"));
        assert!(!verified(secret, &headers, b"Hello, World?"));
        assert!(!verified("another", &headers, b"Hello, World!"));
        for bad in ["", "sha256=", "sha256=zz", "sha1=757107ea", &good[7..]] {
            headers.insert("x-hub-signature-256", bad.parse().unwrap());
            assert!(!verified(secret, &headers, b"Hello, World!"), "{bad}");
        }
        assert!(!verified(secret, &HeaderMap::new(), b"Hello, World!"));
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            rng_seed: proptest::test_runner::RngSeed::Fixed(0x33),
            ..ProptestConfig::default()
        })]

        /// No header or body panics; only the body's own HMAC under the secret verifies.
        #[test]
        fn only_the_bodys_own_signature_verifies(
            body in proptest::collection::vec(any::<u8>(), 0..256),
            header in "[ -~]{0,80}",
            secret in "[ -~]{1,40}",
        ) {
            let mut headers = HeaderMap::new();
            if let Ok(value) = header.parse() {
                headers.insert("x-hub-signature-256", value);
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
                let own = format!("sha256={}", hex::encode(ring::hmac::sign(&key, &body)));
                prop_assert_eq!(verified(&secret, &headers, &body), header == own);
                headers.insert("x-hub-signature-256", own.parse().unwrap());
                prop_assert!(verified(&secret, &headers, &body));
            }
        }

        /// Any payload reads as a start with validated values only, or as ignored.
        #[test]
        fn any_payload_starts_only_validated_changes(
            head in "\\PC{0,40}", base in "\\PC{0,40}", sha in "[0-9a-fA-Fg]{38,41}",
            repo in "\\PC{0,30}", number in any::<u64>(),
        ) {
            let payload = serde_json::json!({"action": "synchronize", "number": number,
                "repository": {"full_name": repo},
                "pull_request": {"number": number, "head": {"ref": head, "sha": sha},
                    "base": {"ref": base, "sha": sha}}});
            for event in ["pull_request", "push"] {
                if let super::Parsed::Start(change) = parse(event, &payload) {
                    use crate::resources::triggers::substitute;
                    prop_assert_eq!(substitute::branch(&change.branch), Ok(change.branch.clone()));
                    prop_assert_eq!(substitute::sha(&change.sha), Ok(change.sha.clone()));
                    prop_assert_eq!(substitute::repo(&change.repo), Ok(change.repo.clone()));
                }
            }
        }
    }
}

//! Standard Webhooks signatures (spec 1.0.0): `webhook-signature: v1,BASE64` where the
//! base64 is HMAC-SHA256, keyed by the secret's decoded remainder after `whsec_`, over
//! `{webhook-id}.{webhook-timestamp}.{body}`. Signed by the spec authors' own crate
//! (`standardwebhooks`), so the byte layout is theirs, not a copy of it.

use base64::Engine;
use rand::RngCore;

/// Random bytes in a new secret (the spec allows 24 to 64).
const SECRET_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("webhook secret or body unusable: {0}")]
    Webhook(#[from] standardwebhooks::WebhookError),
}

/// A new subscription secret: `whsec_` and the base64 of 32 random bytes.
pub fn new_secret() -> String {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// The `webhook-signature` value of one delivery.
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &str) -> Result<String, SignError> {
    let hook = standardwebhooks::Webhook::new(secret)?;
    Ok(hook.sign(id, timestamp, body.as_bytes())?)
}

/// Whether `webhook-id`, `webhook-timestamp` (within the spec's 5 minutes of now) and
/// `webhook-signature` sign `body` with `secret`: how a trigger of source `generic` takes
/// its deliveries (`trigger/generic.rs`). The crate compares in constant time.
pub fn verify(secret: &str, headers: &axum::http::HeaderMap, body: &[u8]) -> bool {
    standardwebhooks::Webhook::new(secret)
        .and_then(|hook| hook.verify(body, headers))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test vector of the Standard Webhooks reference libraries
    /// (standard-webhooks/standard-webhooks, libraries/*: the same secret, id, timestamp
    /// and payload in each language's tests).
    #[test]
    fn signs_the_reference_test_vector() {
        let signature = sign(
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1649367553,
            r#"{"email":"test@example.com","username":"test_user"}"#,
        )
        .unwrap();
        assert_eq!(signature, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    /// Computed again here with plain HMAC-SHA256 over "{id}.{timestamp}.{body}": the
    /// signature is exactly what the spec's text describes.
    #[test]
    fn a_new_secret_signs_what_the_spec_describes() {
        let secret = new_secret();
        let raw = secret.strip_prefix("whsec_").unwrap();
        let key = base64::engine::general_purpose::STANDARD
            .decode(raw)
            .unwrap();
        assert_eq!(key.len(), SECRET_BYTES);
        let body = r#"{"type":"reliability.run.finished"}"#;
        let signature = sign(&secret, "evt_1", 1700000000, body).unwrap();
        let mac = hmac_sha256(&key, format!("evt_1.1700000000.{body}").as_bytes());
        assert_eq!(
            signature,
            format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(mac)
            )
        );
        assert_ne!(new_secret(), secret);
    }

    /// HMAC (RFC 2104) over sha2's SHA-256, written out so the test does not use the
    /// signer's own HMAC.
    fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        let inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
        let outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
        let inner_hash = Sha256::new()
            .chain_update(&inner)
            .chain_update(message)
            .finalize();
        Sha256::new()
            .chain_update(&outer)
            .chain_update(inner_hash)
            .finalize()
            .to_vec()
    }
}

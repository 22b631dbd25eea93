//! Enrollment tokens and CA pins: the text an operator copies from the controller to an
//! agent's host.
//!
//! A token is `iohr-enroll-v1.<id>.<secret>.<ca-fingerprint>`: the id names its row in
//! the store, the secret (stored only as its hash) proves it, and the fingerprint (the
//! SHA-256 of the controller CA's DER, as kubeadm's discovery hash) tells the agent which
//! controller it may send the token to. Parsing is strict and bounded: the text comes from
//! a command line or a network peer.

use std::fmt;
use std::str::FromStr;

/// What every token starts with; a new layout gets a new version.
pub const TOKEN_PREFIX: &str = "iohr-enroll-v1";
/// Longer text is refused before it is looked at.
pub const MAX_TOKEN_LEN: usize = 256;
/// Random bytes in a secret (hex in the token).
pub const SECRET_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the enrollment token is longer than {MAX_TOKEN_LEN} characters")]
    TooLong,
    #[error("not an enrollment token (iohr-enroll-v1.<id>.<secret>.<ca-fingerprint>)")]
    Layout,
    #[error("the enrollment token's id is not an id")]
    Id,
    #[error("the enrollment token's secret is not {} hex digits", SECRET_BYTES * 2)]
    Secret,
    #[error(transparent)]
    Fingerprint(#[from] FingerprintError),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a CA fingerprint is 64 hex digits (the SHA-256 of the CA certificate), optionally after sha256:"
)]
pub struct FingerprintError;

/// The SHA-256 of a CA certificate's DER, lowercase hex.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CaFingerprint(String);

impl CaFingerprint {
    /// The fingerprint of a certificate's DER.
    pub fn of_der(der: &[u8]) -> CaFingerprint {
        CaFingerprint(crate::fingerprint(der))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CaFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl fmt::Display for CaFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// Accepts `sha256:` before the digits, any case, and colons between byte pairs (how
/// `openssl x509 -fingerprint` prints it).
impl FromStr for CaFingerprint {
    type Err = FingerprintError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() > 128 {
            return Err(FingerprintError);
        }
        let digits = text
            .strip_prefix("sha256:")
            .or_else(|| text.strip_prefix("SHA256:"))
            .unwrap_or(text);
        let digits: String = digits.chars().filter(|c| *c != ':').collect();
        if digits.len() != 64 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(FingerprintError);
        }
        Ok(CaFingerprint(digits.to_ascii_lowercase()))
    }
}

/// A parsed enrollment token. Its `Debug` hides the secret, so a log line never holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct EnrollmentToken {
    pub id: String,
    pub secret: String,
    pub ca: CaFingerprint,
}

impl fmt::Debug for EnrollmentToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnrollmentToken")
            .field("id", &self.id)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl EnrollmentToken {
    /// A fresh secret for the token `id` of the CA `ca`.
    pub fn generate(id: String, ca: CaFingerprint, random: [u8; SECRET_BYTES]) -> Self {
        EnrollmentToken {
            id,
            secret: hex::encode(random),
            ca,
        }
    }

    /// The whole token, as it is shown once and given to `iohr-agent enroll`.
    pub fn to_text(&self) -> String {
        format!(
            "{TOKEN_PREFIX}.{}.{}.{}",
            self.id,
            self.secret,
            self.ca.as_str()
        )
    }
}

/// An id is what the store makes (a UUID) or anything as plain: 1 to 64 of `[0-9a-z-]`.
fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

impl FromStr for EnrollmentToken {
    type Err = TokenError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() > MAX_TOKEN_LEN {
            return Err(TokenError::TooLong);
        }
        let text = text.trim();
        let mut parts = text.split('.');
        let (Some(prefix), Some(id), Some(secret), Some(ca), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(TokenError::Layout);
        };
        if prefix != TOKEN_PREFIX {
            return Err(TokenError::Layout);
        }
        if !valid_id(id) {
            return Err(TokenError::Id);
        }
        if secret.len() != SECRET_BYTES * 2 || !secret.bytes().all(is_lower_hex) {
            return Err(TokenError::Secret);
        }
        // In a token the fingerprint is exactly as `to_text` writes it: bare lowercase hex.
        if ca.len() != 64 || !ca.bytes().all(is_lower_hex) {
            return Err(FingerprintError.into());
        }
        Ok(EnrollmentToken {
            id: id.to_string(),
            secret: secret.to_string(),
            ca: ca.parse()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    use super::*;

    const FP: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn token() -> EnrollmentToken {
        EnrollmentToken::generate(
            "0192f3a4-7b1c-7def-8a00-0123456789ab".into(),
            FP.parse().unwrap(),
            [0xab; SECRET_BYTES],
        )
    }

    #[test]
    fn a_token_reads_back_what_it_wrote() {
        let text = token().to_text();
        assert!(text.starts_with("iohr-enroll-v1.0192f3a4-"));
        assert_eq!(text.parse::<EnrollmentToken>().unwrap(), token());
        // Copied with a newline.
        assert_eq!(
            format!(" {text}\n").parse::<EnrollmentToken>().unwrap(),
            token()
        );
    }

    #[test]
    fn the_secret_stays_out_of_debug() {
        let t = token();
        assert!(!format!("{t:?}").contains(&t.secret));
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong() {
        let t = token();
        let with = |id: &str, secret: &str, ca: &str| format!("{TOKEN_PREFIX}.{id}.{secret}.{ca}");
        let cases = [
            (String::new(), TokenError::Layout),
            ("iohr_abc".to_string(), TokenError::Layout),
            (
                format!("iohr-enroll-v2.{}.{}.{FP}", t.id, t.secret),
                TokenError::Layout,
            ),
            (format!("{}.extra", t.to_text()), TokenError::Layout),
            (with("", &t.secret, FP), TokenError::Id),
            (with("ID", &t.secret, FP), TokenError::Id),
            (with(&t.id, "abc", FP), TokenError::Secret),
            (
                with(&t.id, &t.secret.to_uppercase(), FP),
                TokenError::Secret,
            ),
            (
                with(&t.id, &t.secret, &FP[1..]),
                TokenError::Fingerprint(FingerprintError),
            ),
            (
                with(&t.id, &t.secret, &format!("sha256:{FP}")),
                TokenError::Fingerprint(FingerprintError),
            ),
            ("x".repeat(MAX_TOKEN_LEN + 1), TokenError::TooLong),
        ];
        for (text, expected) in cases {
            assert_eq!(text.parse::<EnrollmentToken>(), Err(expected), "{text:?}");
        }
    }

    #[test]
    fn a_pin_is_accepted_as_people_copy_it() {
        let expected: CaFingerprint = FP.parse().unwrap();
        for text in [
            format!("sha256:{FP}"),
            FP.to_uppercase(),
            FP.as_bytes()
                .chunks(2)
                .map(|pair| String::from_utf8_lossy(pair).to_string())
                .collect::<Vec<_>>()
                .join(":"),
        ] {
            assert_eq!(
                text.parse::<CaFingerprint>(),
                Ok(expected.clone()),
                "{text}"
            );
        }
        assert_eq!(expected.to_string(), format!("sha256:{FP}"));
        for bad in [
            "",
            "sha256:",
            &FP[2..],
            &format!("{FP}00"),
            "g".repeat(64).as_str(),
        ] {
            assert_eq!(bad.parse::<CaFingerprint>(), Err(FingerprintError), "{bad}");
        }
    }

    fn config() -> ProptestConfig {
        ProptestConfig {
            cases: 2048,
            rng_seed: RngSeed::Fixed(0x0e4e_0a11_70ce),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        /// Any text: no panic, and whatever parses writes back to the same token.
        #[test]
        fn no_text_panics_the_parser(text in "\\PC{0,300}") {
            if let Ok(token) = text.parse::<EnrollmentToken>() {
                prop_assert_eq!(token.to_text().parse::<EnrollmentToken>(), Ok(token));
            }
            let _ = text.parse::<CaFingerprint>();
        }

        /// Text shaped like a token, with any characters in its parts.
        #[test]
        fn token_shaped_text_never_panics(
            id in "[0-9a-zA-Z.:-]{0,70}",
            secret in "[0-9a-fA-Fg.]{0,70}",
            ca in "[0-9a-fA-F:x]{0,70}",
        ) {
            let text = format!("{TOKEN_PREFIX}.{id}.{secret}.{ca}");
            if let Ok(token) = text.parse::<EnrollmentToken>() {
                prop_assert_eq!(token.to_text(), text);
            }
        }
    }
}

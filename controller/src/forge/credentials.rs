//! The checks of a forge's credentials before they are stored: a token that can go in a
//! header, and an API base URL (`https://api.github.com`, GitHub Enterprise's
//! `https://HOST/api/v3`, GitLab's `https://HOST/api/v4`) without credentials, query or
//! fragment. Where it may point is the egress policy's to judge (`api/forges.rs`).

use iohr_domain::run::Forge;

use crate::store::MAX_FORGE_TOKEN_BYTES;

/// A forge's API when none is given.
pub fn default_api_url(forge: Forge) -> &'static str {
    match forge {
        Forge::Github => "https://api.github.com",
        Forge::Gitlab => "https://gitlab.com/api/v4",
    }
}

/// Why a token or URL was refused: a code and a message for the API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error(
        "the token is 1 to {MAX_FORGE_TOKEN_BYTES} bytes of printable characters without spaces"
    )]
    Token,
    #[error("the api_url is http(s)://HOST[:PORT][/PATH], without credentials, query or fragment")]
    ApiUrl,
}

impl Invalid {
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::Token => "invalid_token",
            Invalid::ApiUrl => "invalid_api_url",
        }
    }
}

/// The token as given, if it can be sent as a header's value.
pub fn checked_token(token: &str) -> Result<(), Invalid> {
    let fine = !token.is_empty()
        && token.len() <= MAX_FORGE_TOKEN_BYTES
        && token.chars().all(|c| c.is_ascii_graphic());
    if fine { Ok(()) } else { Err(Invalid::Token) }
}

/// The URL in the form it is stored (no trailing `/`), and parsed.
pub fn checked_api_url(url: &str) -> Result<(String, hyper::Uri), Invalid> {
    let trimmed = url.trim_end_matches('/');
    if trimmed.len() > 512 || trimmed.contains(['?', '#', '@', ' ']) {
        return Err(Invalid::ApiUrl);
    }
    let uri: hyper::Uri = trimmed.parse().map_err(|_| Invalid::ApiUrl)?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err(Invalid::ApiUrl);
    }
    Ok((trimmed.to_string(), uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_urls_are_checked() {
        assert!(checked_token("ghp_abc123").is_ok());
        for bad in ["", "a b", "a\nb", "é"] {
            assert_eq!(checked_token(bad), Err(Invalid::Token), "{bad:?}");
        }
        assert_eq!(checked_token(&"a".repeat(1025)), Err(Invalid::Token));
        assert_eq!(
            checked_api_url("https://ghe.example/api/v3/").unwrap().0,
            "https://ghe.example/api/v3"
        );
        for bad in [
            "ftp://x",
            "https://u:p@x",
            "https://x/?a=1",
            "https://x/#f",
            "x",
            "https://",
        ] {
            assert!(checked_api_url(bad).is_err(), "{bad}");
        }
    }
}

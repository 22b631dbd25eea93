//! The base URL a scenario drives: an address over plain http, never `localhost`.

use crate::target::{TargetError, validate_target};

/// Refuses `localhost` (any case, with or without a trailing dot, and its subdomains) with
/// the reason, and https for now; then the rules every target follows.
pub fn check_base_url(target: &str) -> Result<(), TargetError> {
    if let Some(host) = host_of(target) {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if host == "localhost" || host.ends_with(".localhost") {
            return Err(TargetError(format!(
                "{target} names localhost: a dual-stack host may resolve it to another listener; use 127.0.0.1"
            )));
        }
    }
    validate_target(target)?;
    if target.starts_with("https://") {
        return Err(TargetError(format!(
            "{target}: the scenario kind drives http:// base URLs only for now"
        )));
    }
    Ok(())
}

/// The host of `scheme://[userinfo@]host[:port][/...]`, if it has that shape.
fn host_of(target: &str) -> Option<&str> {
    let (_, rest) = target.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(h, _)| h),
        None => authority.split(':').next(),
    }
}

/// The URL an op's path is sent to: the base URL's path prefixes it.
pub fn op_url(base_url: &str, path: &str) -> String {
    format!("{}{path}", base_url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_is_refused_with_the_reason() {
        for target in [
            "http://localhost:8080",
            "http://LocalHost",
            "http://localhost.:80/",
            "http://app.localhost",
        ] {
            let e = check_base_url(target).expect_err(target).to_string();
            assert!(
                e.ends_with(
                    "names localhost: a dual-stack host may resolve it to another listener; use 127.0.0.1"
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn http_addresses_pass_https_and_junk_do_not() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://[::1]:9000/",
            "http://api.internal/v2",
        ] {
            assert_eq!(check_base_url(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_base_url("https://127.0.0.1:8443")
                .expect_err("https")
                .to_string(),
            "target: https://127.0.0.1:8443: the scenario kind drives http:// base URLs only for now"
        );
        assert!(check_base_url("127.0.0.1:8080").is_err());
        assert!(check_base_url("http://127.0.0.1/?q=1").is_err());
    }

    #[test]
    fn op_urls_join_the_base_path() {
        assert_eq!(op_url("http://h:1", "/a"), "http://h:1/a");
        assert_eq!(op_url("http://h:1/", "/a"), "http://h:1/a");
        assert_eq!(op_url("http://h/api/", "/v1?x=1"), "http://h/api/v1?x=1");
    }
}

//! Targets: the base URL a run exercises. The run names it; a spec never does.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("target: {0}")]
pub struct TargetError(pub String);

/// Accepts `http://HOST[:PORT][/PATH]` and `https://...`, where HOST is an address or a
/// DNS name, never `localhost` (which may resolve to another address family than the
/// target listens on: name the address, such as 127.0.0.1).
pub fn validate_target(target: &str) -> Result<(), TargetError> {
    let err = |m: &str| Err(TargetError(m.to_string()));
    let rest = match target.split_once("://") {
        Some(("http" | "https", rest)) => rest,
        _ => return err("must start with http:// or https://"),
    };
    if rest.contains(['?', '#']) {
        return err("must not carry a query or fragment; put paths in the spec");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return err("must not carry credentials");
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return err("unclosed [ in the address");
        };
        if !(after.is_empty() || after.starts_with(':')) {
            return err("unexpected text after the address");
        }
        host
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return err("names no host");
    }
    // A trailing dot names the same host (`localhost.` is localhost).
    let lower = host.trim_end_matches('.').to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return err("names localhost; use its address instead, such as 127.0.0.1 or [::1]");
    }
    if let Some((_, port)) = authority.rsplit_once(':')
        && !authority.ends_with(']')
        && port.parse::<u16>().is_err()
    {
        return err("has an invalid port");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_pass_localhost_and_junk_do_not() {
        for ok in [
            "http://127.0.0.1:8080",
            "https://api.example.com/v2",
            "http://[::1]:9000/",
            "http://10.0.0.5",
        ] {
            assert_eq!(validate_target(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://localhost:8080",
            "http://LOCALHOST",
            "http://app.localhost",
            "http://localhost.:8080",
            "ftp://127.0.0.1",
            "127.0.0.1:8080",
            "http://user:pw@127.0.0.1",
            "http://127.0.0.1:99999",
            "http://127.0.0.1/?x=1",
            "http://",
        ] {
            assert!(validate_target(bad).is_err(), "{bad}");
        }
    }
}

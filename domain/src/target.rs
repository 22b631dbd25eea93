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
        && (port.is_empty()
            || !port.bytes().all(|b| b.is_ascii_digit())
            || port.parse::<u16>().is_err()
            || (!authority.starts_with('[') && authority.matches(':').count() > 1))
    {
        return err("has an invalid port");
    }
    Ok(())
}

/// The form a target is stored and compared in, so that one target has one spelling: the
/// scheme and host in lower case, the port as its number and dropped when it is the
/// scheme's default (80 for http, 443 for https), and no trailing slash. The path keeps its
/// case (servers may tell `/A` from `/a`). Refuses what [`validate_target`] refuses.
pub fn normalize_target(target: &str) -> Result<String, TargetError> {
    let lowered = match target.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            format!("{}://{rest}", scheme.to_ascii_lowercase())
        }
        _ => target.to_string(),
    };
    validate_target(&lowered)?;
    let normal = with_canonical_origin(&lowered);
    Ok(normal.trim_end_matches('/').to_string())
}

/// `url` with its scheme and host in lower case and its port as [`normalize_target`] writes
/// it; the path, query and fragment as they are. Only the shape is looked at: a url that is
/// not `scheme://...` comes back unchanged. For matching a url against a normalised target.
pub fn with_canonical_origin(url: &str) -> String {
    let Some((scheme, after)) = url.split_once("://") else {
        return url.to_string();
    };
    let scheme = scheme.to_ascii_lowercase();
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    let (host, port) = match authority.find(']') {
        Some(close) if authority.starts_with('[') => {
            let (host, after) = authority.split_at(close + 1);
            (host, after.strip_prefix(':'))
        }
        _ => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let host = host.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let port = match port.map(|p| (p, p.parse::<u16>())) {
        None => String::new(),
        Some((_, Ok(n))) if Some(n) == default => String::new(),
        Some((p, Ok(n))) if p.bytes().all(|b| b.is_ascii_digit()) => format!(":{n}"),
        Some((p, _)) => format!(":{p}"),
    };
    format!("{scheme}://{host}{port}{rest}")
}

#[cfg(test)]
mod tests;

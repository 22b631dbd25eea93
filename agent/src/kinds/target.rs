//! The run's target as the HTTP kinds send to it: a plain-http base URL whose path, if
//! any, prefixes every request's path.

use hyper::Uri;

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TargetError {
    #[error("https targets are not supported yet")]
    Https,
    #[error("the target must be an absolute http:// URL such as http://127.0.0.1:8080")]
    NotHttp,
    #[error("the target must not carry credentials; use a ${{env:NAME}} header instead")]
    UserInfo,
    #[error("the target must not carry a query or fragment")]
    Query,
}

#[derive(Debug)]
pub struct Target {
    origin: String,
    prefix: String,
}

impl Target {
    pub fn parse(target: &str) -> Result<Target, TargetError> {
        let uri: Uri = target.trim().parse().map_err(|_| TargetError::NotHttp)?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(TargetError::Https),
            _ => return Err(TargetError::NotHttp),
        }
        let authority = uri.authority().ok_or(TargetError::NotHttp)?;
        if authority.as_str().contains('@') {
            return Err(TargetError::UserInfo);
        }
        if uri.query().is_some() || target.contains('#') {
            return Err(TargetError::Query);
        }
        Ok(Target {
            origin: format!("http://{authority}"),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }

    /// `http://h/api` + `/health` = `http://h/api/health`. Spec paths start with '/'.
    pub fn join(&self, path: &str) -> Result<Uri, hyper::http::uri::InvalidUri> {
        format!("{}{}{}", self.origin, self.prefix, path).parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_the_target_path() {
        let cases = [
            ("http://h:8080", "/health", "http://h:8080/health"),
            ("http://h:8080/", "/", "http://h:8080/"),
            ("http://h/api/", "/v1?x=1", "http://h/api/v1?x=1"),
            ("http://h/api", "/v1", "http://h/api/v1"),
        ];
        for (base, path, joined) in cases {
            let target = Target::parse(base).expect("valid target");
            assert_eq!(target.join(path).expect("joins").to_string(), joined);
        }
    }
}

//! HTTP to the controller's REST API: `http://` or `https://` (see [`crate::connect`]),
//! bearer token on every request, JSON in and out, API error bodies turned into `Failure`s.

use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::connect::{Connector, tls_config};
use crate::error::{Failure, Result, chain};

/// A plain request (not a stream) that takes longer than this has hung.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest JSON answer we read; a list page is far smaller.
const MAX_ANSWER: usize = 64 << 20;

pub struct Api {
    http: Client<Connector, Full<Bytes>>,
    /// `http(s)://host:port` plus any path prefix, without a trailing slash.
    base: String,
    auth: HeaderValue,
}

impl Api {
    /// `server` and `token` are the flags' (or environment's) values, if any; `ca_cert`
    /// is the CA an `https://` server's certificate must chain to (else the system's).
    pub fn new(server: Option<&str>, token: Option<&str>, ca_cert: Option<&Path>) -> Result<Api> {
        let server = server.map(str::trim).filter(|s| !s.is_empty()).ok_or_else(|| {
            Failure::usage("no server given: pass --server URL or set IOHR_SERVER (e.g. http://127.0.0.1:8080)")
        })?;
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Failure::usage("no API token given: pass --token T or set IOHR_TOKEN")
            })?;
        let base = parse_server(server)?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            // Never echo the token: it is a secret.
            Failure::usage("the API token (--token / IOHR_TOKEN) contains characters not allowed in an HTTP header")
        })?;
        auth.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        // An http:// server needs no TLS: IOHR_CA_CERT set for another one does not matter.
        let tls = match base.starts_with("https://") {
            true => Some(tls_config(ca_cert)?),
            false => None,
        };
        let http = Client::builder(TokioExecutor::new()).build(Connector::new(connector, tls));
        Ok(Api { http, base, auth })
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value> {
        self.call(Method::PATCH, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value> {
        self.call(Method::PUT, path, Some(body)).await
    }

    /// `DELETE`: `Null` for an empty (204) answer.
    pub async fn delete(&self, path: &str) -> Result<Value> {
        self.call(Method::DELETE, path, None).await
    }

    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let what = format!("{method} {}{path}", self.base);
        let body = match body {
            Some(value) => Bytes::from(
                serde_json::to_vec(value)
                    .map_err(|e| Failure::usage(format!("cannot encode the request body: {e}")))?,
            ),
            None => Bytes::new(),
        };
        let request = self.request(method, path, "application/json", None, body)?;
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| Failure::transport(format!("{what}: {}", chain(&e))))?;
            let status = response.status();
            let bytes = read_body(response.into_body(), &what).await?;
            Ok::<_, Failure>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                Failure::transport(format!(
                    "{what}: no answer within {} s",
                    REQUEST_TIMEOUT.as_secs()
                ))
            })??;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        if bytes.is_empty() && status == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| Failure::protocol(format!("{what}: the answer is not JSON: {e}")))
    }

    /// Opens a server-sent event stream; the caller reads the body as it arrives. An
    /// error status is read (bounded) and returned as the API's error.
    pub async fn open_stream(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<Response<Incoming>> {
        let what = format!("GET {}{path}", self.base);
        let request = self.request(
            Method::GET,
            path,
            "text/event-stream",
            last_event_id,
            Bytes::new(),
        )?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.http.request(request))
            .await
            .map_err(|_| {
                Failure::transport(format!(
                    "{what}: no answer within {} s",
                    REQUEST_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| Failure::transport(format!("{what}: {}", chain(&e))))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = tokio::time::timeout(REQUEST_TIMEOUT, read_body(response.into_body(), &what))
            .await
            .map_err(|_| Failure::transport(format!("{what}: the error answer did not end")))??;
        Err(api_error(status, &bytes))
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        accept: &'static str,
        last_event_id: Option<&str>,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>> {
        let uri: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|e| Failure::usage(format!("bad request address {}{path}: {e}", self.base)))?;
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept);
        if let Some(id) = last_event_id {
            builder = builder.header("last-event-id", id);
        }
        builder
            .body(Full::new(body))
            .map_err(|e| Failure::usage(format!("cannot build the request: {e}")))
    }
}

async fn read_body(body: Incoming, what: &str) -> Result<Bytes> {
    Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| Failure::transport(format!("{what}: reading the answer: {}", chain(&*e))))
}

/// `{"error":{"code","message"}}`, or, from something that is not the API (a proxy),
/// `http_<status>` and the start of the body.
fn api_error(status: StatusCode, body: &[u8]) -> Failure {
    #[derive(serde::Deserialize)]
    struct Envelope {
        error: Inner,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        code: String,
        message: String,
    }
    if let Ok(envelope) = serde_json::from_slice::<Envelope>(body) {
        return Failure::api(status.as_u16(), envelope.error.code, envelope.error.message);
    }
    let text = String::from_utf8_lossy(body);
    let text: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(200)
        .collect();
    let reason = status.canonical_reason().unwrap_or("error");
    let message = if text.is_empty() {
        format!("{} {reason}", status.as_u16())
    } else {
        format!("{} {reason}: {text}", status.as_u16())
    };
    Failure::api(
        status.as_u16(),
        format!("http_{}", status.as_u16()),
        message,
    )
}

/// Accepts `http://host[:port][/prefix]` and `https://...`, the scheme lower-cased.
pub fn parse_server(server: &str) -> Result<String> {
    let lower = server.to_ascii_lowercase();
    let Some((scheme, rest)) = ["http", "https"].into_iter().find_map(|scheme| {
        lower
            .starts_with(&format!("{scheme}://"))
            .then(|| (scheme, &server[scheme.len() + 3..]))
    }) else {
        return Err(Failure::usage(format!(
            "--server {server}: expected an http:// or https:// URL such as http://127.0.0.1:8080"
        )));
    };
    let (authority, prefix) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || rest.contains(['?', '#']) {
        return Err(Failure::usage(format!(
            "--server {server}: expected {scheme}://host[:port][/path] without user, query or fragment"
        )));
    }
    let base = format!("{scheme}://{authority}{}", prefix.trim_end_matches('/'));
    format!("{base}/")
        .parse::<Uri>()
        .map_err(|e| Failure::usage(format!("--server {server}: {e}")))?;
    Ok(base)
}

/// Percent-encodes one path segment or query value: only unreserved characters stay,
/// so an id like `../x` cannot change the route.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One path segment: encoded, never empty, and never `.`/`..` (which a router would
/// resolve against the path).
pub fn segment(what: &str, text: &str) -> Result<String> {
    match text {
        "" => Err(Failure::usage(format!("{what} must not be empty"))),
        "." | ".." => Ok("%2E".repeat(text.len())),
        _ => Ok(encode(text)),
    }
}

/// `?a=1&b=2` from the pairs that have a value, or the empty string.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_http_or_https_with_an_optional_prefix() {
        assert_eq!(
            parse_server("http://127.0.0.1:8080").as_deref(),
            Ok("http://127.0.0.1:8080")
        );
        assert_eq!(
            parse_server("HTTP://ctl.local/api/").as_deref(),
            Ok("http://ctl.local/api")
        );
        assert_eq!(
            parse_server("HTTPS://ctl.example:8443/").as_deref(),
            Ok("https://ctl.example:8443")
        );
        assert_eq!(
            parse_server("https://[::1]:8080").as_deref(),
            Ok("https://[::1]:8080")
        );
        for bad in [
            "127.0.0.1:8080",
            "http://",
            "http://u:p@host",
            "http://h/?x=1",
            "ftp://h",
            "https://",
            "httpx://h",
        ] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_server_or_token_names_flag_and_variable() {
        let server = Api::new(None, Some("t"), None).err().expect("no server");
        assert!(server.message.contains("--server") && server.message.contains("IOHR_SERVER"));
        let token = Api::new(Some("http://127.0.0.1:1"), Some("  "), None)
            .err()
            .expect("no token");
        assert!(token.message.contains("--token") && token.message.contains("IOHR_TOKEN"));
    }

    #[test]
    fn an_unreadable_ca_file_is_a_usage_error_for_https_only() {
        let missing = std::path::Path::new("/nonexistent/ca.pem");
        let e = Api::new(Some("https://127.0.0.1:1"), Some("t"), Some(missing))
            .err()
            .expect("no CA file");
        assert_eq!(e.code, "usage");
        assert!(e.message.contains("--ca-cert /nonexistent/ca.pem"), "{e}");
        // IOHR_CA_CERT set for another server does not stop a plain one.
        assert!(Api::new(Some("http://127.0.0.1:1"), Some("t"), Some(missing)).is_ok());
    }

    #[test]
    fn api_errors_keep_the_server_code_or_fall_back_to_the_status() {
        let e = api_error(
            StatusCode::NOT_FOUND,
            br#"{"error":{"code":"not_found","message":"no run r9"}}"#,
        );
        assert_eq!(e.to_string(), "not_found: no run r9");
        assert!(!e.retryable);
        let e = api_error(StatusCode::BAD_GATEWAY, b"<html>\n bad gateway </html>");
        assert_eq!(
            e.to_string(),
            "http_502: 502 Bad Gateway: <html> bad gateway </html>"
        );
        assert!(e.retryable);
    }

    #[test]
    fn encoding_keeps_routes_and_queries_intact() {
        assert_eq!(encode("r_01-a.b~"), "r_01-a.b~");
        assert_eq!(encode("../x y&z"), "..%2Fx%20y%26z");
        assert_eq!(
            query(&[
                ("status", Some("failed".into())),
                ("kind", None),
                ("cursor", Some("a+b=".into()))
            ]),
            "?status=failed&cursor=a%2Bb%3D"
        );
        assert_eq!(query(&[("kind", None)]), "");
        assert_eq!(segment("ID", "..").as_deref(), Ok("%2E%2E"));
        assert_eq!(segment("ID", "r/1").as_deref(), Ok("r%2F1"));
        assert!(segment("ID", "").is_err());
    }
}

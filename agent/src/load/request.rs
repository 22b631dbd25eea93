//! Operations made ready to send: method, URI, headers (with `${env:NAME}` references
//! read from the agent's environment) and body, built once and cloned per request.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Uri};
use iohr_domain::load::{HttpVersion, Operation};
use iohr_domain::request::env_reference;

use super::client::Endpoint;

pub const LOAD_USER_AGENT: &str = concat!("iohr-load/", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Clone)]
pub struct PreparedOp {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// Why an operation cannot be sent; never contains a header's value.
#[derive(Debug, thiserror::Error)]
#[error("operation {operation}: {message}")]
pub struct PrepareError {
    pub operation: String,
    pub message: String,
}

impl PreparedOp {
    pub fn new(
        op: &Operation,
        endpoint: &Endpoint,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<PreparedOp, PrepareError> {
        let fail = |message: String| PrepareError {
            operation: op.display_name(),
            message,
        };
        let method = Method::from_bytes(op.method.as_bytes())
            .map_err(|_| fail(format!("{:?} is not an HTTP method", op.method)))?;
        let uri = endpoint
            .uri_for(&op.path)
            .map_err(|e| fail(e.to_string()))?;
        let mut headers = HeaderMap::new();
        if endpoint.http() == HttpVersion::Http1 {
            let host = HeaderValue::from_str(endpoint.authority())
                .map_err(|_| fail("the target's host is not a valid Host header".into()))?;
            headers.insert(HOST, host);
        }
        headers.insert(USER_AGENT, HeaderValue::from_static(LOAD_USER_AGENT));
        let body = match &op.body {
            None => Bytes::new(),
            Some(serde_json::Value::String(text)) => Bytes::from(text.clone()),
            Some(json) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Bytes::from(json.to_string())
            }
        };
        for (name, raw) in &op.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| fail(format!("{name:?} is not a header name")))?;
            let value = match env_reference(raw) {
                Some(var) => env(var).ok_or_else(|| {
                    fail(format!(
                        "header {name}: environment variable {var} is not set on this agent"
                    ))
                })?,
                None => raw.clone(),
            };
            let value = HeaderValue::from_str(&value)
                .map_err(|_| fail(format!("header {name}: not a valid header value")))?;
            headers.insert(header, value);
        }
        Ok(PreparedOp {
            method,
            uri,
            headers,
            body,
        })
    }

    pub fn request(&self) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

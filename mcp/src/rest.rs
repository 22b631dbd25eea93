//! What the tools need of the REST API: one JSON call with the caller's credentials.
//! The controller gives an in-process call of its own router, `iohr mcp` the CLI's client.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

/// An API error (`{"error": {"code", "message"}}`) or the client's own (`transport`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RestError {
    pub code: String,
    pub message: String,
}

impl RestError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> RestError {
        RestError {
            code: code.into(),
            message: message.into(),
        }
    }
}

pub type RestFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, RestError>> + Send + 'a>>;

/// A response body as it arrives (a live event stream).
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, RestError>> + Send>>;

pub type StreamFuture<'a> =
    Pin<Box<dyn Future<Output = Result<ByteStream, RestError>> + Send + 'a>>;

pub trait Rest: Send + Sync + 'static {
    /// `path` starts with `/v1/reliability/`, query included. `authorization` is the
    /// caller's `Authorization` header when its transport carried one (HTTP); a client with
    /// a token of its own (the CLI over stdio) uses its own instead.
    fn call<'a>(
        &'a self,
        method: Method,
        path: &'a str,
        body: Option<&'a Value>,
        authorization: Option<&'a str>,
    ) -> RestFuture<'a>;

    /// Opens `GET path` as server-sent events (`/runs/{id}/events`): the body once the
    /// status is a success, else the API's error.
    fn events<'a>(&'a self, path: &'a str, authorization: Option<&'a str>) -> StreamFuture<'a>;
}

/// Percent-encodes a path segment or query value (only unreserved characters stay), so an
/// id such as `../x` cannot change the route.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    match out.as_str() {
        // A router would resolve these against the path.
        "." | ".." => "%2E".repeat(out.len()),
        _ => out,
    }
}

/// `?a=1&b=2` of the pairs with a value, or the empty string.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={}", encode(v))))
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!("?{}", parts.join("&")),
    }
}

//! What the tools need of the REST API: one JSON call with the caller's credentials.
//! The controller gives an in-process call of its own router, `iohr mcp` the CLI's client.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::BodyExt;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
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

/// A response body (axum's or hyper's) as a [`ByteStream`]; a broken body is `code`.
pub fn body_stream<B>(body: B, code: &'static str) -> ByteStream
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    Box::pin(
        body.into_data_stream()
            .map(move |chunk| chunk.map_err(|e| RestError::new(code, e.to_string()))),
    )
}

/// Unreserved characters (RFC 3986) stay, everything else is percent-encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One path segment, encoded so an id such as `../x` cannot change the route (`.` and
/// `..` alone, which a router would resolve, are encoded too).
pub fn segment(text: &str) -> String {
    match text {
        "." | ".." => "%2E".repeat(text.len()),
        _ => utf8_percent_encode(text, COMPONENT).to_string(),
    }
}

/// `?a=1&b=2` of the pairs with a value, or the empty string.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(key, value)| {
            let value = value.as_deref()?;
            Some(format!("{key}={}", utf8_percent_encode(value, COMPONENT)))
        })
        .collect();
    match parts.is_empty() {
        true => String::new(),
        false => format!("?{}", parts.join("&")),
    }
}

#[cfg(test)]
mod tests;

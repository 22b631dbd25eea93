//! Operations made ready to send: method, URI, headers (with `${env:NAME}` references
//! read from the agent's environment) and body, built once, and encoded once as they go
//! on the wire: the whole HTTP/1.1 request, or HTTP/2's header block.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, TRANSFER_ENCODING, USER_AGENT,
};
use hyper::{Method, Request, Uri};
use iohr_domain::load::{HttpVersion, Operation};

use super::client::Endpoint;
use crate::request::resolve_headers;
use crate::secrets::EnvRefusal;

pub const LOAD_USER_AGENT: &str = concat!("iohr-load/", env!("CARGO_PKG_VERSION"));

#[derive(Clone)]
pub struct PreparedOp {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    /// As it goes on the wire: HTTP/1.1's request head and body, or HTTP/2's header
    /// block (HPACK; the body follows in DATA frames).
    wire: Bytes,
}

// By hand: header values (credentials among them) and bodies never reach a log.
impl std::fmt::Debug for PreparedOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedOp")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
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
        env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
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
        // `${env:NAME}` read as every kind reads it; the spec's headers replace the
        // defaults above of the same name (a spec's own User-Agent).
        let resolved = resolve_headers(&op.headers, env).map_err(|e| fail(e.to_string()))?;
        headers.extend(resolved.headers);
        let wire = match endpoint.http() {
            HttpVersion::Http1 => encode_h1(&method, &uri, &headers, &body),
            HttpVersion::Http2 => {
                // What hyper's client did for us: no connection headers, a known length.
                super::h2::strip_connection_headers(&mut headers);
                if !body.is_empty() {
                    headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
                }
                encode_h2(&method, &uri, &headers)
            }
        };
        Ok(PreparedOp {
            method,
            uri,
            headers,
            body,
            wire,
        })
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The HTTP/1.1 request, or the HTTP/2 header block, as bytes.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// The request for hyper's client (the fault probes' single requests).
    pub fn request(&self) -> Request<Full<Bytes>> {
        self.with_body(Full::new(self.body.clone()))
    }

    fn with_body<B>(&self, body: B) -> Request<B> {
        let mut request = Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }
}

/// The HTTP/1.1 request as hyper's client wrote it: the origin-form target, the headers
/// in the map's order with lower-case names, `content-length` for a non-empty body (none
/// for an empty one), then the body. The engine frames the body itself: a
/// `Content-Length` or `Transfer-Encoding` among the operation's headers is replaced.
fn encode_h1(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Bytes {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut wire = Vec::with_capacity(256 + body.len());
    wire.extend_from_slice(method.as_str().as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(target.as_bytes());
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            continue;
        }
        wire.extend_from_slice(name.as_str().as_bytes());
        wire.extend_from_slice(b": ");
        wire.extend_from_slice(value.as_bytes());
        wire.extend_from_slice(b"\r\n");
    }
    if !body.is_empty() {
        wire.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(body);
    Bytes::from(wire)
}

/// The HTTP/2 header block: the pseudo-header fields from the absolute URI, then the
/// headers in the map's order ([`super::h2::hpack::field`]: the same bytes on every
/// connection, so encoded once).
fn encode_h2(method: &Method, uri: &Uri, headers: &HeaderMap) -> Bytes {
    use super::h2::hpack::field;
    let mut block = Vec::with_capacity(256);
    field(&mut block, ":method", method.as_str().as_bytes());
    field(
        &mut block,
        ":scheme",
        uri.scheme_str().unwrap_or("http").as_bytes(),
    );
    if let Some(authority) = uri.authority() {
        field(&mut block, ":authority", authority.as_str().as_bytes());
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    field(&mut block, ":path", path.as_bytes());
    for (name, value) in headers {
        field(&mut block, name.as_str(), value.as_bytes());
    }
    Bytes::from(block)
}

#[cfg(test)]
mod tests {
    use super::*;
    use iohr_domain::load::Operation;

    fn prepare(op: serde_json::Value, target: &str, http: HttpVersion) -> PreparedOp {
        let op: Operation = serde_json::from_value(op).expect("operation");
        let endpoint = Endpoint::new(target, http, None).expect("endpoint");
        PreparedOp::new(&op, &endpoint, &|r| {
            (r == iohr_domain::request::Reference::Env("TOKEN"))
                .then(|| "s3cret".to_string())
                .ok_or_else(|| EnvRefusal::NotSet(r.written()))
        })
        .expect("prepared")
    }

    /// The load engine reads headers as every kind does (`crate::request`): a spec's own
    /// header replaces the default of its name, and an unset `${env:NAME}` names both the
    /// operation and the header, never a value.
    #[test]
    fn spec_headers_replace_the_defaults_and_env_is_read_as_every_kind_reads_it() {
        let op = prepare(
            serde_json::json!({"path": "/", "headers": {"User-Agent": "mine", "X-Key": "${env:TOKEN}"}}),
            "http://127.0.0.1:8080",
            HttpVersion::Http1,
        );
        let text = String::from_utf8(op.wire().to_vec()).expect("utf-8");
        assert!(text.contains("user-agent: mine\r\n"), "{text}");
        assert!(!text.contains(LOAD_USER_AGENT), "{text}");
        assert!(text.contains("x-key: s3cret\r\n"), "{text}");
        let op: Operation = serde_json::from_value(serde_json::json!({
            "name": "home", "path": "/", "headers": {"X-Key": "${env:UNSET}"}
        }))
        .expect("operation");
        let endpoint =
            Endpoint::new("http://127.0.0.1:8080", HttpVersion::Http1, None).expect("endpoint");
        let refused = PreparedOp::new(&op, &endpoint, &|r| Err(EnvRefusal::NotSet(r.written())))
            .expect_err("unset");
        assert_eq!(
            refused.to_string(),
            "operation home: header X-Key: environment variable ${env:UNSET} is not set on the agent"
        );
    }

    #[test]
    fn an_http1_request_is_encoded_once_with_its_headers_and_body() {
        let op = prepare(
            serde_json::json!({"method": "POST", "path": "/orders?x=1", "body": {"a": 1},
                "headers": {"Authorization": "${env:TOKEN}", "Content-Length": "99"}}),
            "http://127.0.0.1:8080/base/",
            HttpVersion::Http1,
        );
        let text = String::from_utf8(op.wire().to_vec()).expect("utf-8");
        assert_eq!(
            text,
            format!(
                "POST /base/orders?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nuser-agent: {LOAD_USER_AGENT}\r\ncontent-type: application/json\r\nauthorization: s3cret\r\ncontent-length: 7\r\n\r\n{{\"a\":1}}"
            )
        );
        assert!(!format!("{op:?}").contains("s3cret"));
    }

    #[test]
    fn an_empty_body_sends_no_content_length() {
        let op = prepare(
            serde_json::json!({"path": "/"}),
            "http://localhost",
            HttpVersion::Http1,
        );
        assert_eq!(
            op.wire(),
            format!("GET / HTTP/1.1\r\nhost: localhost\r\nuser-agent: {LOAD_USER_AGENT}\r\n\r\n")
                .as_bytes()
        );
    }

    #[test]
    fn an_http2_header_block_is_encoded_once_and_decodes_to_the_request() {
        let op = prepare(
            serde_json::json!({"method": "POST", "path": "/orders?x=1", "body": {"a": 1},
                "headers": {"Authorization": "${env:TOKEN}", "Connection": "close"}}),
            "https://127.0.0.1:8443/base",
            HttpVersion::Http2,
        );
        let mut fields = Vec::new();
        httlib_hpack::Decoder::default()
            .decode(&mut op.wire().to_vec(), &mut fields)
            .expect("HPACK");
        let text: Vec<(String, String)> = fields
            .into_iter()
            .map(|(n, v, _)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        let expect = [
            (":method", "POST"),
            (":scheme", "https"),
            (":authority", "127.0.0.1:8443"),
            (":path", "/base/orders?x=1"),
            ("user-agent", LOAD_USER_AGENT),
            ("content-type", "application/json"),
            ("authorization", "s3cret"),
            ("content-length", "7"),
        ];
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(text, expect);
        assert_eq!(&op.body()[..], b"{\"a\":1}");
    }
}

//! Operations made ready to send through the one builder ([`crate::request::build`]):
//! method, URI, headers (with `${env:NAME}` references read from the agent's
//! environment), body and the run's baggage, built once, and encoded once as they go on
//! the wire: the whole HTTP/1.1 request, or HTTP/2's header block. Each request's
//! traceparent is written in as it goes ([`PreparedOp::stamped`]).

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, HeaderValue, TRANSFER_ENCODING, USER_AGENT,
};
use hyper::{Method, Request, Uri};
use iohr_domain::load::{HttpVersion, Operation};

use super::client::Endpoint;
use crate::request::{BuildError, Built, Parts, Trace, build};
use crate::secrets::EnvRefusal;

/// `traceparent` as [`super::h2::hpack::field`] encodes it, up to its value: a literal
/// never indexed, the name's length and bytes, the value's length (55).
const H2_STAMP_NAME: &[u8] = b"\x00\x0btraceparent\x37";
const H2_STAMP_LEN: usize = H2_STAMP_NAME.len() + iohr_domain::trace::TRACEPARENT_LEN;

pub const LOAD_USER_AGENT: &str = concat!("iohr-load/", env!("CARGO_PKG_VERSION"));

#[derive(Clone)]
pub struct PreparedOp {
    built: Built,
    /// As it goes on the wire: HTTP/1.1's request head and body, or HTTP/2's header
    /// block (HPACK; the body follows in DATA frames), without the traceparent.
    wire: Bytes,
    /// HTTP/1.1: where each request's traceparent goes in `wire`, before the head's
    /// blank line (HTTP/2's follows the header block, [`PreparedOp::h2_stamp`]).
    stamp_at: usize,
}

// By hand: header values (credentials among them) and bodies never reach a log.
impl std::fmt::Debug for PreparedOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedOp")
            .field("method", &self.built.method)
            .field("uri", &self.built.uri)
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
    /// The operation without trace context (the encoding's own tests).
    pub fn new(
        op: &Operation,
        endpoint: &Endpoint,
        env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
    ) -> Result<PreparedOp, PrepareError> {
        PreparedOp::traced(op, endpoint, env, None)
    }

    /// The operation through the one builder, with the run's trace context.
    pub fn traced(
        op: &Operation,
        endpoint: &Endpoint,
        env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
        trace: Option<&Trace>,
    ) -> Result<PreparedOp, PrepareError> {
        let fail = |message: String| PrepareError {
            operation: op.display_name(),
            message,
        };
        let mut defaults = Vec::with_capacity(3);
        if endpoint.http() == HttpVersion::Http1 {
            let host = HeaderValue::from_str(endpoint.authority())
                .map_err(|_| fail("the target's host is not a valid Host header".into()))?;
            defaults.push((HOST, host));
        }
        defaults.push((USER_AGENT, HeaderValue::from_static(LOAD_USER_AGENT)));
        let body = match &op.body {
            None => Bytes::new(),
            Some(serde_json::Value::String(text)) => Bytes::from(text.clone()),
            Some(json) => {
                defaults.push((CONTENT_TYPE, HeaderValue::from_static("application/json")));
                Bytes::from(json.to_string())
            }
        };
        // `${env:NAME}` read as every kind reads it; the spec's headers replace the
        // defaults above of the same name (a spec's own User-Agent).
        let mut built = build(
            Parts {
                method: &op.method,
                uri: &|| endpoint.uri_for(&op.path).map_err(|e| e.to_string()),
                headers: &op.headers,
                body,
                defaults: &defaults,
            },
            env,
            trace,
        )
        .map_err(|e| match e {
            BuildError::Method(method) => fail(format!("{method:?} is not an HTTP method")),
            other => fail(other.to_string()),
        })?;
        let (wire, stamp_at) = match endpoint.http() {
            HttpVersion::Http1 => encode_h1(&built.method, &built.uri, &built.headers, &built.body),
            HttpVersion::Http2 => {
                // What hyper's client did for us: no connection headers, a known length.
                super::h2::strip_connection_headers(&mut built.headers);
                if !built.body.is_empty() {
                    built
                        .headers
                        .insert(CONTENT_LENGTH, HeaderValue::from(built.body.len()));
                }
                (encode_h2(&built.method, &built.uri, &built.headers), 0)
            }
        };
        Ok(PreparedOp {
            built,
            wire,
            stamp_at,
        })
    }

    pub fn method(&self) -> &Method {
        &self.built.method
    }

    /// The HTTP/1.1 request, or the HTTP/2 header block, as bytes, without a
    /// traceparent.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// Whether each request gets a traceparent of its own ([`PreparedOp::stamped`]).
    pub fn stamps(&self) -> bool {
        self.built.stamper.is_some()
    }

    /// The run's half of the trace ids this operation's requests are sent with; `None`
    /// when they carry none of the run's (the spec sends its own traceparent).
    pub fn trace_prefix(&self) -> Option<u64> {
        self.built.stamper.map(|s| s.prefix())
    }

    /// HTTP/1.1: [`PreparedOp::wire`] with a new traceparent whose trace id ends in
    /// `trace`, written into `out` (a buffer the connection keeps, so that a request
    /// allocates nothing).
    pub fn stamped(&self, out: &mut Vec<u8>, trace: u64) {
        out.clear();
        let Some(stamper) = self.built.stamper else {
            out.extend_from_slice(&self.wire);
            return;
        };
        let (head, tail) = self.wire.split_at(self.stamp_at);
        out.extend_from_slice(head);
        out.extend_from_slice(b"traceparent: ");
        out.extend_from_slice(&stamper.with_low(trace));
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(tail);
    }

    /// HTTP/2: this request's traceparent as an HPACK field to follow the header block
    /// (on the stack: a shared connection's handle is made per request).
    pub fn h2_stamp(&self, trace: u64) -> Option<[u8; H2_STAMP_LEN]> {
        let stamper = self.built.stamper?;
        let mut field = [0u8; H2_STAMP_LEN];
        field[..H2_STAMP_NAME.len()].copy_from_slice(H2_STAMP_NAME);
        field[H2_STAMP_NAME.len()..].copy_from_slice(&stamper.with_low(trace));
        Some(field)
    }

    /// The request for hyper's client (the fault probes' single requests).
    pub fn request(&self) -> Request<Full<Bytes>> {
        self.built.request()
    }

    pub fn body(&self) -> &Bytes {
        &self.built.body
    }
}

/// The HTTP/1.1 request as hyper's client wrote it: the origin-form target, the headers
/// in the map's order with lower-case names, `content-length` for a non-empty body (none
/// for an empty one), then the body. The engine frames the body itself: a
/// `Content-Length` or `Transfer-Encoding` among the operation's headers is replaced.
fn encode_h1(method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> (Bytes, usize) {
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
    let stamp_at = wire.len();
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(body);
    (Bytes::from(wire), stamp_at)
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

    fn traced(op: serde_json::Value, http: HttpVersion) -> PreparedOp {
        let op: Operation = serde_json::from_value(op).expect("operation");
        let endpoint = Endpoint::new("http://127.0.0.1:8080", http, None).expect("endpoint");
        let trace = Trace::new("run-7", 1.0);
        PreparedOp::traced(
            &op,
            &endpoint,
            &|r| Err(EnvRefusal::NotSet(r.written())),
            Some(&trace),
        )
        .expect("prepared")
    }

    /// Each HTTP/1.1 request gets its own traceparent as the head's last field, the rest
    /// byte for byte the operation's; the baggage is part of the operation.
    #[test]
    fn an_http1_request_is_stamped_with_its_own_traceparent() {
        let op = traced(
            serde_json::json!({"method": "POST", "path": "/o", "body": "xy"}),
            HttpVersion::Http1,
        );
        let prefix = iohr_domain::trace::run_prefix_hex("run-7");
        let (mut a, mut b) = (Vec::new(), Vec::new());
        op.stamped(&mut a, rand::random());
        op.stamped(&mut b, rand::random());
        let text = String::from_utf8(a.clone()).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head");
        assert_eq!(body, "xy");
        let last = head.lines().last().expect("a field");
        assert!(
            last.starts_with(&format!("traceparent: 00-{prefix}")),
            "{head}"
        );
        assert!(last.ends_with("-01"), "{last}");
        assert!(
            head.contains("baggage: iohr.run_id=run-7,synthetic=true\r\n"),
            "{head}"
        );
        assert_ne!(a, b, "a trace per request");
        let without = text.replace(&format!("{last}\r\n"), "");
        assert_eq!(without.as_bytes(), op.wire());
    }

    /// HTTP/2's stamp is the field [`super::super::h2::hpack::field`] would write, after
    /// the operation's block: the whole decodes with its traceparent last.
    #[test]
    fn an_http2_request_is_stamped_after_its_header_block() {
        let op = traced(serde_json::json!({"path": "/"}), HttpVersion::Http2);
        let stamp = op.h2_stamp(7).expect("stamped");
        let mut field = Vec::new();
        super::super::h2::hpack::field(&mut field, "traceparent", &stamp[H2_STAMP_NAME.len()..]);
        assert_eq!(field, stamp);
        let mut block = op.wire().to_vec();
        block.extend_from_slice(&stamp);
        let mut fields = Vec::new();
        httlib_hpack::Decoder::default()
            .decode(&mut block, &mut fields)
            .expect("HPACK");
        let (name, value, _) = fields.last().expect("fields");
        assert_eq!(name, b"traceparent");
        let value = String::from_utf8(value.clone()).expect("ascii");
        let parsed = iohr_domain::trace::parse_traceparent(&value).expect("valid");
        assert_eq!(
            (parsed.0 >> 64) as u64,
            iohr_domain::trace::run_prefix("run-7")
        );
        assert!(
            fields
                .iter()
                .any(|(n, v, _)| n == b"baggage" && v == b"iohr.run_id=run-7,synthetic=true")
        );
    }
}

//! The one request builder every kind sends through (checks, scenario, faults probes,
//! and the load engine's operations for load, replay and capacity): the method parsed,
//! the URI joined by the caller's rule, the defaults under the spec's own headers, the
//! headers resolved ([`super::resolve_headers`]), and the run's trace context
//! ([`iohr_domain::trace`]): its `baggage` fixed, its `traceparent` stamped per request.

use std::collections::BTreeMap;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Uri};
use iohr_domain::request::Reference;
use iohr_domain::trace::{RunTrace, TRACEPARENT_LEN, baggage};

use super::{HeaderError, resolve_headers};
use crate::secrets::EnvRefusal;

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const BAGGAGE: HeaderName = HeaderName::from_static("baggage");

/// A run's trace context as the builder adds it: the baggage once, a traceparent per
/// request (unless the scenario stamps its own, [`Trace::baggage_only`]).
#[derive(Debug, Clone)]
pub struct Trace {
    run: Option<RunTrace>,
    baggage: Option<HeaderValue>,
}

impl Trace {
    /// `run_id`'s context, `sample` of its requests sent sampled.
    pub fn new(run_id: &str, sample: f64) -> Trace {
        Trace {
            run: Some(RunTrace::new(run_id, sample)),
            baggage: HeaderValue::from_str(&baggage(run_id)).ok(),
        }
    }

    /// The baggage alone: the caller sends a traceparent of its own.
    pub fn baggage_only(run_id: &str) -> Trace {
        Trace {
            run: None,
            baggage: HeaderValue::from_str(&baggage(run_id)).ok(),
        }
    }
}

/// Stamps each request's traceparent: a random trace-id half and span id under the
/// run's prefix. Copy and allocation-free: the load engine stamps every request.
#[derive(Debug, Clone, Copy)]
pub struct Stamper(RunTrace);

impl Stamper {
    pub fn next(&self) -> [u8; TRACEPARENT_LEN] {
        self.with_low(rand::random())
    }

    /// A traceparent whose trace id ends in `low` (the caller's random draw, which it
    /// keeps: the load engine's exemplars name the request by it).
    pub fn with_low(&self, low: u64) -> [u8; TRACEPARENT_LEN] {
        self.0.traceparent(low, rand::random())
    }

    /// The run's half of every trace id it stamps.
    pub fn prefix(&self) -> u64 {
        self.0.prefix()
    }

    pub fn next_value(&self) -> HeaderValue {
        // Lower-case hex and dashes: always a valid header value.
        HeaderValue::from_bytes(&self.next()).unwrap_or(HeaderValue::from_static("00"))
    }
}

/// What a kind asks to send, before resolution.
pub struct Parts<'a> {
    pub method: &'a str,
    /// The path joined with the target by the kind's rule; called after the method is
    /// read, so a refusal names the first thing wrong.
    pub uri: &'a dyn Fn() -> Result<Uri, String>,
    pub headers: &'a BTreeMap<String, String>,
    pub body: Bytes,
    /// Sent unless the spec's own headers name them (Host, User-Agent, Content-Type),
    /// in this order before the spec's.
    pub defaults: &'a [(HeaderName, HeaderValue)],
}

/// Why a request cannot be built; never holds a header's value.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("method {0}: not a valid HTTP method")]
    Method(String),
    #[error("{0}")]
    Uri(String),
    #[error(transparent)]
    Header(#[from] HeaderError),
}

/// A request built once and sent many times.
#[derive(Clone)]
pub struct Built {
    pub method: Method,
    pub uri: Uri,
    /// Defaults, the spec's headers, the baggage; never the traceparent.
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Values that must never be echoed ([`super::scrub`]).
    pub secrets: Vec<String>,
    /// `None` when the spec sends its own traceparent, or the caller stamps one.
    pub stamper: Option<Stamper>,
}

// By hand: header values (credentials among them) and bodies never reach a log.
impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field("method", &self.method)
            .field("uri", &self.uri)
            .finish_non_exhaustive()
    }
}

/// Builds `parts`, `${env:NAME}` and `${secret:NAME}` read through `env`, with `trace`'s
/// context (none in the engine's own encoding tests). A spec's own `traceparent` or
/// `baggage` header is sent as written, in place of the run's.
pub fn build(
    parts: Parts<'_>,
    env: &impl Fn(Reference<'_>) -> Result<String, EnvRefusal>,
    trace: Option<&Trace>,
) -> Result<Built, BuildError> {
    let method = Method::from_bytes(parts.method.as_bytes())
        .map_err(|_| BuildError::Method(parts.method.to_string()))?;
    let uri = (parts.uri)().map_err(BuildError::Uri)?;
    let mut headers = HeaderMap::new();
    for (name, value) in parts.defaults {
        headers.insert(name.clone(), value.clone());
    }
    let resolved = resolve_headers(parts.headers, env)?;
    // A map extended by a map replaces the names it holds: the spec's own win.
    headers.extend(resolved.headers);
    let mut stamper = None;
    if let Some(trace) = trace {
        if let Some(baggage) = &trace.baggage
            && !headers.contains_key(BAGGAGE)
        {
            headers.insert(BAGGAGE, baggage.clone());
        }
        if !headers.contains_key(TRACEPARENT) {
            stamper = trace.run.map(Stamper);
        }
    }
    Ok(Built {
        method,
        uri,
        headers,
        body: parts.body,
        secrets: resolved.secrets,
        stamper,
    })
}

impl Built {
    /// The request for hyper's client, with its own traceparent.
    pub fn request(&self) -> Request<Full<Bytes>> {
        self.request_with(self.stamper.map(|s| s.next_value()), None)
    }

    /// The same with the caller's traceparent and User-Agent (the scenario's identity),
    /// which replace any of the spec's.
    pub fn request_with(
        &self,
        traceparent: Option<HeaderValue>,
        user_agent: Option<HeaderValue>,
    ) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.clone_from(&self.headers);
        if let Some(user_agent) = user_agent {
            headers.insert(USER_AGENT, user_agent);
        }
        if let Some(traceparent) = traceparent {
            headers.insert(TRACEPARENT, traceparent);
        }
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(r: Reference<'_>) -> Result<String, EnvRefusal> {
        Err(EnvRefusal::NotSet(r.written()))
    }

    #[test]
    fn defaults_yield_to_the_spec_and_the_trace_is_stamped_per_request() {
        let spec = BTreeMap::from([("User-Agent".to_string(), "mine".to_string())]);
        let trace = Trace::new("run-1", 1.0);
        let built = build(
            Parts {
                method: "POST",
                uri: &|| Ok(Uri::from_static("http://127.0.0.1/x")),
                headers: &spec,
                body: Bytes::from_static(b"b"),
                defaults: &[(USER_AGENT, HeaderValue::from_static("iohr"))],
            },
            &no_env,
            Some(&trace),
        )
        .expect("built");
        let (a, b) = (built.request(), built.request());
        assert_eq!(a.headers()[USER_AGENT], "mine");
        assert_eq!(a.headers()[BAGGAGE], "iohr.run_id=run-1,synthetic=true");
        let (ta, tb) = (
            a.headers()[TRACEPARENT].to_str().unwrap(),
            b.headers()[TRACEPARENT].to_str().unwrap(),
        );
        let prefix = format!("00-{}", iohr_domain::trace::run_prefix_hex("run-1"));
        assert!(
            ta.starts_with(&prefix) && tb.starts_with(&prefix),
            "{ta} {tb}"
        );
        assert!(ta.ends_with("-01"));
        assert_ne!(ta, tb);
    }

    #[test]
    fn a_spec_traceparent_and_baggage_are_sent_as_written() {
        let spec = BTreeMap::from([
            (
                "traceparent".to_string(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
            ),
            ("baggage".to_string(), "k=v".to_string()),
        ]);
        let built = build(
            Parts {
                method: "GET",
                uri: &|| Ok(Uri::from_static("http://127.0.0.1/")),
                headers: &spec,
                body: Bytes::new(),
                defaults: &[],
            },
            &no_env,
            Some(&Trace::new("r", 1.0)),
        )
        .expect("built");
        let request = built.request();
        assert_eq!(request.headers()[BAGGAGE], "k=v");
        assert_eq!(
            request.headers()[TRACEPARENT],
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        let bad = build(
            Parts {
                method: "G T",
                uri: &|| Err("never read".into()),
                headers: &spec,
                body: Bytes::new(),
                defaults: &[],
            },
            &no_env,
            None,
        )
        .expect_err("bad method");
        assert_eq!(bad.to_string(), "method G T: not a valid HTTP method");
    }
}

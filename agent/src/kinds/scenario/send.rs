//! One request of a scenario: built from its op through the one builder
//! ([`crate::request::build`], which adds the run's baggage) with the scenario's identity
//! (User-Agent and its documented traceparent), sent under the per-request deadline, its
//! body drained and never kept, and, when it gets no complete response, the reason
//! classified. Never retried.

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use iohr_domain::scenario_kind::{Identity, PlannedRequest, ScenarioSpec};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::http_client::{self, HttpClient};
use crate::kinds::bounded::{Bounded, bounded};
use crate::kinds::describe::describe;
use crate::kinds::target::Target;
use crate::load::client::Failure;
use crate::request::{BuildError, Built, HeaderError, Parts, Trace, build, resolve_headers, scrub};
use crate::secrets::EnvRefusal;

/// Why the scenario cannot start; messages never hold a header's value.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    #[error("spec.ops[{op}]: method {method}: not a valid HTTP method")]
    Method { op: usize, method: String },
    #[error("spec.ops[{op}]: path {path}: does not make a valid URL with the target")]
    Uri { op: usize, path: String },
    #[error("slug {0}: does not make a valid User-Agent")]
    UserAgent(String),
}

/// How a request ended without a complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoResponse {
    Failed(Failure),
    /// The run was cancelled while it was in flight.
    Cancelled,
}

impl NoResponse {
    pub fn as_str(self) -> &'static str {
        match self {
            NoResponse::Failed(failure) => failure.as_str(),
            NoResponse::Cancelled => "cancelled",
        }
    }
}

/// What became of one request.
#[derive(Debug, Clone)]
pub struct Sent {
    pub planned: PlannedRequest,
    pub started: Instant,
    pub duration: Duration,
    /// Set as soon as the response head arrived.
    pub status: Option<u16>,
    /// Set when there is no complete response (also when the body broke off).
    pub error: Option<NoResponse>,
    /// The error's text, scrubbed of secrets, for the run's reason.
    pub detail: Option<String>,
}

/// Everything a worker needs to send any request of the plan.
pub struct Sender {
    client: HttpClient,
    /// One per op, through the one builder; the identity's User-Agent and traceparent
    /// are stamped per request.
    ops: Vec<Built>,
    secrets: Vec<String>,
    identity: Identity,
    user_agents: [HeaderValue; 2],
    timeout: Duration,
}

impl Sender {
    pub fn new(
        spec: &ScenarioSpec,
        base: &Target,
        env: &impl Fn(iohr_domain::request::Reference<'_>) -> Result<String, EnvRefusal>,
        egress: std::sync::Arc<crate::egress::Egress>,
        run_id: &str,
    ) -> Result<Sender, PrepareError> {
        // Resolved once up front, so that a header's refusal comes before an op's.
        let resolved = resolve_headers(&spec.headers, env)?;
        let trace = Trace::baggage_only(run_id);
        let ops = spec
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let json = [(CONTENT_TYPE, HeaderValue::from_static("application/json"))];
                let defaults: &[_] = if op.body.is_some() { &json } else { &[] };
                build(
                    Parts {
                        method: &op.method,
                        uri: &|| base.join(&op.path).map_err(|e| e.to_string()),
                        headers: &spec.headers,
                        body: op.body.clone().map(Bytes::from).unwrap_or_default(),
                        defaults,
                    },
                    env,
                    Some(&trace),
                )
                .map_err(|e| match e {
                    BuildError::Method(method) => PrepareError::Method { op: i, method },
                    BuildError::Uri(_) => PrepareError::Uri {
                        op: i,
                        path: op.path.clone(),
                    },
                    BuildError::Header(e) => PrepareError::Header(e),
                })
            })
            .collect::<Result<Vec<_>, PrepareError>>()?;
        let identity = Identity::new(spec);
        let user_agent = |warmup| {
            HeaderValue::try_from(identity.user_agent(warmup))
                .map_err(|_| PrepareError::UserAgent(spec.slug.clone()))
        };
        let user_agents = [user_agent(false)?, user_agent(true)?];
        Ok(Sender {
            client: http_client::pooled(egress),
            ops,
            secrets: resolved.secrets,
            identity,
            user_agents,
            timeout: spec.timeout,
        })
    }

    /// Sends one planned request; one deadline covers connecting, the head and the body.
    pub async fn send(&self, planned: PlannedRequest, cancel: &CancellationToken) -> Sent {
        let started = Instant::now();
        let deadline = started + self.timeout;
        let end = |status: Option<u16>, error: Option<NoResponse>, detail: Option<String>| Sent {
            planned,
            started,
            duration: started.elapsed(),
            status,
            error,
            detail: detail.map(|d| scrub(d, &self.secrets)),
        };
        let timeout_text = || {
            format!(
                "no complete response within {} ms",
                self.timeout.as_millis()
            )
        };
        let request = match self.request(planned) {
            Ok(request) => request,
            Err(detail) => {
                return end(
                    None,
                    Some(NoResponse::Failed(Failure::Protocol)),
                    Some(detail),
                );
            }
        };
        crate::metrics::requests_sent(1);
        let response = match bounded(self.client.request(request), deadline, cancel).await {
            Bounded::Cancelled => return end(None, Some(NoResponse::Cancelled), None),
            Bounded::TimedOut => {
                return end(
                    None,
                    Some(NoResponse::Failed(Failure::Timeout)),
                    Some(timeout_text()),
                );
            }
            Bounded::Done(Err(e)) => {
                let failure = if e.is_connect() {
                    Failure::Connect
                } else {
                    classify(&e)
                };
                return end(None, Some(NoResponse::Failed(failure)), Some(describe(&e)));
            }
            Bounded::Done(Ok(response)) => response,
        };
        let status = Some(response.status().as_u16());
        match bounded(drain(response.into_body()), deadline, cancel).await {
            Bounded::Done(Ok(())) => end(status, None, None),
            Bounded::Cancelled => end(status, Some(NoResponse::Cancelled), None),
            Bounded::TimedOut => end(
                status,
                Some(NoResponse::Failed(Failure::Timeout)),
                Some(timeout_text()),
            ),
            Bounded::Done(Err(e)) => end(
                status,
                Some(NoResponse::Failed(classify(&e))),
                Some(format!("reading the body: {}", describe(&e))),
            ),
        }
    }

    fn request(&self, planned: PlannedRequest) -> Result<Request<Full<Bytes>>, String> {
        let op = self
            .ops
            .get(planned.op)
            .ok_or_else(|| format!("no op {} in the plan", planned.op))?;
        let user_agent = &self.user_agents[usize::from(planned.warmup)];
        let traceparent = HeaderValue::try_from(self.identity.traceparent(planned.seq))
            .map_err(|_| "the traceparent is not a valid header value".to_string())?;
        Ok(op.request_with(Some(traceparent), Some(user_agent.clone())))
    }
}

/// Reads the body to its end (the duration runs to it) without keeping it.
async fn drain(mut body: Incoming) -> Result<(), hyper::Error> {
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// Maps an error and its causes onto the failure kinds the record counts.
fn classify(error: &(dyn StdError + 'static)) -> Failure {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return match io.kind() {
                io::ErrorKind::TimedOut => Failure::Timeout,
                io::ErrorKind::ConnectionRefused => Failure::Connect,
                _ => Failure::Reset,
            };
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return Failure::Reset;
        }
        next = e.source();
    }
    Failure::Protocol
}

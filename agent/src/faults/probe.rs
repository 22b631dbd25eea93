//! The real probes of a `faults` run: an HTTP request (status, latency, body for the
//! tolerances) and a short open-model load burst (p99 and error rate), both sent to where
//! the run's requests go: the fault proxy in front of the target when the run has one, so
//! that a probe sees the faults.
//!
//! HTTP probes reuse the load engine's pieces: [`Endpoint`] reads the base URL and
//! [`PreparedOp`] builds the request (method, path, `${env:NAME}` headers); the request goes
//! on one plain HTTP/1.1 connection of its own ([`one_connection`]). Load probes are [`crate::load::run`]
//! with a plan of one operation. Bodies are read (at most [`MAX_BODY`] bytes) for the
//! tolerances only.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Uri;
use iohr_domain::faults::ProbeOutput;
use iohr_domain::faults::experiment::{HttpProbe, LoadProbe, Provider};
use iohr_domain::load::{HttpVersion, LatencySummary, LoadResult, Operation};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lifecycle::ProbeError;
use crate::frames::FrameSender;
use crate::http_client::one_connection;
use crate::load::client::Endpoint;
use crate::load::request::PreparedOp;
use crate::request::Trace;
use crate::run_context::{EnvVars, RunContext};

/// The most of a body a tolerance sees.
pub const MAX_BODY: usize = 64 * 1024;

/// Sends a run's probes.
#[derive(Debug, Clone)]
pub struct Prober {
    /// Where requests go (`http://HOST:PORT[/BASE]`): the proxy or the target.
    send_to: String,
    /// The run's target: a probe's `url` must name it.
    run_target: String,
    /// Requests sent so far, by every probe and burst: the run's units spent.
    sent: Arc<AtomicU64>,
    /// The run's id and its `trace_sample`: every probe's request carries its trace
    /// context ([`crate::request::Trace`]).
    run_id: String,
    trace_sample: f64,
}

impl Prober {
    pub fn new(send_to: &str, run_target: &str) -> Prober {
        Prober {
            send_to: send_to.trim_end_matches('/').to_string(),
            run_target: run_target.trim_end_matches('/').to_string(),
            sent: Arc::default(),
            run_id: String::new(),
            trace_sample: iohr_domain::trace::DEFAULT_SAMPLE,
        }
    }

    /// The run whose trace context the probes send.
    pub fn traced(mut self, run_id: &str, trace_sample: f64) -> Prober {
        self.run_id = run_id.to_string();
        self.trace_sample = trace_sample;
        self
    }

    /// The requests every probe and burst of this prober has sent.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Runs an HTTP or load provider, reading `${env:NAME}` values with `env`.
    pub async fn probe(
        &self,
        provider: &Provider,
        env: &EnvVars,
    ) -> Result<ProbeOutput, ProbeError> {
        match provider {
            Provider::Http(h) => self.http(h, env).await,
            Provider::Load(l) => self.load(l, env).await,
            Provider::Fault(_) => Err(ProbeError("a fault is not a probe".into())),
            // The run resolves every deferred provider before its lifecycle starts.
            Provider::Deferred(_) => Err(ProbeError(
                "a provider naming configuration or secrets was not resolved".into(),
            )),
        }
    }

    async fn http(&self, probe: &HttpProbe, env: &EnvVars) -> Result<ProbeOutput, ProbeError> {
        let fail = |m: String| ProbeError(m);
        let operation = Operation {
            name: None,
            method: probe.method.clone(),
            path: probe
                .location
                .path_on(&self.run_target)
                .map_err(ProbeError)?,
            headers: probe.headers.clone(),
            body: None,
            weight: 1,
        };
        let endpoint = Endpoint::new(&self.send_to, HttpVersion::Http1, None)
            .map_err(|e| fail(e.to_string()))?;
        let trace = Trace::new(&self.run_id, self.trace_sample);
        let request = PreparedOp::traced(&operation, &endpoint, &|r| env.resolve(r), Some(&trace))
            .map_err(|e| fail(e.to_string()))?
            .request();
        let (host, port) = host_port(&self.send_to)?;
        let started = Instant::now();
        let exchange = async {
            let mut sender = one_connection(&host, port)
                .await
                .map_err(|e| fail(e.to_string()))?;
            // Counted as it goes out: a request the target never answers was still sent.
            self.sent.fetch_add(1, Ordering::Relaxed);
            crate::metrics::requests_sent(1);
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| fail(format!("request: {e}")))?;
            let status = response.status().as_u16();
            let mut body = response.into_body();
            let mut kept = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| fail(format!("reading the body: {e}")))?;
                if let Some(data) = frame.data_ref() {
                    let room = MAX_BODY.saturating_sub(kept.len());
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Ok::<_, ProbeError>((status, kept))
        };
        let (status, body) = tokio::time::timeout(probe.timeout, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {} ms", probe.timeout.as_millis())))??;
        Ok(ProbeOutput::Http {
            status,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }

    async fn load(&self, probe: &LoadProbe, env: &EnvVars) -> Result<ProbeOutput, ProbeError> {
        let mut plan = probe.plan().map_err(|e| ProbeError(e.to_string()))?;
        plan.trace_sample = self.trace_sample;
        // The burst's per-second frames are not the faults run's: they go nowhere.
        let (frames, _) = FrameSender::channel();
        // Dropping this future (a cancelled run) stops the burst's tasks too.
        let cancel = CancellationToken::new();
        let _stop = cancel.clone().drop_guard();
        let ctx = RunContext::<()>::new(&self.send_to, frames)
            .with_run_id(self.run_id.clone())
            .with_cancel(cancel)
            .with_env(env.clone());
        let outcome = crate::load::run(plan, &ctx).await;
        self.sent.fetch_add(outcome.units_spent, Ordering::Relaxed);
        let result: LoadResult = serde_json::from_value(outcome.result).map_err(|_| {
            ProbeError(
                outcome
                    .reason
                    .unwrap_or_else(|| "the load burst gave no result".into()),
            )
        })?;
        Ok(ProbeOutput::Load {
            p99_ms: p99_ms(&result.latency),
            error_rate: result.error_rate,
            requests: result.counts.requests,
            histogram: Some(result.latency.histogram),
        })
    }
}

/// The p99 of the burst's corrected latency. A short burst has too few samples for the
/// result's interval, so the value is read from the histogram itself.
fn p99_ms(latency: &LatencySummary) -> Option<f64> {
    let histogram = iohr_domain::histogram::decode(&latency.histogram).ok()?;
    (!histogram.is_empty()).then(|| histogram.value_at_quantile(0.99) as f64 / 1000.0)
}

fn host_port(base: &str) -> Result<(String, u16), ProbeError> {
    let uri: Uri = base
        .parse()
        .map_err(|_| ProbeError(format!("{base} is not a URL")))?;
    if uri.scheme_str() != Some("http") {
        return Err(ProbeError(format!(
            "{base}: HTTP probes speak plain http (the fault proxy's side)"
        )));
    }
    let host = uri
        .host()
        .ok_or_else(|| ProbeError(format!("{base} has no host")))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, uri.port_u16().unwrap_or(80)))
}

/// How long a probe may take at most: its timeout, or a burst's duration plus its requests'.
pub fn probe_budget(provider: &Provider) -> Duration {
    match provider {
        Provider::Http(h) => h.timeout,
        Provider::Load(l) => l.duration + iohr_domain::load::DEFAULT_TIMEOUT,
        Provider::Fault(_) | Provider::Deferred(_) => Duration::ZERO,
    }
}

// The kinds' loopback HTTP server, compiled here too: its module is private to `kinds`,
// which this helper does not own (making it `pub(crate)` there would drop this copy).
#[cfg(test)]
#[allow(clippy::duplicate_mod)]
#[path = "../kinds/test_server.rs"]
mod test_server;

#[cfg(test)]
mod tests {
    use super::test_server;
    use super::*;
    use iohr_domain::faults::Activity;
    use serde_json::json;

    fn provider(v: serde_json::Value) -> Provider {
        Activity::from_json(
            "a",
            &json!({"type": "probe", "name": "p", "provider": v}),
            0,
        )
        .unwrap()
        .provider
    }

    fn no_env() -> EnvVars {
        EnvVars::from_fn(|_| None)
    }

    #[tokio::test]
    async fn an_http_probe_reads_status_latency_and_body_from_a_real_server() {
        let (base, mut seen) = test_server::start_server().await;
        let prober = Prober::new(&base, &base);
        let out = prober
            .probe(&provider(json!({"type": "http", "path": "/ok"})), &no_env())
            .await
            .unwrap();
        match &out {
            ProbeOutput::Http {
                status,
                latency_ms,
                body,
            } => {
                assert_eq!(*status, 200);
                assert!(*latency_ms > 0.0);
                assert_eq!(body, "hello, world");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            out.for_journal(),
            json!({"status": 200, "latency_ms": out.for_tolerance()["latency_ms"]})
        );
        let head = seen.recv().await.unwrap();
        assert!(head.starts_with("GET /ok HTTP/1.1"), "{head}");

        // A url on the run's target is its path; a url elsewhere is refused.
        let out = prober
            .probe(
                &provider(
                    json!({"type": "http", "url": format!("{base}/status/503"), "method": "POST",
                                 "headers": {"Authorization": "${env:PROBE_TOKEN}"}}),
                ),
                &EnvVars::from_fn(|name| {
                    (name == "PROBE_TOKEN").then(|| "Bearer s3cret".to_string())
                }),
            )
            .await
            .unwrap();
        assert!(matches!(out, ProbeOutput::Http { status: 503, .. }));
        let head = seen.recv().await.unwrap();
        assert!(head.starts_with("POST /status/503"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("authorization: bearer s3cret")
        );
        let elsewhere = prober
            .probe(
                &provider(json!({"type": "http", "url": "http://10.1.2.3:1/"})),
                &no_env(),
            )
            .await
            .unwrap_err();
        assert!(
            elsewhere.0.contains("not on the run's target"),
            "{elsewhere}"
        );
    }

    #[tokio::test]
    async fn an_http_probe_times_out_and_reports_a_closed_connection() {
        let (base, _seen) = test_server::start_server().await;
        let prober = Prober::new(&base, &base);
        let hang = prober
            .probe(
                &provider(json!({"type": "http", "path": "/hang", "timeout": 0.2})),
                &no_env(),
            )
            .await
            .unwrap_err();
        assert_eq!(hang.0, "no answer within 200 ms");
        let closed = prober
            .probe(
                &provider(json!({"type": "http", "path": "/close"})),
                &no_env(),
            )
            .await
            .unwrap_err();
        assert!(closed.0.starts_with("request:"), "{closed}");
        let missing = prober
            .probe(
                &provider(
                    json!({"type": "http", "path": "/ok", "headers": {"X-Api-Key": "${env:NOPE}"}}),
                ),
                &no_env(),
            )
            .await
            .unwrap_err();
        assert!(missing.0.contains("NOPE"), "{missing}");
    }

    #[tokio::test]
    async fn a_load_probe_gives_p99_and_error_rate() {
        let (base, _seen) = test_server::start_server().await;
        let prober = Prober::new(&base, &base);
        let ok = prober
            .probe(
                &provider(json!({"type": "iohr", "probe": "load", "rate": 50, "duration": "1s", "path": "/ok"})),
                &no_env(),
            )
            .await
            .unwrap();
        match ok {
            ProbeOutput::Load {
                p99_ms,
                error_rate,
                requests,
                histogram,
            } => {
                assert_eq!(requests, 50);
                let kept = iohr_domain::histogram::decode(&histogram.unwrap()).unwrap();
                assert_eq!(kept.len(), 50, "the burst's latencies are kept for compare");
                assert_eq!(error_rate, 0.0);
                let p99 = p99_ms.unwrap();
                assert!(p99 > 0.0 && p99 < 1000.0, "{p99}");
            }
            other => panic!("{other:?}"),
        }
        let failing = prober
            .probe(
                &provider(json!({"type": "iohr", "probe": "load", "rate": 20, "duration": "1s", "path": "/status/503"})),
                &no_env(),
            )
            .await
            .unwrap();
        assert!(matches!(failing, ProbeOutput::Load { error_rate, .. } if error_rate == 1.0));
    }

    #[tokio::test]
    async fn a_prober_counts_every_request_it_sent_answered_or_not() {
        let (base, _seen) = test_server::start_server().await;
        let prober = Prober::new(&base, &base);
        assert_eq!(prober.sent(), 0);
        prober
            .probe(&provider(json!({"type": "http", "path": "/ok"})), &no_env())
            .await
            .unwrap();
        // Sent and never answered: still sent.
        prober
            .probe(
                &provider(json!({"type": "http", "path": "/hang", "timeout": 0.2})),
                &no_env(),
            )
            .await
            .unwrap_err();
        assert_eq!(prober.sent(), 2);
        prober
            .probe(
                &provider(json!({"type": "iohr", "probe": "load", "rate": 20, "duration": "1s", "path": "/ok"})),
                &no_env(),
            )
            .await
            .unwrap();
        assert_eq!(prober.sent(), 22, "the burst's 20 as well");
        // Nothing reaches a closed port: nothing is sent.
        let nowhere = Prober::new("http://127.0.0.1:9", "http://127.0.0.1:9");
        nowhere
            .probe(&provider(json!({"type": "http", "path": "/"})), &no_env())
            .await
            .unwrap_err();
        assert_eq!(nowhere.sent(), 0);
        // A clone counts into the same total: the run reads what its driver's copy sent.
        let copy = prober.clone();
        copy.probe(&provider(json!({"type": "http", "path": "/ok"})), &no_env())
            .await
            .unwrap();
        assert_eq!(prober.sent(), 23);
    }
}

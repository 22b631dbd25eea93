//! The API client: `POST /v1/reliability/runs` and the listing used to check the outcome.

use std::time::Duration;

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The trivial run every scenario posts: one check against a closed port, which the
/// simulated agents never actually call.
pub const RUN_BODY: &str = r#"{"kind":"checks","environment":"staging","target":"http://127.0.0.1:9","spec":{"checks":[{"path":"/"}]}}"#;

/// One request's limit; far above any latency worth measuring.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What one `POST /runs` came to.
// Used by iohr-bench-soak only.
#[allow(dead_code)]
pub enum PostOutcome {
    Created(String),
    /// Not created: the connection was refused or the controller answered another status.
    Refused(String),
    /// Failed after the request may have been read: a run may exist that nobody knows of.
    Unknown(String),
}

#[derive(Clone)]
pub struct Api {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    auth: String,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Api {
            // HTTP/1.1 with a keep-alive pool: one connection per request in flight.
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector),
            base: base.trim_end_matches('/').to_string(),
            auth: format!("Bearer {token}"),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&'static str>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", &self.auth)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                body.unwrap_or_default().as_bytes(),
            )))?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(request))
            .await
            .context("request timed out")??;
        let status = response.status();
        let body = tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect())
            .await
            .context("response body timed out")??
            .to_bytes();
        Ok((status, body))
    }

    /// Posts the trivial run; returns its id.
    pub async fn create_run(&self) -> anyhow::Result<String> {
        let (status, body) = self
            .call(Method::POST, "/v1/reliability/runs", Some(RUN_BODY))
            .await?;
        if status != StatusCode::CREATED {
            bail!(
                "POST /runs: {status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
        }
        let run: serde_json::Value = serde_json::from_slice(&body)?;
        let id = run["id"].as_str().context("POST /runs: no id")?;
        Ok(id.to_string())
    }

    /// Posts the trivial run, telling a refusal (nothing was created) from an outcome
    /// not known (the request may have reached the controller before it failed).
    #[allow(dead_code)] // iohr-bench-soak
    pub async fn post_run(&self) -> PostOutcome {
        let result = self
            .call(Method::POST, "/v1/reliability/runs", Some(RUN_BODY))
            .await;
        match result {
            Ok((StatusCode::CREATED, body)) => {
                match serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|run| run["id"].as_str().map(str::to_string))
                {
                    Some(id) => PostOutcome::Created(id),
                    None => PostOutcome::Unknown("201 without an id".to_string()),
                }
            }
            Ok((status, _)) => PostOutcome::Refused(status.to_string()),
            Err(error) => {
                let refused = error
                    .downcast_ref::<hyper_util::client::legacy::Error>()
                    .is_some_and(hyper_util::client::legacy::Error::is_connect);
                if refused {
                    PostOutcome::Refused("connect failed".to_string())
                } else {
                    PostOutcome::Unknown(format!("{error:#}"))
                }
            }
        }
    }

    /// Every run of the account as (id, status), through the paged list (at most
    /// `max_pages` pages of 500).
    #[allow(dead_code)] // iohr-bench-soak
    pub async fn all_runs(&self, max_pages: usize) -> anyhow::Result<Vec<(String, String)>> {
        let mut runs = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..max_pages {
            let mut path = "/v1/reliability/runs?limit=500".to_string();
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let (code, body) = self.call(Method::GET, &path, None).await?;
            if code != StatusCode::OK {
                bail!("GET /runs: {code}: {}", String::from_utf8_lossy(&body));
            }
            let page: serde_json::Value = serde_json::from_slice(&body)?;
            for run in page["runs"].as_array().into_iter().flatten() {
                if let (Some(id), Some(status)) = (run["id"].as_str(), run["status"].as_str()) {
                    runs.push((id.to_string(), status.to_string()));
                }
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(runs),
            }
        }
        bail!("more than {max_pages} pages of runs")
    }

    /// A run's frames as its live stream replays them: (`id:`, `event:`) of each event,
    /// in the order received. The stream closes after `finished`; a run's that does not
    /// within `limit` is an error.
    #[allow(dead_code)] // iohr-bench-soak
    pub async fn frames(
        &self,
        run_id: &str,
        limit: Duration,
    ) -> anyhow::Result<Vec<(u64, String)>> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}/v1/reliability/runs/{run_id}/events", self.base))
            .header("authorization", &self.auth)
            .body(Full::new(Bytes::new()))?;
        let body = tokio::time::timeout(limit, async {
            let response = self.client.request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        })
        .await
        .context("the run's event stream did not close in time")??;
        let (status, body) = body;
        if status != StatusCode::OK {
            bail!("GET /runs/{run_id}/events: {status}");
        }
        let text = String::from_utf8_lossy(&body);
        let mut events = Vec::new();
        let mut id: Option<u64> = None;
        let mut event: Option<String> = None;
        for line in text.lines() {
            if line.is_empty() {
                if let (Some(i), Some(e)) = (id.take(), event.take()) {
                    events.push((i, e));
                }
                id = None;
                event = None;
            } else if let Some(rest) = line.strip_prefix("id:") {
                id = rest.trim().parse().ok();
            } else if let Some(rest) = line.strip_prefix("event:") {
                event = Some(rest.trim().to_string());
            }
        }
        if let (Some(i), Some(e)) = (id, event) {
            events.push((i, e));
        }
        Ok(events)
    }

    /// How many of the account's runs have this status, counted through the paged list
    /// (at most `max_pages` pages of 500).
    pub async fn count_runs(&self, status: &str, max_pages: usize) -> anyhow::Result<usize> {
        let mut count = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..max_pages {
            let mut path = format!("/v1/reliability/runs?status={status}&limit=500");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let (code, body) = self.call(Method::GET, &path, None).await?;
            if code != StatusCode::OK {
                bail!("GET /runs: {code}: {}", String::from_utf8_lossy(&body));
            }
            let page: serde_json::Value = serde_json::from_slice(&body)?;
            count += page["runs"].as_array().map_or(0, Vec::len);
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(count),
            }
        }
        bail!("more than {max_pages} pages of {status} runs")
    }
}

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

//! A small client of the controller's REST API and its SSE stream, for tests.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::{Method, Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use iohr_cli::sse::{SseEvent, SseParser};
use serde_json::Value;
use tokio_rustls::rustls;

use crate::wait_for;

#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// For an `https://` base: each request on a new TLS connection.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        Api {
            base: base.trim_end_matches('/').to_string(),
            token: Some(token.to_string()),
            client: Client::builder(TokioExecutor::new()).build(HttpConnector::new()),
            tls: None,
        }
    }

    /// A client of an `https://` API whose certificate chains to `ca`, over HTTP/1.1.
    pub fn with_ca(base: &str, token: &str, ca: &Path) -> Api {
        Api {
            tls: Some(crate::tls::client_config(ca, &[b"http/1.1"])),
            ..Api::new(base, token)
        }
    }

    pub fn with_token(&self, token: Option<&str>) -> Api {
        Api {
            token: token.map(str::to_string),
            ..self.clone()
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(Bytes, &str)>,
        headers: &[(&str, &str)],
    ) -> Response<Incoming> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let body = match body {
            Some((bytes, content_type)) => {
                builder = builder.header("content-type", content_type);
                bytes
            }
            None => Bytes::new(),
        };
        let request = builder.body(Full::new(body)).expect("request");
        let answer = async {
            match &self.tls {
                Some(config) => crate::tls::send(config, request)
                    .await
                    .map(|(response, _)| response),
                None => self.client.request(request).await.map_err(Into::into),
            }
        };
        tokio::time::timeout(Duration::from_secs(30), answer)
            .await
            .expect("API answered within 30 s")
            .expect("API request")
    }

    /// Any request; the answer's status and JSON body (`Null` when empty or not JSON).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<(Bytes, &str)>,
    ) -> (u16, Value) {
        let response = self.send(method, path, body, &[]).await;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// `POST` a JSON body; the answer's status, headers and JSON body.
    pub async fn post_with_headers(
        &self,
        path: &str,
        body: &Value,
    ) -> (u16, hyper::HeaderMap, Value) {
        let body = Some((Bytes::from(body.to_string()), "application/json"));
        let response = self.send(Method::POST, path, body, &[]).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, json_of(response).await)
    }

    /// `POST` raw bytes with extra headers (a forge's delivery): status and JSON body.
    pub async fn post_raw(
        &self,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let body = Some((Bytes::copy_from_slice(body), "application/json"));
        let response = self.send(Method::POST, path, body, headers).await;
        let status = response.status().as_u16();
        (status, json_of(response).await)
    }

    /// `GET` that also returns the answer's headers; the body is read only when the
    /// status is not 200 (a 200 may be a stream that does not end).
    pub async fn get_head(&self, path: &str) -> (u16, hyper::HeaderMap, Value) {
        let response = self.send(Method::GET, path, None, &[]).await;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if status == 200 {
            return (status, headers, Value::Null);
        }
        (status, headers, json_of(response).await)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call(
            Method::POST,
            path,
            Some((Bytes::from(body.to_string()), "application/json")),
        )
        .await
    }

    /// `POST /v1/reliability/runs`, expecting 201.
    pub async fn create_run(&self, body: &Value) -> Value {
        let (status, record) = self.post("/v1/reliability/runs", body).await;
        assert_eq!(status, 201, "creating a run: {record}");
        record
    }

    pub async fn run(&self, id: &str) -> Value {
        let (status, record) = self.get(&format!("/v1/reliability/runs/{id}")).await;
        assert_eq!(status, 200, "reading run {id}: {record}");
        record
    }

    /// Polls the run until its status is one of `statuses`.
    pub async fn wait_status(&self, id: &str, statuses: &[&str], limit: Duration) -> Value {
        wait_for(&format!("run {id} to be {statuses:?}"), limit, || async {
            let record = self.run(id).await;
            statuses
                .contains(&record["status"].as_str().unwrap_or_default())
                .then_some(record)
        })
        .await
    }

    /// Starts a run of `body` and polls it until its status is one of `statuses`.
    pub async fn run_until(&self, body: &Value, statuses: &[&str], limit: Duration) -> Value {
        let run = self.create_run(body).await;
        let id = run["id"].as_str().expect("id").to_string();
        self.wait_status(&id, statuses, limit).await
    }

    /// Polls the run until it has ended, whichever way.
    pub async fn wait_ended(&self, id: &str, limit: Duration) -> Value {
        self.wait_status(id, &["passed", "failed", "error", "cancelled"], limit)
            .await
    }

    /// Polls until `agent` is online.
    pub async fn wait_online(&self, agent: &str, limit: Duration) {
        wait_for(&format!("agent {agent} online"), limit, || async {
            let (_, body) = self.get("/v1/reliability/agents").await;
            body["agents"]
                .as_array()?
                .iter()
                .any(|a| a["name"] == agent && a["online"] == true)
                .then_some(())
        })
        .await
    }

    /// Opens the run's event stream (after `last_event_id` when given).
    pub async fn events(&self, id: &str, last_event_id: Option<u64>) -> Sse {
        let last = last_event_id.map(|n| n.to_string());
        let headers: Vec<(&str, &str)> = last
            .as_deref()
            .map(|v| vec![("last-event-id", v)])
            .unwrap_or_default();
        let response = self
            .send(
                Method::GET,
                &format!("/v1/reliability/runs/{id}/events"),
                None,
                &headers,
            )
            .await;
        assert_eq!(response.status().as_u16(), 200, "events of {id}");
        Sse::from_body(response.into_body())
    }
}

impl Api {
    /// Opens the account's product-event feed, `GET /v1/reliability/events` (after
    /// `last_event_id` when given).
    pub async fn feed(&self, last_event_id: Option<i64>) -> Sse {
        let last = last_event_id.map(|n| n.to_string());
        let headers: Vec<(&str, &str)> = last
            .as_deref()
            .map(|v| vec![("last-event-id", v)])
            .unwrap_or_default();
        let response = self
            .send(Method::GET, "/v1/reliability/events", None, &headers)
            .await;
        assert_eq!(response.status().as_u16(), 200, "the event feed");
        Sse::from_body(response.into_body())
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Option<u64>,
    pub event: String,
    pub data: Value,
}

/// A run's event stream, read with the CLI's parser (a chunk may end anywhere, even
/// inside a character).
pub struct Sse<B = Incoming> {
    body: B,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
}

impl<B> Sse<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Debug,
{
    pub fn from_body(body: B) -> Sse<B> {
        Sse {
            body,
            parser: SseParser::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next event, or `None` when the stream ends. Keep-alive comments do not count:
    /// `limit` bounds the wait for a real event.
    pub async fn next(&mut self, limit: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Event {
                    id: event.id.and_then(|id| id.trim().parse().ok()),
                    event: event.event,
                    data: serde_json::from_str(&event.data).unwrap_or(Value::Null),
                });
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("an event within the time limit");
            match frame {
                None => {
                    self.ready.extend(self.parser.finish());
                    if self.ready.is_empty() {
                        return None;
                    }
                }
                Some(frame) => {
                    if let Ok(bytes) = frame.expect("SSE body").into_data() {
                        let events = self.parser.push(&bytes).expect("SSE lines");
                        self.ready.extend(events);
                    }
                }
            }
        }
    }

    /// Every event until the stream closes, within `limit` overall.
    pub async fn collect(mut self, limit: Duration) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut events = Vec::new();
        while let Some(event) = self
            .next(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await
        {
            events.push(event);
        }
        events
    }
}

/// An answer's body as JSON (`Null` when empty or not JSON).
async fn json_of(response: Response<Incoming>) -> Value {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests;

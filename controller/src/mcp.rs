//! The MCP tools ([`iohr_mcp`]) on the API port at `/mcp`, streamable HTTP.
//!
//! The tools are a REST client; here their REST is this controller's own router, called
//! in process with the caller's `Authorization` header, so a tool call has exactly REST's
//! authentication, scopes, validation and errors. In process rather than over a loopback
//! connection: a second connection would take another of the `--api-max-connections`
//! slots while the `/mcp` request holds one (at the bound the two would wait on each
//! other), and `https` with a certificate of the operator's would need a name and a CA
//! the controller cannot know it trusts.
//!
//! `/mcp` itself wants a live token (401 `unauthorized` as REST, before the MCP layer
//! reads the body); each tool's scope is then REST's. A request with an `Origin` (a
//! browser's) is refused 403 `origin_not_allowed` unless it is the API's own origin or one
//! of `serve --mcp-allowed-origin`, as the MCP specification asks (a page of another site,
//! or a name rebound to this address, may not drive the tools with a browser's token).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use iohr_mcp::{Method, Rest, RestError, RestFuture, StreamFuture, body_stream};
use serde_json::Value;
use tower::ServiceExt;

use crate::Shared;
use crate::auth::{Authenticated, authorize};
use crate::error::ApiError;

/// The largest REST answer a tool reads (a list page of 500 runs is far smaller).
const MAX_ANSWER: usize = 64 << 20;

/// `rest` with the MCP endpoint mounted beside its routes; `origins` are the browser
/// origins allowed besides the API's own (`scheme://host[:port]`).
pub fn mount(rest: Router, shared: Shared, origins: Vec<String>) -> Router {
    let tools = iohr_mcp::http_service(
        Arc::new(InProcess(rest.clone())),
        shared.shutdown.child_token(),
    );
    let origins: Arc<[String]> = origins.iter().map(|o| normal_origin(o)).collect();
    let guarded = tower::ServiceBuilder::new()
        .layer(axum::middleware::from_fn_with_state(
            (shared, origins),
            guard,
        ))
        .service(tools);
    rest.nest_service("/mcp", guarded)
}

async fn guard(
    State((shared, origins)): State<(Shared, Arc<[String]>)>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if let Err(error) =
        authorize::<Authenticated>(&shared, request.headers().get(AUTHORIZATION)).await
    {
        return error.into_response();
    }
    if let Some(origin) = origin_refused(&request, &origins) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!(
                "Origin {origin} is neither this API's nor one its operator allows (serve --mcp-allowed-origin)"
            ),
        )
        .into_response();
    }
    next.run(request).await
}

/// Lower case, without a trailing `/`.
fn normal_origin(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// The request's `Origin` when it is refused: neither the API's own (its authority that
/// of the request's `Host`, or `:authority` on HTTP/2) nor an allowed one. A request
/// without `Origin` (not a browser's) is not refused here.
fn origin_refused(request: &Request<Body>, allowed: &[String]) -> Option<String> {
    let origin = request.headers().get(ORIGIN)?;
    let text = normal_origin(origin.to_str().unwrap_or("?"));
    if allowed.contains(&text) {
        return None;
    }
    let host = request
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()))
        .map(|h| h.to_ascii_lowercase());
    let authority = text.split_once("://").map(|(_, rest)| rest);
    match (authority, host) {
        (Some(authority), Some(host)) if authority == host => None,
        _ => Some(text),
    }
}

struct InProcess(Router);

impl InProcess {
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        accept: &'static str,
        authorization: Option<&str>,
    ) -> Result<Response, RestError> {
        let body = match body {
            Some(value) => Body::from(
                serde_json::to_vec(value)
                    .map_err(|e| RestError::new("invalid_input", e.to_string()))?,
            ),
            None => Body::empty(),
        };
        let mut request = Request::builder()
            .method(match method {
                Method::Get => axum::http::Method::GET,
                Method::Post => axum::http::Method::POST,
            })
            .uri(path)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept);
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request
            .body(body)
            .map_err(|e| RestError::new("invalid_input", format!("{path}: {e}")))?;
        match self.0.clone().oneshot(request).await {
            Ok(response) => Ok(response),
            Err(never) => match never {},
        }
    }
}

/// The API's error out of a failed answer.
async fn api_error(path: &str, response: Response) -> RestError {
    let status = response.status();
    let value = match axum::body::to_bytes(response.into_body(), MAX_ANSWER).await {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    let code = value.pointer("/error/code").and_then(Value::as_str);
    let message = value.pointer("/error/message").and_then(Value::as_str);
    RestError::new(
        code.unwrap_or("internal"),
        message.map_or_else(|| format!("{path}: {status}"), str::to_string),
    )
}

impl Rest for InProcess {
    fn events<'a>(&'a self, path: &'a str, authorization: Option<&'a str>) -> StreamFuture<'a> {
        Box::pin(async move {
            let response = self
                .send(Method::Get, path, None, "text/event-stream", authorization)
                .await?;
            if !response.status().is_success() {
                return Err(api_error(path, response).await);
            }
            Ok(body_stream(response.into_body(), "internal"))
        })
    }

    fn call<'a>(
        &'a self,
        method: Method,
        path: &'a str,
        body: Option<&'a Value>,
        authorization: Option<&'a str>,
    ) -> RestFuture<'a> {
        Box::pin(async move {
            let response = self
                .send(method, path, body, "application/json", authorization)
                .await?;
            if !response.status().is_success() {
                return Err(api_error(path, response).await);
            }
            let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER)
                .await
                .map_err(|e| {
                    RestError::new("internal", format!("{path}: reading the answer: {e}"))
                })?;
            serde_json::from_slice(&bytes).map_err(|e| {
                RestError::new("internal", format!("{path}: the answer is not JSON: {e}"))
            })
        })
    }
}

#[cfg(test)]
mod origin_tests {
    use super::*;

    fn request(origin: Option<&str>, host: &str) -> Request<Body> {
        let mut builder = Request::post("/mcp").header(HOST, host);
        if let Some(origin) = origin {
            builder = builder.header(ORIGIN, origin);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn same_origin_or_an_allowed_one_only() {
        let allowed = vec![normal_origin("https://Console.example.com/")];
        let host = "127.0.0.1:8480";
        assert_eq!(origin_refused(&request(None, host), &allowed), None);
        assert_eq!(
            origin_refused(&request(Some("http://127.0.0.1:8480"), host), &allowed),
            None
        );
        assert_eq!(
            origin_refused(
                &request(Some("https://console.example.com"), host),
                &allowed
            ),
            None
        );
        for refused in [
            "http://evil.example",
            "http://127.0.0.1:8481",
            "null",
            "http://127.0.0.1",
        ] {
            assert!(
                origin_refused(&request(Some(refused), host), &allowed).is_some(),
                "{refused}"
            );
        }
    }
}

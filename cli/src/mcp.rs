//! `iohr mcp`: the MCP tools ([`iohr_mcp`]) over stdio, for clients that launch a local
//! process. Each tool call is a REST call of this CLI's client, with its `--server` and
//! token: the same scopes as the CLI's commands.

use std::sync::Arc;

use iohr_mcp::{Method, Rest, RestError, RestFuture, StreamFuture, body_stream};
use serde_json::Value;

use crate::client::Api;
use crate::error::{Failure, Result};

struct Cli(Api);

impl Rest for Cli {
    fn events<'a>(&'a self, path: &'a str, _authorization: Option<&'a str>) -> StreamFuture<'a> {
        Box::pin(async move {
            let response = self
                .0
                .open_stream(path, None)
                .await
                .map_err(|failure| RestError::new(failure.code, failure.message))?;
            Ok(body_stream(response.into_body(), "transport"))
        })
    }

    fn call<'a>(
        &'a self,
        method: Method,
        path: &'a str,
        body: Option<&'a Value>,
        // Over stdio there is no caller's header: the CLI's own token is the caller.
        _authorization: Option<&'a str>,
    ) -> RestFuture<'a> {
        Box::pin(async move {
            let answer = match (method, body) {
                (Method::Get, _) => self.0.get(path).await,
                (Method::Post, Some(body)) => self.0.post(path, body).await,
                (Method::Post, None) => self.0.post(path, &serde_json::json!({})).await,
            };
            answer.map_err(|failure| RestError::new(failure.code, failure.message))
        })
    }
}

/// Serves until the client closes stdin; stdout carries the protocol only (notes go to
/// stderr).
pub async fn execute(api: Api) -> Result<u8> {
    iohr_mcp::serve_stdio(Arc::new(Cli(api)))
        .await
        .map_err(|e| Failure::transport(e.to_string()))?;
    Ok(0)
}

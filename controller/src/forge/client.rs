//! One call to a forge's REST API, over the webhook deliveries' client (its connector
//! judges every address by the egress policy at connection, `outbox/connector.rs`): JSON
//! in, a bounded body out, and what a failure says about waiting (`retry-after`, or
//! `x-ratelimit-reset` when `x-ratelimit-remaining` is 0). No body is logged or kept.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request};

use crate::outbox::deliveries::{FailureClass, HttpsClient, error_chain};

/// The largest answer read: a page of 100 comments of 65,535 characters each fits.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// The longest wait a forge's rate limit may ask for before the schedule's next attempt.
const MAX_FORGE_WAIT: Duration = Duration::from_secs(3600);

/// A forge's answer with a 2xx status.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
    /// The `page` of the `Link` header's `rel="next"` (or GitLab's `x-next-page`).
    pub next_page: Option<u32>,
}

impl Answer {
    pub fn json(&self) -> Result<serde_json::Value, CallError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| CallError::BadAnswer(format!("not JSON: {e}")))
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not connected, refused by the egress policy, timed out, TLS: the class is what a
    /// tenant reads; the detail goes to the controller's log only.
    #[error("{}: {detail}", class.as_str())]
    Transport { class: FailureClass, detail: String },
    /// The forge answered a status other than 2xx.
    #[error("the forge answered {code}")]
    Status {
        code: u16,
        /// How long the forge asked to wait, if it did.
        wait: Option<Duration>,
    },
    /// The answer was not what its API describes (or over the bound).
    #[error("unexpected answer: {0}")]
    BadAnswer(String),
}

impl CallError {
    /// The class the report log shows.
    pub fn class(&self) -> &'static str {
        match self {
            CallError::Transport { class, .. } => class.as_str(),
            CallError::Status { .. } => FailureClass::HttpStatus.as_str(),
            CallError::BadAnswer(_) => "bad_answer",
        }
    }

    pub fn status_code(&self) -> Option<u16> {
        match self {
            CallError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn wait(&self) -> Option<Duration> {
        match self {
            CallError::Status { wait, .. } => *wait,
            _ => None,
        }
    }
}

/// A call's method, URL, headers and JSON body.
pub struct Call<'a> {
    pub method: Method,
    pub url: String,
    pub headers: &'a [(&'static str, String)],
    pub body: Option<serde_json::Value>,
}

/// A forge's API as one account reaches it: the client (with the account's egress
/// exceptions), the stored base URL, the forge's headers (its token among them).
pub struct Endpoint<'a> {
    pub client: &'a HttpsClient,
    pub api_url: &'a str,
    pub headers: Vec<(&'static str, String)>,
    pub timeout: Duration,
}

impl Endpoint<'_> {
    /// `method` on the base URL's `path`, with the forge's headers.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<Answer, CallError> {
        let call = Call {
            method,
            url: format!("{}{path}", self.api_url),
            headers: &self.headers,
            body,
        };
        send(self.client, call, self.timeout).await
    }
}

/// What a report writes on the forge: the change, the head commit, what is said, and
/// the change's comment when its id is known.
pub struct Outgoing<'a> {
    pub change: &'a super::Change,
    pub change_ref: &'a str,
    pub commit: Option<&'a str>,
    pub report: &'a super::report::Report,
    pub target_url: Option<&'a str>,
    pub comment_id: Option<&'a str>,
}

/// The `User-Agent` of every call.
pub const USER_AGENT: &str = concat!("iohr-controller/", env!("CARGO_PKG_VERSION"));

/// Sends `call` within `timeout`.
pub async fn send(
    client: &HttpsClient,
    call: Call<'_>,
    timeout: Duration,
) -> Result<Answer, CallError> {
    let internal = |detail: String| CallError::Transport {
        class: FailureClass::Internal,
        detail,
    };
    let mut request = Request::builder().method(call.method).uri(&call.url);
    for (name, value) in call.headers {
        request = request.header(*name, value);
    }
    let body = match &call.body {
        Some(body) => {
            request = request.header("content-type", "application/json");
            Bytes::from(body.to_string())
        }
        None => Bytes::new(),
    };
    let request = request
        .body(Full::new(body))
        .map_err(|e| internal(e.to_string()))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| CallError::Transport {
                class: FailureClass::of(&e),
                detail: error_chain(&e),
            })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        if !(200..300).contains(&status) {
            // The answer's body is not read: nothing of it is kept.
            return Err(CallError::Status {
                code: status,
                wait: wait_asked(&headers, crate::store::now_ms() / 1000),
            });
        }
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| CallError::BadAnswer(format!("reading the answer: {e}")))?
            .to_bytes();
        Ok(Answer {
            status,
            body,
            next_page: next_page(&headers),
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(answer) => answer,
        Err(_) => Err(CallError::Transport {
            class: FailureClass::Timeout,
            detail: format!("no answer within {timeout:?}"),
        }),
    }
}

/// How long a refusal asks to wait: `retry-after` seconds, else the time until
/// `x-ratelimit-reset` (epoch seconds) when `x-ratelimit-remaining` is 0; capped.
pub fn wait_asked(headers: &hyper::HeaderMap, now_s: i64) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let wait = if let Some(seconds) = number("retry-after") {
        seconds
    } else if number("x-ratelimit-remaining") == Some(0) {
        number("x-ratelimit-reset")? - now_s
    } else {
        return None;
    };
    let wait = Duration::from_secs(u64::try_from(wait.max(0)).unwrap_or(0));
    Some(wait.min(MAX_FORGE_WAIT))
}

/// The next page's number from `Link: <...page=N...>; rel="next"` or `x-next-page`. Only
/// the number is taken: the next request is built on the configured base URL, so a link
/// naming another host never receives the token.
pub fn next_page(headers: &hyper::HeaderMap) -> Option<u32> {
    for link in headers.get_all("link") {
        let Ok(link) = link.to_str() else { continue };
        for part in link.split(',') {
            let Some((target, params)) = part.split_once(';') else {
                continue;
            };
            if !params.split(';').any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            }) {
                continue;
            }
            let target = target.trim().trim_start_matches('<').trim_end_matches('>');
            let query = target.split_once('?').map(|(_, q)| q).unwrap_or("");
            for (name, value) in form_urlencoded::parse(query.as_bytes()) {
                if name == "page" {
                    return value.parse().ok();
                }
            }
        }
    }
    headers
        .get("x-next-page")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> hyper::HeaderMap {
        let mut map = hyper::HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_next_page_is_read_from_link_or_gitlabs_header() {
        let link = r#"<https://api.github.com/repositories/1/issues/1/comments?per_page=100&page=3>; rel="next", <https://api.github.com/repositories/1/issues/1/comments?per_page=100&page=9>; rel="last""#;
        assert_eq!(next_page(&headers(&[("link", link)])), Some(3));
        let last = r#"<https://x/y?page=1>; rel="prev", <https://x/y?page=1>; rel="first""#;
        assert_eq!(next_page(&headers(&[("link", last)])), None);
        assert_eq!(next_page(&headers(&[("x-next-page", "4")])), Some(4));
        assert_eq!(next_page(&headers(&[("x-next-page", "")])), None);
    }

    #[test]
    fn waits_follow_retry_after_then_the_rate_limit_reset() {
        assert_eq!(
            wait_asked(&headers(&[("retry-after", "30")]), 0),
            Some(Duration::from_secs(30))
        );
        let limited = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1090"),
        ]);
        assert_eq!(wait_asked(&limited, 1000), Some(Duration::from_secs(90)));
        let left = headers(&[
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "1090"),
        ]);
        assert_eq!(wait_asked(&left, 1000), None);
        assert_eq!(
            wait_asked(&headers(&[("retry-after", "999999")]), 0),
            Some(MAX_FORGE_WAIT)
        );
    }
}

//! Every API error is `{"error": {"code", "message"}}` with a precise status; the code is
//! for machines, the message says what to fix.
//!
//! Below the surfaces: the REST handlers and the console (whose refusal pages carry the
//! same status and code) both answer with it, so neither imports the other for it
//! (`crate::api::error` re-exports this module).

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;

use iohr_domain::compare::Refusal;

use crate::queue::Refused;
use crate::resources::ReadError;
use crate::resources::scenarios::CreateError;
use crate::resources::schedules::ScheduleError;
use crate::runs::StartError;
use crate::runs::cancel::CancelError;
use crate::runs::compare::CompareError;
use crate::runs::confirm::ConfirmError;
use crate::store::StoreError;

/// The largest request body accepted (a spec with many checks fits easily).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// How long a client told `too_many_queued` waits before trying again: queued runs start
/// as running ones end, seconds to an hour later; half a minute keeps retries cheap.
pub const QUEUED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// 429 `too_many_queued`: the account has as many queued runs as its plan allows.
pub fn too_many_queued(limit: i64) -> ApiError {
    ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_queued",
        format!(
            "this account has {limit} queued runs, its plan's limit; retry once some have started (a plan can raise it: iohr-controller account set-plan --max-queued)"
        ),
    )
    .retry_after(QUEUED_RETRY_AFTER)
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Sent as `Retry-After` (seconds) with a 429 or 503: when trying again makes sense.
    pub retry_after: Option<std::time::Duration>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    /// A bound was reached: 429 with `Retry-After`.
    pub fn too_many(
        code: &'static str,
        message: impl Into<String>,
        retry_after: std::time::Duration,
    ) -> ApiError {
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message).retry_after(retry_after)
    }
    pub fn retry_after(mut self, after: std::time::Duration) -> ApiError {
        self.retry_after = Some(after);
        self
    }
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(after) = self.retry_after {
            // Whole seconds, at least one: `Retry-After: 0` would invite a busy loop.
            let seconds = after.as_secs().max(1);
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::NotFound(what) => ApiError::not_found(&what),
            StoreError::Conflict(message) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message)
            }
            StoreError::TooManyQueued { limit } => too_many_queued(limit),
            other => {
                tracing::error!(error = %other, "store error behind an API call");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the store failed; retry later",
                )
            }
        }
    }
}

/// Seconds a refused comparison is told to wait: one comparison takes well under one.
const COMPARES_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl From<CompareError> for ApiError {
    fn from(error: CompareError) -> ApiError {
        let message = error.to_string();
        match error {
            CompareError::NoiseFloor => ApiError::bad_request("invalid_query", message),
            CompareError::Busy(full) => {
                ApiError::too_many(full.code(), message, COMPARES_RETRY_AFTER)
            }
            CompareError::Store(error) => error.into(),
            CompareError::NoBaseline(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "no_baseline", message)
            }
            CompareError::Failed(error) => {
                tracing::error!(%error, "a comparison failed");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "compare_failed",
                    "the comparison failed; this is a bug, please report it",
                )
            }
            CompareError::Refused(refusal) => {
                let code = match refusal {
                    Refusal::Different { .. } | Refusal::Kind(_) => "not_comparable",
                    Refusal::NotFinished { .. } => "not_finished",
                    Refusal::GeneratorSaturated { .. } => "generator_saturated",
                };
                ApiError::new(StatusCode::CONFLICT, code, message)
            }
        }
    }
}

impl From<CancelError> for ApiError {
    fn from(error: CancelError) -> ApiError {
        let message = error.to_string();
        match error {
            CancelError::AlreadyFinished { .. } => {
                ApiError::new(StatusCode::CONFLICT, "already_finished", message)
            }
            CancelError::ShuttingDown => ApiError::from(Refused::Stopped),
            CancelError::Store(error) => error.into(),
            CancelError::Dispatcher(refused) => refused.into(),
        }
    }
}

impl From<ConfirmError> for ApiError {
    fn from(error: ConfirmError) -> ApiError {
        let message = error.to_string();
        let code = match error {
            ConfirmError::NotAwaiting { .. } => "not_awaiting_confirmation",
            ConfirmError::HashMismatch { .. } => "hash_mismatch",
            ConfirmError::Lapsed { .. } => "confirmation_lapsed",
            ConfirmError::Store(error) => return error.into(),
            ConfirmError::Dispatcher(refused) => return refused.into(),
        };
        ApiError::new(StatusCode::CONFLICT, code, message)
    }
}

impl From<CreateError> for ApiError {
    fn from(error: CreateError) -> ApiError {
        match error {
            CreateError::InvalidName => ApiError::bad_request("invalid_name", error.to_string()),
            CreateError::Refused(error) => error.into(),
            CreateError::Store(error) => error.into(),
        }
    }
}

/// The layer's refusal as the API says it: the same code, 400 or 422 as the refusal is
/// about the request or what it names, 429 for a full queue.
impl From<StartError> for ApiError {
    fn from(error: StartError) -> ApiError {
        match error {
            StartError::Refused { refusal, message } => {
                let status = if refusal.unprocessable() {
                    StatusCode::UNPROCESSABLE_ENTITY
                } else {
                    StatusCode::BAD_REQUEST
                };
                ApiError::new(status, refusal.code(), message)
            }
            StartError::TooManyQueued { limit } => too_many_queued(limit),
            StartError::Store(error) => error.into(),
            StartError::Dispatcher(refused) => refused.into(),
        }
    }
}

impl From<ScheduleError> for ApiError {
    fn from(error: ScheduleError) -> ApiError {
        let message = error.to_string();
        match error {
            ScheduleError::InvalidName => ApiError::bad_request("invalid_name", message),
            ScheduleError::InvalidCron(_) => ApiError::bad_request("invalid_cron", message),
            ScheduleError::TooFrequent(_) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "schedule_too_frequent",
                message,
            ),
            ScheduleError::TooMany => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "too_many_schedules",
                message,
            ),
            ScheduleError::Refused(error) => error.into(),
            ScheduleError::Store(error) => error.into(),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(error: ReadError) -> ApiError {
        match error {
            ReadError::Store(error) => error.into(),
            ReadError::Dispatcher(refused) => refused.into(),
        }
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> ApiError {
        match refused {
            Refused::Busy => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the controller's dispatcher has a full queue; retry shortly",
            )
            .retry_after(std::time::Duration::from_secs(1)),
            Refused::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "the controller is stopping",
            ),
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        let text = rejection.body_text();
        match rejection {
            JsonRejection::JsonSyntaxError(_) => ApiError::bad_request("malformed_json", text),
            JsonRejection::JsonDataError(_) => ApiError::bad_request("invalid_body", text),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with content-type: application/json",
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("bodies are limited to {} bytes", MAX_BODY_BYTES),
            ),
            other => ApiError::new(other.status(), "invalid_body", text),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::bad_request("invalid_query", rejection.body_text())
    }
}

/// An optional JSON body: none and `null` are its default, as the document says
/// (`oneOf: [BODY, null]`, not required); anything else is JSON and an object.
pub fn optional_body<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Ok(T::default());
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        let code = if e.is_data() {
            "invalid_body"
        } else {
            "malformed_json"
        };
        ApiError::bad_request(code, e.to_string())
    })?;
    if value.is_null() {
        return Ok(T::default());
    }
    from_body_value(value)
}

/// A request body as its type: a JSON object (serde would also take a struct from an
/// array, which no route documents), without a NUL character in any string (PostgreSQL
/// stores no NUL and SQLite would: refused alike on both stores, before anything is
/// stored).
fn from_body_value<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "invalid_body",
            "the body must be a JSON object",
        ));
    }
    if holds_nul(&value) {
        return Err(invalid_text("the body"));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("Failed to deserialize the JSON body into the target type: {e}"),
        )
    })
}

/// 400 `invalid_text`: a NUL character, which no id, name or filter takes.
pub fn invalid_text(place: &str) -> ApiError {
    ApiError::bad_request(
        "invalid_text",
        format!("{place} holds a NUL character, which no id, name, filter or spec takes"),
    )
}

/// Whether any string or key of a JSON value holds a NUL (serde_json bounds the depth).
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// `Json` whose rejections are API errors.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<Value>::from_request(req, state).await?;
        from_body_value(value).map(JsonBody)
    }
}
